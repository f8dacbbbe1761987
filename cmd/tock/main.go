// Command tock is the tock binary. `tock dev` runs everything in one process on an
// embedded in-memory Redis.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
	_ "time/tzdata" // IANA zones inside the binary, for machines without zoneinfo

	"github.com/redis/rueidis"

	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/ingest"
)

const usage = `tock: a Redis-native sharded job scheduler

Usage:
  tock dev [--demo] [--http 127.0.0.1:8080] [--addr 127.0.0.1:0] [--shards 64] [--worker=false]
      Run an embedded in-memory Redis, a dispatcher, a demo worker (on every queue) and the
      HTTP API (no auth) in one process. --demo also creates sample jobs; every attempt
      prints a line.
  tock server --redis host:port[,host:port...] [--http 127.0.0.1:8080] [--token secret:scope]...
      Run the HTTP API and a dispatcher against Redis or Redis Cluster; --roles api or
      --roles dispatcher runs one of them.
  tock ingest --redis host:port[,host:port...] [--http 127.0.0.1:8080] [--token secret:scope]...
      Run the HTTP API only.
  tock dispatcher --redis host:port[,host:port...] [--snapshot-to URL --snapshot-every 1h]
      Run a dispatcher only: the live dispatchers share the shards and fire due runs.
  tock executor --redis host:port[,host:port...] --push-secret S [--push-allow host|CIDR]...
      Run the push executor only: deliver the runs of jobs with a target as signed HTTP
      requests (tock server runs it too with --push-secret or --roles push).
  tock init --redis host:port[,host:port...] [--namespace tock] [--shards 64] [--bucket 1m]
      Initialise a namespace, or check that it exists with these settings.
  tock snapshot export --to LOCATION | restore --from LOCATION | verify --from LOCATION | ls --from LOCATION
      Export every job to a directory or object storage (file://, s3://), or rebuild an
      empty namespace from a snapshot after checking it whole (see docs/snapshots.md).
  tock jobs create|get|ls|patch|cancel|pause|resume|trigger|delete|runs|bulk [flags]
      Manage jobs through the API: --api URL (env TOCK_API, default http://127.0.0.1:8080),
      --token T (env TOCK_TOKEN), --json for the API's JSON instead of a table. jobs bulk
      applies an action to the jobs a filter matches, following the cursors.
  tock workflows create|get|ls|cancel|retry|pause|resume|trigger|delete|result [flags]
      Manage workflows (graphs of jobs, docs/workflows.md) through the API; pause, resume,
      trigger and delete act on a scheduled workflow's definition.
  tock dead ls|requeue|rm|bulk [flags]
      List dead runs, make them ready again, or delete them (bulk: all of a queue).
  tock cluster | tock figures [--queue Q] [--minutes N]
      The cluster (dispatchers, shard leases and counts, workers, Redis nodes), or each
      queue's per-minute figures (fires, lateness).
  tock audit [--limit N] [--all]
      The audit log: who did what, when, from where (needs a write token).
  tock queues [--watch] | tock queues pause|resume QUEUE...
      Queue figures (--watch redraws every 2s, and keeps trying while the API is down),
      or stop and restart claiming from a queue.
  tock bench fire|throughput|push|memory|ingest|bare|ui [flags]
      Run the load generator and print its figures as JSON (see bench/README.md).
  tock version
      Print the version, the commit it was built from and the Go version (or tock --version).

server, ingest, dispatcher, executor, init and snapshot read each setting from a flag, an environment
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
	case "executor":
		return runExecutor(ctx, args[1:], c)
	case "init":
		return runInit(ctx, args[1:], c)
	case "jobs", "job":
		return runJobs(ctx, c, args[1:])
	case "workflows", "workflow":
		return runWorkflows(ctx, c, args[1:])
	case "dead":
		return runDead(ctx, c, args[1:])
	case "queues", "queue":
		return runQueues(ctx, c, args[1:])
	case "cluster":
		return runCluster(ctx, c, args[1:])
	case "figures":
		return runFigures(ctx, c, args[1:])
	case "audit":
		return runAudit(ctx, c, args[1:])
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

// devStepTimeout bounds each step of tock dev's shutdown.
const devStepTimeout = 10 * time.Second

// running holds the components a command started, to stop them in shutdown order: the
// API first (no new jobs), then the dispatcher (no new firings), the worker (drains its
// runs), periodic snapshots, the metrics endpoint, and last the Redis client, which the
// others use until they stopped. Nil components are skipped.
type running struct {
	api       *ingest.Server
	d         *dispatcher.Dispatcher
	workers   func(context.Context) error // stops the workers
	snapshots func(context.Context) error // stops periodic snapshots
	metrics   func(context.Context) error // stops the metrics endpoint
	redis     rueidis.Client
}

// stop stops what r holds, in shutdown order, and forgets it. Each step is logged and
// bounded by its own timeout; ctx may be done already (steps run on a context without
// its cancellation). A failed step does not stop the next: stop returns every error.
// addWorkers adds a stop of workers to r.workers; they stop one after another.
func (r *running) addWorkers(stop func(context.Context) error) {
	prev := r.workers
	if prev == nil {
		r.workers = stop
		return
	}
	r.workers = func(ctx context.Context) error { return errors.Join(prev(ctx), stop(ctx)) }
}

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
	if r.workers != nil {
		steps = append(steps, step{"workers", r.workers})
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
