package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// Routes, by path pattern. A path parameter is one segment of the path as sent: the path
// is split at its slashes before anything is decoded, and the parameter alone is then
// percent-decoded, so that an encoded slash or dot in it stays part of the parameter
// (and fails its validation) instead of reaching another route.
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
	rJobDelete
	rJobRuns
	rDead
	rDeadRun
	rDeadRequeue
	rQueues
	rQueuePause
	rQueueResume
	rSchedulePreview
	rCluster
	rFigures
	rJobsBulk
	rDeadBulk
	rRunsClaim
	rRunsHeartbeat
	rRunsAck
	rRunsFail
	rRunAck
	rRunFail
	rRunSnooze
	rRunCancel
	rBreakers
	rAudit
	rWorkflows
	rWorkflow
	rWorkflowCancel
	rWorkflowRetry
	rWorkflowPause
	rWorkflowResume
	rWorkflowTrigger
	rWorkflowDelete
	rWorkflowResult
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
	rJobDelete:   "/v1/jobs/{id}:delete",
	rJobRuns:     "/v1/jobs/{id}/runs",
	rDead:        "/v1/dead",
	rDeadRun:     "/v1/dead/{run}",
	rDeadRequeue: "/v1/dead/{run}:requeue",
	rQueues:      "/v1/queues",
	rQueuePause:  "/v1/queues/{queue}:pause",
	rQueueResume: "/v1/queues/{queue}:resume",

	rSchedulePreview: "/v1/schedules:preview",
	rCluster:         "/v1/cluster",
	rFigures:         "/v1/figures",
	rJobsBulk:        "/v1/jobs:bulk",
	rDeadBulk:        "/v1/dead:bulk",

	rRunsClaim:     "/v1/runs:claim",
	rRunsHeartbeat: "/v1/runs:heartbeat",
	rRunsAck:       "/v1/runs:ack",
	rRunsFail:      "/v1/runs:fail",
	rRunAck:        "/v1/runs/{run}:ack",
	rRunFail:       "/v1/runs/{run}:fail",
	rRunSnooze:     "/v1/runs/{run}:snooze",
	rRunCancel:     "/v1/runs/{run}:cancel",

	rBreakers: "/v1/breakers",
	rAudit:    "/v1/audit",

	rWorkflows:       "/v1/workflows",
	rWorkflow:        "/v1/workflows/{id}",
	rWorkflowCancel:  "/v1/workflows/{id}:cancel",
	rWorkflowRetry:   "/v1/workflows/{id}:retry",
	rWorkflowPause:   "/v1/workflows/{id}:pause",
	rWorkflowResume:  "/v1/workflows/{id}:resume",
	rWorkflowTrigger: "/v1/workflows/{id}:trigger",
	rWorkflowDelete:  "/v1/workflows/{id}:delete",
	rWorkflowResult:  "/v1/workflows/{id}/nodes/{node}/result",
}

// paramField is the name of each route's parameter in error replies ("" for none).
var paramField = [numRoutes]string{
	rJob: "id", rJobPause: "id", rJobResume: "id", rJobTrigger: "id", rJobDelete: "id", rJobRuns: "id",
	rDeadRun: "run", rDeadRequeue: "run",
	rQueuePause: "queue", rQueueResume: "queue",
	rRunAck: "run", rRunFail: "run", rRunSnooze: "run", rRunCancel: "run",
	rWorkflow: "id", rWorkflowCancel: "id", rWorkflowRetry: "id", rWorkflowPause: "id", rWorkflowResume: "id",
	rWorkflowTrigger: "id", rWorkflowDelete: "id", rWorkflowResult: "id",
}

