package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// Routes, by path pattern. A path parameter is at most one segment, and job ids, runs
// and queues never contain '/'.
const (
	rHealthz = iota
	rReadyz
	rMetrics
	rOpenAPI
	rJobs
	rJobsBatch
	rJob
	rJobPause
	rJobResume
	rJobTrigger
	rJobRuns
	rDead
	rDeadRun
	rDeadRequeue
	rQueues
	rQueuePause
	rQueueResume
	numRoutes
)

var patterns = [numRoutes]string{
	rHealthz:     "/healthz",
	rReadyz:      "/readyz",
	rMetrics:     "/metrics",
	rOpenAPI:     "/v1/openapi.json",
	rJobs:        "/v1/jobs",
	rJobsBatch:   "/v1/jobs:batch",
	rJob:         "/v1/jobs/{id}",
	rJobPause:    "/v1/jobs/{id}:pause",
	rJobResume:   "/v1/jobs/{id}:resume",
	rJobTrigger:  "/v1/jobs/{id}:trigger",
	rJobRuns:     "/v1/jobs/{id}/runs",
	rDead:        "/v1/dead",
	rDeadRun:     "/v1/dead/{run}",
	rDeadRequeue: "/v1/dead/{run}:requeue",
	rQueues:      "/v1/queues",
	rQueuePause:  "/v1/queues/{queue}:pause",
	rQueueResume: "/v1/queues/{queue}:resume",
}

// match finds the route of a path and its parameter; -1 when none. A run contains a
// colon ("<job id>:<due ms>"), so an action is split off at the last colon only when
// what follows is a known verb.
func match(path string) (int, string) {
	switch path {
	case "/healthz":
		return rHealthz, ""
	case "/readyz":
		return rReadyz, ""
	case "/metrics":
		return rMetrics, ""
	case "/v1/openapi.json":
		return rOpenAPI, ""
	case "/v1/jobs":
		return rJobs, ""
	case "/v1/jobs:batch":
		return rJobsBatch, ""
	case "/v1/dead":
		return rDead, ""
	case "/v1/queues":
		return rQueues, ""
	}
	if rest, ok := strings.CutPrefix(path, "/v1/jobs/"); ok {
		if id, ok := strings.CutSuffix(rest, "/runs"); ok {
			return param(rJobRuns, id)
		}
		if i := strings.LastIndexByte(rest, ':'); i >= 0 {
			switch rest[i+1:] {
			case "pause":
				return param(rJobPause, rest[:i])
			case "resume":
				return param(rJobResume, rest[:i])
			case "trigger":
				return param(rJobTrigger, rest[:i])
			}
		}
		return param(rJob, rest)
	}
	if rest, ok := strings.CutPrefix(path, "/v1/dead/"); ok {
		if i := strings.LastIndexByte(rest, ':'); i >= 0 && rest[i+1:] == "requeue" {
			return param(rDeadRequeue, rest[:i])
		}
		return param(rDeadRun, rest)
	}
	if rest, ok := strings.CutPrefix(path, "/v1/queues/"); ok {
		if i := strings.LastIndexByte(rest, ':'); i >= 0 {
			switch rest[i+1:] {
			case "pause":
				return param(rQueuePause, rest[:i])
			case "resume":
				return param(rQueueResume, rest[:i])
			}
		}
	}
	return -1, ""
}

func param(r int, p string) (int, string) {
	if p == "" || strings.IndexByte(p, '/') >= 0 {
		return -1, ""
	}
	return r, p
}

// endpoint is one method of a route.
type endpoint struct {
	method string
	name   string // "POST /v1/jobs": the route label of Metrics
	access access
	h      func(ctx *fasthttp.RequestCtx, p string)
}

type access int

const (
	public access = iota // no token needed
	read
	write
)

func (s *Server) buildRoutes() [numRoutes][]endpoint {
	var rs [numRoutes][]endpoint
	add := func(r int, method string, a access, h func(*fasthttp.RequestCtx, string)) {
		rs[r] = append(rs[r], endpoint{method: method, name: method + " " + patterns[r], access: a, h: h})
	}
	add(rHealthz, "GET", public, s.healthz)
	add(rReadyz, "GET", public, s.readyz)
	add(rMetrics, "GET", read, s.metrics)
	add(rOpenAPI, "GET", read, s.openAPI)
	add(rJobs, "POST", write, s.createJob)
	add(rJobs, "GET", read, s.listJobs)
	add(rJobsBatch, "POST", write, s.createBatch)
	add(rJob, "GET", read, s.getJob)
	add(rJob, "PATCH", write, s.patchJob)
	add(rJob, "DELETE", write, s.cancelJob)
	add(rJobPause, "POST", write, s.pauseJob)
	add(rJobResume, "POST", write, s.resumeJob)
	add(rJobTrigger, "POST", write, s.triggerJob)
	add(rJobRuns, "GET", read, s.jobRuns)
	add(rDead, "GET", read, s.listDead)
	add(rDeadRun, "DELETE", write, s.deleteDead)
	add(rDeadRequeue, "POST", write, s.requeueDead)
	add(rQueues, "GET", read, s.listQueues)
	add(rQueuePause, "POST", write, s.pauseQueue)
	add(rQueueResume, "POST", write, s.resumeQueue)
	return rs
}

