package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/ui"
)

// The dashboard's logins, actions and logouts are in the audit log with the session's
// principal (a hash prefix of its token, never the token), via "ui", and the browser's
// address; the log is on /ui/audit for a write session, refused to a read one.
func TestUI_AuditLog(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		tb := setup(t, b, testTokens, ui.Config{})
		ctx := context.Background()
		_, err := tb.store.Create(ctx, []*job.Job{{ID: "j1", Queue: "mail", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
		require.NoError(t, err)
		start := time.Now()

		br := tb.browser()
		p := br.post("/ui/login", url.Values{"token": {"wrong-secret"}, "next": {"/ui/"}})
		require.Equal(t, http.StatusUnauthorized, p.status)
		br.login(writeToken)
		for _, f := range []url.Values{{"id": {"j1"}, "action": {"trigger"}}, {"id": {"j1"}, "action": {"pause"}}} {
			p = br.post("/ui/actions/job", f)
			require.Equal(t, http.StatusSeeOther, p.status, p.body)
		}
		p = br.post("/ui/actions/queue", url.Values{"queue": {"mail"}, "action": {"pause"}})
		require.Equal(t, http.StatusSeeOther, p.status, p.body)
		p = br.post("/ui/actions/dead", url.Values{"run": {"gone:1"}, "action": {"requeue"}})
		require.Equal(t, http.StatusNotFound, p.status, p.body)
		req, _ := http.NewRequest("POST", tb.base+"/ui/actions/bulk", strings.NewReader(`{"kind":"jobs","request":{"action":"resume","ids":["j1"]}}`))
		req.Header.Set("X-CSRF-Token", br.csrf)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		res, err := br.hc.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)

		page := br.get("/ui/audit")
		require.Equal(t, http.StatusOK, page.status, page.body)
		require.Contains(t, page.body, `<table id="audit">`)
		require.Contains(t, page.body, "queue.pause")
		require.Contains(t, page.body, ingest.TokenWho(writeToken))
		p = br.post("/ui/logout", url.Values{})
		require.Equal(t, http.StatusSeeOther, p.status)

		es, _, err := tb.store.ReadAudit(ctx, "", 100)
		require.NoError(t, err)
		var got []string
		for _, e := range es {
			got = append(got, e.Who+" "+e.Via+" "+e.Action+" "+e.Target+" → "+e.Result)
			require.WithinDuration(t, start, e.Time, time.Minute)
			require.True(t, strings.HasPrefix(e.Remote, "127.0.0.1:"), e.Remote)
			for _, s := range []string{e.Who, e.Via, e.Action, e.Target, e.Result, e.Remote} {
				require.NotContains(t, s, "secret", "no token reaches the log")
			}
		}
		w := ingest.TokenWho(writeToken)
		require.Equal(t, []string{
			w + " ui logout  → ok",
			w + " ui jobs.bulk resume ids: j1 → ok: 1 matched, 1 changed, 0 failed",
			w + " ui dead.requeue gone:1 → 404 not_found",
			w + " ui queue.pause mail → ok",
			w + " ui job.pause j1 → ok",
			w + " ui job.trigger j1 → ok",
			w + " ui login write → ok",
			"unknown ui login.failed  → 401 unauthenticated",
		}, got)

		// A read session has no audit page (the API refuses it) and no link to it.
		rd := tb.browser()
		rd.login(readToken)
		require.NotContains(t, rd.get("/ui/").body, `href="/ui/audit"`)
		require.Equal(t, http.StatusForbidden, rd.get("/ui/audit").status)
	})
}
