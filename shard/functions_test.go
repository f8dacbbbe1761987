package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// On a Redis 7 server or Cluster the scripts run as functions of one library, loaded on
// every node when a Store opens; on miniredis, which has no functions, with EVALSHA. A
// call on a node that lost the library (restarted without persistence, flushed, new in
// the cluster) runs with EVALSHA, and the library is loaded again (at most once a second).
func TestScripts_RunAsFunctions(t *testing.T) {
	scripts, err := shard.LoadScripts()
	require.NoError(t, err)
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		require.Equal(t, b.Name != redistest.Miniredis, s.Functions())
		create := func(id string) {
			t.Helper()
			res, err := s.Create(ctx, []*job.Job{{ID: id, Type: "t", Schedule: job.Schedule{At: time.Now().Add(time.Hour)}}})
			require.NoError(t, err)
			require.NoError(t, res[0].Err)
			j, err := s.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, id, j.ID)
		}
		create("a")
		if b.Name == redistest.Miniredis {
			return
		}
		c := s.Client()
		libraries := func() int {
			n := 0
			for _, node := range c.Nodes() {
				names, err := node.Do(ctx, node.B().FunctionList().Libraryname(scripts.LibraryName).Build()).ToArray()
				if err == nil && len(names) == 1 {
					n++
				}
			}
			return n
		}
		require.Positive(t, libraries())
		if b.Name == redistest.Server {
			info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
			require.NoError(t, err)
			require.Contains(t, info, "cmdstat_fcall:")
		}

		// Every node loses the library (replicas follow their masters).
		for _, node := range c.Nodes() {
			node.Do(ctx, node.B().FunctionDelete().LibraryName(scripts.LibraryName).Build())
		}
		require.Zero(t, libraries())
		// Within a second of the last load, the call falls back to EVALSHA and runs.
		create("b")
		// Later the library is loaded again.
		time.Sleep(1100 * time.Millisecond)
		create("c")
		require.True(t, s.Functions())
		require.Positive(t, libraries())
	})
}
