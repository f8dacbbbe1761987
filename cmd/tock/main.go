// Command tock is the tock binary. `tock dev` runs everything in one process on an
// embedded in-memory Redis.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
	_ "time/tzdata" // IANA zones inside the binary, for machines without zoneinfo

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/tockhq/tock"
	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/prom"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/worker"
)

const usage = `tock: a Redis-native sharded job scheduler

Usage:
  tock dev [--demo] [--http 127.0.0.1:8080] [--addr 127.0.0.1:0] [--shards 64]
      Run an embedded in-memory Redis, a dispatcher, a worker and the HTTP API (no auth)
      in one process. --demo also creates sample jobs and prints one line per firing.
  tock server --redis host:port[,host:port...] [--http 127.0.0.1:8080] [--token secret:scope]...
      Run the HTTP API and a dispatcher against Redis or Redis Cluster; --roles api or
      --roles dispatcher runs one of them.
  tock ingest --redis host:port[,host:port...] [--http 127.0.0.1:8080] [--token secret:scope]...
      Run the HTTP API only.
  tock dispatcher --redis host:port[,host:port...] [--snapshot-to URL --snapshot-every 1h]
      Run a dispatcher only: the live dispatchers share the shards and fire due runs.
  tock init --redis host:port[,host:port...] [--namespace tock] [--shards 64] [--bucket 1m]
      Initialise a namespace, or check that it exists with these settings.
  tock snapshot export --to LOCATION | restore --from LOCATION | verify --from LOCATION | ls --from LOCATION
      Export every job to a directory or object storage (file://, s3://), or rebuild an
      empty namespace from a snapshot after checking it whole (see docs/snapshots.md).
  tock jobs create|get|ls|patch|cancel|pause|resume|trigger|runs [flags]
      Manage jobs through the API: --api URL (env TOCK_API, default http://127.0.0.1:8080),
      --token T (env TOCK_TOKEN), --json for the API's JSON instead of a table.
  tock dead ls|requeue|rm [flags]
      List dead runs, make them ready again, or delete them.
  tock queues [--watch] | tock queues pause|resume QUEUE...
      Queue figures (--watch redraws every 2s, and keeps trying while the API is down),
      or stop and restart claiming from a queue.
  tock bench fire|throughput|memory|ingest|bare [flags]
      Run the load generator and print its figures as JSON (see bench/README.md).
  tock version
      Print the version, the commit it was built from and the Go version (or tock --version).

server, ingest, dispatcher, init and snapshot read each setting from a flag, an environment
variable (TOCK_REDIS, TOCK_SHARDS, ...) or a YAML file (--config FILE or TOCK_CONFIG); see
docs/config.md. SIGINT or SIGTERM stops them gracefully, in order: the API, the
dispatcher, periodic snapshots, the Redis client; a second signal exits at once.

Run 'tock <command> --help' for the flags of a command. Help goes to stdout with exit
status 0; a command line that cannot run exits 2, an error while running exits 1.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // the first signal starts a graceful shutdown; a second one exits at once
	}()
	code := execute(ctx, os.Args[1:], osCLI())
	stop()
	os.Exit(code)
}

// run runs the command args[0] with its arguments; args is not empty.
func run(ctx context.Context, args []string, c *cli) error {
	switch args[0] {
	case "dev":
		return runDev(ctx, args[1:], c)
	case "server":
		return runServer(ctx, args[1:], c)
	case "ingest":
		return runIngest(ctx, args[1:], c)
	case "dispatcher":
		return runDispatcher(ctx, args[1:], c)
	case "init":
		return runInit(ctx, args[1:], c)
	case "jobs", "job":
		return runJobs(ctx, c, args[1:])
	case "dead":
		return runDead(ctx, c, args[1:])
	case "queues", "queue":
		return runQueues(ctx, c, args[1:])
	case "bench":
		return runBench(ctx, args[1:], c)
	case "snapshot":
		return runSnapshot(ctx, args[1:], c)
	case "version", "--version", "-version":
		return runVersion(args[1:], c)
	case "help", "-h", "--help", "-help":
		fmt.Fprint(c.out, usage)
		return nil
	}
	return &usageError{cmd: "tock", err: fmt.Errorf("unknown command %q", args[0]), usage: usage}
}

type devOptions struct {
	demo   bool
	addr   string
	http   string
	shards int
	// started, when set, is called with the API's address once everything runs (tests).
	started func(apiAddr string)
}

var devHelp = commandHelp{"tock dev [flags]",
	"Run an embedded in-memory Redis (miniredis), a dispatcher, a demo worker and the HTTP API " +
		"(no auth) in one process, until Ctrl-C. Nothing is kept when it stops. --demo also creates " +
		"sample jobs; every firing prints a line."}

func runDev(ctx context.Context, args []string, c *cli) error {
	fs := newFlagSet("tock dev")
	var o devOptions
	fs.BoolVar(&o.demo, "demo", false, "create sample jobs and print one line per firing")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:0", "`address` of the embedded Redis (port 0 picks a free one)")
	fs.StringVar(&o.http, "http", "127.0.0.1:8080", "`address` of the HTTP API (no auth; port 0 picks a free one; \"\" for none)")
	fs.IntVar(&o.shards, "shards", shard.DefaultShards, "shard `count`")
	if err := fs.Parse(args); err != nil {
		return flagParseError(err, c.out, devHelp, fs)
	}
	if fs.NArg() > 0 {
		return usageErrorf("tock dev", "dev: unexpected argument %q", fs.Arg(0))
	}
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
	d, err := dispatcher.New(dispatcher.Config{Store: client.Store(), Name: "dev", Logger: logger, Metrics: metrics})
	if err != nil {
		return err
	}
	w, err := worker.New(worker.Config{
		Store: client.Store(), Concurrency: 10, Logger: logger, Metrics: metrics,
		ObserveFunc: func(r worker.Result) { printRun(out, r) },
	})
	if err != nil {
		return err
	}
	registerDemoHandlers(w)
	var api *ingest.Server
	if o.http != "" {
		api, err = ingest.New(ingest.Config{Store: client.Store(), Addr: o.http, Logger: logger,
			MetricsHandler: metrics.Handler(), Metrics: metrics})
		if err != nil {
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
	if err := w.Start(runCtx); err != nil {
		return errors.Join(err, r.stop(ctx, logger, devStepTimeout))
	}
	r.w = w
	if api != nil {
		if err := api.Start(runCtx); err != nil {
			err = fmt.Errorf("dev: HTTP API on %s: %w (choose another address with --http, e.g. --http 127.0.0.1:0)", o.http, err)
			return errors.Join(err, r.stop(ctx, logger, devStepTimeout))
		}
		r.api = api
	}
	fmt.Fprintf(out, "tock dev: embedded Redis at %s, %d shards; dispatcher %q and a worker are running (Ctrl-C stops)\n",
		mr.Addr(), o.shards, d.Name())
	fmt.Fprintf(out, "tock dev: connect with tock.Connect(ctx, tock.Options{Addrs: []string{%q}})\n", mr.Addr())
	apiAddr := ""
	if api != nil {
		apiAddr = api.Addr()
		u := "http://" + apiAddr
		fmt.Fprintf(out, "tock dev: HTTP API at %s (no auth); the worker runs jobs of type \"echo\". Try:\n", u)
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

// devStepTimeout bounds each step of tock dev's shutdown.
const devStepTimeout = 10 * time.Second

// running holds the components a command started, to stop them in shutdown order: the
// API first (no new jobs), then the dispatcher (no new firings), the worker (drains its
// runs), periodic snapshots, the metrics endpoint, and last the Redis client, which the
// others use until they stopped. Nil components are skipped.
type running struct {
	api       *ingest.Server
	d         *dispatcher.Dispatcher
	w         *worker.Worker
	snapshots func(context.Context) error // stops periodic snapshots
	metrics   func(context.Context) error // stops the metrics endpoint
	redis     rueidis.Client
}

// stop stops what r holds, in shutdown order, and forgets it. Each step is logged and
// bounded by its own timeout; ctx may be done already (steps run on a context without
// its cancellation). A failed step does not stop the next: stop returns every error.
func (r *running) stop(ctx context.Context, logger *slog.Logger, timeout time.Duration) error {
	type step struct {
		name string
		stop func(context.Context) error
	}
	var steps []step
	if r.api != nil {
		steps = append(steps, step{"ingest", r.api.Stop})
	}
	if r.d != nil {
		steps = append(steps, step{"dispatcher", r.d.Stop})
	}
	if r.w != nil {
		steps = append(steps, step{"workers", r.w.Stop})
	}
	if r.snapshots != nil {
		steps = append(steps, step{"snapshots", r.snapshots})
	}
	if r.metrics != nil {
		steps = append(steps, step{"metrics", r.metrics})
	}
	if r.redis != nil {
		rc := r.redis
		steps = append(steps, step{"redis", func(context.Context) error { rc.Close(); return nil }})
	}
	*r = running{}

	base := context.WithoutCancel(ctx)
	var errs []error
	for _, s := range steps {
		logger.InfoContext(base, "stopping", "component", s.name, "timeout", timeout)
		start := time.Now()
		sctx, cancel := context.WithTimeout(base, timeout)
		err := s.stop(sctx)
		cancel()
		if err != nil {
			logger.ErrorContext(base, "stop failed", "component", s.name, "err", err)
			errs = append(errs, fmt.Errorf("stop %s: %w", s.name, err))
			continue
		}
		logger.InfoContext(base, "stopped", "component", s.name, "took", time.Since(start).Round(time.Millisecond))
	}
	return errors.Join(errs...)
}

func registerDemoHandlers(w *worker.Worker) {
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
	w.HandleFunc("echo", func(ctx context.Context, r *worker.Run) error { return nil })
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
