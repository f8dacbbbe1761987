package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/worker"
)

// FireConfig configures the fire scenario.
type FireConfig struct {
	Common
	Jobs        int           // one-time jobs scheduled across the window
	Window      time.Duration // their due times spread uniformly over it
	Lead        time.Duration // the window starts this long after scheduling started
	Concurrency int           // worker handler slots
	Payload     int           // payload bytes per job
	Pending     int           // jobs pre-loaded due far in the future
	// ProducerOnly schedules and exits; WorkersOnly runs dispatchers and workers for a
	// namespace another process schedules (set Namespace in both).
	ProducerOnly, WorkersOnly bool
	// Grace is how long to wait after the window for stragglers. Default 30s.
	Grace time.Duration
}

// FireResult is what the fire scenario prints.
type FireResult struct {
	Scenario      string      `json:"scenario"`
	Backend       string      `json:"backend"`
	Shards        int         `json:"shards"`
	Jobs          int         `json:"jobs"`
	Pending       int         `json:"pending"`
	Fired         int         `json:"fired"`
	Duplicates    int         `json:"duplicates"`
	Missing       int         `json:"missing"`
	Early         int         `json:"early"`
	EnqueuePerSec float64     `json:"enqueue_per_sec"`
	FiresPerSec   float64     `json:"fires_per_sec"`
	LatenessMs    Percentiles `json:"lateness_ms"`
	// ClaimAheadMs is how long before its due time each run was claimed, on the Redis
	// clock (0 for a run claimed after it): the dispatchers fire runs a lead ahead
	// (dispatcher.Config.Lead) and the worker holds them until due, so a run claimed
	// ahead starts on time whatever the fire and claim round trips took.
	ClaimAheadMs Percentiles `json:"claim_ahead_ms"`
	// ClaimedAfterDue counts the runs claimed only after their due time: their lateness
	// includes firing and claiming.
	ClaimedAfterDue int `json:"claimed_after_due"`
	// RedisCPUUsPerRun is the CPU time Redis (all masters) used from the end of
	// scheduling to the end of the run, per fired run, in µs: what firing, claiming and
	// acking cost Redis, steadier than lateness on a shared machine. 0 on the embedded
	// Redis.
	RedisCPUUsPerRun float64 `json:"redis_cpu_us_per_run,omitempty"`
	Window           string  `json:"window"`
	Concurrency      int     `json:"concurrency"`
	Payload          int     `json:"payload"`
	// Procs is the GOMAXPROCS the scenario ran with (tock bench's --procs).
	Procs int `json:"procs"`
}

