package ui

import (
	"errors"
	"io"
	"io/fs"
	"mime"
	"net/url"
	"path"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/job"
)

// csp allows the dashboard's own scripts, styles and connections only: no inline
// script, no eval, no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// maxForm bounds the body of a dashboard request (forms and bulk actions).
const maxForm = 256 << 10

// maxDrain bounds the body of a refused request that is read and dropped before its
// connection closes.
const maxDrain = 1 << 20

// drainBody reads and drops a refused request's body of n bytes, up to maxDrain: a
// connection closed with a body still unread is reset, and a client still sending it
// then gets the reset instead of the answer (net/http's lingering close does the same).
func drainBody(ctx *fasthttp.RequestCtx, n int) {
	if n > maxDrain {
		return
	}
	if r := ctx.RequestBodyStream(); r != nil {
		_, _ = io.CopyN(io.Discard, r, int64(n))
	}
}

// Handler serves the paths under /ui.
func (u *UI) Handler(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	// The API reads bodies as streams: the length is checked before anything is read, and a
	// body of unknown length (chunked) is refused (browsers send the length of forms).
	switch cl := ctx.Request.Header.ContentLength(); {
	case cl > maxForm:
		drainBody(ctx, cl)
		u.fail(ctx, fasthttp.StatusRequestEntityTooLarge, "request too large")
		ctx.SetConnectionClose()
		return
	case cl < 0 && ctx.IsPost():
		u.fail(ctx, fasthttp.StatusLengthRequired, "a Content-Length is required")
		ctx.SetConnectionClose()
		return
	}
	// The raw path: a job id is one segment as sent, decoded once, so that an encoded
	// slash or dot stays inside the id (and fails its validation).
	p := strings.TrimPrefix(string(ctx.URI().PathOriginal()), Prefix)
	switch {
	case p == "":
		redirect(ctx, Prefix+"/")
		return
	case strings.HasPrefix(p, "/static/"):
		u.static(ctx)
		return
	case p == "/login":
		u.login(ctx)
		return
	}
	v, err := u.viewerOf(ctx)
	if errors.Is(err, errNoSession) {
		if ctx.IsGet() && !wantsJSON(ctx) && p != "/events" {
			redirect(ctx, Prefix+"/login?next="+url.QueryEscape(string(ctx.URI().RequestURI())))
			return
		}
		u.fail(ctx, fasthttp.StatusUnauthorized, "log in first")
		return
	}
	if err != nil {
		u.internal(ctx, err)
		return
	}
	h.Set(fasthttp.HeaderCacheControl, "no-store")
	if ctx.IsPost() {
		if !checkCSRF(ctx, v) {
			u.fail(ctx, fasthttp.StatusForbidden, "cross-site request refused (missing or wrong CSRF token, or another origin)")
			return
		}
		switch p {
		case "/logout":
			u.logout(ctx, v)
		case "/actions/job":
			u.jobAction(ctx, v)
		case "/actions/workflow":
			u.workflowAction(ctx, v)
		case "/actions/dead":
			u.deadAction(ctx, v)
		case "/actions/queue":
			u.queueAction(ctx, v)
		case "/actions/bulk":
			u.bulkAction(ctx, v)
		default:
			u.fail(ctx, fasthttp.StatusNotFound, "no such page")
		}
		return
	}
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Response.Header.Set("Allow", "GET, HEAD, POST")
		u.fail(ctx, fasthttp.StatusMethodNotAllowed, "method not allowed")
		return
	}
	switch {
	case p == "/":
		u.overview(ctx, v)
	case p == "/jobs":
		u.jobs(ctx, v)
	case strings.HasPrefix(p, "/jobs/"):
		id, err := pathID(strings.TrimPrefix(p, "/jobs/"), "job", job.MaxIDLen)
		if err != nil {
			u.fail(ctx, fasthttp.StatusBadRequest, err.Error())
			return
		}
		u.jobDetail(ctx, v, id)
	case p == "/workflows":
		u.workflows(ctx, v)
	case strings.HasPrefix(p, "/workflows/"):
		id, err := pathID(strings.TrimPrefix(p, "/workflows/"), "workflow", job.MaxWorkflowIDLen)
		if err != nil {
			u.fail(ctx, fasthttp.StatusBadRequest, err.Error())
			return
		}
		u.workflowDetail(ctx, v, id)
	case p == "/dead":
		u.dead(ctx, v)
	case p == "/schedules":
		u.schedules(ctx, v)
	case p == "/cluster":
		u.cluster(ctx, v)
	case p == "/audit":
		u.audit(ctx, v)
	case p == "/events":
		u.events(ctx, v)
	default:
		u.fail(ctx, fasthttp.StatusNotFound, "no such page")
	}
}

// pathID decodes the id of a job or workflow page: raw is one path segment as sent,
// percent-decoded once, so that an encoded slash or dot stays inside the id (and fails
// its validation). A workflow instance's '@' needs no escaping (%40 works too).
func pathID(raw, kind string, maxLen int) (string, error) {
	id, err := url.PathUnescape(raw)
	if err != nil || strings.Contains(raw, "/") {
		return "", errors.New("not a " + kind + " id: " + raw)
	}
	if err := job.ValidateRef("id", id, maxLen); err != nil {
		return "", err
	}
	return id, nil
}

// staticHandler serves the embedded assets; they change only with the binary.
func staticHandler(fsys fs.FS) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		name := strings.TrimPrefix(string(ctx.URI().PathOriginal()), Prefix+"/static/")
		if !fs.ValidPath(name) || strings.Contains(name, "%") {
			ctx.SetStatusCode(fasthttp.StatusNotFound)
			return
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			ctx.SetStatusCode(fasthttp.StatusNotFound)
			return
		}
		ct := mime.TypeByExtension(path.Ext(name))
		if ct == "" {
			ct = "application/octet-stream"
		}
		ctx.SetContentType(ct)
		ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "public, max-age=3600")
		ctx.SetBody(b)
	}
}

// fail answers an error: JSON for the script, a page otherwise.
func (u *UI) fail(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.SetStatusCode(status)
	if wantsJSON(ctx) || ctx.IsPost() && len(ctx.Request.Header.Peek("X-CSRF-Token")) > 0 {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"error":{"code":"ui","message":` + jsonString(msg) + `}}`)
		return
	}
	u.render(ctx, "error", &viewer{}, "Error", map[string]any{"Status": status, "Message": msg})
	ctx.SetStatusCode(status)
}

// apiFail answers an error of the API as the API gave it (status and message).
func (u *UI) apiFail(ctx *fasthttp.RequestCtx, err error) {
	var ae *ingest.APIError
	if errors.As(err, &ae) {
		u.fail(ctx, ae.Status, ae.Error())
		return
	}
	u.internal(ctx, err)
}

func (u *UI) internal(ctx *fasthttp.RequestCtx, err error) {
	u.log.ErrorContext(ctx, "dashboard request failed", "path", string(ctx.Path()), "error", err)
	u.fail(ctx, fasthttp.StatusInternalServerError, "internal error")
}
