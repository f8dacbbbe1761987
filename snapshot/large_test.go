package snapshot_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/shard/shardtest"
	"github.com/tockhq/tock/snapshot"
	"github.com/tockhq/tock/worker"
)

// TestExportRestore_Large exports 20,000 jobs, wipes the namespace, restores it and runs
// a dispatcher and a worker: every job fires exactly once. Half the jobs are ready when
// exported, half scheduled a little later; nothing fires before the restore. It runs on
// the real redis-server only, to keep the package quick. 20,000 jobs on 16 shards are
// more than one restore flush per shard (restoreFlushJobs) and several SCAN batches; the
// 100,000 it had were as many again of the same, and took the worker under -race past
// the wait below on two busy cores.
func TestExportRestore_Large(t *testing.T) {
	const n = 20_000
	if testing.Short() {
		t.Skip("20,000 jobs: not in -short")
	}
	b := redistest.ServerBackend(t)
	ctx := ctxT(t)
	st := open(t, b, b.Client(t), shard.Config{Shards: 16})

	at := time.Now().Add(2 * time.Second)
	jobs := make([]*job.Job, 0, 5000)
	for i := 0; i < n; i += cap(jobs) {
		jobs = jobs[:0]
		for k := i; k < i+cap(jobs); k++ {
			j := &job.Job{ID: "j" + strconv.Itoa(k), Type: "t", Payload: []byte(strconv.Itoa(k))}
			if k%2 == 0 {
				j.Schedule.Now = true
			} else {
				j.Schedule.At = at
			}
			jobs = append(jobs, j)
		}
		res, err := st.Create(ctx, jobs)
		require.NoError(t, err)
		for _, r := range res {
			require.True(t, r.Created, r.ID)
		}
	}

	bk, _ := dirBucket(t)
	m, err := snapshot.Export(ctx, st, bk, snapshot.ExportOptions{})
	require.NoError(t, err)
	require.Equal(t, int64(n), m.Jobs)

	wipe(t, st)
	res, err := snapshot.Restore(ctx, st, bk, m.ID, snapshot.ReadOptions{})
	require.NoError(t, err)
	require.Equal(t, shard.RestoreCounts{Restored: n}, res.RestoreCounts)
	shardtest.CheckCounts(t, st)

	var mu sync.Mutex
	fired := map[string]int{}
	d, err := dispatcher.New(dispatcher.Config{Store: st, Name: "d"})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	w, err := worker.New(worker.Config{Store: st, Concurrency: 200, Prefetch: 200, Sweep: 200 * time.Millisecond,
		ObserveFunc: func(r worker.Result) {
			if r.Outcome == worker.OutcomeSucceeded && !r.Rejected {
				mu.Lock()
				fired[r.Run.ID]++
				mu.Unlock()
			}
		}})
	require.NoError(t, err)
	w.HandleFunc("t", func(_ context.Context, r *worker.Run) error {
		if string(r.Payload) != r.JobID[1:] {
			return fmt.Errorf("payload %q", r.Payload)
		}
		return nil
	})
	require.NoError(t, w.Start(ctx))
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(sctx))
		require.NoError(t, d.Stop(sctx))
	}()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(fired) == n
	}, 90*time.Second, 50*time.Millisecond, "every job fires")

	// Nothing is left to fire, and nothing fired twice.
	backlog, err := st.Backlog(ctx)
	require.NoError(t, err)
	require.Zero(t, backlog)
	for _, q := range queueFigures(t, st) {
		require.Zero(t, q.Scheduled+q.InFlight+q.Dead, q.Queue)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, c := range fired {
		require.Equal(t, 1, c, id)
	}
}
