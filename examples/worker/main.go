// Command worker is an example tock worker built with the Go worker SDK (package
// worker). It connects to Redis or Redis Cluster, runs jobs of two types, logs each
// run, and shuts down gracefully on SIGINT or SIGTERM: it stops claiming, lets running
// handlers finish for up to --shutdown-timeout, then hands the rest back to Redis
// without using an attempt, so another worker picks them up.
//
//	go run ./examples/worker --redis 127.0.0.1:7000,127.0.0.1:7001 --demo
//
// Job types:
//
//   - example.echo logs the job's payload.
//   - example.sleep sleeps for the duration its payload names (a Go duration such as
//     "3s", bare or as a JSON string), or until the run is cancelled or the worker
//     stops; use it to watch a graceful shutdown.
//
// --demo also creates (once: the id is the idempotency key) a cron job that runs
// example.echo every 10 seconds, so a fresh deployment shows runs in the log. Every
// flag can be set with the environment variable named in --help (TOCK_REDIS...).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/tockhq/tock"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/worker"
)

// Job types this worker runs.
const (
	TypeEcho  = "example.echo"
	TypeSleep = "example.sleep"
)

// demoJob is the cron job --demo creates.
func demoJob() *job.Job {
	return &job.Job{
		ID:       "example-heartbeat",
		Type:     TypeEcho,
		Payload:  []byte(`{"hello":"from a cron job, every 10 seconds"}`),
		Schedule: job.Schedule{Cron: "*/10 * * * * *", TimeZone: "UTC"},
	}
}

// config is the command line.
type config struct {
	redis           []string
	redisPassword   string
	namespace       string
	shards          int
	queues          []string
	concurrency     int
	id              string
	demo            bool
	shutdownTimeout time.Duration
	logLevel        slog.Level
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
	if err := run(ctx, cfg, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		stop()
		os.Exit(1)
	}
}

// envName is the environment variable of a flag: TOCK_ and the flag's name in upper
// case with dashes as underscores (--shutdown-timeout: TOCK_SHUTDOWN_TIMEOUT).
func envName(flagName string) string {
	return "TOCK_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseConfig reads the flags in args; a flag not given takes the value of its
// environment variable (getenv), then its default. Help and errors go to out.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(out)
	var (
		cfg                     config
		redis, queues, logLevel string
	)
	fs.StringVar(&redis, "redis", "", "Redis address(es), comma-separated: one server or Cluster seeds (required)")
	fs.StringVar(&cfg.redisPassword, "redis-password", "", "Redis AUTH password")
	fs.StringVar(&cfg.namespace, "namespace", "tock", "key namespace (the one tock server uses)")
	fs.IntVar(&cfg.shards, "shards", 0, fmt.Sprintf("shard count of a new namespace (default: the namespace's; %d for a new one)", shard.DefaultShards))
	fs.StringVar(&queues, "queues", job.DefaultQueue, "queues to claim from, comma-separated")
	fs.IntVar(&cfg.concurrency, "concurrency", 10, "handlers run at once")
	fs.StringVar(&cfg.id, "id", "", "worker id in run history (default: host name plus a random suffix)")
	fs.BoolVar(&cfg.demo, "demo", false, "create a cron job that runs "+TypeEcho+" every 10 seconds")
	fs.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 25*time.Second, "how long running handlers may finish after SIGTERM before their runs are handed back")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: worker [flags]\n\nAn example tock worker: runs jobs of type %s and %s.\n\nFlags:\n", TypeEcho, TypeSleep)
		fs.VisitAll(func(f *flag.Flag) {
			typ, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(out, "  --%s %s\n    \t%s (env %s", f.Name, typ, usage, envName(f.Name))
			if f.DefValue != "" && f.DefValue != "false" {
				fmt.Fprintf(out, ", default %s", f.DefValue)
			}
			fmt.Fprintln(out, ")")
		})
	}
	// Environment first, so that flags given on the command line win.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envName(f.Name)); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", envName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		return config{}, envErr
	}
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg.redis = splitList(redis)
	if len(cfg.redis) == 0 {
		return config{}, fmt.Errorf("--redis (or %s) is required: host:port of a Redis server, or Cluster seeds", envName("redis"))
	}
	cfg.queues = splitList(queues)
	if err := cfg.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return config{}, fmt.Errorf("--log-level: %w", err)
	}
	if cfg.shutdownTimeout <= 0 {
		return config{}, fmt.Errorf("--shutdown-timeout must be positive, got %s", cfg.shutdownTimeout)
	}
	return cfg, nil
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// run runs the worker until ctx ends, then shuts it down gracefully.
func run(ctx context.Context, cfg config, logOut io.Writer) error {
	logger := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: cfg.logLevel}))
	// Given several seeds or a Cluster node, rueidis discovers the Cluster topology and
	// follows it; given one standalone server, it talks to that server.
	rc, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: cfg.redis, Password: cfg.redisPassword, DisableCache: true,
	})
	if err != nil {
		return fmt.Errorf("connect to redis %v: %w", cfg.redis, err)
	}
	defer rc.Close() // last: after the worker stopped
	client, err := openNamespace(ctx, rc, cfg.namespace, cfg.shards)
	if err != nil {
		return err
	}
	if cfg.demo {
		if err := createDemoJob(ctx, client, logger); err != nil {
			return err
		}
	}
	w, err := newWorker(client.Store(), cfg, logger)
	if err != nil {
		return err
	}
	// Start gets a context that signals do not cancel: cancelling Start's context stops
	// the worker without a grace period. The graceful stop is the Stop call below.
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	logger.Info("worker running", "id", w.ID(), "redis", strings.Join(cfg.redis, ","),
		"namespace", cfg.namespace, "queues", strings.Join(cfg.queues, ","), "concurrency", cfg.concurrency)
	<-ctx.Done()

	logger.Info("worker stopping: no new runs; running handlers may finish", "timeout", cfg.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout)
	defer cancel()
	if err := w.Stop(sctx); err != nil {
		// Out of time: the remaining runs were handed back, not lost.
		logger.Warn("worker stopped: handlers still running were cancelled and their runs handed back", "err", err)
		return nil
	}
	logger.Info("worker stopped")
	return nil
}

