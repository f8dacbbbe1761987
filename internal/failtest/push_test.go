//go:build linux

package failtest

// The push executor's failures, on the standalone redis-server of redistest (no
// cluster: what is tested is the executor, not Redis):
//
//   - kill -9 executor: two executor processes (this test binary started again) deliver
//     push jobs created at a steady rate to a sink in the test; one is killed while it
//     has deliveries in flight. The runs it held come back after their visibility
//     timeout, as a new attempt, and are delivered by the other.
//   - endpoint 500: the sink answers 500 until the host's breaker opens, then 200. The
//     breaker must open, then close after its cooldown on a successful probe.
//
// In both: no accepted job is lost (each has exactly one succeeded run in its
// history, delivered with a 2xx), and none is acked twice (no attempt of a run is
// answered 2xx twice, and no run records two successes). Deliveries of a run beyond
// its first 2xx (a new attempt after the kill) are reported, not asserted: push is at
// least once.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/executor"
	"github.com/tockhq/tock/internal/egress"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/signature"
)

const (
	pushSecret   = "failtest-push-secret-0123456789"
	pushRate     = 100 // push jobs created per second
	pushFor      = 4 * time.Second
	pushSettle   = 30 * time.Second // how long to wait for the last deliveries
	pushDelivery = 50 * time.Millisecond
)

// newExecutor returns an executor allowed to reach loopback addresses only.
func newExecutor(store *shard.Store, name string, breaker executor.BreakerConfig, m executor.Metrics, logger *slog.Logger) (*executor.Executor, error) {
	allow, err := egress.Parse([]string{"127.0.0.0/8"})
	if err != nil {
		return nil, err
	}
	return executor.New(executor.Config{Store: store, Secrets: []string{pushSecret}, Egress: allow, Concurrency: 32,
		PerHost: 32, ID: name, Sweep: 500 * time.Millisecond, Breaker: breaker, Metrics: m, Logger: logger})
}

// runExecutor is the executor child process: it delivers until SIGTERM.
func runExecutor(ctx context.Context, store *shard.Store, logger *slog.Logger) error {
	ex, err := newExecutor(store, os.Getenv(envName), executor.BreakerConfig{Disabled: true}, nil, logger)
	if err != nil {
		return err
	}
	if err := ex.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return ex.Stop(sctx)
}

// sink is the push target: it checks every signature and records the attempts it
// answered 2xx, per job.
type sink struct {
	srv     *httptest.Server
	failing atomic.Bool // answer 500
	hold    time.Duration
	mu      sync.Mutex
	ok      map[string][]int // job id: attempts answered 2xx
	failed  atomic.Int64     // deliveries answered 500
	badSig  atomic.Int64
	got     atomic.Int64 // deliveries answered 2xx
}

func newSink(t *testing.T, hold time.Duration) *sink {
	s := &sink{ok: map[string][]int{}, hold: hold}
	secrets := [][]byte{[]byte(pushSecret)}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 1024)
		n, _ := r.Body.Read(buf)
		if signature.Verify(r.Header.Get("Tock-Signature"), buf[:n], secrets, time.Now(), 0) != nil {
			s.badSig.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if s.failing.Load() {
			s.failed.Add(1)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		time.Sleep(s.hold)
		att, _ := strconv.Atoi(r.Header.Get("Tock-Attempt"))
		s.mu.Lock()
		id := r.Header.Get("Tock-Job-Id")
		s.ok[id] = append(s.ok[id], att)
		s.mu.Unlock()
		s.got.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// pushFigures is what a push scenario measured.
type pushFigures struct {
	Scenario    string `json:"scenario"`
	Created     int    `json:"created"`
	Delivered   int    `json:"delivered"`   // 2xx answers, all attempts
	Failed      int    `json:"failed"`      // 500 answers
	Lost        int    `json:"lost"`        // accepted jobs without a succeeded run delivered 2xx
	AckedTwice  int    `json:"acked_twice"` // an attempt answered 2xx twice, or two succeeded runs
	Redelivered int    `json:"redelivered"` // 2xx answers beyond a job's first (a new attempt)
	BadSigs     int    `json:"bad_signatures"`
	Transitions string `json:"transitions,omitempty"` // the breaker's, in order
}

// transitions records the breaker transitions the in-process executor saw.
type transitions struct {
	mu     sync.Mutex
	states []string
	opened chan struct{}
	once   sync.Once
}

func (tr *transitions) BreakerState(string, string) {}
func (tr *transitions) BreakerTransition(_, state string) {
	tr.mu.Lock()
	tr.states = append(tr.states, state)
	tr.mu.Unlock()
	if state == shard.BreakerOpen {
		tr.once.Do(func() { close(tr.opened) })
	}
}

func (tr *transitions) list() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.states...)
}

