// Package prom is tock's Prometheus backend: one *Metrics implements dispatcher.Metrics,
// worker.Metrics and ingest.Metrics on its own registry (with the Go runtime and process
// collectors), reports queue depths read from Redis at scrape time, and serves the
// registry on a fasthttp handler for GET /metrics. Only cmd/ uses it: the components
// know nothing but their narrow Metrics interfaces.
//
// Metric names follow tock_<noun>_<unit>:
//
//	tock_runs_fired_total{shard}                 runs made ready by this process's dispatcher
//	tock_runs_reaped_total{shard}                runs whose visibility deadline passed, reaped
//	tock_lease_changes_total{change}             shard leases acquired, lost, released
//	tock_runs_claimed_total{queue}               runs claimed by this process's worker
//	tock_runs_finished_total{queue,outcome}      attempts finished, by worker.Outcome
//	tock_fire_lateness_seconds{queue}            due time → handler start (histogram)
//	tock_run_duration_seconds{queue}             handler run time (histogram)
//	tock_http_requests_total{route,code}         API requests
//	tock_http_request_duration_seconds{route}    API latency (histogram)
//	tock_queue_runs{queue,state}                 runs per queue and state, read from Redis
//	tock_queue_paused{queue}                     1 when the queue is paused
//	tock_queue_stats_errors_total                failed reads of the queue figures
//	tock_workflows_created_total{scheduled}      workflows created through this process's API
//	tock_workflows_cancelled_total               running workflows its API cancelled
//	tock_workflows_retried_total                 failed or cancelled workflows its API retried
//	tock_workflows_ended_total{state}            workflows ended in the namespace, read from Redis
//	tock_workflows_running                       workflows started and not ended, read from Redis
//
// Workflows end inside Redis scripts (the script that ends a node's run ends its
// workflow); the scripts count them in the shards' stats hashes, which a scrape reads
// (shard.Store.WorkflowCounts, one HMGET per shard in one pipeline).
//
// Acks are tock_runs_finished_total{outcome="succeeded"}, failures {outcome="failed"}
// (retried) and {outcome="dead"} (out of attempts).
package prom

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/limit"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/worker"
)

var (
	_ dispatcher.Metrics     = (*Metrics)(nil)
	_ worker.Metrics         = (*Metrics)(nil)
	_ ingest.Metrics         = (*Metrics)(nil)
	_ ingest.WorkflowMetrics = (*Metrics)(nil)
)

// Histogram buckets, in seconds.
var (
	// LatenessBuckets spans 1ms to 60s: tock aims at a p99 well under 100ms, and a
	// lateness of seconds is an incident worth seeing.
	LatenessBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// DurationBuckets spans 1ms to 30 minutes (a job's default timeout).
	DurationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800}
	// HTTPBuckets spans 0.5ms to 10s.
	HTTPBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
)

