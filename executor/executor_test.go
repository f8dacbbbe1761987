package executor_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
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
	"github.com/tockhq/tock/worker"
)

const (
	secretNew = "new-secret-0123456789"
	secretOld = "old-secret-0123456789"
)

type bundle struct {
	store *shard.Store
	exec  *executor.Executor
}

// setup opens a store on b and starts a dispatcher and an executor with cfg (Store,
// Secrets and an egress policy allowing loopback filled in when unset).
func setup(t *testing.T, b redistest.Backend, cfg executor.Config) *bundle {
	t.Helper()
	ctx := context.Background()
	s, err := shard.Open(ctx, b.Client(t), shard.Config{Namespace: redistest.Namespace(t, b), Shards: 2})
	require.NoError(t, err)
	d, err := dispatcher.New(dispatcher.Config{Store: s, Name: "disp"})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	cfg.Store = s
	if cfg.Secrets == nil {
		cfg.Secrets = []string{secretNew, secretOld}
	}
	if cfg.Egress == nil {
		cfg.Egress, err = egress.Parse([]string{"127.0.0.0/8"})
		require.NoError(t, err)
	}
	if cfg.HostBusyDelay == 0 {
		cfg.HostBusyDelay = 10 * time.Millisecond
	}
	cfg.Sweep = 50 * time.Millisecond
	e, err := executor.New(cfg)
	require.NoError(t, err)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() { require.NoError(t, e.Stop(context.Background())) })
	return &bundle{store: s, exec: e}
}

func (tb *bundle) create(t *testing.T, j *job.Job) {
	t.Helper()
	if j.Schedule == (job.Schedule{}) {
		j.Schedule.Now = true
	}
	res, err := tb.store.Create(context.Background(), []*job.Job{j})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.True(t, res[0].Created)
}

// waitRun waits until the job's history has an entry with one of outcomes and returns it.
func (tb *bundle) waitRun(t *testing.T, jobID string, outcomes ...job.Outcome) job.Run {
	t.Helper()
	var got job.Run
	require.Eventually(t, func() bool {
		runs, err := tb.store.Runs(context.Background(), jobID)
		require.NoError(t, err)
		for _, r := range runs {
			for _, o := range outcomes {
				if r.Outcome == o {
					got = r
					return true
				}
			}
		}
		return false
	}, 15*time.Second, 5*time.Millisecond, "job %s: no run %v", jobID, outcomes)
	return got
}

func TestExecutor_Delivers(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		type hit struct {
			header http.Header
			body   []byte
			method string
		}
		hits := make(chan hit, 10)
		sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			hits <- hit{r.Header.Clone(), body, r.Method}
			w.WriteHeader(201)
			_, _ = w.Write([]byte(`{"id":"m-77"}` + strings.Repeat(" ", 100)))
		}))
		defer sink.Close()
		tb := setup(t, b, executor.Config{MaxResult: 20})
		tb.create(t, &job.Job{ID: "ok", Payload: []byte(`{"to":"a"}`), Target: &job.Target{URL: sink.URL + "/hook?x=1", Method: "PUT",
			Headers: map[string]string{"X-Key": "k"}}})
		h := <-hits
		require.Equal(t, "PUT", h.method)
		require.Equal(t, `{"to":"a"}`, string(h.body))
		require.Equal(t, "k", h.header.Get("X-Key"))
		require.Equal(t, "application/json", h.header.Get("Content-Type"))
		require.Equal(t, "ok", h.header.Get("Tock-Job-Id"))
		require.True(t, strings.HasPrefix(h.header.Get("Tock-Run-Id"), "ok:"))
		require.Equal(t, "1", h.header.Get("Tock-Attempt"))
		due, err := time.Parse(time.RFC3339Nano, h.header.Get("Tock-Due"))
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), due, time.Minute)
		sig := h.header.Get("Tock-Signature")
		now := time.Now()
		// Signed with the first secret: verifies with it, and with both during a rotation.
		require.NoError(t, worker.VerifySignature(sig, h.body, []string{secretNew}, 0, now))
		require.NoError(t, worker.VerifySignature(sig, h.body, []string{secretOld, secretNew}, 0, now))
		require.ErrorIs(t, worker.VerifySignature(sig, h.body, []string{secretOld}, 0, now), worker.ErrSignatureMismatch)
		require.ErrorIs(t, worker.VerifySignature(sig, []byte("x"), []string{secretNew}, 0, now), worker.ErrSignatureMismatch)
		require.ErrorIs(t, worker.VerifySignature(sig, h.body, []string{secretNew}, time.Minute, now.Add(time.Hour)), worker.ErrSignatureExpired)

		tb.waitRun(t, "ok", job.OutcomeSucceeded)
		// Store.Runs reads a job's history and its results in several reads: a read
		// while the job leaves its packed form may miss the result, so read until it shows.
		var r job.Run
		require.Eventually(t, func() bool {
			r = tb.waitRun(t, "ok", job.OutcomeSucceeded)
			return r.Result != nil
		}, 5*time.Second, 5*time.Millisecond)
		require.Equal(t, `{"id":"m-77"}       `, string(r.Result), "the body, cut at MaxResult")
	})
}