func TestPushFailures(t *testing.T) {
	b := redistest.ServerBackend(t)
	rc := b.Client(t)

	t.Run("kill -9 executor", func(t *testing.T) {
		ns := redistest.Namespace(t, b)
		store, err := shard.Open(context.Background(), rc, shard.Config{Namespace: ns, Shards: shards})
		require.NoError(t, err)
		s := newSink(t, pushDelivery)
		d := &deployment{t: t, ns: ns, dir: t.TempDir()}
		for _, n := range []string{"executor-a", "executor-b"} {
			d.workers = append(d.workers, d.startExecutor(n, b.Addrs))
		}
		stopD := startDispatcher(t, store)
		defer stopD()
		// The fault: once deliveries flow, kill executor-a (with 32 slots and 50 ms a
		// delivery it holds some in flight at any time).
		fault := func() error {
			for s.got.Load() < 20 {
				time.Sleep(10 * time.Millisecond)
			}
			kill(d.workers[0])
			return nil
		}
		f := runPush(t, store, s, fault)
		f.Scenario = "kill -9 executor"
		d.stopAll()
		reportPush(t, f)
		require.Zero(t, f.Lost, "accepted jobs never delivered")
		require.Zero(t, f.AckedTwice)
		require.Zero(t, f.BadSigs)
	})

	t.Run("endpoint 500", func(t *testing.T) {
		ns := redistest.Namespace(t, b)
		store, err := shard.Open(context.Background(), rc, shard.Config{Namespace: ns, Shards: shards})
		require.NoError(t, err)
		s := newSink(t, 0)
		s.failing.Store(true)
		tr := &transitions{opened: make(chan struct{})}
		// The default ProbeTimeout (2m): the runs refused while the half-open probe is
		// out ask again after ProbeWait, so they go soon after the probe closes the
		// breaker (within pushSettle).
		ex, err := newExecutor(store, "executor-in-test", executor.BreakerConfig{Failures: 5, Cooldown: time.Second}, tr, nil)
		require.NoError(t, err)
		require.NoError(t, ex.Start(context.Background()))
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, ex.Stop(sctx))
		}()
		stopD := startDispatcher(t, store)
		defer stopD()
		// The fault is there from the start; the endpoint recovers once the breaker
		// has opened.
		fault := func() error {
			select {
			case <-tr.opened:
			case <-time.After(pushSettle):
				return fmt.Errorf("the breaker never opened (%d deliveries answered 500)", s.failed.Load())
			}
			s.failing.Store(false)
			return nil
		}
		f := runPush(t, store, s, fault)
		f.Scenario = "endpoint 500"
		states := tr.list()
		f.Transitions = strings.Join(states, ",")
		reportPush(t, f)
		require.Positive(t, f.Failed)
		require.Zero(t, f.Lost, "accepted jobs never delivered")
		require.Zero(t, f.AckedTwice)
		require.Zero(t, f.BadSigs)
		require.Contains(t, states, shard.BreakerOpen)
		require.Equal(t, shard.BreakerClosed, states[len(states)-1], "the breaker closes once the endpoint answers: %v", states)
		info, err := ex.Breakers().Allow(context.Background(), strings.TrimPrefix(s.srv.URL, "http://"))
		require.NoError(t, err)
		require.True(t, info.Allowed)
		require.Equal(t, shard.BreakerClosed, info.State)
	})
}

