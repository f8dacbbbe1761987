package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/ingest"
)

// IngestConfig configures the ingest scenario.
type IngestConfig struct {
	Common
	// API is the base URL of a running API ("http://host:port"). Empty starts an ingest
	// server in this process, on a free loopback port, over Common's Redis (the embedded
	// one without Common.Redis).
	API string
	// Token is sent as the bearer token.
	Token string
	// Jobs is how many jobs are created.
	Jobs int
	// Conns is the number of connections, each with one request in flight. Default 16.
	Conns int
	// Batch is the jobs per request: 1 posts each job alone to /v1/jobs, more posts
	// arrays to /v1/jobs:batch. Default 1.
	Batch int
	// Payload is the payload bytes per job (a JSON string of Payload-2 letters).
	Payload int
	// Delay is how long after acceptance the jobs are due, so that none fires during the
	// run. Default 1h.
	Delay time.Duration
	// Queue receives the jobs. Default "bench".
	Queue string
}

// IngestResult is what the ingest scenario prints.
type IngestResult struct {
	Scenario string `json:"scenario"`
	Backend  string `json:"backend"` // embedded, redis, cluster(n nodes), or api (a server elsewhere)
	API      string `json:"api"`
	Shards   int    `json:"shards,omitempty"`
	Jobs     int    `json:"jobs"`
	Conns    int    `json:"conns"`
	Batch    int    `json:"batch"`
	Payload  int    `json:"payload"`
	// Accepted counts jobs created (201 alone, or created in a batch), Existing jobs whose
	// id existed already (200), Rejected the rest (a refused item or request, 429...).
	Accepted int `json:"accepted"`
	Existing int `json:"existing"`
	Rejected int `json:"rejected"`
	// Statuses counts requests by HTTP status.
	Statuses       map[string]int `json:"statuses"`
	FirstError     string         `json:"first_error,omitempty"`
	Requests       int            `json:"requests"`
	Seconds        float64        `json:"seconds"`
	AcceptedPerSec float64        `json:"accepted_per_sec"`
	RequestsPerSec float64        `json:"requests_per_sec"`
	// LatencyMs is the time per request, from sending it to reading its whole reply.
	LatencyMs Percentiles `json:"latency_ms"`
}