// Config configures Metrics.
type Config struct {
	// StatsTimeout bounds one read of the queue figures at scrape time. Default 3s
	// (Prometheus's default scrape timeout is 10s).
	StatsTimeout time.Duration
	// StatsCache is how long a read of the queue figures (or its error) is served to
	// later scrapes, so frequent or concurrent scrapes do not each scan Redis.
	// Default 1s; a negative value reads on every scrape.
	StatsCache time.Duration
	// Logger receives failed reads of the queue figures and errors of the /metrics
	// handler, rate-limited. Nil discards.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.StatsTimeout == 0 {
		c.StatsTimeout = 3 * time.Second
	}
	if c.StatsCache == 0 {
		c.StatsCache = time.Second
	} else if c.StatsCache < 0 {
		c.StatsCache = 0
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

func (c Config) validate() error {
	if c.StatsTimeout < 0 {
		return fmt.Errorf("prom: StatsTimeout must not be negative, got %s", c.StatsTimeout)
	}
	return nil
}

// Metrics records tock's measurements in a Prometheus registry. It implements
// dispatcher.Metrics, worker.Metrics and ingest.Metrics; its methods are safe for
// concurrent use and do not allocate once a label combination has been seen.
type Metrics struct {
	cfg    Config
	reg    *prometheus.Registry
	logger *slog.Logger
	errs   *limit.Every

	fired, reaped, leases *prometheus.CounterVec
	claimed, finished     *prometheus.CounterVec
	lateness, duration    *prometheus.HistogramVec
	httpReqs              *prometheus.CounterVec
	httpDur               *prometheus.HistogramVec
	statsErrs             prometheus.Counter
	wfCreated             [2]prometheus.Counter // not scheduled, scheduled
	wfCancelled           prometheus.Counter
	wfRetried             prometheus.Counter

	// Children of the vectors by label, so the hot paths skip label hashing and the
	// variadic slices of WithLabelValues.
	mu     sync.RWMutex
	shards map[shard.ID]*shardSeries
	queues map[string]*queueSeries
	codes  map[routeCode]prometheus.Counter
	routes map[string]prometheus.Observer
	depths *queueCollector // set by QueueDepths
}

type shardSeries struct{ fired, reaped prometheus.Counter }

type queueSeries struct {
	claimed            prometheus.Counter
	lateness, duration prometheus.Observer
	finished           map[worker.Outcome]prometheus.Counter // every known outcome; read-only once built
}

type routeCode struct {
	route string
	code  int
}

// outcomes are the outcomes whose series exist (at 0) as soon as a queue is seen.
var outcomes = []worker.Outcome{
	worker.OutcomeSucceeded, worker.OutcomeFailed, worker.OutcomeDead, worker.OutcomeCancelled,
	worker.OutcomeSnoozed, worker.OutcomeHandedBack, worker.OutcomeRejected,
}

// New returns Metrics on a new registry that also holds the Go runtime and process
// collectors. It fails only for an invalid cfg.
func New(cfg Config) (*Metrics, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &Metrics{
		cfg: cfg, reg: prometheus.NewRegistry(),
		logger: cfg.Logger.With("component", "prom"), errs: limit.NewEvery(time.Minute),
		fired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_runs_fired_total", Help: "Runs made ready by this process's dispatcher, by shard.",
		}, []string{"shard"}),
		reaped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_runs_reaped_total", Help: "Runs whose visibility deadline passed (lost workers), sent back through the fail path, by shard.",
		}, []string{"shard"}),
		leases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_lease_changes_total", Help: "Shard lease changes of this process's dispatcher: acquired, lost, released.",
		}, []string{"change"}),
		claimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_runs_claimed_total", Help: "Runs claimed by this process's worker, by queue.",
		}, []string{"queue"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_runs_finished_total", Help: "Attempts finished by this process's worker, by queue and outcome (succeeded, failed, dead, cancelled, snoozed, handed_back, rejected).",
		}, []string{"queue", "outcome"}),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tock_fire_lateness_seconds", Help: "Time from a run's due time to the start of its handler (Redis clock), by queue.",
			Buckets: LatenessBuckets,
		}, []string{"queue"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tock_run_duration_seconds", Help: "How long handlers ran, by queue.",
			Buckets: DurationBuckets,
		}, []string{"queue"}),
		httpReqs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_http_requests_total", Help: "API requests, by route and status code.",
		}, []string{"route", "code"}),
		httpDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tock_http_request_duration_seconds", Help: "API request latency, by route.",
			Buckets: HTTPBuckets,
		}, []string{"route"}),
		statsErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tock_queue_stats_errors_total", Help: "Scrapes whose read of the queue figures from Redis failed (tock_queue_runs is then missing).",
		}),
		shards: map[shard.ID]*shardSeries{},
		queues: map[string]*queueSeries{},
		codes:  map[routeCode]prometheus.Counter{},
		routes: map[string]prometheus.Observer{},
	}
	wfCreated := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tock_workflows_created_total", Help: "Workflows created through this process's API, by scheduled (true: a scheduled workflow's definition).",
	}, []string{"scheduled"})
	m.wfCreated = [2]prometheus.Counter{wfCreated.WithLabelValues("false"), wfCreated.WithLabelValues("true")}
	m.wfCancelled = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tock_workflows_cancelled_total", Help: "Running workflows cancelled through this process's API.",
	})
	m.wfRetried = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tock_workflows_retried_total", Help: "Failed or cancelled workflows run again through this process's API.",
	})
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.fired, m.reaped, m.leases, m.claimed, m.finished, m.lateness, m.duration,
		m.httpReqs, m.httpDur, wfCreated, m.wfCancelled, m.wfRetried,
	} {
		if err := m.reg.Register(c); err != nil {
			return nil, fmt.Errorf("prom: register: %w", err)
		}
	}
	for _, ch := range []string{dispatcher.LeaseAcquired, dispatcher.LeaseLost, dispatcher.LeaseReleased} {
		m.leases.WithLabelValues(ch)
	}
	return m, nil
}

// Registry returns the registry, to register more collectors or to gather in tests.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler returns a fasthttp handler serving the registry in the Prometheus text (or
// OpenMetrics, when asked) format, for GET /metrics. It is safe for concurrent use.
func (m *Metrics) Handler() fasthttp.RequestHandler {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:      errorLog{m},
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      m.reg, // promhttp_metric_handler_errors_total
	})
	return fasthttpadaptor.NewFastHTTPHandler(h)
}

type errorLog struct{ m *Metrics }

func (l errorLog) Println(v ...any) {
	if l.m.errs.Allow() {
		l.m.logger.Error("serve metrics", "error", fmt.Sprint(v...))
	}
}