// Fire schedules cfg.Jobs one-time jobs due uniformly across cfg.Window, starting
// cfg.Lead after scheduling started, and measures when no-op handlers start them.
func Fire(ctx context.Context, cfg FireConfig) (*FireResult, error) {
	if cfg.Jobs < 1 || cfg.Window <= 0 || cfg.Lead <= 0 {
		return nil, errors.New("bench fire: --jobs, --window and --lead must be positive")
	}
	if cfg.ProducerOnly && cfg.WorkersOnly {
		return nil, errors.New("bench fire: --producer-only and --workers-only exclude each other")
	}
	if (cfg.ProducerOnly || cfg.WorkersOnly) && cfg.Namespace == "" {
		return nil, errors.New("bench fire: --namespace is required with --producer-only or --workers-only")
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultFireConcurrency
	}
	if cfg.Grace == 0 {
		cfg.Grace = 30 * time.Second
	}
	e, err := connect(ctx, cfg.Common, !cfg.ProducerOnly)
	if err != nil {
		return nil, err
	}
	defer e.close(ctx)
	res := &FireResult{Scenario: "fire", Backend: e.backend, Shards: e.store.Shards(), Jobs: cfg.Jobs,
		Pending: cfg.Pending, Window: cfg.Window.String(), Concurrency: cfg.Concurrency, Payload: cfg.Payload,
		Procs: runtime.GOMAXPROCS(0)}

	// Runs are identified by job index; count each handler start.
	seen := make([]atomic.Int32, cfg.Jobs)
	lat := newLateness()
	claimAhead := newLateness() // its "early" counts the runs claimed after their due time
	var fired atomic.Int64
	var windowStart, windowEnd time.Time
	var inWindow atomic.Int64
	var windowMu sync.RWMutex
	if !cfg.ProducerOnly {
		windowMu.Lock()
		stop, err := e.startEngine(ctx, cfg.Concurrency, func(_ context.Context, r *worker.Run) error {
			started := time.Now()
			i, err := strconv.Atoi(r.JobID[1:])
			if r.JobID[0] != 'f' || err != nil || i < 0 || i >= cfg.Jobs {
				return nil // a pending job, or not ours
			}
			if seen[i].Add(1) == 1 {
				fired.Add(1)
				lat.record(started.Sub(r.Due))
				claimAhead.record(r.Due.Sub(r.ClaimedAt))
				windowMu.RLock()
				if !started.After(windowEnd) {
					inWindow.Add(1)
				}
				windowMu.RUnlock()
			}
			return nil
		}, "noop")
		if err != nil {
			windowMu.Unlock()
			return nil, err
		}
		defer stop()
	}

	if !cfg.WorkersOnly && cfg.Pending > 0 {
		far := time.Now().Add(30 * 24 * time.Hour)
		p := newProgress(cfg.Progress, "pending", cfg.Pending)
		if _, err := e.createAll(ctx, cfg.Pending, p.update, func(i int) *job.Job {
			return &job.Job{ID: "p" + strconv.Itoa(i), Type: "noop", Payload: payload(cfg.Payload),
				Schedule: job.Schedule{At: far.Add(time.Duration(i) * time.Millisecond)}}
		}); err != nil {
			if !cfg.ProducerOnly {
				windowMu.Unlock()
			}
			return nil, fmt.Errorf("bench fire: pre-load pending jobs: %w", err)
		}
	}

	schedStart := time.Now()
	windowStart = schedStart.Add(cfg.Lead)
	windowEnd = windowStart.Add(cfg.Window)
	if !cfg.ProducerOnly {
		windowMu.Unlock()
	}
	if !cfg.WorkersOnly {
		body := payload(cfg.Payload)
		step := float64(cfg.Window) / float64(cfg.Jobs)
		p := newProgress(cfg.Progress, "schedule", cfg.Jobs)
		took, err := e.createAll(ctx, cfg.Jobs, p.update, func(i int) *job.Job {
			return &job.Job{ID: "f" + strconv.Itoa(i), Type: "noop", Payload: body,
				Schedule: job.Schedule{At: windowStart.Add(time.Duration(float64(i) * step))}}
		})
		if err != nil {
			return nil, fmt.Errorf("bench fire: schedule: %w", err)
		}
		res.EnqueuePerSec = round(float64(cfg.Jobs) / took.Seconds())
		if time.Now().After(windowStart) {
			return nil, fmt.Errorf("bench fire: scheduling took %s, longer than --lead %s: raise --lead", took.Round(time.Millisecond), cfg.Lead)
		}
	}
	if cfg.ProducerOnly {
		return res, nil
	}

	cpu := e.meterCPU(ctx)
	p := newProgress(cfg.Progress, "fired", cfg.Jobs)
	deadline := time.NewTimer(time.Until(windowEnd.Add(cfg.Grace)))
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
wait:
	for fired.Load() < int64(cfg.Jobs) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			break wait
		case <-tick.C:
			p.update(int(fired.Load()))
		}
	}
	p.update(int(fired.Load()))
	res.RedisCPUUsPerRun = cpu.perRun(ctx, int(fired.Load()))
	for i := range seen {
		switch n := int(seen[i].Load()); {
		case n == 0:
			res.Missing++
		case n > 1:
			res.Duplicates += n - 1
		}
	}
	res.Fired = int(fired.Load())
	res.Early = lat.early
	res.FiresPerSec = round(float64(inWindow.Load()) / cfg.Window.Seconds())
	res.LatenessMs = lat.percentiles()
	res.ClaimAheadMs, res.ClaimedAfterDue = claimAhead.percentiles(), claimAhead.early
	return res, nil
}

// ThroughputConfig configures the throughput scenario.
type ThroughputConfig struct {
	Common
	Jobs int
	// Concurrency is the worker's handler slots; 0: DefaultConcurrency, or
	// DefaultClusterConcurrency on a Redis Cluster.
	Concurrency int
	Payload     int
	// HTTPWorkers, when above 0, replaces the in-process Go worker with that many
	// workers over the pull protocol (POST /v1/runs:claim and :ack) against an ingest
	// server started in this process on a loopback port.
	HTTPWorkers int
	// ClaimMax is the runs an HTTP worker asks for per claim. Default DefaultClaimMax.
	ClaimMax int
	// SingleAcks has HTTP workers ack each run with a request of its own (POST
	// /v1/runs/{run}:ack) instead of the runs of a claim in one POST /v1/runs:ack.
	SingleAcks bool
}