// match finds the route of a raw path (as sent, still percent-encoded) and its
// parameter, decoded; -1 when none. The fixed parts of a path are compared as sent. A
// parameter's segment is split from its action at its last colon when what follows is a
// known verb (a run contains a colon: "<job id>:<due ms>"); the split is tried on the
// segment as sent, then decoded (so "%3Apause" is an action too). bad is set when the
// parameter is not valid percent-encoding; param is then as sent.
func match(path string) (r int, p string, bad bool) {
	switch path {
	case "/healthz":
		return rHealthz, "", false
	case "/readyz":
		return rReadyz, "", false
	case "/metrics":
		return rMetrics, "", false
	case "/v1/openapi.json":
		return rOpenAPI, "", false
	case "/v1/jobs":
		return rJobs, "", false
	case "/v1/jobs:batch":
		return rJobsBatch, "", false
	case "/v1/dead":
		return rDead, "", false
	case "/v1/queues":
		return rQueues, "", false
	case "/v1/schedules:preview":
		return rSchedulePreview, "", false
	case "/v1/cluster":
		return rCluster, "", false
	case "/v1/figures":
		return rFigures, "", false
	case "/v1/jobs:bulk":
		return rJobsBulk, "", false
	case "/v1/dead:bulk":
		return rDeadBulk, "", false
	case "/v1/breakers":
		return rBreakers, "", false
	case "/v1/runs:claim":
		return rRunsClaim, "", false
	case "/v1/runs:heartbeat":
		return rRunsHeartbeat, "", false
	case "/v1/runs:ack":
		return rRunsAck, "", false
	case "/v1/runs:fail":
		return rRunsFail, "", false
	case "/v1/audit":
		return rAudit, "", false
	case "/v1/workflows":
		return rWorkflows, "", false
	}
	// /v1/<collection>/<parameter segment>[/runs]
	rest, ok := strings.CutPrefix(path, "/v1/")
	if !ok {
		return -1, "", false
	}
	coll, rest, ok := strings.Cut(rest, "/")
	if !ok {
		return -1, "", false
	}
	seg, tail, more := strings.Cut(rest, "/")
	switch {
	case more && coll == "jobs" && tail == "runs":
		return param(rJobRuns, seg)
	case more && coll == "workflows":
		return nodeParam(seg, tail)
	case more:
		return -1, "", false
	case coll == "jobs":
		return action(seg, rJob, jobVerbs)
	case coll == "dead":
		return action(seg, rDeadRun, deadVerbs)
	case coll == "queues":
		return action(seg, -1, queueVerbs)
	case coll == "runs":
		return action(seg, -1, runVerbs)
	case coll == "workflows":
		return action(seg, rWorkflow, workflowVerbs)
	}
	return -1, "", false
}

// verb is an action on a collection's item, and its route.
type verb struct {
	name  string
	route int
}

// The actions of each collection's items.
var (
	jobVerbs   = []verb{{"pause", rJobPause}, {"resume", rJobResume}, {"trigger", rJobTrigger}, {"delete", rJobDelete}}
	deadVerbs  = []verb{{"requeue", rDeadRequeue}}
	queueVerbs = []verb{{"pause", rQueuePause}, {"resume", rQueueResume}}
	runVerbs   = []verb{{"ack", rRunAck}, {"fail", rRunFail}, {"snooze", rRunSnooze}, {"cancel", rRunCancel}}
	// A scheduled workflow's definition also takes pause, resume, trigger and delete.
	workflowVerbs = []verb{{"cancel", rWorkflowCancel}, {"retry", rWorkflowRetry}, {"pause", rWorkflowPause},
		{"resume", rWorkflowResume}, {"trigger", rWorkflowTrigger}, {"delete", rWorkflowDelete}}
)

// verbRoute is the route of the action named v; -1 when none.
func verbRoute(verbs []verb, v string) int {
	for _, vb := range verbs {
		if vb.name == v {
			return vb.route
		}
	}
	return -1
}

// action splits a verb of verbs off seg (as sent, else decoded) and returns its route
// and the decoded parameter; without a verb, the route is plain (-1: none).
func action(seg string, plain int, verbs []verb) (int, string, bool) {
	if i := strings.LastIndexByte(seg, ':'); i >= 0 {
		if r := verbRoute(verbs, seg[i+1:]); r >= 0 {
			return param(r, seg[:i])
		}
	}
	dec, err := url.PathUnescape(seg)
	if err != nil {
		if plain < 0 {
			return -1, "", false
		}
		return param(plain, seg)
	}
	if i := strings.LastIndexByte(dec, ':'); i >= 0 {
		if r := verbRoute(verbs, dec[i+1:]); r >= 0 {
			if dec[:i] == "" {
				return -1, "", false
			}
			return r, dec[:i], false
		}
	}
	if plain < 0 || dec == "" {
		return -1, "", false
	}
	return plain, dec, false
}

