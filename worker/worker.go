// Package worker is tock's Go worker SDK: register handlers by job type, choose queues,
// concurrency and prefetch, then Start. A Worker claims runs in batches from the shards
// that have work (woken by signals, with a slow sweep over all shards as a safety net),
// runs each handler with a context that carries the run's timeout and is cancelled when
// the job is cancelled or the worker stops, heartbeats long runs, and acks or fails each
// run. Stop stops claiming, lets running handlers finish until its ctx ends, and hands
// back the rest without using an attempt. A Worker does not claim from a queue that an
// operator paused (shard.Store.PauseQueue), learning it from a signal or, if that is
// lost, from its next sweep; runs already claimed go on, and claiming restarts as soon
// as the queue is resumed.
package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tockhq/tock/internal/limit"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// Run is one attempt of a run, as a handler sees it.
type Run struct {
	// ID identifies the run across attempts (`<jobID>:<due ms>`): use it as the
	// idempotency key of the handler's side effects.
	ID          string
	JobID       string
	Queue       string
	Type        string
	Payload     []byte
	Due         time.Time // when the run was due
	Attempt     int       // 1-based
	MaxAttempts int
	Shard       shard.ID
	ClaimedAt   time.Time // Redis time of the claim
	// StartedAt is when the handler started, on the Redis clock: ClaimedAt plus the
	// local time from the claim's reply to the start, so never later than the true
	// time. It is never before Due (nor before a retry's retry time): a run fired ahead
	// of its time (dispatcher.Config.Lead) waits in the worker until then.
	StartedAt time.Time
}

// Handler runs jobs of one type. Work's ctx ends at the job's timeout, when the job is
// cancelled, or when the worker stops. A nil error acks the run; other errors fail the
// attempt and are retried by the job's policy, except those made by Cancel and Snooze.
type Handler interface {
	Work(ctx context.Context, r *Run) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, r *Run) error

// Work calls f.
func (f HandlerFunc) Work(ctx context.Context, r *Run) error { return f(ctx, r) }

type cancelError struct{ err error }

func (e *cancelError) Error() string { return "cancel: " + e.err.Error() }
func (e *cancelError) Unwrap() error { return e.err }

// Cancel wraps err so that the run is not retried: it ends cancelled (a one-time job
// ends in state cancelled).
func Cancel(err error) error {
	if err == nil {
		err = errors.New("cancelled by handler")
	}
	return &cancelError{err}
}

type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return "snooze " + e.d.String() }

// Snooze asks for the run to be tried again after d without using up an attempt.
func Snooze(d time.Duration) error { return &snoozeError{max(d, 0)} }

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
	// such runs only while a handler slot is free, and no more than its handlers can
	// start within a second at their mean duration (at least Concurrency+Prefetch), so a
	// worker whose handlers are slow leaves them to other workers. A held run whose job
	// is paused or changed before its start is handed back (it is not started). Default
	// DefaultHold; at most 100000.
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

// recheckAfterLoss is how long after a lost signal subscription the heartbeat asks
// about runs waiting for their start time: past the next subscription (made 200 ms
// after the loss) by most of a second.
const recheckAfterLoss = time.Second

// holdHorizon is how far ahead a worker counts on its handlers' mean duration when it
// bounds the runs it holds ahead of their start time (dispatcher.MaxLead), and
// firstMeanRun the duration it guesses before it has measured one: a worker that starts
// while runs of a lead window wait holds a hundred per handler slot at first, and fewer
// as soon as a handler turns out slower.
const (
	holdHorizon  = time.Second
	firstMeanRun = 10 * time.Millisecond
)

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

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Worker claims and runs jobs. Register handlers before Start; its methods are safe for
// concurrent use.
type Worker struct {
	cfg    Config
	store  *shard.Store
	logger *slog.Logger
	nonce  string

	mu       sync.Mutex
	handlers map[string]Handler
	held     map[string]*active // by run member
	// reporting counts the held runs whose outcome waits for the reporter: they take no
	// slot, so a slow acknowledgement does not hold back the next claims.
	reporting int
	// waiting counts the held runs claimed ahead of their start time, each with a timer
	// that queues it then (see claimable). runsClosed is set when Stop closes runs:
	// timers then leave their runs to Stop.
	waiting    int
	runsClosed bool
	// meanRun is a moving mean of handler durations (ns), 0 until one is measured: it
	// bounds the runs claimed ahead (Config.Hold).
	meanRun float64
	// recheckUntil: after a lost signal subscription, until then every heartbeat asks
	// about the runs waiting for their start time (a hold signal may have been lost).
	recheckUntil time.Time
	// hot holds the sources that may have ready runs, each with the Redis time (µs) of
	// the latest ready signal for it (0 when marked by a sweep): a claim that comes back
	// short clears a source only if it ran after that time, so a signal for runs made
	// ready while the claim was in flight is not lost.
	hot map[source]int64
	// late holds the hot sources whose last claim found a run that starts at once at
	// the head of their ready set but had no free slot for it (ClaimRequest.Now below
	// 0): a round gives them the free slots first, and claims from them only with one.
	late map[source]bool
	// paused holds the worker's queues that an operator paused: their sources stay in
	// hot but are not claimed. The paused set in Redis is the truth; signals only
	// hasten reading it. A pause signal pauses at once (the safe direction) and bumps
	// pausedGen, so a read of the set that raced with it does not undo it; a resume
	// signal only sets rereadPaused, because it may be older than a pause that a read
	// already applied (signals and reads are not ordered with each other).
	paused       map[string]bool
	pausedGen    uint64
	rereadPaused bool
	started      bool
	stopping     bool

	claimWake  chan struct{}      // work may be available or slots freed
	runs       chan *active       // claimed, waiting for a handler slot
	baseCtx    context.Context    // parent of handler contexts and outcome reports; never cancelled
	cancel     context.CancelFunc // stops claiming and listening
	stopHB     context.CancelFunc // stops heartbeats, once no run is held
	stopped    chan struct{}      // closed when Stop has finished
	loops      sync.WaitGroup     // claim, listen
	hb         sync.WaitGroup     // heartbeat
	handlersWG sync.WaitGroup     // executor goroutines
	reports    chan report        // finished attempts, batched to Redis by the reporter
	reporter   sync.WaitGroup

	queues     map[string]bool       // Config.Queues
	pauseErrs  *limit.Every          // logs of failed reads of the paused set
	clocks     map[shard.ID]clockRef // by shard, the reply that maps its Redis clock tightest (w.mu)
	afterSweep func()                // test hook: called by the claim loop after each sweep
}

