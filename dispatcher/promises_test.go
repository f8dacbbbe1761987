package dispatcher

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// liveBundle drives one shard by hand on a backend's own clock (a real server's cannot
// be set), with a dispatcher that fires a lead ahead.
type liveBundle struct {
	t     *testing.T
	store *shard.Store
	d     *Dispatcher
	lease shard.Lease
}

func newLiveBundle(t *testing.T, b redistest.Backend, lead time.Duration) *liveBundle {
	t.Helper()
	ctx := context.Background()
	s, err := shard.Open(ctx, b.Client(t), shard.Config{Namespace: redistest.Namespace(t, b), Shards: 1})
	require.NoError(t, err)
	d, err := New(Config{Store: s, Name: "live", Lead: lead})
	require.NoError(t, err)
	l := s.AcquireLeases(ctx, "live", []shard.ID{0}, time.Hour)
	require.True(t, l[0].Held)
	return &liveBundle{t: t, store: s, d: d, lease: l[0].Lease}
}

func (b *liveBundle) step() {
	_, err := b.d.step(context.Background(), b.lease)
	require.NoError(b.t, err)
}

// redisNow reads the server's clock.
func (b *liveBundle) redisNow() time.Time {
	c := b.store.Client()
	v, err := c.Do(context.Background(), c.B().Time().Build()).AsStrSlice()
	require.NoError(b.t, err)
	sec, _ := strconv.ParseInt(v[0], 10, 64)
	us, _ := strconv.ParseInt(v[1], 10, 64)
	return time.Unix(sec, us*1000)
}

