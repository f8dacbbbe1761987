package ui_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/ui"
)

// chromium finds the browser, or skips the test (fails it when TOCK_REQUIRE_REDIS=1, as
// in CI, which installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("TOCK_REQUIRE_REDIS") == "1" {
		t.Fatal("chromium is not installed (TOCK_REQUIRE_REDIS=1 requires the browser tests)")
	}
	t.Skip("chromium is not installed: the browser tests are skipped")
	return ""
}

// screenshotDir is where the test saves a screenshot of each page: $TOCK_SCREENSHOTS
// when set (for a person to look at; docs/dashboard-*.png come from there), else a
// temporary directory.
func screenshotDir(t *testing.T) string {
	if dir := os.Getenv("TOCK_SCREENSHOTS"); dir != "" {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		return dir
	}
	return t.TempDir()
}

// screenshot saves the page to dir/<name>.png (PNG: quality 100).
func screenshot(dir, name string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		var b []byte
		if err := chromedp.FullScreenshot(&b, 100).Do(ctx); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, name+".png"), b, 0o644)
	})
}

// xssType, xssPayload and xssError are a job's type, payload and error message made to
// run a script if they were ever inserted as HTML: each sets window.__xss.
const (
	xssType    = `<script>window.__xss=1</script>`
	xssPayload = `{"note":"<script>window.__xss=2</script>","img":"\"><img src=x onerror=window.__xss=3>"}`
	xssError   = `"><img src=x onerror="window.__xss=4"><script>window.__xss=5</script>`
)

// noXSS checks that the page shows the payloads as text and ran none of them.
func noXSS(t *testing.T, ctx context.Context, want ...string) {
	t.Helper()
	var body string
	var xss bool
	var imgs int
	require.NoError(t, chromedp.Run(ctx, chromedp.Text("main", &body, chromedp.ByQuery),
		chromedp.Evaluate(`typeof window.__xss !== "undefined"`, &xss),
		chromedp.Evaluate(`document.querySelectorAll('img[src="x"], main script').length`, &imgs)))
	for _, w := range want {
		require.Contains(t, body, w, "shown as text")
	}
	require.False(t, xss, "no payload ran")
	require.Zero(t, imgs, "no element was made of a payload")
}

// noConfirm makes the page's confirm() answer yes (a headless browser has nobody to ask).
var noConfirm = chromedp.Evaluate(`window.confirm = () => true`, nil)

// chromiumCtx starts a headless Chromium (the binary at path, window 1280x1000) for test t,
// closed when t ends, and returns its context, which times out after timeout.
func chromiumCtx(t *testing.T, path string, timeout time.Duration) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	t.Cleanup(cancel)
	return ctx
}

// clickLive clicks the element sel finds in one step of the page's script, once there is
// one and the page has loaded: a live update may replace a page's buttons between the
// steps of chromedp.Click (find the node, find its box, press), which then fails with
// "Could not find node with given id"; and a button visible before the page's script
// ran posts its form without it (the page without script), which the test does not
// expect.
func clickLive(sel string) chromedp.Action {
	return chromedp.Poll(`(() => { const e = document.querySelector(`+strconv.Quote(sel)+`);
		if (!e || document.readyState !== "complete") return false; e.click(); return true })()`, nil)
}

