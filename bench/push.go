package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/executor"
	"github.com/tockhq/tock/internal/egress"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/signature"
)

// DefaultPushConcurrency is the executor's deliveries in flight in the push scenario.
const DefaultPushConcurrency = 256

// pushSecret signs the push scenario's deliveries; the sink checks every signature.
const pushSecret = "bench-push-secret-0123456789"

// PushConfig configures the push scenario.
type PushConfig struct {
	Common
	Jobs int
	// Concurrency is the executor's deliveries in flight, and its per-host limit (the
	// sink is one host). Default DefaultPushConcurrency.
	Concurrency int
	Payload     int
}

// PushResult is what the push scenario prints.
type PushResult struct {
	Scenario      string  `json:"scenario"`
	Backend       string  `json:"backend"`
	Shards        int     `json:"shards"`
	Jobs          int     `json:"jobs"`
	Delivered     int     `json:"delivered"`  // jobs delivered to the sink at least once
	Duplicates    int     `json:"duplicates"` // deliveries beyond the first, per job
	BadSignatures int     `json:"bad_signatures"`
	EnqueuePerSec float64 `json:"enqueue_per_sec"`
	// DeliveriesPerSec is Delivered over the time from the first delivery the sink
	// received to the last.
	DeliveriesPerSec float64 `json:"deliveries_per_sec"`
	// RedisCPUUsPerRun is the CPU time Redis used while delivering, per delivered job.
	RedisCPUUsPerRun float64 `json:"redis_cpu_us_per_run,omitempty"`
	Concurrency      int     `json:"concurrency"`
	Sink             string  `json:"sink"`
	Procs            int     `json:"procs"`
}

// Push creates cfg.Jobs immediate push jobs whose target is an HTTP sink this scenario
// runs on a loopback port (it verifies each delivery's Tock-Signature and answers 200
// with no body), runs the dispatchers and an executor in this process (its egress
// allowing 127.0.0.0/8 only) and measures deliveries per second.
func Push(ctx context.Context, cfg PushConfig) (*PushResult, error) {
	if cfg.Jobs < 1 {
		return nil, errors.New("bench push: --jobs must be positive")
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultPushConcurrency
	}
	if cfg.Concurrency < 1 {
		return nil, fmt.Errorf("bench push: --concurrency %d: want 1 or more", cfg.Concurrency)
	}
	seen := make([]atomic.Int32, cfg.Jobs)
	var delivered, badSig atomic.Int64
	var first, last atomic.Int64
	secrets := [][]byte{[]byte(pushSecret)}
	// The sink is a fasthttp server: it costs a fraction of net/http's per request, and
	// it shares the machine (and, with --procs, the threads) with the executor it
	// measures.
	sink := &fasthttp.Server{Handler: func(rc *fasthttp.RequestCtx) {
		if signature.Verify(string(rc.Request.Header.Peek("Tock-Signature")), rc.PostBody(), secrets, time.Now(), 0) != nil {
			badSig.Add(1)
			rc.SetStatusCode(fasthttp.StatusUnauthorized)
			return
		}
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		id := rc.Request.Header.Peek("Tock-Job-Id")
		if i, err := strconv.Atoi(string(id[min(1, len(id)):])); err == nil && i >= 0 && i < cfg.Jobs && seen[i].Add(1) == 1 {
			delivered.Add(1)
			last.Store(now)
		}
		rc.SetStatusCode(fasthttp.StatusOK)
	}, ReadTimeout: 10 * time.Second, NoDefaultServerHeader: true, NoDefaultDate: true, NoDefaultContentType: true}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench push: sink: %w", err)
	}
	go func() { _ = sink.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = sink.ShutdownWithContext(sctx)
	}()
	url := "http://" + ln.Addr().String() + "/hook"

	e, err := connect(ctx, cfg.Common, true)
	if err != nil {
		return nil, err
	}
	defer e.close(ctx)
	res := &PushResult{Scenario: "push", Backend: e.backend, Shards: e.store.Shards(), Jobs: cfg.Jobs,
		Concurrency: cfg.Concurrency, Sink: url, Procs: runtime.GOMAXPROCS(0)}
	body := payload(cfg.Payload)
	p := newProgress(cfg.Progress, "enqueue", cfg.Jobs)
	took, err := e.createAll(ctx, cfg.Jobs, p.update, func(i int) *job.Job {
		return &job.Job{ID: "p" + strconv.Itoa(i), Target: &job.Target{URL: url}, Payload: body, Schedule: job.Schedule{Now: true}}
	})
	if err != nil {
		return nil, fmt.Errorf("bench push: enqueue: %w", err)
	}
	res.EnqueuePerSec = round(float64(cfg.Jobs) / took.Seconds())

	allow, err := egress.Parse([]string{"127.0.0.0/8"})
	if err != nil {
		return nil, err
	}
	ex, err := executor.New(executor.Config{Store: e.store, Secrets: []string{pushSecret}, Egress: allow,
		Concurrency: cfg.Concurrency, PerHost: cfg.Concurrency, ID: "bench-executor", Logger: e.common.Logger})
	if err != nil {
		return nil, err
	}
	cpu := e.meterCPU(ctx)
	stopD, err := e.startDispatchers(ctx)
	if err != nil {
		return nil, err
	}
	defer stopD()
	if err := ex.Start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = ex.Stop(sctx)
	}()
	pp := newProgress(cfg.Progress, "delivered", cfg.Jobs)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	idle := time.Now()
	for last0 := int64(0); delivered.Load() < int64(cfg.Jobs); {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		n := delivered.Load()
		pp.update(int(n))
		if n != last0 {
			last0, idle = n, time.Now()
		} else if time.Since(idle) > 30*time.Second {
			break
		}
	}
	pp.update(int(delivered.Load()))
	res.Delivered = int(delivered.Load())
	res.RedisCPUUsPerRun = cpu.perRun(ctx, res.Delivered)
	res.BadSignatures = int(badSig.Load())
	for i := range seen {
		if n := int(seen[i].Load()); n > 1 {
			res.Duplicates += n - 1
		}
	}
	if d := time.Duration(last.Load() - first.Load()); d > 0 {
		res.DeliveriesPerSec = round(float64(res.Delivered) / d.Seconds())
	}
	return res, nil
}