// report is a finished attempt waiting to be sent to Redis.
type report struct {
	a       *active
	f       shard.Finish
	run     *Run // nil for a hand-back of a run that never started
	started time.Time
	ended   time.Time // when the handler returned
	err     error
	failed  time.Time // when a call with this report first failed (zero: none yet)
}

type source struct {
	queue string
	shard shard.ID
}

type active struct {
	c        shard.Claimed
	queue    string
	cancel   context.CancelCauseFunc // set once the handler starts
	extended time.Time               // last heartbeat (local)
	// clock maps the Redis clock of the run's shard to local time (clockRef): the
	// handler starts no sooner than StartAt on the Redis clock by it.
	clock   clockRef
	started bool
	// wait queues the run at its start time while it waits (nil otherwise).
	wait *time.Timer
	// cancelled is set when the run was cancelled before its handler started: the
	// handler does not start, and the run ends as the cause says.
	cancelled error
	// reporting: the handler is done and its outcome waits for the reporter. The run
	// is still held (and heartbeated) until Redis has the outcome, but it no longer
	// takes a handler slot.
	reporting bool
}

var (
	errJobCancelled = errors.New("job cancelled")
	errShutdown     = errors.New("worker shutting down")
	// errHeldBack marks a run held ahead of its start time whose job was paused or
	// changed before it started: it is handed back, not started.
	errHeldBack = errors.New("job paused or changed before the run started")
)

// New returns a Worker; register handlers with Handle, then Start it.
func New(cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	queues := make(map[string]bool, len(cfg.Queues))
	for _, q := range cfg.Queues {
		queues[q] = true
	}
	return &Worker{
		cfg: cfg, store: cfg.Store, nonce: randHex(6),
		logger:   cfg.Logger.With("component", "worker", "worker", cfg.ID),
		handlers: map[string]Handler{}, held: map[string]*active{}, hot: map[source]int64{}, late: map[source]bool{},
		paused:    map[string]bool{},
		claimWake: make(chan struct{}, 1),
		runs:      make(chan *active, cfg.Concurrency+cfg.Prefetch+cfg.Hold),
		reports:   make(chan report, cfg.Concurrency+cfg.Prefetch),
		queues:    queues,
		pauseErrs: limit.NewEvery(time.Minute),
	}, nil
}

// Handle registers h for jobs of type typ. It panics when typ is empty, already
// registered, or the worker has started: those are programming errors.
func (w *Worker) Handle(typ string, h Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case typ == "":
		panic("worker: Handle with an empty type")
	case w.handlers[typ] != nil:
		panic("worker: a handler for type " + strconv.Quote(typ) + " is already registered")
	case w.started:
		panic("worker: Handle after Start")
	}
	w.handlers[typ] = h
}

// HandleFunc registers fn for jobs of type typ, as Handle does.
func (w *Worker) HandleFunc(typ string, fn func(ctx context.Context, r *Run) error) {
	w.Handle(typ, HandlerFunc(fn))
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// Start starts claiming. It returns at once. Cancelling ctx stops the worker without
// a grace period (running handlers are cancelled and their runs handed back).
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("worker: already started")
	}
	if len(w.handlers) == 0 {
		return errors.New("worker: no handlers registered")
	}
	w.started = true
	loopCtx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	w.baseCtx = context.WithoutCancel(ctx)
	hbCtx, stopHB := context.WithCancel(w.baseCtx)
	w.stopHB = stopHB
	w.stopped = make(chan struct{})
	w.markAllHot()
	w.reporter.Add(1)
	go func() { defer w.reporter.Done(); w.report() }()
	for range w.cfg.Concurrency {
		w.handlersWG.Add(1)
		go func() {
			defer w.handlersWG.Done()
			w.execute()
		}()
	}
	w.loops.Add(2)
	go func() { defer w.loops.Done(); w.claimLoop(loopCtx) }()
	go func() { defer w.loops.Done(); w.listen(loopCtx) }()
	w.hb.Add(1)
	go func() { defer w.hb.Done(); w.heartbeat(hbCtx) }()
	w.loops.Add(1)
	go func() {
		defer w.loops.Done()
		<-loopCtx.Done()
		if ctx.Err() != nil {
			go func() {
				sctx, cancel := context.WithCancel(w.baseCtx)
				cancel() // no grace: cancel handlers at once
				_ = w.Stop(sctx)
			}()
		}
	}()
	return nil
}

// markAllHot marks every source hot. The caller holds w.mu.
func (w *Worker) markAllHot() {
	for _, q := range w.cfg.Queues {
		w.markQueueHot(q)
	}
}

// markQueueHot marks every shard of queue q hot. The caller holds w.mu.
func (w *Worker) markQueueHot(q string) {
	for i := 0; i < w.store.Shards(); i++ {
		w.markHot(source{q, shard.ID(i)}, 0)
	}
}

