package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/rueidis"

	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/executor"
	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/egress"
	"github.com/tockhq/tock/internal/prom"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/snapshot"
	"github.com/tockhq/tock/ui"
	"github.com/tockhq/tock/worker"
)

// runServer runs tock server: the API and a dispatcher, or one of them (--roles).
func runServer(ctx context.Context, args []string, c *cli) error {
	return runRoles(ctx, c, cmdServer, args, nil)
}

// runIngest runs tock ingest: the API only.
func runIngest(ctx context.Context, args []string, c *cli) error {
	return runRoles(ctx, c, cmdIngest, args, nil)
}

// runExecutor runs tock executor: the push executor only.
func runExecutor(ctx context.Context, args []string, c *cli) error {
	return runRoles(ctx, c, cmdExecutor, args, nil)
}

// runDispatcher runs tock dispatcher: a dispatcher only.
func runDispatcher(ctx context.Context, args []string, c *cli) error {
	return runRoles(ctx, c, cmdDispatcher, args, nil)
}

// runRoles runs tock server, ingest or dispatcher until ctx ends. started, when set, is
// called with the API's address ("" without the API) once everything runs (tests).
func runRoles(ctx context.Context, c *cli, cmd command, args []string, started func(apiAddr string)) error {
	cfg, err := loadConfig(cmd, args, c.getenv, c.out, nil)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	return serve(ctx, cfg, c.errOut, started)
}

