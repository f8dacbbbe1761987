package prom

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/worker"
)

func newMetrics(t *testing.T, cfg Config) *Metrics {
	t.Helper()
	m, err := New(cfg)
	require.NoError(t, err)
	return m
}

func TestNew_InvalidConfig(t *testing.T) {
	t.Parallel()
	_, err := New(Config{StatsTimeout: -time.Second})
	require.ErrorContains(t, err, "StatsTimeout")
}

func TestMetrics_Dispatcher(t *testing.T) {
	t.Parallel()
	m := newMetrics(t, Config{})
	m.RunsFired(3, 10)
	m.RunsFired(3, 5)
	m.RunsFired(12, 1)
	m.RunsReaped(3, 2)
	m.LeaseChanged(3, dispatcher.LeaseAcquired)
	m.LeaseChanged(4, dispatcher.LeaseAcquired)
	m.LeaseChanged(3, dispatcher.LeaseReleased)

	require.Equal(t, 15.0, testutil.ToFloat64(m.fired.WithLabelValues("3")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.fired.WithLabelValues("12")))
	require.Equal(t, 2.0, testutil.ToFloat64(m.reaped.WithLabelValues("3")))
	require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP tock_lease_changes_total Shard lease changes of this process's dispatcher: acquired, lost, released.
# TYPE tock_lease_changes_total counter
tock_lease_changes_total{change="acquired"} 2
tock_lease_changes_total{change="lost"} 0
tock_lease_changes_total{change="released"} 1
`), "tock_lease_changes_total"))
}

func TestMetrics_Worker(t *testing.T) {
	t.Parallel()
	m := newMetrics(t, Config{})
	m.RunsClaimed("mail", 3)
	m.RunsClaimed("mail", 1)
	m.RunFinished("mail", worker.OutcomeSucceeded, 2*time.Millisecond, 40*time.Millisecond)
	m.RunFinished("mail", worker.OutcomeSucceeded, 7*time.Millisecond, 2*time.Second)
	m.RunFinished("mail", worker.OutcomeDead, 30*time.Millisecond, time.Millisecond)
	m.RunFinished("mail", worker.OutcomeHandedBack, 0, 0) // never started: no observation
	m.RunFinished("mail", worker.Outcome("odd"), 0, 0)    // unknown outcomes count, and are observed

	require.Equal(t, 4.0, testutil.ToFloat64(m.claimed.WithLabelValues("mail")))
	require.Equal(t, 2.0, testutil.ToFloat64(m.finished.WithLabelValues("mail", "succeeded")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.finished.WithLabelValues("mail", "dead")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.finished.WithLabelValues("mail", "handed_back")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.finished.WithLabelValues("mail", "odd")))
	require.Equal(t, 0.0, testutil.ToFloat64(m.finished.WithLabelValues("mail", "failed")), "every outcome exists at 0")

	require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP tock_fire_lateness_seconds Time from a run's due time to the start of its handler (Redis clock), by queue.
# TYPE tock_fire_lateness_seconds histogram
tock_fire_lateness_seconds_bucket{queue="mail",le="0.001"} 1
tock_fire_lateness_seconds_bucket{queue="mail",le="0.0025"} 2
tock_fire_lateness_seconds_bucket{queue="mail",le="0.005"} 2
tock_fire_lateness_seconds_bucket{queue="mail",le="0.01"} 3
tock_fire_lateness_seconds_bucket{queue="mail",le="0.025"} 3
tock_fire_lateness_seconds_bucket{queue="mail",le="0.05"} 4
tock_fire_lateness_seconds_bucket{queue="mail",le="0.1"} 4
tock_fire_lateness_seconds_bucket{queue="mail",le="0.25"} 4
tock_fire_lateness_seconds_bucket{queue="mail",le="0.5"} 4
tock_fire_lateness_seconds_bucket{queue="mail",le="1"} 4
tock_fire_lateness_seconds_bucket{queue="mail",le="2.5"} 4
tock_fire_lateness_seconds_bucket{queue="mail",le="5"} 4
tock_fire_lateness_seconds_bucket{queue="mail",le="10"} 4
tock_fire_lateness_seconds_bucket{queue="mail",le="30"} 4
tock_fire_lateness_seconds_bucket{queue="mail",le="60"} 4
tock_fire_lateness_seconds_bucket{queue="mail",le="+Inf"} 4
tock_fire_lateness_seconds_sum{queue="mail"} 0.039
tock_fire_lateness_seconds_count{queue="mail"} 4
`), "tock_fire_lateness_seconds"))
	// 4 observations: the odd outcome had duration 0 but is not a hand-back.
	require.Equal(t, 4, histCount(t, m, "tock_run_duration_seconds"))
}