func (m *Metrics) shard(id shard.ID) *shardSeries {
	m.mu.RLock()
	s := m.shards[id]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s = m.shards[id]; s == nil {
		l := strconv.Itoa(int(id))
		s = &shardSeries{fired: m.fired.WithLabelValues(l), reaped: m.reaped.WithLabelValues(l)}
		m.shards[id] = s
	}
	return s
}

func (m *Metrics) queue(q string) *queueSeries {
	m.mu.RLock()
	s := m.queues[q]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s = m.queues[q]; s == nil {
		s = &queueSeries{
			claimed:  m.claimed.WithLabelValues(q),
			lateness: m.lateness.WithLabelValues(q),
			duration: m.duration.WithLabelValues(q),
			finished: make(map[worker.Outcome]prometheus.Counter, len(outcomes)),
		}
		for _, o := range outcomes {
			s.finished[o] = m.finished.WithLabelValues(q, string(o))
		}
		m.queues[q] = s
	}
	return s
}

// RunsFired adds n to tock_runs_fired_total{shard}.
func (m *Metrics) RunsFired(id shard.ID, n int) { m.shard(id).fired.Add(float64(n)) }

// RunsReaped adds n to tock_runs_reaped_total{shard}.
func (m *Metrics) RunsReaped(id shard.ID, n int) { m.shard(id).reaped.Add(float64(n)) }

// LeaseChanged counts a lease change in tock_lease_changes_total{change}.
func (m *Metrics) LeaseChanged(_ shard.ID, change string) {
	m.leases.WithLabelValues(change).Inc()
}

// RunsClaimed adds n to tock_runs_claimed_total{queue}.
func (m *Metrics) RunsClaimed(queue string, n int) { m.queue(queue).claimed.Add(float64(n)) }

// RunFinished counts the attempt in tock_runs_finished_total{queue,outcome} and observes
// its lateness and duration. A run handed back before its handler started (duration 0)
// is not observed in the histograms: it fires again, and that attempt is.
func (m *Metrics) RunFinished(queue string, outcome worker.Outcome, lateness, duration time.Duration) {
	s := m.queue(queue)
	if c := s.finished[outcome]; c != nil {
		c.Inc()
	} else {
		m.finished.WithLabelValues(queue, string(outcome)).Inc()
	}
	if outcome == worker.OutcomeHandedBack && duration == 0 {
		return
	}
	s.lateness.Observe(lateness.Seconds())
	s.duration.Observe(duration.Seconds())
}

// HTTPRequest counts a request in tock_http_requests_total{route,code} and observes its
// duration in tock_http_request_duration_seconds{route}.
func (m *Metrics) HTTPRequest(route string, status int, d time.Duration) {
	k := routeCode{route, status}
	m.mu.RLock()
	c, o := m.codes[k], m.routes[route]
	m.mu.RUnlock()
	if c == nil || o == nil {
		m.mu.Lock()
		if c = m.codes[k]; c == nil {
			c = m.httpReqs.WithLabelValues(route, strconv.Itoa(status))
			m.codes[k] = c
		}
		if o = m.routes[route]; o == nil {
			o = m.httpDur.WithLabelValues(route)
			m.routes[route] = o
		}
		m.mu.Unlock()
	}
	c.Inc()
	o.Observe(d.Seconds())
}

// WorkflowCreated counts a workflow in tock_workflows_created_total{scheduled}.
func (m *Metrics) WorkflowCreated(scheduled bool) {
	if scheduled {
		m.wfCreated[1].Inc()
		return
	}
	m.wfCreated[0].Inc()
}

// WorkflowCancelled counts a cancelled workflow in tock_workflows_cancelled_total.
func (m *Metrics) WorkflowCancelled() { m.wfCancelled.Inc() }

// WorkflowRetried counts a retried workflow in tock_workflows_retried_total.
func (m *Metrics) WorkflowRetried() { m.wfRetried.Inc() }

// QueueStatsFunc returns the figures of every queue; (*shard.Store).Queues is one.
type QueueStatsFunc func(ctx context.Context) ([]shard.QueueStats, error)

// QueueDepths registers tock_queue_runs{queue,state} (state scheduled, ready, in_flight
// or dead) and tock_queue_paused{queue}, read by calling fn at scrape time, bounded by
// Config.StatsTimeout and by ctx (cancel it at shutdown), with the result served for
// Config.StatsCache to later scrapes. When fn fails, the scrape goes on without these
// series and tock_queue_stats_errors_total grows. QueueDepths must be called at most
// once; a second call returns an error.
func (m *Metrics) QueueDepths(ctx context.Context, fn QueueStatsFunc) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.depths != nil {
		return errors.New("prom: QueueDepths called twice")
	}
	c := &queueCollector{m: m, ctx: ctx, fn: fn, now: time.Now}
	if err := m.reg.Register(c); err != nil {
		return fmt.Errorf("prom: register queue depths: %w", err)
	}
	if err := m.reg.Register(m.statsErrs); err != nil {
		m.reg.Unregister(c)
		return fmt.Errorf("prom: register queue depths: %w", err)
	}
	m.depths = c
	return nil
}

