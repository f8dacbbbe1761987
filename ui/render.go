package ui

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// page is what every template gets.
type page struct {
	Title        string
	Nav          string // the nav entry to highlight
	CSRF         string
	CanWrite     bool
	AuthRequired bool
	LoggedIn     bool
	Live         string // the URL of the page's event stream; "" without live updates
	Version      string // of what the page shows (UI.load): its stream sends nothing until it changes
	Data         any
}

// pageNames are the templates/<name>.html files, each rendered inside layout.html.
var pageNames = []string{"login", "error", "overview", "jobs", "job", "dead", "schedules", "cluster", "audit", "workflows", "workflow"}

var funcs = template.FuncMap{
	"time":     fmtTime,
	"timeptr":  fmtTimePtr,
	"ago":      ago,
	"ms":       fmtMs,
	"jobURL":   func(id string) string { return Prefix + "/jobs/" + url.PathEscape(id) },
	"wfURL":    workflowURL,
	"wfOf":     workflowOf,
	"join":     strings.Join,
	"bytes":    fmtBytes,
	"add":      func(a, b int) int { return a + b },
	"half":     func(a int) int { return a / 2 },
	"query":    url.QueryEscape,
	"contains": strings.Contains,
	"num":      fmtNum,
	"pct": func(done, total int) int {
		if total == 0 {
			return 100
		}
		return done * 100 / total
	},
}

func parseTemplates() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, n := range pageNames {
		t, err := template.New(n).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+n+".html")
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", n, err)
		}
		out[n] = t
	}
	return out, nil
}

// render writes page name with data.
func (u *UI) render(ctx *fasthttp.RequestCtx, name string, v *viewer, title string, data any) {
	u.renderP(ctx, name, u.pageOf(v, name, title, data))
}

func (u *UI) pageOf(v *viewer, name, title string, data any) *page {
	return &page{Title: title, Nav: name, CSRF: v.csrf, CanWrite: v.canWrite(), AuthRequired: u.api.AuthRequired(),
		LoggedIn: v.scope != "", Data: data}
}

// fragments renders the live fragments of page name: template "live-<f>" for each f.
func (u *UI) fragments(name string, p *page, live []string) (map[string]string, error) {
	out := make(map[string]string, len(live))
	for _, f := range live {
		var b bytes.Buffer
		if err := u.pages[name].ExecuteTemplate(&b, "live-"+f, p); err != nil {
			return nil, err
		}
		out[f] = b.String()
	}
	return out, nil
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "–"
	}
	return fmtTime(*t)
}

func ago(t time.Time) string {
	d := time.Since(t).Round(time.Second)
	if d < 0 {
		return "in " + (-d).String()
	}
	return d.String() + " ago"
}

func fmtMs(v *float64) string {
	if v == nil {
		return "–"
	}
	if *v >= 1000 {
		return fmt.Sprintf("%.3gs", *v/1000)
	}
	return fmt.Sprintf("≤%gms", *v)
}

func fmtNum(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f", *v)
}

// fmtBytes is a size in B, KiB or MiB.
func fmtBytes(n int) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// prettyPayload returns a payload as indented JSON, or a hex dump for bytes that are
// not JSON; binary says which.
func prettyPayload(raw json.RawMessage, b64 []byte) (text string, binary bool) {
	if len(raw) > 0 {
		var b bytes.Buffer
		if json.Indent(&b, raw, "", "  ") == nil {
			return b.String(), false
		}
		return string(raw), false
	}
	if len(b64) == 0 {
		return "", false
	}
	const maxDump = 4096
	d := b64
	if len(d) > maxDump {
		d = d[:maxDump]
	}
	s := hex.Dump(d)
	if len(b64) > maxDump {
		s += fmt.Sprintf("… %d more bytes\n", len(b64)-maxDump)
	}
	return s, true
}

func (u *UI) renderP(ctx *fasthttp.RequestCtx, name string, p *page) {
	var b bytes.Buffer
	if err := u.pages[name].ExecuteTemplate(&b, "layout", p); err != nil {
		u.log.ErrorContext(ctx, "render", "page", name, "error", err)
		ctx.SetStatusCode(fasthttp.StatusInternalServerError)
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.SetBodyString("internal error\n")
		return
	}
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.SetBody(b.Bytes())
}

func decodeB64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }
