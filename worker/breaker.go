package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tockhq/tock/shard"
)

// BreakerKeyPrefix prefixes the breaker name of a job type (GET /v1/breakers lists it
// as its host: "type:<job type>"); push target hosts have no prefix.
const BreakerKeyPrefix = "type:"

// Breaker configures a job type's circuit breaker (HandleWithBreaker). Zero fields take
// the defaults noted. The breaker's state lives in Redis (lua/breaker_step.lua), shared
// by every worker of the namespace that handles the type.
type Breaker struct {
	// Failures: consecutive failed attempts that open it. Default 5; negative: no such rule.
	Failures int
	// Ratio: the failure ratio in a Window that opens it, 0 to 1. Default 0 (no such rule).
	Ratio float64
	// MinRequests: attempts a Window needs before its Ratio counts. Default 20.
	MinRequests int
	// Window: the length of a ratio window. Default 1m.
	Window time.Duration
	// Cooldown: how long it stays open before one run goes as the half-open probe.
	// Default 30s.
	Cooldown time.Duration
	// ProbeTimeout: how long a probe may be out before another goes. Default 2m.
	ProbeTimeout time.Duration
}

func (b Breaker) policy() shard.BreakerPolicy {
	return shard.BreakerPolicy{Failures: b.Failures, Ratio: b.Ratio, MinRequests: b.MinRequests,
		Window: b.Window, Cooldown: b.Cooldown, ProbeTimeout: b.ProbeTimeout}.WithDefaults()
}

// HandleWithBreaker registers h for jobs of type typ, as Handle does, behind a circuit
// breaker (opt-in per handler). An attempt that returns a plain error (not Cancel or
// Snooze) counts as a failure, a nil one as a success. After the configured run of
// failures or failure ratio the breaker opens: the type's runs are then snoozed,
// without using an attempt and without calling h, until Cooldown has passed; then one
// run goes as the half-open probe, whose success closes the breaker and whose failure
// opens it again (Cancel and Snooze are not counted). The state is shared through Redis: a breaker opened by one worker
// process is open for all. A Redis error asking the breaker fails the attempt. It
// panics as Handle does, and for a Ratio outside 0 to 1.
func (w *Worker) HandleWithBreaker(typ string, h Handler, b Breaker) {
	if b.Ratio < 0 || b.Ratio > 1 {
		panic(fmt.Sprintf("worker: Breaker.Ratio must be 0 to 1, got %v", b.Ratio))
	}
	p := b.policy()
	if p.Failures == 0 && p.Ratio == 0 {
		panic("worker: Breaker: no rule opens it (Failures and Ratio are off)")
	}
	name := BreakerKeyPrefix + typ
	w.Handle(typ, HandlerFunc(func(ctx context.Context, r *Run) error {
		st, err := w.cfg.Store.BreakerStep(ctx, name, "allow", false, p)
		if err != nil {
			return err
		}
		if st.Verdict == 0 {
			return Snooze(max(st.RetryIn, time.Millisecond))
		}
		probe := st.Verdict == 2
		herr := h.Work(ctx, r)
		var ce *cancelError
		var se *snoozeError
		if herr != nil && (errors.As(herr, &ce) || errors.As(herr, &se)) {
			// Not a verdict on the type: not counted (a probe's turn passes after
			// ProbeTimeout).
			return herr
		}
		op := "ok"
		if herr != nil {
			op = "fail"
		}
		if _, err := w.cfg.Store.BreakerStep(context.WithoutCancel(ctx), name, op, probe, p); err != nil && herr == nil {
			w.logger.WarnContext(ctx, "record breaker outcome", "type", r.Type, "error", err)
		}
		return herr
	}))
}
