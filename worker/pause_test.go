package worker

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

func newPauseTestWorker(t *testing.T) *Worker {
	t.Helper()
	_, c := redistest.Mini(t)
	s, err := shard.Open(context.Background(), c, shard.Config{Namespace: "wp", Shards: 4})
	require.NoError(t, err)
	w, err := New(Config{Store: s, Concurrency: 64, Queues: []string{"default", "mail"}})
	require.NoError(t, err)
	return w
}

func queuesOf(reqs []shard.ClaimRequest) map[string]int {
	out := map[string]int{}
	for _, r := range reqs {
		out[r.Queue]++
	}
	return out
}

func TestNextRound_SkipsPausedQueues(t *testing.T) {
	t.Parallel()
	w := newPauseTestWorker(t)
	w.markAllHot()
	w.paused["mail"] = true
	order, reqs := w.nextRound(nil, nil, 4*minClaimPerSource, 0)
	require.Equal(t, map[string]int{"default": 4}, queuesOf(reqs))
	require.Empty(t, order)
	n := 0
	for _, r := range reqs {
		n += r.N
	}
	require.Equal(t, 4*minClaimPerSource, n, "the free slots go to the claimable sources")
	require.Len(t, w.hot, 8, "paused sources stay hot for the resume")

	// A source paused while it waits in the round-robin order is skipped too.
	delete(w.paused, "mail")
	order, _ = w.nextRound(nil, nil, minClaimPerSource, 0) // one source a round: the rest wait in order
	require.Len(t, order, 7)
	w.paused["mail"] = true
	_, reqs = w.nextRound(order, nil, 4*minClaimPerSource, 0)
	require.NotContains(t, queuesOf(reqs), "mail")

	// Everything paused: no request, so the loop waits instead of spinning.
	w.paused["default"] = true
	order, reqs = w.nextRound(nil, nil, 4*minClaimPerSource, 0)
	require.Empty(t, reqs)
	require.Empty(t, order)

	// No free slot: no request.
	delete(w.paused, "default")
	_, reqs = w.nextRound(nil, nil, 0, 0)
	require.Empty(t, reqs)
}

func TestSignal_PauseAndResume(t *testing.T) {
	t.Parallel()
	w := newPauseTestWorker(t)
	ctx := context.Background()
	ch := w.store.Keys().QueueChannel()

	// A pause signal pauses at once and asks for a read of the paused set.
	w.signal(ch, "pause mail")
	require.True(t, w.paused["mail"])
	require.True(t, w.rereadPaused)
	require.Len(t, w.claimWake, 1)
	<-w.claimWake
	w.rereadPaused = false
	for _, msg := range []string{"pause other", "pause", "stop default", "resume  mail", "pause default x"} {
		w.signal(ch, msg) // not ours, or malformed
	}
	require.Equal(t, map[string]bool{"mail": true}, w.paused)
	require.False(t, w.rereadPaused)
	require.Len(t, w.claimWake, 0)

	// A resume signal only asks for the read: it may be older than a pause that came
	// after it, so the set decides.
	_, err := w.store.PauseQueue(ctx, "mail")
	require.NoError(t, err)
	w.signal(ch, "resume mail")
	require.True(t, w.paused["mail"])
	require.True(t, w.rereadPaused)
	require.Len(t, w.claimWake, 1)
	w.refreshPaused(ctx)
	require.True(t, w.paused["mail"], "a stale resume signal does not undo a pause")

	// Once the set says resumed, the read resumes and marks every shard of the queue hot.
	_, err = w.store.ResumeQueue(ctx, "mail")
	require.NoError(t, err)
	w.signal(ch, "resume mail")
	w.refreshPaused(ctx)
	require.Empty(t, w.paused)
	for i := range 4 {
		require.Contains(t, w.hot, source{"mail", shard.ID(i)})
	}
	require.Equal(t, uint64(1), w.pausedGen)
}

