package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/worker"
)

// WorkflowConfig configures the workflow scenario: a fan-out joined by one node, several
// rounds, then many three-node chains. Workers are the Go SDK's (worker.Worker) in this
// process, with no-op handlers.
type WorkflowConfig struct {
	Common
	// FanOut is the parallel nodes of the fan-out workflow, all joined by one node
	// (rule all_success). Default 10,000; 0 with Chains set skips the fan-out.
	FanOut int
	// Rounds is how many fan-out workflows run, one after the other. Default 5.
	Rounds int
	// Chains is the three-node chain workflows (a → b → c) created at once, then run.
	// Default 100,000; negative skips them.
	Chains int
	// Concurrency is the worker's handler slots. Default DefaultConcurrency, or
	// DefaultClusterConcurrency on a Redis Cluster.
	Concurrency int
}

// WorkflowResult is what the workflow scenario prints. Times on the Redis clock come
// from the engine: a node's end time is when the script that acked its run ran (ms), a
// run's claim time is the claim script's time (µs), and its start is the claim time
// plus the worker's local time from the claim's reply to the handler's start.
type WorkflowResult struct {
	Scenario    string        `json:"scenario"`
	Backend     string        `json:"backend"`
	Shards      int           `json:"shards"`
	Concurrency int           `json:"concurrency"`
	Procs       int           `json:"procs"`
	FanOut      *FanOutResult `json:"fan_out,omitempty"`
	Chains      *ChainsResult `json:"chains,omitempty"`
}

// FanOutResult is the fan-out part of the workflow scenario.
type FanOutResult struct {
	Nodes  int `json:"nodes"` // parallel nodes, plus the join
	Rounds int `json:"rounds"`
	// CreateMs is how long creating each workflow took (one script call), p50 and max
	// over the rounds.
	CreateMs Percentiles `json:"create_ms"`
	// JoinClaimAfterAckMs is, per round, the join's claim time minus the time its last
	// parent was acked, both on the Redis clock: how long the engine took from the last
	// ack to handing the join to a worker (the ack releases it; the worker learns it
	// from the ready signal). Percentiles over the rounds (p90 and p99 are the
	// rounds' max for fewer than 10 and 100 rounds).
	JoinClaimAfterAckMs Percentiles `json:"join_claim_after_ack_ms"`
	// JoinStartAfterAckMs is the same to the join handler's start (Run.StartedAt).
	JoinStartAfterAckMs Percentiles `json:"join_start_after_ack_ms"`
	// NodesPerSec is, per round, the parallel nodes over the time from the first node's
	// start to the last one's ack (Redis clock); p50 and min over the rounds.
	NodesPerSec    float64 `json:"nodes_per_sec_p50"`
	NodesPerSecMin float64 `json:"nodes_per_sec_min"`
	Duplicates     int     `json:"duplicates"`
	// RedisCPUUsPerNode is the Redis CPU time of the rounds (creating and running them)
	// per node, µs (0 on the embedded Redis).
	RedisCPUUsPerNode float64 `json:"redis_cpu_us_per_node,omitempty"`
}

// ChainsResult is the chains part of the workflow scenario.
type ChainsResult struct {
	Chains            int     `json:"chains"`
	Completed         int     `json:"completed"` // chains whose last node ran
	Duplicates        int     `json:"duplicates"`
	CreatePerSec      float64 `json:"create_per_sec"`
	ChainsPerSec      float64 `json:"chains_per_sec"` // from the first node's start to the last chain's last node's
	NodesPerSec       float64 `json:"nodes_per_sec"`  // 3 × chains_per_sec
	RedisCPUUsPerNode float64 `json:"redis_cpu_us_per_node,omitempty"`
}

