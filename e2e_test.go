package tock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock"
	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/shard/shardtest"
	"github.com/tockhq/tock/worker"
)

func TestMain(m *testing.M) { redistest.Main(m) }

type bundle struct {
	t      *testing.T
	b      redistest.Backend
	client *tock.Client
	store  *shard.Store
	rec    *recorder
}

func setup(t *testing.T, b redistest.Backend, cfg shard.Config) *bundle {
	t.Helper()
	rc := b.Client(t)
	cfg.Namespace = redistest.Namespace(t, b)
	if cfg.Shards == 0 {
		cfg.Shards = 8
	}
	c, err := tock.New(context.Background(), rc, cfg)
	require.NoError(t, err)
	// Registered before any dispatcher or worker: runs after they stopped.
	t.Cleanup(func() { shardtest.CheckCounts(t, c.Store()) })
	return &bundle{t: t, b: b, client: c, store: c.Store(), rec: newRecorder()}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func (tb *bundle) dispatcher(name string, ttl time.Duration) *dispatcher.Dispatcher {
	tb.t.Helper()
	d, err := dispatcher.New(dispatcher.Config{Store: tb.store, Name: name, LeaseTTL: ttl, Logger: testLogger(tb.t)})
	require.NoError(tb.t, err)
	require.NoError(tb.t, d.Start(context.Background()))
	tb.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = d.Stop(ctx)
	})
	return d
}

// worker starts a worker whose handlers are fn for every type in types.
func (tb *bundle) worker(cfg worker.Config, fn func(ctx context.Context, r *worker.Run) error, types ...string) *worker.Worker {
	tb.t.Helper()
	cfg.Store = tb.store
	cfg.Logger = testLogger(tb.t)
	cfg.ObserveFunc = tb.rec.observe
	if cfg.Sweep == 0 {
		cfg.Sweep = 200 * time.Millisecond
	}
	w, err := worker.New(cfg)
	require.NoError(tb.t, err)
	for _, typ := range types {
		w.HandleFunc(typ, fn)
	}
	require.NoError(tb.t, w.Start(context.Background()))
	tb.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

func noop(context.Context, *worker.Run) error { return nil }

// recorder collects finished attempts.
type recorder struct {
	mu      sync.Mutex
	results []worker.Result
	cond    chan struct{}
}

func newRecorder() *recorder { return &recorder{cond: make(chan struct{}, 1)} }

func (r *recorder) observe(res worker.Result) {
	r.mu.Lock()
	r.results = append(r.results, res)
	r.mu.Unlock()
}

func (r *recorder) all() []worker.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]worker.Result(nil), r.results...)
}

// succeeded counts successful attempts per run id.
func (r *recorder) succeeded() map[string]int {
	out := map[string]int{}
	for _, res := range r.all() {
		if res.Outcome == worker.OutcomeSucceeded && !res.Rejected {
			out[res.Run.ID]++
		}
	}
	return out
}

func (r *recorder) waitSucceeded(t *testing.T, n int, within time.Duration) map[string]int {
	t.Helper()
	var got map[string]int
	require.Eventually(t, func() bool {
		got = r.succeeded()
		return len(got) >= n
	}, within, 10*time.Millisecond, "want %d runs to succeed, have %d", n, len(got))
	return got
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestE2E_OneTimeJobsFireOnce(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{})
		ctx := ctxT(t)
		tb.dispatcher("d", time.Second)
		tb.worker(worker.Config{Concurrency: 4}, noop, "t")
		past := time.Now().Add(-time.Hour)
		jobs := []*job.Job{
			{ID: "now", Type: "t", Schedule: job.Schedule{Now: true}},
			{ID: "delay", Type: "t", Schedule: job.Schedule{Delay: 300 * time.Millisecond}},
			{ID: "at", Type: "t", Schedule: job.Schedule{At: time.Now().Add(500 * time.Millisecond)}},
			{ID: "past", Type: "t", Schedule: job.Schedule{At: past}},
		}
		res, err := tb.client.CreateMany(ctx, jobs)
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err)
			require.True(t, r.Created)
		}
		got := tb.rec.waitSucceeded(t, 4, 10*time.Second)
		for id, n := range got {
			require.Equal(t, 1, n, "run %s", id)
		}
		// The past job fired at once, its lateness counting from the time it asked for.
		for _, r := range tb.rec.all() {
			if r.Run.JobID == "past" {
				require.Equal(t, past.UnixMilli(), r.Run.Due.UnixMilli())
			}
			if r.Run.JobID == "at" {
				require.False(t, r.Run.StartedAt.Before(r.Run.Due), "started early")
			}
		}
		info, err := tb.client.Get(ctx, "delay")
		require.NoError(t, err)
		require.Equal(t, job.StateCompleted, info.State)
		require.False(t, info.Expires.IsZero(), "finished one-time job must expire")
		runs, err := tb.client.Runs(ctx, "delay")
		require.NoError(t, err)
		require.Len(t, runs, 1)
		require.Equal(t, job.OutcomeSucceeded, runs[0].Outcome)
		require.Equal(t, 1, runs[0].Attempt)
		require.NotEmpty(t, runs[0].Worker)
	})
}