// serve runs the roles of cfg until ctx ends, then shuts down in order (see running).
// Logs go to logOut.
func serve(ctx context.Context, cfg *config, logOut io.Writer, started func(apiAddr string)) error {
	logger := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: cfg.logLevel}))
	rc, err := cfg.connect()
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.cmd, err)
	}
	r := &running{redis: rc}
	fail := func(err error) error {
		return errors.Join(fmt.Errorf("%s: %w", cfg.cmd, err), r.stop(ctx, logger, cfg.shutdown))
	}
	store, err := openStore(ctx, rc, cfg)
	if err != nil {
		return fail(err)
	}
	metrics, err := prom.New(prom.Config{Logger: logger})
	if err != nil {
		return fail(err)
	}
	// The queue figures are read at each scrape, on a context the signal does not
	// cancel: the metrics endpoint serves them until its own step of the shutdown.
	if err := metrics.QueueDepths(context.WithoutCancel(ctx), store.Queues); err != nil {
		return fail(err)
	}
	if err := metrics.WorkflowCounts(context.WithoutCancel(ctx), store.WorkflowCounts); err != nil {
		return fail(err)
	}

	if cfg.dispatch {
		lead := cfg.fireLead
		if lead == 0 {
			lead = -1 // none (0 means the default in dispatcher.Config)
		}
		d, err := dispatcher.New(dispatcher.Config{Store: store, Name: cfg.name, LeaseTTL: cfg.leaseTTL,
			Lead: lead, Logger: logger, Metrics: metrics})
		if err != nil {
			return fail(err)
		}
		// Started on a context the signal does not cancel: the shutdown sequence stops
		// the components in order, each with its grace period.
		if err := d.Start(context.WithoutCancel(ctx)); err != nil {
			return fail(fmt.Errorf("start dispatcher: %w", err))
		}
		r.d = d
		// Scheduled workflows: their definitions' runs start instances.
		starter, err := worker.New(worker.Config{Store: store, Queues: []string{job.WorkflowQueue}, Concurrency: 4,
			ID: "workflows-" + cfg.name, Logger: logger})
		if err != nil {
			return fail(err)
		}
		starter.HandleWorkflows()
		if err := starter.Start(context.WithoutCancel(ctx)); err != nil {
			return fail(fmt.Errorf("start the workflow starter: %w", err))
		}
		r.addWorkers(starter.Stop)
		switch {
		case cfg.snapshotEvery > 0:
			r.snapshots = startSnapshots(ctx, store, cfg, logger)
		case cfg.snapshotTo != "":
			logger.WarnContext(ctx, "no periodic snapshots: --snapshot-to is set but --snapshot-every is 0")
		}
	}
	var policy *egress.Policy
	if policy, err = egress.Parse(cfg.pushAllow); err != nil {
		return fail(cfg.errorf("push-allow", "%w", err))
	}
	if cfg.push {
		bm, err := metrics.NewBreakers()
		if err != nil {
			return fail(err)
		}
		ecfg := executor.Config{Store: store, Queues: cfg.pushQueues, Secrets: cfg.pushSecrets, Egress: policy,
			Concurrency: cfg.pushConc, PerHost: cfg.pushPerHost, Metrics: bm, Logger: logger,
			Breaker: executor.BreakerConfig{Failures: cfg.pushFailures, Cooldown: cfg.pushCooldown, Disabled: cfg.pushFailures == 0}}
		e, err := executor.New(ecfg)
		if err != nil {
			return fail(err)
		}
		if err := e.Start(context.WithoutCancel(ctx)); err != nil {
			return fail(fmt.Errorf("start the push executor: %w", err))
		}
		r.addWorkers(e.Stop)
	}
	metricsAddr := ""
	if cfg.metricsHTTP != "" {
		if r.metrics, metricsAddr, err = startMetrics(cfg.metricsHTTP, metrics.Registry()); err != nil {
			return fail(cfg.errorf("metrics-http", "%w", err))
		}
	}
	apiAddr := ""
	if cfg.api {
		if len(cfg.tokens) == 0 && !isLoopback(cfg.http) {
			logger.WarnContext(ctx, "the API listens beyond loopback without authentication; give --token secret:scope", "addr", cfg.http)
		}
		api, err := ingest.New(ingest.Config{Store: store, Addr: cfg.http, Tokens: cfg.tokens,
			MaxBatch: cfg.maxBatch, MaxBacklog: cfg.maxBacklog, Logger: logger, Egress: policy,
			MetricsHandler: metrics.Handler(), Metrics: metrics})
		if err == nil {
			_, err = ui.Mount(ui.Config{API: api, Logger: logger})
		}
		if err == nil {
			err = api.Start(context.WithoutCancel(ctx))
		}
		if err != nil {
			return fail(cfg.errorf("http", "start the API: %w", err))
		}
		r.api = api
		apiAddr = api.Addr()
	}

	attrs := []any{"redis", strings.Join(cfg.redis, ","), "namespace", cfg.namespace, "shards", store.Shards(),
		"bucket", shortDuration(store.Config().BucketSize), "durability", store.Config().Durability.String()}
	if r.api != nil {
		attrs = append(attrs, "api", "http://"+apiAddr, "dashboard", "http://"+apiAddr+"/ui/", "tokens", len(cfg.tokens))
	}
	if r.d != nil {
		attrs = append(attrs, "dispatcher", r.d.Name())
	}
	if r.workers != nil {
		attrs = append(attrs, "push_queues", strings.Join(cfg.pushQueues, ","), "push_allow", strings.Join(cfg.pushAllow, ","))
	}
	if r.snapshots != nil {
		attrs = append(attrs, "snapshot_to", cfg.snapshotTo, "snapshot_every", cfg.snapshotEvery)
	}
	if r.metrics != nil {
		attrs = append(attrs, "metrics", "http://"+metricsAddr+"/metrics")
	}
	logger.InfoContext(ctx, "tock "+cfg.cmd.String()+" running", attrs...)
	if started != nil {
		started(apiAddr)
	}
	<-ctx.Done()
	logger.InfoContext(ctx, "tock "+cfg.cmd.String()+" shutting down", "step_timeout", cfg.shutdown)
	return r.stop(ctx, logger, cfg.shutdown)
}

// connect returns a client of the Redis server or Cluster of c: rueidis discovers a
// Cluster's nodes from any of them.
func (c *config) connect() (rueidis.Client, error) {
	rc, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: c.redis, Username: c.redisUsername, Password: c.redisPassword, DisableCache: true,
		// Batch creates: let one round trip carry them.
		ReadBufferEachConn: 1 << 20, WriteBufferEachConn: 1 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("connect to Redis at %s: %w", strings.Join(c.redis, ","), err)
	}
	return rc, nil
}