func TestExecutor_Outcomes(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		var redirected atomic.Int64
		block := make(chan struct{})
		sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/busy":
				w.Header().Set("Retry-After", "3600")
				w.WriteHeader(503)
			case "/limited":
				w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
				w.WriteHeader(429)
			case "/error":
				w.WriteHeader(500)
				_, _ = w.Write([]byte("boom\nhere"))
			case "/503":
				w.WriteHeader(503) // no Retry-After: a failed attempt
			case "/redirect":
				http.Redirect(w, r, "/landing", http.StatusFound)
			case "/landing":
				redirected.Add(1)
			case "/slow":
				select {
				case <-block:
				case <-r.Context().Done():
				}
			}
		}))
		defer sink.Close()
		defer close(block)
		tb := setup(t, b, executor.Config{Breaker: executor.BreakerConfig{Disabled: true}})
		one := job.RetryPolicy{MaxAttempts: 1}
		tb.create(t, &job.Job{ID: "busy", Target: &job.Target{URL: sink.URL + "/busy"}, Retry: one})
		tb.create(t, &job.Job{ID: "limited", Target: &job.Target{URL: sink.URL + "/limited"}, Retry: one})
		tb.create(t, &job.Job{ID: "error", Target: &job.Target{URL: sink.URL + "/error"}, Retry: job.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Hour}})
		tb.create(t, &job.Job{ID: "dead", Target: &job.Target{URL: sink.URL + "/503"}, Retry: one})
		tb.create(t, &job.Job{ID: "redirect", Target: &job.Target{URL: sink.URL + "/redirect"}, Retry: one})
		tb.create(t, &job.Job{ID: "slow", Target: &job.Target{URL: sink.URL + "/slow", Timeout: job.MinTargetTimeout}, Retry: one})

		ctx := context.Background()
		for _, id := range []string{"busy", "limited"} {
			// Snoozed for the Retry-After: with one attempt allowed, not dead.
			r := tb.waitRun(t, id, job.OutcomeSnoozed, job.OutcomeDead)
			require.Equal(t, job.OutcomeSnoozed, r.Outcome, id)
			info, err := tb.store.Get(ctx, id)
			require.NoError(t, err)
			require.NotEqual(t, job.StateDead, info.State, id)
			require.WithinDuration(t, time.Now().Add(time.Hour), info.RetryAt, 10*time.Minute, id)
		}
		r := tb.waitRun(t, "error", job.OutcomeFailed)
		require.Equal(t, "POST "+strings.TrimPrefix(sink.URL, "http://")+": HTTP 500: boom here", r.Error)
		info, err := tb.store.Get(ctx, "error")
		require.NoError(t, err)
		require.Equal(t, job.StateRetrying, info.State)

		r = tb.waitRun(t, "dead", job.OutcomeDead)
		require.Contains(t, r.Error, "HTTP 503")
		r = tb.waitRun(t, "redirect", job.OutcomeDead)
		require.Contains(t, r.Error, "HTTP 302")
		require.Zero(t, redirected.Load(), "the redirect is not followed")
		r = tb.waitRun(t, "slow", job.OutcomeDead)
		require.Contains(t, r.Error, "timeout")
	})
}