// markHot marks src as possibly having runs ready since Redis time at (µs). The caller
// holds w.mu.
func (w *Worker) markHot(src source, at int64) {
	if cur, ok := w.hot[src]; !ok || at > cur {
		w.hot[src] = at
	}
}

// claimable is how many more runs the worker may claim: now, runs that may start at
// once, are the free handler slots plus prefetch (less the held runs that take one:
// queued for a handler, or running; a run whose outcome only waits for the reporter
// takes none, nor does one waiting for its start time); ahead, runs fired ahead of their
// start time, fill holdCap, and only while now is not 0. So at most Concurrency+
// Prefetch+Hold runs are queued or running, the capacity of w.runs: pushing never
// blocks. Called with w.mu held.
func (w *Worker) claimable() (now, ahead int) {
	slots := w.cfg.Concurrency + w.cfg.Prefetch
	now = slots - (len(w.held) - w.reporting - w.waiting)
	if now <= 0 {
		return 0, 0
	}
	return now, max(w.holdCap()-w.waiting, 0)
}

// holdCap bounds the runs held ahead of their start time: as many as the handlers can
// start within holdHorizon at their mean duration (guessed as firstMeanRun until one is
// measured), at least Concurrency+Prefetch and at most Config.Hold. Called with w.mu
// held.
func (w *Worker) holdCap() int {
	mean := w.meanRun
	if mean == 0 {
		mean = float64(firstMeanRun)
	}
	n := max(float64(w.cfg.Concurrency+w.cfg.Prefetch), float64(w.cfg.Concurrency)*float64(holdHorizon)/mean)
	return int(min(n, float64(w.cfg.Hold)))
}

// observeDuration adds a handler's duration to meanRun. Called with w.mu held.
func (w *Worker) observeDuration(d time.Duration) {
	const weight = 0.05
	if w.meanRun == 0 {
		w.meanRun = max(float64(d), 1)
		return
	}
	w.meanRun += weight * (max(float64(d), 1) - w.meanRun)
}

func (w *Worker) poke() {
	select {
	case w.claimWake <- struct{}{}:
	default:
	}
}

// redisCallTimeout bounds a claim round and a report round. Stop does not cancel them
// (what they do in Redis must reach the worker), but a reply must not be awaited forever:
// rueidis waits for one without end under a context that has no deadline, and follows
// MOVED replies for as long as nodes that disagree about a slot send them. A claim round
// that times out fails (runs it may have claimed come back after their visibility
// deadline); a report round that does is a failed call, retried (see report).
const redisCallTimeout = 30 * time.Second

// A claim round asks each source for at least minClaimPerSource runs (when that many
// slots are free), from at most maxClaimSources sources. A claim is one script call per
// source, whose fixed part costs Redis about as much as a few runs: asking for 64 rather
// than 16 at a time took about a tenth less Redis CPU per run in `tock bench throughput`
// on 64 shards, and kept the fire benchmark's lateness (bench/README.md).
const (
	minClaimPerSource = 64
	maxClaimSources   = 64
)