func TestE2E_IdempotentCreateAndPayloadBytes(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{})
		ctx := ctxT(t)
		bin := []byte{0, 1, 2, 0xff, 0xfe, '\n', 0}
		first, err := tb.client.Create(ctx, &job.Job{ID: "bin", Type: "t", Payload: bin, Schedule: job.Schedule{Delay: time.Hour}})
		require.NoError(t, err)
		require.True(t, first.Created)
		again, err := tb.client.Create(ctx, &job.Job{ID: "bin", Type: "t", Payload: bin, Schedule: job.Schedule{Delay: time.Hour}})
		require.NoError(t, err)
		require.False(t, again.Created)
		require.False(t, again.Conflict)
		require.Equal(t, first.NextRunAt, again.NextRunAt)
		other, err := tb.client.Create(ctx, &job.Job{ID: "bin", Type: "t", Payload: []byte("x"), Schedule: job.Schedule{Delay: time.Hour}})
		require.NoError(t, err)
		require.False(t, other.Created)
		require.True(t, other.Conflict)
		_, err = tb.client.Create(ctx, &job.Job{ID: "empty", Type: "t", Schedule: job.Schedule{Now: true}})
		require.NoError(t, err)

		var fe *job.FieldError
		_, err = tb.client.Create(ctx, &job.Job{ID: "bad", Type: "t", Schedule: job.Schedule{Cron: "* * *"}})
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "schedule.cron", fe.Field)
		_, err = tb.client.Get(ctx, "bad")
		require.ErrorIs(t, err, tock.ErrNotFound, "a rejected job must not be stored")

		payloads := map[string][]byte{}
		var mu sync.Mutex
		tb.dispatcher("d", time.Second)
		tb.worker(worker.Config{}, func(_ context.Context, r *worker.Run) error {
			mu.Lock()
			payloads[r.JobID] = r.Payload
			mu.Unlock()
			return nil
		}, "t")
		_, err = tb.client.Trigger(ctx, "bin")
		require.NoError(t, err)
		tb.rec.waitSucceeded(t, 2, 10*time.Second)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, bin, payloads["bin"])
		require.Empty(t, payloads["empty"])
		info, err := tb.client.Get(ctx, "bin")
		require.NoError(t, err)
		require.Equal(t, bin, info.Payload)
	})
}

func TestE2E_CronFiresEveryOccurrenceOnce(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{})
		ctx := ctxT(t)
		_, err := tb.client.Create(ctx, &job.Job{ID: "tick", Type: "t", Schedule: job.Schedule{Cron: "*/1 * * * * *", TimeZone: "Europe/London"}})
		require.NoError(t, err)
		tb.dispatcher("d", time.Second)
		tb.worker(worker.Config{}, noop, "t")
		got := tb.rec.waitSucceeded(t, 3, 10*time.Second)
		for id, n := range got {
			require.Equal(t, 1, n, id)
		}
		for _, r := range tb.rec.all() {
			require.Zero(t, r.Run.Due.UnixMilli()%1000, "cron run due on a second boundary")
			require.False(t, r.Run.StartedAt.Before(r.Run.Due), "started early")
		}
		info, err := tb.client.Get(ctx, "tick")
		require.NoError(t, err)
		require.Equal(t, job.StateScheduled, info.State)
		require.True(t, info.NextRunAt.After(time.Now().Add(-2*time.Second)))
	})
}

