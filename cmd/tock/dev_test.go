package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/bench"
	"github.com/tockhq/tock/ingest"
)

// startDev runs tock dev on free ports until the test ends and returns the API's URL.
func startDev(t *testing.T) (string, *syncBuffer) {
	t.Helper()
	return startDevWith(t, devOptions{})
}

// startDevWith runs tock dev with the options o (on free ports, 4 shards) until the test
// ends and returns the API's URL.
func startDevWith(t *testing.T, o devOptions) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	addr := make(chan string, 1)
	done := make(chan error, 1)
	o.addr, o.http, o.shards = "127.0.0.1:0", "127.0.0.1:0", 4
	o.started = func(a string) { addr <- a }
	go func() {
		done <- dev(ctx, o, &out)
	}()
	var u string
	select {
	case a := <-addr:
		u = "http://" + a
	case err := <-done:
		cancel()
		t.Fatalf("tock dev ended before it started: %v\n%s", err, out.String())
	}
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
		require.Contains(t, out.String(), "tock dev: shutting down")
	})
	return u, &out
}

func TestDev_ServesTheAPI(t *testing.T) {
	t.Parallel()
	u, out := startDev(t)
	env := map[string]string{"TOCK_API": u}
	tock := func(args ...string) string {
		t.Helper()
		r := runTock(t, context.Background(), env, "", args...)
		require.NoError(t, r.err, "tock %s\n%s%s", strings.Join(args, " "), r.out, r.errOut)
		return r.out
	}

	// The banner names the URL and a curl command that works as printed.
	banner := out.String()
	require.Contains(t, banner, "HTTP API at "+u+" (no auth)")
	m := regexp.MustCompile(`curl -s -X POST (\S+) -H 'Content-Type: application/json' -d '([^']+)'`).FindStringSubmatch(banner)
	require.NotNil(t, m, banner)
	require.Equal(t, u+"/v1/jobs", m[1])
	resp, err := http.Post(m[1], "application/json", strings.NewReader(m[2]))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	http.DefaultClient.CloseIdleConnections()

	// A job created with the CLI runs on the dev worker.
	tock("jobs", "create", "--id", "hello", "--type", "echo", "--payload", `{"hi":1}`, "--now")
	require.Eventually(t, func() bool {
		r := runTock(t, context.Background(), env, "", "jobs", "runs", "hello")
		return r.err == nil && regexp.MustCompile(`(?m)^\S+ \S+\s+\S+ \S+\s+\S+\s+\S+\s+1\s+succeeded`).MatchString(r.out)
	}, 10*time.Second, 20*time.Millisecond)
	require.Regexp(t, `(?m)^state:\s+completed$`, tock("jobs", "get", "hello"))
	require.Contains(t, out.String(), "fired    job=hello")

	// A job that fails its only attempt is dead; requeue it, then delete it.
	tock("jobs", "create", "--id", "doomed", "--type", "demo.doomed", "--now", "--max-attempts", "1")
	var run string
	require.Eventually(t, func() bool {
		r := runTock(t, context.Background(), env, "", "dead", "ls", "--json")
		if r.err != nil {
			return false
		}
		l := decodeJSON[ingest.DeadList](t, r.out)
		if len(l.Dead) == 1 {
			run = l.Dead[0].Run
		}
		return run != ""
	}, 10*time.Second, 20*time.Millisecond)
	require.True(t, strings.HasPrefix(run, "doomed:"), run)
	ls := tock("dead", "ls")
	require.Regexp(t, `(?m)^RUN\s+QUEUE\s+TYPE\s+ATTEMPTS\s+DUE\s+DIED\s+ERROR$`, ls)
	require.Regexp(t, `(?m)^`+regexp.QuoteMeta(run)+`\s+default\s+demo.doomed\s+1\s.*doomed: attempt 1 fails on purpose$`, ls)

	require.Contains(t, tock("dead", "requeue", run), "doomed")
	// It fails again and is dead again, with its attempts counted afresh.
	require.Eventually(t, func() bool {
		r := runTock(t, context.Background(), env, "", "dead", "ls", "--json")
		return r.err == nil && len(decodeJSON[ingest.DeadList](t, r.out).Dead) == 1
	}, 10*time.Second, 20*time.Millisecond)
	run = decodeJSON[ingest.DeadList](t, tock("dead", "ls", "--json")).Dead[0].Run
	tock("dead", "rm", run)
	r := runTock(t, context.Background(), env, "", "dead", "ls")
	require.NoError(t, r.err)
	require.Contains(t, r.errOut, "no dead runs")
	r = runTock(t, context.Background(), env, "", "dead", "rm", run)
	require.ErrorContains(t, r.err, "404")

	q := decodeJSON[ingest.QueueList](t, tock("queues", "--json"))
	require.NotEmpty(t, q.Queues)

	// Prometheus metrics of the API, the dispatcher and the worker.
	metrics := httpGet(t, u+"/metrics")
	for _, name := range []string{"tock_http_requests_total", "tock_lease_changes_total", "tock_runs_finished_total", "tock_queue_runs"} {
		require.True(t, strings.Contains(metrics, name), "no %s in /metrics", name)
	}
}