// claimLoop claims from hot sources while there are free slots. Each round claims from
// up to maxClaimSources hot sources at once, in one pipeline, so a worker fed by many
// shards does not wait one round trip per shard.
func (w *Worker) claimLoop(ctx context.Context) {
	sweep := time.NewTicker(w.cfg.Sweep)
	defer sweep.Stop()
	errs := limit.NewEvery(10 * time.Second)
	var order []source
	var reqs []shard.ClaimRequest
	var pausedRead time.Time // last read of the paused set
	for {
		// Read the paused set at start and then about once a sweep, even when the loop
		// is never idle: it repairs what a lost pause or resume signal left wrong.
		w.mu.Lock()
		reread := w.rereadPaused
		w.rereadPaused = false
		w.mu.Unlock()
		if now := time.Now(); reread || now.Sub(pausedRead) >= w.cfg.Sweep {
			w.refreshPaused(ctx)
			pausedRead = now
		}
		w.mu.Lock()
		now, ahead := w.claimable()
		order, reqs = w.nextRound(order, reqs[:0], now, ahead)
		w.mu.Unlock()
		if len(reqs) > 0 {
			// Not cancelled by Stop: runs claimed in Redis must reach takeClaims, which
			// holds them (Stop then hands them back), or they would stay claimed until
			// their visibility deadline.
			cctx, cancel := context.WithTimeout(w.baseCtx, redisCallTimeout)
			results := w.store.ClaimMany(cctx, reqs, w.cfg.ID, w.nonce)
			cancel()
			got := time.Now()
			for i, res := range results {
				if res.Err == nil && len(res.Runs) > 0 {
					w.cfg.Metrics.RunsClaimed(reqs[i].Queue, len(res.Runs))
				}
			}
			w.mu.Lock()
			failed := w.takeClaims(reqs, results, got)
			w.mu.Unlock()
			for _, i := range failed {
				if ctx.Err() == nil && errs.Allow() {
					w.logger.ErrorContext(ctx, "claim", "shard", int(reqs[i].Shard), "queue", reqs[i].Queue, "error", results[i].Err)
				}
			}
			if len(failed) == len(results) {
				// Redis is unreachable or failing: do not spin.
				select {
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-w.claimWake:
		case <-sweep.C:
			pausedRead = time.Time{}
			w.mu.Lock()
			w.markAllHot()
			w.mu.Unlock()
			order = nil
			if w.afterSweep != nil {
				w.afterSweep()
			}
		}
	}
}

// nextRound picks the sources of the next claim round, given what may be claimed (now
// runs that start at once, and ahead runs held until their start time: claimable): up
// to maxClaimSources hot sources of queues that are not paused, taken round-robin from
// order (refilled from the hot set when it runs out, so no shard starves), with both
// shared among them. It returns the rest of order and the requests (appended to reqs),
// none when no slot is free or no claimable source is hot. The caller holds w.mu.
func (w *Worker) nextRound(order []source, reqs []shard.ClaimRequest, now, ahead int) ([]source, []shard.ClaimRequest) {
	if now <= 0 {
		return order, reqs
	}
	free := now + max(ahead, 0)
	if len(order) == 0 {
		for s := range w.hot {
			if !w.paused[s.queue] {
				order = append(order, s)
			}
		}
	}
	sources := min(max(free/minClaimPerSource, 1), maxClaimSources)
	lateIn := 0 // late sources in reqs, first
	for len(order) > 0 && len(reqs) < sources {
		var src source
		src, order = order[0], order[1:]
		if _, ok := w.hot[src]; !ok || w.paused[src.queue] {
			continue
		}
		req := shard.ClaimRequest{Shard: src.shard, Queue: src.queue}
		if !w.late[src] {
			reqs = append(reqs, req)
			continue
		}
		// A late source takes a free slot or waits for a round that has one: without
		// one its claim would stop at its head again.
		if lateIn >= now {
			continue
		}
		reqs = append(reqs, req)
		copy(reqs[lateIn+1:], reqs[lateIn:len(reqs)-1])
		reqs[lateIn] = req
		lateIn++
	}
	// Share what may be claimed: every source gets at least one run, the first ones the
	// rest, and none more than a claim takes (shard.MaxClaim): a claim that fills what it
	// asked for keeps its source hot, so what is left over goes to the next round at
	// once. The free slots are shared the same way; a source whose share is none claims
	// only runs held until their start time.
	share := func(total, i int) int {
		n := total / len(reqs)
		if i < total%len(reqs) {
			n++
		}
		return n
	}
	for i := range reqs {
		reqs[i].N = min(share(free, i), shard.MaxClaim)
		reqs[i].Now = min(share(now, i), reqs[i].N)
		if reqs[i].Now == 0 {
			reqs[i].Now = -1
		}
	}
	return order, reqs
}

// refreshPaused reads which of the worker's queues are paused, repairing what a lost
// pause or resume signal left wrong. A queue found resumed is marked hot. When the read
// fails, the worker keeps what it knew (nothing paused at first) and logs, rate-limited:
// claiming must not stop because the paused set cannot be read.
func (w *Worker) refreshPaused(ctx context.Context) {
	w.mu.Lock()
	gen := w.pausedGen
	w.mu.Unlock()
	set, err := w.store.PausedQueues(ctx)
	if err != nil {
		if ctx.Err() == nil && w.pauseErrs.Allow() {
			w.logger.WarnContext(ctx, "read paused queues", "error", err)
		}
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if gen != w.pausedGen {
		// A signal arrived meanwhile; it is at least as new as this read. The next
		// sweep reads again.
		return
	}
	for q := range w.queues {
		w.setPaused(q, set[q])
	}
}

// setPaused records whether queue q is paused; resuming marks its sources hot. The
// caller holds w.mu.
func (w *Worker) setPaused(q string, paused bool) {
	if paused == w.paused[q] {
		return
	}
	if paused {
		w.paused[q] = true
		return
	}
	delete(w.paused, q)
	w.markQueueHot(q)
}

// takeClaims holds and queues the runs of a claim round whose replies arrived at got
// (local), and returns the indexes of the requests that failed. A source that gave fewer
// runs than asked was empty when the claim ran and stops being hot, unless a ready signal
// says runs became ready at or after that moment: then it is claimed once more (its mark
// drops to 0, so a signal stamped late by a skewed clock estimate cannot keep it hot for
// longer). The caller holds w.mu.
func (w *Worker) takeClaims(reqs []shard.ClaimRequest, results []shard.ClaimResult, got time.Time) (failed []int) {
	for i, res := range results {
		req := reqs[i]
		if res.Err != nil {
			failed = append(failed, i)
			continue
		}
		src := source{req.Queue, req.Shard}
		if req.Now < 0 && res.More && len(res.Runs) == 0 {
			w.late[src] = true
		} else if req.Now >= 0 {
			delete(w.late, src)
		}
		// A claim that took what it asked for, or stopped at a run that did not fit,
		// did not find the source empty.
		if !res.More {
			if at, ok := w.hot[src]; ok && at >= res.At {
				w.hot[src] = 0
			} else {
				delete(w.hot, src)
			}
			delete(w.late, src)
		}
		if len(res.Runs) == 0 {
			continue
		}
		// The claim's time in µs (At) where it agrees with its time in ms: a clock read
		// to the millisecond is up to 1 ms early, which would hold the runs that much late.
		claimed := res.Runs[0].ClaimedAt
		if us := time.UnixMicro(res.At); !us.Before(claimed) && us.Sub(claimed) < time.Millisecond {
			claimed = us
		}
		clock := w.clockOf(req.Shard, clockRef{local: got, redis: claimed})
		for k := range res.Runs {
			a := &active{c: res.Runs[k], queue: req.Queue, extended: got, clock: clock}
			w.held[a.c.Member] = a
			// A run fired ahead of its time waits for it (clockRef.until).
			if wait := clock.until(a.c.StartAt, got); wait > 0 {
				w.waiting++
				a.wait = time.AfterFunc(wait, func() { w.release(a) })
				continue
			}
			w.runs <- a // never blocks (see claimable)
		}
	}
	return failed
}

// clockRef is a claim reply's arrival (local, with Go's monotonic reading) and the
// Redis time of the claim. The reply came after the claim, so the Redis clock read at
// least redis + (t - local) at any later local time t: a run that waits until then for
// its start time never starts early. Of a shard's replies, the one with the smallest
// local - redis maps tightest: a reply that waited for the rest of its claim round's
// pipeline, or for the worker's goroutines, does not make later runs start later.
type clockRef struct {
	local, redis time.Time
}

// A shard's clockRef serves for at most clockRefAge: the Redis clock may be stepped (a
// failover to a replica with another clock, an NTP step), and local and Redis clocks may
// run at rates that differ by NTP's slew (at most 500 ppm), for which until adds a margin
// of twice that.
const clockRefAge = 250 * time.Millisecond

// clockOf returns the clockRef to use for the runs of a claim of shard id that gives
// obs: obs, or the shard's earlier one when that maps tighter and is recent.
func (w *Worker) clockOf(id shard.ID, obs clockRef) clockRef {
	if w.clocks == nil {
		w.clocks = map[shard.ID]clockRef{}
	}
	best, ok := w.clocks[id]
	// A shard's claims are made one after another: a Redis time before the last one's
	// is a clock stepped back, and the earlier reply no longer maps it.
	if age := obs.local.Sub(best.local); ok && age < clockRefAge && !obs.redis.Before(best.redis) &&
		age >= obs.redis.Sub(best.redis) {
		return best
	}
	w.clocks[id] = obs
	return obs
}

// until is how long after now (local) the Redis clock reaches t by c, with a margin of
// 1 ms a second since c's reply for the rates of the clocks; 0 or less when it has.
func (c clockRef) until(t, now time.Time) time.Duration {
	ahead := t.Sub(c.redis)
	if ahead <= 0 {
		return ahead
	}
	return c.local.Add(ahead + ahead/1000).Sub(now)
}

// redisAt is local time t on the Redis clock by c (a lower bound).
func (c clockRef) redisAt(t time.Time) time.Time {
	return c.redis.Add(t.Sub(c.local))
}

// release queues a run whose start time has come (or that was cancelled while it
// waited) for a handler.
func (w *Worker) release(a *active) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if a.wait == nil || w.runsClosed {
		return // released already, or left to Stop
	}
	a.wait = nil
	w.waiting--
	w.runs <- a // never blocks (see claimable)
}

// listen turns ready and cancel signals into hot sources and cancelled handlers.
func (w *Worker) listen(ctx context.Context) {
	keys := w.store.Keys()
	channels := []string{keys.CancelChannel(), keys.HoldChannel(), keys.QueueChannel()}
	queueOf := map[string]string{}
	for _, q := range w.cfg.Queues {
		ch := keys.ReadyChannel(q)
		channels = append(channels, ch)
		queueOf[ch] = q
	}
	errs := limit.NewEvery(10 * time.Second)
	for ctx.Err() == nil {
		err := w.store.Subscribe(ctx, channels, func(ch, msg string) {
			if q, ok := queueOf[ch]; ok {
				w.readySignal(q, msg)
				return
			}
			w.signal(ch, msg)
		})
		if ctx.Err() != nil {
			return
		}
		if err != nil && errs.Allow() {
			w.logger.WarnContext(ctx, "signal subscription", "error", err)
		}
		// Signals may have been missed while disconnected: sweep, and have the heartbeat
		// ask about every run held for its start time until well after the next
		// subscription (a hold signal may have been lost).
		w.mu.Lock()
		w.markAllHot()
		w.recheckUntil = time.Now().Add(recheckAfterLoss)
		w.mu.Unlock()
		w.poke()
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// readySignal marks the source of a ready signal of queue q hot.
func (w *Worker) readySignal(q, msg string) {
	id, at, ok := shard.ParseReady(msg, w.store.Shards())
	if !ok {
		return
	}
	w.mu.Lock()
	w.markHot(source{q, id}, at)
	w.mu.Unlock()
	w.poke()
}

// signal handles a message of the cancel or queue channel.
func (w *Worker) signal(ch, msg string) {
	keys := w.store.Keys()
	switch ch {
	case keys.QueueChannel():
		verb, q, ok := strings.Cut(msg, " ")
		if !ok || !w.queues[q] || (verb != "pause" && verb != "resume") {
			return
		}
		w.mu.Lock()
		if verb == "pause" {
			w.pausedGen++
			w.setPaused(q, true)
		}
		// Either way, read the set soon: it says whether a resume still holds, and
		// it ends a pause that a stale signal brought back.
		w.rereadPaused = true
		w.mu.Unlock()
		w.poke()
	case keys.CancelChannel(), keys.HoldChannel():
		_, member, ok := strings.Cut(msg, " ")
		if !ok {
			return
		}
		w.mu.Lock()
		a := w.held[member]
		w.mu.Unlock()
		switch {
		case a == nil:
		case ch == keys.CancelChannel():
			w.cancelRun(a, errJobCancelled)
		default:
			w.holdRun(a)
		}
	}
}

// holdRun hands back a run whose job was paused or changed, unless its handler has
// started (a run that started goes on, as a pause lets running runs finish).
func (w *Worker) holdRun(a *active) {
	w.mu.Lock()
	if a.started || a.cancelled != nil {
		w.mu.Unlock()
		return
	}
	a.cancelled = errHeldBack
	waiting := a.wait != nil && a.wait.Stop()
	w.mu.Unlock()
	if waiting {
		w.release(a)
	}
}

// cancelRun cancels a running handler, or marks a run whose handler has not started so
// that it never starts; a run waiting for its start time is released at once.
func (w *Worker) cancelRun(a *active, cause error) {
	w.mu.Lock()
	cancel := a.cancel
	if cancel == nil && a.cancelled == nil {
		a.cancelled = cause
	}
	waiting := a.wait != nil && a.wait.Stop()
	w.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
	if waiting {
		w.release(a)
	}
}

// heartbeat extends the deadlines of held runs at a third of their visibility timeout.
func (w *Worker) heartbeat(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	errs := limit.NewEvery(10 * time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := w.extendDue(ctx); err != nil && ctx.Err() == nil && errs.Allow() {
			w.logger.ErrorContext(ctx, "heartbeat", "error", err)
		}
	}
}

// extendDue heartbeats the held runs whose last heartbeat is older than a third of their
// visibility timeout, one call per shard.
func (w *Worker) extendDue(ctx context.Context) error {
	now := time.Now()
	byShard := map[shard.ID][]*active{}
	w.mu.Lock()
	recheck := now.Before(w.recheckUntil)
	for _, a := range w.held {
		if now.Sub(a.extended) >= a.c.Visibility/3 || (recheck && a.wait != nil) {
			byShard[a.c.Shard] = append(byShard[a.c.Shard], a)
		}
	}
	w.mu.Unlock()
	var firstErr error
	for id, as := range byShard {
		held := make([]shard.Held, len(as))
		for i, a := range as {
			held[i] = shard.Held{Member: a.c.Member, Token: a.c.Token}
		}
		res, err := w.store.Extend(ctx, id, held)
		if err != nil {
			firstErr = err
			continue
		}
		for i, r := range res {
			a := as[i]
			w.mu.Lock()
			a.extended = now
			w.mu.Unlock()
			switch r {
			case shard.ExtendCancelled:
				w.cancelRun(a, errJobCancelled)
			case shard.ExtendLost:
				w.cancelRun(a, shard.ErrTokenMismatch)
			case shard.ExtendHold:
				w.holdRun(a)
			}
		}
	}
	return firstErr
}

// execute runs handlers for claimed runs until the runs channel closes.
func (w *Worker) execute() {
	for a := range w.runs {
		w.mu.Lock()
		stopping := w.stopping
		w.mu.Unlock()
		if stopping {
			// Claimed but never started: hand back without using an attempt.
			w.finish(a, nil, shard.Finish{Outcome: shard.HandBack}, time.Time{}, time.Time{}, nil)
			continue
		}
		w.work(a)
	}
}

func (w *Worker) work(a *active) {
	r := &Run{
		ID: a.c.Member, JobID: a.c.JobID, Queue: a.queue, Type: a.c.Type, Payload: a.c.Payload,
		Due: a.c.Due, Attempt: a.c.Attempt, MaxAttempts: a.c.MaxAttempts, Shard: a.c.Shard,
		ClaimedAt: a.c.ClaimedAt,
	}
	ctx, cancel := context.WithCancelCause(w.baseCtx)
	ctx, cancelTimeout := context.WithTimeoutCause(ctx, a.c.Timeout, fmt.Errorf("job timeout of %s exceeded", a.c.Timeout))
	w.mu.Lock()
	cancelled := a.cancelled
	if cancelled == nil {
		a.cancel, a.started = cancel, true // from here on cancelRun cancels ctx
	}
	w.mu.Unlock()
	if cancelled != nil {
		// Cancelled before its handler started (say, while it waited for its due time):
		// the handler does not run.
		cancelTimeout()
		cancel(nil)
		if errors.Is(cancelled, shard.ErrTokenMismatch) {
			w.done(a) // redelivered to another worker: nothing to report
			w.cfg.Metrics.RunFinished(a.queue, OutcomeRejected, max(a.c.ClaimedAt.Sub(a.c.Due), 0), 0)
			return
		}
		if errors.Is(cancelled, errHeldBack) {
			// Ready again (or parked, when its job is paused) without using an attempt.
			w.finish(a, nil, shard.Finish{Outcome: shard.HandBack}, time.Time{}, time.Time{}, nil)
			return
		}
		w.finish(a, nil, shard.Finish{Outcome: shard.Cancelled, Error: cancelled.Error()}, time.Time{}, time.Time{}, nil)
		return
	}
	started := time.Now()
	r.StartedAt = a.clock.redisAt(started)
	err := w.call(ctx, r)
	ended := time.Now()
	w.mu.Lock()
	w.observeDuration(ended.Sub(started))
	w.mu.Unlock()
	cause := context.Cause(ctx)
	cancelTimeout()
	cancel(nil)

	f := shard.Finish{Member: a.c.Member, Token: a.c.Token}
	var ce *cancelError
	var se *snoozeError
	switch {
	case errors.Is(cause, errShutdown):
		f.Outcome = shard.HandBack
	case errors.Is(cause, shard.ErrTokenMismatch):
		// Lost the run to another worker; nothing to report (it would be rejected).
		w.done(a)
		w.cfg.Metrics.RunFinished(a.queue, OutcomeRejected, a.lateness(started), ended.Sub(started))
		w.observe(Result{Run: r, Started: started, Finished: ended, Outcome: OutcomeFailed, Err: err, Rejected: true})
		return
	case err == nil:
		f.Outcome = shard.Succeeded
	case errors.Is(cause, errJobCancelled) || errors.As(err, &ce):
		f.Outcome, f.Error = shard.Cancelled, err.Error()
	case errors.As(err, &se):
		f.Outcome, f.Delay = shard.Snoozed, se.d
	default:
		f.Outcome, f.Error = shard.Failed, err.Error()
		if cause != nil && ctx.Err() != nil && !errors.Is(err, cause) {
			f.Error = cause.Error() + ": " + err.Error()
		}
	}
	w.finish(a, r, f, started, ended, err)
}

// lateness is the time from the run's due time to started (local), on the Redis clock.
func (a *active) lateness(started time.Time) time.Duration {
	return a.clock.redisAt(started).Sub(a.c.Due)
}

// call runs the handler, turning a panic into an error.
func (w *Worker) call(ctx context.Context, r *Run) (err error) {
	w.mu.Lock()
	h := w.handlers[r.Type]
	w.mu.Unlock()
	if h == nil {
		return fmt.Errorf("no handler registered for job type %q on worker %s", r.Type, w.cfg.ID)
	}
	defer func() {
		if p := recover(); p != nil {
			stack := string(debug.Stack())
			if len(stack) > 1500 {
				stack = stack[:1500]
			}
			err = fmt.Errorf("handler panicked: %v\n%s", p, stack)
		}
	}()
	return h.Work(ctx, r)
}

// finish queues the attempt's report for the reporter.
// started and ended are zero for a run whose handler never started.
func (w *Worker) finish(a *active, r *Run, f shard.Finish, started, ended time.Time, herr error) {
	f.Member, f.Token = a.c.Member, a.c.Token
	// The slot is free for the next claim from here on. Marked before the report is
	// queued, so the reporter's done always sees it.
	w.mu.Lock()
	a.reporting = true
	w.reporting++
	w.mu.Unlock()
	w.poke()
	w.reports <- report{a: a, f: f, run: r, started: started, ended: ended, err: herr}
}

// maxReportBatch bounds the reports sent in one pipeline (with the ones sent again).
const maxReportBatch = 1024

// A report whose call failed is sent again every reportRetryPause, along with new ones,
// for up to reportRetry: long enough to outlast a Redis Cluster failover of a few
// seconds, after which the run, held and heartbeated all along, is still in flight under
// its token and the outcome lands. Given up, the run is redelivered after its visibility
// deadline.
const (
	reportRetry      = 5 * time.Second
	reportRetryPause = 200 * time.Millisecond
)

// report sends finished attempts to Redis, one script call per shard in one pipeline
// per round. A shard's outcomes go at once after a quiet spell, then at most once per
// Config.AckDelay (sooner once shardReportBatch of them wait, and all at once when the
// worker stops): under load each call carries many runs instead of one or two, which is
// most of what Redis spends on acknowledgements. The reports of a shard whose call failed
// go again with its next ones, no sooner than reportRetryPause later, for up to
// reportRetry (their runs stay held and heartbeated meanwhile); then they are given up
// and the runs are redelivered after their deadlines. After w.reports closes, it sends
// what is left before it returns.
func (w *Worker) report() {
	outcomes := map[shard.Outcome]Outcome{
		shard.Succeeded: OutcomeSucceeded, shard.Failed: OutcomeFailed, shard.Cancelled: OutcomeCancelled,
		shard.Snoozed: OutcomeSnoozed, shard.HandBack: OutcomeHandedBack,
	}
	q := newReportQueue(w.cfg.AckDelay)
	// Reports are taken from the channel while fewer than maxReportsWaiting wait, so
	// that handlers feel a reporter that cannot keep up.
	maxWaiting := max(cap(w.reports), maxReportsWaiting)
	closed := false
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for !closed || q.waiting > 0 {
		// Whatever has queued up goes along.
	drain:
		for !closed && q.waiting < maxWaiting {
			select {
			case r, ok := <-w.reports:
				if !ok {
					closed = true
					break drain
				}
				q.add(r)
			default:
				break drain
			}
		}
		now := time.Now()
		byShard, batch, next := q.due(now, closed)
		if len(batch) == 0 {
			if closed && q.waiting == 0 {
				return // the channel closed while draining it, and everything went
			}
			// Nothing may go yet: wait for a report or the next shard's turn.
			var timeout <-chan time.Time
			if !next.IsZero() {
				wake.Reset(next.Sub(now))
				timeout = wake.C
			}
			in := w.reports
			if closed || q.waiting >= maxWaiting {
				in = nil
			}
			select {
			case r, ok := <-in:
				if !ok {
					closed = true
				} else {
					q.add(r)
				}
			case <-timeout:
			}
			wake.Stop() // no stale tick after Stop (Go 1.23 timers)
			continue
		}
		rejected := make([][]bool, len(batch))
		failed := map[shard.ID]error{}
		fctx, cancel := context.WithTimeout(w.baseCtx, redisCallTimeout)
		finished := w.store.FinishMany(fctx, byShard)
		cancel()
		for id, fr := range finished {
			if fr.Err != nil {
				failed[id] = fr.Err
				continue
			}
			rejected[q.index[id]] = make([]bool, len(fr.Errs))
			for k, e := range fr.Errs {
				rejected[q.index[id]][k] = e != nil
			}
		}
		now = time.Now()
		for k, reps := range batch {
			id := reps[0].a.c.Shard
			err := failed[id]
			var retry []report
			for i, r := range reps {
				if err != nil {
					if r.failed.IsZero() {
						r.failed = now
					}
					if now.Sub(r.failed) < reportRetry {
						retry = append(retry, r) // still held and heartbeated meanwhile
						continue
					}
					w.logger.Error("report run outcome", "shard", int(id), "run", r.a.c.Member, "error", err)
				}
				rej := err == nil && rejected[k] != nil && rejected[k][i]
				w.done(r.a)
				w.measure(r, outcomes[r.f.Outcome], rej)
				if r.run != nil {
					w.observe(Result{Run: r.run, Started: r.started, Finished: now, Outcome: outcomes[r.f.Outcome], Err: r.err, Rejected: rej})
				}
			}
			q.sent(id, now, retry)
		}
	}
}

// shardReportBatch is how many outcomes of one shard go at once, without waiting for
// the shard's turn (Config.AckDelay): enough that a call's fixed cost (about as much as
// two or three runs' acks) is small beside its runs, few enough that a busy worker's
// shards report as their outcomes come instead of all together at each turn. With 256,
// a worker at 100,000 runs a second sent 5,000 outcomes in one burst every AckDelay, and
// its claims waited behind them with its handlers idle (tock bench throughput: 78,000
// and 106,000 runs a second against 127,000 and 124,000 without batching).
//
// maxReportsWaiting bounds the outcomes the reporter holds, all shards, before handlers
// wait for it: a bound of 1,024 capped such a worker near 60,000 runs a second.
const (
	shardReportBatch  = 32
	maxReportsWaiting = 16384
)

// reportQueue holds finished attempts by shard until their shard's turn.
type reportQueue struct {
	delay   time.Duration
	shards  map[shard.ID]*shardReports
	waiting int // reports held, all shards
	// index maps the shards of the batch last returned by due to their place in it.
	index map[shard.ID]int
}

type shardReports struct {
	reps []report
	next time.Time // no call for the shard before then (AckDelay after its last call)
	// retry is when reports of a failed call may go again (zero when the last call
	// succeeded): retries pause even when the worker stops.
	retry time.Time
}

func newReportQueue(delay time.Duration) *reportQueue {
	return &reportQueue{delay: delay, shards: map[shard.ID]*shardReports{}, index: map[shard.ID]int{}}
}

func (q *reportQueue) add(r report) {
	id := r.a.c.Shard
	s := q.shards[id]
	if s == nil {
		s = &shardReports{}
		q.shards[id] = s
	}
	s.reps = append(s.reps, r)
	q.waiting++
}

// due takes the reports of the shards whose turn it is at now (every shard's, but
// for failed calls' pauses, when stopping), up to about maxReportBatch, as the
// Finish lists to send and the reports in the same order, one slice per shard. With
// none due, next is when the earliest shard's turn comes (zero: no report waits).
func (q *reportQueue) due(now time.Time, stopping bool) (byShard map[shard.ID][]shard.Finish, batch [][]report, next time.Time) {
	clear(q.index)
	n := 0
	for id, s := range q.shards {
		if len(s.reps) == 0 {
			continue
		}
		at := s.next
		if stopping || len(s.reps) >= shardReportBatch {
			at = time.Time{}
		}
		if s.retry.After(at) {
			at = s.retry
		}
		if now.Before(at) || n >= maxReportBatch {
			if next.IsZero() || at.Before(next) {
				next = at
			}
			continue
		}
		if byShard == nil {
			byShard = map[shard.ID][]shard.Finish{}
		}
		fs := make([]shard.Finish, len(s.reps))
		for i, r := range s.reps {
			fs[i] = r.f
		}
		byShard[id] = fs
		q.index[id] = len(batch)
		batch = append(batch, s.reps)
		n += len(s.reps)
		q.waiting -= len(s.reps)
		s.reps = nil
	}
	if n > 0 {
		next = time.Time{}
	}
	return byShard, batch, next
}

// sent records a call for shard id made at now; retry are its reports to send again
// (the call failed).
func (q *reportQueue) sent(id shard.ID, now time.Time, retry []report) {
	s := q.shards[id]
	s.next = now.Add(q.delay)
	s.retry = time.Time{}
	if len(retry) > 0 {
		s.retry = now.Add(reportRetryPause)
		s.reps = append(retry, s.reps...)
		q.waiting += len(retry)
	}
}

func (w *Worker) done(a *active) {
	w.mu.Lock()
	delete(w.held, a.c.Member)
	if a.reporting {
		a.reporting = false
		w.reporting--
	}
	w.mu.Unlock()
	w.poke()
}

// measure reports a finished attempt to Metrics.
func (w *Worker) measure(r report, o Outcome, rejected bool) {
	switch {
	case rejected:
		o = OutcomeRejected
	case o == OutcomeFailed && r.a.c.Attempt >= r.a.c.MaxAttempts:
		o = OutcomeDead
	}
	a := r.a
	if r.started.IsZero() {
		w.cfg.Metrics.RunFinished(a.queue, o, max(a.c.ClaimedAt.Sub(a.c.Due), 0), 0)
		return
	}
	w.cfg.Metrics.RunFinished(a.queue, o, a.lateness(r.started), r.ended.Sub(r.started))
}

func (w *Worker) observe(res Result) {
	if w.cfg.ObserveFunc != nil {
		w.cfg.ObserveFunc(res)
	}
}

// Stop stops claiming, hands back claimed runs that have not started, and waits for
// running handlers until ctx ends; then it cancels their contexts and hands their runs
// back without using an attempt. It returns ctx.Err() when it had to cancel handlers.
// Stop is safe to call twice or without Start.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if !w.started {
		w.mu.Unlock()
		return nil
	}
	first := !w.stopping
	w.stopping = true
	w.mu.Unlock()
	if first {
		w.cancel()
		w.loops.Wait() // no more claims
		// Runs waiting for their start time are handed back: they never started.
		w.mu.Lock()
		w.runsClosed = true
		var back []*active
		for _, a := range w.held {
			if a.wait != nil {
				a.wait.Stop()
				a.wait = nil
				w.waiting--
				back = append(back, a)
			}
		}
		close(w.runs)
		w.mu.Unlock()
		for _, a := range back {
			w.finish(a, nil, shard.Finish{Outcome: shard.HandBack}, time.Time{}, time.Time{}, nil)
		}
	}
	done := make(chan struct{})
	go func() {
		w.handlersWG.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		// Out of time: cancel running handlers; their runs are handed back.
		w.mu.Lock()
		for _, a := range w.held {
			if a.cancel != nil {
				a.cancel(errShutdown)
			}
		}
		w.mu.Unlock()
		<-done
		err = ctx.Err()
	}
	if first {
		close(w.reports)
		w.reporter.Wait()
		w.stopHB()
		w.hb.Wait()
		close(w.stopped)
	} else {
		<-w.stopped
	}
	return err
}