func TestE2E_RetriesThenDeadLetter(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{})
		ctx := ctxT(t)
		retry := job.RetryPolicy{MaxAttempts: 3, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Jitter: -1}
		_, err := tb.client.CreateMany(ctx, []*job.Job{
			{ID: "flaky", Type: "flaky", Retry: retry, Schedule: job.Schedule{Now: true}},
			{ID: "doomed", Type: "doomed", Retry: retry, Schedule: job.Schedule{Now: true}},
		})
		require.NoError(t, err)
		tb.dispatcher("d", time.Second)
		tb.worker(worker.Config{}, func(_ context.Context, r *worker.Run) error {
			if r.Type == "flaky" && r.Attempt == 3 {
				return nil
			}
			return fmt.Errorf("boom %d", r.Attempt)
		}, "flaky", "doomed")
		require.Eventually(t, func() bool {
			info, err := tb.client.Get(ctx, "doomed")
			return err == nil && info.State == job.StateDead
		}, 10*time.Second, 10*time.Millisecond)
		require.Eventually(t, func() bool {
			info, err := tb.client.Get(ctx, "flaky")
			return err == nil && info.State == job.StateCompleted
		}, 10*time.Second, 10*time.Millisecond)
		runs, err := tb.client.Runs(ctx, "doomed")
		require.NoError(t, err)
		var outcomes []job.Outcome
		for _, r := range runs {
			outcomes = append(outcomes, r.Outcome)
		}
		require.Equal(t, []job.Outcome{job.OutcomeDead, job.OutcomeFailed, job.OutcomeFailed}, outcomes)
		require.Equal(t, "boom 3", runs[0].Error)
		require.Equal(t, 3, runs[0].Attempt)
		dead, err := tb.store.Client().Do(ctx, tb.store.Client().B().Zrange().Key(tb.store.Keys().Dead(tb.store.ShardOf("doomed"))).Min("0").Max("-1").Build()).AsStrSlice()
		require.NoError(t, err)
		require.Len(t, dead, 1)
		runs, err = tb.client.Runs(ctx, "flaky")
		require.NoError(t, err)
		require.Equal(t, job.OutcomeSucceeded, runs[0].Outcome)
		require.Equal(t, 3, runs[0].Attempt)
	})
}

func TestE2E_CancelSnoozeAndWorkerCancel(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{})
		ctx := ctxT(t)
		started := make(chan string, 10)
		var snoozed sync.Map
		tb.worker(worker.Config{Concurrency: 4}, func(ctx context.Context, r *worker.Run) error {
			switch r.JobID {
			case "running":
				started <- r.JobID
				<-ctx.Done()
				return ctx.Err()
			case "snooze":
				if _, again := snoozed.LoadOrStore(r.ID, true); !again {
					return worker.Snooze(50 * time.Millisecond)
				}
				require.Equal(t, 1, r.Attempt, "a snooze does not use an attempt")
				return nil
			case "give-up":
				return worker.Cancel(errors.New("bad payload"))
			}
			return nil
		}, "t")
		tb.dispatcher("d", time.Second)
		_, err := tb.client.CreateMany(ctx, []*job.Job{
			{ID: "queued", Type: "t", Schedule: job.Schedule{Delay: time.Hour}},
			{ID: "running", Type: "t", Schedule: job.Schedule{Now: true}},
			{ID: "snooze", Type: "t", Schedule: job.Schedule{Now: true}},
			{ID: "give-up", Type: "t", Schedule: job.Schedule{Now: true}},
		})
		require.NoError(t, err)
		st, changed, err := tb.client.Cancel(ctx, "queued")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, job.StateCancelled, st)
		_, changed, err = tb.client.Cancel(ctx, "queued")
		require.NoError(t, err)
		require.False(t, changed, "second cancel is a no-op")

		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the blocking run did not start")
		}
		_, changed, err = tb.client.Cancel(ctx, "running")
		require.NoError(t, err)
		require.True(t, changed)
		require.Eventually(t, func() bool {
			runs, err := tb.client.Runs(ctx, "running")
			return err == nil && len(runs) > 0 && runs[0].Outcome == job.OutcomeCancelled && runs[0].Attempt == 1
		}, 10*time.Second, 10*time.Millisecond)
		require.Eventually(t, func() bool {
			info, err := tb.client.Get(ctx, "snooze")
			return err == nil && info.State == job.StateCompleted
		}, 10*time.Second, 10*time.Millisecond)
		require.Eventually(t, func() bool {
			info, err := tb.client.Get(ctx, "give-up")
			return err == nil && info.State == job.StateCancelled
		}, 10*time.Second, 10*time.Millisecond)
		runs, err := tb.client.Runs(ctx, "give-up")
		require.NoError(t, err)
		require.Len(t, runs, 1, "worker.Cancel must not retry")
		info, err := tb.client.Get(ctx, "running")
		require.NoError(t, err)
		require.Equal(t, job.StateCancelled, info.State)
		require.Zero(t, info.ActiveRuns)
	})
}