// ThroughputResult is what the throughput scenario prints.
type ThroughputResult struct {
	Scenario        string  `json:"scenario"`
	Backend         string  `json:"backend"`
	Shards          int     `json:"shards"`
	Jobs            int     `json:"jobs"`
	Processed       int     `json:"processed"`
	Duplicates      int     `json:"duplicates"`
	EnqueuePerSec   float64 `json:"enqueue_per_sec"`
	ProcessedPerSec float64 `json:"processed_per_sec"`
	// RedisCPUUsPerRun is the CPU time Redis (all masters) used while processing, per
	// processed job, in µs (0 on the embedded Redis).
	RedisCPUUsPerRun float64 `json:"redis_cpu_us_per_run,omitempty"`
	Concurrency      int     `json:"concurrency,omitempty"`
	// HTTPWorkers and ClaimMax are ThroughputConfig's; Claims counts the claim requests
	// that answered, AckCalls the ack requests (one per claim that returned runs, or one
	// per run with SingleAcks), Requests both, AckErrors the runs whose ack was refused
	// or failed (none in a normal run).
	HTTPWorkers int `json:"http_workers,omitempty"`
	ClaimMax    int `json:"claim_max,omitempty"`
	Claims      int `json:"claims,omitempty"`
	AckCalls    int `json:"ack_calls,omitempty"`
	Requests    int `json:"requests,omitempty"`
	AckErrors   int `json:"ack_errors,omitempty"`
	// ClaimMs is the latency of the claims that returned runs, AckMs of the ack
	// requests, per HTTP request as the worker saw it (HTTP workers only).
	ClaimMs *Percentiles `json:"claim_ms,omitempty"`
	AckMs   *Percentiles `json:"ack_ms,omitempty"`
	// Procs is the GOMAXPROCS the scenario ran with (tock bench's --procs).
	Procs int `json:"procs"`
}

// Throughput creates cfg.Jobs immediate jobs, then processes them with no-op handlers
// and measures the rate from the first to the last handled.
func Throughput(ctx context.Context, cfg ThroughputConfig) (*ThroughputResult, error) {
	if cfg.Jobs < 1 {
		return nil, errors.New("bench throughput: --jobs must be positive")
	}
	if cfg.Concurrency < 0 {
		return nil, fmt.Errorf("bench throughput: --concurrency %d: want 0 (the default for the backend) or more", cfg.Concurrency)
	}
	if cfg.HTTPWorkers < 0 {
		return nil, fmt.Errorf("bench throughput: --http-workers %d: want 0 (a Go worker) or more", cfg.HTTPWorkers)
	}
	if cfg.HTTPWorkers > 0 {
		return throughputHTTP(ctx, cfg)
	}
	e, err := connect(ctx, cfg.Common, true)
	if err != nil {
		return nil, err
	}
	defer e.close(ctx)
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
		if e.cluster {
			cfg.Concurrency = DefaultClusterConcurrency
		}
	}
	res := &ThroughputResult{Scenario: "throughput", Backend: e.backend, Shards: e.store.Shards(), Jobs: cfg.Jobs, Concurrency: cfg.Concurrency,
		Procs: runtime.GOMAXPROCS(0)}
	body := payload(cfg.Payload)
	p := newProgress(cfg.Progress, "enqueue", cfg.Jobs)
	took, err := e.createAll(ctx, cfg.Jobs, p.update, func(i int) *job.Job {
		return &job.Job{ID: "t" + strconv.Itoa(i), Type: "noop", Payload: body, Schedule: job.Schedule{Now: true}}
	})
	if err != nil {
		return nil, fmt.Errorf("bench throughput: enqueue: %w", err)
	}
	res.EnqueuePerSec = round(float64(cfg.Jobs) / took.Seconds())

	seen := make([]atomic.Int32, cfg.Jobs)
	var processed atomic.Int64
	var first, last atomic.Int64
	cpu := e.meterCPU(ctx)
	stop, err := e.startEngine(ctx, cfg.Concurrency, func(_ context.Context, r *worker.Run) error {
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		i, err := strconv.Atoi(r.JobID[1:])
		if err != nil || i < 0 || i >= cfg.Jobs {
			return nil
		}
		if seen[i].Add(1) == 1 {
			processed.Add(1)
			last.Store(now)
		}
		return nil
	}, "noop")
	if err != nil {
		return nil, err
	}
	defer stop()
	pp := newProgress(cfg.Progress, "processed", cfg.Jobs)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	idle := time.Now()
	for last0 := int64(0); processed.Load() < int64(cfg.Jobs); {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		n := processed.Load()
		pp.update(int(n))
		if n != last0 {
			last0, idle = n, time.Now()
		} else if time.Since(idle) > 30*time.Second {
			break
		}
	}
	pp.update(int(processed.Load()))
	res.Processed = int(processed.Load())
	res.RedisCPUUsPerRun = cpu.perRun(ctx, res.Processed)
	for i := range seen {
		if n := int(seen[i].Load()); n > 1 {
			res.Duplicates += n - 1
		}
	}
	if d := time.Duration(last.Load() - first.Load()); d > 0 {
		res.ProcessedPerSec = round(float64(res.Processed) / d.Seconds())
	}
	return res, nil
}

