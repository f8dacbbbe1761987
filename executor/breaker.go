package executor

import (
	"context"
	"errors"
	"fmt"
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
}

// Enabled reports whether breakers are on.
func (c BreakerConfig) Enabled() bool { return !c.Disabled }

func (c BreakerConfig) withDefaults() BreakerConfig {
	p := c.policy().WithDefaults()
	if c.Failures >= 0 { // negative stays: no such rule, however often defaults apply
		c.Failures = p.Failures
	}
	c.MinRequests, c.Window, c.Cooldown, c.ProbeTimeout = p.MinRequests, p.Window, p.Cooldown, p.ProbeTimeout
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
	case c.Window < time.Millisecond || c.Cooldown < time.Millisecond || c.ProbeTimeout < time.Millisecond:
		return errors.New("executor: Breaker: Window, Cooldown and ProbeTimeout must be at least 1ms")
	}
	return nil
}

func (c BreakerConfig) policy() shard.BreakerPolicy {
	return shard.BreakerPolicy{Failures: c.Failures, Ratio: c.Ratio, MinRequests: c.MinRequests,
		Window: c.Window, Cooldown: c.Cooldown, ProbeTimeout: c.ProbeTimeout}
}

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

// Breakers are the per-host circuit breakers, kept in Redis. Safe for concurrent use.
type Breakers struct {
	store   *shard.Store
	policy  shard.BreakerPolicy
	metrics Metrics
}

// NewBreakers returns the breakers of store's namespace under c (defaults applied) and
// reports to m (nil: none). Every Breakers of a namespace sees the same states.
func NewBreakers(store *shard.Store, c BreakerConfig, m Metrics) *Breakers {
	if m == nil {
		m = noMetrics{}
	}
	return &Breakers{store: store, policy: c.policy().WithDefaults(), metrics: m}
}

// Decision is the answer of Allow.
type Decision struct {
	Allowed bool
	Probe   bool          // the delivery is the half-open probe: report it with probe set
	RetryIn time.Duration // when not allowed: until a probe may go
	State   string
}

// Allow asks host's breaker whether a delivery may go.
func (b *Breakers) Allow(ctx context.Context, host string) (Decision, error) {
	st, err := b.store.BreakerStep(ctx, host, "allow", false, b.policy)
	if err != nil {
		return Decision{}, err
	}
	b.observe(host, st)
	return Decision{Allowed: st.Verdict > 0, Probe: st.Verdict == 2, RetryIn: max(st.RetryIn, time.Millisecond), State: st.State}, nil
}

// Record reports how a delivery to host ended (healthy: the host answered other than
// 5xx or 429); probe says it was the half-open probe.
func (b *Breakers) Record(ctx context.Context, host string, healthy, probe bool) error {
	op := "fail"
	if healthy {
		op = "ok"
	}
	st, err := b.store.BreakerStep(ctx, host, op, probe, b.policy)
	if err != nil {
		return err
	}
	b.observe(host, st)
	return nil
}

func (b *Breakers) observe(host string, st shard.BreakerStep) {
	b.metrics.BreakerState(host, st.State)
	if st.Transition != "" {
		b.metrics.BreakerTransition(host, st.Transition)
	}
}
