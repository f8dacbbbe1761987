package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// A run claimed ahead of its start time waits for it without taking a handler slot, up
// to holdCap of them: as many as the handlers start in a second at their mean duration
// (10 ms until one is measured), at least Concurrency+Prefetch, at most Config.Hold.
func TestTakeClaims_RunAheadWaitsWithoutASlot(t *testing.T) {
	w := newTestWorker(t) // Concurrency 4
	now := time.Now()
	ahead := func(member string, d time.Duration) shard.Claimed {
		return shard.Claimed{Shard: 3, Member: member, Token: "t", ClaimedAt: now, StartAt: now.Add(d)}
	}
	reqs := []shard.ClaimRequest{{Shard: 3, Queue: "default", N: 4}}
	start := time.Now()
	runs := []shard.Claimed{ahead("x:1", 150*time.Millisecond), {Shard: 3, Member: "y:1", Token: "t"}}
	require.Empty(t, w.takeClaims(reqs, []shard.ClaimResult{{Runs: runs, At: 10}}, time.Now()))
	w.mu.Lock()
	require.Equal(t, 1, w.waiting)
	require.Equal(t, 3, w.claimNow(), "only the run due now takes a slot")
	w.mu.Unlock()
	require.Len(t, w.runs, 1)
	require.Equal(t, "y:1", (<-w.runs).c.Member)
	select {
	case a := <-w.runs:
		require.Equal(t, "x:1", a.c.Member)
		require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond, "queued at its start time")
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting run was never queued")
	}
	w.mu.Lock()
	require.Zero(t, w.waiting)
	require.Equal(t, 2, w.claimNow())
	w.mu.Unlock()

	// Five more wait, none taking a slot; with nothing measured, the hold takes 400.
	var more []shard.Claimed
	for _, m := range []string{"a:1", "b:1", "c:1", "d:1", "e:1"} {
		more = append(more, ahead(m, time.Hour))
	}
	w.takeClaims(reqs, []shard.ClaimResult{{Runs: more, At: 11}}, time.Now())
	w.mu.Lock()
	require.Equal(t, 5, w.waiting)
	require.Greater(t, w.aheadShare, 0.0, "claims met runs held ahead")
	free, room := w.claimable()
	require.Equal(t, 2, free)
	require.Zero(t, room, "no room to hold while most runs claimed started at once")
	w.aheadShare = 1
	free, room = w.claimable()
	require.Equal(t, 2, free)
	require.Equal(t, 395, room)
	// Handlers of a second: the hold is the slots.
	w.meanRun = float64(time.Second)
	_, room = w.claimable()
	require.Zero(t, room)
	w.meanRun = 0
	// Handlers of 1 ms: 4 slots start 4,000 a second, up to Hold.
	w.observeDuration(time.Millisecond)
	require.Equal(t, DefaultHold, w.holdCap())
	// Handlers of 100 ms start 40 a second.
	w.meanRun = float64(100 * time.Millisecond)
	require.Equal(t, 40, w.holdCap())
	_, room = w.claimable()
	require.Equal(t, 35, room)
	w.mu.Unlock()

	// A cancelled waiting run is queued at once, marked so that its handler never runs.
	c := w.held["c:1"]
	w.cancelRun(c, errJobCancelled)
	require.Len(t, w.runs, 1)
	require.Same(t, c, <-w.runs)
	require.ErrorIs(t, c.cancelled, errJobCancelled)
	w.mu.Lock()
	require.Equal(t, 4, w.waiting)
	w.mu.Unlock()
}

// End to end with a dispatcher's lead: runs are claimed ahead of their due time and start
// at it, never before (on the Redis clock); a run cancelled while it waits never starts;
// Stop hands back the runs still waiting, without using an attempt.
func TestWorker_RunsFiredAheadStartAtTheirDueTime(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s := openStore(t, b)
		var mu sync.Mutex
		started := map[string]*Run{}
		w, err := New(Config{Store: s, Concurrency: 2, Sweep: 100 * time.Millisecond})
		require.NoError(t, err)
		w.HandleFunc("t", func(_ context.Context, r *Run) error {
			mu.Lock()
			started[r.JobID] = r
			mu.Unlock()
			return nil
		})
		require.NoError(t, w.Start(ctx))
		defer func() { stopSoon(w) }()
		d, err := dispatcher.New(dispatcher.Config{Store: s, Name: "lead", Lead: time.Second})
		require.NoError(t, err)
		require.NoError(t, d.Start(ctx))
		defer func() { _ = d.Stop(context.Background()) }()

		now, err := s.ServerNow(ctx)
		require.NoError(t, err)
		// Due after the lead (1s): fired, and claimed, a full lead ahead of it, which is
		// the time the test has to see it running and cancel it before it starts (a due
		// time within the lead left less, on a busy machine too little).
		due := now.Add(1500 * time.Millisecond)
		_, err = s.Create(ctx, []*job.Job{
			{ID: "on-time", Type: "t", Schedule: job.Schedule{At: due}},
			{ID: "cancelled", Type: "t", Schedule: job.Schedule{At: due}},
			{ID: "stopped", Type: "t", Schedule: job.Schedule{At: now.Add(20 * time.Second)}},
		})
		require.NoError(t, err)
		state := func(id string) job.State {
			info, err := s.Get(ctx, id)
			require.NoError(t, err)
			return info.State
		}
		// Claimed ahead: running before its due time.
		require.Eventually(t, func() bool { return state("cancelled") == job.StateRunning }, 5*time.Second, 5*time.Millisecond)
		_, _, err = s.Cancel(ctx, "cancelled")
		require.NoError(t, err)

		require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return started["on-time"] != nil }, 10*time.Second, 5*time.Millisecond)
		mu.Lock()
		r := started["on-time"]
		mu.Unlock()
		require.True(t, r.ClaimedAt.Before(r.Due), "claimed ahead: %s before %s", r.ClaimedAt, r.Due)
		require.False(t, r.StartedAt.Before(r.Due), "started early: %s before %s", r.StartedAt, r.Due)
		require.Eventually(t, func() bool { return state("on-time") == job.StateCompleted }, 5*time.Second, 5*time.Millisecond)
		require.Eventually(t, func() bool { return state("cancelled") == job.StateCancelled }, 5*time.Second, 5*time.Millisecond)

		// The far job is not fired yet; a dispatcher with a 20s lead would, so fire it by
		// hand with one, then stop the worker while the run waits.
		require.NoError(t, d.Stop(ctx))
		lease := s.AcquireLeases(ctx, "hand", []shard.ID{s.ShardOf("stopped")}, time.Minute)[0]
		require.True(t, lease.Held, "%v", lease.Err)
		fd, err := s.FireDue(ctx, lease.Lease, 100, 30*time.Second)
		require.NoError(t, err)
		require.Equal(t, 1, fd.Fired)
		member := shard.RunMember("stopped", now.Add(20*time.Second).UnixMilli())
		require.Eventually(t, func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.held[member] != nil && w.waiting == 1
		}, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, job.StateRunning, state("stopped"))
		require.NoError(t, w.Stop(ctx))
		require.Equal(t, job.StateReady, state("stopped"), "handed back")
		mu.Lock()
		defer mu.Unlock()
		require.NotContains(t, started, "cancelled")
		require.NotContains(t, started, "stopped")
		c, err := s.Claim(ctx, s.ShardOf("stopped"), "default", 10, "other", "n")
		require.NoError(t, err)
		require.Len(t, c, 1)
		require.Equal(t, 1, c[0].Attempt, "a hand-back uses no attempt")
	})
}
