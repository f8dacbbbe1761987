// Package executor delivers push jobs: jobs with a job.Target instead of a type. It
// claims their runs like a worker (it is a worker.Worker with one handler, for
// job.PushType, on its queues: the same claims, heartbeats, holds and reports) and sends
// each run's payload as the body of an HTTP request to the job's target, signed with
// Tock-Signature (see Sign and worker.VerifySignature).
//
// Routing: a job with a target has the type job.PushType ("@push") and, unless it names
// one, the queue job.DefaultPushQueue ("push"); the executor serves Config.Queues
// (default that one). Keep push jobs out of queues that other workers serve.
//
// Outcomes: a 2xx response acks the run, its body (at most Config.MaxResult bytes)
// becoming the run's result (a workflow node's longer body fails the attempt: its
// children would read a part as all of it); a 429 or 503 with Retry-After snoozes the run for that long
// without using an attempt; any other response (3xx included: redirects are not
// followed), a timeout or a connection error fails the attempt under the job's retry
// policy.
//
// Egress: every address dialled is checked against Config.Egress after DNS resolution.
// Per target host (host:port) at most Config.PerHost deliveries run at once over reused
// connections; a run for a host whose slots are all taken is snoozed for
// Config.HostBusyDelay without using an attempt, so a slow host holds at most PerHost
// of the executor's Concurrency slots and never holds up deliveries to other hosts.
// Per host a circuit breaker, shared by every executor through Redis (Config.Breaker),
// snoozes runs while the host fails.
package executor

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tockhq/tock/internal/egress"
	"github.com/tockhq/tock/internal/limit"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/worker"
)

// Defaults of Config.
const (
	DefaultConcurrency   = 64
	DefaultPerHost       = 8
	DefaultHostBusyDelay = time.Second
	DefaultMaxResult     = 64 << 10
	// MaxRetryAfter bounds the snooze a Retry-After asks for.
	MaxRetryAfter = 24 * time.Hour
)

// Config configures an Executor.
type Config struct {
	// Store is the namespace to work on. Required.
	Store *shard.Store
	// Queues to claim push runs from. Default [job.DefaultPushQueue].
	Queues []string
	// Secrets sign deliveries: the first signs; the others are accepted by receivers
	// during a rotation (the executor itself only signs). At least one, each at least 16
	// bytes. Never logged.
	Secrets []string
	// Egress is checked against every address dialled. Nil means public addresses only.
	Egress *egress.Policy
	// Concurrency bounds the deliveries in flight. Default 64.
	Concurrency int
	// PerHost bounds the deliveries in flight per target host (host:port), and the idle
	// connections kept per host. Default 8.
	PerHost int
	// HostBusyDelay is the snooze of a run whose host has no free slot. Default 1s.
	HostBusyDelay time.Duration
	// MaxResult bounds the part of a 2xx response's body kept as the run's result; a
	// workflow node's run whose body is longer fails its attempt. Default 64 KiB, at
	// most shard.MaxResult.
	MaxResult int
	// Breaker configures the per-host circuit breakers. Its zero value means the
	// defaults (on).
	Breaker BreakerConfig
	// ID names the executor in run history. Default: host name plus a random suffix.
	ID string
	// Sweep is the worker's safety-net sweep interval (worker.Config.Sweep). Default 2s.
	Sweep time.Duration
	// Metrics receives breaker states and transitions. Nil means none.
	Metrics Metrics
	// Logger receives errors (never secrets, signatures or target headers). Nil discards.
	Logger *slog.Logger
	// Now is the clock of the signatures' timestamps. Default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if len(c.Queues) == 0 {
		c.Queues = []string{job.DefaultPushQueue}
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.PerHost == 0 {
		c.PerHost = DefaultPerHost
	}
	if c.HostBusyDelay == 0 {
		c.HostBusyDelay = DefaultHostBusyDelay
	}
	if c.MaxResult == 0 {
		c.MaxResult = DefaultMaxResult
	}
	if c.Egress == nil {
		c.Egress, _ = egress.Parse(nil)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Breaker = c.Breaker.withDefaults()
	return c
}

func (c Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("executor: Store is required")
	case len(c.Secrets) == 0:
		return errors.New("executor: Secrets: at least one signing secret is required (--push-secret)")
	case c.PerHost < 1:
		return fmt.Errorf("executor: PerHost must be at least 1, got %d", c.PerHost)
	case c.MaxResult < 0 || c.MaxResult > shard.MaxResult:
		return fmt.Errorf("executor: MaxResult must be 0 to %d, got %d", shard.MaxResult, c.MaxResult)
	case c.HostBusyDelay < 0:
		return fmt.Errorf("executor: HostBusyDelay must not be negative, got %s", c.HostBusyDelay)
	}
	for i, s := range c.Secrets {
		if len(s) < 16 {
			return fmt.Errorf("executor: Secrets[%d]: at least 16 bytes", i)
		}
	}
	return c.Breaker.validate()
}

