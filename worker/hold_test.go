package worker

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// A run that a worker claimed ahead of its due time (the dispatcher's lead) is handed
// back when its job is paused before that time: it does not start while the job is
// paused, and runs once after the resume, without using an attempt (issue 21, item 2).
// A change of the job sends the run back too, and it starts with the new definition.
//
// The runs are due in 5 minutes (past the test's deadline of 30 s, and too soon to be
// stored cold) and fired ahead by hand with a longer lead than a dispatcher's (at most a
// second), so they wait in the worker for as long as the test needs; the test then does
// what a run's timer does at its start time (startNow). Runs due 700 ms ahead, fired by
// a dispatcher, made the test fail on a loaded machine: the runs were claimed, or the
// pause reached Redis, after their start time, and had rightly started.
// TestWorker_RunsFiredAheadStartAtTheirDueTime covers the timers themselves.
func TestWorker_HeldRunObeysPauseAndUpdate(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s := openStore(t, b)
		var mu sync.Mutex
		var starts []*Run
		w, err := New(Config{Store: s, Concurrency: 2, Sweep: 100 * time.Millisecond})
		require.NoError(t, err)
		w.HandleFunc("t", func(_ context.Context, r *Run) error {
			mu.Lock()
			starts = append(starts, r)
			mu.Unlock()
			return nil
		})
		require.NoError(t, w.Start(ctx))
		defer func() { stopSoon(w) }()

		now, err := s.ServerNow(ctx)
		require.NoError(t, err)
		due := now.Add(5 * time.Minute)
		_, err = s.Create(ctx, []*job.Job{
			{ID: "paused", Type: "t", Payload: []byte("p"), Schedule: job.Schedule{At: due}},
			{ID: "changed", Type: "t", Payload: []byte("old"), Schedule: job.Schedule{At: due}},
		})
		require.NoError(t, err)
		fired := 0
		for _, id := range slices.Compact([]shard.ID{s.ShardOf("paused"), s.ShardOf("changed")}) {
			lease := s.AcquireLeases(ctx, "hand", []shard.ID{id}, time.Minute)[0]
			require.True(t, lease.Held, "%v", lease.Err)
			d, err := s.FireDue(ctx, lease.Lease, 100, 10*time.Minute)
			require.NoError(t, err)
			fired += d.Fired
		}
		require.Equal(t, 2, fired, "fired ahead")

		member := func(id string) string { return shard.RunMember(id, due.UnixMilli()) }
		// waiting returns the token of the claim of job id's run while the worker holds
		// the run until its start time, else "".
		waiting := func(id string) string {
			w.mu.Lock()
			defer w.mu.Unlock()
			if a := w.held[member(id)]; a != nil && a.wait != nil {
				return a.c.Token
			}
			return ""
		}
		// startNow does what the timer of job id's waiting run does at its start time.
		startNow := func(id string) {
			w.mu.Lock()
			a := w.held[member(id)]
			stopped := a != nil && a.wait != nil && a.wait.Stop()
			w.mu.Unlock()
			require.True(t, stopped, "the run of %s waits for its start time", id)
			w.release(a)
		}
		require.Eventually(t, func() bool { return waiting("paused") != "" && waiting("changed") != "" }, 10*time.Second, 2*time.Millisecond, "claimed ahead")
		first := waiting("changed")
		_, changed, err := s.Pause(ctx, "paused")
		require.NoError(t, err)
		require.True(t, changed)
		payload := []byte("new")
		_, err = s.Update(ctx, "changed", shard.Update{Payload: &payload})
		require.NoError(t, err)

		// The paused job's run is handed back (the worker lets it go once Redis has the
		// hand-back); the changed job's run too, and it is claimed again.
		require.Eventually(t, func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.held[member("paused")] == nil
		}, 10*time.Second, 2*time.Millisecond, "the paused job's run handed back")
		require.Eventually(t, func() bool {
			tok := waiting("changed")
			return tok != "" && tok != first
		}, 10*time.Second, 2*time.Millisecond, "the changed job's run handed back and claimed again")
		// Its start time: the changed job runs with its new payload, the paused one not.
		startNow("changed")
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(starts) == 1
		}, 10*time.Second, 5*time.Millisecond)
		mu.Lock()
		require.Len(t, starts, 1, "the paused job's run did not start")
		require.Equal(t, "changed", starts[0].JobID)
		require.Equal(t, "new", string(starts[0].Payload))
		require.Equal(t, 1, starts[0].Attempt)
		mu.Unlock()
		info, err := s.Get(ctx, "paused")
		require.NoError(t, err)
		require.Equal(t, job.StatePaused, info.State)

		_, _, err = s.Resume(ctx, "paused")
		require.NoError(t, err)
		require.Eventually(t, func() bool { return waiting("paused") != "" }, 10*time.Second, 2*time.Millisecond, "claimed again after the resume")
		startNow("paused")
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(starts) == 2
		}, 10*time.Second, 5*time.Millisecond)
		mu.Lock()
		require.Equal(t, "paused", starts[1].JobID)
		require.Equal(t, 1, starts[1].Attempt, "a hand-back uses no attempt")
		mu.Unlock()
		require.Eventually(t, func() bool {
			info, err := s.Get(ctx, "paused")
			require.NoError(t, err)
			return info.State == job.StateCompleted
		}, 10*time.Second, 5*time.Millisecond)
	})
}

