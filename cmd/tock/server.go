package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/rueidis"

	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/prom"
	"github.com/tockhq/tock/shard"
)

type serverOptions struct {
	redis           []string
	redisPassword   string
	http            string
	namespace       string
	shards          int
	tokens          []ingest.Token
	maxBacklog      int64
	maxBatch        int
	api, dispatch   bool // roles
	name            string
	metricsHTTP     string
	logLevel        slog.Level
	shutdownTimeout time.Duration
	// started, when set, is called with the API's address ("" without the api role) once
	// everything runs (tests).
	started func(apiAddr string)
}

// tokenFlags collects repeated --token secret:scope flags.
type tokenFlags struct {
	tokens []ingest.Token
	set    bool
}

func (t *tokenFlags) String() string { return "" }

func (t *tokenFlags) Set(v string) error {
	tok, err := parseToken(v)
	if err != nil {
		return err
	}
	if !t.set { // flags replace TOCK_TOKENS
		t.tokens, t.set = nil, true
	}
	t.tokens = append(t.tokens, tok)
	return nil
}

// parseToken parses "secret:scope", scope read or write; the secret is what precedes
// the last colon.
func parseToken(v string) (ingest.Token, error) {
	i := strings.LastIndexByte(v, ':')
	if i <= 0 {
		return ingest.Token{}, errors.New(`want "secret:scope" with scope read or write`)
	}
	secret, scope := v[:i], ingest.Scope(v[i+1:])
	if scope != ingest.ScopeRead && scope != ingest.ScopeWrite {
		return ingest.Token{}, fmt.Errorf("scope %q: want read or write", scope)
	}
	if len(secret) < 16 {
		return ingest.Token{}, errors.New("secret shorter than 16 characters")
	}
	return ingest.Token{Secret: secret, Scope: scope}, nil
}

func parseTokens(env string) ([]ingest.Token, error) {
	var toks []ingest.Token
	for _, v := range strings.Split(env, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		t, err := parseToken(v)
		if err != nil {
			return nil, fmt.Errorf("TOCK_TOKENS: %w", err)
		}
		toks = append(toks, t)
	}
	return toks, nil
}

func runServer(ctx context.Context, args []string, c *cli) error {
	return runServerWith(ctx, c, args, nil)
}

// runServerWith is runServer with a hook called once everything runs (tests).
func runServerWith(ctx context.Context, c *cli, args []string, started func(apiAddr string)) error {
	fs := flag.NewFlagSet("tock server", flag.ContinueOnError)
	fs.SetOutput(c.errOut)
	var (
		o               serverOptions
		redis, roles    string
		logLevel        string
		tokens          tokenFlags
		envTokens, terr = parseTokens(c.getenv("TOCK_TOKENS"))
	)
	tokens.tokens = envTokens
	fs.StringVar(&redis, "redis", c.getenv("TOCK_REDIS"), "Redis address(es), comma-separated: one server or Cluster seeds (env TOCK_REDIS)")
	fs.StringVar(&o.redisPassword, "redis-password", c.getenv("TOCK_REDIS_PASSWORD"), "Redis AUTH password (env TOCK_REDIS_PASSWORD)")
	fs.StringVar(&o.http, "http", "127.0.0.1:8080", "listen address of the HTTP API")
	fs.StringVar(&o.namespace, "namespace", "tock", "key namespace")
	fs.IntVar(&o.shards, "shards", shard.DefaultShards, "shard count (fixed when the namespace is initialised)")
	fs.Var(&tokens, "token", `accepted bearer token "secret:scope", scope read or write; repeatable (env TOCK_TOKENS, comma-separated). None: no authentication`)
	fs.Int64Var(&o.maxBacklog, "max-backlog", 0, "refuse creates with 429 while more runs than this are ready or in flight (0: no limit)")
	fs.IntVar(&o.maxBatch, "max-batch", 0, "most jobs in one batch create (default 10000)")
	fs.StringVar(&roles, "roles", "api,dispatcher", "what this process runs: api, dispatcher, or both")
	fs.StringVar(&o.metricsHTTP, "metrics-http", "", "listen address of a separate GET /metrics (default none: the API serves /metrics; use it with --roles dispatcher)")
	fs.StringVar(&o.name, "name", "", "dispatcher name in leases (default: host name plus a random suffix)")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long shutdown may take")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("server: unexpected argument %q", fs.Arg(0))
	}
	if terr != nil && !tokens.set {
		return fmt.Errorf("server: %w", terr)
	}
	o.tokens = tokens.tokens
	if redis == "" {
		return errors.New("server: --redis (or TOCK_REDIS) is required: host:port of a Redis server, or Cluster seeds")
	}
	o.redis = strings.Split(redis, ",")
	for _, r := range strings.Split(roles, ",") {
		switch strings.TrimSpace(r) {
		case "api", "ingest":
			o.api = true
		case "dispatcher":
			o.dispatch = true
		default:
			return fmt.Errorf("server: --roles: unknown role %q (want api, dispatcher)", r)
		}
	}
	if err := o.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return fmt.Errorf("server: --log-level: %w", err)
	}
	o.started = started
	return serve(ctx, o, c.errOut)
}