// Executor delivers push jobs. Start it with Start, stop it with Stop; its methods are
// safe for concurrent use.
type Executor struct {
	cfg      Config
	store    *shard.Store
	w        *worker.Worker
	client   *http.Client
	breakers *Breakers
	log      *slog.Logger

	mu    sync.Mutex
	hosts map[string]chan struct{} // per-host slots
	urls  map[string]parsedURL     // parseTarget's cache

	flushStop chan struct{} // closed by Stop: the breakers' flush loop ends
	flushDone sync.WaitGroup
	stopOnce  sync.Once
}

// New validates cfg and returns an Executor. It does not touch Redis.
func New(cfg Config) (*Executor, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Executor{cfg: cfg, store: cfg.Store, hosts: map[string]chan struct{}{}, urls: map[string]parsedURL{},
		log: cfg.Logger.With("component", "executor"), flushStop: make(chan struct{})}
	e.breakers = NewBreakers(cfg.Store, cfg.Breaker, cfg.Metrics)
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 nil, // no proxy from the environment: egress is checked here
		DialContext:           cfg.Egress.DialContext(dialer),
		MaxConnsPerHost:       cfg.PerHost,
		MaxIdleConnsPerHost:   cfg.PerHost,
		MaxIdleConns:          1024,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
	e.client = &http.Client{
		Transport: tr,
		// Redirects are not followed: a 3xx is a failed attempt.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	w, err := worker.New(worker.Config{Store: cfg.Store, Queues: cfg.Queues, Concurrency: cfg.Concurrency,
		ID: cfg.ID, Sweep: cfg.Sweep, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	w.HandleFunc(job.PushType, e.deliver)
	e.w = w
	return e, nil
}

// Breakers returns the executor's breakers (their states are shared through Redis).
func (e *Executor) Breakers() *Breakers { return e.breakers }

// Start starts claiming and delivering; see worker.Worker.Start.
func (e *Executor) Start(ctx context.Context) error {
	if err := e.w.Start(ctx); err != nil {
		return err
	}
	if e.cfg.Breaker.Enabled() {
		e.flushDone.Add(1)
		go e.flushLoop(ctx)
	}
	return nil
}

// Stop stops claiming, lets deliveries in flight finish (bounded by ctx), records the
// breaker outcomes not yet recorded and closes idle connections; see
// worker.Worker.Stop.
func (e *Executor) Stop(ctx context.Context) error {
	err := e.w.Stop(ctx)
	e.stopOnce.Do(func() { close(e.flushStop) })
	e.flushDone.Wait()
	if e.cfg.Breaker.Enabled() {
		if ferr := e.breakers.Flush(ctx); ferr != nil && err == nil {
			e.log.WarnContext(ctx, "record breaker outcomes", "error", ferr)
		}
	}
	e.client.CloseIdleConnections()
	return err
}

// flushLoop records the breaker outcomes counted by deliveries every Breaker.Sync
// (Breakers), until Stop or ctx ends.
func (e *Executor) flushLoop(ctx context.Context) {
	defer e.flushDone.Done()
	tick := time.NewTicker(e.cfg.Breaker.Sync)
	defer tick.Stop()
	errs := limit.NewEvery(10 * time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.flushStop:
			return
		case now := <-tick.C:
			if err := e.breakers.flush(ctx, now); err != nil && ctx.Err() == nil && errs.Allow() {
				e.log.WarnContext(ctx, "record breaker outcomes", "error", err)
			}
		}
	}
}

// slot takes a delivery slot of host, or reports false when all are taken.
func (e *Executor) slot(host string) (release func(), ok bool) {
	e.mu.Lock()
	sem := e.hosts[host]
	if sem == nil {
		sem = make(chan struct{}, e.cfg.PerHost)
		e.hosts[host] = sem
	}
	e.mu.Unlock()
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, true
	default:
		return nil, false
	}
}

// parsedURL is a target URL as parseTarget returns it.
type parsedURL struct {
	u    *url.URL
	host string
	err  error
}

// maxParsedURLs bounds the target URLs whose parsing the executor keeps.
const maxParsedURLs = 4096

// parseTarget returns a target URL parsed (shared: never modify it) and its host key,
// or an error for an URL that is not valid, from a cache of the URLs met lately.
func (e *Executor) parseTarget(raw string) (*url.URL, string, error) {
	e.mu.Lock()
	p, ok := e.urls[raw]
	e.mu.Unlock()
	if !ok {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			p = parsedURL{err: fmt.Errorf("the target URL is not valid: %v", err)}
		} else {
			p = parsedURL{u: u, host: hostKey(u)}
		}
		e.mu.Lock()
		if len(e.urls) >= maxParsedURLs {
			clear(e.urls)
		}
		e.urls[raw] = p
		e.mu.Unlock()
	}
	return p.u, p.host, p.err
}