// A host whose endpoint hangs holds only its own slots: another host's runs go.
func TestExecutor_SlowHostDoesNotBlockOthers(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		block := make(chan struct{})
		var slowHits atomic.Int64
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			slowHits.Add(1)
			select {
			case <-block:
			case <-r.Context().Done():
			}
		}))
		defer slow.Close()
		defer close(block)
		fastHits := make(chan string, 10)
		fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fastHits <- r.Header.Get("Tock-Job-Id")
		}))
		defer fast.Close()
		tb := setup(t, b, executor.Config{Concurrency: 4, PerHost: 2})
		for i := range 6 {
			tb.create(t, &job.Job{ID: "slow-" + strconv.Itoa(i), Target: &job.Target{URL: slow.URL, Timeout: time.Hour}})
		}
		require.Eventually(t, func() bool { return slowHits.Load() == 2 }, 10*time.Second, 5*time.Millisecond)
		for i := range 3 {
			tb.create(t, &job.Job{ID: "fast-" + strconv.Itoa(i), Target: &job.Target{URL: fast.URL}})
		}
		got := map[string]bool{}
		for range 3 {
			got[<-fastHits] = true
		}
		require.Len(t, got, 3)
		require.EqualValues(t, 2, slowHits.Load(), "at most PerHost deliveries to the slow host")
	})
}

// A host name that resolves to loopback is refused when dialled, though its name is
// allowed: a failed attempt that never reaches the sink.
func TestExecutor_EgressAfterResolution(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		var hits atomic.Int64
		sink := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
		defer sink.Close()
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(sink.URL, "http://"))
		p, err := egress.Parse([]string{"sink.test"})
		require.NoError(t, err)
		p.LookupFunc = func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		require.NoError(t, p.CheckURL("http://sink.test:"+port+"/"), "the name passes the create check")
		tb := setup(t, b, executor.Config{Egress: p})
		tb.create(t, &job.Job{ID: "rebind", Target: &job.Target{URL: "http://sink.test:" + port + "/"}, Retry: job.RetryPolicy{MaxAttempts: 1}})
		r := tb.waitRun(t, "rebind", job.OutcomeDead)
		require.Contains(t, r.Error, "loopback")
		require.Zero(t, hits.Load())
	})
}

// After Failures failed deliveries the host's breaker opens: the next run is snoozed
// without a request, and the breaker reads open.
func TestExecutor_BreakerOpens(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		var hits atomic.Int64
		sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			hits.Add(1)
			w.WriteHeader(500)
		}))
		defer sink.Close()
		tb := setup(t, b, executor.Config{Breaker: executor.BreakerConfig{Failures: 2, Cooldown: time.Hour}})
		for i := range 2 {
			id := "f" + strconv.Itoa(i)
			tb.create(t, &job.Job{ID: id, Target: &job.Target{URL: sink.URL}, Retry: job.RetryPolicy{MaxAttempts: 1}})
			tb.waitRun(t, id, job.OutcomeDead)
		}
		tb.create(t, &job.Job{ID: "held", Target: &job.Target{URL: sink.URL}, Retry: job.RetryPolicy{MaxAttempts: 1}})
		r := tb.waitRun(t, "held", job.OutcomeSnoozed, job.OutcomeDead)
		require.Equal(t, job.OutcomeSnoozed, r.Outcome)
		require.EqualValues(t, 2, hits.Load())
		bs, err := tb.store.Breakers(context.Background(), 0)
		require.NoError(t, err)
		require.Len(t, bs, 1)
		require.Equal(t, strings.TrimPrefix(sink.URL, "http://"), bs[0].Host)
		require.Equal(t, shard.BreakerOpen, bs[0].State)
	})
}