// serve runs the server until ctx ends, then shuts down in order: API, dispatcher, Redis.
// Logs go to logOut.
func serve(ctx context.Context, o serverOptions, logOut io.Writer) error {
	logger := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: o.logLevel}))
	rc, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: o.redis, Password: o.redisPassword, DisableCache: true,
		// Batch creates: let one round trip carry them.
		ReadBufferEachConn: 1 << 20, WriteBufferEachConn: 1 << 20,
	})
	if err != nil {
		return fmt.Errorf("server: connect to redis %v: %w", o.redis, err)
	}
	defer rc.Close() // last: after the API and the dispatcher stopped
	store, err := shard.Open(ctx, rc, shard.Config{Namespace: o.namespace, Shards: o.shards})
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}

	metrics, err := prom.New(prom.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if err := metrics.QueueDepths(ctx, store.Queues); err != nil {
		return fmt.Errorf("server: %w", err)
	}

	var api *ingest.Server
	var d *dispatcher.Dispatcher
	var metricsSrv *http.Server
	metricsDone := make(chan struct{})
	stop := func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.shutdownTimeout)
		defer cancel()
		err := stopAll(sctx, api, d, nil)
		if metricsSrv != nil {
			if serr := metricsSrv.Shutdown(sctx); serr != nil {
				err = errors.Join(err, fmt.Errorf("stop metrics: %w", serr))
			}
			<-metricsDone
		}
		return err
	}
	if o.dispatch {
		d, err = dispatcher.New(dispatcher.Config{Store: store, Name: o.name, Logger: logger, Metrics: metrics})
		if err != nil {
			return fmt.Errorf("server: %w", err)
		}
		if err := d.Start(ctx); err != nil {
			return fmt.Errorf("server: start dispatcher: %w", err)
		}
	}
	if o.metricsHTTP != "" {
		ln, err := net.Listen("tcp", o.metricsHTTP)
		if err != nil {
			return errors.Join(fmt.Errorf("server: --metrics-http %s: %w", o.metricsHTTP, err), stop())
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(metrics.Registry(), promhttp.HandlerOpts{}))
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			defer close(metricsDone)
			_ = metricsSrv.Serve(ln) // http.ErrServerClosed after Shutdown
		}()
		o.metricsHTTP = ln.Addr().String()
	}
	apiAddr := ""
	if o.api {
		if len(o.tokens) == 0 && !isLoopback(o.http) {
			logger.Warn("the API listens beyond loopback without authentication; give --token secret:scope", "addr", o.http)
		}
		api, err = ingest.New(ingest.Config{Store: store, Addr: o.http, Tokens: o.tokens,
			MaxBatch: o.maxBatch, MaxBacklog: o.maxBacklog, Logger: logger,
			MetricsHandler: metrics.Handler(), Metrics: metrics})
		if err == nil {
			err = api.Start(ctx)
		}
		if err != nil {
			api = nil
			return errors.Join(fmt.Errorf("server: API on %s: %w", o.http, err), stop())
		}
		apiAddr = api.Addr()
	}
	attrs := []any{"redis", strings.Join(o.redis, ","), "namespace", o.namespace, "shards", store.Shards(), "tokens", len(o.tokens)}
	if api != nil {
		attrs = append(attrs, "api", "http://"+apiAddr)
	}
	if d != nil {
		attrs = append(attrs, "dispatcher", d.Name())
	}
	if metricsSrv != nil {
		attrs = append(attrs, "metrics", "http://"+o.metricsHTTP+"/metrics")
	}
	logger.Info("tock server running", attrs...)
	if o.started != nil {
		o.started(apiAddr)
	}
	<-ctx.Done()
	logger.Info("tock server shutting down")
	return stop()
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
