// Package ingest is tock's front door: the versioned JSON API (v1) on fasthttp through
// which jobs are created and managed, its wire types, and a Go client for it.
//
// The routes are listed in openapi.json (served at GET /v1/openapi.json). Every error
// reply is an ErrorReply with one of the Code… constants and the HTTP status that goes
// with it.
package ingest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/internal/egress"
	"github.com/tockhq/tock/internal/limit"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// Scope is what a bearer token may do.
type Scope string

// Token scopes. Write includes read and worker; worker may only call the run endpoints
// (/v1/runs…), read workflow nodes' results (GET /v1/workflows/{id}/nodes/{node}/result)
// and the health checks.
const (
	ScopeRead   Scope = "read"
	ScopeWrite  Scope = "write"
	ScopeWorker Scope = "worker"
)

// Token is a bearer token accepted by the server.
type Token struct {
	Secret string
	Scope  Scope
}

// Metrics receives the server's measurements. Nil means none. Its methods are called
// from many goroutines at once. A Metrics that also implements WorkflowMetrics counts
// the workflows the API creates, cancels and retries.
type Metrics interface {
	// HTTPRequest is called once per request with its route pattern (such as
	// "POST /v1/jobs" or "GET /v1/jobs/{id}"; "unmatched" for unknown paths; "GET /ui"
	// for a mounted handler, "other /ui" for a method not in HTTP's list), status and
	// duration.
	HTTPRequest(route string, status int, d time.Duration)
}

// Defaults of Config.
const (
	DefaultAddr           = "127.0.0.1:8080"
	DefaultMaxBatch       = 10000
	DefaultRedisTimeout   = 5 * time.Second
	DefaultWriteTimeout   = time.Minute
	DefaultBacklogRefresh = 500 * time.Millisecond
	maxDefaultBody        = 64 << 20
	// perJobOverhead is the room a batch item takes beside its payload in the default
	// MaxBody.
	perJobOverhead = 1 << 10
)

// Config configures a Server.
type Config struct {
	// Store is the namespace served. Required.
	Store *shard.Store
	// Addr is the listen address of Start. Default "127.0.0.1:8080".
	Addr string
	// Tokens are the accepted bearer tokens. Empty means no authentication (tock dev).
	// Secrets must be distinct and not empty.
	Tokens []Token
	// MaxBatch bounds the jobs of one batch create. Default 10000.
	MaxBatch int
	// MaxBody bounds a request body in bytes. Default: room for MaxBatch jobs of
	// the store's maximum payload, capped at 64 MiB.
	MaxBody int
	// MaxBodyMemory bounds the bytes of request bodies held at once, over all the
	// requests being read or served: a request whose body does not fit is answered 503
	// with Retry-After before its body is read. A body is read only once its request is
	// routed and authenticated. Default 2 × MaxBody; at least MaxBody.
	MaxBodyMemory int64
	// MaxBacklog is the number of runs ready or in flight (over all queues) at which
	// creates are refused with 429 and Retry-After. 0 means no limit. The backlog is
	// measured every BacklogRefresh; in between, the server adds the runs its own creates
	// made ready. So creates through one server take the backlog past MaxBacklog by less
	// than one request's jobs (a single create never does); n servers each count their
	// own, and together can admit up to (n-1) x MaxBacklog more before the next measure.
	MaxBacklog int64
	// BacklogRefresh is how long a measured backlog is reused before creates measure it
	// again (one request measures while the others use the previous figure plus the runs
	// admitted since). Default 500ms. Only used with MaxBacklog.
	BacklogRefresh time.Duration
	// MaxResult bounds the result of a run acked through POST /v1/runs/{run}:ack, in
	// bytes (a larger one is refused with 413). Default 64 KiB (DefaultMaxResult); at
	// most shard.MaxResult.
	MaxResult int
	// RedisTimeout bounds every Redis call a request makes. Default 5s.
	RedisTimeout time.Duration
	// AuditMax is how many entries the audit log keeps (GET /v1/audit); the oldest are
	// trimmed. Default shard.DefaultAuditMax (10000).
	AuditMax int
	// WriteTimeout bounds the writing of one response (a client that does not read is
	// dropped after it). A stream (the dashboard's live updates) gets it afresh before
	// each of its writes, so that it may last. Default 1m.
	WriteTimeout time.Duration
	// MetricsHandler serves GET /metrics when set (cmd passes Prometheus's).
	MetricsHandler fasthttp.RequestHandler
	// Metrics receives request counts and latencies. Nil means none.
	Metrics Metrics
	// Logger receives errors. Nil discards.
	Logger *slog.Logger
	// Egress is checked against the target of every job created through the API (a
	// target it refuses fails the create with 400 naming target.url). Nil means the
	// default policy: public addresses only (egress.Parse(nil)). The push executor
	// checks again when it dials.
	Egress *egress.Policy
}

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxBody == 0 {
		maxPayload := job.DefaultMaxPayload
		if c.Store != nil {
			maxPayload = c.Store.Config().MaxPayload
		}
		// A payload sent as base64 takes 4/3 of its size.
		per := int64(maxPayload)*4/3 + perJobOverhead
		c.MaxBody = int(min(int64(c.MaxBatch)*per, maxDefaultBody))
	}
	if c.MaxBodyMemory == 0 {
		c.MaxBodyMemory = 2 * int64(c.MaxBody)
	}
	if c.RedisTimeout == 0 {
		c.RedisTimeout = DefaultRedisTimeout
	}
	if c.MaxResult == 0 {
		c.MaxResult = DefaultMaxResult
	}
	if c.BacklogRefresh == 0 {
		c.BacklogRefresh = DefaultBacklogRefresh
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("ingest: Store is required")
	case c.MaxBatch < 1:
		return fmt.Errorf("ingest: MaxBatch: must be at least 1, got %d", c.MaxBatch)
	case c.MaxBody < 1:
		return fmt.Errorf("ingest: MaxBody: must be at least 1, got %d", c.MaxBody)
	case c.MaxBodyMemory < int64(c.MaxBody):
		return fmt.Errorf("ingest: MaxBodyMemory: must be at least MaxBody (%d), got %d", c.MaxBody, c.MaxBodyMemory)
	case c.MaxBacklog < 0:
		return fmt.Errorf("ingest: MaxBacklog: must not be negative, got %d", c.MaxBacklog)
	case c.BacklogRefresh < 0:
		return fmt.Errorf("ingest: BacklogRefresh: must not be negative, got %s", c.BacklogRefresh)
	case c.RedisTimeout < 0:
		return fmt.Errorf("ingest: RedisTimeout: must not be negative, got %s", c.RedisTimeout)
	case c.WriteTimeout < 0:
		return fmt.Errorf("ingest: WriteTimeout: must not be negative, got %s", c.WriteTimeout)
	case c.MaxResult < 0 || c.MaxResult > shard.MaxResult:
		return fmt.Errorf("ingest: MaxResult: must be 0 to %d, got %d", shard.MaxResult, c.MaxResult)
	}
	seen := map[string]bool{}
	for i, t := range c.Tokens {
		switch {
		case t.Secret == "":
			return fmt.Errorf("ingest: Tokens[%d]: empty secret", i)
		case t.Scope != ScopeRead && t.Scope != ScopeWrite && t.Scope != ScopeWorker:
			return fmt.Errorf("ingest: Tokens[%d]: scope must be %q, %q or %q, got %q", i, ScopeRead, ScopeWrite, ScopeWorker, t.Scope)
		case seen[t.Secret]:
			return fmt.Errorf("ingest: Tokens[%d]: duplicate secret", i)
		}
		seen[t.Secret] = true
	}
	return nil
}

// ErrServerClosed is returned by Start and Serve after Stop.
var ErrServerClosed = errors.New("ingest: server closed")

// Server serves the API. Start it with Start (or Serve a listener), stop it with Stop.
// Its methods are safe for concurrent use.
type Server struct {
	cfg        Config
	store      *shard.Store
	log        *slog.Logger
	maxPayload int
	egress     *egress.Policy
	tokens     []tokenSum
	routes     [numRoutes][]endpoint
	mounts     []mount // Mount: set before serving, read-only after
	srv        *fasthttp.Server
	now        func() time.Time // the local clock: fire rates and backlog age

	backlog  backlogCache
	runsPull pullState // the run endpoints (runs.go)
	rates    rateTracker
	errLog   *limit.Every // internal errors
	reqLog   *limit.Every // requests fasthttp could not read
	fhLog    *limit.Every // fasthttp's own messages
	inflight atomic.Int64 // requests inside the handler
	admitted atomic.Int64 // runs made ready by this server's creates, ever (backlog.go)
	bodyMem  atomic.Int64 // bytes of MaxBodyMemory held by requests

	mu          sync.Mutex
	lns         []net.Listener
	addr        string
	started     bool
	closing     bool
	shutdownRan bool
	quit        chan struct{} // closed by the first Stop
	wg          sync.WaitGroup

	connMu sync.Mutex
	conns  map[net.Conn]time.Time // open connections; during shutdown, when its reads end

}

type tokenSum struct {
	sum   [sha256.Size]byte
	scope Scope
}

// New validates cfg (applying the defaults documented on Config) and returns a Server.
// It does not touch Redis.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:        cfg,
		store:      cfg.Store,
		log:        cfg.Logger.With("component", "ingest"),
		maxPayload: cfg.Store.Config().MaxPayload,
		egress:     cfg.Egress,
		now:        time.Now,
		quit:       make(chan struct{}),
		errLog:     limit.NewEvery(logEvery),
		reqLog:     limit.NewEvery(logEvery),
		fhLog:      limit.NewEvery(logEvery),
	}
	for _, t := range cfg.Tokens {
		s.tokens = append(s.tokens, tokenSum{sum: sha256.Sum256([]byte(t.Secret)), scope: t.Scope})
	}
	if s.egress == nil {
		s.egress, _ = egress.Parse(nil)
	}
	s.routes = s.buildRoutes()
	s.srv = &fasthttp.Server{
		Handler:            s.handle,
		ErrorHandler:       s.handleReadError,
		ExpectHandler:      s.expectContinue,
		Name:               "tock",
		MaxRequestBodySize: cfg.MaxBody,
		// The handler reads bodies itself, once it has authenticated the request, and
		// within MaxBodyMemory (body.go).
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		ReadTimeout:                  time.Minute,
		WriteTimeout:                 cfg.WriteTimeout,
		IdleTimeout:                  2 * time.Minute,
		CloseOnShutdown:              true,
		ConnState:                    s.trackConn,
		NoDefaultServerHeader:        true,
		// fasthttp's errors quote the request, headers included: they are logged as a
		// kind only (logging.go), and this keeps them shorter anyway.
		SecureErrorLogMessage: true,
		Logger:                fasthttpLogger{s},
	}
	return s, nil
}

// Handler returns the request handler, for tests and for embedding in another
// fasthttp server. That server should set StreamRequestBody, so that bodies are read only
// after authentication and within Config.MaxBodyMemory; without it, fasthttp reads them
// first (bound them with its MaxRequestBodySize), and the handler refuses the ones over
// Config.MaxBody once they have been read.
func (s *Server) Handler() fasthttp.RequestHandler { return s.handle }

// Start listens on Config.Addr and serves until Stop or until ctx ends. It returns once
// listening (an error when the address cannot be bound). Starting twice, or after Stop,
// is an error.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	switch {
	case s.closing:
		s.mu.Unlock()
		return ErrServerClosed
	case s.started:
		s.mu.Unlock()
		return errors.New("ingest: server already started")
	}
	s.started = true
	s.mu.Unlock()

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		s.mu.Lock()
		s.started = false
		s.mu.Unlock()
		return fmt.Errorf("ingest: listen on %s: %w", s.cfg.Addr, err)
	}
	if !s.register(ln, 2) {
		return ErrServerClosed
	}
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(ln); err != nil {
			s.log.Error("serve", "addr", ln.Addr().String(), "error", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := s.shutdown(sctx); err != nil {
				s.log.Error("shutdown after the start context ended", "error", err)
			}
		case <-s.quit:
		}
	}()
	return nil
}