// Runs that arrive while a host's breaker is open are held; once its half-open probe
// succeeds they go within about a second (BreakerConfig.ProbeWait), not at the probe's
// timeout (2 minutes by default), which is when runs refused while the probe was out
// used to come back (issue 24).
func TestExecutor_BreakerProbeReleasesHeldRuns(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		var failing, probed atomic.Bool
		failing.Store(true)
		var mu sync.Mutex
		delivered := map[string]time.Time{}
		var probeDone atomic.Int64
		sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if failing.Load() {
				w.WriteHeader(500)
				return
			}
			if probed.CompareAndSwap(false, true) {
				// The probe is out a while: the other held runs come back meanwhile.
				time.Sleep(300 * time.Millisecond)
				defer probeDone.Store(time.Now().UnixNano())
			}
			mu.Lock()
			delivered[r.Header.Get("Tock-Job-Id")] = time.Now()
			mu.Unlock()
			w.WriteHeader(200)
		}))
		defer sink.Close()
		tb := setup(t, b, executor.Config{Breaker: executor.BreakerConfig{Failures: 2, Cooldown: 300 * time.Millisecond}})
		for i := range 2 {
			id := "f" + strconv.Itoa(i)
			tb.create(t, &job.Job{ID: id, Target: &job.Target{URL: sink.URL}, Retry: job.RetryPolicy{MaxAttempts: 1}})
			tb.waitRun(t, id, job.OutcomeDead)
		}
		failing.Store(false)
		const held = 6
		for i := range held {
			tb.create(t, &job.Job{ID: "h" + strconv.Itoa(i), Target: &job.Target{URL: sink.URL}})
		}
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(delivered) == held
		}, 10*time.Second, 10*time.Millisecond, "the runs held while the probe was out go soon after it succeeded")
		require.True(t, probed.Load())
		mu.Lock()
		var last time.Time
		for _, at := range delivered {
			if at.After(last) {
				last = at
			}
		}
		mu.Unlock()
		require.Less(t, last.Sub(time.Unix(0, probeDone.Load())), 3*time.Second)
		bs, err := tb.store.Breakers(context.Background(), 0)
		require.NoError(t, err)
		require.Len(t, bs, 1)
		require.Equal(t, shard.BreakerClosed, bs[0].State)
	})
}

// A workflow's push node's delivery names its workflow and node and carries its
// parents' results (the 2xx bodies of their deliveries) in Tock-Parent-Results: base64url
// of the JSON a pulled run's "parents" has; a result too large for the header is named in
// Tock-Parent-Results-Omitted.
func TestExecutor_WorkflowNodeCarriesParentResults(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		hits := make(chan http.Header, 10)
		big := strings.Repeat("y", executor.MaxParentHeader)
		sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits <- r.Header.Clone()
			switch r.URL.Path {
			case "/a":
				_, _ = w.Write([]byte(`{"id":"m-1"}`))
			case "/b":
				_, _ = w.Write([]byte("plain"))
			case "/big":
				_, _ = w.Write([]byte(big))
			}
		}))
		defer sink.Close()
		tb := setup(t, b, executor.Config{MaxResult: 2 * executor.MaxParentHeader})
		push := func(id, path string, deps ...string) job.Node {
			return job.Node{Job: job.Job{ID: id, Target: &job.Target{URL: sink.URL + path}}, DependsOn: deps}
		}
		_, err := tb.store.CreateWorkflow(context.Background(), &job.Workflow{ID: "flow", Jobs: []job.Node{
			push("a", "/a"), push("b", "/b"), push("big", "/big"), push("join", "/join", "a", "b", "big")}})
		require.NoError(t, err)
		var join http.Header
		for range 4 {
			h := <-hits
			if h.Get("Tock-Node") == "join" {
				join = h
			}
		}
		require.NotNil(t, join)
		require.Equal(t, "flow", join.Get("Tock-Workflow"))
		raw, err := base64.RawURLEncoding.DecodeString(join.Get("Tock-Parent-Results"))
		require.NoError(t, err)
		require.JSONEq(t, `[{"node":"a","result":{"id":"m-1"}},{"node":"b","result_base64":"cGxhaW4="}]`, string(raw))
		require.Equal(t, "big", join.Get("Tock-Parent-Results-Omitted"))
	})
}

