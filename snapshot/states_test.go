package snapshot_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/shard/shardtest"
	"github.com/tockhq/tock/snapshot"
)

// Run states that need several steps to reach (a run in flight or waiting for a retry
// when its job is paused, a snoozed run, a requeued dead run, the runs of a recurring
// job) come back as restore_jobs documents, with queue counts that match the sets.
func TestExportRestore_MoreRunStates(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := ctxT(t)
		rc := b.Client(t)
		src := open(t, b, rc, shard.Config{Shards: 4})
		one := 1
		cron := job.Schedule{Cron: "0 0 1 1 *"}
		now := job.Schedule{Now: true}
		jobs := []*job.Job{
			{ID: "paused-running", Type: "t", Queue: "q1", Schedule: now},
			{ID: "paused-retry", Type: "t", Queue: "q2", Schedule: now},
			{ID: "snoozed", Type: "t", Queue: "q3", Schedule: now},
			{ID: "requeued", Type: "t", Queue: "q4", Retry: job.RetryPolicy{MaxAttempts: one}, Schedule: now},
			{ID: "cron-triggered", Type: "t", Queue: "q5", Schedule: cron},
			{ID: "cron-running", Type: "t", Queue: "q6", Schedule: cron},
			{ID: "cron-dead", Type: "t", Queue: "q7", Retry: job.RetryPolicy{MaxAttempts: one}, Schedule: cron},
			{ID: "cron-cancel-running", Type: "t", Queue: "q8", Schedule: cron},
			{ID: "cron-paused-running", Type: "t", Queue: "q9", Schedule: cron},
		}
		res, err := src.Create(ctx, jobs)
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err, r.ID)
		}
		for _, id := range []string{"cron-triggered", "cron-running", "cron-dead", "cron-cancel-running", "cron-paused-running"} {
			_, err := src.Trigger(ctx, id)
			require.NoError(t, err)
		}
		claim := func(id, q string) shard.Claimed {
			c, err := src.Claim(ctx, src.ShardOf(id), q, 1, "w1", "n1")
			require.NoError(t, err)
			require.Len(t, c, 1, id)
			return c[0]
		}
		finish := func(c shard.Claimed, o shard.Outcome, d time.Duration) {
			errs, err := src.FinishRuns(ctx, c.Shard, []shard.Finish{{Member: c.Member, Token: c.Token, Outcome: o, Error: "boom", Delay: d}})
			require.NoError(t, err)
			require.NoError(t, errs[0])
		}
		claim("paused-running", "q1")
		finish(claim("paused-retry", "q2"), shard.Failed, 0)
		finish(claim("snoozed", "q3"), shard.Snoozed, time.Hour)
		dead := claim("requeued", "q4")
		finish(dead, shard.Failed, 0)
		require.NoError(t, src.RequeueDead(ctx, dead.Member))
		claim("cron-running", "q6")
		finish(claim("cron-dead", "q7"), shard.Failed, 0)
		claim("cron-cancel-running", "q8")
		claim("cron-paused-running", "q9")
		for _, id := range []string{"paused-running", "paused-retry", "cron-paused-running"} {
			_, _, err := src.Pause(ctx, id)
			require.NoError(t, err)
		}
		_, _, err = src.Cancel(ctx, "cron-cancel-running")
		require.NoError(t, err)
		shardtest.CheckCounts(t, src)

		bk, _ := dirBucket(t)
		m, err := snapshot.Export(ctx, src, bk, snapshot.ExportOptions{})
		require.NoError(t, err)
		dst := open(t, b, rc, shard.Config{Shards: 3})
		rr, err := snapshot.Restore(ctx, dst, bk, m.ID, snapshot.ReadOptions{})
		require.NoError(t, err)
		require.Equal(t, len(jobs), rr.Restored)
		shardtest.CheckCounts(t, dst)

		for _, j := range jobs {
			want, err := src.Get(ctx, j.ID)
			require.NoError(t, err)
			got, err := dst.Get(ctx, j.ID)
			require.NoError(t, err)
			switch j.ID {
			case "cron-cancel-running":
				want.ActiveRuns--
			}
			want.Shard, got.Shard = 0, 0
			// Remaining TTLs are carried over; on miniredis they do not run down with the
			// clock, so the reads differ by the wall time between them (see roundtrip_test).
			require.WithinDuration(t, want.Expires, got.Expires, 10*time.Second, j.ID)
			want.Expires, got.Expires = time.Time{}, time.Time{}
			require.Equal(t, want, got, j.ID)
		}
		wantQ, gotQ := queueFigures(t, src), queueFigures(t, dst)
		for name, w := range wantQ {
			g := gotQ[name]
			require.Equal(t, w.Scheduled, g.Scheduled, name)
			require.Equal(t, w.Dead, g.Dead, name)
			require.Zero(t, g.InFlight, name)
			if name == "q6" { // the cron run in flight is ready again
				w.Ready++
			}
			require.Equal(t, w.Ready, g.Ready, name)
		}
		// Parked runs become ready on resume; the one that was in flight is the same attempt.
		for _, id := range []string{"paused-running", "cron-paused-running"} {
			_, _, err := dst.Resume(ctx, id)
			require.NoError(t, err)
		}
		for id, q := range map[string]string{"paused-running": "q1", "cron-paused-running": "q9", "cron-running": "q6", "requeued": "q4"} {
			c, err := dst.Claim(ctx, dst.ShardOf(id), q, 10, "w2", "n2")
			require.NoError(t, err)
			require.Len(t, c, 1, id)
			require.Equal(t, 1, c[0].Attempt, id)
		}
		shardtest.CheckCounts(t, dst)
	})
}