func TestE2E_StrictPriorityOrder(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{Shards: 1})
		ctx := ctxT(t)
		var jobs []*job.Job
		for i := 0; i < 30; i++ {
			p := i % 10
			jobs = append(jobs, &job.Job{ID: fmt.Sprintf("p%d-%02d", p, i), Type: "t", Priority: &p, Schedule: job.Schedule{Now: true}})
		}
		_, err := tb.client.CreateMany(ctx, jobs)
		require.NoError(t, err)
		var mu sync.Mutex
		var order []int
		tb.worker(worker.Config{Concurrency: 1}, func(_ context.Context, r *worker.Run) error {
			mu.Lock()
			order = append(order, int(r.JobID[1]-'0'))
			mu.Unlock()
			return nil
		}, "t")
		tb.rec.waitSucceeded(t, 30, 10*time.Second)
		mu.Lock()
		defer mu.Unlock()
		require.True(t, sort.SliceIsSorted(order, func(i, j int) bool { return order[i] > order[j] }), "order %v", order)
	})
}

func TestE2E_DispatchersRaceFireOnce(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{Shards: 16})
		ctx := ctxT(t)
		for _, name := range []string{"alpha", "beta", "gamma"} {
			tb.dispatcher(name, 600*time.Millisecond)
		}
		tb.worker(worker.Config{Concurrency: 50}, noop, "t")
		var jobs []*job.Job
		start := time.Now().Add(200 * time.Millisecond)
		for i := 0; i < 300; i++ {
			jobs = append(jobs, &job.Job{ID: fmt.Sprintf("j%03d", i), Type: "t",
				Schedule: job.Schedule{At: start.Add(time.Duration(i) * 5 * time.Millisecond)}})
		}
		jobs = append(jobs, &job.Job{ID: "cron", Type: "t", Schedule: job.Schedule{Cron: "* * * * * *"}})
		_, err := tb.client.CreateMany(ctx, jobs)
		require.NoError(t, err)
		got := tb.rec.waitSucceeded(t, 303, 15*time.Second)
		for id, n := range got {
			require.Equal(t, 1, n, "run %s fired %d times", id, n)
		}
	})
}

