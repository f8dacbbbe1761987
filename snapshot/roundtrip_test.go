package snapshot_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/shard/shardtest"
	"github.com/tockhq/tock/snapshot"
)

// seed gives the store one job in each state a snapshot must carry, and pauses queue
// "q-paused". Jobs whose run is claimed have a queue of their own, so that a claim takes
// just that run.
func seed(t *testing.T, st *shard.Store) {
	t.Helper()
	ctx := context.Background()
	hour := time.Now().Add(time.Hour)
	one := 1
	seven := 7
	jobs := []*job.Job{
		{ID: "sched", Type: "t", Schedule: job.Schedule{At: hour}},
		{ID: "ready", Type: "t", Queue: "q-ready", Priority: &seven, Schedule: job.Schedule{Now: true}},
		{ID: "cron", Type: "t", Schedule: job.Schedule{Cron: "0 * * * *", TimeZone: "Europe/Paris"}},
		{ID: "paused", Type: "t", Schedule: job.Schedule{At: hour}},
		{ID: "paused-ready", Type: "t", Queue: "q-paused-ready", Schedule: job.Schedule{Now: true}},
		{ID: "cron-paused", Type: "t", Schedule: job.Schedule{Cron: "*/5 * * * *"}},
		{ID: "binary", Type: "t", Payload: []byte{0, 1, 2, 0xff, 0xfe, '\n', '"', 0}, Schedule: job.Schedule{At: hour.Add(time.Hour)}},
		{ID: "long", Type: "t", Payload: make([]byte, 3000), Schedule: job.Schedule{At: hour}},
		{ID: "cancelled", Type: "t", Schedule: job.Schedule{At: hour}},
		{ID: "inflight", Type: "t", Queue: "q-inflight", Schedule: job.Schedule{Now: true}},
		{ID: "retry", Type: "t", Queue: "q-retry", Schedule: job.Schedule{Now: true}},
		{ID: "dead", Type: "t", Queue: "q-dead", Retry: job.RetryPolicy{MaxAttempts: one}, Schedule: job.Schedule{Now: true}},
		{ID: "done", Type: "t", Queue: "q-done", Schedule: job.Schedule{Now: true}},
		{ID: "cancel-running", Type: "t", Queue: "q-cancel-running", Schedule: job.Schedule{Now: true}},
		{ID: "in-paused-queue", Type: "t", Queue: "q-paused", Schedule: job.Schedule{Now: true}},
	}
	res, err := st.Create(ctx, jobs)
	require.NoError(t, err)
	for _, r := range res {
		require.NoError(t, r.Err, r.ID)
	}
	for _, id := range []string{"paused", "paused-ready", "cron-paused"} {
		_, _, err := st.Pause(ctx, id)
		require.NoError(t, err)
	}
	_, _, err = st.Cancel(ctx, "cancelled")
	require.NoError(t, err)
	claim := func(id, queue string) shard.Claimed {
		c, err := st.Claim(ctx, st.ShardOf(id), queue, 1, "w1", "n1")
		require.NoError(t, err)
		require.Len(t, c, 1, id)
		return c[0]
	}
	claim("inflight", "q-inflight")
	finish := func(c shard.Claimed, o shard.Outcome) {
		errs, err := st.FinishRuns(ctx, c.Shard, []shard.Finish{{Member: c.Member, Token: c.Token, Outcome: o, Error: "boom"}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
	}
	finish(claim("retry", "q-retry"), shard.Failed)
	finish(claim("dead", "q-dead"), shard.Failed)
	finish(claim("done", "q-done"), shard.Succeeded)
	claim("cancel-running", "q-cancel-running")
	_, _, err = st.Cancel(ctx, "cancel-running")
	require.NoError(t, err)
	_, err = st.PauseQueue(ctx, "q-paused")
	require.NoError(t, err)
}

var seeded = []string{"sched", "ready", "cron", "paused", "paused-ready", "cron-paused", "binary", "long",
	"cancelled", "inflight", "retry", "dead", "done", "cancel-running", "in-paused-queue"}

// requireSameJobs checks that the restored store holds the source's jobs as they were,
// but for the changes a restore makes: a run in flight is ready again, and a run in
// flight of a cancelled job is gone.
func requireSameJobs(t *testing.T, src, dst *shard.Store) {
	t.Helper()
	ctx := context.Background()
	for _, id := range seeded {
		want, err := src.Get(ctx, id)
		require.NoError(t, err, id)
		got, err := dst.Get(ctx, id)
		require.NoError(t, err, id)
		switch id {
		case "inflight":
			require.Equal(t, job.StateRunning, want.State)
			want.State = job.StateReady
		case "cancel-running":
			require.Equal(t, 1, want.ActiveRuns)
			want.ActiveRuns = 0
		}
		// A restore carries each finished job's remaining time to live. On miniredis TTLs do
		// not run down with the clock, so the two reads differ by the wall time between
		// them, seconds on a loaded machine; a lost or reset expiry is hours off.
		require.WithinDuration(t, want.Expires, got.Expires, 10*time.Second, id)
		want.Expires, got.Expires = time.Time{}, time.Time{}
		want.Shard, got.Shard = 0, 0
		require.Equal(t, want, got, id)
		wantRuns, err := src.Runs(ctx, id)
		require.NoError(t, err)
		gotRuns, err := dst.Runs(ctx, id)
		require.NoError(t, err)
		require.Equal(t, wantRuns, gotRuns, id)
	}
	for _, id := range []string{"done", "cancelled"} {
		info, err := dst.Get(ctx, id)
		require.NoError(t, err)
		require.False(t, info.Expires.IsZero(), "%s must keep its expiry", id)
	}

	// Queue figures: in-flight runs are ready again (but the cancelled job's).
	wantQ, gotQ := queueFigures(t, src), queueFigures(t, dst)
	require.Equal(t, int64(1), wantQ["q-inflight"].InFlight)
	require.Equal(t, int64(1), wantQ["q-cancel-running"].InFlight)
	for name, w := range wantQ {
		g := gotQ[name]
		require.Equal(t, w.Scheduled, g.Scheduled, name)
		require.Equal(t, w.Dead, g.Dead, name)
		require.Equal(t, w.Paused, g.Paused, name)
		require.Zero(t, g.InFlight, name)
		if name == "q-inflight" {
			w.Ready++
		}
		require.Equal(t, w.Ready, g.Ready, name)
	}
	require.True(t, gotQ["q-paused"].Paused)
	require.Equal(t, int64(1), gotQ["q-retry"].Scheduled)
	require.Equal(t, int64(1), gotQ["q-dead"].Dead)

	wantDead, _, err := src.Dead(ctx, "", 100, "")
	require.NoError(t, err)
	gotDead, _, err := dst.Dead(ctx, "", 100, "")
	require.NoError(t, err)
	for i := range wantDead {
		wantDead[i].Shard = 0
	}
	for i := range gotDead {
		gotDead[i].Shard = 0
	}
	require.Equal(t, wantDead, gotDead)
	shardtest.CheckCounts(t, dst)

	// The run that was in flight is claimed again as the same attempt.
	c, err := dst.Claim(ctx, dst.ShardOf("inflight"), "q-inflight", 10, "w2", "n2")
	require.NoError(t, err)
	require.Len(t, c, 1)
	require.Equal(t, "inflight", c[0].JobID)
	require.Equal(t, 1, c[0].Attempt)
}

func TestExportRestore_RoundTrip(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := ctxT(t)
		rc := b.Client(t)
		src := open(t, b, rc, shard.Config{Shards: 8})
		seed(t, src)
		bk, _ := dirBucket(t)

		m, err := snapshot.Export(ctx, src, bk, snapshot.ExportOptions{Parallel: 3})
		require.NoError(t, err)
		require.Equal(t, int64(len(seeded)), m.Jobs)
		require.Len(t, m.Files, 8)
		require.Equal(t, []string{"q-paused"}, m.PausedQueues)
		require.Equal(t, src.Config().Namespace, m.Namespace)
		require.False(t, m.Finished.Before(m.Started))
		shardtest.CheckCounts(t, src)

		got, err := snapshot.ReadManifest(ctx, bk, m.ID)
		require.NoError(t, err)
		require.Equal(t, m, got)

		dst := open(t, b, rc, shard.Config{Shards: 8})
		res, err := snapshot.Restore(ctx, dst, bk, m.ID, snapshot.ReadOptions{})
		require.NoError(t, err)
		require.Equal(t, shard.RestoreCounts{Restored: len(seeded)}, res.RestoreCounts)
		require.False(t, res.Resumed)
		requireSameJobs(t, src, dst)

		// A second restore into the same namespace is refused: it holds jobs now.
		_, err = snapshot.Restore(ctx, dst, bk, m.ID, snapshot.ReadOptions{})
		require.ErrorIs(t, err, shard.ErrNotEmpty)
	})
}