func histCount(t *testing.T, m *Metrics, name string) int {
	t.Helper()
	mfs, err := m.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			n := 0
			for _, mt := range mf.GetMetric() {
				n += int(mt.GetHistogram().GetSampleCount())
			}
			return n
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestMetrics_Workflows(t *testing.T) {
	t.Parallel()
	m := newMetrics(t, Config{})
	m.WorkflowCreated(false)
	m.WorkflowCreated(false)
	m.WorkflowCreated(true)
	m.WorkflowCancelled()
	m.WorkflowRetried()
	m.WorkflowRetried()
	require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP tock_workflows_created_total Workflows created through this process's API, by scheduled (true: a scheduled workflow's definition).
# TYPE tock_workflows_created_total counter
tock_workflows_created_total{scheduled="false"} 2
tock_workflows_created_total{scheduled="true"} 1
# HELP tock_workflows_cancelled_total Running workflows cancelled through this process's API.
# TYPE tock_workflows_cancelled_total counter
tock_workflows_cancelled_total 1
# HELP tock_workflows_retried_total Failed or cancelled workflows run again through this process's API.
# TYPE tock_workflows_retried_total counter
tock_workflows_retried_total 2
`), "tock_workflows_created_total", "tock_workflows_cancelled_total", "tock_workflows_retried_total"))
}

func TestMetrics_HTTP(t *testing.T) {
	t.Parallel()
	m := newMetrics(t, Config{})
	m.HTTPRequest("POST /v1/jobs", 201, 3*time.Millisecond)
	m.HTTPRequest("POST /v1/jobs", 201, 4*time.Millisecond)
	m.HTTPRequest("POST /v1/jobs", 429, time.Millisecond)
	m.HTTPRequest("GET /v1/jobs/{id}", 404, time.Millisecond)
	require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP tock_http_requests_total API requests, by route and status code.
# TYPE tock_http_requests_total counter
tock_http_requests_total{code="201",route="POST /v1/jobs"} 2
tock_http_requests_total{code="429",route="POST /v1/jobs"} 1
tock_http_requests_total{code="404",route="GET /v1/jobs/{id}"} 1
`), "tock_http_requests_total"))
	require.Equal(t, 4, histCount(t, m, "tock_http_request_duration_seconds"))
}

func TestMetrics_QueueDepths(t *testing.T) {
	t.Parallel()
	m := newMetrics(t, Config{})
	var calls atomic.Int32
	var fail atomic.Bool
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	var clockMu sync.Mutex
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	advance := func(d time.Duration) { clockMu.Lock(); now = now.Add(d); clockMu.Unlock() }
	fn := func(ctx context.Context) ([]shard.QueueStats, error) {
		_, hasDeadline := ctx.Deadline()
		require.True(t, hasDeadline, "reads are bounded")
		n := calls.Add(1)
		if fail.Load() {
			return nil, errors.New("redis down")
		}
		return []shard.QueueStats{
			{Queue: "default", Scheduled: 10, Ready: int64(n), InFlight: 2, Dead: 1},
			{Queue: "mail", Paused: true, Ready: 7},
		}, nil
	}
	require.NoError(t, m.QueueDepths(context.Background(), fn))
	m.depths.now = clock

	want := func(ready string) string {
		return `
# HELP tock_queue_runs Runs of a queue over all shards, by state: scheduled (waiting for their due time), ready, in_flight, dead.
# TYPE tock_queue_runs gauge
tock_queue_runs{queue="default",state="dead"} 1
tock_queue_runs{queue="default",state="in_flight"} 2
tock_queue_runs{queue="default",state="ready"} ` + ready + `
tock_queue_runs{queue="default",state="scheduled"} 10
tock_queue_runs{queue="mail",state="dead"} 0
tock_queue_runs{queue="mail",state="in_flight"} 0
tock_queue_runs{queue="mail",state="ready"} 7
tock_queue_runs{queue="mail",state="scheduled"} 0
# HELP tock_queue_paused 1 when workers must not claim from the queue.
# TYPE tock_queue_paused gauge
tock_queue_paused{queue="default"} 0
tock_queue_paused{queue="mail"} 1
`
	}
	require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(want("1")), "tock_queue_runs", "tock_queue_paused"))
	// Scrapes within the cache period are served from the cache.
	advance(500 * time.Millisecond)
	require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(want("1")), "tock_queue_runs", "tock_queue_paused"))
	require.Equal(t, int32(1), calls.Load())
	advance(600 * time.Millisecond)
	require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(want("2")), "tock_queue_runs", "tock_queue_paused"))
	require.Equal(t, int32(2), calls.Load())

	// A failing read drops the series (the scrape itself succeeds) and counts an error;
	// the error is cached too.
	fail.Store(true)
	advance(2 * time.Second)
	n, err := testutil.GatherAndCount(m.Registry(), "tock_queue_runs")
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = m.Registry().Gather()
	require.NoError(t, err)
	require.Equal(t, 1.0, testutil.ToFloat64(m.statsErrs))
	require.Equal(t, int32(3), calls.Load())

	require.Error(t, m.QueueDepths(context.Background(), fn), "only once")
}

