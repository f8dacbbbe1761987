package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/tockhq/tock/bench"
	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/shard"
)

const benchUsage = `Usage:
  tock bench fire --jobs N --window 10s --lead 20s --concurrency C --payload 100 [--pending M]
                  [--producer-only | --workers-only --namespace NS]
  tock bench throughput --jobs N --concurrency C [--http-workers N --claim-max M --single-acks]
  tock bench push --jobs N --concurrency C
  tock bench memory --jobs N --payload 100 --redis host:port
  tock bench bare --jobs N --batch 500 --concurrency 8 --payload 100
  tock bench ingest [--api URL --token T] --jobs N --conns C --batch B --payload 100 [--delay 1h]
                  (without --api: an in-process API server over --redis or the embedded Redis)
  tock bench ui --redis host:port --jobs 1000000 [--samples 20] [--queues 10] [--no-load --namespace NS]
  tock bench workflow --fan-out 10000 --rounds 5 --chains 100000 [--concurrency C]
Common flags: --redis host:port[,host:port...] (default: embedded in-memory Redis),
              --shards 64, --namespace NS, --keep, --dispatchers 1, --json,
              --procs N (Go threads running tock's code; default: one fewer than the CPUs
              when every --redis address is on this machine, all CPUs otherwise),
              --cpuprofile FILE
Run 'tock bench SCENARIO --help' for the flags of a scenario.
`

// benchAbout says what each scenario does, for tock bench SCENARIO --help.
var benchAbout = map[string]string{
	"fire": "Schedule --jobs one-time jobs due uniformly across --window, starting --lead from now, " +
		"run dispatchers and workers, and report fires/s inside the window, lateness percentiles, " +
		"duplicates and misses as JSON.",
	"throughput": "Create --jobs immediate jobs and report how fast dispatchers and workers process them, as JSON. " +
		"With --http-workers N, N workers claim and ack over the pull protocol (POST /v1/runs:claim, then one " +
		"POST /v1/runs:ack for the runs of each claim; --single-acks: one POST /v1/runs/{run}:ack per run) " +
		"against an API server in this process on a loopback port.",
	"push": "Create --jobs immediate push jobs whose target is an HTTP sink the bench runs on a loopback port " +
		"(checking every signature), deliver them with an executor in this process, and report deliveries/s as JSON.",
	"memory": "Create --jobs pending jobs and report the Redis memory each takes, as JSON.",
	"ingest": "Send --jobs creates to the HTTP API over --conns connections (--batch jobs a request) " +
		"and report accepted jobs/s and request latency, as JSON. Without --api it runs an API " +
		"server in this process, over --redis or the embedded Redis.",
	"ui": "Load --jobs jobs (spread over --queues queues, 1% cron) into --redis, start the API and the " +
		"dashboard in this process, log in, and measure the latency of the dashboard's pages (overview, " +
		"exact id lookup, first page of a filtered list, job, schedules, dead letters, cluster, audit log) " +
		"and of the API calls behind them, --samples times each after a warm-up; report p50/p99/max ms " +
		"per page as JSON. --keep and --namespace keep a loaded namespace; --no-load measures it again.",
	"workflow": "Run --rounds workflows of --fan-out parallel nodes joined by one node, then --chains " +
		"three-node chain workflows, with Go workers in this process, and report the time from the last " +
		"parent's ack to the join's claim and start (Redis clock), nodes/s and chains/s, as JSON. " +
		"--fan-out 0 or --chains 0 skips that part.",
	"bare": "Run the least a Redis job pipeline can do (ZADD, a Lua promote, a Lua claim, ZREM, no " +
		"job record) on the same Redis, for comparison, and report jobs/s as JSON.",
}

