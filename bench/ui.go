package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/ui"
)

// UIConfig configures the ui scenario.
type UIConfig struct {
	Common
	Jobs    int // jobs loaded before measuring (spread over Queues queues; 1% cron)
	Queues  int // default 10
	Payload int
	Samples int  // requests per page measured (after one warm-up). Default 20
	NoLoad  bool // measure the namespace as it is (loaded by an earlier run with --keep)
}

// UIPage is the latency of one page or API call, in ms.
type UIPage struct {
	Name    string  `json:"name"`
	URL     string  `json:"url"`
	Samples int     `json:"samples"`
	P50     float64 `json:"p50_ms"`
	P99     float64 `json:"p99_ms"`
	Max     float64 `json:"max_ms"`
	Bytes   int     `json:"bytes"` // of the last reply
}

// UIResult is the result of the ui scenario.
type UIResult struct {
	Scenario  string   `json:"scenario"`
	Backend   string   `json:"backend"`
	Shards    int      `json:"shards"`
	Jobs      int      `json:"jobs"`
	LoadSecs  float64  `json:"load_seconds,omitempty"`
	Pages     []UIPage `json:"pages"`
	MaxPageMs float64  `json:"max_page_p99_ms"` // the worst p99 of the dashboard pages
}

// UI loads cfg.Jobs jobs, starts the API with the dashboard in this process and measures
// the latency of the dashboard's pages and of the API calls behind them, as a logged-in
// browser sees them (a session, over loopback HTTP).
func UI(ctx context.Context, cfg UIConfig) (*UIResult, error) {
	if cfg.Jobs < 1 {
		return nil, errors.New("bench ui: --jobs must be positive")
	}
	if cfg.Queues <= 0 {
		cfg.Queues = 10
	}
	if cfg.Samples <= 0 {
		cfg.Samples = 20
	}
	cfg.Dispatchers = 0
	e, err := connect(ctx, cfg.Common, false)
	if err != nil {
		return nil, err
	}
	defer e.close(ctx)
	res := &UIResult{Scenario: "ui", Backend: e.backend, Shards: e.store.Shards(), Jobs: cfg.Jobs}
	id := func(i int) string { return "u" + strconv.Itoa(i) }
	queue := func(i int) string { return "q" + strconv.Itoa(i%cfg.Queues) }
	if !cfg.NoLoad {
		body := payload(cfg.Payload)
		start := time.Now().Add(time.Hour)
		step := float64(24*time.Hour) / float64(cfg.Jobs)
		p := newProgress(cfg.Progress, "load", cfg.Jobs)
		took, err := e.createAll(ctx, cfg.Jobs, p.update, func(i int) *job.Job {
			j := &job.Job{ID: id(i), Queue: queue(i), Type: "t" + strconv.Itoa(i%7), Payload: body,
				Schedule: job.Schedule{At: start.Add(time.Duration(float64(i) * step))}}
			if i%100 == 0 {
				j.Schedule = job.Schedule{Cron: strconv.Itoa(i/100%60) + " * * * *", TimeZone: "Europe/Paris"}
			}
			return j
		})
		if err != nil {
			return nil, fmt.Errorf("bench ui: load: %w", err)
		}
		res.LoadSecs = round(took.Seconds())
	}

	const secret = "bench-ui-secret"
	api, err := ingest.New(ingest.Config{Store: e.store, Addr: "127.0.0.1:0", Tokens: []ingest.Token{{Secret: secret, Scope: ingest.ScopeWrite}}})
	if err != nil {
		return nil, err
	}
	if _, err := ui.Mount(ui.Config{API: api}); err != nil {
		return nil, err
	}
	if err := api.Start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = api.Stop(sctx)
	}()
	base := "http://" + api.Addr()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	lr, err := hc.PostForm(base+"/ui/login", url.Values{"token": {secret}, "next": {"/ui/"}})
	if err != nil {
		return nil, fmt.Errorf("bench ui: login: %w", err)
	}
	_, _ = io.Copy(io.Discard, lr.Body)
	lr.Body.Close()
	if lr.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench ui: login: status %d", lr.StatusCode)
	}

	probe := id(cfg.Jobs / 2)
	if (cfg.Jobs/2)%100 == 0 {
		probe = id(cfg.Jobs/2 + 1)
	}
	q := queue(3)
	pages := []struct{ name, path, want string }{
		{"ui overview", "/ui/", `id="queues"`},
		{"ui exact id lookup", "/ui/jobs?q=" + probe, `id="exact"`},
		{"ui filtered list, first page", "/ui/jobs?queue=" + q + "&state=scheduled", `id="jobs"`},
		{"ui job page", "/ui/jobs/" + probe, `id="job-state"`},
		{"ui schedules, first page", "/ui/schedules", `id="schedules"`},
		{"ui dead letters", "/ui/dead", `id="dead"`},
		{"ui cluster", "/ui/cluster", `id="shards"`},
		{"ui audit log", "/ui/audit", `id="audit"`},
		{"api queues", "/v1/queues", `"queues"`},
		{"api figures", "/v1/figures?minutes=60", `"queues"`},
		{"api get job", "/v1/jobs/" + probe, `"id":"` + probe + `"`},
		{"api filtered list, first page", "/v1/jobs?queue=" + q + "&state=scheduled&limit=100", `"jobs"`},
	}
	p := newProgress(cfg.Progress, "measure", len(pages)*(cfg.Samples+1))
	n := 0
	for _, pg := range pages {
		ds := make([]float64, 0, cfg.Samples)
		var size int
		for s := 0; s <= cfg.Samples; s++ {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+pg.path, nil)
			if strings.HasPrefix(pg.path, "/v1/") {
				req.Header.Set("Authorization", "Bearer "+secret)
			}
			t0 := time.Now()
			r, err := hc.Do(req)
			if err != nil {
				return nil, fmt.Errorf("bench ui: %s: %w", pg.name, err)
			}
			b, err := io.ReadAll(r.Body)
			r.Body.Close()
			d := time.Since(t0)
			if err != nil {
				return nil, fmt.Errorf("bench ui: %s: %w", pg.name, err)
			}
			if r.StatusCode != http.StatusOK || !strings.Contains(string(b), pg.want) {
				return nil, fmt.Errorf("bench ui: %s: status %d, want %q in the reply: %s", pg.name, r.StatusCode, pg.want, errorText(b))
			}
			size = len(b)
			if s > 0 { // the first is a warm-up
				ds = append(ds, float64(d.Microseconds())/1000)
			}
			n++
			p.update(n)
		}
		slices.Sort(ds)
		r := UIPage{Name: pg.name, URL: pg.path, Samples: len(ds), P50: round(ds[len(ds)/2]),
			P99: round(ds[min(len(ds)-1, len(ds)*99/100)]), Max: round(ds[len(ds)-1]), Bytes: size}
		res.Pages = append(res.Pages, r)
		if strings.HasPrefix(pg.name, "ui ") {
			res.MaxPageMs = max(res.MaxPageMs, r.P99)
		}
	}
	return res, nil
}

// errorText is the message of a dashboard error page (or the start of a reply).
func errorText(b []byte) string {
	s := string(b)
	if i := strings.Index(s, `id="error-message">`); i >= 0 {
		s = s[i+len(`id="error-message">`):]
		if j := strings.Index(s, "<"); j >= 0 {
			return s[:j]
		}
	}
	return s[:min(len(s), 300)]
}
