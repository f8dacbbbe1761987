package ui_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/ui"
)

// setHidden makes the page's tab hidden or shown as its script sees it (document.hidden
// and the visibilitychange event): a headless browser has no tabs to switch.
func setHidden(hidden bool) chromedp.Action {
	v := "false"
	if hidden {
		v = "true"
	}
	return chromedp.Evaluate(`Object.defineProperty(document, "hidden", {configurable: true, get: () => `+v+`});
		document.dispatchEvent(new Event("visibilitychange"))`, nil)
}

// becomes reports whether the page's expression expr becomes true within d, across
// reloads of the page (chromedp.Poll fails when the page navigates).
func becomes(ctx context.Context, d time.Duration, expr string) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		var ok bool
		if err := chromedp.Run(ctx, chromedp.Evaluate(expr, &ok)); err == nil && ok {
			return true
		}
	}
	return false
}

// A page whose tab was hidden while its session ended and another began (a login in
// another tab, after a logout or an expiry) belongs to a session that is gone: its forms
// carry that session's CSRF token, refused, and it shows that session's buttons. Shown
// again, it reloads, as the new session's, and its actions work.
func TestBrowser_LivePageOfAnotherSession(t *testing.T) {
	path := chromium(t)
	tb := setupMini(t, testTokens, ui.Config{})
	bg := context.Background()
	_, err := tb.store.Create(bg, []*job.Job{{ID: "sess-1", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
	require.NoError(t, err)

	login := func(ctx context.Context, token string) {
		require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(tb.base+"/ui/login"), chromedp.WaitVisible("#token", chromedp.ByID),
			chromedp.SendKeys("#token", token, chromedp.ByID), chromedp.Click("#login", chromedp.ByID),
			chromedp.WaitVisible("#queues", chromedp.ByID)))
	}
	ctx := chromiumCtx(t, path, 60*time.Second)
	login(ctx, readToken)
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(tb.base+"/ui/jobs/sess-1"),
		chromedp.WaitVisible(`#live-status[data-state="live"]`, chromedp.ByQuery),
		setHidden(true), chromedp.WaitVisible(`#live-status[data-state="paused"]`, chromedp.ByQuery)))

	// Another tab of the same browser logs out and in again, with a write token.
	other, cancel := chromedp.NewContext(ctx)
	defer cancel()
	require.NoError(t, chromedp.Run(other, chromedp.Navigate(tb.base+"/ui/"), chromedp.WaitVisible("#logout", chromedp.ByID),
		chromedp.Click("#logout", chromedp.ByID), chromedp.WaitVisible("#token", chromedp.ByID)))
	login(other, writeToken)
	var csrf string
	require.NoError(t, chromedp.Run(other, chromedp.Evaluate(`document.querySelector('meta[name="csrf-token"]').content`, &csrf)))
	cancel() // the other tab is closed: the first one is the browser's visible tab again

	// The first tab is shown again: it is the new session's page.
	require.NoError(t, chromedp.Run(ctx, setHidden(false)))
	require.True(t, becomes(ctx, 10*time.Second, `document.readyState === "complete" && document.querySelector('meta[name="csrf-token"]').content === `+
		strconv.Quote(csrf)+` && document.querySelector("#act-pause") !== null`),
		"the page is the new session's: its token, and the write session's buttons")
	var status string
	require.NoError(t, chromedp.Run(ctx, clickLive("#act-pause"),
		chromedp.Poll(`(s => s && !s.textContent.endsWith("…"))(document.getElementById("action-status"))`, nil),
		chromedp.Text("#action-status", &status, chromedp.ByID)))
	require.Equal(t, "pause: done", status)
}

// The polling fallback asks again 5 s after its last answer came, never while it waits
// for one: polls every 5 s whatever their answers took overlapped when one took longer
// (a 10,000-node workflow's page is 2.5 MB: 10 s on a slow link), each adding its own
// whole page to the link's load, and an older answer applied after a newer one put the
// page back to an older state. Here each poll's answer is held for 7 s.
func TestBrowser_LivePollsDoNotOverlap(t *testing.T) {
	path := chromium(t)
	tb := setupMini(t, nil, ui.Config{})
	bg := context.Background()
	_, err := tb.store.Create(bg, []*job.Job{{ID: "poll-1", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
	require.NoError(t, err)

	ctx := chromiumCtx(t, path, 60*time.Second)
	require.NoError(t, chromedp.Run(ctx, chromedp.ActionFunc(func(ctx context.Context) error {
		// Without EventSource: polling; each poll's answer is held for 7 s.
		_, err := cdppage.AddScriptToEvaluateOnNewDocument(`delete window.EventSource;
			(() => { const f = window.fetch; window.__polls = 0; window.__maxPolls = 0;
			window.fetch = function (u, o) {
				if (String(u).indexOf("once=1") < 0) return f.apply(this, arguments);
				window.__maxPolls = Math.max(window.__maxPolls, ++window.__polls);
				return new Promise(r => setTimeout(r, 7000)).then(() => f(u, o)).finally(() => window.__polls--);
			}; })()`).Do(ctx)
		return err
	}), chromedp.Navigate(tb.base+"/ui/jobs/poll-1"), chromedp.WaitVisible(`#live-status[data-state="polling"]`, chromedp.ByQuery)))
	_, _, err = tb.store.Pause(bg, "poll-1")
	require.NoError(t, err)
	var most int
	require.NoError(t, chromedp.Run(ctx, chromedp.WaitVisible("#job-state.paused", chromedp.ByQuery),
		chromedp.Evaluate(`window.__maxPolls`, &most)))
	require.Equal(t, 1, most, "polls under way at once")
}

// A job removed while an action on its page is under way (another operator deleted it
// as this one clicked Pause): the page's stream ends ("ended") while the script waits
// for the action's answer, and does not reload then (the action may be the delete, whose
// answer leads elsewhere). Once the action has been answered on the page, the page
// reloads and says the job is gone, rather than showing it, with its stream closed, for
// ever.
func TestBrowser_LivePageGoneDuringAnAction(t *testing.T) {
	path := chromium(t)
	tb := setupMini(t, nil, ui.Config{})
	bg := context.Background()
	_, err := tb.store.Create(bg, []*job.Job{{ID: "gone-2", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
	require.NoError(t, err)

	ctx := chromiumCtx(t, path, 60*time.Second)
	require.NoError(t, chromedp.Run(ctx, chromedp.ActionFunc(func(ctx context.Context) error {
		// The action's post waits for the test to let it go (window.__go).
		_, err := cdppage.AddScriptToEvaluateOnNewDocument(`(() => { const f = window.fetch;
			window.fetch = function (u, o) {
				if (String(u).indexOf("/ui/actions/") < 0) return f.apply(this, arguments);
				window.__posting = true;
				return new Promise(r => { window.__go = r; }).then(() => f(u, o));
			}; })()`).Do(ctx)
		return err
	}), chromedp.Navigate(tb.base+"/ui/jobs/gone-2"), chromedp.WaitVisible(`#live-status[data-state="live"]`, chromedp.ByQuery),
		clickLive("#act-pause"), chromedp.Poll(`window.__posting === true`, nil)))
	require.NoError(t, tb.store.Delete(bg, "gone-2"))
	require.NoError(t, chromedp.Run(ctx, chromedp.WaitVisible(`#live-status[data-state="paused"]`, chromedp.ByQuery),
		chromedp.Evaluate(`window.__go()`, nil)))
	require.True(t, becomes(ctx, 5*time.Second, `(e => e !== null && e.textContent.includes("not found"))(document.getElementById("error-message"))`),
		"the page says the job is gone")
}
