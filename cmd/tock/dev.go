package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/tockhq/tock"
	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/prom"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/ui"
	"github.com/tockhq/tock/worker"
)

var devHelp = commandHelp{"tock dev [flags]",
	"Run an embedded in-memory Redis (miniredis), a dispatcher, a demo worker and the HTTP API " +
		"(no auth) in one process, until Ctrl-C. Nothing is kept when it stops. The demo worker runs " +
		"jobs of types " + strings.Join(demoTypes, ", ") + " in every queue; a job of another type fails " +
		"with \"no handler registered\" in its run history and is retried: run your own worker on the " +
		"embedded Redis for those (with --worker=false, it runs every job). --demo also creates sample " +
		"jobs. Every attempt prints a line."}

type devOptions struct {
	demo     bool
	noWorker bool // run no demo worker
	addr     string
	http     string
	shards   int
	// started, when set, is called with the API's address once everything runs (tests).
	started func(apiAddr string)
}

func runDev(ctx context.Context, args []string, c *cli) error {
	fs := newFlagSet("tock dev")
	var o devOptions
	withWorker := true
	fs.BoolVar(&o.demo, "demo", false, "create sample jobs and print one line per firing")
	fs.BoolVar(&withWorker, "worker", true, "run the demo worker on every queue; --worker=false leaves every job to your own workers")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:0", "`address` of the embedded Redis (port 0 picks a free one)")
	fs.StringVar(&o.http, "http", "127.0.0.1:8080", "`address` of the HTTP API (no auth; port 0 picks a free one; \"\" for none)")
	fs.IntVar(&o.shards, "shards", shard.DefaultShards, "shard `count`")
	if err := fs.Parse(args); err != nil {
		return flagParseError(err, c.out, devHelp, fs)
	}
	if fs.NArg() > 0 {
		return usageErrorf("tock dev", "dev: unexpected argument %q", fs.Arg(0))
	}
	o.noWorker = !withWorker
	return dev(ctx, o, c.out)
}