func runBench(ctx context.Context, args []string, c *cli) error {
	switch {
	case len(args) == 0:
		return &usageError{cmd: "tock bench", err: errors.New("bench: a scenario is required"), usage: benchUsage}
	case isHelp(args[0]):
		fmt.Fprint(c.out, benchUsage)
		return flag.ErrHelp
	case benchAbout[args[0]] == "":
		return usageErrorf("tock bench", "bench: unknown scenario %q (want fire, throughput, push, memory, ingest, bare, ui or workflow)", args[0])
	}
	scenario, args := args[0], args[1:]
	out := c.out
	fs := newFlagSet("tock bench " + scenario)
	var (
		redis                      string
		common                     bench.Common
		jobs, concurrency, payload int
		pending                    int
		window, lead, fireLead     time.Duration
		producerOnly, workersOnly  bool
		asJSON                     bool
		verbose                    bool
		api, token                 string
		conns, batch               int
		delay                      time.Duration
		samples, queues            int
		noLoad                     bool
		httpWorkers, claimMax      int
		singleAcks                 bool
		fanOut, rounds, chainCount int
	)
	fs.StringVar(&redis, "redis", "", "Redis `address(es)`, comma-separated (env TOCK_REDIS; default: an embedded in-memory Redis)")
	fs.IntVar(&common.Shards, "shards", shard.DefaultShards, "shards of the bench namespace")
	durationVar(fs, &common.Bucket, "bucket", time.Minute, "due-bucket width of the bench namespace")
	fs.StringVar(&common.Namespace, "namespace", "", "namespace (default: a fresh one, deleted afterwards)")
	fs.BoolVar(&common.Keep, "keep", false, "keep the keys in Redis afterwards")
	fs.IntVar(&common.Dispatchers, "dispatchers", 1, "dispatchers run in this process")
	durationVar(fs, &fireLead, "fire-lead", dispatcher.DefaultLead, "dispatchers fire runs this far ahead of their due time and workers hold them until then (0 to 1s; 0: fire at the due time)")
	durationVar(fs, &common.Coalesce, "coalesce", 0, "dispatchers fire runs due within this of each other in one call (default half the fire lead, or 2ms without one)")
	defJobs := 100000
	if scenario == "ui" {
		defJobs = 1000000
		fs.IntVar(&samples, "samples", 20, "requests measured per page, after one warm-up")
		fs.IntVar(&queues, "queues", 10, "queues the jobs are spread over")
		fs.BoolVar(&noLoad, "no-load", false, "load nothing: measure --namespace as an earlier run with --keep left it")
	}
	fs.IntVar(&jobs, "jobs", defJobs, "jobs")
	defConc := bench.DefaultConcurrency
	concUsage := "worker handler slots"
	switch scenario {
	case "fire":
		defConc = bench.DefaultFireConcurrency
	case "throughput", "workflow":
		defConc = 0
		concUsage = fmt.Sprintf("worker handler slots (default %d on one Redis server, %d on a Redis Cluster)", bench.DefaultConcurrency, bench.DefaultClusterConcurrency)
	case "push":
		defConc, concUsage = bench.DefaultPushConcurrency, "the executor's deliveries in flight (and its per-host limit: the sink is one host)"
	case "bare":
		defConc, concUsage = bench.DefaultBareStreams, "pipelines run side by side, each on its own keys"
		fs.IntVar(&batch, "batch", bench.DefaultBareBatch, "jobs per command or script call")
	}
	fs.IntVar(&concurrency, "concurrency", defConc, concUsage)
	fs.IntVar(&payload, "payload", 100, "payload bytes per job")
	fs.BoolVar(&asJSON, "json", false, "print the result as one JSON object (the default output is JSON as well, indented)")
	fs.BoolVar(&verbose, "v", false, "log engine errors to stderr")
	var cpuProfile string
	var procs int
	fs.IntVar(&procs, "procs", 0, "Go threads running tock's code at once (GOMAXPROCS); 0: the GOMAXPROCS environment variable when set, else one fewer than the CPUs when every --redis address is a loopback one (the Redis server keeps a core of its own), else all CPUs")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of this process (load generator, dispatchers and workers) to this file, for go tool pprof")
	if scenario == "fire" {
		durationVar(fs, &window, "window", 10*time.Second, "jobs are due uniformly across this window")
		durationVar(fs, &lead, "lead", 20*time.Second, "the window starts this long after scheduling starts")
		fs.IntVar(&pending, "pending", 0, "jobs pre-loaded due far in the future")
		fs.BoolVar(&producerOnly, "producer-only", false, "only schedule (workers run elsewhere)")
		fs.BoolVar(&workersOnly, "workers-only", false, "only run dispatchers and workers")
	}
	if scenario == "throughput" {
		fs.IntVar(&httpWorkers, "http-workers", 0, "workers over the pull protocol (HTTP) instead of the Go worker; 0: the Go worker")
		fs.IntVar(&claimMax, "claim-max", bench.DefaultClaimMax, "runs an HTTP worker claims per request (with --http-workers)")
		fs.BoolVar(&singleAcks, "single-acks", false, "HTTP workers ack each run with a request of its own (POST /v1/runs/{run}:ack) instead of a claim's runs in one POST /v1/runs:ack")
	}
	if scenario == "workflow" {
		fs.IntVar(&fanOut, "fan-out", 10000, "parallel nodes of the fan-out workflow, joined by one node (0: no fan-out)")
		fs.IntVar(&rounds, "rounds", 5, "fan-out workflows run one after the other")
		fs.IntVar(&chainCount, "chains", 100000, "three-node chain workflows (0: none)")
	}
	if scenario == "ingest" {
		fs.StringVar(&api, "api", "", "base URL of a running API (default: an in-process server on a free loopback port)")
		fs.StringVar(&token, "token", "", "bearer `token` for --api (env TOCK_TOKEN)")
		fs.IntVar(&conns, "conns", 16, "connections, each with one request in flight")
		fs.IntVar(&batch, "batch", 1, "jobs per request: 1 posts each job to /v1/jobs, more posts arrays to /v1/jobs:batch")
		durationVar(fs, &delay, "delay", time.Hour, "the jobs are due this long after they are accepted")
	}
	if err := fs.Parse(args); err != nil {
		return flagParseError(err, c.out, commandHelp{"tock bench " + scenario + " [flags]", benchAbout[scenario]}, fs)
	}
	if fs.NArg() > 0 {
		return usageErrorf(fs.Name(), "bench %s: unexpected argument %q", scenario, fs.Arg(0))
	}
	if redis == "" {
		redis = c.getenv("TOCK_REDIS")
	}
	if token == "" {
		token = c.getenv("TOCK_TOKEN")
	}
	if redis != "" {
		common.Redis = strings.Split(redis, ",")
	}
	switch {
	case fireLead < 0 || fireLead > dispatcher.MaxLead:
		return usageErrorf(fs.Name(), "bench %s: --fire-lead %s: want a duration from 0s to %s", scenario, fireLead, dispatcher.MaxLead)
	case fireLead == 0:
		common.FireLead = -1 // none (0 means the default in bench.Common)
	default:
		common.FireLead = fireLead
	}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		common.Progress = os.Stderr
	}
	if verbose {
		common.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if procs < 0 {
		return usageErrorf(fs.Name(), "bench %s: --procs %d: want 0 (automatic) or more", scenario, procs)
	}
	if procs == 0 && os.Getenv("GOMAXPROCS") == "" {
		procs = autoProcs(common.Redis, runtime.NumCPU())
	}
	if procs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("bench %s: --cpuprofile: %w", scenario, err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench %s: --cpuprofile: %w", scenario, err)
		}
		defer pprof.StopCPUProfile()
	}
	var res any
	var err error
	switch scenario {
	case "fire":
		res, err = bench.Fire(ctx, bench.FireConfig{Common: common, Jobs: jobs, Window: window, Lead: lead,
			Concurrency: concurrency, Payload: payload, Pending: pending, ProducerOnly: producerOnly, WorkersOnly: workersOnly})
	case "throughput":
		res, err = bench.Throughput(ctx, bench.ThroughputConfig{Common: common, Jobs: jobs, Concurrency: concurrency, Payload: payload,
			HTTPWorkers: httpWorkers, ClaimMax: claimMax, SingleAcks: singleAcks})
	case "push":
		res, err = bench.Push(ctx, bench.PushConfig{Common: common, Jobs: jobs, Concurrency: concurrency, Payload: payload})
	case "memory":
		res, err = bench.Memory(ctx, bench.MemoryConfig{Common: common, Jobs: jobs, Payload: payload})
	case "bare":
		res, err = bench.Bare(ctx, bench.BareConfig{Common: common, Jobs: jobs, Batch: batch, Streams: concurrency, Payload: payload})
	case "ui":
		res, err = bench.UI(ctx, bench.UIConfig{Common: common, Jobs: jobs, Queues: queues, Payload: payload, Samples: samples, NoLoad: noLoad})
	case "workflow":
		if chainCount == 0 {
			chainCount = -1 // none (0 means the default in bench.WorkflowConfig)
		}
		if fanOut == 0 && chainCount < 0 {
			return usageErrorf(fs.Name(), "bench workflow: --fan-out and --chains are both 0: nothing to run")
		}
		res, err = bench.Workflow(ctx, bench.WorkflowConfig{Common: common, FanOut: fanOut, Rounds: rounds, Chains: chainCount, Concurrency: concurrency})
	case "ingest":
		res, err = bench.Ingest(ctx, bench.IngestConfig{Common: common, API: api, Token: token, Jobs: jobs,
			Conns: conns, Batch: batch, Payload: payload, Delay: delay})
	}
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	if !asJSON {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(res)
}

// autoProcs is the bench's default GOMAXPROCS: one fewer than cpus when every Redis
// address is on this machine, so that the Redis server (single-threaded) keeps a core
// that tock's goroutines do not take; 0 (the Go default) for a remote Redis, the
// embedded one (it runs in this process) or a single CPU. On the 2-core benchmark machine
// this raised `tock bench throughput` by about a seventh (bench/README.md).
func autoProcs(redis []string, cpus int) int {
	if len(redis) == 0 || cpus < 2 {
		return 0
	}
	for _, addr := range redis {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return 0
		}
	}
	return cpus - 1
}