// MemoryConfig configures the memory scenario.
type MemoryConfig struct {
	Common
	Jobs    int
	Payload int
}

// MemoryResult is what the memory scenario prints.
type MemoryResult struct {
	Scenario string `json:"scenario"`
	Backend  string `json:"backend"`
	Shards   int    `json:"shards"`
	Jobs     int    `json:"jobs"`
	Payload  int    `json:"payload"`
	// The namespace's keys (MEMORY USAGE), summed over the masters: the measure.
	KeysBefore  int64   `json:"keys_memory_before"`
	KeysAfter   int64   `json:"keys_memory_after"`
	BytesPerJob float64 `json:"bytes_per_job"`
	// The servers' used_memory, summed over the masters: for reference only. It also
	// moves with the connections' buffers (a client's pool, one that has just closed),
	// some hundred kilobytes either way, which a small run cannot tell from its jobs.
	UsedBefore      int64   `json:"used_memory_before"`
	UsedAfter       int64   `json:"used_memory_after"`
	UsedBytesPerJob float64 `json:"used_memory_bytes_per_job"`
}

// Memory measures what the keys of an empty namespace take in Redis (MEMORY USAGE) before
// and after scheduling cfg.Jobs jobs due in an hour in it, and used_memory for reference.
func Memory(ctx context.Context, cfg MemoryConfig) (*MemoryResult, error) {
	if cfg.Jobs < 1 {
		return nil, errors.New("bench memory: --jobs must be positive")
	}
	if len(cfg.Redis) == 0 {
		return nil, errEmbeddedMemory
	}
	cfg.Dispatchers = 0
	e, err := connect(ctx, cfg.Common, false)
	if err != nil {
		return nil, err
	}
	defer e.close(ctx)
	res := &MemoryResult{Scenario: "memory", Backend: e.backend, Shards: e.store.Shards(), Jobs: cfg.Jobs, Payload: cfg.Payload}
	// Keys deleted just before (an earlier bench's namespace, UNLINKed) may still be
	// freed in the background; used_memory falls meanwhile and the figure comes out low.
	if err := lazyFreed(ctx, e.rc, 10*time.Second); err != nil {
		return nil, err
	}
	if res.UsedBefore, err = usedMemory(ctx, e.rc); err != nil {
		return nil, err
	}
	if res.KeysBefore, err = keysMemory(ctx, e.rc, e.ns); err != nil {
		return nil, err
	}
	body := payload(cfg.Payload)
	start := time.Now().Add(time.Hour)
	step := float64(time.Hour) / float64(cfg.Jobs)
	p := newProgress(cfg.Progress, "schedule", cfg.Jobs)
	if _, err := e.createAll(ctx, cfg.Jobs, p.update, func(i int) *job.Job {
		return &job.Job{ID: "m" + strconv.Itoa(i), Type: "noop", Payload: body,
			Schedule: job.Schedule{At: start.Add(time.Duration(float64(i) * step))}}
	}); err != nil {
		return nil, fmt.Errorf("bench memory: schedule: %w", err)
	}
	if res.UsedAfter, err = usedMemory(ctx, e.rc); err != nil {
		return nil, err
	}
	if res.KeysAfter, err = keysMemory(ctx, e.rc, e.ns); err != nil {
		return nil, err
	}
	res.BytesPerJob = round(float64(res.KeysAfter-res.KeysBefore) / float64(cfg.Jobs))
	res.UsedBytesPerJob = round(float64(res.UsedAfter-res.UsedBefore) / float64(cfg.Jobs))
	return res, nil
}

func round(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