func TestE2E_DispatcherKilledIsReplaced(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{Shards: 8})
		ctx := ctxT(t)
		ttl := 600 * time.Millisecond
		d1 := tb.dispatcher("first", ttl)
		require.Eventually(t, func() bool { return len(d1.Owned()) == 8 }, 5*time.Second, 10*time.Millisecond)
		d2 := tb.dispatcher("second", ttl)
		require.Eventually(t, func() bool { return len(d1.Owned())+len(d2.Owned()) == 8 && len(d2.Owned()) > 0 }, 5*time.Second, 10*time.Millisecond)
		tb.worker(worker.Config{Concurrency: 20}, noop, "t")

		var jobs []*job.Job
		start := time.Now()
		for i := 0; i < 200; i++ {
			jobs = append(jobs, &job.Job{ID: fmt.Sprintf("k%03d", i), Type: "t",
				Schedule: job.Schedule{At: start.Add(time.Duration(i) * 15 * time.Millisecond)}})
		}
		_, err := tb.client.CreateMany(ctx, jobs)
		require.NoError(t, err)
		time.Sleep(time.Second) // let part of the jobs fire before the kill
		d1.Kill()               // no lease released: d2 must wait for the leases to expire
		killed := time.Now()
		require.Eventually(t, func() bool {
			if b.Mini != nil {
				b.Mini.FastForward(10 * time.Millisecond) // miniredis expires keys only when told
			}
			return len(d2.Owned()) == 8
		}, 10*ttl, 10*time.Millisecond)
		t.Logf("replaced after %s", time.Since(killed))
		got := tb.rec.waitSucceeded(t, 200, 15*time.Second)
		for id, n := range got {
			require.Equal(t, 1, n, "run %s", id)
		}
	})
}

func TestE2E_LostWorkerRunRedelivered(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{Shards: 2})
		ctx := ctxT(t)
		_, err := tb.client.Create(ctx, &job.Job{ID: "lost", Type: "t", Visibility: time.Second, Schedule: job.Schedule{Now: true}})
		require.NoError(t, err)
		id := tb.store.ShardOf("lost")
		// A worker claims the run and dies: no heartbeat, no ack.
		claimed, err := tb.store.Claim(ctx, id, "default", 10, "dead-worker", "n1")
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		tb.dispatcher("d", time.Second)
		tb.worker(worker.Config{}, noop, "t")
		got := tb.rec.waitSucceeded(t, 1, 10*time.Second)
		require.Equal(t, 1, got[claimed[0].Member])
		res := tb.rec.all()
		require.Equal(t, 2, res[len(res)-1].Run.Attempt)
		// The dead worker's late ack is rejected.
		errs, err := tb.store.FinishRuns(ctx, id, []shard.Finish{{Member: claimed[0].Member, Token: claimed[0].Token, Outcome: shard.Succeeded}})
		require.NoError(t, err)
		require.ErrorIs(t, errs[0], shard.ErrTokenMismatch)
		runs, err := tb.client.Runs(ctx, "lost")
		require.NoError(t, err)
		require.Equal(t, []job.Outcome{job.OutcomeSucceeded, job.OutcomeLost}, []job.Outcome{runs[0].Outcome, runs[1].Outcome})
	})
}

func TestE2E_LongRunKeepsLeaseByHeartbeat(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{})
		ctx := ctxT(t)
		tb.dispatcher("d", time.Second)
		tb.worker(worker.Config{}, func(ctx context.Context, r *worker.Run) error {
			select {
			case <-time.After(2500 * time.Millisecond): // 2.5× the visibility timeout
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, "t")
		_, err := tb.client.Create(ctx, &job.Job{ID: "long", Type: "t", Visibility: time.Second, Schedule: job.Schedule{Now: true}})
		require.NoError(t, err)
		got := tb.rec.waitSucceeded(t, 1, 10*time.Second)
		require.Len(t, got, 1)
		runs, err := tb.client.Runs(ctx, "long")
		require.NoError(t, err)
		require.Len(t, runs, 1, "never redelivered")
		require.Equal(t, 1, runs[0].Attempt)
	})
}

func TestE2E_WorkerStopHandsBack(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{})
		ctx := ctxT(t)
		started := make(chan struct{}, 1)
		w := tb.worker(worker.Config{}, func(ctx context.Context, r *worker.Run) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}, "t")
		tb.dispatcher("d", time.Second)
		_, err := tb.client.Create(ctx, &job.Job{ID: "slow", Type: "t", Schedule: job.Schedule{Now: true}})
		require.NoError(t, err)
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the blocking run did not start")
		}
		sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, w.Stop(sctx), context.DeadlineExceeded)
		// Handed back: ready again, attempt not used.
		tb2 := tb.worker(worker.Config{}, noop, "t")
		_ = tb2
		require.Eventually(t, func() bool {
			info, err := tb.client.Get(ctx, "slow")
			return err == nil && info.State == job.StateCompleted
		}, 10*time.Second, 10*time.Millisecond)
		runs, err := tb.client.Runs(ctx, "slow")
		require.NoError(t, err)
		require.Len(t, runs, 1)
		require.Equal(t, 1, runs[0].Attempt)
	})
}