// A hold signal lost with the subscription is made up by the heartbeat: after a lost
// subscription, the worker asks about its waiting runs, and one whose job is paused is
// handed back (extend_runs answers shard.ExtendHold).
func TestWorker_HeldRunRecheckedAfterALostSubscription(t *testing.T) {
	_, c := redistest.Mini(t)
	s, err := shard.Open(context.Background(), c, shard.Config{Namespace: "wh", Shards: 1})
	require.NoError(t, err)
	ctx := context.Background()
	now, err := s.ServerNow(ctx)
	require.NoError(t, err)
	due := now.Add(5 * time.Second)
	_, err = s.Create(ctx, []*job.Job{{ID: "h", Type: "t", Schedule: job.Schedule{At: due}}})
	require.NoError(t, err)
	lease := s.AcquireLeases(ctx, "d", []shard.ID{0}, time.Minute)[0]
	_, err = s.FireDue(ctx, lease.Lease, 10, time.Minute)
	require.NoError(t, err)
	w, err := New(Config{Store: s, Concurrency: 4})
	require.NoError(t, err)
	res := s.ClaimMany(ctx, []shard.ClaimRequest{{Shard: 0, Queue: "default", N: 1}}, w.cfg.ID, w.nonce)
	require.NoError(t, res[0].Err)
	require.Len(t, res[0].Runs, 1)
	w.mu.Lock()
	w.takeClaims([]shard.ClaimRequest{{Shard: 0, Queue: "default", N: 1}}, res, time.Now())
	require.Equal(t, 1, w.waiting)
	w.mu.Unlock()
	// Paused while the worker was not subscribed: no signal reaches it.
	_, _, err = s.Pause(ctx, "h")
	require.NoError(t, err)
	require.NoError(t, w.extendDue(ctx))
	require.Equal(t, 1, w.waitingCount(), "a heartbeat not yet due asks nothing")
	w.mu.Lock()
	w.recheckUntil = time.Now().Add(recheckAfterLoss)
	w.mu.Unlock()
	require.NoError(t, w.extendDue(ctx))
	require.Zero(t, w.waitingCount())
	a := <-w.runs
	require.ErrorIs(t, a.cancelled, errHeldBack)
}

func (w *Worker) waitingCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiting
}

// Runs fired ahead fill at most Concurrency+Prefetch+Hold places, however many a ready
// set holds: a claim may take such runs up to its whole N, and runs waiting beyond
// holdCap take slots, so rounds stop. Before, waiting runs grew every round until their
// timers, pushing into w.runs under w.mu, blocked the worker for good.
func TestClaimable_RunsHeldAheadStayBounded(t *testing.T) {
	_, c := redistest.Mini(t)
	s, err := shard.Open(context.Background(), c, shard.Config{Namespace: "wb", Shards: 1})
	require.NoError(t, err)
	ctx := context.Background()
	now, err := s.ServerNow(ctx)
	require.NoError(t, err)
	due := now.Add(30 * time.Second)
	var jobs []*job.Job
	for i := range 200 {
		jobs = append(jobs, &job.Job{ID: "b" + strconv.Itoa(i), Type: "t", Schedule: job.Schedule{At: due.Add(time.Duration(i) * time.Millisecond)}})
	}
	_, err = s.Create(ctx, jobs)
	require.NoError(t, err)
	lease := s.AcquireLeases(ctx, "d", []shard.ID{0}, time.Minute)[0]
	_, err = s.FireDue(ctx, lease.Lease, 1000, time.Minute)
	require.NoError(t, err)
	w, err := New(Config{Store: s, Concurrency: 1, Hold: 5})
	require.NoError(t, err)
	w.markAllHot()
	defer func() {
		for _, a := range w.held {
			if a.wait != nil {
				a.wait.Stop()
			}
		}
	}()
	var order []source
	var reqs []shard.ClaimRequest
	for range 50 {
		w.mu.Lock()
		n, ahead := w.claimable()
		order, reqs = w.nextRound(order, reqs[:0], n, ahead)
		w.mu.Unlock()
		if len(reqs) == 0 {
			break
		}
		res := s.ClaimMany(ctx, reqs, w.cfg.ID, w.nonce)
		w.mu.Lock()
		w.takeClaims(reqs, res, time.Now())
		require.LessOrEqual(t, len(w.held), 1+5, "held runs within Concurrency+Hold")
		w.mu.Unlock()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	require.LessOrEqual(t, len(w.held), cap(w.runs))
	require.Positive(t, w.waiting)
}

// A run handed back and claimed again by the same worker before the hand-back's report
// returned keeps its new entry: the report's done must not drop it (it would go
// without heartbeats and be redelivered while it runs), and the counts stay exact.
func TestDone_ReclaimedRunKeepsItsNewEntry(t *testing.T) {
	w := newTestWorker(t)
	reqs := []shard.ClaimRequest{{Shard: 3, Queue: "default", N: 1}}
	run := shard.Claimed{Shard: 3, Member: "r:1", Token: "t1"}
	w.takeClaims(reqs, []shard.ClaimResult{{Runs: []shard.Claimed{run}, At: 1}}, time.Now())
	old := <-w.runs
	w.finish(old, nil, shard.Finish{Outcome: shard.HandBack}, time.Time{}, time.Time{}, nil)
	require.Equal(t, 1, w.reporting)

	run.Token = "t2"
	w.takeClaims(reqs, []shard.ClaimResult{{Runs: []shard.Claimed{run}, At: 2}}, time.Now())
	fresh := <-w.runs
	require.Zero(t, w.reporting, "the old entry no longer counts")
	w.done(old)
	require.Same(t, fresh, w.held["r:1"])
	require.Zero(t, w.reporting)
	require.Equal(t, 3, w.claimNow())
}
