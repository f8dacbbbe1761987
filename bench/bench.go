// Package bench is tock's load generator, behind `tock bench`. Each scenario schedules
// jobs, runs dispatchers and workers with no-op handlers, and reports what it measured as
// one JSON object: fire rate, lateness percentiles (handler start − due time, in an HDR
// histogram), duplicates, misses, early firings, throughput, Redis memory per job.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/worker"
)

// Common holds the settings every scenario shares.
type Common struct {
	// Redis lists addresses of a server or Cluster seeds; empty runs an embedded
	// in-memory Redis (miniredis: a quick look, not a measurement).
	Redis []string
	// Shards of the bench namespace. Default 64.
	Shards int
	// Bucket is the due-bucket width of the bench namespace (shard.Config.BucketSize).
	// Default 1m.
	Bucket time.Duration
	// Namespace to use; default a fresh random one, deleted at the end unless Keep.
	Namespace string
	// Keep leaves the namespace's keys in Redis at the end.
	Keep bool
	// Dispatchers run in this process. Default 1; 0 relies on dispatchers elsewhere.
	Dispatchers int
	// Coalesce is the dispatchers' dispatcher.Config.Coalesce (0: its default).
	Coalesce time.Duration
	// FireLead is the dispatchers' dispatcher.Config.Lead (0: its default; negative:
	// none).
	FireLead time.Duration
	// Progress receives a progress line while the scenario runs; nil for none.
	Progress io.Writer
	// Logger receives errors of the engine; nil discards.
	Logger *slog.Logger
}

// Default handler slots of the bench worker. The fire scenario's default is larger
// because its worker once held the runs that dispatchers fire ahead of their due time
// (dispatcher.Config.Lead) in at most Concurrency+Prefetch places; it now holds them
// apart from its slots (worker.Config.Hold), and the default stays so that its figures
// compare with earlier ones.
//
// On a Redis Cluster the throughput scenario takes DefaultClusterConcurrency instead: a
// claim round waits for the slowest of the nodes it asks, and more slots keep every node
// busy. On the 3-master cluster of bench/README.md: a median of 84,482 jobs/s in 17 runs
// with 1,000 slots, against 70,038 in 15 with 200; on one server 200 did better (94,119
// against 72,920).
const (
	DefaultConcurrency        = 200
	DefaultFireConcurrency    = 1000
	DefaultClusterConcurrency = 1000
)

// Percentiles are lateness figures in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// env is a connected bench environment.
type env struct {
	common  Common
	backend string
	cluster bool // the client sees more than one node
	rc      rueidis.Client
	store   *shard.Store
	mini    *miniredis.Miniredis
	ns      string
}

func (c Common) withDefaults() Common {
	if c.Shards == 0 {
		c.Shards = shard.DefaultShards
	}
	if c.Dispatchers < 0 {
		c.Dispatchers = 0
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

func connect(ctx context.Context, c Common, defaultDispatchers bool, opts ...func(*shard.Config)) (*env, error) {
	c = c.withDefaults()
	if defaultDispatchers && c.Dispatchers == 0 {
		c.Dispatchers = 1
	}
	e := &env{common: c, ns: c.Namespace}
	if e.ns == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		e.ns = "bench" + hex.EncodeToString(b[:])
	}
	opt := rueidis.ClientOption{
		InitAddress:       c.Redis,
		DisableCache:      true,
		PipelineMultiplex: 2,
		// Big batches: let one round trip carry them.
		ReadBufferEachConn:  1 << 20,
		WriteBufferEachConn: 1 << 20,
	}
	if len(c.Redis) == 0 {
		e.mini = miniredis.NewMiniRedis()
		if err := e.mini.Start(); err != nil {
			return nil, fmt.Errorf("bench: start embedded redis: %w", err)
		}
		opt.InitAddress = []string{e.mini.Addr()}
		opt.ForceSingleClient, opt.AlwaysRESP2 = true, true
		e.backend = "embedded"
	}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		e.close(ctx)
		return nil, fmt.Errorf("bench: connect to redis %v: %w", c.Redis, err)
	}
	e.rc = rc
	if e.backend == "" {
		e.backend = "redis"
		if len(rc.Nodes()) > 1 {
			e.cluster = true
			e.backend = fmt.Sprintf("cluster(%d nodes)", len(rc.Nodes()))
		}
	}
	scfg := shard.Config{Namespace: e.ns, Shards: c.Shards, BucketSize: c.Bucket}
	for _, o := range opts {
		o(&scfg)
	}
	e.store, err = shard.Open(ctx, rc, scfg)
	if err != nil {
		e.close(ctx)
		return nil, err
	}
	return e, nil
}