func TestE2E_PauseResumeTrigger(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{})
		ctx := ctxT(t)
		tb.dispatcher("d", time.Second)
		_, err := tb.client.Create(ctx, &job.Job{ID: "p", Type: "t", Schedule: job.Schedule{Delay: 200 * time.Millisecond}})
		require.NoError(t, err)
		st, changed, err := tb.client.Pause(ctx, "p")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, job.StatePaused, st)
		_, err = tb.client.Trigger(ctx, "p")
		var se *shard.StateError
		require.ErrorAs(t, err, &se)
		tb.worker(worker.Config{}, noop, "t")
		time.Sleep(500 * time.Millisecond) // past its time: a paused job must not fire
		require.Empty(t, tb.rec.all())
		st, changed, err = tb.client.Resume(ctx, "p")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, job.StateScheduled, st)
		tb.rec.waitSucceeded(t, 1, 10*time.Second)

		_, err = tb.client.Create(ctx, &job.Job{ID: "c", Type: "t", Schedule: job.Schedule{Cron: "0 0 1 1 *"}})
		require.NoError(t, err)
		_, err = tb.client.Trigger(ctx, "c")
		require.NoError(t, err)
		tb.rec.waitSucceeded(t, 2, 10*time.Second)
		info, err := tb.client.Get(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, job.StateScheduled, info.State, "a trigger keeps the schedule")
		require.Equal(t, 1, info.NextRunAt.Day())
	})
}

func TestE2E_OverlapSkip(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{})
		ctx := ctxT(t)
		var mu sync.Mutex
		running, maxRunning := 0, 0
		tb.worker(worker.Config{Concurrency: 4}, func(ctx context.Context, r *worker.Run) error {
			mu.Lock()
			running++
			maxRunning = max(maxRunning, running)
			mu.Unlock()
			time.Sleep(1500 * time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			return nil
		}, "t")
		tb.dispatcher("d", time.Second)
		_, err := tb.client.Create(ctx, &job.Job{ID: "o", Type: "t", Schedule: job.Schedule{Cron: "* * * * * *"}})
		require.NoError(t, err)
		tb.rec.waitSucceeded(t, 2, 15*time.Second)
		mu.Lock()
		require.Equal(t, 1, maxRunning, "overlap=skip never runs two at once")
		mu.Unlock()
		runs, err := tb.client.Runs(ctx, "o")
		require.NoError(t, err)
		skipped := 0
		for _, r := range runs {
			if r.Outcome == job.OutcomeSkipped {
				skipped++
			}
		}
		require.Positive(t, skipped)
	})
}

func TestE2E_SkewedLocalClock(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		skew := 3 * time.Hour
		tb := setup(t, b, shard.Config{Clock: func() time.Time { return time.Now().Add(skew) }})
		ctx := ctxT(t)
		tb.dispatcher("d", time.Second)
		tb.worker(worker.Config{}, noop, "t")
		_, err := tb.client.CreateMany(ctx, []*job.Job{
			{ID: "cron", Type: "t", Schedule: job.Schedule{Cron: "* * * * * *"}},
			{ID: "delay", Type: "t", Schedule: job.Schedule{Delay: 300 * time.Millisecond}},
		})
		require.NoError(t, err)
		tb.rec.waitSucceeded(t, 3, 10*time.Second)
		for _, r := range tb.rec.all() {
			late := r.Run.StartedAt.Sub(r.Run.Due)
			require.GreaterOrEqual(t, late, time.Duration(0))
			require.Less(t, late, 2*time.Second, "fired %s late with a local clock %s off", late, skew)
		}
	})
}