// Ingest creates cfg.Jobs one-time jobs through the HTTP API, from cfg.Conns connections
// with cfg.Batch jobs per request, and measures the rate of accepted jobs and the latency
// of the requests. The jobs are due cfg.Delay later, so nothing fires meanwhile.
//
// The load generator is built to stay out of the way: request bodies are filled in from
// a pre-encoded template (no JSON encoding per job), replies are read with fasthttp
// without decoding the jobs they hold, and each connection keeps its own histogram.
func Ingest(ctx context.Context, cfg IngestConfig) (*IngestResult, error) {
	if cfg.Jobs < 1 {
		return nil, errors.New("bench ingest: --jobs must be positive")
	}
	if cfg.Conns == 0 {
		cfg.Conns = 16
	}
	if cfg.Batch == 0 {
		cfg.Batch = 1
	}
	if cfg.Conns < 1 || cfg.Batch < 1 || cfg.Payload < 0 || cfg.Delay < 0 {
		return nil, errors.New("bench ingest: --conns and --batch must be positive, --payload and --delay not negative")
	}
	if cfg.Delay == 0 {
		cfg.Delay = time.Hour
	}
	if cfg.Queue == "" {
		cfg.Queue = "bench"
	}
	res := &IngestResult{Scenario: "ingest", Backend: "api", API: cfg.API, Jobs: cfg.Jobs, Conns: cfg.Conns,
		Batch: cfg.Batch, Payload: cfg.Payload, Statuses: map[string]int{}}

	if cfg.API == "" {
		cfg.Dispatchers = 0 // the jobs are due later: nothing to dispatch
		e, err := connect(ctx, cfg.Common, false)
		if err != nil {
			return nil, err
		}
		defer e.close(ctx)
		srv, err := ingest.New(ingest.Config{Store: e.store, Addr: "127.0.0.1:0", MaxBatch: max(cfg.Batch, 10000), Logger: e.common.Logger})
		if err != nil {
			return nil, err
		}
		if err := srv.Start(ctx); err != nil {
			return nil, fmt.Errorf("bench ingest: start the API: %w", err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = srv.Stop(sctx)
		}()
		cfg.API = "http://" + srv.Addr()
		res.API, res.Backend, res.Shards = cfg.API, e.backend, e.store.Shards()
	}

	u, err := url.Parse(cfg.API)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("bench ingest: --api %q: want http://host:port", cfg.API)
	}
	host := u.Host
	if u.Port() == "" {
		host += map[string]string{"http": ":80", "https": ":443"}[u.Scheme]
	}
	hc := &fasthttp.HostClient{
		Addr: host, IsTLS: u.Scheme == "https", Name: "tock-bench",
		// A plain dialer: fasthttp's default one caches addresses with a goroutine that
		// never ends. Only Conns connections are dialled.
		Dial:         func(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, 10*time.Second) },
		MaxConns:     cfg.Conns,
		ReadTimeout:  time.Minute,
		WriteTimeout: time.Minute,
		// Connections are never idle during the run; a short idle time lets the pool's
		// cleaner goroutine end soon after it.
		MaxIdleConnDuration: 100 * time.Millisecond,
		ReadBufferSize:      64 << 10,
		WriteBufferSize:     64 << 10,
	}
	defer hc.CloseIdleConnections()
	path := strings.TrimRight(u.Path, "/") + "/v1/jobs"
	if cfg.Batch > 1 {
		path += ":batch"
	}
	uri := u.Scheme + "://" + u.Host + path

	// Each job's body is the template with its id spliced in.
	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	idPrefix := "i" + hex.EncodeToString(rnd[:]) + "-"
	payloadJSON, _ := json.Marshal(string(payload(max(cfg.Payload-2, 0))))
	head := []byte(`{"id":"` + idPrefix)
	tail := []byte(`","queue":"` + cfg.Queue + `","type":"bench.noop","payload":` + string(payloadJSON) +
		`,"schedule":{"delay":"` + cfg.Delay.String() + `"}}`)
	if cfg.Payload == 0 {
		tail = []byte(`","queue":"` + cfg.Queue + `","type":"bench.noop","schedule":{"delay":"` + cfg.Delay.String() + `"}}`)
	}

	requests := (cfg.Jobs + cfg.Batch - 1) / cfg.Batch
	p := newProgress(cfg.Progress, "ingest", cfg.Jobs)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next, done atomic.Int64
		wg         sync.WaitGroup
		mu         sync.Mutex
		firstErr   error
		hist       = newLatencyHist()
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	start := time.Now()
	for range cfg.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var tally ingestTally
			tally.statuses = map[int]int{}
			h := newLatencyHist()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer func() {
				fasthttp.ReleaseRequest(req)
				fasthttp.ReleaseResponse(resp)
				mu.Lock()
				res.Accepted += tally.accepted
				res.Existing += tally.existing
				res.Rejected += tally.rejected
				res.Requests += tally.requests
				for s, n := range tally.statuses {
					res.Statuses[strconv.Itoa(s)] += n
				}
				if res.FirstError == "" {
					res.FirstError = tally.firstError
				}
				hist.Merge(h)
				mu.Unlock()
			}()
			req.Header.SetMethod(fasthttp.MethodPost)
			req.SetRequestURI(uri)
			req.Header.SetContentType("application/json")
			if cfg.Token != "" {
				req.Header.Set("Authorization", "Bearer "+cfg.Token)
			}
			var body []byte
			for runCtx.Err() == nil {
				r := int(next.Add(1)) - 1
				if r >= requests {
					return
				}
				lo, hi := r*cfg.Batch, min((r+1)*cfg.Batch, cfg.Jobs)
				body = body[:0]
				if cfg.Batch > 1 {
					body = append(body, '[')
				}
				for i := lo; i < hi; i++ {
					if i > lo {
						body = append(body, ',')
					}
					body = append(body, head...)
					body = strconv.AppendInt(body, int64(i), 10)
					body = append(body, tail...)
				}
				if cfg.Batch > 1 {
					body = append(body, ']')
				}
				req.SetBodyRaw(body)
				t0 := time.Now()
				if err := hc.Do(req, resp); err != nil {
					fail(fmt.Errorf("bench ingest: POST %s: %w", path, err))
					return
				}
				_ = h.RecordValue(max(time.Since(t0).Microseconds(), 1))
				tally.add(resp.StatusCode(), resp.Body(), hi-lo, cfg.Batch > 1)
				p.update(int(done.Add(int64(hi - lo))))
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.Seconds = float64(took.Milliseconds()) / 1000
	res.AcceptedPerSec = round(float64(res.Accepted) / took.Seconds())
	res.RequestsPerSec = round(float64(res.Requests) / took.Seconds())
	res.LatencyMs = histPercentiles(hist)
	return res, nil
}