// close deletes the namespace (unless Keep) and closes the connections.
func (e *env) close(ctx context.Context) {
	if e.rc != nil && e.store != nil && !e.common.Keep && e.common.Namespace == "" {
		_ = deleteNamespace(ctx, e.rc, e.ns)
	}
	if e.rc != nil {
		e.rc.Close()
	}
	if e.mini != nil {
		e.mini.Close()
	}
}

// deleteNamespace unlinks every key of ns on every master, in batches.
func deleteNamespace(ctx context.Context, rc rueidis.Client, ns string) error {
	return eachNamespaceKeys(ctx, rc, ns, 10000, func(_ string, _ rueidis.Client, keys []string) error {
		cmds := make(rueidis.Commands, 0, len(keys))
		for _, k := range keys {
			cmds = append(cmds, rc.B().Unlink().Key(k).Build())
		}
		rc.DoMulti(ctx, cmds...)
		return nil
	})
}

// eachNamespaceKeys SCANs every master for the keys of namespace ns (count a call) and
// hands each non-empty batch to fn with the master's address and client; it stops at the
// first error.
func eachNamespaceKeys(ctx context.Context, rc rueidis.Client, ns string, count int64,
	fn func(addr string, node rueidis.Client, keys []string) error) error {
	addrs, nodes, err := shard.Primaries(ctx, rc)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	for _, addr := range addrs {
		node := nodes[addr]
		var cursor uint64
		for {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(ns+":*").Count(count).Build()).AsScanEntry()
			if err != nil {
				return fmt.Errorf("bench: SCAN on %s: %w", addr, err)
			}
			if len(e.Elements) > 0 {
				if err := fn(addr, node, e.Elements); err != nil {
					return err
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// startEngine starts the in-process dispatchers and workers.
func (e *env) startEngine(ctx context.Context, concurrency int, handler worker.HandlerFunc, types ...string) (stop func(), err error) {
	var ds []*dispatcher.Dispatcher
	for i := 0; i < e.common.Dispatchers; i++ {
		d, err := dispatcher.New(dispatcher.Config{Store: e.store, Name: fmt.Sprintf("bench-%d-d", i), Logger: e.common.Logger, Coalesce: e.common.Coalesce, Lead: e.common.FireLead})
		if err != nil {
			return nil, err
		}
		if err := d.Start(ctx); err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	w, err := worker.New(worker.Config{Store: e.store, Concurrency: concurrency, Prefetch: concurrency, Logger: e.common.Logger})
	if err != nil {
		return nil, err
	}
	for _, t := range types {
		w.Handle(t, handler)
	}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
		for _, d := range ds {
			_ = d.Stop(sctx)
		}
	}, nil
}

// createAll creates jobs in batches from several goroutines and returns how long it took.
func (e *env) createAll(ctx context.Context, n int, progress func(int), mk func(i int) *job.Job) (time.Duration, error) {
	const batch, parallel = 2000, 8
	start := time.Now()
	var next, done atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for g := 0; g < parallel; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			jobs := make([]*job.Job, 0, batch)
			for {
				lo := int(next.Add(batch)) - batch
				if lo >= n || ctx.Err() != nil {
					return
				}
				hi := min(lo+batch, n)
				jobs = jobs[:0]
				for i := lo; i < hi; i++ {
					jobs = append(jobs, mk(i))
				}
				res, err := e.store.Create(ctx, jobs)
				if err == nil {
					for _, r := range res {
						if r.Err != nil {
							err = r.Err
							break
						}
					}
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				d := done.Add(int64(hi - lo))
				if progress != nil {
					progress(int(d))
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), firstErr
}

// payload returns n bytes.
func payload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte('a' + i%26)
	}
	return p
}

// lateness collects handler start − due in an HDR histogram (µs, 1 µs to 10 min).
type lateness struct {
	mu    sync.Mutex
	h     *hdrhistogram.Histogram
	early int
}

func newLateness() *lateness {
	return &lateness{h: hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)}
}

func (l *lateness) record(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d < 0 {
		l.early++
		d = 0
	}
	_ = l.h.RecordValue(max(int64(d/time.Microsecond), 1))
}

func (l *lateness) percentiles() Percentiles {
	l.mu.Lock()
	defer l.mu.Unlock()
	ms := func(v int64) float64 { return float64(v) / 1000 }
	return Percentiles{
		P50: ms(l.h.ValueAtQuantile(50)), P90: ms(l.h.ValueAtQuantile(90)),
		P99: ms(l.h.ValueAtQuantile(99)), Max: ms(l.h.Max()),
	}
}

// progressLine prints "\r<label> n/total" at most every 200 ms.
type progressLine struct {
	w     io.Writer
	label string
	total int
	mu    sync.Mutex
	last  time.Time
}

func (p *progressLine) update(n int) {
	if p == nil || p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < 200*time.Millisecond && n < p.total {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, "\r%-10s %d/%d (%.0f%%)   ", p.label, n, p.total, 100*float64(n)/float64(max(p.total, 1)))
	if n >= p.total {
		fmt.Fprintln(p.w)
	}
}

func newProgress(w io.Writer, label string, total int) *progressLine {
	if w == nil {
		return nil
	}
	return &progressLine{w: w, label: label, total: total}
}

// keysMemory sums MEMORY USAGE (every element counted: SAMPLES 0) over the keys of
// namespace ns on every master: what the namespace's data takes, whatever else the server
// holds or frees meanwhile.
func keysMemory(ctx context.Context, rc rueidis.Client, ns string) (int64, error) {
	var total int64
	err := eachNamespaceKeys(ctx, rc, ns, 1000, func(addr string, node rueidis.Client, keys []string) error {
		cmds := make(rueidis.Commands, 0, len(keys))
		for _, k := range keys {
			cmds = append(cmds, node.B().MemoryUsage().Key(k).Samples(0).Build())
		}
		for i, r := range node.DoMulti(ctx, cmds...) {
			n, err := r.AsInt64()
			if err != nil && !rueidis.IsRedisNil(err) { // nil: deleted since the SCAN
				return fmt.Errorf("bench: MEMORY USAGE %s on %s: %w", keys[i], addr, err)
			}
			total += n
		}
		return nil
	})
	return total, err
}

// usedMemory sums INFO memory used_memory over the masters.
func usedMemory(ctx context.Context, rc rueidis.Client) (int64, error) {
	total, err := infoSum(ctx, rc, "memory", "used_memory")
	return int64(total), err
}

// lazyFreed waits, at most wait, until no master frees deleted values in the background
// (INFO memory lazyfree_pending_objects).
func lazyFreed(ctx context.Context, rc rueidis.Client, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		pending, err := infoSum(ctx, rc, "memory", "lazyfree_pending_objects")
		if err != nil || pending == 0 || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// redisCPU sums the CPU time (user + system) the masters have used so far.
func redisCPU(ctx context.Context, rc rueidis.Client) (time.Duration, error) {
	total, err := infoSum(ctx, rc, "cpu", "used_cpu_user", "used_cpu_sys")
	return time.Duration(total * float64(time.Second)), err
}

// infoSum sums the named fields of an INFO section over the masters.
func infoSum(ctx context.Context, rc rueidis.Client, section string, fields ...string) (float64, error) {
	addrs, nodes, err := shard.Primaries(ctx, rc)
	if err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	var total float64
	for _, addr := range addrs {
		node := nodes[addr]
		info, err := node.Do(ctx, node.B().Info().Section(section).Build()).ToString()
		if err != nil {
			return 0, fmt.Errorf("bench: INFO %s: %w", section, err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok || !slices.Contains(fields, k) {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("bench: INFO %s %s %q: %w", section, k, v, err)
			}
			total += f
		}
	}
	return total, nil
}

// cpuMeter measures the Redis CPU time of a phase of a scenario on a real Redis; on the
// embedded one (no INFO cpu) it measures nothing.
type cpuMeter struct {
	rc    rueidis.Client
	start time.Duration
	err   error
}

func (e *env) meterCPU(ctx context.Context) *cpuMeter {
	if e.backend == "embedded" {
		return &cpuMeter{}
	}
	m := &cpuMeter{rc: e.rc}
	m.start, m.err = redisCPU(ctx, e.rc)
	return m
}

// perRun returns the Redis CPU µs per run since the meter started, 0 when not measured.
func (m *cpuMeter) perRun(ctx context.Context, runs int) float64 {
	if m.rc == nil || m.err != nil || runs == 0 {
		return 0
	}
	end, err := redisCPU(ctx, m.rc)
	if err != nil {
		return 0
	}
	return round(float64((end - m.start).Microseconds()) / float64(runs))
}

var errEmbeddedMemory = errors.New("bench memory: needs a real Redis (--redis host:port); the embedded one has no INFO memory")
