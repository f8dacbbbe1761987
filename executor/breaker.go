package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tockhq/tock/shard"
)

// BreakerConfig configures the per-host circuit breakers. A breaker opens after
// Failures consecutive failed deliveries to a host, or when at least Ratio of the
// deliveries in a Window failed (once the window has MinRequests); while open, runs for
// the host are snoozed (no attempt used) until Cooldown has passed; then one delivery
// goes as a probe (half-open): its success closes the breaker, its failure opens it
// again. A failure is a connection error, a timeout, a 5xx or a 429; other responses
// count as successes (the host answers). The state lives in Redis, so a breaker opened
// by one executor is open for all.
type BreakerConfig struct {
	// Disabled turns the breakers off.
	Disabled bool
	// Failures: consecutive failures that open a breaker. Default 5; negative: no such rule.
	Failures int
	// Ratio: the failure ratio in a window that opens a breaker, 0 to 1. Default 0 (no such rule).
	Ratio float64
	// MinRequests: deliveries a window needs before its ratio counts. Default 20.
	MinRequests int
	// Window: length of a ratio window. Default 1m.
	Window time.Duration
	// Cooldown: how long a breaker stays open before a probe. Default 30s.
	Cooldown time.Duration
	// ProbeTimeout: how long a probe may be out before another goes (its executor may
	// have died without reporting it). Default 2m; a target whose timeout is longer may
	// see a second probe while the first still runs.
	ProbeTimeout time.Duration
	// ProbeWait: how long a run refused while the probe is out is snoozed, or as long as
	// the probe has been out if that is longer (never past ProbeTimeout). The probe's
	// outcome closes (or re-opens) the breaker at once; the runs it held go when they
	// come back. Default 1s.
	ProbeWait time.Duration
	// Sync: how long an executor trusts its view of a host's breaker before it asks
	// Redis again, and how often it records the outcomes it counted meanwhile (in
	// aggregate; at once when they could open the breaker by themselves, and a probe's
	// at once). A breaker opened by one executor is open for all within about twice
	// Sync. Default 100ms.
	Sync time.Duration
}

// Enabled reports whether breakers are on.
func (c BreakerConfig) Enabled() bool { return !c.Disabled }

func (c BreakerConfig) withDefaults() BreakerConfig {
	p := c.policy().WithDefaults()
	if c.Failures >= 0 { // negative stays: no such rule, however often defaults apply
		c.Failures = p.Failures
	}
	c.MinRequests, c.Window, c.Cooldown, c.ProbeTimeout, c.ProbeWait = p.MinRequests, p.Window, p.Cooldown, p.ProbeTimeout, p.ProbeWait
	if c.Sync == 0 {
		c.Sync = DefaultBreakerSync
	}
	return c
}

func (c BreakerConfig) validate() error {
	switch {
	case c.Disabled:
		return nil
	case c.Ratio < 0 || c.Ratio > 1:
		return fmt.Errorf("executor: Breaker.Ratio must be 0 to 1, got %v", c.Ratio)
	case c.Failures == 0 && c.Ratio == 0:
		return errors.New("executor: Breaker: no rule opens it (Failures and Ratio are off)")
	case c.Window < time.Millisecond || c.Cooldown < time.Millisecond || c.ProbeTimeout < time.Millisecond || c.ProbeWait < time.Millisecond:
		return errors.New("executor: Breaker: Window, Cooldown, ProbeTimeout and ProbeWait must be at least 1ms")
	case c.Sync < 0:
		return fmt.Errorf("executor: Breaker.Sync must not be negative, got %s", c.Sync)
	}
	return nil
}

func (c BreakerConfig) policy() shard.BreakerPolicy {
	return shard.BreakerPolicy{Failures: c.Failures, Ratio: c.Ratio, MinRequests: c.MinRequests,
		Window: c.Window, Cooldown: c.Cooldown, ProbeTimeout: c.ProbeTimeout, ProbeWait: c.ProbeWait}
}

// DefaultBreakerSync is the default of BreakerConfig.Sync.
const DefaultBreakerSync = 100 * time.Millisecond

