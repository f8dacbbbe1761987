package ingest

import (
	"crypto/sha256"
	"crypto/subtle"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/shard"
)

// mount is a handler serving the paths under a prefix (the dashboard at /ui).
type mount struct {
	prefix string
	h      fasthttp.RequestHandler
}

// Mount serves the paths equal to prefix or under prefix + "/" with h, in front of the
// API's routes and without its bearer check: h authenticates (package ui keeps
// sessions, and calls the API with ServeAs). h reads its own body (bound it: it is not
// counted in Config.MaxBodyMemory). Mount must be called before Start or Serve.
func (s *Server) Mount(prefix string, h fasthttp.RequestHandler) {
	s.mounts = append(s.mounts, mount{prefix: strings.TrimSuffix(prefix, "/"), h: h})
}

// mounted returns the mount serving path, or nil.
func (s *Server) mounted(path string) *mount {
	for i := range s.mounts {
		m := &s.mounts[i]
		if path == m.prefix || strings.HasPrefix(path, m.prefix+"/") {
			return m
		}
	}
	return nil
}

// scopeKey is the user value with which ServeAs hands a request its scope.
type scopeKey struct{}

// ServeAs serves an API request made in-process on behalf of a caller already
// authenticated with scope (the dashboard's session): the bearer check is skipped, the
// scope still rules (a read scope gets 403 on every write). Requests from the network
// cannot set it.
func (s *Server) ServeAs(ctx *fasthttp.RequestCtx, scope Scope) {
	ctx.SetUserValue(scopeKey{}, scope)
	s.handle(ctx)
}

// TokenScope returns the scope of a token secret, compared in constant time with every
// configured token; "" when it is none of them.
func (s *Server) TokenScope(secret string) Scope {
	sum := sha256.Sum256([]byte(secret))
	var scope Scope
	for _, t := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 {
			scope = t.scope
		}
	}
	return scope
}

// AuthRequired reports whether the server has tokens (without, everyone may write).
func (s *Server) AuthRequired() bool { return len(s.tokens) > 0 }

// Closing returns a channel closed when Stop begins: long-lived responses (the
// dashboard's event streams) end then, so that the shutdown does not wait for them.
func (s *Server) Closing() <-chan struct{} { return s.quit }

// WriteTimeout returns Config.WriteTimeout: a long-lived response extends its
// connection's write deadline by it before each write (the server sets it once, before
// the response).
func (s *Server) WriteTimeout() time.Duration { return s.cfg.WriteTimeout }

// Store returns the namespace served.
func (s *Server) Store() *shard.Store { return s.store }