func TestBrowser_Dashboard(t *testing.T) {
	path := chromium(t)
	// The cron previews are computed as of a few days before the March 2027 DST change.
	now := time.Date(2027, 3, 10, 12, 0, 0, 0, time.UTC)
	tb := setupMini(t, testTokens, ui.Config{NowFunc: func() time.Time { return now }})
	store := tb.store
	bg := context.Background()
	jobs := []*job.Job{{ID: "nightly", Type: "report", Payload: []byte(`{"team":"ops","n":1}`),
		Schedule: job.Schedule{Cron: "30 2 * * *", TimeZone: "America/New_York"}}}
	for i := range 30 {
		typ := "mail"
		if i%3 == 0 {
			typ = "sms"
		}
		jobs = append(jobs, &job.Job{ID: "bulk-" + strconv.Itoa(i), Queue: "notify", Type: typ, Schedule: job.Schedule{Delay: time.Hour}})
	}
	_, err := store.Create(bg, jobs)
	require.NoError(t, err)
	state := func(id string) job.State {
		info, err := store.Get(bg, id)
		require.NoError(t, err)
		return info.State
	}
	// A dead run whose type, payload and error carry script.
	_, err = store.Create(bg, []*job.Job{{ID: "xss-1", Queue: "xss", Type: xssType, Payload: []byte(xssPayload),
		Schedule: job.Schedule{Now: true}, Retry: job.RetryPolicy{MaxAttempts: 1}}})
	require.NoError(t, err)
	sh := store.ShardOf("xss-1")
	claimed, err := store.Claim(bg, sh, "xss", 10, "w1", "nonce1")
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	errs, err := store.FinishRuns(bg, sh, []shard.Finish{{Member: claimed[0].Member, Token: claimed[0].Token, Outcome: shard.Failed, Error: xssError}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.Equal(t, job.StateDead, state("xss-1"))
	shots := screenshotDir(t)
	// An hour of lateness figures, for the overview's chart.
	figs := map[shard.FigureKey]*shard.FigureDelta{}
	for m := range 60 {
		d := &shard.FigureDelta{}
		for i := range 40 {
			d.Add(time.Duration(1+(m*7+i*i)%25) * time.Millisecond)
		}
		figs[shard.FigureKey{Queue: "notify", Minute: shard.Minute(time.Now().Add(-time.Duration(m) * time.Minute))}] = d
	}
	require.NoError(t, store.AddFigures(bg, figs))

	ctx := chromiumCtx(t, path, 60*time.Second)
	run := func(t *testing.T, actions ...chromedp.Action) {
		t.Helper()
		require.NoError(t, chromedp.Run(ctx, actions...))
	}
	// text reads an element's text in one step of the page's script: a live update may
	// replace the element's children between the steps of chromedp.Text (find the node,
	// then read it), which then fails with "No node with given id found".
	text := func(t *testing.T, sel string) string {
		t.Helper()
		var s string
		run(t, chromedp.WaitReady(sel, chromedp.ByQuery),
			chromedp.Evaluate(fmt.Sprintf(`document.querySelector(%q).innerText`, sel), &s))
		return s
	}
	base := tb.base

	t.Run("LoginThenSearch", func(t *testing.T) {
		run(t, chromedp.Navigate(base+"/ui/jobs"), chromedp.WaitVisible("#token", chromedp.ByID), screenshot(shots, "login"),
			chromedp.SendKeys("#token", writeToken, chromedp.ByID), chromedp.Click("#login", chromedp.ByID),
			chromedp.WaitVisible("#jobs", chromedp.ByID))
		var url string
		run(t, chromedp.Location(&url))
		require.Equal(t, base+"/ui/jobs", url, "back where the login began")
		// An exact id from the header's search box: one lookup.
		run(t, chromedp.SendKeys(`header .find input`, "nightly\n", chromedp.ByQuery), chromedp.WaitVisible("#exact", chromedp.ByID))
		require.Contains(t, text(t, "#exact"), "nightly")
		require.Contains(t, text(t, "#searched"), "Searched 9 of 9 parts")
	})

	t.Run("BulkSelectedAndAllMatching", func(t *testing.T) {
		run(t, chromedp.Navigate(base+"/ui/jobs?q=bulk-1"), chromedp.WaitVisible("#jobs", chromedp.ByID),
			chromedp.Click(`input.select[value="bulk-1"]`, chromedp.ByQuery), chromedp.Click(`input.select[value="bulk-10"]`, chromedp.ByQuery),
			chromedp.SetValue(".bulk-action", "pause", chromedp.ByQuery), chromedp.Click("#bulk-selected", chromedp.ByID),
			chromedp.WaitVisible(".bulk[data-done]", chromedp.ByQuery))
		require.Contains(t, text(t, "#bulk-status"), "Done: 2 matched, 2 changed, 0 failed")
		require.Equal(t, job.StatePaused, state("bulk-10"))

		run(t, chromedp.Navigate(base+"/ui/jobs?q=bulk-&type=sms"), chromedp.WaitVisible("#jobs", chromedp.ByID), noConfirm,
			chromedp.Click("#bulk-all", chromedp.ByID), chromedp.WaitVisible(".bulk[data-done]", chromedp.ByQuery),
			// The rows are read again: they show what the action did.
			chromedp.Poll(`document.querySelector("#jobs tbody").innerText.includes("cancelled") && !document.querySelector("#jobs tbody").innerText.includes("scheduled")`, nil),
			screenshot(shots, "bulk"))
		require.Contains(t, text(t, "#bulk-status"), "Done: 10 matched, 10 changed, 0 failed (searched 9 of 9)")
		var max string
		var value float64
		run(t, chromedp.AttributeValue(".bulk-progress", "max", &max, nil, chromedp.ByQuery),
			chromedp.JavascriptAttribute(".bulk-progress", "value", &value, chromedp.ByQuery))
		require.Equal(t, "1", max)
		require.Equal(t, 1.0, value)
		require.Equal(t, job.StateCancelled, state("bulk-3"))
		require.Equal(t, job.StateScheduled, state("bulk-2"))
	})

	t.Run("DeleteFromDetailAndBulk", func(t *testing.T) {
		gone := func(id string) bool {
			_, err := store.Get(bg, id)
			return errors.Is(err, shard.ErrNotFound)
		}
		run(t, chromedp.Navigate(base+"/ui/jobs/bulk-4"), chromedp.WaitVisible("#act-delete", chromedp.ByID), noConfirm,
			clickLive("#act-delete"), chromedp.WaitVisible("#jobs", chromedp.ByID))
		var url string
		run(t, chromedp.Location(&url))
		require.Equal(t, base+"/ui/jobs", url, "back to the search: the job is gone")
		require.True(t, gone("bulk-4"))

		run(t, chromedp.Navigate(base+"/ui/jobs?q=bulk-5"), chromedp.WaitVisible("#jobs", chromedp.ByID), noConfirm,
			chromedp.Click(`input.select[value="bulk-5"]`, chromedp.ByQuery),
			chromedp.SetValue(".bulk-action", "delete", chromedp.ByQuery), chromedp.Click("#bulk-selected", chromedp.ByID),
			chromedp.WaitVisible(".bulk[data-done]", chromedp.ByQuery))
		require.Contains(t, text(t, "#bulk-status"), "Done: 1 matched, 1 changed, 0 failed")
		require.True(t, gone("bulk-5"))
	})

	t.Run("XSSRendersAsText", func(t *testing.T) {
		run(t, chromedp.Navigate(base+"/ui/jobs/xss-1"), chromedp.WaitVisible("#payload", chromedp.ByID),
			chromedp.WaitVisible("#runs td.err", chromedp.ByQuery))
		noXSS(t, ctx, xssType, `"<script>window.__xss=2</script>"`, `"\"><img src=x onerror=window.__xss=3>"`, xssError)
		// A dead job: only Delete does something (its run is requeued from the dead letters).
		var buttons []string
		run(t, chromedp.Evaluate(`Array.from(document.querySelectorAll("#job-actions button"), b => b.value)`, &buttons))
		require.Equal(t, []string{"delete"}, buttons)
		run(t, chromedp.Navigate(base+"/ui/jobs?q=xss-1"), chromedp.WaitVisible("#exact", chromedp.ByID), screenshot(shots, "jobs"))
		noXSS(t, ctx, xssType)
		run(t, chromedp.Navigate(base+"/ui/dead?queue=xss"), chromedp.WaitVisible("#dead td.err", chromedp.ByQuery), screenshot(shots, "dead"))
		noXSS(t, ctx, xssType, xssError)
	})

	t.Run("RequeueDeadRun", func(t *testing.T) {
		run(t, chromedp.Navigate(base+"/ui/dead?queue=xss"), chromedp.WaitVisible("#dead td.err", chromedp.ByQuery),
			chromedp.Click(`#dead button[value="requeue"]`, chromedp.ByQuery), chromedp.WaitVisible("#dead td.empty", chromedp.ByQuery))
		var url string
		run(t, chromedp.Location(&url))
		require.Equal(t, base+"/ui/dead?queue=xss", url, "back to the queue's dead letters")
		dead, _, err := store.Dead(bg, "xss", 10, "")
		require.NoError(t, err)
		require.Empty(t, dead)
		require.Equal(t, job.StateReady, state("xss-1"))
	})

	t.Run("LiveCounter", func(t *testing.T) {
		cell := `document.querySelector('#queues tr[data-queue="notify"] td.n').textContent.trim()`
		var before string
		run(t, chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(`#live-status[data-state="live"]`, chromedp.ByQuery),
			chromedp.Evaluate(cell, &before), chromedp.Evaluate(`window.__notReloaded = true`, nil))
		n, err := strconv.Atoi(before)
		require.NoError(t, err)
		// A job created through the API, elsewhere: the count changes on the page.
		req, err := http.NewRequest("POST", base+"/v1/jobs", strings.NewReader(`{"id":"live-1","queue":"notify","type":"mail","schedule":{"delay":"1h"}}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+writeToken)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusCreated, res.StatusCode)
		run(t, chromedp.Poll(cell+` === "`+strconv.Itoa(n+1)+`"`, nil))
		var still bool
		run(t, chromedp.Evaluate(`window.__notReloaded === true`, &still), screenshot(shots, "overview"))
		require.True(t, still, "updated in place, without a reload")
	})

	// A hidden tab closes its stream and opens it again when shown; a browser without
	// EventSource polls, and still sees the count change.
	t.Run("HiddenTabAndPollingFallback", func(t *testing.T) {
		create := func(id string) {
			t.Helper()
			req, err := http.NewRequest("POST", base+"/v1/jobs", strings.NewReader(`{"id":"`+id+`","queue":"notify","type":"mail","schedule":{"delay":"1h"}}`))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+writeToken)
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusCreated, res.StatusCode)
		}
		setHidden := func(hidden bool) chromedp.Action {
			return chromedp.Evaluate(`Object.defineProperty(document, "hidden", {value: `+strconv.FormatBool(hidden)+`, configurable: true});
				document.dispatchEvent(new Event("visibilitychange"))`, nil)
		}
		run(t, chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(`#live-status[data-state="live"]`, chromedp.ByQuery),
			setHidden(true), chromedp.WaitVisible(`#live-status[data-state="paused"]`, chromedp.ByQuery),
			setHidden(false), chromedp.WaitVisible(`#live-status[data-state="live"]`, chromedp.ByQuery))

		// Without EventSource (removed before the page's script runs): polling.
		var id cdppage.ScriptIdentifier
		run(t, chromedp.ActionFunc(func(ctx context.Context) error {
			var err error
			id, err = cdppage.AddScriptToEvaluateOnNewDocument(`delete window.EventSource`).Do(ctx)
			return err
		}))
		defer run(t, chromedp.ActionFunc(func(ctx context.Context) error {
			return cdppage.RemoveScriptToEvaluateOnNewDocument(id).Do(ctx)
		}))
		cell := `document.querySelector('#queues tr[data-queue="notify"] td.n').textContent.trim()`
		var before string
		run(t, chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(`#live-status[data-state="polling"]`, chromedp.ByQuery),
			chromedp.Evaluate(cell, &before))
		n, err := strconv.Atoi(before)
		require.NoError(t, err)
		create("poll-1")
		run(t, chromedp.Poll(cell+` === "`+strconv.Itoa(n+1)+`"`, nil))
	})

	t.Run("SchedulesAndAuditLog", func(t *testing.T) {
		run(t, chromedp.Navigate(base+"/ui/schedules"), chromedp.WaitVisible("main table", chromedp.ByQuery), screenshot(shots, "schedules"))
		run(t, chromedp.Navigate(base+"/ui/audit"), chromedp.WaitVisible("#audit", chromedp.ByID), screenshot(shots, "audit"))
		audit := text(t, "#audit")
		require.Contains(t, audit, "dead.requeue")
		require.Contains(t, audit, ingest.TokenWho(writeToken))
		require.NotContains(t, audit, writeToken)
	})

	t.Run("JobDetailDSTPreviewAndLiveUpdates", func(t *testing.T) {
		run(t, chromedp.Navigate(base+"/ui/jobs/nightly"), chromedp.WaitVisible("#preview li.dst.moved", chromedp.ByQuery),
			chromedp.WaitVisible(`#live-status[data-state="live"]`, chromedp.ByQuery), screenshot(shots, "job"))
		require.Contains(t, text(t, "#preview li.dst.moved"), "02:30 does not exist on 2027-03-14 (clocks jump from 02:00 to 03:00): fires at 03:00 EDT")
		require.Contains(t, text(t, "#preview li.dst.moved time"), "2027-03-14 03:00:00 EDT")
		require.Contains(t, text(t, "#payload"), `"team": "ops"`)
		// A change made elsewhere is pushed to the page.
		_, _, err := store.Pause(bg, "nightly")
		require.NoError(t, err)
		run(t, chromedp.WaitVisible("#job-state.paused", chromedp.ByQuery), chromedp.WaitVisible("#act-resume", chromedp.ByID))
		var updates string
		run(t, chromedp.AttributeValue("body", "data-updates", &updates, nil, chromedp.ByQuery))
		require.NotEmpty(t, updates)
		// And a button of the page acts.
		run(t, clickLive("#act-resume"), chromedp.WaitVisible("#act-pause", chromedp.ByID))
		// What the action said stays, across the live update that shows what it did.
		run(t, chromedp.Poll(`(() => { const s = document.getElementById("action-status"); return s !== null && s.textContent === "resume: done" })()`,
			nil, chromedp.WithPollingTimeout(5*time.Second)))
		require.Equal(t, job.StateScheduled, state("nightly"))
		// Cancel from a job's page: its state changes on the page, without a reload.
		run(t, chromedp.Navigate(base+"/ui/jobs/bulk-2"), chromedp.WaitVisible("#act-cancel", chromedp.ByID), noConfirm,
			chromedp.Evaluate(`window.__loaded = true`, nil), clickLive("#act-cancel"),
			chromedp.WaitVisible("#job-state.cancelled", chromedp.ByQuery))
		var same bool
		run(t, chromedp.Evaluate(`window.__loaded === true`, &same))
		require.True(t, same, "the page was not reloaded")
		require.Equal(t, job.StateCancelled, state("bulk-2"))
	})

	t.Run("CrossSiteFormRefused", func(t *testing.T) {
		var token string
		run(t, chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible("#queues", chromedp.ByID),
			chromedp.AttributeValue(`meta[name="csrf-token"]`, "content", &token, nil, chromedp.ByQuery))
		// Another origin (another port of the same host: same site, so the cookie goes
		// along) posts a form, even with the right CSRF token.
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, `<!doctype html><form method="post" action="%s/ui/actions/job"><input name="csrf" value="%s"><input name="id" value="nightly">`+
				`<button id="go" name="action" value="pause">go</button></form>`, base, token)
		}))
		defer evil.Close()
		run(t, chromedp.Navigate(evil.URL), chromedp.Click("#go", chromedp.ByID), chromedp.WaitVisible("#error-message", chromedp.ByID))
		require.Contains(t, text(t, "#error-message"), "cross-site request refused")
		require.Equal(t, job.StateScheduled, state("nightly"))
	})

	t.Run("LogoutThenReadToken", func(t *testing.T) {
		run(t, chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible("#logout", chromedp.ByID), chromedp.Click("#logout", chromedp.ByID),
			chromedp.WaitVisible("#token", chromedp.ByID), chromedp.Navigate(base+"/ui/cluster"), chromedp.WaitVisible("#token", chromedp.ByID))
		run(t, chromedp.SendKeys("#token", readToken, chromedp.ByID), chromedp.Click("#login", chromedp.ByID),
			chromedp.WaitVisible("#shards", chromedp.ByID), screenshot(shots, "cluster"),
			chromedp.Navigate(base+"/ui/jobs/nightly"), chromedp.WaitVisible("#job-state", chromedp.ByID))
		var hasButtons bool
		run(t, chromedp.Evaluate(`document.querySelector("#job-actions, .bulk, button[name=action]") !== null`, &hasButtons))
		require.False(t, hasButtons, "a read session sees no action buttons")
		// What the browser sends does not matter: the server refuses.
		var status int
		run(t, chromedp.Evaluate(`fetch("/ui/actions/job", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"},
			body: "action=pause&id=nightly&csrf=" + encodeURIComponent(document.querySelector('meta[name="csrf-token"]').content)}).then(r => r.status)`,
			&status, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
		require.Equal(t, http.StatusForbidden, status)
		require.Equal(t, job.StateScheduled, state("nightly"))
		run(t, chromedp.Evaluate(`fetch("/ui/actions/job", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"},
			body: "action=delete&id=nightly&csrf=" + encodeURIComponent(document.querySelector('meta[name="csrf-token"]').content)}).then(r => r.status)`,
			&status, func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }))
		require.Equal(t, http.StatusForbidden, status)
		require.Equal(t, job.StateScheduled, state("nightly"), "a read session may not delete")
		run(t, chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible("#queues", chromedp.ByID), screenshot(shots, "overview-read"))
		require.False(t, strings.Contains(text(t, "#queues"), "Pause"))
	})

	// A screenshot of each page.
	for _, name := range []string{"login", "overview", "jobs", "job", "dead", "schedules", "cluster", "audit"} {
		fi, err := os.Stat(filepath.Join(shots, name+".png"))
		require.NoError(t, err, "screenshot of %s", name)
		require.NotZero(t, fi.Size())
	}
}