// nodeParam matches the tail "nodes/<node>/result" of a workflow's path segment seg.
// Its parameter holds the workflow id and the node id, each decoded on its own, joined
// by nodeParamJoin.
func nodeParam(seg, tail string) (int, string, bool) {
	rest, ok := strings.CutPrefix(tail, "nodes/")
	if !ok {
		return -1, "", false
	}
	node, ok := strings.CutSuffix(rest, "/result")
	if !ok || node == "" || strings.IndexByte(node, '/') >= 0 {
		return -1, "", false
	}
	r, wf, bad := param(rWorkflowResult, seg)
	if r < 0 {
		return -1, "", false
	}
	n, err := url.PathUnescape(node)
	switch {
	case err != nil:
		return r, nodeParamJoin(wf, node), true
	case n == "":
		return -1, "", false
	}
	return r, nodeParamJoin(wf, n), bad
}

// nodeParamJoin joins a workflow id and a node id, whatever bytes they hold, into one
// parameter that nodeParamSplit splits again: each is path-escaped (no '/' is left in
// it), with a '/' between them.
func nodeParamJoin(wf, node string) string { return url.PathEscape(wf) + "/" + url.PathEscape(node) }

// nodeParamSplit undoes nodeParamJoin.
func nodeParamSplit(p string) (wf, node string) {
	a, b, _ := strings.Cut(p, "/")
	wf, _ = url.PathUnescape(a)
	node, _ = url.PathUnescape(b)
	return wf, node
}

// param decodes raw, the parameter of route r; an empty one is no route.
func param(r int, raw string) (int, string, bool) {
	if raw == "" {
		return -1, "", false
	}
	p, err := url.PathUnescape(raw)
	if err != nil {
		return r, raw, true
	}
	if p == "" {
		return -1, "", false
	}
	return r, p, false
}

// checkParam validates the parameter of route r: a job id, a run or a queue name.
func checkParam(r int, p string, bad bool) *apiError {
	field := paramField[r]
	switch {
	case field == "":
		return nil
	case bad && r == rWorkflowResult:
		// One of the two is as sent, not valid percent-encoding.
		wf, node := nodeParamSplit(p)
		if _, err := url.PathUnescape(wf); err != nil {
			return invalid("id", "not valid percent-encoding in the path: "+strconv.Quote(wf))
		}
		return invalid("node", "not valid percent-encoding in the path: "+strconv.Quote(node))
	case bad:
		return invalid(field, "not valid percent-encoding in the path: "+strconv.Quote(p))
	case field == "run" && r >= rRunAck && r <= rRunCancel:
		// A run of the run endpoints that cannot exist is not found, as an unknown one.
		if validRun(p) != nil {
			return &apiError{status: 404, code: CodeNotFound, field: "run", msg: "run " + strconv.Quote(p) + " not found: a run is <job id>:<due ms>"}
		}
	case field == "run":
		return validRun(p)
	case field == "queue":
		if err := job.ValidateID("queue", p, job.MaxQueueLen); err != nil {
			return normalizeError(err)
		}
	case r == rWorkflowResult:
		wf, node := nodeParamSplit(p)
		if err := job.ValidateRef("id", wf, job.MaxWorkflowIDLen); err != nil {
			return normalizeError(err)
		}
		if err := job.ValidateID("node", node, job.MaxNodeIDLen); err != nil {
			return normalizeError(err)
		}
	case r >= rWorkflow && r <= rWorkflowDelete:
		if err := job.ValidateRef("id", p, job.MaxWorkflowIDLen); err != nil {
			return normalizeError(err)
		}
	default:
		if err := job.ValidateRef("id", p, job.MaxIDLen); err != nil {
			return normalizeError(err)
		}
	}
	return nil
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
	work // the run endpoints: a worker or write token
	// readWork: a read, write or worker token. A node's result, which an HTTP worker
	// reads for a parent its claim left out (parents_omitted).
	readWork
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
	add(rJobDelete, "POST", write, s.deleteJob)
	add(rJobRuns, "GET", read, s.jobRuns)
	add(rDead, "GET", read, s.listDead)
	add(rDeadRun, "DELETE", write, s.deleteDead)
	add(rDeadRequeue, "POST", write, s.requeueDead)
	add(rQueues, "GET", read, s.listQueues)
	add(rQueuePause, "POST", write, s.pauseQueue)
	add(rQueueResume, "POST", write, s.resumeQueue)
	add(rSchedulePreview, "GET", read, s.previewSchedule)
	add(rCluster, "GET", read, s.cluster)
	add(rFigures, "GET", read, s.figures)
	add(rJobsBulk, "POST", write, s.bulkJobs)
	add(rDeadBulk, "POST", write, s.bulkDead)
	add(rBreakers, "GET", read, s.listBreakers)
	add(rRunsClaim, "POST", work, s.claimRuns)
	add(rRunsHeartbeat, "POST", work, s.heartbeatRuns)
	add(rRunsAck, "POST", work, s.ackRuns)
	add(rRunsFail, "POST", work, s.failRuns)
	add(rRunAck, "POST", work, s.ackRun)
	add(rRunFail, "POST", work, s.failRun)
	add(rRunSnooze, "POST", work, s.snoozeRun)
	add(rRunCancel, "POST", work, s.cancelRun)
	// The audit log names operators and their addresses: a write token's to read.
	add(rAudit, "GET", write, s.listAudit)
	add(rWorkflows, "POST", write, s.createWorkflow)
	add(rWorkflows, "GET", read, s.listWorkflows)
	add(rWorkflow, "GET", read, s.getWorkflow)
	add(rWorkflowCancel, "POST", write, s.cancelWorkflow)
	add(rWorkflowRetry, "POST", write, s.retryWorkflow)
	add(rWorkflowPause, "POST", write, s.pauseWorkflow)
	add(rWorkflowResume, "POST", write, s.resumeWorkflow)
	add(rWorkflowTrigger, "POST", write, s.triggerWorkflow)
	add(rWorkflowDelete, "POST", write, s.deleteWorkflow)
	add(rWorkflowResult, "GET", readWork, s.workflowResult)
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

// rawPath is the request's path as sent, before any decoding.
func rawPath(ctx *fasthttp.RequestCtx) string { return string(ctx.URI().PathOriginal()) }

// dispatch routes, authenticates and serves a request; it returns the route's name. The
// body is read only once the headers have been found good (body.go).
func (s *Server) dispatch(ctx *fasthttp.RequestCtx) string {
	if m := s.mounted(rawPath(ctx)); m != nil {
		m.h(ctx)
		// A known method or "other": the label's values stay bounded.
		return safeMethod(ctx.Method()) + " " + m.prefix
	}
	ep, p, name := s.precheck(ctx)
	if ep == nil {
		closeIfBodyUnread(ctx)
		return name
	}
	held, aerr := s.readBody(ctx)
	if aerr != nil {
		if aerr == errBodyMemory {
			ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, bodyRetryAfter)
		}
		writeError(ctx, aerr)
		ctx.SetConnectionClose()
		return name
	}
	defer s.releaseBody(held)
	ep.h(ctx, p)
	s.audit(ctx, ep, p)
	return name
}

