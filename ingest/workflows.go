package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// The workflow endpoints (/v1/workflows). A workflow lives in the store's workflow hash;
// a scheduled workflow's definition is a recurring job of type job.WorkflowType whose
// payload is the workflow, and whose runs start its instances, "<id>@<due ms>". The
// definition's pause, resume, trigger and delete are its job's.

// WorkflowMetrics counts what the API learns of workflows. When Config.Metrics also
// implements it, the server calls it; its methods are called from many goroutines at
// once. Workflows end inside Redis scripts (a node's run ends, and its workflow with it),
// which the API does not see: it counts the ends it makes itself, by cancel.
type WorkflowMetrics interface {
	// WorkflowCreated is called for each workflow created (not for an existing id);
	// scheduled is set for a scheduled workflow's definition.
	WorkflowCreated(scheduled bool)
	// WorkflowCancelled is called when a cancel ended a running workflow.
	WorkflowCancelled()
	// WorkflowRetried is called when a retry started a failed or cancelled workflow again.
	WorkflowRetried()
}

func (s *Server) workflowMetrics() WorkflowMetrics {
	m, _ := s.cfg.Metrics.(WorkflowMetrics)
	return m
}

func workflowWhat(id string) string { return "workflow " + strconv.Quote(id) }

// createWorkflow serves POST /v1/workflows.
func (s *Server) createWorkflow(ctx *fasthttp.RequestCtx, _ string) {
	if !requireJSON(ctx) || !s.admit(ctx, 0) { // no decoding while overloaded
		return
	}
	key, aerr := idempotencyKey(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	var r WorkflowRequest
	if aerr := decodeJSON(ctx.PostBody(), &r); aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if r.ID == "" && key != "" {
		r.ID = IdempotencyID(key)
	}
	w, aerr := decodeWorkflow(&r, s.maxPayload, s.checkEgress)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	if w.ID == "" {
		w.ID = job.NewID()
	}
	// Validated before the admission's count of its roots: on a copy, which the store's
	// own normalising does not see (normalising twice is not the same as once).
	probe := *w
	probe.Jobs = slices.Clone(w.Jobs)
	if err := probe.Normalize(s.store.Config().MaxNodes, s.maxPayload); err != nil {
		writeError(ctx, normalizeError(err))
		return
	}
	roots := 0 // runs made ready at once: the roots of a workflow that is not scheduled
	if w.Schedule == nil {
		for _, n := range w.Jobs {
			if len(n.DependsOn) == 0 {
				roots++
			}
		}
	}
	if !s.admit(ctx, roots) {
		return
	}
	rc, cancel := s.rctx(ctx)
	defer cancel()
	res, err := s.store.CreateWorkflow(rc, w)
	if s.cfg.MaxBacklog > 0 && !res.Created {
		s.admitted.Add(-int64(roots))
	}
	switch {
	case errors.Is(err, shard.ErrWorkflowIDTaken):
		writeError(ctx, otherKind(w))
		return
	case err != nil:
		s.storeError(ctx, workflowWhat(w.ID), err)
		return
	case res.Conflict:
		writeError(ctx, s.workflowConflict(rc, w))
		return
	}
	status := fasthttp.StatusOK
	if res.Created {
		status = fasthttp.StatusCreated
		ctx.Response.Header.Set(fasthttp.HeaderLocation, "/v1/workflows/"+w.ID)
		if m := s.workflowMetrics(); m != nil {
			m.WorkflowCreated(w.Schedule != nil)
		}
	}
	writeJSON(ctx, status, &WorkflowCreated{ID: res.ID, Shard: int(res.Shard), State: string(res.State),
		Scheduled: w.Schedule != nil, Nodes: len(w.Jobs)})
}

// decodeWorkflow converts a WorkflowRequest into a workflow for the store, which
// validates and normalises it (job.Workflow.Normalize: its errors name the node's
// field, "jobs[2].depends_on"). What only the wire form can get wrong (durations,
// payloads over maxPayload) is checked here, naming the field the same way, and so is
// each node's job by check (the egress policy), when not nil.
func decodeWorkflow(r *WorkflowRequest, maxPayload int, check func(*job.Job) *apiError) (*job.Workflow, *apiError) {
	w := &job.Workflow{ID: r.ID, Overlap: job.Overlap(r.Overlap), Misfire: job.Misfire(r.Misfire),
		Jobs: make([]job.Node, len(r.Jobs))}
	var aerr *apiError
	if w.MisfireAfter, aerr = parseDuration("misfire_after", r.MisfireAfter); aerr != nil {
		return nil, aerr
	}
	if r.Schedule != nil {
		sch, aerr := decodeSchedule(r.Schedule)
		if aerr != nil {
			return nil, aerr
		}
		w.Schedule = &sch
	}
	for i := range r.Jobs {
		n := &r.Jobs[i]
		at := "jobs[" + strconv.Itoa(i) + "]"
		inNode := func(e *apiError) *apiError {
			e.field = at + "." + e.field
			if n.ID != "" {
				e.msg = "node " + strconv.Quote(n.ID) + ": " + e.msg
			}
			return e
		}
		jr := JobRequest{ID: n.ID, Queue: n.Queue, Type: n.Type, Target: n.Target, Payload: n.Payload,
			PayloadBase64: n.PayloadBase64, Priority: n.Priority, Retry: n.Retry, Timeout: n.Timeout,
			Visibility: n.Visibility, Overlap: n.Overlap, Misfire: n.Misfire, MisfireAfter: n.MisfireAfter}
		if n.Schedule != nil {
			jr.Schedule = *n.Schedule
		}
		j, aerr := buildJob(&jr, maxPayload)
		if aerr != nil {
			return nil, inNode(aerr)
		}
		if check != nil {
			if aerr := check(j); aerr != nil {
				return nil, inNode(aerr)
			}
		}
		w.Jobs[i] = job.Node{Job: *j, DependsOn: n.DependsOn, Rule: job.Rule(n.Rule)}
	}
	return w, nil
}

// otherKind is the 409 of a workflow whose id the other kind has: a scheduled
// definition for a workflow without a schedule, a workflow for a scheduled one. The
// store keeps them apart (a definition is a job, a workflow its own hash) and refuses
// the second in the script that would store it (shard.ErrWorkflowIDTaken), so that one
// id names one workflow and GET /v1/workflows/{id} shows it.
func otherKind(w *job.Workflow) *apiError {
	if w.Schedule != nil {
		return &apiError{status: 409, code: CodeConflict, field: "id",
			msg: workflowWhat(w.ID) + " exists, without a schedule: a scheduled workflow needs another id"}
	}
	return &apiError{status: 409, code: CodeConflict, field: "id",
		msg: workflowWhat(w.ID) + " exists as a scheduled workflow: a workflow without a schedule needs another id"}
}

// maxNodeLookups bounds the node jobs one conflict reads to name the nodes that differ.
const maxNodeLookups = 20

// workflowConflict is the 409 of a create whose id is taken by another definition,
// naming what differs as far as a few reads tell: `workflow "x" exists with a different
// definition: nodes "a" and "b" differ`. w is the workflow as the store normalised it.
func (s *Server) workflowConflict(ctx context.Context, w *job.Workflow) *apiError {
	e := &apiError{status: 409, code: CodeConflict, field: "id", msg: workflowWhat(w.ID) + " exists with a different definition"}
	if w.Schedule != nil {
		info, err := s.store.Get(ctx, w.ID)
		if err == nil {
			if fs := differingDefinitions(w, info); len(fs) > 0 {
				e.msg += ": its " + joinAnd(fs) + " differ"
			}
		}
		return e
	}
	info, err := s.store.Workflow(ctx, w.ID)
	if err != nil {
		return e
	}
	stored := map[string]shard.NodeInfo{}
	for _, n := range info.Nodes {
		stored[n.ID] = n
	}
	var diff []string
	lookups := 0
	for _, n := range w.Jobs {
		sn, ok := stored[n.ID]
		delete(stored, n.ID)
		switch {
		case !ok:
			diff = append(diff, strconv.Quote(n.ID)+" (not in it)")
		case sn.Rule != n.Rule || !slices.Equal(sortedCopy(sn.DependsOn), sortedCopy(n.DependsOn)):
			diff = append(diff, strconv.Quote(n.ID)+" (its dependencies or rule)")
		case lookups < maxNodeLookups:
			lookups++
			if j, err := s.store.Get(ctx, sn.JobID); err == nil {
				if fs := differingFields(&n.Job, &j.Job); len(fs) > 0 {
					diff = append(diff, strconv.Quote(n.ID)+" (its "+joinAnd(fs)+")")
				}
			}
		}
	}
	for id := range stored {
		diff = append(diff, strconv.Quote(id)+" (only in it)")
	}
	if len(diff) > 0 {
		slices.Sort(diff[len(diff)-len(stored):])
		e.msg += ": nodes " + joinAnd(diff)
	}
	return e
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// differingDefinitions names what differs between scheduled workflow w (normalised)
// and the stored definition job info.
func differingDefinitions(w *job.Workflow, info *shard.Info) []string {
	var stored job.Workflow
	if info.Type != job.WorkflowType || json.Unmarshal(info.Payload, &stored) != nil || stored.Schedule == nil {
		return nil
	}
	var out []string
	add := func(field string, same bool) {
		if !same {
			out = append(out, field)
		}
	}
	add("schedule", scheduleKey(*w.Schedule) == scheduleKey(*stored.Schedule))
	add("overlap", w.Overlap == stored.Overlap)
	add("misfire", w.Misfire == stored.Misfire)
	add("misfire_after", w.MisfireAfter.Milliseconds() == stored.MisfireAfter.Milliseconds())
	a, _ := json.Marshal(w.Jobs)
	b, _ := json.Marshal(stored.Jobs)
	add("jobs", string(a) == string(b))
	return out
}

// definition returns scheduled workflow id's definition job, or ErrWorkflowNotFound.
func (s *Server) definition(ctx context.Context, id string) (*shard.Info, error) {
	if strings.IndexByte(id, job.NodeSep) >= 0 || len(id) > job.MaxScheduledWorkflowIDLen {
		return nil, shard.ErrWorkflowNotFound
	}
	info, err := s.store.Get(ctx, id)
	switch {
	case errors.Is(err, shard.ErrNotFound):
		return nil, shard.ErrWorkflowNotFound
	case err != nil:
		return nil, err
	case info.Type != job.WorkflowType || info.Queue != job.WorkflowQueue:
		return nil, shard.ErrWorkflowNotFound
	}
	return info, nil
}

// getWorkflow serves GET /v1/workflows/{id}: a workflow (an instance too) with every
// node, or a scheduled workflow's definition.
func (s *Server) getWorkflow(ctx *fasthttp.RequestCtx, id string) {
	rc, cancel := s.rctx(ctx)
	defer cancel()
	info, err := s.store.Workflow(rc, id)
	if err == nil {
		writeJSON(ctx, fasthttp.StatusOK, wireWorkflow(info))
		return
	}
	if errors.Is(err, shard.ErrWorkflowNotFound) {
		var def *shard.Info
		if def, err = s.definition(rc, id); err == nil {
			writeJSON(ctx, fasthttp.StatusOK, wireDefinition(def))
			return
		}
	}
	s.storeError(ctx, workflowWhat(id), err)
}

func wireWorkflow(info *shard.WorkflowInfo) *Workflow {
	w := &Workflow{ID: info.ID, Shard: int(info.Shard), State: string(info.State), CreatedAt: timePtr(info.CreatedAt),
		EndedAt: timePtr(info.EndedAt), ExpiresAt: timePtr(info.Expires), Held: info.Held,
		Nodes: make([]Node, len(info.Nodes)), Counts: map[string]int{}}
	for i, n := range info.Nodes {
		w.Nodes[i] = Node{ID: n.ID, JobID: n.JobID, State: string(n.State), Rule: string(n.Rule), DependsOn: n.DependsOn,
			Attempts: n.Attempts, ReleasedAt: timePtr(n.ReleasedAt), EndedAt: timePtr(n.EndedAt), ResultSize: n.ResultSize}
		w.Counts[string(n.State)]++
	}
	return w
}

// wireDefinition converts a scheduled workflow's definition job.
func wireDefinition(info *shard.Info) *Workflow {
	w := &Workflow{ID: info.ID, Shard: int(info.Shard), State: string(job.WorkflowScheduled),
		CreatedAt: timePtr(info.CreatedAt), ExpiresAt: timePtr(info.Expires), JobState: string(info.State),
		NextRunAt: timePtr(info.NextRunAt)}
	sch := encodeSchedule(info.Schedule)
	w.Schedule = &sch
	var def job.Workflow
	if json.Unmarshal(info.Payload, &def) == nil {
		w.Overlap, w.Misfire = string(def.Overlap), string(def.Misfire)
		w.MisfireAfter = durString(def.MisfireAfter)
		w.Definition = encodeWorkflow(&def)
	}
	return w
}

// encodeWorkflow is the request that creates w.
func encodeWorkflow(w *job.Workflow) *WorkflowRequest {
	r := &WorkflowRequest{ID: w.ID, Jobs: make([]NodeRequest, len(w.Jobs)), Overlap: string(w.Overlap),
		Misfire: string(w.Misfire), MisfireAfter: durString(w.MisfireAfter)}
	if w.Schedule != nil {
		sch := encodeSchedule(*w.Schedule)
		r.Schedule = &sch
	}
	for i := range w.Jobs {
		n := &w.Jobs[i]
		j := encodeJob(&n.Job)
		r.Jobs[i] = NodeRequest{ID: n.ID, Queue: j.Queue, Type: j.Type, Target: j.Target, Payload: j.Payload,
			PayloadBase64: j.PayloadBase64, Priority: j.Priority, Retry: j.Retry, Timeout: j.Timeout,
			Visibility: j.Visibility, DependsOn: n.DependsOn, Rule: string(n.Rule)}
	}
	return r
}

// workflowStates are the states GET /v1/workflows filters on.
var workflowStates = []job.WorkflowState{job.WorkflowRunning, job.WorkflowSucceeded, job.WorkflowFailed,
	job.WorkflowCancelled, job.WorkflowScheduled}

// listWorkflows serves GET /v1/workflows?state=&prefix=&limit=&cursor=: the workflows
// and instances, or with state=scheduled the scheduled definitions; prefix keeps those
// whose id starts with it (`<def>@`: the instances of definition def).
func (s *Server) listWorkflows(ctx *fasthttp.RequestCtx, _ string) {
	args := ctx.QueryArgs()
	if q := args.Peek("queue"); len(q) > 0 {
		writeError(ctx, invalid("queue", "workflows are not listed by queue"))
		return
	}
	_, limit, cursor, aerr := pageArgs(ctx)
	if aerr != nil {
		writeError(ctx, aerr)
		return
	}
	state := job.WorkflowState(args.Peek("state"))
	if state != "" && !slices.Contains(workflowStates, state) {
		writeError(ctx, invalid("state", "must be running, succeeded, failed, cancelled or scheduled, got "+strconv.Quote(string(state))))
		return
	}
	prefix := string(args.Peek("prefix"))
	if err := job.ValidateWorkflowPrefix("prefix", prefix); err != nil {
		writeError(ctx, normalizeError(err))
		return
	}
	rc, cancel := s.rctx(ctx)
	defer cancel()
	out := WorkflowList{Workflows: []WorkflowSummary{}}
	if state == job.WorkflowScheduled {
		if strings.IndexByte(prefix, job.NodeSep) >= 0 {
			// A definition's id has no '@': none matches, and the listing is complete.
			writeJSON(ctx, fasthttp.StatusOK, &out)
			return
		}
		page, err := s.store.List(rc, shard.ListFilter{Queue: job.WorkflowQueue, Limit: limit, Cursor: cursor})
		if err != nil {
			s.storeError(ctx, "workflows", err)
			return
		}
		for _, info := range page.Jobs {
			if info.Type != job.WorkflowType || !strings.HasPrefix(info.ID, prefix) {
				continue
			}
			d := wireDefinition(info)
			ws := WorkflowSummary{ID: d.ID, State: d.State, CreatedAt: d.CreatedAt, Schedule: d.Schedule,
				JobState: d.JobState, NextRunAt: d.NextRunAt}
			if d.Definition != nil {
				ws.Nodes = len(d.Definition.Jobs)
			}
			out.Workflows = append(out.Workflows, ws)
		}
		out.NextCursor = page.Next
		writeJSON(ctx, fasthttp.StatusOK, &out)
		return
	}
	page, err := s.store.ListWorkflows(rc, shard.WorkflowFilter{State: state, Prefix: prefix, Limit: limit, Cursor: cursor})
	if err != nil {
		s.storeError(ctx, "workflows", err)
		return
	}
	for _, w := range page.Workflows {
		out.Workflows = append(out.Workflows, WorkflowSummary{ID: w.ID, State: string(w.State), Nodes: w.Nodes,
			Left: w.Left, CreatedAt: timePtr(w.CreatedAt), EndedAt: timePtr(w.EndedAt), Held: w.Held})
	}
	out.NextCursor = page.Next
	writeJSON(ctx, fasthttp.StatusOK, &out)
}

// cancelWorkflow serves POST /v1/workflows/{id}:cancel. A scheduled workflow's
// definition is cancelled as its job is (no more instances start; running ones go on).
func (s *Server) cancelWorkflow(ctx *fasthttp.RequestCtx, id string) {
	rc, cancel := s.rctx(ctx)
	defer cancel()
	state, changed, err := s.store.CancelWorkflow(rc, id)
	if errors.Is(err, shard.ErrWorkflowNotFound) {
		if _, derr := s.definition(rc, id); derr == nil {
			js, ch, err := s.store.Cancel(rc, id)
			if err != nil {
				s.storeError(ctx, workflowWhat(id), err)
				return
			}
			writeJSON(ctx, fasthttp.StatusOK, &StateReply{ID: id, State: string(js), Changed: ch})
			return
		}
	}
	if err != nil {
		s.storeError(ctx, workflowWhat(id), err)
		return
	}
	if m := s.workflowMetrics(); m != nil && changed {
		m.WorkflowCancelled()
	}
	writeJSON(ctx, fasthttp.StatusOK, &StateReply{ID: id, State: string(state), Changed: changed})
}

// retryWorkflow serves POST /v1/workflows/{id}:retry.
func (s *Server) retryWorkflow(ctx *fasthttp.RequestCtx, id string) {
	rc, cancel := s.rctx(ctx)
	defer cancel()
	state, changed, err := s.store.RetryWorkflow(rc, id)
	if errors.Is(err, shard.ErrWorkflowNotFound) {
		if _, derr := s.definition(rc, id); derr == nil {
			writeError(ctx, &apiError{status: 409, code: CodeState,
				msg: workflowWhat(id) + " is a scheduled workflow's definition, which has nothing to retry: retry one of its instances (" + id + "@<due ms>)"})
			return
		}
	}
	if err != nil {
		s.storeError(ctx, workflowWhat(id), err)
		return
	}
	if m := s.workflowMetrics(); m != nil && changed {
		m.WorkflowRetried()
	}
	writeJSON(ctx, fasthttp.StatusOK, &StateReply{ID: id, State: string(state), Changed: changed})
}

// definitionAction runs op on scheduled workflow id's definition job; a 404 when id
// names none (a workflow that is not scheduled has no schedule to pause).
func (s *Server) definitionAction(ctx *fasthttp.RequestCtx, id, verb string, op func(context.Context) (any, error)) {
	rc, cancel := s.rctx(ctx)
	defer cancel()
	if _, err := s.definition(rc, id); err != nil {
		if errors.Is(err, shard.ErrWorkflowNotFound) {
			msg := "scheduled workflow " + strconv.Quote(id) + " not found: only a scheduled workflow's definition can be " + verb
			writeError(ctx, &apiError{status: 404, code: CodeNotFound, msg: msg})
			return
		}
		s.storeError(ctx, workflowWhat(id), err)
		return
	}
	reply, err := op(rc)
	if err != nil {
		s.storeError(ctx, workflowWhat(id), err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, reply)
}

func (s *Server) pauseWorkflow(ctx *fasthttp.RequestCtx, id string) {
	s.definitionAction(ctx, id, "paused", func(rc context.Context) (any, error) {
		st, ch, err := s.store.Pause(rc, id)
		return &StateReply{ID: id, State: string(st), Changed: ch}, err
	})
}

func (s *Server) resumeWorkflow(ctx *fasthttp.RequestCtx, id string) {
	s.definitionAction(ctx, id, "resumed", func(rc context.Context) (any, error) {
		st, ch, err := s.store.Resume(rc, id)
		return &StateReply{ID: id, State: string(st), Changed: ch}, err
	})
}

func (s *Server) triggerWorkflow(ctx *fasthttp.RequestCtx, id string) {
	s.definitionAction(ctx, id, "triggered", func(rc context.Context) (any, error) {
		run, err := s.store.Trigger(rc, id)
		r := &WorkflowTriggerReply{ID: id, Run: run}
		if _, due, ok := shard.SplitMember(run); ok {
			r.Instance = id + string(job.NodeSep) + strconv.FormatInt(due, 10)
		}
		return r, err
	})
}

func (s *Server) deleteWorkflow(ctx *fasthttp.RequestCtx, id string) {
	s.definitionAction(ctx, id, "deleted", func(rc context.Context) (any, error) {
		return &StateReply{ID: id, State: "deleted", Changed: true}, s.store.Delete(rc, id)
	})
}

// workflowResult serves GET /v1/workflows/{id}/nodes/{node}/result: the bytes a
// succeeded node's handler returned, as they are (application/json when they are JSON,
// application/octet-stream otherwise). p holds the workflow and node ids (nodeParamJoin).
func (s *Server) workflowResult(ctx *fasthttp.RequestCtx, p string) {
	wf, node := nodeParamSplit(p)
	rc, cancel := s.rctx(ctx)
	defer cancel()
	res, ok, err := s.store.NodeResult(rc, wf, node)
	if err != nil {
		s.storeError(ctx, workflowWhat(wf), err)
		return
	}
	if !ok {
		// Why there is none: no workflow, no such node, or a node without a result.
		info, err := s.store.Workflow(rc, wf)
		if err != nil {
			s.storeError(ctx, workflowWhat(wf), err)
			return
		}
		msg := "node " + strconv.Quote(node) + " of " + workflowWhat(wf) + " not found"
		for _, n := range info.Nodes {
			if n.ID == node {
				msg = "node " + strconv.Quote(node) + " of " + workflowWhat(wf) + " has no result: it is " + string(n.State)
				if n.State == job.NodeSucceeded {
					msg += ", and its handler returned none"
				}
			}
		}
		writeError(ctx, &apiError{status: 404, code: CodeNotFound, field: "node", msg: msg})
		return
	}
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	if json.Valid(res) {
		ctx.SetContentType("application/json")
	} else {
		ctx.SetContentType("application/octet-stream")
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetBody(res)
}
