package main

import (
	"context"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/shard"
)

// tock queues --watch keeps going while the API cannot be reached, says so, and draws
// again once the API is back.
func TestQueues_WatchSurvivesALostAPI(t *testing.T) {
	t.Parallel()
	_, rc := redistest.Mini(t)
	ctx := context.Background()
	store, err := shard.Open(ctx, rc, shard.Config{Namespace: "watch", Shards: 2})
	require.NoError(t, err)
	start := func(addr string) *ingest.Server {
		srv, err := ingest.New(ingest.Config{Store: store, Addr: addr})
		require.NoError(t, err)
		require.NoError(t, srv.Start(ctx))
		return srv
	}
	stop := func(srv *ingest.Server) {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, srv.Stop(sctx))
	}
	srv := start("127.0.0.1:0")
	addr := srv.Addr()

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		c := &cli{out: &out, errOut: &errOut, in: strings.NewReader(""), loc: time.UTC,
			getenv: func(k string) string { return map[string]string{"TOCK_API": "http://" + addr}[k] }}
		done <- run(wctx, []string{"queues", "--watch", "--interval", "20ms"}, c)
	}()
	draws := func() int { return strings.Count(out.String(), "QUEUE") }
	require.Eventually(t, func() bool { return draws() >= 2 }, 10*time.Second, 10*time.Millisecond)

	stop(srv)
	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), "cannot reach the API") }, 10*time.Second, 10*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("queues --watch ended when the API went away: %v\n%s", err, errOut.String())
	default:
	}
	require.Contains(t, errOut.String(), "retrying every 20ms")
	before := draws()

	srv = start(addr)
	defer stop(srv)
	require.Eventually(t, func() bool { return draws() > before+1 }, 10*time.Second, 10*time.Millisecond)
	require.Contains(t, errOut.String(), "the API answers again")
	cancel()
	require.NoError(t, <-done)
}

// A reply that retrying cannot change (a missing token, say) ends --watch at once.
func TestQueues_WatchStopsOnAnAPIError(t *testing.T) {
	t.Parallel()
	b := setupAPI(t, ingest.Token{Secret: "reader-0123456789", Scope: ingest.ScopeRead})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := runTock(t, ctx, b.env, "", "queues", "--watch", "--interval", "20ms")
	require.ErrorContains(t, r.err, "401")
	require.NoError(t, ctx.Err())
}

// tock queues shows the runs processed and failed per queue, and their lateness, when
// the API's process runs workers (tock dev); otherwise it says where they are.
func TestQueues_WorkerFigures(t *testing.T) {
	t.Parallel()
	u, _ := startDev(t)
	env := map[string]string{"TOCK_API": u}
	for _, args := range [][]string{
		{"jobs", "create", "--type", "echo", "--now"},
		{"jobs", "create", "--type", "echo", "--now"},
		{"jobs", "create", "--type", "demo.doomed", "--now", "--max-attempts", "1"},
	} {
		r := runTock(t, context.Background(), env, "", args...)
		require.NoError(t, r.err, r.errOut)
	}
	head := regexp.MustCompile(`(?m)^QUEUE\s+PAUSED\s+SCHEDULED\s+READY\s+IN FLIGHT\s+DEAD\s+FIRED\s+FIRED/S\s+PROCESSED\s+FAILED\s+LATENESS P99$`)
	row := regexp.MustCompile(`(?m)^default\s+-\s+0\s+0\s+0\s+1\s+3\s+\S+\s+2\s+1\s+\d+(\.\d+)?(µs|ms|s)$`)
	var last result
	require.Eventually(t, func() bool {
		last = runTock(t, context.Background(), env, "", "queues")
		return last.err == nil && head.MatchString(last.out) && row.MatchString(last.out)
	}, 10*time.Second, 20*time.Millisecond, "last output:\n%s%s", last.out, last.errOut)

	// An API without workers in its process: the figures are not there, and it says so.
	b := setupAPI(t)
	b.ok(t, "jobs", "create", "--type", "t", "--now", "--queue", "mail")
	r := b.run(t, "", "queues")
	require.NoError(t, r.err)
	require.Regexp(t, `(?m)^mail\s+-\s+0\s+1\s+0\s+0\s+\d+\s+\S+\s+-\s+-\s+-$`, r.out)
	require.Contains(t, r.errOut, "no worker in the API's process")
}

func TestWorkerFigures_Parse(t *testing.T) {
	t.Parallel()
	text := `# HELP tock_runs_finished_total Attempts finished.
# TYPE tock_runs_finished_total counter
tock_runs_finished_total{outcome="succeeded",queue="default"} 98
tock_runs_finished_total{outcome="failed",queue="default"} 1
tock_runs_finished_total{outcome="dead",queue="default"} 1
tock_runs_finished_total{outcome="cancelled",queue="mail"} 2
tock_fire_lateness_seconds_bucket{queue="default",le="0.001"} 50
tock_fire_lateness_seconds_bucket{queue="default",le="0.0025"} 90
tock_fire_lateness_seconds_bucket{queue="default",le="0.005"} 100
tock_fire_lateness_seconds_bucket{queue="default",le="+Inf"} 100
tock_fire_lateness_seconds_sum{queue="default"} 0.12
tock_fire_lateness_seconds_count{queue="default"} 100
`
	figs, err := parseWorkerFigures(strings.NewReader(text))
	require.NoError(t, err)
	d := figs["default"]
	require.Equal(t, 98.0, d.processed)
	require.Equal(t, 2.0, d.failed)
	require.Equal(t, "1ms", d.quantile(0.5))
	require.Equal(t, "4.8ms", d.quantile(0.99)) // 9 of the 10 runs between 2.5ms and 5ms: 4.75ms
	require.Empty(t, figs["mail"].quantile(0.99))
	late := &workerFigures{buckets: []bucket{{0.001, 1}, {60, 1}, {math.Inf(1), 2}}}
	require.Equal(t, ">1m0s", late.quantile(0.99))

	// Since an earlier reading: only the new observations.
	prev := &workerFigures{buckets: []bucket{{0.001, 50}, {0.0025, 90}, {0.005, 95}, {math.Inf(1), 95}}}
	require.Equal(t, "5ms", d.since(prev).quantile(0.99)) // 4.975ms
}
