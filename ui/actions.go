package ui

import (
	"encoding/json"
	"net/url"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/ingest"
)

// The actions call the API with the session's scope: a read session's actions come back
// 403 from the API itself, whatever the browser sent.

// jobAction serves POST /ui/actions/job: id, action (pause, resume, trigger, cancel,
// delete). After a delete it goes back to the search: the job is gone.
func (u *UI) jobAction(ctx *fasthttp.RequestCtx, v *viewer) {
	args := ctx.PostArgs()
	id, action := string(args.Peek("id")), string(args.Peek("action"))
	c := u.client(v)
	rc, cancel := u.rctx(ctx)
	defer cancel()
	var err error
	switch action {
	case "pause":
		_, err = c.PauseJob(rc, id)
	case "resume":
		_, err = c.ResumeJob(rc, id)
	case "trigger":
		_, err = c.TriggerJob(rc, id)
	case "cancel":
		_, err = c.CancelJob(rc, id)
	case "delete":
		if _, err = c.DeleteJob(rc, id); err == nil {
			redirect(ctx, Prefix+"/jobs")
			return
		}
	default:
		u.fail(ctx, fasthttp.StatusBadRequest, "unknown job action "+jsonString(action))
		return
	}
	if err != nil {
		u.apiFail(ctx, err)
		return
	}
	redirect(ctx, Prefix+"/jobs/"+url.PathEscape(id))
}

// deadAction serves POST /ui/actions/dead: run, action (requeue, delete), queue (the
// listing to go back to).
func (u *UI) deadAction(ctx *fasthttp.RequestCtx, v *viewer) {
	args := ctx.PostArgs()
	run, action := string(args.Peek("run")), string(args.Peek("action"))
	c := u.client(v)
	rc, cancel := u.rctx(ctx)
	defer cancel()
	var err error
	switch action {
	case "requeue":
		_, err = c.RequeueDead(rc, run)
	case "delete":
		_, err = c.DeleteDead(rc, run)
	default:
		u.fail(ctx, fasthttp.StatusBadRequest, "unknown dead-letter action "+jsonString(action))
		return
	}
	if err != nil {
		u.apiFail(ctx, err)
		return
	}
	back := Prefix + "/dead"
	if q := string(args.Peek("queue")); q != "" {
		back += "?queue=" + url.QueryEscape(q)
	}
	redirect(ctx, back)
}

// queueAction serves POST /ui/actions/queue: queue, action (pause, resume).
func (u *UI) queueAction(ctx *fasthttp.RequestCtx, v *viewer) {
	args := ctx.PostArgs()
	q, action := string(args.Peek("queue")), string(args.Peek("action"))
	c := u.client(v)
	rc, cancel := u.rctx(ctx)
	defer cancel()
	var err error
	switch action {
	case "pause":
		_, err = c.PauseQueue(rc, q)
	case "resume":
		_, err = c.ResumeQueue(rc, q)
	default:
		u.fail(ctx, fasthttp.StatusBadRequest, "unknown queue action "+jsonString(action))
		return
	}
	if err != nil {
		u.apiFail(ctx, err)
		return
	}
	redirect(ctx, Prefix+"/")
}

// bulkRequest is the body of POST /ui/actions/bulk (from app.js).
type bulkRequest struct {
	Kind    string             `json:"kind"` // "jobs" or "dead"
	Request ingest.BulkRequest `json:"request"`
}

// bulkAction serves POST /ui/actions/bulk: one call of /v1/jobs:bulk or /v1/dead:bulk;
// the script calls again with the reply's cursor, showing the progress.
func (u *UI) bulkAction(ctx *fasthttp.RequestCtx, v *viewer) {
	var req bulkRequest
	if err := json.Unmarshal(ctx.PostBody(), &req); err != nil {
		u.fail(ctx, fasthttp.StatusBadRequest, "bad bulk request: "+err.Error())
		return
	}
	c := u.client(v)
	do := c.BulkJobs
	switch req.Kind {
	case "jobs":
	case "dead":
		do = c.BulkDead
	default:
		u.fail(ctx, fasthttp.StatusBadRequest, "kind must be jobs or dead")
		return
	}
	rc, cancel := u.rctx(ctx)
	r, err := do(rc, req.Request)
	cancel()
	if err != nil {
		u.apiFail(ctx, err)
		return
	}
	b, _ := json.Marshal(r)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}
