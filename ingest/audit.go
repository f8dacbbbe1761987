package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/shard"
)

// The audit log: every management action made through the API (and so through the
// dashboard, which acts through the API) is recorded in Redis with who made it, what it
// was, its result, when and from where (shard.Store.Audit), and read back with
// GET /v1/audit. Creates and the run endpoints are the data path, not management, and
// are not recorded.

// auditActions names the audited endpoints' actions, by route name.
var auditActions = map[string]string{
	"PATCH " + patterns[rJob]:        "job.update",
	"DELETE " + patterns[rJob]:       "job.cancel",
	"POST " + patterns[rJobPause]:    "job.pause",
	"POST " + patterns[rJobResume]:   "job.resume",
	"POST " + patterns[rJobTrigger]:  "job.trigger",
	"POST " + patterns[rJobDelete]:   "job.delete",
	"DELETE " + patterns[rDeadRun]:   "dead.delete",
	"POST " + patterns[rDeadRequeue]: "dead.requeue",
	"POST " + patterns[rQueuePause]:  "queue.pause",
	"POST " + patterns[rQueueResume]: "queue.resume",
	"POST " + patterns[rJobsBulk]:    "jobs.bulk",
	"POST " + patterns[rDeadBulk]:    "dead.bulk",

	"POST " + patterns[rWorkflowCancel]:  "workflow.cancel",
	"POST " + patterns[rWorkflowRetry]:   "workflow.retry",
	"POST " + patterns[rWorkflowPause]:   "workflow.pause",
	"POST " + patterns[rWorkflowResume]:  "workflow.resume",
	"POST " + patterns[rWorkflowTrigger]: "workflow.trigger",
	"POST " + patterns[rWorkflowDelete]:  "workflow.delete",
}

// actorKey is the user value holding who makes a request: set by authorize from the
// bearer token, or by ServeFor.
type actorKey struct{}

type actor struct {
	who, via, remote string
}

// Anonymous is who acts when the server has no tokens.
const Anonymous = "anonymous"

// TokenWho is how the audit log names the holder of a token secret: "token:" and the
// first 12 hex digits of its SHA-256. It identifies the token without revealing it.
func TokenWho(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return tokenWho(sum)
}

func tokenWho(sum [sha256.Size]byte) string { return "token:" + hex.EncodeToString(sum[:6]) }

// ServeFor is ServeAs for a caller the audit log should name: who (see TokenWho; "" is
// Anonymous), via ("ui" for the dashboard) and remote (the client's address).
func (s *Server) ServeFor(ctx *fasthttp.RequestCtx, scope Scope, who, via, remote string) {
	ctx.SetUserValue(actorKey{}, actor{who: who, via: via, remote: remote})
	s.ServeAs(ctx, scope)
}

// Record appends an action made outside the API's routes (the dashboard's logins and
// logouts) to the audit log; an error is logged, not returned: an action is not undone
// because its record failed.
func (s *Server) Record(ctx context.Context, e shard.AuditEntry) {
	if e.Who == "" {
		e.Who = Anonymous
	}
	rc, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RedisTimeout)
	defer cancel()
	if err := s.store.Audit(rc, e, s.cfg.AuditMax); err != nil {
		s.logError(ctx, "audit record failed", err, "action", e.Action)
	}
}

// audit records the request served by ep, when ep is a management action that was
// made (done, or refused by the job's state: 404, 409) rather than malformed.
func (s *Server) audit(ctx *fasthttp.RequestCtx, ep *endpoint, p string) {
	action, ok := auditActions[ep.name]
	if !ok {
		return
	}
	a, _ := ctx.UserValue(actorKey{}).(actor)
	if a.via == "" {
		a.via = "api"
	}
	if a.remote == "" {
		a.remote = ctx.RemoteAddr().String()
	}
	if a.who == "" && len(s.tokens) == 0 {
		a.who = Anonymous
	}
	target, result := p, "ok"
	status := ctx.Response.StatusCode()
	switch status {
	case 400, 411, 413, 415, 431:
		return // a malformed request asked for nothing: not an action
	}
	if strings.HasSuffix(action, ".bulk") {
		target = bulkTarget(ctx.Request.Body())
	}
	if status >= 300 {
		var er ErrorReply
		_ = json.Unmarshal(ctx.Response.Body(), &er)
		result = strconv.Itoa(status) + " " + er.Error.Code
	} else if strings.HasSuffix(action, ".bulk") {
		var r BulkReply
		if json.Unmarshal(ctx.Response.Body(), &r) == nil {
			result = "ok: " + strconv.Itoa(r.Matched) + " matched, " + strconv.Itoa(r.Changed) + " changed, " + strconv.Itoa(r.Failed) + " failed"
		}
	}
	s.Record(ctx, shard.AuditEntry{Who: a.who, Via: a.via, Action: action, Target: target, Result: result, Remote: a.remote})
}

