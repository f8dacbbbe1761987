package worker

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// Outcome is how an attempt ended, as ObserveFunc and Metrics see it.
type Outcome string

// Outcomes. Result.Outcome is one of the first five (a rejected report is Result.Rejected,
// a last failed attempt is OutcomeFailed with Attempt == MaxAttempts); Metrics.RunFinished
// gets the finer OutcomeDead and OutcomeRejected too.
const (
	OutcomeSucceeded  Outcome = "succeeded"
	OutcomeFailed     Outcome = "failed" // the handler failed (for Metrics: a retry follows)
	OutcomeCancelled  Outcome = "cancelled"
	OutcomeSnoozed    Outcome = "snoozed"
	OutcomeHandedBack Outcome = "handed_back" // returned unfinished at shutdown, no attempt used
	OutcomeDead       Outcome = "dead"        // Metrics only: the last attempt failed
	OutcomeRejected   Outcome = "rejected"    // Metrics only: Redis refused the report (the run was redelivered)
)

// Metrics receives a Worker's measurements (package internal/prom has a Prometheus
// implementation). Its methods are called on the claim and report paths, from several
// goroutines at once, and must be cheap and safe for concurrent use.
type Metrics interface {
	// RunsClaimed is called when a claim took n > 0 runs of queue.
	RunsClaimed(queue string, n int)
	// RunFinished is called once per claimed run when its attempt has ended and been
	// reported to Redis, with the outcome of the report: OutcomeDead for a failure of
	// the last attempt, OutcomeRejected when Redis refused the report or a heartbeat
	// found the run redelivered (then nothing is reported). lateness is the time from the
	// run's due time to the start of its handler, or to its claim when the handler never
	// started (a hand-back at shutdown, a cancel before the start), 0 for a run that ended
	// before its due time (claimed ahead of it); it is measured on the Redis clock, so the
	// worker's clock does not matter. duration is how long the handler ran (0 when it
	// never started).
	RunFinished(queue string, outcome Outcome, lateness, duration time.Duration)
}

type noMetrics struct{}

func (noMetrics) RunsClaimed(string, int)                                   {}
func (noMetrics) RunFinished(string, Outcome, time.Duration, time.Duration) {}

// Result describes one finished attempt, for Config.ObserveFunc.
type Result struct {
	Run      *Run
	Started  time.Time // local clock
	Finished time.Time // local clock
	Outcome  Outcome
	Err      error // the handler's error
	// Rejected is set when Redis refused the report: the run had been redelivered
	// after its visibility deadline, so this attempt's outcome does not count.
	Rejected bool
}

// Config configures a Worker.
type Config struct {
	// Store is the namespace to work on. Required.
	Store *shard.Store
	// Queues to claim from. Default ["default"]. A paused queue is skipped until it is
	// resumed.
	Queues []string
	// Concurrency is how many handlers run at once. Default 10.
	Concurrency int
	// Prefetch is how many claimed runs may wait for a free handler slot. Default 0.
	// Waiting runs are heartbeated like running ones.
	Prefetch int
	// Hold bounds the runs that a dispatcher fired ahead of their due time
	// (dispatcher.Config.Lead) which the worker holds until their start time on the
	// Redis clock (Claimed.StartAt). They take no handler slot while they wait, so the
	// runs of a lead window are claimed ahead whatever the concurrency. The worker claims
	// such runs only while a handler slot is free, and holds no more than its handlers
	// can start within a second at their mean duration (but Concurrency+Prefetch when
	// that is more, and Hold when that is less; more take slots), so a worker whose
	// handlers are slow leaves them to other workers. A held run whose job is paused or
	// changed before its start is handed back (it is not started); a queue paused
	// meanwhile does not stop it. Default DefaultHold; at most 100000.
	Hold int
	// ID names the worker in run history: 1 to 100 of [A-Za-z0-9._~-]. Default: host
	// name plus a random suffix.
	ID string
	// Sweep is the interval of the safety-net sweep that claims from every shard in
	// case a signal was lost. Default 2s.
	Sweep time.Duration
	// ObserveFunc, if set, is called after each attempt that started a handler, once its
	// outcome has been reported (from the worker's goroutines: keep it short).
	ObserveFunc func(Result)
	// Metrics receives counts of claimed and finished runs, their lateness and
	// durations. Nil means none.
	Metrics Metrics
	// Logger receives errors (rate-limited). Nil discards.
	Logger *slog.Logger
	// NoFigures turns off the per-minute figures the worker adds to Redis once a second
	// (lateness per queue and minute, and the worker's last-seen time, which the
	// dashboard and GET /v1/figures and /v1/cluster show). Default false: they are on.
	NoFigures bool
	// AckDelay is how long outcomes of runs of one shard may wait to be reported
	// together: a shard's first outcome after a quiet spell goes at once, later ones at
	// most once per AckDelay (sooner when many wait, and all when the worker stops).
	// Under load a call then carries many runs instead of one or two: at 20,000 runs/s
	// Redis CPU per run (fire, claim and ack) went from 34-45 µs to 19-31. The cost is
	// that an outcome may show in Redis up to AckDelay after its handler returned.
	// Default 50ms, at most 1s; a negative value reports every outcome at once.
	AckDelay time.Duration
}

// DefaultAckDelay is Config.AckDelay's default.
const DefaultAckDelay = 50 * time.Millisecond

// DefaultHold is Config.Hold's default: the runs of a 100 ms lead (the dispatcher's
// default) at 40,000 runs/s.
const DefaultHold = 4000

func (c Config) withDefaults() Config {
	if len(c.Queues) == 0 {
		c.Queues = []string{job.DefaultQueue}
	}
	if c.Concurrency == 0 {
		c.Concurrency = 10
	}
	if c.Hold == 0 {
		c.Hold = DefaultHold
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		if job.ValidateID("host", host, 60) != nil {
			host = "worker"
		}
		c.ID = host + "-" + randHex(4)
	}
	if c.Sweep == 0 {
		c.Sweep = 2 * time.Second
	}
	if c.AckDelay == 0 {
		c.AckDelay = DefaultAckDelay
	} else if c.AckDelay < 0 {
		c.AckDelay = 0
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("worker: Store is required")
	case c.Concurrency < 1 || c.Concurrency > 100000:
		return fmt.Errorf("worker: Concurrency must be 1 to 100000, got %d", c.Concurrency)
	case c.Prefetch < 0:
		return fmt.Errorf("worker: Prefetch must not be negative, got %d", c.Prefetch)
	case c.Hold < 0 || c.Hold > 100000:
		return fmt.Errorf("worker: Hold must be 0 to 100000, got %d", c.Hold)
	case c.Sweep < 10*time.Millisecond:
		return fmt.Errorf("worker: Sweep must be at least 10ms, got %s", c.Sweep)
	case c.AckDelay > time.Second:
		return fmt.Errorf("worker: AckDelay must be at most 1s, got %s", c.AckDelay)
	}
	for _, q := range c.Queues {
		if err := job.ValidateID("worker: queue", q, job.MaxQueueLen); err != nil {
			return err
		}
	}
	// The id is written into run history as is.
	return job.ValidateID("worker: ID", c.ID, 100)
}
