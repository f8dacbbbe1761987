package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/shard/shardtest"
)

// Delete removes a job in every form and state at once, with every run of it: scheduled,
// ready, in flight (its late report refused), waiting for a retry, dead and parked; the
// per-queue counts drop with them, and nothing of the job is left to read.
func TestDelete_EveryFormAndState(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		for _, f := range shardtest.Forms {
			t.Run(f.Name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				s := open(t, b, f.Config(shard.Config{Shards: 1, Retention: time.Hour}))
				now, err := s.ServerNow(ctx)
				require.NoError(t, err)
				mk := func(id string) *job.Job {
					return &job.Job{ID: id, Type: "t", Schedule: f.Schedule(now), Retry: job.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Hour}}
				}
				jobs := []*job.Job{mk("waiting"), mk("paused"), mk("running"), mk("retrying"), mk("dead"),
					{ID: "cron", Type: "t", Schedule: job.Schedule{Cron: "0 0 * * *"}}}
				jobs[4].Retry.MaxAttempts = 1
				_, err = s.Create(ctx, jobs)
				require.NoError(t, err)
				require.True(t, f.Holds(t, s, "waiting"), f.Name)
				_, _, err = s.Pause(ctx, "paused")
				require.NoError(t, err)
				ids := []string{"waiting", "paused", "cron", "running", "retrying", "dead"}
				var held shard.Claimed
				if !f.Later {
					// Runs of every state: one in flight, one waiting for a retry, one dead.
					claimed, err := s.Claim(ctx, 0, "default", 10, "w", "n")
					require.NoError(t, err)
					byID := map[string]shard.Claimed{}
					for _, c := range claimed {
						byID[c.JobID] = c
					}
					require.Len(t, byID, 4, "all but the paused job")
					held = byID["running"]
					var fin []shard.Finish
					for _, id := range []string{"retrying", "dead"} {
						fin = append(fin, shard.Finish{Member: byID[id].Member, Token: byID[id].Token, Outcome: shard.Failed, Error: "boom"})
					}
					errs, err := s.FinishRuns(ctx, 0, fin)
					require.NoError(t, err)
					require.Equal(t, []error{nil, nil}, errs)
					dead, _, err := s.Dead(ctx, "default", 10, "")
					require.NoError(t, err)
					require.Len(t, dead, 1)
				}
				shardtest.CheckCounts(t, s)
				for _, id := range ids {
					require.NoError(t, s.Delete(ctx, id), id)
					_, err := s.Get(ctx, id)
					require.ErrorIs(t, err, shard.ErrNotFound, id)
					require.ErrorIs(t, s.Delete(ctx, id), shard.ErrNotFound, "%s: deleted already", id)
					shardtest.CheckCounts(t, s)
				}
				if !f.Later {
					errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: held.Member, Token: held.Token, Outcome: shard.Succeeded}})
					require.NoError(t, err)
					require.ErrorIs(t, errs[0], shard.ErrTokenMismatch, "the deleted job's run is no longer held")
				}
				for _, q := range queueStats(t, s) {
					require.Zero(t, q.Scheduled+q.InFlight+q.Dead+q.Ready, "%+v", q)
				}
				page, err := s.List(ctx, shard.ListFilter{})
				require.NoError(t, err)
				require.Empty(t, page.Jobs)
				d, err := s.FireDue(ctx, s.AcquireLeases(ctx, "d", []shard.ID{0}, time.Minute)[0].Lease, 100, time.Hour)
				require.NoError(t, err)
				require.Zero(t, d.Fired, "no run of a deleted job fires")
				require.Empty(t, d.Cron)
			})
		}
	})
}
