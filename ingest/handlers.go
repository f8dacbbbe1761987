package ingest

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// openAPIDoc is the OpenAPI 3 description of the API, served at GET /v1/openapi.json.
//
//go:embed openapi.json
var openAPIDoc []byte

func (s *Server) healthz(ctx *fasthttp.RequestCtx, _ string) {
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"status":"ok"}` + "\n")
}

func (s *Server) readyz(ctx *fasthttp.RequestCtx, _ string) {
	rc, cancel := s.rctx(ctx)
	defer cancel()
	c := s.store.Client()
	if err := c.Do(rc, c.B().Ping().Build()).Error(); err != nil {
		s.logError(rc, "readiness: redis ping failed", err)
		writeError(ctx, &apiError{status: 503, code: CodeUnavailable, msg: "redis is not reachable"})
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"status":"ok"}` + "\n")
}

func (s *Server) metrics(ctx *fasthttp.RequestCtx, _ string) {
	if s.cfg.MetricsHandler == nil {
		writeError(ctx, &apiError{status: 404, code: CodeNotFound, msg: "metrics are not enabled"})
		return
	}
	s.cfg.MetricsHandler(ctx)
}

func (s *Server) openAPI(ctx *fasthttp.RequestCtx, _ string) {
	ctx.SetContentType("application/json")
	ctx.SetBody(openAPIDoc)
}

// mediaType is the request's Content-Type without parameters.
func mediaType(ctx *fasthttp.RequestCtx) []byte {
	ct := ctx.Request.Header.ContentType()
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return bytes.TrimSpace(ct)
}

func isJSON(mt []byte) bool {
	return len(mt) == 0 || bytes.EqualFold(mt, []byte("application/json")) ||
		len(mt) > 5 && bytes.EqualFold(mt[len(mt)-5:], []byte("+json"))
}

func isNDJSON(mt []byte) bool {
	return bytes.EqualFold(mt, []byte("application/x-ndjson")) || bytes.EqualFold(mt, []byte("application/jsonl"))
}

// requireJSON answers 415 and returns false unless the body is declared JSON (or not
// declared).
func requireJSON(ctx *fasthttp.RequestCtx) bool {
	if mt := mediaType(ctx); !isJSON(mt) {
		writeError(ctx, &apiError{status: 415, code: CodeUnsupported,
			msg: "Content-Type " + strconv.Quote(string(mt)) + " is not supported: send application/json"})
		return false
	}
	return true
}

// idempotencyKey returns the Idempotency-Key header ("" when absent).
func idempotencyKey(ctx *fasthttp.RequestCtx) (string, *apiError) {
	k := ctx.Request.Header.Peek("Idempotency-Key")
	if len(k) > maxIdempotencyKey {
		return "", invalid("", "the Idempotency-Key header is longer than "+strconv.Itoa(maxIdempotencyKey)+" bytes")
	}
	return string(k), nil
}

func jobWhat(id string) string { return "job " + strconv.Quote(id) }

// createJob serves POST /v1/jobs.
func (s *Server) createJob(ctx *fasthttp.RequestCtx, _ string) {
	if !requireJSON(ctx) || !s.admit(ctx, 0) { // no decoding while overloaded
		return
	}
	key, aerr := idempotencyKey(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	j, aerr := decodeCreate(ctx.PostBody(), key, s.maxPayload)
	if aerr == nil {
		aerr = s.checkEgress(j)
	}
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	ready := 0
	if readyAtOnce(j, s.now()) {
		ready = 1
	}
	if !s.admit(ctx, ready) {
		return
	}
	rc, cancel := s.rctx(ctx)
	res, err := s.store.Create(rc, []*job.Job{j})
	cancel()
	s.settle(ready, res)
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		s.storeError(ctx, jobWhat(j.ID), err)
		return
	}
	r := &res[0]
	if r.Conflict {
		var lookups int
		writeError(ctx, s.conflictError(ctx, j, &lookups))
		return
	}
	status := fasthttp.StatusOK
	if r.Created {
		status = fasthttp.StatusCreated
		ctx.Response.Header.Set(fasthttp.HeaderLocation, "/v1/jobs/"+j.ID)
	}
	writeJSON(ctx, status, wireCreated(j, r))
}