// A workflow node's result is what its children read: a 2xx body over MaxResult fails the
// attempt, saying so, as a worker's result over the limit does, rather than passing on
// its first MaxResult bytes as if they were all of it.
func TestExecutor_WorkflowNodeResultOverLimit(t *testing.T) {
	t.Parallel()
	m, _ := redistest.Mini(t)
	b := redistest.Backend{Name: redistest.Miniredis, Addrs: []string{m.Addr()}, Mini: m}
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/fits":
			_, _ = w.Write([]byte(`{"rows":[1,2,3]}`)) // 16 bytes
		case "/big":
			_, _ = w.Write([]byte(`{"rows":[1,2,3,4]}`)) // 18 bytes
		}
	}))
	defer sink.Close()
	tb := setup(t, b, executor.Config{MaxResult: 16, Breaker: executor.BreakerConfig{Disabled: true}})
	one := job.RetryPolicy{MaxAttempts: 1}
	push := func(id, path string, deps ...string) job.Node {
		return job.Node{Job: job.Job{ID: id, Target: &job.Target{URL: sink.URL + path}, Retry: one}, DependsOn: deps}
	}
	ctx := context.Background()
	_, err := tb.store.CreateWorkflow(ctx, &job.Workflow{ID: "flow", Jobs: []job.Node{push("fits", "/fits"), push("big", "/big")}})
	require.NoError(t, err)
	r := tb.waitRun(t, "flow@big", job.OutcomeSucceeded, job.OutcomeDead)
	require.Equal(t, job.OutcomeDead, r.Outcome)
	require.Contains(t, r.Error, "over the limit of 16 bytes")
	_, ok, err := tb.store.NodeResult(ctx, "flow", "big")
	require.NoError(t, err)
	require.False(t, ok, "no truncated result")
	tb.waitRun(t, "flow@fits", job.OutcomeSucceeded)
	res, ok, err := tb.store.NodeResult(ctx, "flow", "fits")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, `{"rows":[1,2,3]}`, string(res))
}

// A parent's result that is JSON with insignificant whitespace (a pretty-printed body)
// is measured for Tock-Parent-Results as the header carries it, compacted: one of 5,000
// bytes that compacts to under 2,000 fits in the header's 4 KiB.
func TestExecutor_WorkflowNodeCarriesAPrettyParentResult(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		hits := make(chan http.Header, 10)
		var rows []string
		for i := range 200 {
			rows = append(rows, fmt.Sprintf("        {\n            \"n\": %d\n        }", i))
		}
		pretty := "{\n  \"rows\": [\n" + strings.Join(rows, ",\n") + "\n  ]\n}\n"
		var compact bytes.Buffer
		require.NoError(t, json.Compact(&compact, []byte(pretty)))
		require.Greater(t, len(pretty), executor.MaxParentHeader)
		require.Less(t, compact.Len(), executor.MaxParentHeader/2)
		sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits <- r.Header.Clone()
			if r.URL.Path == "/pretty" {
				_, _ = w.Write([]byte(pretty))
			}
		}))
		defer sink.Close()
		tb := setup(t, b, executor.Config{})
		push := func(id, path string, deps ...string) job.Node {
			return job.Node{Job: job.Job{ID: id, Target: &job.Target{URL: sink.URL + path}}, DependsOn: deps}
		}
		_, err := tb.store.CreateWorkflow(context.Background(), &job.Workflow{ID: "pf", Jobs: []job.Node{
			push("a", "/pretty"), push("join", "/join", "a")}})
		require.NoError(t, err)
		var join http.Header
		for range 2 {
			h := <-hits
			if h.Get("Tock-Node") == "join" {
				join = h
			}
		}
		require.NotNil(t, join)
		require.Empty(t, join.Get("Tock-Parent-Results-Omitted"))
		raw, err := base64.RawURLEncoding.DecodeString(join.Get("Tock-Parent-Results"))
		require.NoError(t, err)
		require.JSONEq(t, `[{"node":"a","result":`+compact.String()+`}]`, string(raw))
	})
}