// Workflow runs the workflow scenario.
func Workflow(ctx context.Context, cfg WorkflowConfig) (*WorkflowResult, error) {
	if cfg.FanOut == 0 && cfg.Chains == 0 {
		cfg.FanOut, cfg.Chains = 10000, 100000
	}
	if cfg.FanOut < 0 || cfg.Rounds < 0 || cfg.Concurrency < 0 {
		return nil, errors.New("bench workflow: --fan-out, --rounds and --concurrency may not be negative")
	}
	if cfg.Rounds == 0 {
		cfg.Rounds = 5
	}
	maxNodes := max(cfg.FanOut+1, job.DefaultMaxNodes)
	e, err := connect(ctx, cfg.Common, true, func(c *shard.Config) { c.MaxNodes = maxNodes })
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
	res := &WorkflowResult{Scenario: "workflow", Backend: e.backend, Shards: e.store.Shards(), Concurrency: cfg.Concurrency,
		Procs: runtime.GOMAXPROCS(0)}
	h := &wfHandler{}
	if cfg.FanOut > 0 {
		stop, err := e.startEngine(ctx, cfg.Concurrency, h.work, "noop")
		if err != nil {
			return nil, err
		}
		res.FanOut, err = fanOut(ctx, e, h, cfg)
		stop()
		if err != nil {
			return nil, err
		}
	}
	if cfg.Chains > 0 {
		if res.Chains, err = chains(ctx, e, h, cfg); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// wfHandler is the no-op handler of the workflow scenario; what it records depends on
// the part that runs.
type wfHandler struct {
	mu sync.Mutex
	// fan-out: the round's workflow, its first start, the join's run, its node counts
	fanWF    string
	fanFirst time.Time
	fanSeen  map[string]int
	fanJoin  chan *worker.Run
	// chains: per chain, the nodes that ran
	chainSeen  []atomic.Int32 // ran nodes: a 1, b 2, c 4; duplicates beyond that
	chainDup   atomic.Int64
	chainDone  atomic.Int64
	chainNodes atomic.Int64 // node runs, for progress
	chainFirst atomic.Int64 // ns, Redis clock
	chainLast  atomic.Int64
}

func (h *wfHandler) work(_ context.Context, r *worker.Run) error {
	wf, node, ok := r.Workflow()
	if !ok {
		return nil
	}
	if wf[0] == 'c' {
		i, err := strconv.Atoi(wf[1:])
		if err != nil || i < 0 || i >= len(h.chainSeen) {
			return nil
		}
		h.chainNodes.Add(1)
		at := r.StartedAt.UnixNano()
		for {
			first := h.chainFirst.Load()
			if (first != 0 && first <= at) || h.chainFirst.CompareAndSwap(first, at) {
				break
			}
		}
		bit := int32(1) << (node[0] - 'a')
		for {
			old := h.chainSeen[i].Load()
			if old&bit != 0 {
				h.chainDup.Add(1)
				return nil
			}
			if h.chainSeen[i].CompareAndSwap(old, old|bit) {
				break
			}
		}
		if node == "c" {
			h.chainDone.Add(1)
			for {
				last := h.chainLast.Load()
				if at <= last || h.chainLast.CompareAndSwap(last, at) {
					break
				}
			}
		}
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if wf != h.fanWF {
		return nil
	}
	if h.fanFirst.IsZero() || r.StartedAt.Before(h.fanFirst) {
		h.fanFirst = r.StartedAt
	}
	h.fanSeen[node]++
	if node == "join" && h.fanSeen[node] == 1 {
		h.fanJoin <- r
	}
	return nil
}

func fanOut(ctx context.Context, e *env, h *wfHandler, cfg WorkflowConfig) (*FanOutResult, error) {
	res := &FanOutResult{Nodes: cfg.FanOut + 1, Rounds: cfg.Rounds}
	nodes := make([]job.Node, 0, cfg.FanOut+1)
	parents := make([]string, cfg.FanOut)
	for i := range cfg.FanOut {
		parents[i] = "n" + strconv.Itoa(i)
		nodes = append(nodes, job.Node{Job: job.Job{ID: parents[i], Type: "noop"}})
	}
	nodes = append(nodes, job.Node{Job: job.Job{ID: "join", Type: "noop"}, DependsOn: parents})
	var claimLat, startLat, create []float64
	var rates []float64
	p := newProgress(e.common.Progress, "fan-out", cfg.Rounds)
	cpu := e.meterCPU(ctx)
	for round := range cfg.Rounds {
		id := "fan" + strconv.Itoa(round)
		join := make(chan *worker.Run, 1)
		h.mu.Lock()
		h.fanWF, h.fanFirst, h.fanSeen, h.fanJoin = id, time.Time{}, map[string]int{}, join
		h.mu.Unlock()
		w := &job.Workflow{ID: id, Jobs: slices.Clone(nodes)}
		t0 := time.Now()
		r, err := e.store.CreateWorkflow(ctx, w)
		if err != nil {
			return nil, fmt.Errorf("bench workflow: create %s: %w", id, err)
		}
		if !r.Created {
			return nil, fmt.Errorf("bench workflow: %s exists", id)
		}
		create = append(create, float64(time.Since(t0).Microseconds())/1000)
		var jr *worker.Run
		select {
		case jr = <-join:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Minute):
			return nil, fmt.Errorf("bench workflow: round %d: the join did not start within 5 minutes", round)
		}
		info, err := waitEnded(ctx, e.store, id)
		if err != nil {
			return nil, err
		}
		var lastAck time.Time
		for _, n := range info.Nodes {
			if n.ID != "join" && n.EndedAt.After(lastAck) {
				lastAck = n.EndedAt
			}
		}
		claimLat = append(claimLat, float64(jr.ClaimedAt.Sub(lastAck).Microseconds())/1000)
		startLat = append(startLat, float64(jr.StartedAt.Sub(lastAck).Microseconds())/1000)
		h.mu.Lock()
		first := h.fanFirst
		for _, c := range h.fanSeen {
			res.Duplicates += c - 1
		}
		if len(h.fanSeen) != cfg.FanOut+1 {
			h.mu.Unlock()
			return nil, fmt.Errorf("bench workflow: round %d: %d of %d nodes ran", round, len(h.fanSeen), cfg.FanOut+1)
		}
		h.fanWF = ""
		h.mu.Unlock()
		if d := lastAck.Sub(first); d > 0 {
			rates = append(rates, float64(cfg.FanOut)/d.Seconds())
		}
		p.update(round + 1)
	}
	res.RedisCPUUsPerNode = cpu.perRun(ctx, cfg.Rounds*(cfg.FanOut+1))
	res.CreateMs = quantiles(create)
	res.JoinClaimAfterAckMs = quantiles(claimLat)
	res.JoinStartAfterAckMs = quantiles(startLat)
	if len(rates) > 0 {
		q := quantiles(rates)
		res.NodesPerSec = round(q.P50)
		slices.Sort(rates)
		res.NodesPerSecMin = round(rates[0])
	}
	return res, nil
}

// waitEnded waits for workflow id to end and returns it.
func waitEnded(ctx context.Context, st *shard.Store, id string) (*shard.WorkflowInfo, error) {
	for {
		info, err := st.Workflow(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("bench workflow: %w", err)
		}
		if info.State != job.WorkflowRunning {
			if info.State != job.WorkflowSucceeded {
				return nil, fmt.Errorf("bench workflow: %s ended %s", id, info.State)
			}
			return info, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// quantiles returns the nearest-rank p50, p90, p99 and max of vs (ms or any unit).
func quantiles(vs []float64) Percentiles {
	if len(vs) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	at := func(q float64) float64 {
		i := int(q*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	r3 := func(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }
	return Percentiles{P50: r3(at(0.5)), P90: r3(at(0.9)), P99: r3(at(0.99)), Max: r3(s[len(s)-1])}
}

func chains(ctx context.Context, e *env, h *wfHandler, cfg WorkflowConfig) (*ChainsResult, error) {
	n := cfg.Chains
	res := &ChainsResult{Chains: n}
	h.chainSeen = make([]atomic.Int32, n)
	// As the throughput scenario does: the chains are created first (their roots ready),
	// then the engine starts, and the rate is taken from the first node's start to the
	// last chain's end.
	p := newProgress(e.common.Progress, "create", n)
	var next, done atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	t0 := time.Now()
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				w := &job.Workflow{ID: "c" + strconv.Itoa(i), Jobs: []job.Node{
					{Job: job.Job{ID: "a", Type: "noop"}},
					{Job: job.Job{ID: "b", Type: "noop"}, DependsOn: []string{"a"}},
					{Job: job.Job{ID: "c", Type: "noop"}, DependsOn: []string{"b"}},
				}}
				if _, err := e.store.CreateWorkflow(ctx, w); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				p.update(int(done.Add(1)))
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, fmt.Errorf("bench workflow: create chains: %w", firstErr)
	}
	res.CreatePerSec = round(float64(n) / time.Since(t0).Seconds())
	cpu := e.meterCPU(ctx)
	stop, err := e.startEngine(ctx, cfg.Concurrency, h.work, "noop")
	if err != nil {
		return nil, err
	}
	defer stop()
	pp := newProgress(e.common.Progress, "chains", n)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	idle := time.Now()
	for last := int64(0); h.chainDone.Load() < int64(n); {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		pp.update(int(h.chainDone.Load()))
		// Progress is any node run: the ready runs go oldest first, so every chain's
		// first node runs before most chains' last.
		d := h.chainNodes.Load()
		if d != last {
			last, idle = d, time.Now()
		} else if time.Since(idle) > 30*time.Second {
			break
		}
	}
	res.Completed = int(h.chainDone.Load())
	res.Duplicates = int(h.chainDup.Load())
	res.RedisCPUUsPerNode = cpu.perRun(ctx, 3*res.Completed)
	if d := time.Duration(h.chainLast.Load() - h.chainFirst.Load()); d > 0 {
		res.ChainsPerSec = round(float64(res.Completed) / d.Seconds())
		res.NodesPerSec = round(3 * float64(res.Completed) / d.Seconds())
	}
	return res, nil
}
