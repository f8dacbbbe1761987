package ui

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// events serves GET /ui/events?page=<page URL>: the page's live fragments, as
// Server-Sent Events ("update" events whose data is a JSON object: fragment name → HTML)
// sent when they change, checked every LiveEvery; with once=1, one JSON object (the
// polling fallback). The script closes the stream while its tab is hidden. The stream
// ends when the session ends, the client goes, or the server stops; when the page's job
// or workflow is gone (removed after its retention, or deleted), an "ended" event (with
// once=1, the API's 404) has the script reload the page, which says so.
func (u *UI) events(ctx *fasthttp.RequestCtx, v *viewer) {
	target, err := url.Parse(string(ctx.QueryArgs().Peek("page")))
	if err != nil || !strings.HasPrefix(target.Path, Prefix+"/") {
		u.fail(ctx, fasthttp.StatusBadRequest, "page must be a dashboard URL")
		return
	}
	name, id, ok := pageOfPath(strings.TrimPrefix(target.EscapedPath(), Prefix))
	if !ok || len(defs[name].live) == 0 {
		u.fail(ctx, fasthttp.StatusBadRequest, "page has no live updates: "+target.Path)
		return
	}
	q := target.Query()
	if ctx.QueryArgs().Has("once") {
		rc, cancel := u.rctx(ctx)
		b, err := u.update(rc, v, name, id, q)
		cancel()
		if err != nil {
			u.apiFail(ctx, err)
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(b)
		return
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	ctx.Response.Header.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	closing, every := u.api.Closing(), u.cfg.LiveEvery
	// The server's WriteTimeout bounds a whole response: the stream extends the write
	// deadline by it before each write instead, so that a stream lasts while a client
	// that stops reading is still dropped after it.
	conn, writeTimeout := ctx.Conn(), u.api.WriteTimeout()
	st := &stream{u: u, v: v, name: name, id: id, q: q}
	// The writer runs after this handler returns: it uses copies, never ctx.
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for n := 0; ; n++ {
			bg, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			b, err := st.next(bg, n)
			cancel()
			if conn.SetWriteDeadline(time.Now().Add(writeTimeout)) != nil {
				return // the connection is closed
			}
			switch {
			case err == errNoSession, ingest.IsCode(err, ingest.CodeNotFound):
				// The session ended, or the page's job or workflow is gone (removed after
				// its retention, deleted): the script reloads the page, which says so.
				_, _ = w.WriteString("event: ended\ndata: {}\n\n")
				_ = w.Flush()
				return
			case err != nil:
				u.log.Warn("live update", "page", name, "error", err)
				_, _ = w.WriteString(": error\n\n") // a comment: keeps the stream, shows nothing
			case b != nil:
				_, _ = w.WriteString("event: update\ndata: ")
				_, _ = w.Write(b)
				_, _ = w.WriteString("\n\n")
			case n%15 == 0:
				_, _ = w.WriteString(": keep-alive\n\n")
			}
			if w.Flush() != nil {
				return // the client went away
			}
			select {
			case <-closing:
				return
			case <-tick.C:
			}
		}
	})
}

// stream is the state of one page's event stream: what it sent last.
type stream struct {
	u        *UI
	v        *viewer
	name, id string
	q        url.Values
	last     []byte
}

// next is the stream's n-th check (from 0): the update to send, or nil when the page's
// live parts did not change since the last one sent.
func (s *stream) next(ctx context.Context, n int) ([]byte, error) {
	b, err := s.u.refresh(ctx, s.v, s.name, s.id, s.q, n)
	if err != nil || bytes.Equal(b, s.last) {
		return nil, err
	}
	s.last = b
	return b, nil
}

// refresh re-checks the session (logout ends the stream) and renders the update.
func (u *UI) refresh(ctx context.Context, v *viewer, name, id string, q url.Values, n int) ([]byte, error) {
	if v.cookie != "" && n > 0 {
		if _, err := u.store.GetSession(ctx, v.cookie); errors.Is(err, shard.ErrNotFound) {
			return nil, errNoSession
		} else if err != nil {
			return nil, err
		}
	}
	return u.update(ctx, v, name, id, q)
}

// update loads page name and renders its live fragments as one JSON object.
func (u *UI) update(ctx context.Context, v *viewer, name, id string, q url.Values) ([]byte, error) {
	d := defs[name]
	data, err := d.load(u, ctx, u.client(v), q, id)
	if err != nil {
		return nil, err
	}
	frags, err := u.fragments(name, u.pageOf(v, name, d.title, data), d.live)
	if err != nil {
		return nil, err
	}
	// The fragments are HTML, sent without JSON's HTML escaping, which writes each '<'
	// and '>' as six bytes (a 10,000-node workflow's update went from 2.3 to 4.6 MB): the
	// update is parsed by the page's script, never put in a page as it is. One line (an
	// event's data): the encoder escapes newlines, and its own ending one is cut.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(frags); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// pageOfPath maps a dashboard path (after /ui, as sent) to its page and the id of its
// job or workflow.
func pageOfPath(p string) (name, id string, ok bool) {
	switch p {
	case "/":
		return "overview", "", true
	case "/jobs", "/dead", "/schedules", "/cluster", "/workflows":
		return p[1:], "", true
	}
	if raw, found := strings.CutPrefix(p, "/jobs/"); found {
		id, err := pathID(raw, "job", job.MaxIDLen)
		return "job", id, err == nil
	}
	if raw, found := strings.CutPrefix(p, "/workflows/"); found {
		id, err := pathID(raw, "workflow", job.MaxWorkflowIDLen)
		return "workflow", id, err == nil
	}
	return "", "", false
}
