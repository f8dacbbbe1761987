// Command tock is the tock binary. `tock dev` runs everything in one process on an
// embedded in-memory Redis.
package main

import (
	"context"
	"errors"
	"flag"
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
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/worker"
)

const usage = `tock: a Redis-native sharded job scheduler

Usage:
  tock dev [--demo] [--addr 127.0.0.1:0] [--shards 64]
      Run an embedded in-memory Redis, a dispatcher and a worker in one process.
      --demo also creates sample jobs and prints one line per firing.
  tock bench fire|throughput|memory [flags]
      Run the load generator and print its figures as JSON (see bench/README.md).

Run 'tock <command> --help' for the flags of a command.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "dev":
		err = runDev(ctx, os.Args[2:], os.Stdout)
	case "bench":
		err = runBench(ctx, os.Args[2:], os.Stdout)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "tock: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "tock:", err)
		os.Exit(1)
	}
}

type devOptions struct {
	demo   bool
	addr   string
	shards int
}

func runDev(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("tock dev", flag.ContinueOnError)
	var o devOptions
	fs.BoolVar(&o.demo, "demo", false, "create sample jobs and print one line per firing")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:0", "address of the embedded Redis (port 0 picks a free one)")
	fs.IntVar(&o.shards, "shards", shard.DefaultShards, "shard count")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("dev: unexpected argument %q", fs.Arg(0))
	}
	return dev(ctx, o, out)
}

func dev(ctx context.Context, o devOptions, out io.Writer) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr(o.addr); err != nil {
		return fmt.Errorf("dev: start embedded redis on %s: %w", o.addr, err)
	}
	defer mr.Close()
	// miniredis expires keys only when told that time passed.
	clockDone := make(chan struct{})
	clockCtx, stopClock := context.WithCancel(ctx)
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

	d, err := dispatcher.New(dispatcher.Config{Store: client.Store(), Name: "dev", Logger: logger})
	if err != nil {
		return err
	}
	w, err := worker.New(worker.Config{
		Store: client.Store(), Concurrency: 10, Logger: logger,
		ObserveFunc: func(r worker.Result) { printRun(out, r) },
	})
	if err != nil {
		return err
	}
	registerDemoHandlers(w)
	if err := d.Start(ctx); err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "tock dev: embedded Redis at %s, %d shards; dispatcher %q and a worker are running (Ctrl-C stops)\n",
		mr.Addr(), o.shards, d.Name())
	fmt.Fprintf(out, "tock dev: connect with tock.Connect(ctx, tock.Options{Addrs: []string{%q}})\n", mr.Addr())
	if o.demo {
		if err := createDemoJobs(ctx, client, out); err != nil {
			return err
		}
	}
	<-ctx.Done()

	fmt.Fprintln(out, "tock dev: shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return errors.Join(d.Stop(sctx), w.Stop(sctx))
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
	late := r.Run.ClaimedAt.Sub(r.Run.Due).Milliseconds()
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