func TestRefreshPaused_FailedReadKeepsState(t *testing.T) {
	t.Parallel()
	w := newPauseTestWorker(t)
	ctx := context.Background()
	w.signal(w.store.Keys().QueueChannel(), "pause mail")
	w.refreshPaused(ctx)
	if _, err := w.store.PausedQueues(ctx); err != nil {
		// The read fails (the store's stub, or Redis down): keep what the signals said.
		require.True(t, w.paused["mail"])
	} else {
		// The set is empty in Redis: the read repairs the state a lost resume left.
		require.Empty(t, w.paused)
		require.Contains(t, w.hot, source{"mail", 0})
	}
}

// TestWorker_PauseQueue pauses a queue before the worker starts (it reads the paused set
// at start) and while it runs (the pause signal), and checks that no run of the paused
// queue is claimed while the claim loop keeps going (it runs another queue's job and
// several sweeps), and that the runs start once the queue is resumed.
func TestWorker_PauseQueue(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, b)
		_, err := s.PauseQueue(ctx, "default")
		require.NoError(t, err)
		fm := newFakeMetrics()
		w, err := New(Config{Store: s, Concurrency: 8, Queues: []string{"default", "other"}, Sweep: 20 * time.Millisecond, Metrics: fm})
		require.NoError(t, err)
		var sweeps atomic.Int64
		w.afterSweep = func() { sweeps.Add(1) }
		w.HandleFunc("t", func(context.Context, *Run) error { return nil })
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() { stopSoon(w) })

		// checkHeld creates n ready runs on default and shows that the worker does not
		// claim them: a job on the other queue, created after them, runs, and the claim
		// loop sweeps (marks every source hot and claims) three times more.
		checkHeld := func(prefix string, n int) {
			t.Helper()
			jobs := make([]*job.Job, n)
			for i := range jobs {
				jobs[i] = &job.Job{ID: prefix + strings.Repeat("x", i+1), Type: "t", Schedule: job.Schedule{Now: true}}
			}
			_, err := s.Create(ctx, jobs)
			require.NoError(t, err)
			otherDone := fm.total("other") + 1
			_, err = s.Create(ctx, []*job.Job{{ID: prefix + "other", Type: "t", Queue: "other", Schedule: job.Schedule{Now: true}}})
			require.NoError(t, err)
			require.Eventually(t, func() bool { return fm.total("other") == otherDone }, 10*time.Second, 2*time.Millisecond)
			from := sweeps.Load()
			require.Eventually(t, func() bool { return sweeps.Load() >= from+3 }, 10*time.Second, 2*time.Millisecond)
			require.Zero(t, fm.claimedOf("default"), "a paused queue is not claimed from")
		}

		// Paused before the start.
		checkHeld("a", 20)
		_, err = s.ResumeQueue(ctx, "default")
		require.NoError(t, err)
		require.Eventually(t, func() bool { return fm.finishedOf("default")[OutcomeSucceeded] == 20 }, 10*time.Second, 2*time.Millisecond)

		// Paused while running: the signal (or the next sweep's read) stops the claims.
		claimed := fm.claimedOf("default")
		_, err = s.PauseQueue(ctx, "default")
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.paused["default"]
		}, 10*time.Second, 2*time.Millisecond)
		// A claim round the loop chose before the pause may still be on its way to Redis:
		// once the loop has swept again, that round is over and every later one sees the
		// pause.
		from := sweeps.Load()
		require.Eventually(t, func() bool { return sweeps.Load() >= from+1 }, 10*time.Second, 2*time.Millisecond)
		fm.mu.Lock()
		fm.claimed["default"] = 0 // count from here
		fm.mu.Unlock()
		checkHeld("b", 10)
		_, err = s.ResumeQueue(ctx, "default")
		require.NoError(t, err)
		require.Eventually(t, func() bool { return fm.finishedOf("default")[OutcomeSucceeded] == 30 }, 10*time.Second, 2*time.Millisecond)
		require.Equal(t, 20, claimed)
		require.Equal(t, 10, fm.claimedOf("default"))
	})
}