// closeIfBodyUnread asks for the connection to be closed when the request has a body
// that was not read: what is left of it is still on the connection.
func closeIfBodyUnread(ctx *fasthttp.RequestCtx) {
	if ctx.Request.Header.ContentLength() != 0 && ctx.RequestBodyStream() != nil {
		ctx.SetConnectionClose()
	}
}

// precheck does what can be done on the headers alone: routing, the method, the token,
// the path parameter and the declared body size. It returns the endpoint and its decoded
// parameter, or nil when it has written the refusal. name is the route's Metrics label.
func (s *Server) precheck(ctx *fasthttp.RequestCtx) (ep *endpoint, p, name string) {
	path := rawPath(ctx)
	r, p, bad := match(path)
	if r < 0 {
		writeError(ctx, &apiError{status: 404, code: CodeNotFound, msg: "no route for " + path})
		return nil, "", "unmatched"
	}
	method := ctx.Method()
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
		return nil, "", "* " + patterns[r]
	}
	if ep.access != public && !s.authorize(ctx, ep.access) {
		return nil, "", ep.name
	}
	if aerr := checkParam(r, p, bad); aerr != nil {
		writeError(ctx, aerr)
		return nil, "", ep.name
	}
	if ctx.Request.Header.ContentLength() > s.cfg.MaxBody {
		writeError(ctx, s.tooLarge())
		return nil, "", ep.name
	}
	return ep, p, ep.name
}