var (
	queueRunsDesc = prometheus.NewDesc("tock_queue_runs",
		"Runs of a queue over all shards, by state: scheduled (waiting for their due time), ready, in_flight, dead.",
		[]string{"queue", "state"}, nil)
	queuePausedDesc = prometheus.NewDesc("tock_queue_paused",
		"1 when workers must not claim from the queue.", []string{"queue"}, nil)
)

// queueCollector reads the queue figures at scrape time, at most once per StatsCache:
// scrapes that come meanwhile, or while a read is running, get its result.
type queueCollector struct {
	m   *Metrics
	ctx context.Context
	fn  QueueStatsFunc
	now func() time.Time

	mu    sync.Mutex // held during a read
	at    time.Time  // when the cached result was read; zero: none
	stats []shard.QueueStats
	err   error
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueRunsDesc
	ch <- queuePausedDesc
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	stats, err := c.read()
	if err != nil {
		return
	}
	for _, q := range stats {
		for _, v := range [...]struct {
			state string
			n     int64
		}{{"scheduled", q.Scheduled}, {"ready", q.Ready}, {"in_flight", q.InFlight}, {"dead", q.Dead}} {
			ch <- prometheus.MustNewConstMetric(queueRunsDesc, prometheus.GaugeValue, float64(v.n), q.Queue, v.state)
		}
		paused := 0.0
		if q.Paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(queuePausedDesc, prometheus.GaugeValue, paused, q.Queue)
	}
}

func (c *queueCollector) read() ([]shard.QueueStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && c.now().Sub(c.at) < c.m.cfg.StatsCache {
		return c.stats, c.err
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.m.cfg.StatsTimeout)
	defer cancel()
	c.stats, c.err = c.fn(ctx)
	c.at = c.now()
	if c.err != nil {
		c.stats = nil
		c.m.statsErrs.Inc()
		if c.m.errs.Allow() {
			c.m.logger.WarnContext(ctx, "read queue figures", "error", c.err)
		}
	}
	return c.stats, c.err
}

// WorkflowCountsFunc reads the namespace's workflow counts (shard.Store.WorkflowCounts).
type WorkflowCountsFunc func(ctx context.Context) (shard.WorkflowCounts, error)

var (
	workflowsEndedDesc = prometheus.NewDesc("tock_workflows_ended_total",
		"Workflows of the namespace that ended, by state (succeeded, failed, cancelled), counted by the scripts since the namespace was created.",
		[]string{"state"}, nil)
	workflowsRunningDesc = prometheus.NewDesc("tock_workflows_running",
		"Workflows of the namespace started (created or retried) and not ended.", nil, nil)
)

// WorkflowCounts registers tock_workflows_ended_total{state} and tock_workflows_running,
// read by calling fn at scrape time, bounded by Config.StatsTimeout and by ctx. A failed
// read leaves them out of that scrape and counts in tock_queue_stats_errors_total when
// QueueDepths registered it.
func (m *Metrics) WorkflowCounts(ctx context.Context, fn WorkflowCountsFunc) error {
	if err := m.reg.Register(&workflowCollector{m: m, ctx: ctx, fn: fn}); err != nil {
		return fmt.Errorf("prom: register workflow counts: %w", err)
	}
	return nil
}

type workflowCollector struct {
	m   *Metrics
	ctx context.Context
	fn  WorkflowCountsFunc
}

func (c *workflowCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- workflowsEndedDesc
	ch <- workflowsRunningDesc
}

func (c *workflowCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(c.ctx, c.m.cfg.StatsTimeout)
	defer cancel()
	wc, err := c.fn(ctx)
	if err != nil {
		c.m.statsErrs.Inc()
		if c.m.errs.Allow() {
			c.m.logger.WarnContext(ctx, "read workflow counts", "error", err)
		}
		return
	}
	for _, st := range []job.WorkflowState{job.WorkflowSucceeded, job.WorkflowFailed, job.WorkflowCancelled} {
		ch <- prometheus.MustNewConstMetric(workflowsEndedDesc, prometheus.CounterValue, float64(wc.Ended[st]), string(st))
	}
	ch <- prometheus.MustNewConstMetric(workflowsRunningDesc, prometheus.GaugeValue, float64(wc.Running()))
}
