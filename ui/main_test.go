package ui_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/ui"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// Tokens of the tests' servers.
const (
	readToken  = "reader-secret"
	writeToken = "writer-secret"
)

var testTokens = []ingest.Token{{Secret: readToken, Scope: ingest.ScopeRead}, {Secret: writeToken, Scope: ingest.ScopeWrite}}

// bundle is an API server with the dashboard mounted, listening on loopback.
type bundle struct {
	t     testing.TB
	store *shard.Store
	ui    *ui.UI
	base  string // http://127.0.0.1:port
}

func setup(t testing.TB, b redistest.Backend, tokens []ingest.Token, cfg ui.Config) *bundle {
	t.Helper()
	return setupAPI(t, b, ingest.Config{Tokens: tokens}, cfg)
}

// setupAPI is setup with the API's config (Store and Addr are filled in).
func setupAPI(t testing.TB, b redistest.Backend, icfg ingest.Config, cfg ui.Config) *bundle {
	t.Helper()
	rc := b.Client(t)
	store, err := shard.Open(context.Background(), rc, shard.Config{Namespace: redistest.Namespace(t, b), Shards: 8})
	require.NoError(t, err)
	icfg.Store, icfg.Addr = store, "127.0.0.1:0"
	api, err := ingest.New(icfg)
	require.NoError(t, err)
	cfg.API = api
	if cfg.LiveEvery == 0 {
		cfg.LiveEvery = 100 * time.Millisecond
	}
	u, err := ui.Mount(cfg)
	require.NoError(t, err)
	require.NoError(t, api.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, api.Stop(ctx))
	})
	return &bundle{t: t, store: store, ui: u, base: "http://" + api.Addr()}
}

func setupMini(t *testing.T, tokens []ingest.Token, cfg ui.Config) *bundle {
	t.Helper()
	m, _ := redistest.Mini(t)
	return setup(t, redistest.Backend{Name: redistest.Miniredis, Addrs: []string{m.Addr()}, Mini: m}, tokens, cfg)
}

// browser is an HTTP client that keeps cookies and does not follow redirects, sending
// the headers a browser sends on same-origin requests.
type browser struct {
	t    testing.TB
	b    *bundle
	hc   *http.Client
	csrf string
}

func (b *bundle) browser() *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(b.t, err)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	b.t.Cleanup(hc.CloseIdleConnections)
	return &browser{t: b.t, b: b, hc: hc}
}

type page struct {
	status int
	body   string
	header http.Header
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]*)">`)

func (br *browser) do(method, path string, form url.Values, headers ...string) page {
	br.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, br.b.base+path, body)
	require.NoError(br.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := br.hc.Do(req)
	require.NoError(br.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(br.t, err)
	p := page{status: res.StatusCode, body: string(b), header: res.Header}
	if m := csrfMeta.FindStringSubmatch(p.body); m != nil && m[1] != "" {
		br.csrf = m[1]
	}
	return p
}

func (br *browser) get(path string) page { return br.do("GET", path, nil) }

func (br *browser) post(path string, form url.Values, headers ...string) page {
	if form.Get("csrf") == "" && br.csrf != "" {
		form.Set("csrf", br.csrf)
	}
	return br.do("POST", path, form, headers...)
}

// login logs in with token and loads the overview (for its CSRF token).
func (br *browser) login(token string) {
	br.t.Helper()
	p := br.post("/ui/login", url.Values{"token": {token}, "next": {"/ui/"}})
	require.Equal(br.t, http.StatusSeeOther, p.status, p.body)
	require.Equal(br.t, 200, br.get("/ui/").status)
}