// expectContinue answers a request with "Expect: 100-continue" before its body is sent:
// 100 when the headers are good and the body fits in MaxBodyMemory now, else the
// refusal (and fasthttp closes the connection).
func (s *Server) expectContinue(ctx *fasthttp.RequestCtx) int {
	if s.mounted(rawPath(ctx)) != nil {
		return fasthttp.StatusContinue // the mount bounds its own bodies
	}
	ep, _, name := s.precheck(ctx)
	if ep != nil {
		if s.bodyFits(ctx.Request.Header.ContentLength()) {
			return fasthttp.StatusContinue
		}
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, bodyRetryAfter)
		writeError(ctx, errBodyMemory)
	}
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.HTTPRequest(name, ctx.Response.StatusCode(), 0)
	}
	return ctx.Response.StatusCode()
}

// authorize checks the bearer token; it writes the 401 or 403 reply and returns false
// when the request may not go on.
func (s *Server) authorize(ctx *fasthttp.RequestCtx, a access) bool {
	if len(s.tokens) == 0 {
		return true
	}
	if scope, ok := ctx.UserValue(scopeKey{}).(Scope); ok { // ServeAs
		if aerr := scopeError(scope, a); aerr != nil {
			writeError(ctx, aerr)
			return false
		}
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
	}
	if aerr := scopeError(scope, a); aerr != nil {
		writeError(ctx, aerr)
		return false
	}
	ctx.SetUserValue(actorKey{}, actor{who: tokenWho(sum)})
	return true
}

// scopeError is the 403 of a token of scope on an endpoint of access a; nil when
// allowed. Write may do everything; read only read; worker only the run endpoints and
// nodes' results.
func scopeError(scope Scope, a access) *apiError {
	switch {
	case scope == ScopeWrite || a == public:
		return nil
	case scope == ScopeWorker:
		if a == work || a == readWork {
			return nil
		}
		return &apiError{status: 403, code: CodeForbidden, msg: "this token may only claim and report runs (/v1/runs) and read workflow nodes' results"}
	case a == read || a == readWork:
		return nil
	case a == work:
		return &apiError{status: 403, code: CodeForbidden, msg: "this token may only read: the run endpoints need a worker or write token"}
	}
	return &apiError{status: 403, code: CodeForbidden, msg: "this token may only read"}
}

// handleReadError answers requests fasthttp could not read (malformed HTTP, a header
// too large, a body cut short or sent too slowly) and logs them, rate limited, with the
// method, route, remote address and the kind of error only: the error's text quotes the
// request, Authorization header included.
func (s *Server) handleReadError(ctx *fasthttp.RequestCtx, err error) {
	kind := errorKind(err)
	switch kind {
	case "body_too_large":
		writeError(ctx, s.tooLarge())
	case "header_too_large":
		writeError(ctx, &apiError{status: 431, code: CodeInvalid, msg: "the request headers are too large"})
	case "timeout":
		writeError(ctx, &apiError{status: 408, code: CodeInvalid, msg: "the request was not sent in time"})
	default:
		writeError(ctx, &apiError{status: 400, code: CodeInvalid, msg: "malformed HTTP request (" + kind + ")"})
	}
	route := s.routeName(ctx)
	s.logLimited(ctx, s.reqLog, slog.LevelInfo, "request not read", "method", safeMethod(ctx.Method()),
		"route", route, "remote_addr", ctx.RemoteAddr().String(), "error_kind", kind, "status", ctx.Response.StatusCode())
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.HTTPRequest(route, ctx.Response.StatusCode(), 0)
	}
}

// routeName is the Metrics label of a request's route ("unmatched" when none).
func (s *Server) routeName(ctx *fasthttp.RequestCtx) string {
	r, _, _ := match(rawPath(ctx))
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
// operation 409 (so is an operation only a node's workflow may do, *shard.NodeError), an invalid argument 400, a change the replicas did not confirm 503
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
	var ne *shard.NodeError
	var we *shard.WorkflowError
	switch {
	case errors.Is(err, shard.ErrNotFound), errors.Is(err, shard.ErrWorkflowNotFound):
		return &apiError{status: 404, code: CodeNotFound, msg: what + " not found"}
	case errors.Is(err, shard.ErrWorkflowIDTaken):
		return &apiError{status: 409, code: CodeConflict, field: "id", msg: what + ": " + err.Error()}
	case errors.As(err, &se):
		return &apiError{status: 409, code: CodeState, msg: se.Error()}
	case errors.As(err, &ne):
		// Only its workflow decides when a node's job runs.
		return &apiError{status: 409, code: CodeState, msg: ne.Error()}
	case errors.As(err, &we):
		return &apiError{status: 409, code: CodeState, msg: we.Error()}
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
