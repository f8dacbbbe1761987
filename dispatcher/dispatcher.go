// Package dispatcher fires due runs. A Dispatcher heartbeats a membership record, works
// out which shards it should own (a consistent-hash ring over the live dispatchers),
// takes a lease per shard, and runs one loop per owned shard that sleeps until the
// shard's earliest due time (or until a wake signal says an earlier run arrived), fires
// due runs in batches, and reaps runs whose visibility deadline passed.
//
// Leases carry a fencing epoch that the fire and reap scripts check, so a dispatcher
// that lost its lease (a pause, a partition) cannot fire: several dispatchers may race
// over the same shards and every run still fires once.
package dispatcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"

	"github.com/tockhq/tock/internal/limit"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// Config configures a Dispatcher.
type Config struct {
	// Store is the namespace to dispatch. Required.
	Store *shard.Store
	// Name identifies the dispatcher in leases and membership. Default: host name plus
	// a random suffix. [A-Za-z0-9._~-], at most 100 bytes.
	Name string
	// LeaseTTL is how long a shard lease and the membership record live without renewal;
	// a dead dispatcher's shards fire again on another within about LeaseTTL plus a
	// third of it. Default 3s, at least 300ms. Renewals happen every LeaseTTL/3.
	LeaseTTL time.Duration
	// BatchSize is the most runs one fire or reap call moves. Default 1000. Loops whose
	// last call fired BatchSize/4 runs or more (runs come due faster than a call per
	// Coalesce can carry) fire one at a time, so that workers' claims are not queued in
	// Redis behind many big fire calls.
	BatchSize int
	// MaxSleep caps how long a shard loop sleeps without a wake signal: the safety net
	// for a lost signal. Default 1s.
	MaxSleep time.Duration
	// Lead is how far ahead of their due time runs are fired: a run due within Lead of
	// the Redis clock moves to its ready set now, and the worker that claims it holds it
	// until its due time (Redis clock) before starting its handler, so the fire and claim
	// round trips are paid before the due time instead of after it. A fired run shows
	// as ready (and, once claimed, running) up to Lead early, and ready runs are claimed
	// in priority order, then due order, so a run of higher priority due within Lead is
	// claimed before lower-priority runs due now. A worker holds such runs without a
	// handler slot (worker.Config.Hold), and hands one back when its job is paused or
	// changed before its due time. Default 100ms; a negative value fires runs only once
	// due.
	Lead time.Duration
	// Coalesce is the shortest sleep between two fires of a shard when runs keep coming
	// due: runs due within it are fired together, in one call. Without a lead they are
	// at most Coalesce late; with one, Coalesce only has to leave the fire and claim
	// round trips time to finish before the due time. It trades lateness (or lead) for
	// far fewer script calls under load. Default Lead/2, or 2ms without a lead; a
	// negative value fires every run at its own time.
	Coalesce time.Duration
	// Metrics receives counts of fired and reaped runs and lease changes. Nil means
	// none.
	Metrics Metrics
	// NoFigures turns off sampling the queues' fired totals into the per-minute figures
	// (every 5s, one HGETALL per shard; the dashboard's fires per minute). Default false.
	NoFigures bool
	// Logger receives errors of the loops (rate-limited) and ownership changes. Nil
	// discards.
	Logger *slog.Logger
}

// Config.Lead's default and bound. Runs fired ahead wait in workers, which hold them
// in memory: the bound keeps that to a fraction of a second of runs.
const (
	DefaultLead = 100 * time.Millisecond
	MaxLead     = time.Second
)

// Lease changes, as Metrics.LeaseChanged reports them.
const (
	LeaseAcquired = "acquired" // the dispatcher took a shard and started its loop
	LeaseLost     = "lost"     // a shard's lease was gone when the dispatcher used or released it
	LeaseReleased = "released" // the dispatcher gave a shard up (rebalance or Stop)
)

// Metrics receives a Dispatcher's measurements (package internal/prom has a Prometheus
// implementation). Its methods are called from the dispatcher's goroutines, several at
// once, and must be cheap and safe for concurrent use.
type Metrics interface {
	// RunsFired is called after a fire step made n > 0 runs of shard ready.
	RunsFired(shard shard.ID, n int)
	// RunsReaped is called after n > 0 runs of shard whose visibility deadline passed
	// went back through the fail path.
	RunsReaped(shard shard.ID, n int)
	// LeaseChanged is called when the dispatcher's hold on shard changes: change is
	// LeaseAcquired, LeaseLost or LeaseReleased.
	LeaseChanged(shard shard.ID, change string)
}

type noMetrics struct{}