func dev(ctx context.Context, o devOptions, out io.Writer) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr(o.addr); err != nil {
		return fmt.Errorf("dev: start embedded redis on %s: %w", o.addr, err)
	}
	defer mr.Close()
	// miniredis expires keys only when told that time passed. The clock runs until
	// the embedded Redis closes, through the shutdown (lease and run deadlines keep
	// expiring while the components stop), not only until the signal.
	clockDone := make(chan struct{})
	clockCtx, stopClock := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(clockDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-clockCtx.Done():
				return
			case now := <-tick.C:
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	defer func() { stopClock(); <-clockDone }()

	rc, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{mr.Addr()}, DisableCache: true, ForceSingleClient: true,
		AlwaysRESP2: true, // miniredis needs pub/sub on its own connection
	})
	if err != nil {
		return fmt.Errorf("dev: connect to embedded redis: %w", err)
	}
	defer rc.Close()
	client, err := tock.New(ctx, rc, shard.Config{Shards: o.shards})
	if err != nil {
		return err
	}

	metrics, err := prom.New(prom.Config{Logger: logger})
	if err != nil {
		return err
	}
	if err := metrics.QueueDepths(context.WithoutCancel(ctx), client.Store().Queues); err != nil {
		return err
	}
	if err := metrics.WorkflowCounts(context.WithoutCancel(ctx), client.Store().WorkflowCounts); err != nil {
		return err
	}
	d, err := dispatcher.New(dispatcher.Config{Store: client.Store(), Name: "dev", Logger: logger, Metrics: metrics})
	if err != nil {
		return err
	}
	var api *ingest.Server
	if o.http != "" {
		api, err = ingest.New(ingest.Config{Store: client.Store(), Addr: o.http, Logger: logger,
			MetricsHandler: metrics.Handler(), Metrics: metrics})
		if err != nil {
			return err
		}
		if _, err := ui.Mount(ui.Config{API: api, Logger: logger}); err != nil {
			return err
		}
	}
	// The embedded Redis is closed by the deferred calls, after the components stopped.
	// The components run on a context that the signal does not cancel: the shutdown
	// sequence stops them one by one, each with its grace period.
	var r running
	runCtx := context.WithoutCancel(ctx)
	if err := d.Start(runCtx); err != nil {
		return err
	}
	r.d = d
	if !o.noWorker {
		ws := &devWorkers{store: client.Store(), logger: logger, metrics: metrics,
			observe: func(res worker.Result) { printRun(out, res) }}
		if err := ws.start(runCtx); err != nil {
			return errors.Join(err, r.stop(ctx, logger, devStepTimeout))
		}
		r.workers = ws.stop
	}
	if api != nil {
		if err := api.Start(runCtx); err != nil {
			err = fmt.Errorf("dev: HTTP API on %s: %w (choose another address with --http, e.g. --http 127.0.0.1:0)", o.http, err)
			return errors.Join(err, r.stop(ctx, logger, devStepTimeout))
		}
		r.api = api
	}
	who := "a demo worker"
	if o.noWorker {
		who = "no worker"
	}
	fmt.Fprintf(out, "tock dev: embedded Redis at %s, %d shards; dispatcher %q and %s are running (Ctrl-C stops)\n",
		mr.Addr(), o.shards, d.Name(), who)
	if o.noWorker {
		fmt.Fprintf(out, "tock dev: no worker runs (--worker=false): start your own on the embedded Redis, such as\n"+
			"  go run ./examples/worker --redis %s\n", mr.Addr())
	} else {
		fmt.Fprintf(out, "tock dev: the demo worker runs jobs of types %s, in every queue (a new queue within %s).\n",
			strings.Join(demoTypes, ", "), devQueuePoll)
		fmt.Fprintf(out, "tock dev: a job of another type fails with \"no handler registered\" in its run history and is\n"+
			"  retried; for those, run your own worker on the embedded Redis, and tock dev --worker=false.\n")
	}
	fmt.Fprintf(out, "tock dev: connect with tock.Connect(ctx, tock.Options{Addrs: []string{%q}})\n", mr.Addr())
	apiAddr := ""
	if api != nil {
		apiAddr = api.Addr()
		u := "http://" + apiAddr
		fmt.Fprintf(out, "tock dev: HTTP API at %s (no auth). Try:\n", u)
		fmt.Fprintf(out, "  curl -s -X POST %s/v1/jobs -H 'Content-Type: application/json' -d '{\"type\":\"echo\",\"payload\":{\"hello\":\"world\"},\"schedule\":{\"delay\":\"5s\"}}'\n", u)
		fmt.Fprintf(out, "  curl -s %s/v1/queues\n", u)
		fmt.Fprintf(out, "  curl -s %s/metrics\n", u)
		if u != defaultAPI {
			fmt.Fprintf(out, "  TOCK_API=%s tock jobs ls\n", u)
		} else {
			fmt.Fprintf(out, "  tock jobs ls\n")
		}
	}
	if o.demo {
		if err := createDemoJobs(ctx, client, out); err != nil {
			return errors.Join(err, r.stop(ctx, logger, devStepTimeout))
		}
	}
	if o.started != nil {
		o.started(apiAddr)
	}
	<-ctx.Done()

	fmt.Fprintln(out, "tock dev: shutting down")
	return r.stop(ctx, logger, devStepTimeout)
}

// devQueuePoll is how often tock dev looks for new queues to run its demo worker on.
const devQueuePoll = time.Second

// devWorkers runs the demo worker on every queue of the namespace: a worker takes a
// fixed list of queues, so it runs one per queue, each started when its queue first
// shows in the queue figures (a job's queue shows there once the job is created).
type devWorkers struct {
	store   *shard.Store
	logger  *slog.Logger
	metrics worker.Metrics
	observe func(worker.Result)

	mu      sync.Mutex
	workers map[string]*worker.Worker
	cancel  context.CancelFunc
	done    chan struct{}
}

// start starts a worker on the default queue and the loop that follows new queues.
func (ws *devWorkers) start(ctx context.Context) error {
	ws.workers = map[string]*worker.Worker{}
	if err := ws.serve(ctx, job.DefaultQueue); err != nil {
		return err
	}
	fctx, cancel := context.WithCancel(ctx)
	ws.cancel, ws.done = cancel, make(chan struct{})
	go ws.follow(fctx)
	return nil
}

// follow starts a worker on each queue that appears, until ctx ends.
func (ws *devWorkers) follow(ctx context.Context) {
	defer close(ws.done)
	tick := time.NewTicker(devQueuePoll / 4)
	defer tick.Stop()
	var lastLog time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		qs, err := ws.store.Queues(ctx)
		for _, q := range qs {
			if err == nil {
				err = ws.serve(ctx, q.Queue)
			}
		}
		if err != nil && ctx.Err() == nil && time.Since(lastLog) > time.Minute {
			ws.logger.WarnContext(ctx, "dev: follow queues", "err", err)
			lastLog = time.Now()
		}
	}
}