// waitFraction waits until the server's clock is between from and to past a second.
func (b *liveBundle) waitFraction(from, to time.Duration) time.Time {
	for {
		now := b.redisNow()
		f := time.Duration(now.Nanosecond())
		if f >= from && f <= to {
			return now
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (b *liveBundle) claim(n int) []shard.Claimed {
	c, err := b.store.Claim(context.Background(), 0, "default", n, "w", "n")
	require.NoError(b.t, err)
	return c
}

func (b *liveBundle) finish(c shard.Claimed, o shard.Outcome) {
	errs, err := b.store.FinishRuns(context.Background(), 0, []shard.Finish{{Member: c.Member, Token: c.Token, Outcome: o}})
	require.NoError(b.t, err)
	require.NoError(b.t, errs[0])
}

// An occurrence fired ahead of its time and claimed is not filed again by a change of
// the schedule (even to the same one) or by a pause and a resume: it would run twice,
// the second time as a "retry" at the same time as the first (issue 21, item 1).
func TestPromise_CronFiredAheadIsNotFiledAgain(t *testing.T) {
	t.Parallel()
	for _, change := range []string{"UpdateSameSchedule", "PauseResume"} {
		t.Run(change, func(t *testing.T) {
			t.Parallel()
			redistest.Run(t, func(t *testing.T, be redistest.Backend) {
				b := newLiveBundle(t, be, time.Second)
				ctx := context.Background()
				// The next second boundary is 600-900 ms away: within the lead, not yet due.
				now := b.waitFraction(100*time.Millisecond, 400*time.Millisecond)
				s := now.Truncate(time.Second).Add(time.Second)
				sched := job.Schedule{Cron: "* * * * * *"}
				_, err := b.store.Create(ctx, []*job.Job{{ID: "c", Type: "t", Visibility: time.Hour, Overlap: job.OverlapSkip, Schedule: sched}})
				require.NoError(t, err)
				b.step()
				first := b.claim(10)
				require.Len(t, first, 1)
				require.Equal(t, shard.RunMember("c", s.UnixMilli()), first[0].Member)
				require.True(t, b.redisNow().Before(s), "the test claims ahead of the due time")

				switch change {
				case "UpdateSameSchedule":
					_, err = b.store.Update(ctx, "c", shard.Update{Schedule: &sched})
					require.NoError(t, err)
				case "PauseResume":
					_, _, err = b.store.Pause(ctx, "c")
					require.NoError(t, err)
					_, _, err = b.store.Resume(ctx, "c")
					require.NoError(t, err)
				}
				info, err := b.store.Get(ctx, "c")
				require.NoError(t, err)
				require.True(t, info.NextRunAt.After(s), "next run %s must be after the fired occurrence %s", info.NextRunAt, s)

				// Fire and claim until the occurrence after s: s never comes back.
				for b.redisNow().Before(s.Add(1200 * time.Millisecond)) {
					b.step()
					for _, c := range b.claim(10) {
						require.NotEqual(t, first[0].Member, c.Member, "occurrence %s ran twice", s)
						b.finish(c, shard.Succeeded)
					}
					time.Sleep(20 * time.Millisecond)
				}
				b.finish(first[0], shard.Succeeded) // the first attempt's ack is accepted
				_, _, err = b.store.Cancel(ctx, "c")
				require.NoError(t, err)
				stats, err := b.store.Queues(ctx)
				require.NoError(t, err)
				for _, q := range stats {
					require.Zero(t, q.InFlight, "queue %s in flight after the cancel", q.Queue)
				}
			})
		})
	}
}

// overlap=buffer_one holds the buffered occurrence until no run of the job is active: a
// triggered run that ends first does not release it beside the scheduled one (item 6).
func TestPromise_BufferOneWaitsForEveryRun(t *testing.T) {
	t.Parallel()
	redistest.Run(t, func(t *testing.T, be redistest.Backend) {
		b := newLiveBundle(t, be, time.Second)
		ctx := context.Background()
		now := b.waitFraction(100*time.Millisecond, 400*time.Millisecond)
		s1 := now.Truncate(time.Second).Add(time.Second)
		_, err := b.store.Create(ctx, []*job.Job{{ID: "b", Type: "t", Visibility: time.Hour, Overlap: job.OverlapBufferOne,
			Schedule: job.Schedule{Cron: "* * * * * *"}}})
		require.NoError(t, err)
		b.step()
		running := b.claim(10)
		require.Len(t, running, 1)
		require.Equal(t, shard.RunMember("b", s1.UnixMilli()), running[0].Member)

		// The next occurrence comes within the lead while the first still runs: buffered.
		for b.redisNow().Before(s1.Add(200 * time.Millisecond)) {
			time.Sleep(10 * time.Millisecond)
		}
		b.step()
		require.Empty(t, b.claim(10), "the second occurrence waits in the buffer")

		_, err = b.store.Trigger(ctx, "b")
		require.NoError(t, err)
		triggered := b.claim(10)
		require.Len(t, triggered, 1)
		b.finish(triggered[0], shard.Succeeded)
		require.Empty(t, b.claim(10), "the buffered occurrence stays buffered while the scheduled run goes on")

		b.finish(running[0], shard.Succeeded)
		released := b.claim(10)
		require.Len(t, released, 1, "released when the last active run ends")
		require.Equal(t, shard.RunMember("b", s1.Add(time.Second).UnixMilli()), released[0].Member)
	})
}

// A failed attempt's retry wakes the dispatcher when it is earlier than the shard's
// next run, as a create does: it starts at its backoff, not at the dispatcher's next
// wake-up (item 4). The dispatcher here would otherwise sleep for an hour.
func TestPromise_RetryWakesTheDispatcher(t *testing.T) {
	t.Parallel()
	redistest.Run(t, func(t *testing.T, be redistest.Backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := shard.Open(ctx, be.Client(t), shard.Config{Namespace: redistest.Namespace(t, be), Shards: 1})
		require.NoError(t, err)
		d, err := New(Config{Store: s, Name: "retry", MaxSleep: time.Hour})
		require.NoError(t, err)
		require.NoError(t, d.Start(ctx))
		defer func() { require.NoError(t, d.Stop(context.Background())) }()

		_, err = s.Create(ctx, []*job.Job{{ID: "r", Type: "t", Visibility: time.Hour, Schedule: job.Schedule{Now: true},
			Retry: job.RetryPolicy{MaxAttempts: 3, InitialBackoff: 100 * time.Millisecond, Jitter: -1}}})
		require.NoError(t, err)
		var c []shard.Claimed
		require.Eventually(t, func() bool {
			c, err = s.Claim(ctx, 0, "default", 10, "w", "n")
			require.NoError(t, err)
			return len(c) == 1
		}, 5*time.Second, 5*time.Millisecond)
		// Let the dispatcher settle into its long sleep (nothing due, nothing in flight
		// that it knew of).
		time.Sleep(100 * time.Millisecond)
		errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: c[0].Member, Token: c[0].Token, Outcome: shard.Failed, Error: "boom"}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		require.Eventually(t, func() bool {
			c, err = s.Claim(ctx, 0, "default", 10, "w", "n")
			require.NoError(t, err)
			return len(c) == 1
		}, 5*time.Second, 5*time.Millisecond, "the retry fires at its backoff")
		require.Equal(t, 2, c[0].Attempt)
	})
}