// startExecutor starts this test binary as an executor process on the standalone server.
func (d *deployment) startExecutor(name string, addrs []string) *proc {
	exe, err := os.Executable()
	require.NoError(d.t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envRole+"=executor", envName+"="+name,
		envSeeds+"="+strings.Join(addrs, ","), envNamespace+"="+d.ns)
	return d.start(name, cmd)
}

// startDispatcher runs a dispatcher in the test process.
func startDispatcher(t *testing.T, store *shard.Store) func() {
	d, err := dispatcher.New(dispatcher.Config{Store: store, Name: "dispatcher-in-test"})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Stop(sctx)
	}
}

// runPush creates push jobs at pushRate for pushFor while fault runs, waits until every
// accepted job is delivered and nothing is left scheduled, ready or in flight (or
// pushSettle passed), and counts.
func runPush(t *testing.T, store *shard.Store, s *sink, fault func() error) pushFigures {
	ctx := context.Background()
	faulted := make(chan error, 1)
	go func() { faulted <- fault() }()
	var accepted []string
	start := time.Now()
	tick := time.NewTicker(time.Second / pushRate)
	for n := 0; time.Since(start) < pushFor; n++ {
		<-tick.C
		id := fmt.Sprintf("p%05d", n)
		res, err := store.Create(ctx, []*job.Job{{ID: id, Target: &job.Target{URL: s.srv.URL + "/hook", Timeout: 5 * time.Second},
			Payload: []byte(`{"n":` + strconv.Itoa(n) + `}`), Visibility: visibility,
			Retry:    job.RetryPolicy{InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second},
			Schedule: job.Schedule{Now: true}}})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		accepted = append(accepted, id)
	}
	tick.Stop()
	require.NoError(t, <-faulted)

	deadline := time.Now().Add(pushSettle)
	for {
		s.mu.Lock()
		missing := 0
		for _, id := range accepted {
			if len(s.ok[id]) == 0 {
				missing++
			}
		}
		s.mu.Unlock()
		if missing == 0 && drained(ctx, store) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	f := pushFigures{Created: len(accepted), Delivered: int(s.got.Load()), Failed: int(s.failed.Load()), BadSigs: int(s.badSig.Load())}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range accepted {
		atts := s.ok[id]
		seen := map[int]bool{}
		for _, a := range atts {
			if seen[a] {
				f.AckedTwice++
			}
			seen[a] = true
		}
		f.Redelivered += max(len(atts)-1, 0)
		runs, err := store.Runs(ctx, id)
		require.NoError(t, err)
		succeeded := 0
		for _, r := range runs {
			if r.Outcome == job.OutcomeSucceeded {
				succeeded++
				if !seen[r.Attempt] {
					f.Lost++ // recorded succeeded without a 2xx for that attempt
				}
			}
		}
		switch {
		case succeeded == 0 || len(atts) == 0:
			if f.Lost == 0 {
				info, err := store.Get(ctx, id)
				qs, _ := store.Queues(ctx)
				t.Logf("first lost job %s: %+v %v; runs %+v; queues %+v", id, info, err, runs, qs)
			}
			f.Lost++
		case succeeded > 1:
			f.AckedTwice++
		}
	}
	return f
}

func reportPush(t *testing.T, f pushFigures) {
	b, err := json.Marshal(f)
	require.NoError(t, err)
	t.Logf("figures: %s", b)
	if path := os.Getenv("TOCK_FAILTEST_REPORT"); path != "" {
		out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		require.NoError(t, err)
		defer out.Close()
		_, err = fmt.Fprintf(out, "%s\n", b)
		require.NoError(t, err)
	}
}