// serve starts a worker on queue unless one runs there.
func (ws *devWorkers) serve(ctx context.Context, queue string) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.workers[queue] != nil {
		return nil
	}
	w, err := worker.New(worker.Config{
		Store: ws.store, Queues: []string{queue}, Concurrency: 10, ID: "dev-" + queue,
		Logger: ws.logger, Metrics: ws.metrics, ObserveFunc: ws.observe,
	})
	if err != nil {
		return err
	}
	registerDemoHandlers(w)
	// A dev worker may follow the queue of scheduled workflows' definitions too.
	w.HandleWorkflows()
	if err := w.Start(ctx); err != nil {
		return fmt.Errorf("dev: start the worker of queue %q: %w", queue, err)
	}
	ws.workers[queue] = w
	return nil
}

// stop stops following queues, then every worker at once, each draining its runs until
// ctx ends.
func (ws *devWorkers) stop(ctx context.Context) error {
	if ws.cancel != nil {
		ws.cancel()
		<-ws.done
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	errs := make([]error, 0, len(ws.workers))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for q, w := range ws.workers {
		wg.Go(func() {
			if err := w.Stop(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("queue %s: %w", q, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// demoTypes are the job types the demo worker runs.
var demoTypes = []string{"echo", "demo.hello", "demo.flaky", "demo.doomed"}

func registerDemoHandlers(w *worker.Worker) {
	w.HandleFunc("echo", func(ctx context.Context, r *worker.Run) error { return nil })
	w.HandleFunc("demo.hello", func(ctx context.Context, r *worker.Run) error { return nil })
	w.HandleFunc("demo.flaky", func(ctx context.Context, r *worker.Run) error {
		if r.Attempt < 3 {
			return fmt.Errorf("flaky: attempt %d fails on purpose", r.Attempt)
		}
		return nil
	})
	w.HandleFunc("demo.doomed", func(ctx context.Context, r *worker.Run) error {
		return fmt.Errorf("doomed: attempt %d fails on purpose", r.Attempt)
	})
}

func createDemoJobs(ctx context.Context, c *tock.Client, out io.Writer) error {
	fast := job.RetryPolicy{MaxAttempts: 3, InitialBackoff: 500 * time.Millisecond, MaxBackoff: 2 * time.Second}
	jobs := []*job.Job{
		{ID: "demo-once", Type: "demo.hello", Payload: []byte("hello"), Schedule: job.Schedule{Delay: 3 * time.Second}},
		{ID: "demo-cron", Type: "demo.hello", Schedule: job.Schedule{Cron: "*/5 * * * * *", TimeZone: "UTC"}},
		{ID: "demo-flaky", Type: "demo.flaky", Retry: fast, Schedule: job.Schedule{Delay: time.Second}},
		{ID: "demo-doomed", Type: "demo.doomed", Retry: fast, Schedule: job.Schedule{Delay: 2 * time.Second}},
	}
	res, err := c.CreateMany(ctx, jobs)
	if err != nil {
		return fmt.Errorf("dev: create demo jobs: %w", err)
	}
	for _, r := range res {
		if r.Err != nil {
			return fmt.Errorf("dev: create demo job %s: %w", r.ID, r.Err)
		}
		next := "now"
		if !r.NextRunAt.IsZero() {
			next = r.NextRunAt.Format("15:04:05.000")
		}
		fmt.Fprintf(out, "created  job=%-12s shard=%-3d state=%-9s next=%s\n", r.ID, r.Shard, r.State, next)
	}
	return nil
}

func printRun(out io.Writer, r worker.Result) {
	late := r.Run.StartedAt.Sub(r.Run.Due).Milliseconds()
	outcome := string(r.Outcome)
	if r.Outcome == worker.OutcomeFailed && r.Run.Attempt >= r.Run.MaxAttempts {
		outcome = "dead"
	}
	line := fmt.Sprintf("fired    job=%-12s due=%s lateness=%dms attempt=%d/%d outcome=%s",
		r.Run.JobID, r.Run.Due.Format("15:04:05.000"), late, r.Run.Attempt, r.Run.MaxAttempts, outcome)
	if r.Err != nil {
		line += fmt.Sprintf(" error=%q", r.Err.Error())
	}
	fmt.Fprintln(out, line)
}