func TestMetrics_QueueDepthsConcurrentScrapesReadOnce(t *testing.T) {
	t.Parallel()
	m := newMetrics(t, Config{StatsCache: time.Hour})
	var calls atomic.Int32
	release := make(chan struct{})
	require.NoError(t, m.QueueDepths(context.Background(), func(ctx context.Context) ([]shard.QueueStats, error) {
		calls.Add(1)
		<-release
		return []shard.QueueStats{{Queue: "default", Ready: 1}}, nil
	}))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			n, err := testutil.GatherAndCount(m.Registry(), "tock_queue_runs")
			require.NoError(t, err)
			require.Equal(t, 4, n)
		})
	}
	require.Eventually(t, func() bool { return calls.Load() == 1 }, 5*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	require.Equal(t, int32(1), calls.Load())
}

func TestMetrics_QueueDepthsTimeout(t *testing.T) {
	t.Parallel()
	m := newMetrics(t, Config{StatsTimeout: 20 * time.Millisecond, StatsCache: -1})
	require.NoError(t, m.QueueDepths(context.Background(), func(ctx context.Context) ([]shard.QueueStats, error) {
		<-ctx.Done() // a Redis that does not answer
		return nil, ctx.Err()
	}))
	n, err := testutil.GatherAndCount(m.Registry(), "tock_queue_runs")
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, 1.0, testutil.ToFloat64(m.statsErrs))
}

func TestMetrics_Handler(t *testing.T) {
	t.Parallel()
	m := newMetrics(t, Config{})
	m.RunsFired(1, 3)
	m.HTTPRequest("GET /v1/health", 200, time.Millisecond)
	h := m.Handler()
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/metrics")
	ctx.Request.Header.SetMethod(fasthttp.MethodGet)
	h(&ctx)
	require.Equal(t, fasthttp.StatusOK, ctx.Response.StatusCode())
	require.Contains(t, string(ctx.Response.Header.ContentType()), "text/plain")
	body := string(ctx.Response.Body())
	for _, s := range []string{
		`tock_runs_fired_total{shard="1"} 3`,
		`tock_http_requests_total{code="200",route="GET /v1/health"} 1`,
		"go_goroutines ",
		"process_start_time_seconds ",
	} {
		require.Contains(t, body, s)
	}
}

func TestMetrics_NoAllocs(t *testing.T) {
	m := newMetrics(t, Config{})
	m.RunsClaimed("default", 1)
	m.RunFinished("default", worker.OutcomeSucceeded, time.Millisecond, time.Millisecond)
	m.RunsFired(2, 1)
	m.HTTPRequest("POST /v1/jobs", 201, time.Millisecond)
	allocs := testing.AllocsPerRun(100, func() {
		m.RunsClaimed("default", 16)
		m.RunFinished("default", worker.OutcomeSucceeded, time.Millisecond, 3*time.Millisecond)
		m.RunsFired(2, 100)
		m.RunsReaped(2, 1)
		m.HTTPRequest("POST /v1/jobs", 201, time.Millisecond)
	})
	require.Zero(t, allocs)
}

func BenchmarkMetrics_RunFinished(b *testing.B) {
	m, err := New(Config{})
	require.NoError(b, err)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.RunFinished("default", worker.OutcomeSucceeded, time.Millisecond, 3*time.Millisecond)
		}
	})
}

// The workflow counts are read from Redis at each scrape.
func TestMetrics_WorkflowCounts(t *testing.T) {
	t.Parallel()
	m := newMetrics(t, Config{})
	require.NoError(t, m.WorkflowCounts(context.Background(), func(context.Context) (shard.WorkflowCounts, error) {
		return shard.WorkflowCounts{Created: 5, Retried: 1, Ended: map[job.WorkflowState]int64{
			job.WorkflowSucceeded: 3, job.WorkflowFailed: 1, job.WorkflowCancelled: 1}}, nil
	}))
	require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP tock_workflows_ended_total Workflows of the namespace that ended, by state (succeeded, failed, cancelled), counted by the scripts since the namespace was created.
# TYPE tock_workflows_ended_total counter
tock_workflows_ended_total{state="cancelled"} 1
tock_workflows_ended_total{state="failed"} 1
tock_workflows_ended_total{state="succeeded"} 3
# HELP tock_workflows_running Workflows of the namespace started (created or retried) and not ended.
# TYPE tock_workflows_running gauge
tock_workflows_running 1
`), "tock_workflows_ended_total", "tock_workflows_running"))
}