// ingestTally counts one connection's replies.
type ingestTally struct {
	accepted, existing, rejected, requests int
	statuses                               map[int]int
	firstError                             string
}

func (t *ingestTally) add(status int, body []byte, jobs int, batch bool) {
	t.requests++
	t.statuses[status]++
	switch {
	case !batch && status == fasthttp.StatusCreated:
		t.accepted++
		return
	case !batch && status == fasthttp.StatusOK:
		t.existing++
		return
	case batch && status >= 200 && status < 300:
		c, ok := batchCounts(body)
		if !ok || c.Created+c.Existing+c.Failed != jobs {
			c, ok = decodeBatchCounts(body)
		}
		if ok && c.Created+c.Existing+c.Failed == jobs {
			t.accepted += c.Created
			t.existing += c.Existing
			t.rejected += c.Failed
			if c.Failed > 0 && t.firstError == "" {
				t.firstError = firstItemError(body)
			}
			return
		}
		t.rejected += jobs
		if t.firstError == "" {
			t.firstError = fmt.Sprintf("%d: a batch reply whose counts do not add up to the %d jobs sent: %.200s", status, jobs, body)
		}
		return
	}
	t.rejected += jobs
	if t.firstError == "" {
		var r ingest.ErrorReply
		if json.Unmarshal(body, &r) == nil && r.Error.Code != "" {
			t.firstError = (&ingest.APIError{Status: status, Detail: r.Error}).Error()
		} else {
			t.firstError = fmt.Sprintf("%d: %.200s", status, body)
		}
	}
}

// batchCounts reads the counts of a batch reply without decoding its results (a reply of
// 1000 jobs is some 400 KB of JSON: decoding every reply would make the load generator the
// bottleneck). Job objects have no "created", "existing" or "failed" key and the bench's
// payloads are letters, so the last occurrence of each key is the top-level one; the
// caller checks that the counts add up to the jobs sent, and decodes the reply when not.
func batchCounts(body []byte) (ingest.BatchReply, bool) {
	var r ingest.BatchReply
	for _, f := range []struct {
		key string
		v   *int
	}{{`"created":`, &r.Created}, {`"existing":`, &r.Existing}, {`"failed":`, &r.Failed}} {
		at := bytes.LastIndex(body, []byte(f.key))
		if at < 0 {
			return r, false
		}
		rest := bytes.TrimLeft(body[at+len(f.key):], " \t\r\n")
		n := 0
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		v, err := strconv.Atoi(string(rest[:n]))
		if err != nil {
			return r, false
		}
		*f.v = v
	}
	return r, true
}

// decodeBatchCounts counts the items of a batch reply by their status.
func decodeBatchCounts(body []byte) (ingest.BatchReply, bool) {
	var r struct {
		Results []struct {
			Status int `json:"status"`
		} `json:"results"`
	}
	var c ingest.BatchReply
	if err := json.Unmarshal(body, &r); err != nil {
		return c, false
	}
	for _, it := range r.Results {
		switch it.Status {
		case fasthttp.StatusCreated:
			c.Created++
		case fasthttp.StatusOK:
			c.Existing++
		default:
			c.Failed++
		}
	}
	return c, true
}

// firstItemError returns the first failed item's error of a batch reply.
func firstItemError(body []byte) string {
	var r ingest.BatchReply
	if err := json.Unmarshal(body, &r); err != nil {
		return "a batch item failed"
	}
	for _, it := range r.Results {
		if it.Error != nil {
			return (&ingest.APIError{Status: it.Status, Detail: *it.Error}).Error()
		}
	}
	return "a batch item failed"
}

// newLatencyHist is a histogram of request latencies in µs, 1 µs to 10 min.
func newLatencyHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
}

func histPercentiles(h *hdrhistogram.Histogram) Percentiles {
	ms := func(v int64) float64 { return float64(v) / 1000 }
	return Percentiles{
		P50: ms(h.ValueAtQuantile(50)), P90: ms(h.ValueAtQuantile(90)),
		P99: ms(h.ValueAtQuantile(99)), Max: ms(h.Max()),
	}
}
