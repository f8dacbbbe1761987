package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// fakeMetrics records what a Worker reports.
type fakeMetrics struct {
	mu       sync.Mutex
	claimed  map[string]int
	finished map[string]map[Outcome]int
	lateness []time.Duration
	duration []time.Duration
}

func newFakeMetrics() *fakeMetrics {
	return &fakeMetrics{claimed: map[string]int{}, finished: map[string]map[Outcome]int{}}
}

func (f *fakeMetrics) RunsClaimed(queue string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claimed[queue] += n
}

func (f *fakeMetrics) RunFinished(queue string, o Outcome, lateness, duration time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.finished[queue] == nil {
		f.finished[queue] = map[Outcome]int{}
	}
	f.finished[queue][o]++
	f.lateness = append(f.lateness, lateness)
	f.duration = append(f.duration, duration)
}

func (f *fakeMetrics) claimedOf(q string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.claimed[q]
}

func (f *fakeMetrics) finishedOf(q string) map[Outcome]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[Outcome]int{}
	for o, n := range f.finished[q] {
		out[o] = n
	}
	return out
}

func (f *fakeMetrics) total(q string) int {
	n := 0
	for _, k := range f.finishedOf(q) {
		n += k
	}
	return n
}

func openStore(t *testing.T, b redistest.Backend) *shard.Store {
	t.Helper()
	s, err := shard.Open(context.Background(), b.Client(t), shard.Config{Namespace: redistest.Namespace(t, b), Shards: 4})
	require.NoError(t, err)
	return s
}

func TestWorker_Metrics(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s := openStore(t, b)
		fm := newFakeMetrics()
		var observed sync.Map
		w, err := New(Config{Store: s, Concurrency: 8, Sweep: 50 * time.Millisecond, Metrics: fm,
			ObserveFunc: func(r Result) { observed.Store(r.Run.JobID, r.Outcome) }})
		require.NoError(t, err)
		started := make(chan struct{})
		w.HandleFunc("ok", func(context.Context, *Run) error { return nil })
		w.HandleFunc("fail", func(context.Context, *Run) error { return errors.New("boom") })
		w.HandleFunc("cancel", func(context.Context, *Run) error { return Cancel(nil) })
		w.HandleFunc("snooze", func(context.Context, *Run) error { return Snooze(time.Hour) })
		w.HandleFunc("block", func(ctx context.Context, _ *Run) error { close(started); <-ctx.Done(); return ctx.Err() })
		require.NoError(t, w.Start(ctx))
		stopped := false
		t.Cleanup(func() {
			if !stopped {
				stopSoon(w)
			}
		})

		now := job.Schedule{Now: true}
		_, err = s.Create(ctx, []*job.Job{
			{ID: "ok1", Type: "ok", Schedule: now},
			{ID: "ok2", Type: "ok", Queue: "default", Schedule: now},
			{ID: "fail", Type: "fail", Retry: job.RetryPolicy{MaxAttempts: 3}, Schedule: now},
			{ID: "dead", Type: "fail", Retry: job.RetryPolicy{MaxAttempts: 1}, Schedule: now},
			{ID: "cancel", Type: "cancel", Schedule: now},
			{ID: "snooze", Type: "snooze", Schedule: now},
		})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return fm.total("default") == 6 }, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, 6, fm.claimedOf("default"))
		require.Equal(t, map[Outcome]int{
			OutcomeSucceeded: 2, OutcomeFailed: 1, OutcomeDead: 1, OutcomeCancelled: 1, OutcomeSnoozed: 1,
		}, fm.finishedOf("default"))
		// ObserveFunc keeps its outcomes: the dead run is a failed last attempt there.
		o, _ := observed.Load("dead")
		require.Equal(t, OutcomeFailed, o)

		// A handler interrupted by shutdown: handed back.
		_, err = s.Create(ctx, []*job.Job{{ID: "block", Type: "block", Schedule: now}})
		require.NoError(t, err)
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the blocking run did not start")
		}
		sctx, cancel := context.WithCancel(ctx)
		cancel() // no grace
		stopped = true
		require.ErrorIs(t, w.Stop(sctx), context.Canceled)
		require.Equal(t, 7, fm.claimedOf("default"))
		require.Equal(t, 1, fm.finishedOf("default")[OutcomeHandedBack])

		fm.mu.Lock()
		defer fm.mu.Unlock()
		require.Len(t, fm.lateness, 7)
		for i := range fm.lateness {
			// Runs due "now" are late by the time they took to reach a handler: small,
			// but Redis clocks may be a millisecond apart from the creating call.
			require.Greater(t, fm.lateness[i], -time.Second)
			require.Less(t, fm.lateness[i], 10*time.Second)
			require.GreaterOrEqual(t, fm.duration[i], time.Duration(0))
		}
	})
}

func TestWorker_MetricsNilIsNoop(t *testing.T) {
	t.Parallel()
	w := newTestWorker(t)
	require.NotNil(t, w.cfg.Metrics)
	w.cfg.Metrics.RunsClaimed("default", 1)
	w.cfg.Metrics.RunFinished("default", OutcomeSucceeded, 0, 0)
}

// stopSoon stops w in a test's cleanup, cancelling handlers still running after five
// seconds, so that a failed test never waits forever for a blocked handler.
func stopSoon(w *Worker) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.Stop(ctx)
}