// httpGet GETs u, with a bearer token when one is given.
func httpGet(t *testing.T, u string, token ...string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	if len(token) > 0 {
		req.Header.Set("Authorization", "Bearer "+token[0])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	http.DefaultClient.CloseIdleConnections()
	return string(b)
}

func TestDev_BusyPortIsAClearError(t *testing.T) {
	t.Parallel()
	u, _ := startDev(t)
	err := dev(context.Background(), devOptions{addr: "127.0.0.1:0", http: strings.TrimPrefix(u, "http://"), shards: 4}, &syncBuffer{})
	require.ErrorContains(t, err, "--http")
}

func TestBench_IngestFromTheCommandLine(t *testing.T) {
	t.Parallel()
	for _, batch := range []string{"1", "40"} {
		r := runTock(t, context.Background(), nil, "", "bench", "ingest", "--jobs", "200", "--batch", batch, "--conns", "3", "--shards", "4", "--payload", "100", "--json")
		require.NoError(t, r.err, r.errOut)
		res := decodeJSON[bench.IngestResult](t, r.out)
		require.Equal(t, "ingest", res.Scenario)
		require.Equal(t, 200, res.Accepted)
		require.Zero(t, res.Rejected)
		require.Positive(t, res.AcceptedPerSec)
	}
}

// A job waiting for a retry shows when its next attempt is due, in the listing, the
// detail and the JSON, instead of no next run at all.
func TestDev_RetryingJobShowsItsNextAttempt(t *testing.T) {
	t.Parallel()
	u, _ := startDev(t)
	env := map[string]string{"TOCK_API": u}
	start := time.Now()
	r := runTock(t, context.Background(), env, "", "jobs", "create", "--id", "flaky", "--type", "demo.doomed", "--now",
		"--max-attempts", "3", "--initial-backoff", "1h")
	require.NoError(t, r.err, r.errOut)
	var j ingest.Job
	require.Eventually(t, func() bool {
		r := runTock(t, context.Background(), env, "", "jobs", "get", "flaky", "--json")
		j = decodeJSON[ingest.Job](t, r.out)
		return j.State == "retrying"
	}, 10*time.Second, 20*time.Millisecond)
	require.NotNil(t, j.RetryAt, "retry_at of a retrying job")
	// 1h ± the default jitter of 20%.
	require.WithinRange(t, *j.RetryAt, start.Add(48*time.Minute), time.Now().Add(72*time.Minute))
	due := j.RetryAt.UTC().Format("2006-01-02 15:04:05.000")

	r = runTock(t, context.Background(), env, "", "jobs", "get", "flaky")
	require.NoError(t, r.err)
	require.Regexp(t, `(?m)^next attempt:\s+`+regexp.QuoteMeta(due)+` \(attempt 2 of 3\)$`, r.out)
	r = runTock(t, context.Background(), env, "", "jobs", "ls")
	require.NoError(t, r.err)
	require.Regexp(t, `(?m)^flaky\s+default\s+demo.doomed\s+retrying\s+now\s+`+regexp.QuoteMeta(due)+` \(retry\)\s+5$`, r.out)
}

// tock dev's worker serves every queue, including ones that appear after it started;
// a job of a type it has no handler for fails with an error that says so in its run
// history; the banner says what the demo worker runs.
func TestDev_EveryQueueAndUnknownTypes(t *testing.T) {
	t.Parallel()
	u, out := startDev(t)
	env := map[string]string{"TOCK_API": u}
	tock := func(args ...string) string {
		t.Helper()
		r := runTock(t, context.Background(), env, "", args...)
		require.NoError(t, r.err, "tock %s\n%s%s", strings.Join(args, " "), r.out, r.errOut)
		return r.out
	}
	banner := out.String()
	require.Contains(t, banner, `echo, demo.hello, demo.flaky, demo.doomed`)
	require.Contains(t, banner, "in every queue")

	tock("jobs", "create", "--id", "mail-1", "--type", "echo", "--queue", "mail", "--now")
	tock("jobs", "create", "--id", "later-1", "--type", "echo", "--queue", "reports", "--delay", "1s")
	for _, id := range []string{"mail-1", "later-1"} {
		require.Eventually(t, func() bool {
			r := runTock(t, context.Background(), env, "", "jobs", "get", id, "--json")
			return r.err == nil && decodeJSON[ingest.Job](t, r.out).State == "completed"
		}, 15*time.Second, 20*time.Millisecond, "job %s in a queue other than default never ran", id)
	}

	tock("jobs", "create", "--id", "unknown-1", "--type", "email.welcome", "--now", "--max-attempts", "2", "--initial-backoff", "1h")
	require.Eventually(t, func() bool {
		r := runTock(t, context.Background(), env, "", "jobs", "runs", "unknown-1")
		return r.err == nil && strings.Contains(r.out, `no handler registered for job type "email.welcome"`)
	}, 10*time.Second, 20*time.Millisecond)
	require.Regexp(t, `(?m)^state:\s+retrying$`, tock("jobs", "get", "unknown-1"))
	require.Contains(t, out.String(), `fired    job=unknown-1`)
}

// tock dev --worker=false runs no worker: every job waits for the user's own.
func TestDev_WithoutWorker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- dev(ctx, devOptions{addr: "127.0.0.1:0", http: "127.0.0.1:0", shards: 2, noWorker: true,
			started: func(a string) { addr <- a }}, &out)
	}()
	u := "http://" + <-addr
	r := runTock(t, context.Background(), map[string]string{"TOCK_API": u}, "", "jobs", "create", "--id", "e", "--type", "echo", "--now")
	require.NoError(t, r.err)
	require.Contains(t, out.String(), "no worker runs")
	cancel()
	require.NoError(t, <-done)
}

// The throughput scenario over HTTP workers and the push scenario, small, on the
// embedded Redis.
func TestBench_HTTPWorkersAndPushFromTheCommandLine(t *testing.T) {
	t.Parallel()
	r := runTock(t, context.Background(), nil, "", "bench", "throughput", "--jobs", "200", "--http-workers", "2", "--claim-max", "30", "--shards", "4", "--json")
	require.NoError(t, r.err, r.errOut)
	tp := decodeJSON[bench.ThroughputResult](t, r.out)
	require.Equal(t, 200, tp.Processed)
	require.Equal(t, 2, tp.HTTPWorkers)
	require.Zero(t, tp.Duplicates)

	r = runTock(t, context.Background(), nil, "", "bench", "push", "--jobs", "200", "--concurrency", "8", "--shards", "4", "--json")
	require.NoError(t, r.err, r.errOut)
	p := decodeJSON[bench.PushResult](t, r.out)
	require.Equal(t, "push", p.Scenario)
	require.Equal(t, 200, p.Delivered)
	require.Zero(t, p.BadSignatures)
	require.Positive(t, p.DeliveriesPerSec)
}
