package ui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/ui"
)

// liveUpdate is a live update as the page's script reads it.
type liveUpdate struct {
	Version   string            `json:"version"`
	Fragments map[string]string `json:"fragments"`
	Nodes     []struct {
		ID    string `json:"id"`
		Row   string `json:"row"`
		Drawn string `json:"drawn"`
	} `json:"nodes"`
}

// fragmentsOf returns the fragments of an update (a body of /ui/events?once=1).
func fragmentsOf(t *testing.T, body string) map[string]string {
	t.Helper()
	var u liveUpdate
	require.NoError(t, json.Unmarshal([]byte(body), &u), body)
	require.NotEmpty(t, u.Version)
	return u.Fragments
}

var liveVersion = regexp.MustCompile(`data-live-version="([^"]*)"`)

// versionOf returns the version a page was rendered with.
func versionOf(t *testing.T, body string) string {
	t.Helper()
	m := liveVersion.FindStringSubmatch(body)
	require.NotNil(t, m, "the page has a version")
	require.NotEmpty(t, m[1])
	return m[1]
}

// sse reads a page's event stream.
type sse struct {
	t *testing.T
	r *bufio.Reader
}

// open opens the stream of page (a dashboard URL) for a page that shows version since,
// with headers (name, value, ...).
func (br *browser) openStream(page, since string, headers ...string) *sse {
	br.t.Helper()
	req, err := http.NewRequest("GET", br.b.base+"/ui/events?page="+url.QueryEscape(page)+"&since="+url.QueryEscape(since), nil)
	require.NoError(br.t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := br.hc.Do(req)
	require.NoError(br.t, err)
	br.t.Cleanup(func() { res.Body.Close() })
	require.Equal(br.t, "text/event-stream", res.Header.Get("Content-Type"))
	return &sse{t: br.t.(*testing.T), r: bufio.NewReader(res.Body)}
}

// next returns the stream's next event: its name, id and data.
func (s *sse) next() (name, id, data string) {
	s.t.Helper()
	for {
		line, err := s.r.ReadString('\n')
		require.NoError(s.t, err)
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			name = line[len("event: "):]
		case strings.HasPrefix(line, "id: "):
			id = line[len("id: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		case line == "" && name != "":
			return name, id, data
		}
	}
}

// quiet reads the stream up to its first keep-alive, written by its first check when
// it sent nothing, and fails on an event before it.
func (s *sse) quiet() {
	s.t.Helper()
	for {
		line, err := s.r.ReadString('\n')
		require.NoError(s.t, err)
		require.False(s.t, strings.HasPrefix(line, "event: ") || strings.HasPrefix(line, "data: "), "sent while nothing changed: %.200s", line)
		if line == ": keep-alive\n" {
			return
		}
	}
}

// update returns the next event, an update, decoded.
func (s *sse) update() (liveUpdate, string) {
	s.t.Helper()
	name, id, data := s.next()
	require.Equal(s.t, "update", name, data)
	var u liveUpdate
	require.NoError(s.t, json.Unmarshal([]byte(data), &u), data)
	require.Equal(s.t, u.Version, id, "the event's id is its version (Last-Event-ID when the browser opens the stream again)")
	return u, data
}

// A live page renders and sends nothing while what it shows did not change: its
// version (a hash of the API's replies it was made of) is on the page; the stream sends
// an update only when it changes, each with its version as the event's id, and a poll
// with the page's version is 204.
func TestUI_LiveVersion(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, nil, ui.Config{})
	ctx := context.Background()
	_, err := tb.store.Create(ctx, []*job.Job{{ID: "v-1", Type: "t", Schedule: job.Schedule{Delay: 3600e9}}})
	require.NoError(t, err)
	br := tb.browser()
	p := br.get("/ui/jobs/v-1")
	v1 := versionOf(t, p.body)
	require.Equal(t, v1, versionOf(t, br.get("/ui/jobs/v-1").body), "the same job, the same version")

	poll := "/ui/events?once=1&page=%2Fui%2Fjobs%2Fv-1&since="
	p = br.get(poll + v1)
	require.Equal(t, http.StatusNoContent, p.status, "nothing changed: nothing to send")
	require.Empty(t, p.body)
	p = br.get(poll + "stale")
	require.Equal(t, 200, p.status)
	require.Contains(t, fragmentsOf(t, p.body)["job"], "scheduled")

	// The stream of the page as rendered: nothing until the job changes.
	s := br.openStream("/ui/jobs/v-1", v1)
	s.quiet()
	_, _, err = tb.store.Pause(ctx, "v-1")
	require.NoError(t, err)
	u, _ := s.update()
	id := u.Version
	require.NotEqual(t, v1, id)
	require.Contains(t, u.Fragments["job"], "paused")
	p = br.get(poll + id)
	require.Equal(t, http.StatusNoContent, p.status)

	// A stream the browser opens again by itself sends the last event's id: it wins
	// over the page's version in the URL (older).
	s = br.openStream("/ui/jobs/v-1", v1, "Last-Event-ID", id)
	s.quiet()
	_, _, err = tb.store.Resume(ctx, "v-1")
	require.NoError(t, err)
	u, _ = s.update()
	require.Contains(t, u.Fragments["job"], "scheduled", "the first update is the resume, not the pause it already has")
}

// A workflow's page gets the nodes that changed, each with its row of the table and its
// node of the drawing, not the whole table and drawing: every change of a node shows,
// one that moves no count of the workflow (ready to running) too.
func TestUI_LiveWorkflowPatch(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, nil, ui.Config{})
	ctx := context.Background()
	const wf = "etl-patch"
	_, err := tb.store.CreateWorkflow(ctx, etlWorkflow(wf))
	require.NoError(t, err)
	br := tb.browser()
	page := br.get("/ui/workflows/" + wf)
	require.Equal(t, 200, page.status, page.body)
	s := br.openStream("/ui/workflows/"+wf, versionOf(t, page.body))
	s.quiet()

	// extract's run is claimed: ready to running, the same nodes left.
	sh := tb.store.ShardOf(wf)
	claimed, err := tb.store.Claim(ctx, sh, "default", 10, "w1", "n1")
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	u, data := s.update()
	require.Len(t, u.Nodes, 1, data)
	require.Equal(t, "extract", u.Nodes[0].ID)
	require.Contains(t, u.Nodes[0].Row, `<tr data-node="extract">`)
	require.Contains(t, u.Nodes[0].Row, `<span class="badge running">running</span>`)
	require.Contains(t, u.Nodes[0].Drawn, `<a class="node running" href="/ui/jobs/`+wf+`@extract" data-node="extract">`)
	require.Equal(t, []string{"workflow"}, keys(u.Fragments), "the state and counts; not the table, nor the drawing")
	require.Contains(t, u.Fragments["workflow"], `<span class="badge running">1 running</span>`)

	// extract ends: running to succeeded, and transform is released.
	errs, err := tb.store.FinishRuns(ctx, sh, []shard.Finish{{Member: claimed[0].Member, Token: claimed[0].Token, Outcome: shard.Succeeded}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	u, data = s.update()
	require.Len(t, u.Nodes, 2, data)
	require.Equal(t, "extract", u.Nodes[0].ID)
	require.Contains(t, u.Nodes[0].Row, `<span class="badge succeeded">succeeded</span>`)
	require.Contains(t, u.Nodes[0].Drawn, `class="node succeeded"`)
	require.Equal(t, "transform", u.Nodes[1].ID)
	require.Contains(t, u.Nodes[1].Drawn, `class="node ready"`)
	// The page, loaded now, has the same row and drawn node.
	page = br.get("/ui/workflows/" + wf)
	for _, n := range u.Nodes {
		require.Contains(t, page.body, n.Row)
		require.Contains(t, page.body, n.Drawn)
	}

	// A workflow too large to draw: the counts per state (the graph's fragment) and the
	// rows.
	wide := &job.Workflow{ID: "wide-patch"}
	for i := range 401 {
		wide.Jobs = append(wide.Jobs, wfNode("n"+strconv.Itoa(i), ""))
	}
	_, err = tb.store.CreateWorkflow(ctx, wide)
	require.NoError(t, err)
	page = br.get("/ui/workflows/wide-patch")
	s = br.openStream("/ui/workflows/wide-patch", versionOf(t, page.body))
	s.quiet()
	claimed, err = tb.store.Claim(ctx, tb.store.ShardOf("wide-patch"), "default", 1, "w1", "n1")
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	u, data = s.update()
	require.Len(t, u.Nodes, 1, data)
	require.Empty(t, u.Nodes[0].Drawn)
	require.Equal(t, []string{"graph", "workflow"}, keys(u.Fragments))
	require.Contains(t, u.Fragments["graph"], `<span class="badge running">1 running</span>`)
	require.Less(t, len(data), 4096, "one node's row, not 401")
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

var liveURL = regexp.MustCompile(`data-live="([^"]*)"`)

// A live page says which session it was rendered for (the stream's "as"): a stream or a
// poll of it from another session (the tab was hidden while its session ended and
// another began: its forms carry the old CSRF token) has the page reloaded ("ended";
// 205 Reset Content), whatever its version, which may be the data's.
func TestUI_LivePageOfAnotherSession(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, testTokens, ui.Config{})
	_, err := tb.store.Create(context.Background(), []*job.Job{{ID: "as-1", Type: "t", Schedule: job.Schedule{Delay: 3600e9}}})
	require.NoError(t, err)
	br := tb.browser()
	br.login(readToken)
	p := br.get("/ui/jobs/as-1")
	v := versionOf(t, p.body)
	m := liveURL.FindStringSubmatch(p.body)
	require.NotNil(t, m)
	stream := strings.ReplaceAll(m[1], "&amp;", "&")
	require.Contains(t, stream, "&as=")
	require.Equal(t, http.StatusNoContent, br.get(stream+"&once=1&since="+v).status, "the same session: nothing changed")

	br.login(writeToken) // the same browser, another session
	require.Equal(t, http.StatusResetContent, br.get(stream+"&once=1&since="+v).status)
	req, err := http.NewRequest("GET", tb.base+stream+"&since="+v, nil)
	require.NoError(t, err)
	res, err := br.hc.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	s := &sse{t: t, r: bufio.NewReader(res.Body)}
	name, _, _ := s.next()
	require.Equal(t, "ended", name)

	// The page loaded again is the new session's.
	p = br.get("/ui/jobs/as-1")
	m = liveURL.FindStringSubmatch(p.body)
	stream = strings.ReplaceAll(m[1], "&amp;", "&")
	require.Equal(t, http.StatusNoContent, br.get(stream+"&once=1&since="+versionOf(t, p.body)).status)
}

// A stream whose client went away (a tab closed, or hidden: the script closes its
// stream) stops loading its page at its next checks, not after up to 15 of them (its
// keep-alive's interval): each check of a 10,000-node workflow's page costs 130 ms of CPU.
func TestUI_LiveStreamEndsWhenClientGoes(t *testing.T) {
	t.Parallel()
	m, _ := redistest.Mini(t)
	tb := setup(t, redistest.Backend{Name: redistest.Miniredis, Addrs: []string{m.Addr()}, Mini: m}, nil, ui.Config{LiveEvery: 100 * time.Millisecond})
	_, err := tb.store.Create(context.Background(), []*job.Job{{ID: "gone-1", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
	require.NoError(t, err)
	br := tb.browser()
	v := versionOf(t, br.get("/ui/jobs/gone-1").body)

	conn, err := net.Dial("tcp", strings.TrimPrefix(tb.base, "http://"))
	require.NoError(t, err)
	_, err = conn.Write([]byte("GET /ui/events?page=%2Fui%2Fjobs%2Fgone-1&since=" + v + " HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	s := &sse{t: t, r: bufio.NewReader(conn)}
	s.quiet() // the first check: nothing changed
	require.NoError(t, conn.Close())

	// Loading the job's page reads Redis: the stream's checks stop once it has found the
	// client gone.
	time.Sleep(500 * time.Millisecond)
	n := m.CommandCount()
	time.Sleep(time.Second)
	// (The Redis client pings its idle connections: a command or two.)
	require.Less(t, m.CommandCount()-n, 5, "the stream still loads its page a second after its client went (about 15 commands a check)")
}

// The streams of the same page (tabs that show it, each with its own stream) share its
// loads: a check of a 10,000-node workflow's page costs 130 ms of CPU, and ten tabs each
// loading it every second took more than a core.
func TestUI_LiveStreamsShareLoads(t *testing.T) {
	t.Parallel()
	m, _ := redistest.Mini(t)
	tb := setup(t, redistest.Backend{Name: redistest.Miniredis, Addrs: []string{m.Addr()}, Mini: m}, nil, ui.Config{LiveEvery: 100 * time.Millisecond})
	_, err := tb.store.Create(context.Background(), []*job.Job{{ID: "shared-1", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
	require.NoError(t, err)
	br := tb.browser()
	v := versionOf(t, br.get("/ui/jobs/shared-1").body)

	// commands counts the Redis commands of a second with n streams of the page open.
	commands := func(n int) int {
		for range n {
			s := br.openStream("/ui/jobs/shared-1", v)
			go func() {
				for {
					if _, err := s.r.ReadString('\n'); err != nil {
						return
					}
				}
			}()
		}
		time.Sleep(300 * time.Millisecond)
		c := m.CommandCount()
		time.Sleep(time.Second)
		return m.CommandCount() - c
	}
	one := commands(1)
	ten := commands(9) // and the one before
	t.Logf("Redis commands in a second: %d with one stream, %d with ten", one, ten)
	require.Less(t, ten, 3*one, "ten streams of the page load it as often as one, or twice as often")
}

// The audit log's page is live, as its live fragment says: its stream was refused (400:
// "page has no live updates", the page's path unknown to the stream), and the script
// fell back to polling, refused as well every 5 s, for as long as the page was open.
func TestUI_LiveAudit(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, testTokens, ui.Config{})
	_, err := tb.store.Create(context.Background(), []*job.Job{{ID: "audited-1", Type: "t", Schedule: job.Schedule{Delay: 3600e9}}})
	require.NoError(t, err)
	br := tb.browser()
	br.login(writeToken)
	p := br.get("/ui/audit")
	require.Equal(t, 200, p.status)
	v := versionOf(t, p.body)
	require.Equal(t, http.StatusNoContent, br.get("/ui/events?once=1&page=%2Fui%2Faudit&since="+v).status)
	s := br.openStream("/ui/audit", v)
	s.quiet()
	require.Equal(t, http.StatusSeeOther, br.post("/ui/actions/job", url.Values{"id": {"audited-1"}, "action": {"pause"}}).status)
	u, _ := s.update()
	require.Contains(t, u.Fragments["audit"], "job.pause")
}

// countHandler counts the log records whose message is msg.
type countHandler struct {
	msg string
	n   *atomic.Int64
}

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return nil
}
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countHandler) WithGroup(string) slog.Handler      { return h }

// A live stream whose checks fail (Redis down: every open tab's stream, every second)
// logs at most one line a second for all of them, with the count of the ones left out,
// not one a check: here a read session's stream of the audit log, which the API refuses
// it (403) at each of its 10 checks a second.
func TestUI_LiveErrorsLogRateLimited(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	log := slog.New(countHandler{msg: "live update", n: &n})
	tb := setupMini(t, testTokens, ui.Config{LiveEvery: 100 * time.Millisecond, Logger: log})
	br := tb.browser()
	br.login(readToken)
	for range 3 {
		s := br.openStream("/ui/audit", "")
		go func() {
			for {
				if _, err := s.r.ReadString('\n'); err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	require.LessOrEqual(t, n.Load(), int64(3), "lines logged in 1.5 s by 3 streams failing 10 times a second")
}
