package ui

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"hash/maphash"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// events serves GET /ui/events?page=<page URL>&as=<viewer>&since=<version>: the page's live
// updates, as Server-Sent Events ("update" events whose id is the version of what the
// page then shows, and whose data is a JSON object, an update), checked every
// LiveEvery and sent when the page's version (UI.load) is no longer the one the page
// shows: since, the version the page was rendered with, or the Last-Event-ID of a
// stream the browser opens again by itself. With once=1, one update (the polling
// fallback), or 204 No Content when the page's version is since. The script closes the
// stream while its tab is hidden. The stream ends when the session ends, the client
// goes, or the server stops; when the page's job or workflow is gone (removed after its
// retention, or deleted), an "ended" event (with once=1, the API's 404) has the script
// reload the page, which says so. as is the tag of the viewer the page was rendered for
// (viewer.tag): a page of another session gets an "ended" event at once (with once=1,
// 205 Reset Content), and the script reloads it.
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
	since := string(ctx.QueryArgs().Peek("since"))
	if as := ctx.QueryArgs().Peek("as"); len(as) > 0 && string(as) != v.tag() {
		// The page is another session's (its tab was hidden while that session ended and
		// this one began): its forms carry that session's CSRF token, its buttons are that
		// session's. Its version may well be the data's: the script reloads it instead.
		if ctx.QueryArgs().Has("once") {
			ctx.SetStatusCode(fasthttp.StatusResetContent)
			return
		}
		ctx.SetContentType("text/event-stream")
		ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
		ctx.SetBodyString("event: ended\ndata: {}\n\n")
		return
	}
	if ctx.QueryArgs().Has("once") {
		rc, cancel := u.rctx(ctx)
		defer cancel()
		data, version, err := u.liveLoad(rc, v, name, id, q)
		if err != nil {
			u.apiFail(ctx, err)
			return
		}
		if version == since {
			ctx.SetStatusCode(fasthttp.StatusNoContent)
			return
		}
		up, err := u.renderUpdate(name, v, data, version, nil)
		var b []byte
		if err == nil {
			b, err = up.encode()
		}
		if err != nil {
			u.internal(ctx, err)
			return
		}
		ctx.SetContentType("application/json")
		ctx.SetBody(b)
		return
	}
	if last := ctx.Request.Header.Peek("Last-Event-ID"); len(last) > 0 {
		since = string(last) // the browser opened the stream again: what it had is newer
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	ctx.Response.Header.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	closing, every := u.api.Closing(), u.cfg.LiveEvery
	// The server's WriteTimeout bounds a whole response: the stream extends the write
	// deadline by it before each write instead, so that a stream lasts while a client
	// that stops reading is still dropped after it.
	conn, writeTimeout := ctx.Conn(), u.api.WriteTimeout()
	st := &stream{u: u, v: v, name: name, id: id, q: q, version: since}
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
				u.warnLive(name, err)
				_, _ = w.WriteString(": error\n\n") // a comment: keeps the stream, shows nothing
			case b != nil:
				_, _ = w.WriteString("event: update\nid: " + st.version + "\ndata: ")
				_, _ = w.Write(b)
				_, _ = w.WriteString("\n\n")
			case n%15 == 0:
				_, _ = w.WriteString(": keep-alive\n\n")
			default:
				// A comment of no text, each check: a client that went away (its tab
				// closed, or hidden) is found at the next writes (its host refuses the
				// first), not at the next keep-alive, 15 checks and loads of the page later.
				_, _ = w.WriteString(":\n")
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

// stream is the state of one page's event stream: the version of what the page shows,
// the fragments it has as they were sent, and, for a workflow's page, its nodes, which
// the next update is a patch of. It keeps hashes of them, not the page's HTML or data
// (2.5 MB for 10,000 nodes, each open tab).
type stream struct {
	u        *UI
	v        *viewer
	name, id string
	q        url.Values
	version  string
	frags    map[string]uint64 // fragment name → hash of its HTML; a fragment not known is not here
	shown    *nodePrint        // nil when not known (or not a workflow's page)
}

// next is the stream's n-th check (from 0): the update to send, or nil when there is
// none. Nothing is rendered while the page's version does not change; when it does, the
// update holds the fragments whose HTML changed (a reply may change in what the page
// does not show) and, on a workflow's page, its nodes that changed.
func (s *stream) next(ctx context.Context, n int) ([]byte, error) {
	if err := s.u.checkSession(ctx, s.v, n); err != nil {
		return nil, err
	}
	data, version, err := s.u.liveLoad(ctx, s.v, s.name, s.id, s.q)
	if err != nil {
		return nil, err
	}
	if version == s.version {
		if s.shown == nil {
			s.shown = s.u.printOf(data) // the page as it was rendered: what the next update patches
		}
		return nil, nil
	}
	up, err := s.u.renderUpdate(s.name, s.v, data, version, s.shown)
	if err != nil {
		return nil, err
	}
	if s.frags == nil {
		s.frags = map[string]uint64{}
	}
	if up.patch {
		// The table (and the drawing) are patched from now on: their HTML as sent is gone.
		delete(s.frags, "nodes")
		if data.(*workflowData).Graph != nil {
			delete(s.frags, "graph")
		}
	}
	for k, h := range up.Fragments {
		sum := maphash.String(s.u.seed, h)
		if old, ok := s.frags[k]; ok && old == sum {
			delete(up.Fragments, k)
			continue
		}
		s.frags[k] = sum
	}
	s.version, s.shown = version, up.print
	if len(up.Fragments) == 0 && len(up.Nodes) == 0 {
		// The page shows the same: no update (its version is behind the stream's, and a
		// stream opened again with it gets a whole update).
		return nil, nil
	}
	return up.encode()
}

// sharedLoad is a load of a page that its streams share: the streams of the same page
// (and scope), one per tab that shows it, use a load that is under way or was made less
// than half their interval ago, rather than each load the page (130 ms of CPU a check
// for a 10,000-node workflow): a page is loaded at most about twice an interval,
// however many tabs show it. Its data is only read once loaded.
type sharedLoad struct {
	done    chan struct{} // closed once loaded
	data    any
	version string
	err     error
}

// liveLoad is load for a stream's check: one shared with the page's other streams
// (sharedLoad). The load runs with ctx of the stream that made it; another that waits
// for it gives up with its own ctx.
func (u *UI) liveLoad(ctx context.Context, v *viewer, name, id string, q url.Values) (any, string, error) {
	key := string(v.scope) + "\x00" + name + "\x00" + id + "\x00" + q.Encode()
	u.loadsMu.Lock()
	l, ok := u.loads[key]
	if !ok {
		l = &sharedLoad{done: make(chan struct{})}
		u.loads[key] = l
	}
	u.loadsMu.Unlock()
	if ok {
		select {
		case <-l.done:
			return l.data, l.version, l.err
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
	}
	defer func() {
		close(l.done)
		// Kept for the other streams' checks during half an interval, then dropped
		// (with its data): the next check after that loads the page again.
		time.AfterFunc(u.cfg.LiveEvery/2, func() {
			u.loadsMu.Lock()
			if u.loads[key] == l {
				delete(u.loads, key)
			}
			u.loadsMu.Unlock()
		})
	}()
	l.data, l.version, l.err = u.load(ctx, v, name, id, q)
	return l.data, l.version, l.err
}

// checkSession re-checks the session before the stream's n-th check but the first
// (logout ends the stream).
func (u *UI) checkSession(ctx context.Context, v *viewer, n int) error {
	if v.cookie == "" || n == 0 {
		return nil
	}
	if _, err := u.store.GetSession(ctx, v.cookie); errors.Is(err, shard.ErrNotFound) {
		return errNoSession
	} else if err != nil {
		return err
	}
	return nil
}

// update is what a page's script applies: the version of what the page shows after it,
// fragments to put in place of the page's (name → HTML), and, for a workflow's page, the
// nodes that changed, each with its row of the node table and its node of the drawing,
// put in place of theirs: one node's end is a few hundred bytes instead of the whole
// table (2.4 MB for 10,000 nodes).
type update struct {
	Version   string            `json:"version"`
	Fragments map[string]string `json:"fragments,omitempty"`
	Nodes     []nodePatch       `json:"nodes,omitempty"`
	patch     bool              // of a workflow's nodes (Nodes may be empty)
	print     *nodePrint        // of the nodes after it (nil but on a workflow's page)
}

// nodePatch is a workflow's node that changed: its id, its row of the node table and
// its node of the drawing ("" when the graph is not drawn).
type nodePatch struct {
	ID    string `json:"id"`
	Row   string `json:"row"`
	Drawn string `json:"drawn,omitempty"`
}

// renderUpdate renders page name's update to data (of version): the changes from the
// nodes whose print is shown when data is a workflow of the same nodes, else every live
// fragment.
func (u *UI) renderUpdate(name string, v *viewer, data any, version string, shown *nodePrint) (*update, error) {
	d := defs[name]
	p := u.pageOf(v, name, d.title, data)
	up := &update{Version: version, print: u.printOf(data)}
	var err error
	if w, ok := data.(*workflowData); ok && up.print.sameNodes(shown) {
		up.patch = true
		live := []string{"workflow"}
		if w.Graph == nil {
			live = append(live, "graph") // the count per state, or "No nodes."
		}
		if up.Fragments, err = u.fragments(name, p, live); err != nil {
			return nil, err
		}
		t := u.pages[name]
		var b bytes.Buffer
		for i, n := range w.W.Nodes {
			if up.print.nodes[i] == shown.nodes[i] {
				continue
			}
			np := nodePatch{ID: n.ID}
			b.Reset()
			if err := t.ExecuteTemplate(&b, "node-row", n); err != nil {
				return nil, err
			}
			np.Row = b.String()
			if w.Graph != nil {
				b.Reset()
				if err := t.ExecuteTemplate(&b, "graph-node", w.Graph.Nodes[i]); err != nil {
					return nil, err
				}
				np.Drawn = b.String()
			}
			up.Nodes = append(up.Nodes, np)
		}
	} else if up.Fragments, err = u.fragments(name, p, d.live); err != nil {
		return nil, err
	}
	return up, nil
}

// encode is the update as it is sent.
func (up *update) encode() ([]byte, error) {
	// The fragments are HTML, sent without JSON's HTML escaping, which writes each '<'
	// and '>' as six bytes (a 10,000-node workflow's update went from 2.3 to 4.6 MB): the
	// update is parsed by the page's script, never put in a page as it is. One line (an
	// event's data): the encoder escapes newlines, and its own ending one is cut.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(up); err != nil {
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
	case "/jobs", "/dead", "/schedules", "/cluster", "/audit", "/workflows":
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

// warnLive logs a failed check of page's live stream, at most once a second for all
// streams (liveLog); the line says how many were left out since the last one.
func (u *UI) warnLive(page string, err error) {
	ok, n := u.liveLog.Take()
	if !ok {
		return
	}
	attrs := []any{"page", page, "error", err}
	if n > 0 {
		attrs = append(attrs, "suppressed", n)
	}
	u.log.Warn("live update", attrs...)
}
