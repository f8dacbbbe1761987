package ui_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/ui"
)

func TestUI_LoginSessionLogout(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		tb := setup(t, b, testTokens, ui.Config{})
		br := tb.browser()

		p := br.get("/ui/jobs?q=x")
		require.Equal(t, http.StatusSeeOther, p.status)
		require.Equal(t, "/ui/login?next=%2Fui%2Fjobs%3Fq%3Dx", p.header.Get("Location"))
		require.Equal(t, http.StatusUnauthorized, br.do("GET", "/ui/events?page=%2Fui%2F", nil).status)

		p = br.post("/ui/login", url.Values{"token": {"wrong"}})
		require.Equal(t, http.StatusUnauthorized, p.status)
		require.Contains(t, p.body, "unknown token")
		// A login from another site is refused.
		p = br.post("/ui/login", url.Values{"token": {writeToken}}, "Sec-Fetch-Site", "cross-site")
		require.Equal(t, http.StatusForbidden, p.status)

		p = br.post("/ui/login", url.Values{"token": {writeToken}, "next": {"/ui/cluster"}})
		require.Equal(t, http.StatusSeeOther, p.status)
		require.Equal(t, "/ui/cluster", p.header.Get("Location"))
		c := p.header.Get("Set-Cookie")
		require.Contains(t, c, "tock_session=")
		require.Contains(t, c, "HttpOnly")
		require.Contains(t, c, "SameSite=Strict")
		require.Contains(t, c, "path=/ui")
		p = br.get("/ui/cluster")
		require.Equal(t, 200, p.status)
		require.Contains(t, p.body, `id="shards"`)
		require.Contains(t, p.header.Get("Content-Security-Policy"), "script-src 'self'")
		require.Equal(t, "no-store", p.header.Get("Cache-Control"))

		// An open redirect is not followed.
		p = br.post("/ui/login", url.Values{"token": {writeToken}, "next": {"//evil.example/"}})
		require.Equal(t, "/ui/", p.header.Get("Location"))

		// That login made a new session: the old one's CSRF token is refused.
		require.Equal(t, http.StatusForbidden, br.post("/ui/logout", url.Values{}).status)
		require.Equal(t, 200, br.get("/ui/").status)
		p = br.post("/ui/logout", url.Values{})
		require.Equal(t, http.StatusSeeOther, p.status)
		require.Equal(t, http.StatusSeeOther, br.get("/ui/").status, "the session ended")
	})
}