// RouteTable lists the API's routes: path pattern → methods. The OpenAPI document lists
// the same.
func (s *Server) routeTable() map[string][]string {
	m := map[string][]string{}
	for r, eps := range s.routes {
		for _, ep := range eps {
			m[patterns[r]] = append(m[patterns[r]], ep.method)
		}
	}
	return m
}

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	var start time.Time
	if s.cfg.Metrics != nil {
		start = time.Now()
	}
	name := s.dispatch(ctx)
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.HTTPRequest(name, ctx.Response.StatusCode(), time.Since(start))
	}
}

// dispatch routes, authenticates and serves a request; it returns the route's name.
func (s *Server) dispatch(ctx *fasthttp.RequestCtx) string {
	r, p := match(string(ctx.Path()))
	if r < 0 {
		writeError(ctx, &apiError{status: 404, code: CodeNotFound, msg: "no route for " + string(ctx.Path())})
		return "unmatched"
	}
	method := ctx.Method()
	var ep *endpoint
	for i := range s.routes[r] {
		if string(method) == s.routes[r][i].method {
			ep = &s.routes[r][i]
			break
		}
	}
	if ep == nil {
		allow := make([]string, 0, 3)
		for _, e := range s.routes[r] {
			allow = append(allow, e.method)
		}
		ctx.Response.Header.Set("Allow", strings.Join(allow, ", "))
		writeError(ctx, &apiError{status: 405, code: CodeMethod,
			msg: "method " + string(method) + " not allowed on " + patterns[r] + " (allowed: " + strings.Join(allow, ", ") + ")"})
		return "* " + patterns[r]
	}
	if ep.access != public && !s.authorize(ctx, ep.access) {
		return ep.name
	}
	if len(ctx.Request.Body()) > s.cfg.MaxBody {
		writeError(ctx, &apiError{status: 413, code: CodeTooLarge,
			msg: "the request body is over the limit of " + strconv.Itoa(s.cfg.MaxBody) + " bytes"})
		return ep.name
	}
	ep.h(ctx, p)
	return ep.name
}

// authorize checks the bearer token; it writes the 401 or 403 reply and returns false
// when the request may not go on.
func (s *Server) authorize(ctx *fasthttp.RequestCtx, a access) bool {
	if len(s.tokens) == 0 {
		return true
	}
	h := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
	const prefix = "bearer "
	if len(h) <= len(prefix) || !bytes.EqualFold(h[:len(prefix)], []byte(prefix)) {
		ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, `Bearer realm="tock"`)
		writeError(ctx, &apiError{status: 401, code: CodeUnauthenticated, msg: "a bearer token is required (Authorization: Bearer <token>)"})
		return false
	}
	sum := sha256.Sum256(bytes.TrimSpace(h[len(prefix):]))
	var scope Scope
	for _, t := range s.tokens { // every token compared, in constant time
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 {
			scope = t.scope
		}
	}
	switch {
	case scope == "":
		ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, `Bearer realm="tock", error="invalid_token"`)
		writeError(ctx, &apiError{status: 401, code: CodeUnauthenticated, msg: "unknown bearer token"})
		return false
	case a == write && scope != ScopeWrite:
		writeError(ctx, &apiError{status: 403, code: CodeForbidden, msg: "this token may only read"})
		return false
	}
	return true
}