// Metrics receives the breakers' states and transitions (cmd exports them to
// Prometheus as tock_breaker_state and tock_breaker_transitions_total).
type Metrics interface {
	// BreakerState is called with a host's breaker state after every step that read it.
	BreakerState(host, state string)
	// BreakerTransition is called when this process moved a host's breaker to state.
	BreakerTransition(host, state string)
}

type noMetrics struct{}

func (noMetrics) BreakerState(string, string)      {}
func (noMetrics) BreakerTransition(string, string) {}

// Breakers are the per-host circuit breakers, kept in Redis, with a short-lived local
// view of each host's breaker (BreakerConfig.Sync). Safe for concurrent use.
//
// A delivery asks Redis only when the view is older than Sync (or when a probe may go);
// outcomes other than a probe's are counted locally and recorded in aggregate with the
// next step, at least once per Sync while there are any, and at once when they could
// open the breaker by themselves. A probe's outcome is recorded at once.
type Breakers struct {
	store   *shard.Store
	policy  shard.BreakerPolicy
	sync    time.Duration
	metrics Metrics

	mu    sync.Mutex
	hosts map[string]*view
}

// view is what a process knows of one host's breaker.
type view struct {
	state    string
	fresh    time.Time // trusted until then
	retryAt  time.Time // open or half-open: refused deliveries wait until then
	f, n, nf int       // closed: consecutive failures, window attempts and failures, as last read
	pending  shard.BreakerCounts
	busy     bool // a step for the host is in flight
}

// NewBreakers returns the breakers of store's namespace under c (defaults applied) and
// reports to m (nil: none). Every Breakers of a namespace sees the same states, each
// within c.Sync of a change.
func NewBreakers(store *shard.Store, c BreakerConfig, m Metrics) *Breakers {
	if m == nil {
		m = noMetrics{}
	}
	c = c.withDefaults()
	return &Breakers{store: store, policy: c.policy().WithDefaults(), sync: c.Sync, metrics: m, hosts: map[string]*view{}}
}

// Decision is the answer of Allow.
type Decision struct {
	Allowed bool
	Probe   bool          // the delivery is the half-open probe: report it with probe set
	RetryIn time.Duration // when not allowed: until it may ask again
	State   string
}

func (b *Breakers) view(host string) *view {
	v := b.hosts[host]
	if v == nil {
		v = &view{state: shard.BreakerClosed}
		b.hosts[host] = v
	}
	return v
}

// Allow asks host's breaker whether a delivery may go: from the local view while it is
// fresh, else from Redis (recording the outcomes counted meanwhile).
func (b *Breakers) Allow(ctx context.Context, host string) (Decision, error) {
	now := time.Now()
	b.mu.Lock()
	v := b.view(host)
	if v.busy || now.Before(v.fresh) {
		d, ok := Decision{State: v.state}, true
		switch {
		case v.state == shard.BreakerClosed:
			d.Allowed = true
		case now.Before(v.retryAt):
			d.RetryIn = max(v.retryAt.Sub(now), time.Millisecond)
		case v.busy:
			// Another delivery is asking Redis (for the probe): ask again shortly.
			d.RetryIn = b.policy.ProbeWait
		default:
			ok = false // open past its cooldown, or the wait for a probe passed: ask
		}
		if ok {
			b.mu.Unlock()
			return d, nil
		}
	}
	c := v.pending
	v.pending, v.busy = shard.BreakerCounts{}, true
	b.mu.Unlock()
	st, err := b.store.BreakerSync(ctx, host, c, true, b.policy)
	b.settle(host, v, true, c, st, err, now)
	if err != nil {
		return Decision{}, err
	}
	return Decision{Allowed: st.Verdict > 0, Probe: st.Verdict == 2, RetryIn: max(st.RetryIn, time.Millisecond), State: st.State}, nil
}