// The workflow pages in a browser: the graph is drawn, one element per node with its
// state's class; nodes run to their end through the store and the drawing follows
// without a reload; Cancel on the page cancels the workflow.
func TestBrowser_Workflow(t *testing.T) {
	path := chromium(t)
	tb := setupMini(t, testTokens, ui.Config{})
	store, bg := tb.store, context.Background()
	const wf = "etl-2030-01-01"
	_, err := store.CreateWorkflow(bg, etlWorkflow(wf))
	require.NoError(t, err)
	createWorkflows(t, store) // etl, the definition nightly and an instance of it: the list
	shots := screenshotDir(t)

	// finish claims the workflow's ready runs and ends those named in outcomes; the
	// others stay claimed (running).
	finish := func(outcomes map[string]shard.Outcome) {
		t.Helper()
		sh := store.ShardOf(wf)
		claimed, err := store.Claim(bg, sh, "default", 100, "w1", "n1")
		require.NoError(t, err)
		var fs []shard.Finish
		for _, c := range claimed {
			w, node, ok := job.SplitNodeJobID(c.JobID)
			if o, named := outcomes[node]; ok && w == wf && named {
				f := shard.Finish{Member: c.Member, Token: c.Token, Outcome: o}
				if o == shard.Failed {
					f.Error = "node " + node + " says no"
				} else {
					f.Result = []byte(`{"rows":1200}`)
				}
				fs = append(fs, f)
			}
		}
		require.Len(t, fs, len(outcomes), "the nodes to end were ready")
		errs, err := store.FinishRuns(bg, sh, fs)
		require.NoError(t, err)
		for _, e := range errs {
			require.NoError(t, e)
		}
	}

	ctx := chromiumCtx(t, path, 60*time.Second)
	run := func(actions ...chromedp.Action) {
		t.Helper()
		require.NoError(t, chromedp.Run(ctx, actions...))
	}
	// classes returns the class of each drawn node, by node id.
	classes := func() map[string]string {
		t.Helper()
		var m map[string]string
		run(chromedp.Evaluate(`Object.fromEntries(Array.from(document.querySelectorAll("#wf-graph .node"), n => [n.getAttribute("data-node"), n.getAttribute("class")]))`, &m))
		return m
	}
	// state waits until node's drawing has class state.
	state := func(node, state string) chromedp.Action {
		return chromedp.WaitVisible(`#wf-graph .node.`+state+`[data-node="`+node+`"]`, chromedp.ByQuery)
	}

	run(chromedp.Navigate(tb.base+"/ui/workflows"), chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", writeToken, chromedp.ByID), chromedp.Click("#login", chromedp.ByID),
		chromedp.WaitVisible("#workflows", chromedp.ByID), screenshot(shots, "workflows"))
	var rows int
	run(chromedp.Evaluate(`document.querySelectorAll("#workflows tbody tr[data-wf], #wf-defs tbody tr[data-wf]").length`, &rows))
	require.Equal(t, 4, rows, "etl, "+wf+", the instance and the definition")

	run(chromedp.Click(`#workflows a[href="/ui/workflows/`+wf+`"]`, chromedp.ByQuery), chromedp.WaitVisible("#wf-graph", chromedp.ByID),
		chromedp.WaitVisible(`#live-status[data-state="live"]`, chromedp.ByQuery), chromedp.Evaluate(`window.__notReloaded = true`, nil),
		// The table and the drawing are patched, node by node, never replaced.
		chromedp.Evaluate(`document.getElementById("wf-nodes").__kept = document.getElementById("wf-graph").__kept = true`, nil))
	require.Equal(t, map[string]string{"extract": "node ready", "transform": "node waiting", "load": "node waiting",
		"report": "node waiting", "alert": "node waiting"}, classes())
	var edges, markers int
	run(chromedp.Evaluate(`document.querySelectorAll("#wf-graph path.edge[marker-end]").length`, &edges),
		chromedp.Evaluate(`document.querySelectorAll("#wf-graph marker#arrow").length`, &markers))
	require.Equal(t, 5, edges)
	require.Equal(t, 1, markers)
	// Each node links to its job's page.
	var href string
	run(chromedp.AttributeValue(`#wf-graph .node[data-node="load"]`, "href", &href, nil, chromedp.ByQuery))
	require.Equal(t, "/ui/jobs/"+wf+"@load", href)

	// extract runs to its end: the drawing follows, transform is released.
	finish(map[string]shard.Outcome{"extract": shard.Succeeded})
	run(state("extract", "succeeded"), state("transform", "ready"),
		chromedp.WaitVisible(`#wf-nodes tr[data-node="extract"] .badge.succeeded`, chromedp.ByQuery))
	finish(map[string]shard.Outcome{"transform": shard.Succeeded})
	run(state("transform", "succeeded"), state("load", "ready"), state("report", "ready"))
	// report fails while load runs: alert (one_failed) is released.
	finish(map[string]shard.Outcome{"report": shard.Failed})
	run(state("report", "failed"), state("load", "running"), state("alert", "ready"), screenshot(shots, "workflow"))
	var notReloaded, kept bool
	run(chromedp.Evaluate(`window.__notReloaded === true`, &notReloaded),
		chromedp.Evaluate(`document.getElementById("wf-nodes").__kept === true && document.getElementById("wf-graph").__kept === true`, &kept))
	require.True(t, notReloaded, "updated in place, without a reload")
	require.True(t, kept, "the changed nodes' rows and drawings were put in place of theirs, the table and drawing kept")
	var rowState string
	run(chromedp.Evaluate(`document.querySelector('#wf-nodes tr[data-node="report"] .badge').textContent`, &rowState))
	require.Equal(t, "failed", rowState)

	// Cancel from the page: the state becomes cancelled, on the page and in the store.
	run(noConfirm, clickLive("#act-cancel"), chromedp.WaitVisible("#wf-state.cancelled", chromedp.ByQuery),
		state("alert", "cancelled"), chromedp.WaitVisible("#act-retry", chromedp.ByID))
	w, err := store.Workflow(bg, wf)
	require.NoError(t, err)
	require.Equal(t, job.WorkflowCancelled, w.State)
	c := classes()
	require.Equal(t, "node succeeded", c["extract"], "an ended node keeps its end")
	require.Equal(t, "node failed", c["report"])
	// A node's job page: its workflow decides when it runs, so it links there.
	run(chromedp.Navigate(tb.base+"/ui/jobs/"+wf+"@report"), chromedp.WaitVisible("#act-workflow", chromedp.ByID),
		screenshot(shots, "node-job"))

	// The definition: its graph without states, its actions, and its instances, found by
	// their ids (GET /v1/workflows?prefix=nightly@): the one createWorkflows started is
	// running, though no run of the definition's job has ended.
	const first = "nightly@1893466800000"
	instance := func(id, state string) chromedp.Action {
		return chromedp.WaitVisible(`#wf-instances tr[data-wf="`+id+`"] .badge.`+state, chromedp.ByQuery)
	}
	run(chromedp.Navigate(tb.base+"/ui/workflows/nightly"), chromedp.WaitVisible("#wf-graph .node.def", chromedp.ByQuery),
		chromedp.WaitVisible("#act-trigger", chromedp.ByID), instance(first, "running"),
		chromedp.WaitVisible(`#live-status[data-state="live"]`, chromedp.ByQuery), chromedp.Evaluate(`window.__notReloaded = true`, nil))
	// An occurrence now: the workflow starter takes the definition's run and starts its
	// instance, and has not reported the run: the running instance shows, without a
	// reload, below the one due in 2030 (the newest first).
	_, err = store.Trigger(bg, "nightly")
	require.NoError(t, err)
	sh := store.ShardOf("nightly")
	claimed, err := store.Claim(bg, sh, job.WorkflowQueue, 10, "w1", "n1")
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	started, err := store.StartInstance(bg, "nightly", claimed[0].Due, claimed[0].Payload)
	require.NoError(t, err)
	require.True(t, started.Created)
	run(instance(started.ID, "running"), screenshot(shots, "workflow-definition"))
	var order []string
	run(chromedp.Evaluate(`Array.from(document.querySelectorAll("#wf-instances tr[data-wf]"), r => r.getAttribute("data-wf"))`, &order),
		chromedp.Evaluate(`window.__notReloaded === true`, &notReloaded))
	require.Equal(t, []string{first, started.ID}, order)
	require.True(t, notReloaded, "updated in place, without a reload")
	ended, err := store.Runs(bg, "nightly")
	require.NoError(t, err)
	require.Empty(t, ended, "no run of the definition's job has ended")
}