// bulkTarget summarizes a bulk request: its action and ids or filter.
func bulkTarget(body []byte) string {
	var req BulkRequest
	if json.Unmarshal(body, &req) != nil {
		return "(not a bulk request)"
	}
	var b strings.Builder
	b.WriteString(req.Action)
	switch {
	case len(req.IDs) > 0:
		b.WriteString(" ids: ")
		for i, id := range req.IDs {
			if i == 5 {
				b.WriteString(" (+" + strconv.Itoa(len(req.IDs)-5) + " more)")
				break
			}
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(id)
		}
	case req.Filter != nil:
		b.WriteString(" filter:")
		f := req.Filter
		for _, kv := range [][2]string{{"queue", f.Queue}, {"state", f.State}, {"type", f.Type}, {"prefix", f.Prefix}} {
			if kv[1] != "" {
				b.WriteString(" " + kv[0] + "=" + kv[1])
			}
		}
		if req.Cursor != "" {
			b.WriteString(" (next page)")
		}
	}
	return b.String()
}

// AuditEntry is one entry of the audit log (GET /v1/audit).
type AuditEntry struct {
	ID     string    `json:"id"`     // the cursor of the entries older than this one
	Time   time.Time `json:"time"`   // when, on the Redis clock
	Who    string    `json:"who"`    // "token:<hash prefix>" or "anonymous"
	Via    string    `json:"via"`    // "api" or "ui"
	Action string    `json:"action"` // job.pause, dead.requeue, jobs.bulk, login...
	Target string    `json:"target"` // job id, run, queue, bulk ids or filter
	Result string    `json:"result"` // "ok" or "<status> <error code>"
	Remote string    `json:"remote"` // the client's address
}

// AuditPage is the reply of GET /v1/audit: entries newest first.
type AuditPage struct {
	Entries    []AuditEntry `json:"entries"`
	NextCursor string       `json:"next_cursor,omitempty"`
}

// DefaultAuditLimit is the page size of GET /v1/audit without limit.
const DefaultAuditLimit = 100

// listAudit serves GET /v1/audit?limit=&cursor=.
func (s *Server) listAudit(ctx *fasthttp.RequestCtx, _ string) {
	args := ctx.QueryArgs()
	limit := DefaultAuditLimit
	if v := args.Peek("limit"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 1 || n > shard.MaxAuditPage {
			writeError(ctx, invalid("limit", "want 1 to "+strconv.Itoa(shard.MaxAuditPage)))
			return
		}
		limit = n
	}
	rc, cancel := s.rctx(ctx)
	defer cancel()
	es, next, err := s.store.ReadAudit(rc, string(args.Peek("cursor")), limit)
	if err != nil {
		s.storeError(ctx, "audit log", err)
		return
	}
	page := AuditPage{Entries: make([]AuditEntry, len(es)), NextCursor: next}
	for i, e := range es {
		page.Entries[i] = AuditEntry{ID: e.ID, Time: e.Time, Who: e.Who, Via: e.Via, Action: e.Action, Target: e.Target, Result: e.Result, Remote: e.Remote}
	}
	writeJSON(ctx, 200, page)
}

// Audit returns a page of the audit log, newest first: up to limit entries (0: the
// server's default, 100) older than cursor ("" from the newest) (GET /v1/audit).
func (c *Client) Audit(ctx context.Context, limit int, cursor string) (AuditPage, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var p AuditPage
	_, err := c.do(ctx, http.MethodGet, "/v1/audit", q, nil, nil, &p)
	return p, err
}