// openStore opens the namespace of c, initialising it when it is new. A shard count or
// bucket width that c does not set follows the namespace's; one that c sets and that
// differs from the namespace's is a *settingError naming it.
func openStore(ctx context.Context, rc rueidis.Client, c *config) (*shard.Store, error) {
	sc := shard.Config{Namespace: c.namespace, Shards: c.shards, BucketSize: c.bucket, Durability: c.durability, ColdAfter: c.coldAfter, NoPack: c.noPack}
	for range 3 { // at most one retry per recorded setting
		store, err := shard.Open(ctx, rc, sc)
		me, ok := errors.AsType[*shard.ConfigMismatchError](err)
		if !ok {
			if err != nil {
				return nil, fmt.Errorf("open namespace %q: %w", c.namespace, err)
			}
			return store, nil
		}
		switch me.Setting {
		case "shards":
			n, perr := strconv.Atoi(me.Stored)
			if c.given("shards") || perr != nil {
				return nil, c.errorf("shards", "namespace %q was initialised with %s shards, and its shard count "+
					"cannot change (leave the setting out to use the namespace's, or choose another --namespace)", c.namespace, me.Stored)
			}
			sc.Shards = n
		case "bucket":
			ms, perr := strconv.ParseInt(me.Stored, 10, 64)
			stored := me.Stored + "ms"
			if perr == nil {
				stored = shortDuration(time.Duration(ms) * time.Millisecond)
			}
			if c.given("bucket") || perr != nil {
				return nil, c.errorf("bucket", "namespace %q was initialised with %s buckets, and its bucket width "+
					"cannot change (leave the setting out to use the namespace's, or choose another --namespace)", c.namespace, stored)
			}
			sc.BucketSize = time.Duration(ms) * time.Millisecond
		default:
			return nil, c.errorf("namespace", "%w", me)
		}
	}
	return nil, c.errorf("namespace", "namespace %q: its recorded settings keep changing", c.namespace)
}

// startMetrics serves GET /metrics of reg on addr until the returned stop function is
// called; it returns the bound address too.
func startMetrics(addr string, reg *prometheus.Registry) (stop func(context.Context) error, bound string, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // http.ErrServerClosed after Shutdown
	}()
	return func(ctx context.Context) error {
		err := srv.Shutdown(ctx)
		if err != nil {
			_ = srv.Close()
		}
		<-done
		return err
	}, ln.Addr().String(), nil
}

// startSnapshots runs snapshot.RunPeriodic until the returned stop function is called,
// which running.stop does before it closes the Redis client. An error that ends the
// snapshots early is logged at once and returned by stop.
func startSnapshots(ctx context.Context, store *shard.Store, c *config, logger *slog.Logger) func(context.Context) error {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() {
		err := snapshot.RunPeriodic(sctx, snapshot.PeriodicConfig{Store: store, To: c.snapshotTo,
			Every: c.snapshotEvery, Keep: c.snapshotKeep, Logger: logger})
		if err != nil && sctx.Err() == nil {
			logger.ErrorContext(sctx, "periodic snapshots stopped", "err", err)
		}
		done <- err
	}()
	return func(ctx context.Context) error {
		cancel()
		select {
		case err := <-done:
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// runInit runs tock init: it initialises a namespace, or checks that it exists with the
// settings given.
func runInit(ctx context.Context, args []string, c *cli) error {
	var asJSON bool
	cfg, err := loadConfig(cmdInit, args, c.getenv, c.out, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	})
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	rc, err := cfg.connect()
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	defer rc.Close()
	res, err := initNamespace(ctx, rc, cfg)
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if asJSON {
		return json.NewEncoder(c.out).Encode(res)
	}
	what := "created namespace"
	if !res.Created {
		what = "namespace already initialised:"
	}
	_, err = fmt.Fprintf(c.out, "%s %q: %d shards, %s buckets, schema v%d (Redis %s)\n",
		what, res.Namespace, res.Shards, res.Bucket, res.Schema, strings.Join(cfg.redis, ","))
	return err
}

// initResult is what tock init did, as --json prints it.
type initResult struct {
	Namespace string `json:"namespace"`
	// Created is true when this run initialised the namespace, false when it was
	// initialised already with the same settings.
	Created bool   `json:"created"`
	Shards  int    `json:"shards"`
	Bucket  string `json:"bucket"` // a Go duration
	Schema  int    `json:"schema"`
}

// initNamespace initialises the namespace of c, or checks that it was initialised with
// the settings c gives (see openStore).
func initNamespace(ctx context.Context, rc rueidis.Client, c *config) (initResult, error) {
	store, err := openStore(ctx, rc, c)
	if err != nil {
		return initResult{}, err
	}
	return initResult{Namespace: c.namespace, Created: store.Initialised(), Shards: store.Shards(),
		Bucket: shortDuration(store.Config().BucketSize), Schema: shard.SchemaVersion}, nil
}

// isLoopback reports whether a listen address is on a loopback interface only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