// hostKey is the breaker and slot key of a target URL: its host and port, lower-case.
func hostKey(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return strings.ToLower(net.JoinHostPort(u.Hostname(), port))
}

// deliver is the handler of push runs.
func (e *Executor) deliver(ctx context.Context, r *worker.Run) error {
	tg := r.Target // from the claim
	if tg == nil {
		return worker.Cancel(errors.New("the job has no target"))
	}
	u, host, err := e.parseTarget(tg.URL)
	if err != nil {
		return worker.Cancel(err)
	}
	release, ok := e.slot(host)
	if !ok {
		return worker.Snooze(e.cfg.HostBusyDelay)
	}
	defer release()
	probe := false
	if e.cfg.Breaker.Enabled() {
		d, err := e.breakers.Allow(ctx, host)
		if err != nil {
			return fmt.Errorf("breaker of %s: %w", host, err)
		}
		if !d.Allowed {
			return worker.Snooze(d.RetryIn)
		}
		probe = d.Probe
	}
	res, err := e.send(ctx, r, tg, u)
	// A delivery cut short by the executor's stop (or the run's own timeout) says nothing
	// of the host; a probe's outcome is recorded whatever ended it, or its turn would
	// pass only at ProbeTimeout.
	if e.cfg.Breaker.Enabled() && (probe || ctx.Err() == nil) {
		healthy := err == nil && res.status < 500 && res.status != http.StatusTooManyRequests
		if berr := e.breakers.Record(context.WithoutCancel(ctx), host, healthy, probe); berr != nil {
			e.log.WarnContext(ctx, "record breaker outcome", "host", host, "error", berr)
		}
	}
	if err != nil {
		return err
	}
	switch st := res.status; {
	case st >= 200 && st < 300:
		if len(res.body) > e.cfg.MaxResult {
			// A workflow node's result is its children's input: none rather than a part.
			if _, _, node := r.Workflow(); node {
				return fmt.Errorf("%s %s: HTTP %d: the response body, a workflow node's result, is over the limit of %d bytes",
					tg.Method, u.Host, st, e.cfg.MaxResult)
			}
			res.body = res.body[:e.cfg.MaxResult]
		}
		if len(res.body) > 0 {
			r.SetResult(res.body)
		}
		return nil
	case (st == http.StatusTooManyRequests || st == http.StatusServiceUnavailable) && res.retryAfter >= 0:
		return worker.Snooze(res.retryAfter)
	default:
		return fmt.Errorf("%s %s: HTTP %d%s", tg.Method, u.Host, st, snippet(res.body))
	}
}

type response struct {
	status     int
	body       []byte
	retryAfter time.Duration // -1 when none
}

// send makes one delivery attempt, bounded by the target's timeout.
func (e *Executor) send(ctx context.Context, r *worker.Run, tg *job.Target, u *url.URL) (*response, error) {
	ctx, cancel := context.WithTimeout(ctx, tg.Timeout)
	defer cancel()
	var body io.Reader = http.NoBody
	if len(r.Payload) > 0 {
		body = bytes.NewReader(r.Payload)
	}
	// The URL parsed once (parseTarget), not formatted and parsed again per request.
	req, err := http.NewRequestWithContext(ctx, tg.Method, "", body)
	if err != nil {
		return nil, worker.Cancel(fmt.Errorf("build the request: %v", err))
	}
	req.URL, req.Host = u, u.Host
	for k, v := range tg.Headers {
		req.Header.Set(k, v)
	}
	if req.Header.Get("Content-Type") == "" && len(r.Payload) > 0 {
		ct := "application/octet-stream"
		if isJSON(r.Payload) {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "tock-push/1")
	}
	// Canonical names, set without canonicalising them again.
	req.Header["Tock-Job-Id"] = []string{r.JobID}
	req.Header["Tock-Run-Id"] = []string{r.ID}
	req.Header["Tock-Attempt"] = []string{strconv.Itoa(r.Attempt)}
	req.Header["Tock-Due"] = []string{r.Due.UTC().Format(time.RFC3339Nano)}
	req.Header[worker.SignatureHeader] = []string{Sign(e.cfg.Secrets[0], r.Payload, e.cfg.Now())}
	if wf, node, ok := r.Workflow(); ok {
		req.Header["Tock-Workflow"] = []string{wf}
		req.Header["Tock-Node"] = []string{node}
		// Only the results that may fit in the header are read (maxParentRead).
		parents, over, err := r.ParentResultsUpTo(ctx, maxParentRead)
		if err != nil {
			return nil, fmt.Errorf("read the parents' results: %w", err)
		}
		if v, omitted := encodeParents(parents); v != "" || len(omitted) > 0 || len(over) > 0 {
			omitted = append(omitted, over...)
			sort.Strings(omitted)
			if v != "" {
				req.Header["Tock-Parent-Results"] = []string{v}
			}
			if len(omitted) > 0 {
				req.Header["Tock-Parent-Results-Omitted"] = []string{strings.Join(omitted, ",")}
			}
		}
	}
	resp, err := e.client.Do(req)
	if err != nil {
		// The URL (its query may hold a token) stays out of the recorded error.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%s %s: no response within the target's timeout %s", tg.Method, u.Host, tg.Timeout)
		}
		return nil, fmt.Errorf("%s %s: %w", tg.Method, u.Host, err)
	}
	defer resp.Body.Close()
	res := &response{status: resp.StatusCode, retryAfter: -1}
	if resp.ContentLength != 0 {
		// One byte more than a result may have tells a body over the limit.
		res.body, err = io.ReadAll(io.LimitReader(resp.Body, int64(e.cfg.MaxResult)+1))
		if err != nil && resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return nil, fmt.Errorf("%s %s: read the response: %w", tg.Method, u.Host, err)
		}
		// Drain a little more so that the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	}
	if st := resp.StatusCode; st == http.StatusTooManyRequests || st == http.StatusServiceUnavailable {
		res.retryAfter = retryAfter(resp.Header.Get("Retry-After"), e.cfg.Now())
	}
	return res, nil
}