// A workflow removed while its page is open (its retention ran out): the page says it
// is gone, as a fresh load of it does, rather than going on showing its last state.
func TestBrowser_WorkflowGone(t *testing.T) {
	path := chromium(t)
	m, _ := redistest.Mini(t)
	tb := setup(t, redistest.Backend{Name: redistest.Miniredis, Addrs: []string{m.Addr()}, Mini: m}, nil, ui.Config{})
	bg := context.Background()
	const wf = "etl-gone"
	_, err := tb.store.CreateWorkflow(bg, etlWorkflow(wf))
	require.NoError(t, err)

	ctx := chromiumCtx(t, path, 30*time.Second)
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(tb.base+"/ui/workflows/"+wf), chromedp.WaitVisible("#wf-graph", chromedp.ByID),
		chromedp.WaitVisible(`#live-status[data-state="live"]`, chromedp.ByQuery)))
	_, _, err = tb.store.CancelWorkflow(bg, wf)
	require.NoError(t, err)
	require.NoError(t, chromedp.Run(ctx, chromedp.WaitVisible("#wf-state.cancelled", chromedp.ByQuery)))
	m.FastForward(25 * time.Hour) // past the retention: the workflow and its nodes' jobs expire
	_, err = tb.store.Workflow(bg, wf)
	require.ErrorIs(t, err, shard.ErrWorkflowNotFound)

	wait, cancelWait := context.WithTimeout(ctx, 5*time.Second)
	defer cancelWait()
	var msg string
	require.NoError(t, chromedp.Run(wait, chromedp.Text("#error-message", &msg, chromedp.ByID)), "the page shows the workflow is gone")
	require.Contains(t, msg, `workflow "`+wf+`" not found`)
}

