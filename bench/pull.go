package bench

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/job"
)

// DefaultClaimMax is the runs an HTTP worker of the throughput scenario asks for per
// claim (--claim-max).
const DefaultClaimMax = 200

// startDispatchers starts the in-process dispatchers of e (no worker).
func (e *env) startDispatchers(ctx context.Context) (stop func(), err error) {
	var ds []*dispatcher.Dispatcher
	stop = func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, d := range ds {
			_ = d.Stop(sctx)
		}
	}
	for i := 0; i < e.common.Dispatchers; i++ {
		d, err := dispatcher.New(dispatcher.Config{Store: e.store, Name: fmt.Sprintf("bench-%d-d", i), Logger: e.common.Logger, Coalesce: e.common.Coalesce, Lead: e.common.FireLead})
		if err != nil {
			stop()
			return nil, err
		}
		if err := d.Start(ctx); err != nil {
			stop()
			return nil, err
		}
		ds = append(ds, d)
	}
	return stop, nil
}

// throughputHTTP is the throughput scenario with cfg.HTTPWorkers workers over the pull
// protocol: an ingest server in this process on a free loopback port, and goroutines
// that claim runs with POST /v1/runs:claim (cfg.ClaimMax a call, waiting up to a second)
// and ack the runs of each claim with one POST /v1/runs:ack, through ingest.Client
// (cfg.SingleAcks: one POST /v1/runs/{run}:ack per run instead). Each worker claims
// again while its last claim's runs are acked, from a goroutine of its own.
func throughputHTTP(ctx context.Context, cfg ThroughputConfig) (*ThroughputResult, error) {
	if cfg.ClaimMax == 0 {
		cfg.ClaimMax = DefaultClaimMax
	}
	if cfg.ClaimMax < 1 || cfg.ClaimMax > ingest.MaxClaimRuns {
		return nil, fmt.Errorf("bench throughput: --claim-max %d: want 1 to %d", cfg.ClaimMax, ingest.MaxClaimRuns)
	}
	e, err := connect(ctx, cfg.Common, true)
	if err != nil {
		return nil, err
	}
	defer e.close(ctx)
	res := &ThroughputResult{Scenario: "throughput", Backend: e.backend, Shards: e.store.Shards(), Jobs: cfg.Jobs,
		HTTPWorkers: cfg.HTTPWorkers, ClaimMax: cfg.ClaimMax, Procs: runtime.GOMAXPROCS(0)}
	body := payload(cfg.Payload)
	p := newProgress(cfg.Progress, "enqueue", cfg.Jobs)
	took, err := e.createAll(ctx, cfg.Jobs, p.update, func(i int) *job.Job {
		return &job.Job{ID: "t" + strconv.Itoa(i), Type: "noop", Payload: body, Schedule: job.Schedule{Now: true}}
	})
	if err != nil {
		return nil, fmt.Errorf("bench throughput: enqueue: %w", err)
	}
	res.EnqueuePerSec = round(float64(cfg.Jobs) / took.Seconds())

	srv, err := ingest.New(ingest.Config{Store: e.store, Addr: "127.0.0.1:0", Logger: e.common.Logger})
	if err != nil {
		return nil, err
	}
	if err := srv.Start(ctx); err != nil {
		return nil, fmt.Errorf("bench throughput: start the API: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = srv.Stop(sctx)
	}()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 2 * cfg.HTTPWorkers, MaxIdleConnsPerHost: 2 * cfg.HTTPWorkers, IdleConnTimeout: time.Minute}}
	defer hc.CloseIdleConnections()
	client, err := ingest.NewClient("http://"+srv.Addr(), "", ingest.WithHTTPClient(hc), ingest.WithUserAgent("tock-bench"))
	if err != nil {
		return nil, err
	}

	seen := make([]atomic.Int32, cfg.Jobs)
	var processed, claims, ackCalls, ackErrs atomic.Int64
	var first, last atomic.Int64
	var errMu, histMu sync.Mutex
	claimHist, ackHist := newLatencyHist(), newLatencyHist()
	var firstErr error
	cpu := e.meterCPU(ctx)
	stopD, err := e.startDispatchers(ctx)
	if err != nil {
		return nil, err
	}
	defer stopD()
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	done := func(r *ingest.ClaimedRun) {
		i, err := strconv.Atoi(r.JobID[1:])
		if err != nil || i < 0 || i >= cfg.Jobs {
			return
		}
		if seen[i].Add(1) == 1 {
			processed.Add(1)
			last.Store(time.Now().UnixNano())
		}
	}
	// ack reports the runs of one claim, in one request (or one per run).
	ack := func(runs []ingest.ClaimedRun, ah *hdrhistogram.Histogram) {
		if cfg.SingleAcks {
			for k := range runs {
				r := &runs[k]
				t1 := time.Now()
				ackCalls.Add(1)
				if _, err := client.AckRun(wctx, r.Run, r.Token, nil); err != nil {
					ackErrs.Add(1)
					continue
				}
				_ = ah.RecordValue(time.Since(t1).Microseconds())
				done(r)
			}
			return
		}
		acks := make([]ingest.RunAck, len(runs))
		for k, r := range runs {
			acks[k] = ingest.RunAck{Run: r.Run, Token: r.Token}
		}
		t1 := time.Now()
		ackCalls.Add(1)
		ar, err := client.AckRuns(wctx, acks)
		if err != nil || len(ar.Runs) != len(acks) {
			ackErrs.Add(int64(len(acks)))
			return
		}
		_ = ah.RecordValue(time.Since(t1).Microseconds())
		for k := range ar.Runs {
			if ar.Runs[k].Status != 200 {
				ackErrs.Add(1)
				continue
			}
			done(&runs[k])
		}
	}
	for w := range cfg.HTTPWorkers {
		// A worker claims again while the runs of its last claim are acked, as the
		// reference workers do (their acks go from a thread of their own); at most one
		// claim's runs wait for the ack in flight.
		pending := make(chan []ingest.ClaimedRun, 1)
		ah := newLatencyHist()
		wg.Add(2)
		go func() {
			defer wg.Done()
			for runs := range pending {
				ack(runs, ah)
			}
			histMu.Lock()
			ackHist.Merge(ah)
			histMu.Unlock()
		}()
		go func() {
			defer wg.Done()
			defer close(pending)
			name := "bench-http-" + strconv.Itoa(w)
			ch := newLatencyHist()
			defer func() {
				histMu.Lock()
				claimHist.Merge(ch)
				histMu.Unlock()
			}()
			for wctx.Err() == nil {
				t0 := time.Now()
				reply, err := client.ClaimRuns(wctx, ingest.ClaimRequest{Queues: []string{job.DefaultQueue}, Max: cfg.ClaimMax, Wait: "1s", Worker: name})
				if err != nil {
					if wctx.Err() == nil {
						errMu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						errMu.Unlock()
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				claims.Add(1)
				if len(reply.Runs) == 0 {
					continue
				}
				_ = ch.RecordValue(time.Since(t0).Microseconds())
				first.CompareAndSwap(0, time.Now().UnixNano())
				pending <- reply.Runs
			}
		}()
	}
	pp := newProgress(cfg.Progress, "processed", cfg.Jobs)
	tick := time.NewTicker(50 * time.Millisecond)
	idle := time.Now()
	for last0 := int64(0); processed.Load() < int64(cfg.Jobs) && ctx.Err() == nil; {
		<-tick.C
		n := processed.Load()
		pp.update(int(n))
		if n != last0 {
			last0, idle = n, time.Now()
		} else if time.Since(idle) > 30*time.Second {
			break
		}
	}
	tick.Stop()
	pp.update(int(processed.Load()))
	res.Processed = int(processed.Load())
	res.RedisCPUUsPerRun = cpu.perRun(ctx, res.Processed)
	cancel()
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for i := range seen {
		if n := int(seen[i].Load()); n > 1 {
			res.Duplicates += n - 1
		}
	}
	if d := time.Duration(last.Load() - first.Load()); d > 0 {
		res.ProcessedPerSec = round(float64(res.Processed) / d.Seconds())
	}
	res.Claims, res.AckErrors = int(claims.Load()), int(ackErrs.Load())
	res.ClaimMs, res.AckMs = ptr(histPercentiles(claimHist)), ptr(histPercentiles(ackHist))
	res.AckCalls = int(ackCalls.Load())
	res.Requests = res.Claims + res.AckCalls
	if res.Processed < cfg.Jobs && firstErr != nil {
		return res, fmt.Errorf("bench throughput: %d of %d jobs processed; first claim error: %w", res.Processed, cfg.Jobs, firstErr)
	}
	return res, nil
}

func ptr[T any](v T) *T { return &v }