// retryAfter parses a Retry-After value (seconds or an HTTP date); -1 when absent or
// malformed. At most MaxRetryAfter.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return -1
	}
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return -1
		}
		d = time.Duration(min(n, int64(MaxRetryAfter/time.Second))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = max(t.Sub(now), 0)
	} else {
		return -1
	}
	return min(d, MaxRetryAfter)
}

func snippet(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	s := strings.ToValidUTF8(string(b[:min(len(b), 200)]), "")
	return ": " + strings.Join(strings.Fields(s), " ")
}

func isJSON(b []byte) bool {
	c := strings.TrimSpace(string(b[:min(len(b), 1)]))
	return c == "{" || c == "["
}

// MaxParentHeader bounds the JSON of the parents' results a workflow node's delivery
// carries in its Tock-Parent-Results header (base64url of it, about 4/3 as long): HTTP
// servers commonly refuse headers over 8 KiB.
const MaxParentHeader = 4 << 10

// maxParentRead bounds the bytes of the parents' results a delivery reads from Redis to
// fill its Tock-Parent-Results header, the smaller first: a JSON result goes into the
// header compacted, and one stored with insignificant whitespace (a pretty-printed body)
// may be several times as long as its part of the header, so reading only MaxParentHeader
// bytes would leave out results that fit. 16 times the header: whitespace beyond 15 bytes
// of every 16 is not worth a larger read, and a fan-in of large results reads no more.
const maxParentRead = 16 * MaxParentHeader

// encodeParents returns the Tock-Parent-Results header of a node's delivery: base64url
// (unpadded) of a JSON array [{"node": …, "result": <JSON>} or {"node": …,
// "result_base64": …}], the form of a pulled run's "parents", sorted by node, the
// smaller results first while the array stays within MaxParentHeader; and the parents
// left out (sorted), whose results the API's result endpoint reads.
func encodeParents(parents map[string][]byte) (string, []string) {
	if len(parents) == 0 {
		return "", nil
	}
	type entry struct {
		Node         string          `json:"node"`
		Result       json.RawMessage `json:"result,omitempty"`
		ResultBase64 string          `json:"result_base64,omitempty"`
	}
	names := make([]string, 0, len(parents))
	for n := range parents {
		names = append(names, n)
	}
	sort.Slice(names, func(a, b int) bool {
		if la, lb := len(parents[names[a]]), len(parents[names[b]]); la != lb {
			return la < lb
		}
		return names[a] < names[b]
	})
	var kept []entry
	var omitted []string
	size := 2
	for _, n := range names {
		e := entry{Node: n}
		if b := parents[n]; len(b) > 0 {
			if json.Valid(b) {
				e.Result = b
			} else {
				e.ResultBase64 = base64.StdEncoding.EncodeToString(b)
			}
		}
		j, _ := json.Marshal(e)
		if size+len(j)+1 > MaxParentHeader {
			omitted = append(omitted, n)
			continue
		}
		size += len(j) + 1
		kept = append(kept, e)
	}
	sort.Slice(kept, func(a, b int) bool { return kept[a].Node < kept[b].Node })
	sort.Strings(omitted)
	if len(kept) == 0 {
		return "", omitted
	}
	j, _ := json.Marshal(kept)
	return base64.RawURLEncoding.EncodeToString(j), omitted
}