func (noMetrics) RunsFired(shard.ID, int)       {}
func (noMetrics) RunsReaped(shard.ID, int)      {}
func (noMetrics) LeaseChanged(shard.ID, string) {}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.Name = sanitize(host) + "-" + hex.EncodeToString(b[:])
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 3 * time.Second
	}
	if c.BatchSize == 0 {
		c.BatchSize = 1000
	}
	if c.MaxSleep == 0 {
		c.MaxSleep = time.Second
	}
	if c.Lead == 0 {
		c.Lead = DefaultLead
	} else if c.Lead < 0 {
		c.Lead = 0
	}
	if c.Coalesce == 0 {
		c.Coalesce = max(c.Lead/2, 2*time.Millisecond)
	} else if c.Coalesce < 0 {
		c.Coalesce = 0
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) == 0 || len(b) > 60 {
		return "tock"
	}
	return string(b)
}

func (c Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("dispatcher: Store is required")
	case c.LeaseTTL < 300*time.Millisecond:
		return fmt.Errorf("dispatcher: LeaseTTL must be at least 300ms, got %s", c.LeaseTTL)
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return fmt.Errorf("dispatcher: BatchSize must be 1 to 10000, got %d", c.BatchSize)
	case c.MaxSleep < time.Millisecond:
		return fmt.Errorf("dispatcher: MaxSleep must be at least 1ms, got %s", c.MaxSleep)
	case c.Lead > MaxLead:
		return fmt.Errorf("dispatcher: Lead must be at most %s, got %s", MaxLead, c.Lead)
	}
	return job.ValidateID("dispatcher name", c.Name, 100)
}

// Dispatcher owns shards and fires their due runs. Its methods are safe for concurrent use.
type Dispatcher struct {
	cfg    Config
	store  *shard.Store
	logger *slog.Logger
	plan   *planner
	// heavyFiring admits one heavy fire step at a time: one by a loop whose last call
	// fired a quarter batch or more (see step). heavy holds those loops.
	heavyFiring chan struct{}
	heavyMu     sync.Mutex
	heavy       map[shard.ID]bool

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	loops   map[shard.ID]*loop
	held    []shard.Lease // leases the loops held when they stopped, released by Stop
	stopped bool
	kill    bool
}

type loop struct {
	lease  shard.Lease
	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	lost   bool // set by the loop when a script reported the lease lost
}

// New returns a Dispatcher; Start runs it.
func New(cfg Config) (*Dispatcher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Dispatcher{
		cfg: cfg, store: cfg.Store, plan: newPlanner(),
		heavyFiring: make(chan struct{}, 1), heavy: map[shard.ID]bool{},
		logger: cfg.Logger.With("component", "dispatcher", "dispatcher", cfg.Name),
		loops:  map[shard.ID]*loop{},
	}, nil
}

// Name returns the dispatcher's name.
func (d *Dispatcher) Name() string { return d.cfg.Name }

// Start joins the membership and starts taking shards. It returns at once. Cancelling
// ctx stops the dispatcher as Stop does, but without releasing leases.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done != nil {
		return errors.New("dispatcher: already started")
	}
	ctx, cancel := context.WithCancel(ctx)
	d.cancel, d.done = cancel, make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); d.membership(ctx) }()
	go func() { defer wg.Done(); d.listen(ctx) }()
	if !d.cfg.NoFigures {
		wg.Add(1)
		go func() { defer wg.Done(); d.sampleFigures(ctx) }()
	}
	go func() {
		wg.Wait()
		// membership has returned: no loop starts any more.
		d.mu.Lock()
		loops := d.loops
		d.loops = nil
		d.mu.Unlock()
		for _, l := range loops {
			l.cancel()
			<-l.done
			if !l.lost {
				d.held = append(d.held, l.lease)
			}
		}
		close(d.done)
	}()
	return nil
}

// Stop stops the loops, releases the leases (so other dispatchers take the shards at
// once) and leaves the membership. It waits for the loops until ctx ends. Stop is safe
// to call twice or without Start.
func (d *Dispatcher) Stop(ctx context.Context) error {
	d.mu.Lock()
	if d.done == nil {
		d.mu.Unlock()
		return nil
	}
	d.stopped = true
	cancel, done := d.cancel, d.done
	d.mu.Unlock()
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	d.mu.Lock()
	held, kept := d.held, d.kill
	d.held = nil
	d.mu.Unlock()
	if kept {
		return nil
	}
	for _, l := range held {
		if err := d.release(ctx, l); err != nil {
			return err
		}
	}
	_, err := d.store.Heartbeat(ctx, d.cfg.Name, d.cfg.LeaseTTL, true)
	return err
}

// Kill stops the dispatcher without releasing its leases or leaving the membership, as
// a crash would. For tests of failover.
func (d *Dispatcher) Kill() {
	d.mu.Lock()
	cancel, done := d.cancel, d.done
	d.mu.Unlock()
	if cancel != nil {
		d.mu.Lock()
		d.stopped, d.kill = true, true
		d.mu.Unlock()
		cancel()
		<-done
	}
}