// Record reports how a delivery to host ended (healthy: the host answered other than
// 5xx or 429); probe says it was the half-open probe, whose outcome is recorded at once.
// Other outcomes are counted and recorded in aggregate (see Breakers); an error is that
// of recording them now, which keeps them for the next step.
func (b *Breakers) Record(ctx context.Context, host string, healthy, probe bool) error {
	now := time.Now()
	if probe {
		op := "fail"
		if healthy {
			op = "ok"
		}
		b.mu.Lock()
		v := b.view(host)
		b.mu.Unlock()
		st, err := b.store.BreakerStep(ctx, host, op, true, b.policy)
		b.settle(host, v, false, shard.BreakerCounts{}, st, err, now)
		return err
	}
	b.mu.Lock()
	v := b.view(host)
	v.pending.Add(healthy)
	if v.busy || now.Before(v.fresh) && (healthy || !b.couldOpen(v)) {
		b.mu.Unlock()
		return nil
	}
	c := v.pending
	v.pending, v.busy = shard.BreakerCounts{}, true
	b.mu.Unlock()
	st, err := b.store.BreakerSync(ctx, host, c, false, b.policy)
	b.settle(host, v, true, c, st, err, now)
	return err
}

// couldOpen reports whether v's pending outcomes could open the breaker by themselves,
// given what Redis last said. The caller holds b.mu.
func (b *Breakers) couldOpen(v *view) bool {
	if v.state != shard.BreakerClosed {
		return false
	}
	p, c := b.policy, v.pending
	if p.Failures > 0 && max(v.f+c.Lead, c.Longest) >= p.Failures {
		return true
	}
	n, nf := v.n+c.OK+c.Failed, v.nf+c.Failed
	return p.Ratio > 0 && n >= p.MinRequests && float64(nf) >= p.Ratio*float64(n)
}

// settle applies the reply of a step made at at, which took the counts c, to host's
// view v (on an error, c are kept for the next step) and reports it to the metrics.
// owned: the step is the one v.busy marks.
func (b *Breakers) settle(host string, v *view, owned bool, c shard.BreakerCounts, st shard.BreakerStep, err error, at time.Time) {
	b.mu.Lock()
	if owned {
		v.busy = false
	}
	if err != nil {
		v.pending = c.Then(v.pending)
		b.mu.Unlock()
		return
	}
	v.state, v.fresh = st.State, at.Add(b.sync)
	v.f, v.n, v.nf = st.Failures, st.Attempts, st.WindowFails
	v.retryAt = time.Time{}
	if st.State != shard.BreakerClosed {
		v.retryAt = at.Add(st.RetryIn)
	}
	b.mu.Unlock()
	b.metrics.BreakerState(host, st.State)
	if st.Transition != "" {
		b.metrics.BreakerTransition(host, st.Transition)
	}
}

// Flush records the outcomes counted and not yet recorded, of every host. The executor
// calls it every Sync for the hosts whose views are stale, and when it stops.
func (b *Breakers) Flush(ctx context.Context) error { return b.flush(ctx, time.Time{}) }

// flush records the pending outcomes of the hosts not busy whose views are stale at
// now (all when now is zero), and forgets the views of hosts idle for a while.
func (b *Breakers) flush(ctx context.Context, now time.Time) error {
	type job struct {
		host string
		v    *view
		c    shard.BreakerCounts
	}
	var jobs []job
	b.mu.Lock()
	for h, v := range b.hosts {
		switch {
		case v.busy:
		case !v.pending.Zero() && (now.IsZero() || !now.Before(v.fresh)):
			jobs = append(jobs, job{h, v, v.pending})
			v.pending, v.busy = shard.BreakerCounts{}, true
		case v.pending.Zero() && !now.IsZero() && now.Sub(v.fresh) > idleView:
			delete(b.hosts, h)
		}
	}
	b.mu.Unlock()
	var errs []error
	for _, j := range jobs {
		at := time.Now()
		st, err := b.store.BreakerSync(ctx, j.host, j.c, false, b.policy)
		b.settle(j.host, j.v, true, j.c, st, err, at)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// idleView is how long a host's view is kept after it went stale with nothing pending.
const idleView = time.Minute