// batchItem is one job of a batch as decoded.
type batchItem struct {
	req JobRequest
	err *apiError
}

// createBatch serves POST /v1/jobs:batch: a JSON array of JobRequests, or NDJSON (one
// per line). Items that do not decode or validate get their own 400 (or 413); the others
// are created in one store call. The reply is 200 with a result per item, in order; the
// jobs in it have no payload.
func (s *Server) createBatch(ctx *fasthttp.RequestCtx, _ string) {
	mt := mediaType(ctx)
	ndjson := isNDJSON(mt)
	if !ndjson && !isJSON(mt) {
		writeError(ctx, &apiError{status: 415, code: CodeUnsupported,
			msg: "Content-Type " + strconv.Quote(string(mt)) + " is not supported: send application/json (an array) or application/x-ndjson"})
		return
	}
	if !s.admit(ctx, 0) { // no decoding while overloaded
		return
	}
	key, aerr := idempotencyKey(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	var items []batchItem
	if ndjson {
		items, aerr = decodeNDJSON(ctx.PostBody(), s.cfg.MaxBatch)
	} else {
		items, aerr = decodeArray(ctx.PostBody(), s.cfg.MaxBatch)
	}
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if len(items) == 0 {
		writeError(ctx, invalid("", "the batch holds no jobs"))
		return
	}

	reply := BatchReply{Results: make([]BatchResult, len(items))}
	jobs := make([]*job.Job, 0, len(items))
	idx := make([]int, 0, len(items))
	for i := range items {
		it := &items[i]
		if it.err == nil {
			if it.req.ID == "" && key != "" {
				it.req.ID = BatchIdempotencyID(key, i)
			}
			var j *job.Job
			if j, it.err = decodeJob(&it.req, s.maxPayload); it.err == nil {
				it.err = s.checkEgress(j)
			}
			if it.err == nil {
				jobs = append(jobs, j)
				idx = append(idx, i)
				continue
			}
		}
		reply.Results[i] = BatchResult{Status: it.err.status, Error: it.err.wire()}
		reply.Failed++
	}
	if len(jobs) > 0 {
		ready, now := 0, s.now()
		for _, j := range jobs {
			if readyAtOnce(j, now) {
				ready++
			}
		}
		if !s.admit(ctx, ready) {
			return
		}
		rc, cancel := s.rctx(ctx)
		res, err := s.store.Create(rc, jobs)
		cancel()
		s.settle(ready, res)
		answered := 0 // jobs Redis answered for: created, existing or conflicting
		lookups := 0  // stored jobs read to name what differs in conflicts
		for k, r := range res {
			if r.Err == nil && r.State == "" && err != nil {
				r.Err = err // not reached by the store before err
			}
			i := idx[k]
			switch {
			case r.Err != nil:
				if errors.Is(r.Err, shard.ErrNotReplicated) {
					answered++ // made on the primary: the reply says which jobs (ids generated too)
				}
				e := s.storeAPIError(ctx, jobWhat(jobs[k].ID), r.Err)
				reply.Results[i] = BatchResult{Status: e.status, Error: e.wire()}
				reply.Failed++
			case r.Conflict:
				answered++
				e := s.conflictError(ctx, jobs[k], &lookups)
				reply.Results[i] = BatchResult{Status: e.status, Error: e.wire()}
				reply.Failed++
			default:
				w := wireCreated(jobs[k], &res[k])
				w.Payload, w.PayloadBase64 = nil, "" // the client has it: not sent back 10,000 times
				status := fasthttp.StatusOK
				if r.Created {
					status = fasthttp.StatusCreated
					reply.Created++
				} else {
					reply.Existing++
				}
				reply.Results[i] = BatchResult{Status: status, Job: &w}
				answered++
			}
		}
		if err != nil && answered == 0 {
			// Redis answered for none: the whole request failed (and may be sent again).
			s.storeError(ctx, "batch", err)
			return
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, &reply)
}

func (e *apiError) wire() *Error { return &Error{Code: e.code, Message: e.msg, Field: e.field} }

func tooMany(limit int) *apiError {
	return &apiError{status: 413, code: CodeTooLarge,
		msg: "a batch holds at most " + strconv.Itoa(limit) + " jobs"}
}

// decodeArray decodes a JSON array of JobRequests in one pass. An item with a wrong type
// or an unknown field gets its own error; malformed JSON fails the whole request.
func decodeArray(body []byte, limit int) ([]batchItem, *apiError) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, invalid("", "the request body is empty: a JSON array of jobs is expected")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonError(err, body, nil)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, invalid("", "the body must be a JSON array of jobs (or NDJSON with Content-Type application/x-ndjson)")
	}
	items := make([]batchItem, 0, min(limit, 1+len(body)/64))
	for dec.More() {
		if len(items) == limit {
			return nil, tooMany(limit)
		}
		start := dec.InputOffset()
		items = append(items, batchItem{})
		it := &items[len(items)-1]
		if err := dec.Decode(&it.req); err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return nil, jsonError(err, body, nil)
			}
			raw := bytes.TrimLeft(body[start:dec.InputOffset()], " \t\r\n,")
			it.err = jsonError(err, raw, jobRequestType)
			it.req = JobRequest{}
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, jsonError(err, body, nil)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, invalid("", "unexpected data after the JSON array")
	}
	return items, nil
}