// An action the API refuses says why on the page, as the API does (its message), not
// only the HTTP status: here a retry of a scheduled instance while another instance of
// its definition (overlap skip) runs.
func TestBrowser_WorkflowActionRefused(t *testing.T) {
	path := chromium(t)
	tb := setupMini(t, nil, ui.Config{})
	store, bg := tb.store, context.Background()
	def := &job.Workflow{ID: "nightly", Schedule: &job.Schedule{Cron: "0 3 * * *"}, Jobs: []job.Node{wfNode("a", "")}}
	_, err := store.CreateWorkflow(bg, def)
	require.NoError(t, err)
	info, err := store.Get(bg, "nightly")
	require.NoError(t, err)
	first, err := store.StartInstance(bg, "nightly", time.UnixMilli(1893466800000), info.Payload)
	require.NoError(t, err)
	_, _, err = store.CancelWorkflow(bg, first.ID)
	require.NoError(t, err)
	second, err := store.StartInstance(bg, "nightly", time.UnixMilli(1893466800000).Add(24*time.Hour), info.Payload)
	require.NoError(t, err)
	require.True(t, second.Created)

	ctx := chromiumCtx(t, path, 30*time.Second)
	var status string
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(tb.base+"/ui/workflows/"+first.ID), chromedp.WaitVisible("#act-retry", chromedp.ByID),
		clickLive("#act-retry"),
		// Read in the page, in one step: a live update moves the status back after the
		// form it replaced, which gives it another node id for the DevTools protocol
		// (chromedp.Text between two steps could then find no node).
		chromedp.Poll(`(() => { const s = document.getElementById("action-status");
			return s !== null && s.textContent !== "" && !s.textContent.endsWith("…") ? s.textContent : false })()`, &status)))
	require.Contains(t, status, "retry failed")
	require.Contains(t, status, second.ID, "the API's reason: the instance that runs")
}