func TestRestore_OtherShardCount(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := ctxT(t)
		rc := b.Client(t)
		src := open(t, b, rc, shard.Config{Shards: 8})
		seed(t, src)
		bk, _ := dirBucket(t)
		m, err := snapshot.Export(ctx, src, bk, snapshot.ExportOptions{})
		require.NoError(t, err)

		// Each job goes to the shard its id maps to among 5, in a namespace with
		// 10 s buckets.
		dst := open(t, b, rc, shard.Config{Shards: 5, BucketSize: 10 * time.Second})
		res, err := snapshot.Restore(ctx, dst, bk, m.ID, snapshot.ReadOptions{})
		require.NoError(t, err)
		require.Equal(t, len(seeded), res.Restored)
		requireSameJobs(t, src, dst)
	})
}

func TestExport_Empty(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	b := redistest.Backends(t)[0]
	rc := b.Client(t)
	src := open(t, b, rc, shard.Config{})
	bk, _ := dirBucket(t)
	m, err := snapshot.Export(ctx, src, bk, snapshot.ExportOptions{})
	require.NoError(t, err)
	require.Zero(t, m.Jobs)
	require.Empty(t, m.PausedQueues)
	dst := open(t, b, rc, shard.Config{})
	res, err := snapshot.Restore(ctx, dst, bk, m.ID, snapshot.ReadOptions{})
	require.NoError(t, err)
	require.Zero(t, res.Restored)
}