// decodeNDJSON decodes one JobRequest per non-blank line; each line gets its own error.
func decodeNDJSON(body []byte, limit int) ([]batchItem, *apiError) {
	items := make([]batchItem, 0, min(limit, 1+bytes.Count(body, []byte{'\n'})))
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if len(items) == limit {
			return nil, tooMany(limit)
		}
		items = append(items, batchItem{})
		it := &items[len(items)-1]
		if it.err = decodeJSON(line, &it.req); it.err != nil {
			it.req = JobRequest{}
		}
	}
	return items, nil
}

func (s *Server) getJob(ctx *fasthttp.RequestCtx, id string) {
	rc, cancel := s.rctx(ctx)
	info, err := s.store.Get(rc, id)
	cancel()
	if err != nil {
		s.storeError(ctx, jobWhat(id), err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, wireInfo(info))
}

// maxPage bounds limit in listings.
const maxPage = 1000

// pageArgs reads queue, limit and cursor.
func pageArgs(ctx *fasthttp.RequestCtx) (queue string, limit int, cursor string, aerr *apiError) {
	args := ctx.QueryArgs()
	if q := args.Peek("queue"); len(q) > 0 {
		queue = string(q)
		if err := job.ValidateID("queue", queue, job.MaxQueueLen); err != nil {
			return "", 0, "", normalizeError(err)
		}
	}
	if l := args.Peek("limit"); len(l) > 0 {
		n, err := strconv.Atoi(string(l))
		if err != nil || n < 1 || n > maxPage {
			return "", 0, "", invalid("limit", "must be an integer from 1 to "+strconv.Itoa(maxPage)+", got "+strconv.Quote(string(l)))
		}
		limit = n
	}
	return queue, limit, string(args.Peek("cursor")), nil
}

// listJobs serves GET /v1/jobs: one page of the jobs matching queue, state, type and an
// id prefix, with how much of the namespace has been searched.
func (s *Server) listJobs(ctx *fasthttp.RequestCtx, _ string) {
	queue, limit, cursor, aerr := pageArgs(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	args := ctx.QueryArgs()
	f := JobFilter{Queue: queue, State: string(args.Peek("state")), Type: string(args.Peek("type")), Prefix: string(args.Peek("prefix"))}
	if aerr := checkJobFilter(&f); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	rc, cancel := s.rctx(ctx)
	infos, next, prog, err := s.searchJobs(rc, &f, limit, cursor)
	cancel()
	if err != nil {
		s.storeError(ctx, "jobs", err)
		return
	}
	out := JobList{Jobs: make([]Job, len(infos)), NextCursor: next, Progress: prog}
	for i, info := range infos {
		out.Jobs[i] = wireInfo(info)
	}
	writeJSON(ctx, fasthttp.StatusOK, &out)
}

func (s *Server) patchJob(ctx *fasthttp.RequestCtx, id string) {
	if !requireJSON(ctx) {
		return
	}
	var p JobPatch
	if aerr := decodeJSON(ctx.PostBody(), &p); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	u, aerr := decodePatch(&p, s.maxPayload)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	rc, cancel := s.rctx(ctx)
	info, err := s.store.Update(rc, id, u)
	cancel()
	if err != nil {
		s.storeError(ctx, jobWhat(id), err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, wireInfo(info))
}

// jobAction serves DELETE /v1/jobs/{id} and POST /v1/jobs/{id}:pause and :resume.
func (s *Server) jobAction(ctx *fasthttp.RequestCtx, id string,
	op func(*shard.Store, context.Context, string) (job.State, bool, error)) {
	rc, cancel := s.rctx(ctx)
	state, changed, err := op(s.store, rc, id)
	cancel()
	if err != nil {
		s.storeError(ctx, jobWhat(id), err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, &StateReply{ID: id, State: string(state), Changed: changed})
}

func (s *Server) cancelJob(ctx *fasthttp.RequestCtx, id string) {
	s.jobAction(ctx, id, (*shard.Store).Cancel)
}

func (s *Server) pauseJob(ctx *fasthttp.RequestCtx, id string) {
	s.jobAction(ctx, id, (*shard.Store).Pause)
}

func (s *Server) resumeJob(ctx *fasthttp.RequestCtx, id string) {
	s.jobAction(ctx, id, (*shard.Store).Resume)
}

func (s *Server) triggerJob(ctx *fasthttp.RequestCtx, id string) {
	rc, cancel := s.rctx(ctx)
	run, err := s.store.Trigger(rc, id)
	cancel()
	if err != nil {
		s.storeError(ctx, jobWhat(id), err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, &TriggerReply{ID: id, Run: run})
}

// deleteJob serves POST /v1/jobs/{id}:delete: the job and every run of it are removed
// now, in whatever state (DELETE /v1/jobs/{id} cancels, and keeps the job for the
// retention period).
func (s *Server) deleteJob(ctx *fasthttp.RequestCtx, id string) {
	rc, cancel := s.rctx(ctx)
	err := s.store.Delete(rc, id)
	cancel()
	if err != nil {
		s.storeError(ctx, jobWhat(id), err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, &StateReply{ID: id, State: "deleted", Changed: true})
}

func (s *Server) jobRuns(ctx *fasthttp.RequestCtx, id string) {
	rc, cancel := s.rctx(ctx)
	runs, err := s.store.Runs(rc, id)
	cancel()
	if err != nil {
		s.storeError(ctx, jobWhat(id), err)
		return
	}
	out := wireRuns(runs)
	writeJSON(ctx, fasthttp.StatusOK, &out)
}

func (s *Server) listDead(ctx *fasthttp.RequestCtx, _ string) {
	queue, limit, cursor, aerr := pageArgs(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	rc, cancel := s.rctx(ctx)
	runs, next, err := s.store.Dead(rc, queue, limit, cursor)
	cancel()
	if err != nil {
		s.storeError(ctx, "dead runs", err)
		return
	}
	out := DeadList{Dead: make([]DeadRun, len(runs)), NextCursor: next}
	for i := range runs {
		out.Dead[i] = wireDead(&runs[i])
	}
	writeJSON(ctx, fasthttp.StatusOK, &out)
}

// validRun checks a run name: "<job id>:<due ms>".
func validRun(run string) *apiError {
	i := strings.LastIndexByte(run, ':')
	if i < 0 {
		return invalid("run", "must be <job id>:<due ms>, got "+strconv.Quote(run))
	}
	if err := job.ValidateRef("run", run[:i], job.MaxIDLen); err != nil {
		return normalizeError(err)
	}
	if _, err := strconv.ParseUint(run[i+1:], 10, 63); err != nil {
		return invalid("run", "must be <job id>:<due ms>, got "+strconv.Quote(run))
	}
	return nil
}

func (s *Server) requeueDead(ctx *fasthttp.RequestCtx, run string) {
	s.deadAction(ctx, run, "requeued", (*shard.Store).RequeueDead)
}

func (s *Server) deleteDead(ctx *fasthttp.RequestCtx, run string) {
	s.deadAction(ctx, run, "deleted", (*shard.Store).DeleteDead)
}

// deadAction serves a dead run's route; dispatch has checked run.
func (s *Server) deadAction(ctx *fasthttp.RequestCtx, run, state string, op func(*shard.Store, context.Context, string) error) {
	rc, cancel := s.rctx(ctx)
	err := op(s.store, rc, run)
	cancel()
	if err != nil {
		s.storeError(ctx, "dead run "+strconv.Quote(run), err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, &StateReply{ID: run, State: state, Changed: true})
}

func (s *Server) listQueues(ctx *fasthttp.RequestCtx, _ string) {
	rc, cancel := s.rctx(ctx)
	qs, err := s.store.Queues(rc)
	cancel()
	if err != nil {
		s.storeError(ctx, "queues", err)
		return
	}
	rates := s.rates.update(s.now(), qs)
	out := QueueList{Queues: make([]Queue, len(qs))}
	for i, q := range qs {
		out.Queues[i] = Queue{
			Name: q.Queue, Paused: q.Paused, Scheduled: q.Scheduled, Ready: q.Ready,
			InFlight: q.InFlight, Dead: q.Dead, Fired: q.Fired, FireRate: rates[i],
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, &out)
}

func (s *Server) pauseQueue(ctx *fasthttp.RequestCtx, q string) {
	s.queueAction(ctx, q, "paused", (*shard.Store).PauseQueue)
}

func (s *Server) resumeQueue(ctx *fasthttp.RequestCtx, q string) {
	s.queueAction(ctx, q, "active", (*shard.Store).ResumeQueue)
}

// queueAction serves a queue's route; dispatch has checked q.
func (s *Server) queueAction(ctx *fasthttp.RequestCtx, q, state string, op func(*shard.Store, context.Context, string) (bool, error)) {
	rc, cancel := s.rctx(ctx)
	changed, err := op(s.store, rc, q)
	cancel()
	if err != nil {
		s.storeError(ctx, "queue "+strconv.Quote(q), err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, &StateReply{ID: q, State: state, Changed: changed})
}

// checkEgress refuses a job whose target the egress policy does not allow (400 naming
// target.url and why).
func (s *Server) checkEgress(j *job.Job) *apiError {
	if j.Target == nil {
		return nil
	}
	if err := s.egress.CheckURL(j.Target.URL); err != nil {
		return invalid("target.url", err.Error())
	}
	return nil
}

// listBreakers serves GET /v1/breakers: the push executor's circuit breakers, shared
// through Redis.
func (s *Server) listBreakers(ctx *fasthttp.RequestCtx, _ string) {
	rc, cancel := s.rctx(ctx)
	bs, err := s.store.Breakers(rc, 0)
	cancel()
	if err != nil {
		s.storeError(ctx, "breakers", err)
		return
	}
	out := BreakerList{Breakers: make([]Breaker, len(bs))}
	for i, b := range bs {
		out.Breakers[i] = Breaker{Host: b.Host, State: b.State, Failures: b.Failures, Attempts: b.Attempts,
			WindowFailures: b.WindowFails, OpenedAt: timePtr(b.OpenedAt), ChangedAt: timePtr(b.ChangedAt),
			Transitions: b.Transitions}
	}
	writeJSON(ctx, fasthttp.StatusOK, &out)
}