// handleReadError answers requests fasthttp could not read (malformed HTTP, a header
// too large, a body cut short or sent too slowly) and logs them, rate limited, with the
// method, route, remote address and the kind of error only: the error's text quotes the
// request, Authorization header included.
func (s *Server) handleReadError(ctx *fasthttp.RequestCtx, err error) {
	kind := errorKind(err)
	switch kind {
	case "body_too_large":
		writeError(ctx, &apiError{status: 413, code: CodeTooLarge,
			msg: "the request body is over the limit of " + strconv.Itoa(s.cfg.MaxBody) + " bytes"})
	case "header_too_large":
		writeError(ctx, &apiError{status: 431, code: CodeInvalid, msg: "the request headers are too large"})
	case "timeout":
		writeError(ctx, &apiError{status: 408, code: CodeInvalid, msg: "the request was not sent in time"})
	default:
		writeError(ctx, &apiError{status: 400, code: CodeInvalid, msg: "malformed HTTP request (" + kind + ")"})
	}
	route := s.routeName(ctx)
	s.logLimited(ctx, &s.reqLog, slog.LevelInfo, "request not read", "method", safeMethod(ctx.Method()),
		"route", route, "remote_addr", ctx.RemoteAddr().String(), "error_kind", kind, "status", ctx.Response.StatusCode())
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.HTTPRequest(route, ctx.Response.StatusCode(), 0)
	}
}

// routeName is the Metrics label of a request's route ("unmatched" when none).
func (s *Server) routeName(ctx *fasthttp.RequestCtx) string {
	r, _ := match(string(ctx.Path()))
	if r < 0 {
		return "unmatched"
	}
	for _, ep := range s.routes[r] {
		if string(ctx.Method()) == ep.method {
			return ep.name
		}
	}
	return "* " + patterns[r]
}

// jsonBuf is a pooled encoder with its buffer.
type jsonBuf struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var jsonBufs = sync.Pool{New: func() any {
	b := &jsonBuf{}
	b.enc = json.NewEncoder(&b.buf)
	b.enc.SetEscapeHTML(false)
	return b
}}

// writeJSON sends v as the JSON reply with status.
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b := jsonBufs.Get().(*jsonBuf)
	b.buf.Reset()
	if err := b.enc.Encode(v); err != nil {
		jsonBufs.Put(b)
		ctx.SetStatusCode(500)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"error":{"code":"internal","message":"encoding the reply failed"}}` + "\n")
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b.buf.Bytes())
	if b.buf.Cap() <= 1<<20 {
		jsonBufs.Put(b)
	}
}

func writeError(ctx *fasthttp.RequestCtx, e *apiError) {
	writeJSON(ctx, e.status, ErrorReply{Error: Error{Code: e.code, Message: e.msg, Field: e.field}})
}

// rctx returns the context of one Redis call: it does not end with the request (fasthttp
// ends every request context at shutdown, and shutdown lets requests finish), but after
// Config.RedisTimeout.
func (s *Server) rctx(ctx *fasthttp.RequestCtx) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RedisTimeout)
}

// storeError answers a store error: not found 404, a job state that does not allow the
// operation 409, an invalid argument 400, a change the replicas did not confirm 503
// not_replicated, a Redis timeout 503, anything else 500 (logged, with a generic message).
func (s *Server) storeError(ctx *fasthttp.RequestCtx, what string, err error) {
	writeError(ctx, s.storeAPIError(ctx, what, err))
}

// notReplicated is the message of a not_replicated error about what (such as `job "x"`,
// which names a generated id too).
func notReplicated(what string, re *shard.ReplicationError) string {
	confirmed := "it could not be confirmed by replicas"
	if re.Err == nil {
		confirmed = "only " + strconv.Itoa(re.Got) + " of the " + strconv.Itoa(re.Want) +
			" replicas asked for confirmed it within " + re.Timeout.String()
	}
	return what + ": the change was made on the Redis primary, but " + confirmed +
		"; it may be lost if the primary fails now. Retrying is safe (a create with the same job id)"
}

func (s *Server) storeAPIError(ctx context.Context, what string, err error) *apiError {
	var se *shard.StateError
	var fe *job.FieldError
	var re *shard.ReplicationError
	switch {
	case errors.Is(err, shard.ErrNotFound):
		return &apiError{status: 404, code: CodeNotFound, msg: what + " not found"}
	case errors.As(err, &se):
		return &apiError{status: 409, code: CodeState, msg: se.Error()}
	case errors.As(err, &fe):
		return invalid(fe.Field, fe.Msg)
	case errors.As(err, &re):
		s.logError(ctx, "change not confirmed by replicas", err, "what", what)
		return &apiError{status: 503, code: CodeNotReplicated, msg: notReplicated(what, re)}
	case errors.Is(err, context.DeadlineExceeded):
		s.logError(ctx, "redis call timed out", err, "what", what)
		return &apiError{status: 503, code: CodeUnavailable, msg: "redis did not answer in time"}
	}
	s.logError(ctx, "store call failed", err, "what", what)
	return &apiError{status: 500, code: CodeInternal, msg: "internal error"}
}
