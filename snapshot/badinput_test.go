package snapshot_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/snapshot"
)

// editRecords rewrites the records of shard file i of the bundle's snapshot with fn
// (records as JSON objects, in file order), and the manifest to match.
func (cb *corruptBundle) editRecords(t *testing.T, i int, fn func(recs []map[string]any) []map[string]any) {
	t.Helper()
	name := cb.m.Files[i].Name
	raw, err := os.ReadFile(cb.path(name))
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	require.NoError(t, err)
	dec := json.NewDecoder(zr)
	var recs []map[string]any
	for dec.More() {
		var r map[string]any
		require.NoError(t, dec.Decode(&r))
		recs = append(recs, r)
	}
	recs = fn(recs)
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	enc := json.NewEncoder(zw)
	jobs, wfs := 0, 0
	for _, r := range recs {
		require.NoError(t, enc.Encode(r))
		if nodes, ok := r["nodes"].([]any); ok {
			jobs += len(nodes)
			wfs++
		} else if _, ok := r["wf"]; ok {
			wfs++
		} else {
			jobs++
		}
	}
	require.NoError(t, zw.Close())
	require.NoError(t, os.WriteFile(cb.path(name), out.Bytes(), 0o644))
	cb.editManifest(t, func(m map[string]any) {
		cb.setFile(t, m, i)
		m["jobs"] = m["jobs"].(float64) - file(m, i)["jobs"].(float64) + float64(jobs)
		file(m, i)["jobs"] = jobs
		m["workflows"] = m["workflows"].(float64) - file(m, i)["workflows"].(float64) + float64(wfs)
		file(m, i)["workflows"] = wfs
	})
}

// exportOf exports src (one shard) into a fresh directory and returns the bundle, with an
// empty namespace to restore into.
func exportOf(t *testing.T, b redistest.Backend, src *shard.Store) *corruptBundle {
	t.Helper()
	ctx := context.Background()
	cb := &corruptBundle{src: src, dst: open(t, b, src.Client(), shard.Config{Shards: 1})}
	var root string
	cb.bk, root = dirBucket(t)
	var err error
	cb.m, err = snapshot.Export(ctx, src, cb.bk, snapshot.ExportOptions{})
	require.NoError(t, err)
	cb.dir = filepath.Join(root, filepath.FromSlash(cb.m.ID))
	cb.editManifest(t, func(m map[string]any) {
		if _, ok := m["workflows"]; !ok {
			m["workflows"] = 0.0
		}
		if _, ok := file(m, 0)["workflows"]; !ok {
			file(m, 0)["workflows"] = 0.0
		}
	})
	return cb
}

// byID sorts job records by id.
func byID(recs []map[string]any) {
	sort.Slice(recs, func(a, c int) bool {
		x, _ := recs[a]["id"].(string)
		y, _ := recs[c]["id"].(string)
		return x < y
	})
}

// A job record whose fields the restore cannot file (a run due time that is no number, a
// priority that is no digit, an unknown state, ...) is refused by Verify, naming the job
// and the field, before anything is written. Before the fix it passed Verify, and its
// restore_jobs call failed half-way: the jobs written before it in the call were left
// without their ready runs (and counts), and a resumed restore left them so, as existing.
func TestRestore_RefusesJobRecordsItCannotFile(t *testing.T) {
	t.Parallel()
	b := redistest.Backends(t)[0]
	rc := b.Client(t)
	for _, tc := range []struct {
		name, field, value, msg string
	}{
		{"RunListNotNumbers", "rl", ",abc,", `field "rl"`},
		{"PriorityNotADigit", "pr", "x", `field "pr"`},
		{"UnknownState", "st", "exploded", `field "st"`},
		{"RunFieldNotARun", "r1767366245123", "garbage", `field "r1767366245123"`},
		{"RunFieldNotADueTime", "rx", "ready|0|0||||", `field "rx"`},
		{"QueueNotAName", "q", "a b", `field "q"`},
		{"NextRunNotANumber", "nx", "soon", `field "nx"`},
		{"MaxAttemptsNotANumber", "ma", "many", `field "ma"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			src := open(t, b, rc, shard.Config{Shards: 1})
			_, err := src.Create(ctx, []*job.Job{
				{ID: "a-good", Type: "t", Schedule: job.Schedule{Now: true}},
				{ID: "b-bad", Type: "t", Schedule: job.Schedule{Now: true}},
			})
			require.NoError(t, err)
			cb := exportOf(t, b, src)
			cb.editRecords(t, 0, func(recs []map[string]any) []map[string]any {
				byID(recs)
				require.Equal(t, "b-bad", recs[1]["id"])
				recs[1]["f"].(map[string]any)[tc.field] = tc.value
				return recs
			})
			cb.refused(t, corrupt(t, "shard-0000.ndjson.gz", `job "b-bad"`, tc.msg))
		})
	}
}
