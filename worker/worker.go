package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/tockhq/tock/internal/limit"
	"github.com/tockhq/tock/shard"
)

// Worker claims and runs jobs. Register handlers before Start; its methods are safe for
// concurrent use.
type Worker struct {
	cfg    Config
	store  *shard.Store
	logger *slog.Logger
	nonce  string
	figs   *figures // nil with Config.NoFigures

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
	// bounds the runs claimed ahead (Config.Hold). aheadShare is a moving share of the
	// runs claimed that waited for their start time (claimable).
	meanRun    float64
	aheadShare float64
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

// redisCallTimeout bounds a claim round and a report round. Stop does not cancel them
// (what they do in Redis must reach the worker), but a reply must not be awaited forever:
// rueidis waits for one without end under a context that has no deadline, and follows
// MOVED replies for as long as nodes that disagree about a slot send them. A claim round
// that times out fails (runs it may have claimed come back after their visibility
// deadline); a report round that does is a failed call, retried (see report).
const redisCallTimeout = 30 * time.Second

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
	var figs *figures
	if !cfg.NoFigures {
		figs = &figures{store: cfg.Store, id: cfg.ID, pending: map[shard.FigureKey]*shard.FigureDelta{}}
		cfg.Metrics = figureMetrics{Metrics: cfg.Metrics, f: figs}
	}
	return &Worker{
		cfg: cfg, store: cfg.Store, nonce: randHex(6), figs: figs,
		logger:   cfg.Logger.With("component", "worker", "worker", cfg.ID),
		handlers: map[string]Handler{}, held: map[string]*active{}, hot: map[source]int64{}, late: map[source]bool{},
		paused:    map[string]bool{},
		claimWake: make(chan struct{}, 1),
		runs:      make(chan *active, 2*(cfg.Concurrency+cfg.Prefetch)+cfg.Hold),
		reports:   make(chan report, cfg.Concurrency+cfg.Prefetch),
		queues:    queues,
		pauseErrs: limit.NewEvery(time.Minute),
	}, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
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
	if w.figs != nil {
		w.hb.Add(1)
		go func() { defer w.hb.Done(); w.figs.loop(hbCtx, w) }()
	}
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