// openNamespace opens the namespace, initialising it when it is new. With shards 0 it
// takes the shard count and bucket width the namespace was initialised with (by tock
// server, say) instead of failing on a difference from the defaults.
func openNamespace(ctx context.Context, rc rueidis.Client, namespace string, shards int) (*tock.Client, error) {
	sc := shard.Config{Namespace: namespace, Shards: shards}
	for range 3 { // one retry per recorded setting at most
		c, err := tock.New(ctx, rc, sc)
		var me *shard.ConfigMismatchError
		if !errors.As(err, &me) {
			return c, err
		}
		n, perr := strconv.Atoi(me.Stored)
		switch {
		case perr != nil:
			return nil, err
		case me.Setting == "shards" && shards == 0:
			sc.Shards = n
		case me.Setting == "bucket":
			sc.BucketSize = time.Duration(n) * time.Millisecond
		default:
			return nil, fmt.Errorf("%w (leave --shards out to use the namespace's)", err)
		}
	}
	return nil, fmt.Errorf("namespace %q: its recorded settings keep changing", namespace)
}

// newWorker returns a worker with the example handlers, logging every run to logger.
func newWorker(store *shard.Store, cfg config, logger *slog.Logger) (*worker.Worker, error) {
	w, err := worker.New(worker.Config{
		Store: store, Queues: cfg.queues, Concurrency: cfg.concurrency, ID: cfg.id,
		Logger:      logger,
		ObserveFunc: func(r worker.Result) { logRun(logger, r) },
	})
	if err != nil {
		return nil, err
	}
	w.HandleFunc(TypeEcho, func(ctx context.Context, r *worker.Run) error {
		logger.InfoContext(ctx, "echo", "run", r.ID, "payload", string(r.Payload))
		return nil
	})
	w.HandleFunc(TypeSleep, sleep)
	return w, nil
}

// sleep runs example.sleep: it waits for the duration in the payload, or until ctx
// ends (the job's timeout, a cancel, or the worker's shutdown deadline).
func sleep(ctx context.Context, r *worker.Run) error {
	d, err := parseDuration(r.Payload)
	if err != nil {
		// Retrying cannot fix a bad payload.
		return worker.Cancel(err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// parseDuration reads a Go duration from a payload: bare ("3s") or a JSON string.
func parseDuration(payload []byte) (time.Duration, error) {
	s := strings.TrimSpace(string(payload))
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal([]byte(s), &s); err != nil {
			return 0, fmt.Errorf("payload %s: %w", strconv.Quote(string(payload)), err)
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("payload %s: want a duration such as \"3s\"", strconv.Quote(string(payload)))
	}
	return d, nil
}

// logRun logs one finished attempt.
func logRun(logger *slog.Logger, r worker.Result) {
	attrs := []any{
		"job_id", r.Run.JobID, "run", r.Run.ID, "type", r.Run.Type, "queue", r.Run.Queue,
		"attempt", fmt.Sprintf("%d/%d", r.Run.Attempt, r.Run.MaxAttempts),
		"outcome", string(r.Outcome),
		"lateness", r.Run.StartedAt.Sub(r.Run.Due).Round(time.Millisecond),
		"took", r.Finished.Sub(r.Started).Round(time.Millisecond),
	}
	if r.Err != nil {
		attrs = append(attrs, "err", r.Err)
	}
	level := slog.LevelInfo
	switch {
	case r.Rejected:
		attrs = append(attrs, "rejected", "the run had been handed to another worker")
		level = slog.LevelWarn
	case r.Outcome == worker.OutcomeFailed:
		level = slog.LevelWarn
	}
	logger.Log(context.Background(), level, "run", attrs...)
}

func createDemoJob(ctx context.Context, c *tock.Client, logger *slog.Logger) error {
	j := demoJob()
	res, err := c.Create(ctx, j)
	switch {
	case res.Conflict:
		logger.Warn("demo job: the id is taken by another definition; left as it is", "job_id", j.ID)
		return nil
	case err != nil:
		return fmt.Errorf("create demo job: %w", err)
	case res.Created:
		logger.Info("demo job created", "job_id", j.ID, "cron", j.Schedule.Cron, "type", j.Type)
	default:
		logger.Info("demo job exists", "job_id", j.ID)
	}
	return nil
}