func TestUI_ReadTokenCannotAct(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, testTokens, ui.Config{})
	ctx := context.Background()
	_, err := tb.store.Create(ctx, []*job.Job{{ID: "r1", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
	require.NoError(t, err)
	br := tb.browser()
	br.login(readToken)
	p := br.get("/ui/jobs/r1")
	require.Equal(t, 200, p.status)
	require.NotContains(t, p.body, `id="job-actions"`)
	require.Contains(t, p.body, "read only")
	require.NotContains(t, br.get("/ui/jobs").body, `class="bulk"`)

	// Whatever the browser sends, the API refuses: 403, and the job is unchanged.
	p = br.post("/ui/actions/job", url.Values{"id": {"r1"}, "action": {"pause"}})
	require.Equal(t, http.StatusForbidden, p.status, p.body)
	p = br.post("/ui/actions/queue", url.Values{"queue": {"default"}, "action": {"pause"}})
	require.Equal(t, http.StatusForbidden, p.status, p.body)
	body := `{"kind":"jobs","request":{"action":"cancel","ids":["r1"]}}`
	p = br.do("POST", "/ui/actions/bulk", nil)
	req, _ := http.NewRequest("POST", tb.base+"/ui/actions/bulk", strings.NewReader(body))
	req.Header.Set("X-CSRF-Token", br.csrf)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Accept", "application/json")
	res, err := br.hc.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	info, err := tb.store.Get(ctx, "r1")
	require.NoError(t, err)
	require.Equal(t, job.StateScheduled, info.State)
}

func TestUI_CrossSiteRefused(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, testTokens, ui.Config{})
	ctx := context.Background()
	_, err := tb.store.Create(ctx, []*job.Job{{ID: "c1", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
	require.NoError(t, err)
	br := tb.browser()
	br.login(writeToken)
	for name, hdr := range map[string][]string{
		"NoToken":       {"X-Skip", ""},
		"CrossSite":     {"Sec-Fetch-Site", "cross-site"},
		"SameSiteOther": {"Sec-Fetch-Site", "same-site"},
		"OtherOrigin":   {"Sec-Fetch-Site", "", "Origin", "http://evil.example"},
	} {
		form := url.Values{"id": {"c1"}, "action": {"pause"}}
		if name == "NoToken" {
			form.Set("csrf", "not-the-token")
		}
		p := br.post("/ui/actions/job", form, hdr...)
		require.Equal(t, http.StatusForbidden, p.status, name)
		require.Contains(t, p.body, "cross-site request refused", name)
	}
	info, err := tb.store.Get(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, job.StateScheduled, info.State)
	// The same request, same-origin with the token, works.
	p := br.post("/ui/actions/job", url.Values{"id": {"c1"}, "action": {"pause"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Equal(t, "/ui/jobs/c1", p.header.Get("Location"))
	info, err = tb.store.Get(ctx, "c1")
	require.NoError(t, err)
	require.Equal(t, job.StatePaused, info.State)
}

func TestUI_JobPathsAddressOneJob(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, nil, ui.Config{}) // no tokens: no login (tock dev)
	ctx := context.Background()
	_, err := tb.store.Create(ctx, []*job.Job{
		{ID: "a.b~c-d_e", Type: "t", Schedule: job.Schedule{Delay: time.Hour}},
		{ID: "x", Type: "t", Schedule: job.Schedule{Delay: time.Hour}},
	})
	require.NoError(t, err)
	br := tb.browser()
	p := br.get("/ui/jobs/a.b~c-d_e")
	require.Equal(t, 200, p.status)
	require.Contains(t, p.body, `<code id="job-id">a.b~c-d_e</code>`)
	p = br.get("/ui/jobs/a%2Eb%7Ec-d_e") // percent-encoded: the same id
	require.Equal(t, 200, p.status)
	require.Contains(t, p.body, `<code id="job-id">a.b~c-d_e</code>`)
	for _, path := range []string{"/ui/jobs/..", "/ui/jobs/%2E%2E", "/ui/jobs/x%2F..%2Fx", "/ui/jobs/x%2Fruns", "/ui/jobs/x%3Apause", "/ui/jobs/x/runs"} {
		p := br.get(path)
		require.Equal(t, http.StatusBadRequest, p.status, path)
	}
	require.Equal(t, http.StatusNotFound, br.get("/ui/jobs/nope").status)
	require.Equal(t, http.StatusNotFound, br.get("/ui/nowhere").status)
	require.Equal(t, http.StatusNotFound, br.get("/ui/static/../ui.go").status)
	p = br.get("/ui/static/vendor/uplot/uPlot.iife.min.js")
	require.Equal(t, 200, p.status)
	require.Contains(t, p.header.Get("Content-Type"), "javascript")
}

func TestUI_SearchExactAndPrefix(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, nil, ui.Config{})
	ctx := context.Background()
	_, err := tb.store.Create(ctx, []*job.Job{
		{ID: "order-1", Type: "mail", Schedule: job.Schedule{Delay: time.Hour}},
		{ID: "order-12", Type: "sms", Schedule: job.Schedule{Delay: time.Hour}},
		{ID: "invoice-1", Type: "mail", Schedule: job.Schedule{Delay: time.Hour}},
	})
	require.NoError(t, err)
	br := tb.browser()
	p := br.get("/ui/jobs?q=order-1")
	require.Contains(t, p.body, `id="exact"`)
	require.Contains(t, p.body, `href="/ui/jobs/order-12"`)
	require.NotContains(t, p.body, `href="/ui/jobs/invoice-1"`)
	require.Contains(t, p.body, "Searched 9 of 9 parts")
	p = br.get("/ui/jobs?type=mail")
	require.NotContains(t, p.body, `id="exact"`)
	require.Contains(t, p.body, `href="/ui/jobs/invoice-1"`)
	require.NotContains(t, p.body, `href="/ui/jobs/order-12"`)
	p = br.get("/ui/jobs?state=sleepy")
	require.Equal(t, http.StatusBadRequest, p.status)
	require.Contains(t, p.body, "unknown state")
}

func TestUI_LiveEvents(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, nil, ui.Config{})
	ctx := context.Background()
	_, err := tb.store.Create(ctx, []*job.Job{{ID: "live-1", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
	require.NoError(t, err)
	br := tb.browser()
	p := br.get("/ui/jobs/live-1")
	require.Contains(t, p.body, `data-live="/ui/events?page=%2Fui%2Fjobs%2Flive-1"`, "no session to name without tokens")

	// Polling: one JSON object of fragments.
	p = br.get("/ui/events?once=1&page=%2Fui%2Fjobs%2Flive-1")
	require.Equal(t, 200, p.status)
	frags := fragmentsOf(t, p.body)
	require.Contains(t, frags["job"], "scheduled")
	require.Contains(t, frags, "runs")
	// The fragments' HTML is sent as it is, not as \u003c... (six bytes for each '<',
	// doubling a large workflow's updates), and on one line (an event's data).
	require.NotContains(t, p.body, `\u003c`)
	require.Contains(t, p.body, "<")
	require.NotContains(t, p.body, "\n")

	// The stream: an update at once, another when the job changes.
	req, _ := http.NewRequest("GET", tb.base+"/ui/events?page=%2Fui%2Fjobs%2Flive-1", nil)
	res, err := br.hc.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	r := bufio.NewReader(res.Body)
	next := func() string {
		for {
			line, err := r.ReadString('\n')
			require.NoError(t, err)
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				return data
			}
		}
	}
	require.Contains(t, next(), "scheduled")
	_, _, err = tb.store.Pause(ctx, "live-1")
	require.NoError(t, err)
	require.Contains(t, next(), "paused")

	for _, bad := range []string{"/ui/events?page=%2Fui%2Fjobs", "/ui/events?page=http%3A%2F%2Fevil", "/ui/events?page=%2Fui%2Fjobs%2F..%2Fx"} {
		require.Equal(t, http.StatusBadRequest, br.get(bad).status, bad)
	}
}

func TestUI_NewValidates(t *testing.T) {
	t.Parallel()
	_, err := ui.New(ui.Config{})
	require.ErrorContains(t, err, "API is required")
	api, err := ingest.New(ingest.Config{Store: setupMini(t, nil, ui.Config{}).store})
	require.NoError(t, err)
	_, err = ui.New(ui.Config{API: api, SessionTTL: time.Second})
	require.ErrorContains(t, err, "SessionTTL")
	_, err = ui.New(ui.Config{API: api, LiveEvery: time.Millisecond})
	require.ErrorContains(t, err, "LiveEvery")
}

func TestUI_BodyBounds(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, nil, ui.Config{})
	br := tb.browser()
	p := br.post("/ui/actions/job", url.Values{"id": {strings.Repeat("x", 300<<10)}, "action": {"pause"}})
	require.Equal(t, http.StatusRequestEntityTooLarge, p.status)
	req, _ := http.NewRequest("POST", tb.base+"/ui/actions/job", struct{ io.Reader }{strings.NewReader("id=x&action=pause")})
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	res, err := br.hc.Do(req) // no length: sent chunked
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusLengthRequired, res.StatusCode)
}

// The job page's Delete button removes the job and goes back to the search; a read
// session sees no button and its delete is refused by the API (403).
func TestUI_DeleteJob(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, testTokens, ui.Config{})
	ctx := context.Background()
	_, err := tb.store.Create(ctx, []*job.Job{{ID: "d1", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
	require.NoError(t, err)

	reader := tb.browser()
	reader.login(readToken)
	p := reader.get("/ui/jobs/d1")
	require.Equal(t, 200, p.status)
	require.NotContains(t, p.body, `id="act-delete"`)
	require.NotContains(t, reader.get("/ui/jobs").body, `<option value="delete">`)
	p = reader.post("/ui/actions/job", url.Values{"id": {"d1"}, "action": {"delete"}})
	require.Equal(t, http.StatusForbidden, p.status, p.body)
	_, err = tb.store.Get(ctx, "d1")
	require.NoError(t, err)

	writer := tb.browser()
	writer.login(writeToken)
	p = writer.get("/ui/jobs/d1")
	require.Contains(t, p.body, `id="act-delete"`)
	require.Contains(t, p.body, `data-confirm="Delete job d1 and all its runs now?`)
	require.Contains(t, writer.get("/ui/jobs").body, `<option value="delete">Delete</option>`)
	p = writer.post("/ui/actions/job", url.Values{"id": {"d1"}, "action": {"delete"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Equal(t, "/ui/jobs", p.header.Get("Location"))
	_, err = tb.store.Get(ctx, "d1")
	require.ErrorIs(t, err, shard.ErrNotFound)
	p = writer.post("/ui/actions/job", url.Values{"id": {"d1"}, "action": {"delete"}})
	require.Equal(t, http.StatusNotFound, p.status, p.body)
}

// A live stream outlives the server's WriteTimeout (which bounds one response): each
// write gets the timeout afresh. Here the timeout is 300ms and the stream writes at each
// check, every 100ms (an empty comment), its keep-alive after 15 of them, then an
// update: both after the first deadline.
func TestUI_StreamOutlivesWriteTimeout(t *testing.T) {
	t.Parallel()
	m, _ := redistest.Mini(t)
	tb := setupAPI(t, redistest.Backend{Name: redistest.Miniredis, Addrs: []string{m.Addr()}, Mini: m},
		ingest.Config{WriteTimeout: 300 * time.Millisecond}, ui.Config{LiveEvery: 100 * time.Millisecond})
	ctx := context.Background()
	_, err := tb.store.Create(ctx, []*job.Job{{ID: "long-1", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
	require.NoError(t, err)
	br := tb.browser()
	req, _ := http.NewRequest("GET", tb.base+"/ui/events?page=%2Fui%2Fjobs%2Flong-1", nil)
	res, err := br.hc.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	r := bufio.NewReader(res.Body)
	line := func() string {
		l, err := r.ReadString('\n')
		require.NoError(t, err, "the stream ended")
		return l
	}
	for !strings.HasPrefix(line(), "data: ") { // the first update
	}
	for line() != ": keep-alive\n" { // written 1.5s in: the first deadline has passed
	}
	_, _, err = tb.store.Pause(ctx, "long-1")
	require.NoError(t, err)
	for {
		if data, ok := strings.CutPrefix(line(), "data: "); ok {
			require.Contains(t, data, "paused")
			break
		}
	}
}

// routeRecorder records the route labels of the API's Metrics.
type routeRecorder struct {
	mu     sync.Mutex
	routes map[string]bool
}

func (r *routeRecorder) HTTPRequest(route string, _ int, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routes[route] = true
}

// The dashboard's requests are labelled by method and mount in the API's metrics
// (tock_http_requests_total{route}): a method the client makes up is "other", or every
// request with a new one would add series that are never removed.
func TestUI_MetricsRouteLabel(t *testing.T) {
	t.Parallel()
	m, _ := redistest.Mini(t)
	rec := &routeRecorder{routes: map[string]bool{}}
	tb := setupAPI(t, redistest.Backend{Name: redistest.Miniredis, Addrs: []string{m.Addr()}, Mini: m},
		ingest.Config{Metrics: rec}, ui.Config{})
	for _, method := range []string{"GET", "BREW", "X-1", "X-2"} {
		req, err := http.NewRequest(method, tb.base+"/ui/workflows", nil)
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	mounted := map[string]bool{}
	for r := range rec.routes {
		if strings.HasSuffix(r, " /ui") {
			mounted[r] = true
		}
	}
	require.Equal(t, map[string]bool{"GET /ui": true, "other /ui": true}, mounted)
}
