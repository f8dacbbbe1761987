package ui_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/ui"
)

// heapInUse is the heap's live bytes after a collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// An open stream of a workflow's page keeps what its next update is a patch of: not the
// page's data nor its HTML (2.5 MB for 10,000 nodes, each tab that shows it), but a
// fingerprint of each node and of each fragment. Not parallel: it measures the heap.
func TestUI_LiveStreamMemory(t *testing.T) {
	tb := setupMini(t, nil, ui.Config{})
	ctx := context.Background()
	const nodes = 2000
	w := &job.Workflow{ID: "mem"}
	for i := range nodes {
		w.Jobs = append(w.Jobs, wfNode("node-with-a-longer-name-"+strconv.Itoa(i), ""))
	}
	_, err := tb.store.CreateWorkflow(ctx, w)
	require.NoError(t, err)

	const streams = 16
	var open []*ui.LiveStream
	for range 2 { // warm up: what a page's first loads keep whatever the streams (pools, caches)
		s, err := tb.ui.NewLiveStream("/ui/workflows/mem", "")
		require.NoError(t, err)
		_, err = s.Next(ctx)
		require.NoError(t, err)
	}
	before := heapInUse()
	for range streams {
		s, err := tb.ui.NewLiveStream("/ui/workflows/mem", "")
		require.NoError(t, err)
		u, err := s.Next(ctx) // a page of another version: the whole page is sent
		require.NoError(t, err)
		require.Greater(t, len(u), nodes*100)
		u, err = s.Next(ctx) // nothing changed
		require.NoError(t, err)
		require.Nil(t, u)
		open = append(open, s)
	}
	per := (int64(heapInUse()) - int64(before)) / streams
	runtime.KeepAlive(open)
	t.Logf("%d bytes kept per stream of a %d-node workflow's page", per, nodes)
	require.Less(t, per, int64(nodes*100), "a few words a node (1.2 MB before: the data and the table's HTML)")
}