// Owned returns the shards whose loops run now, sorted.
func (d *Dispatcher) Owned() []shard.ID {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := make([]shard.ID, 0, len(d.loops))
	for id, l := range d.loops {
		if !l.lost {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// membership heartbeats, computes the shards this dispatcher should own, and takes,
// renews or gives up leases, every LeaseTTL/3.
func (d *Dispatcher) membership(ctx context.Context) {
	tick := time.NewTicker(d.cfg.LeaseTTL / 3)
	defer tick.Stop()
	errs := limit.NewEvery(10 * time.Second)
	for {
		if err := d.rebalance(ctx); err != nil && ctx.Err() == nil && errs.Allow() {
			d.logger.ErrorContext(ctx, "rebalance shards", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (d *Dispatcher) rebalance(ctx context.Context) error {
	members, err := d.store.Heartbeat(ctx, d.cfg.Name, d.cfg.LeaseTTL, false)
	if err != nil {
		return err
	}
	want := assign(members, d.cfg.Name, d.store.Shards())

	d.mu.Lock()
	// Give up shards that belong elsewhere now, and forget loops that lost their lease.
	var release []*loop
	for id, l := range d.loops {
		if !want[id] || l.lost {
			delete(d.loops, id)
			release = append(release, l)
		}
	}
	d.mu.Unlock()
	for _, l := range release {
		l.cancel()
		<-l.done
		if !l.lost {
			if err := d.release(ctx, l.lease); err != nil {
				return err
			}
			d.logger.InfoContext(ctx, "released shard", "shard", int(l.lease.Shard))
		}
	}

	ids := make([]shard.ID, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var firstErr error
	for _, r := range d.store.AcquireLeases(ctx, d.cfg.Name, ids, d.cfg.LeaseTTL) {
		if r.Err != nil {
			if firstErr == nil {
				firstErr = r.Err
			}
			continue
		}
		d.mu.Lock()
		l := d.loops[r.Lease.Shard]
		stale := l != nil && (l.lease.Epoch != r.Lease.Epoch || !r.Held)
		if stale {
			delete(d.loops, r.Lease.Shard)
		}
		d.mu.Unlock()
		if stale {
			l.cancel()
			<-l.done
			d.mu.Lock()
			counted := l.lost
			d.mu.Unlock()
			if !counted {
				// The lease expired (or changed hands) between two renewals.
				d.cfg.Metrics.LeaseChanged(l.lease.Shard, LeaseLost)
			}
			l = nil
		}
		if r.Held && l == nil {
			d.startLoop(ctx, r.Lease)
		}
	}
	return firstErr
}

func (d *Dispatcher) startLoop(ctx context.Context, lease shard.Lease) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	lctx, cancel := context.WithCancel(ctx)
	l := &loop{lease: lease, wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	d.loops[lease.Shard] = l
	d.logger.InfoContext(ctx, "took shard", "shard", int(lease.Shard), "epoch", lease.Epoch)
	d.cfg.Metrics.LeaseChanged(lease.Shard, LeaseAcquired)
	go func() {
		defer close(l.done)
		if err := d.run(lctx, l); errors.Is(err, shard.ErrLeaseLost) {
			d.mu.Lock()
			l.lost = true
			d.mu.Unlock()
			d.cfg.Metrics.LeaseChanged(lease.Shard, LeaseLost)
			d.logger.WarnContext(ctx, "lost shard lease", "shard", int(lease.Shard), "epoch", lease.Epoch)
		}
	}()
}

// release gives up a lease and reports it: released, or lost when it had expired (or
// changed hands) already.
func (d *Dispatcher) release(ctx context.Context, l shard.Lease) error {
	released, err := d.store.ReleaseLease(ctx, l)
	if err != nil {
		return err
	}
	if released {
		d.cfg.Metrics.LeaseChanged(l.Shard, LeaseReleased)
	} else {
		d.cfg.Metrics.LeaseChanged(l.Shard, LeaseLost)
	}
	return nil
}

// listen forwards wake signals to the shard loops.
func (d *Dispatcher) listen(ctx context.Context) {
	errs := limit.NewEvery(10 * time.Second)
	for ctx.Err() == nil {
		err := d.store.Subscribe(ctx, []string{d.store.Keys().WakeChannel()}, func(_, msg string) {
			id, _, ok := shard.ParseWake(msg)
			if !ok {
				return
			}
			d.mu.Lock()
			l := d.loops[id]
			d.mu.Unlock()
			if l != nil {
				select {
				case l.wake <- struct{}{}:
				default:
				}
			}
		})
		if ctx.Err() != nil {
			return
		}
		if err != nil && errs.Allow() {
			d.logger.WarnContext(ctx, "wake subscription", "error", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// run is the loop of one owned shard.
func (d *Dispatcher) run(ctx context.Context, l *loop) error {
	id := l.lease.Shard
	timer := time.NewTimer(0)
	defer timer.Stop()
	errs := limit.NewEvery(10 * time.Second)
	for {
		sleep, err := d.step(ctx, l.lease)
		if errors.Is(err, shard.ErrLeaseLost) {
			return err
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errs.Allow() {
				d.logger.ErrorContext(ctx, "fire shard", "shard", int(id), "error", err)
			}
			sleep = 100 * time.Millisecond
		}
		if sleep <= 0 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		timer.Reset(min(sleep, d.cfg.MaxSleep))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
	}
}

// step fires and reaps once; it returns how long to sleep (0: go again now).
func (d *Dispatcher) step(ctx context.Context, lease shard.Lease) (time.Duration, error) {
	// A loop whose last call fired a quarter batch or more fires one call at a time with
	// the other such loops: when runs come due faster than Redis can fire, claim and
	// ack them, many loops firing big batches at once would fill Redis's queue, and the
	// workers' claims would wait behind all of them while the ready sets grew. Calls of a
	// few runs each (the usual case) are not held back.
	d.heavyMu.Lock()
	heavy := d.heavy[lease.Shard]
	d.heavyMu.Unlock()
	if heavy {
		select {
		case d.heavyFiring <- struct{}{}:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		defer func() { <-d.heavyFiring }()
	}
	due, err := d.store.FireDue(ctx, lease, d.cfg.BatchSize, d.cfg.Lead)
	if err == nil {
		d.heavyMu.Lock()
		if due.Fired >= max(d.cfg.BatchSize/4, 1) {
			d.heavy[lease.Shard] = true
		} else {
			delete(d.heavy, lease.Shard)
		}
		d.heavyMu.Unlock()
	}
	if err != nil {
		return 0, err
	}
	fired := due.Fired
	if len(due.Cron) > 0 {
		plans := make([]shard.FirePlan, len(due.Cron))
		for i, e := range due.Cron {
			plans[i] = d.plan.plan(e, due.Now)
		}
		n, err := d.store.Fire(ctx, lease, plans)
		fired += n
		if err != nil {
			d.firedMetric(lease.Shard, fired)
			return 0, err
		}
	}
	d.firedMetric(lease.Shard, fired)
	reaped := 0
	if due.NextDeadline >= 0 && due.NextDeadline <= due.Now {
		if reaped, err = d.store.Reap(ctx, lease, d.cfg.BatchSize); err != nil {
			return 0, err
		}
		if reaped > 0 {
			d.cfg.Metrics.RunsReaped(lease.Shard, reaped)
		}
	}
	if due.NextDue == due.Now || reaped >= d.cfg.BatchSize {
		return 0, nil
	}
	// The next due entry fires Lead ahead of its time.
	next := due.NextDeadline
	if t := due.NextDue; t >= 0 {
		t -= d.cfg.Lead.Milliseconds()
		if next < 0 || t < next {
			next = t
		}
	}
	if next < 0 {
		return d.cfg.MaxSleep, nil
	}
	// Sleep lengths are differences of Redis times: the local clock does not matter.
	// After a fire, runs due within Coalesce wait for each other; an entry that is still
	// due after a fire (a concurrent update) is retried soon, not in a hot loop.
	floor := time.Millisecond
	if due.Fired > 0 || len(due.Cron) > 0 {
		floor = max(floor, d.cfg.Coalesce)
	}
	return max(time.Duration(next-due.Now)*time.Millisecond, floor), nil
}

func (d *Dispatcher) firedMetric(id shard.ID, n int) {
	if n > 0 {
		d.cfg.Metrics.RunsFired(id, n)
	}
}

// assign returns the shards that member self owns on a ring of the live members. With
// more members than shards, only the first S (by name) take part; the others stand by.
func assign(members []string, self string, shards int) map[shard.ID]bool {
	sort.Strings(members)
	if len(members) > shards {
		members = members[:shards]
	}
	found := false
	ms := make([]consistent.Member, len(members))
	for i, m := range members {
		ms[i] = ringMember(m)
		found = found || m == self
	}
	out := map[shard.ID]bool{}
	if !found {
		return out
	}
	ring := consistent.New(ms, consistent.Config{
		PartitionCount:    shards,
		ReplicationFactor: 50,
		Load:              1.25,
		Hasher:            hasher{},
	})
	me := ringMember(self).String()
	for i := 0; i < shards; i++ {
		if ring.GetPartitionOwner(i).String() == me {
			out[shard.ID(i)] = true
		}
	}
	return out
}

// ringMember names a member on the ring. The library appends a number to the name for
// each ring point, so the name must not end in a digit ("d1"+"2" would equal "d12"+"").
type ringMember string

func (m ringMember) String() string { return string(m) + "!" }

type hasher struct{}

func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }
