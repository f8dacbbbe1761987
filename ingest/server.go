// Package ingest is tock's front door: the versioned JSON API (v1) on fasthttp through
// which jobs are created and managed, its wire types, and a Go client for it.
package ingest

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/shard"
)

// Scope is what a bearer token may do.
type Scope string

// Token scopes. Write includes read.
const (
	ScopeRead  Scope = "read"
	ScopeWrite Scope = "write"
)

// Token is a bearer token accepted by the server.
type Token struct {
	Secret string
	Scope  Scope
}

// Metrics receives the server's measurements. Nil means none.
type Metrics interface {
	// HTTPRequest is called once per request with its route pattern (such as
	// "POST /v1/jobs"), status and duration.
	HTTPRequest(route string, status int, d time.Duration)
}

// Config configures a Server.
type Config struct {
	// Store is the namespace served. Required.
	Store *shard.Store
	// Addr is the listen address of Start. Default "127.0.0.1:8080".
	Addr string
	// Tokens are the accepted bearer tokens. Empty means no authentication (tock dev).
	Tokens []Token
	// MaxBatch bounds the jobs of one batch create. Default 10000.
	MaxBatch int
	// MaxBody bounds a request body in bytes. Default: room for MaxBatch jobs of
	// the store's maximum payload, capped at 64 MiB.
	MaxBody int
	// MaxBacklog is the most runs ready or in flight (over all queues) before creates are
	// refused with 429 and Retry-After. 0 means no limit.
	MaxBacklog int64
	// RedisTimeout bounds every Redis call a request makes. Default 5s.
	RedisTimeout time.Duration
	// MetricsHandler serves GET /metrics when set (cmd passes Prometheus's).
	MetricsHandler fasthttp.RequestHandler
	// Metrics receives request counts and latencies. Nil means none.
	Metrics Metrics
	// Logger receives errors. Nil discards.
	Logger *slog.Logger
}

// Server serves the API. Start it with Start (or Serve a listener), stop it with Stop.
type Server struct {
	cfg Config
}

// New validates cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("ingest: Store is required")
	}
	return &Server{cfg: cfg}, nil
}

// Handler returns the request handler, for tests and for embedding.
func (s *Server) Handler() fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {}
}

// Start listens on Config.Addr and serves until Stop or until ctx ends. It returns once
// listening (an error when the address cannot be bound).
func (s *Server) Start(ctx context.Context) error { return errors.New("not implemented yet") }

// Addr returns the address the server listens on once started ("" before).
func (s *Server) Addr() string { return "" }

// Stop stops accepting connections and waits for in-flight requests, bounded by ctx.
func (s *Server) Stop(ctx context.Context) error { return nil }