// register adds ln to the listeners Stop closes and goroutines to the wait group; false
// (and ln closed) after Stop.
func (s *Server) register(ln net.Listener, goroutines int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		_ = ln.Close()
		return false
	}
	s.wg.Add(goroutines)
	s.lns = append(s.lns, ln)
	if s.addr == "" {
		s.addr = ln.Addr().String()
	}
	return true
}

// Serve serves connections from ln until Stop, then returns nil (ErrServerClosed when
// called after Stop). It may be called instead of Start, for tests with an in-memory
// listener, or beside it.
func (s *Server) Serve(ln net.Listener) error {
	if !s.register(ln, 1) {
		return ErrServerClosed
	}
	defer s.wg.Done()
	return s.srv.Serve(ln)
}

// Addr returns the address the server listens on once started ("" before).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Stop stops accepting connections (fasthttp's ShutdownWithContext: listeners closed,
// idle connections closed) and waits for in-flight requests, bounded by ctx; when ctx
// ends first it returns an error wrapping ctx.Err() and may be called again (which then
// waits for the requests still in the handler). Calling Stop twice, or without Start, is
// safe. The background goroutines of Start have ended when it returns nil.
func (s *Server) Stop(ctx context.Context) error {
	if err := s.shutdown(ctx); err != nil {
		return err
	}
	// The listeners are closed, so the Serve loops are returning.
	s.wg.Wait()
	return nil
}

// shutdownReadGrace is how long a connection may still take to send its request once
// shutdown began (cutReads).
const shutdownReadGrace = time.Second

// trackConn is fasthttp's ConnState hook: it keeps the open connections for cutReads.
func (s *Server) trackConn(c net.Conn, st fasthttp.ConnState) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	switch st {
	case fasthttp.StateNew:
		if s.conns == nil {
			s.conns = map[net.Conn]time.Time{}
		}
		s.conns[c] = time.Time{}
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		delete(s.conns, c)
	}
}

// cutReads bounds, until cut is closed, the reads of every open connection to
// shutdownReadGrace from when shutdown began (or from when it was accepted, if later).
// fasthttp's shutdown closes only the connections it counts as idle; one accepted whose
// client has sent nothing yet counts as active, and kept shutdown waiting until its
// ReadTimeout (a minute), though no request of it was under way. A request whose bytes
// are still arriving when the grace ends fails as one whose client stopped sending; a
// handler's response is written as before. The deadline is set again at each tick (the
// same instant): fasthttp sets its own before it reads a connection's first request.
func (s *Server) cutReads(cut <-chan struct{}) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		s.connMu.Lock()
		for c, end := range s.conns {
			if end.IsZero() {
				end = time.Now().Add(shutdownReadGrace)
				s.conns[c] = end
			}
			_ = c.SetReadDeadline(end)
		}
		s.connMu.Unlock()
		select {
		case <-cut:
			return
		case <-t.C:
		}
	}
}

func (s *Server) shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		close(s.quit)
	}
	first := !s.shutdownRan
	s.shutdownRan = true
	lns := s.lns
	s.mu.Unlock()

	if first {
		// Closes the listeners, closes idle connections, and waits for the others.
		cut := make(chan struct{})
		go s.cutReads(cut)
		err := s.srv.ShutdownWithContext(ctx)
		close(cut)
		// A listener closed already (by a second shutdown running beside this one, below:
		// Stop as Start's context ends) is no error: it is closed either way, and fasthttp
		// waited for the connections all the same.
		if err != nil && !errors.Is(err, net.ErrClosed) {
			return fmt.Errorf("ingest: shutdown: %w", err)
		}
	}
	// A listener registered while fasthttp shut down is not known to it.
	for _, ln := range lns {
		_ = ln.Close()
	}
	// fasthttp's shutdown returns at once after a first one timed out: wait for the
	// requests in the handler ourselves.
	if s.inflight.Load() == 0 {
		return nil
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for s.inflight.Load() > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("ingest: shutdown: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}
