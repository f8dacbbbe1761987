package prom_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/internal/prom"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/worker"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// value returns the value of the counter or gauge name with the given labels ("k=v"
// pairs), summed over the series that match; 0 when none does.
func value(t *testing.T, m *prom.Metrics, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, mt := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range mt.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for _, l := range labels {
				k, v, _ := strings.Cut(l, "=")
				if have[k] != v {
					continue series
				}
			}
			switch {
			case mt.GetCounter() != nil:
				sum += mt.GetCounter().GetValue()
			case mt.GetGauge() != nil:
				sum += mt.GetGauge().GetValue()
			case mt.GetHistogram() != nil:
				sum += float64(mt.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// TestMetrics_DispatcherAndWorker runs a dispatcher and a worker reporting to one
// Metrics and checks that the counts match the jobs run.
func TestMetrics_DispatcherAndWorker(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := shard.Open(ctx, b.Client(t), shard.Config{Namespace: redistest.Namespace(t, b), Shards: 4})
		require.NoError(t, err)
		m, err := prom.New(prom.Config{})
		require.NoError(t, err)
		require.NoError(t, m.QueueDepths(ctx, s.Queues))

		d, err := dispatcher.New(dispatcher.Config{Store: s, Name: "pd", LeaseTTL: time.Second, Metrics: m})
		require.NoError(t, err)
		require.NoError(t, d.Start(ctx))
		w, err := worker.New(worker.Config{Store: s, Concurrency: 8, Queues: []string{"default", "mail"}, Sweep: 50 * time.Millisecond, Metrics: m})
		require.NoError(t, err)
		w.HandleFunc("ok", func(context.Context, *worker.Run) error { return nil })
		w.HandleFunc("fail", func(context.Context, *worker.Run) error { return errors.New("boom") })
		require.NoError(t, w.Start(ctx))
		stopped := false
		stop := func() {
			if stopped {
				return
			}
			stopped = true
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, w.Stop(sctx))
			require.NoError(t, d.Stop(sctx))
		}
		t.Cleanup(stop)
		require.Eventually(t, func() bool { return len(d.Owned()) == 4 }, 10*time.Second, 5*time.Millisecond)

		// Runs the dispatcher fires: delayed jobs on two queues, one of which dies.
		var jobs []*job.Job
		for i := range 12 {
			q := "default"
			if i%3 == 0 {
				q = "mail"
			}
			jobs = append(jobs, &job.Job{ID: "j" + strings.Repeat("x", i+1), Queue: q, Type: "ok", Schedule: job.Schedule{Delay: 50 * time.Millisecond}})
		}
		jobs = append(jobs, &job.Job{ID: "dead", Type: "fail", Retry: job.RetryPolicy{MaxAttempts: 1}, Schedule: job.Schedule{Delay: 50 * time.Millisecond}})
		_, err = s.Create(ctx, jobs)
		require.NoError(t, err)

		require.Eventually(t, func() bool {
			return value(t, m, "tock_runs_finished_total") == 13
		}, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, 13.0, value(t, m, "tock_runs_fired_total"))
		require.Equal(t, 9.0, value(t, m, "tock_runs_claimed_total", "queue=default"))
		require.Equal(t, 4.0, value(t, m, "tock_runs_claimed_total", "queue=mail"))
		require.Equal(t, 8.0, value(t, m, "tock_runs_finished_total", "queue=default", "outcome=succeeded"))
		require.Equal(t, 1.0, value(t, m, "tock_runs_finished_total", "queue=default", "outcome=dead"))
		require.Equal(t, 4.0, value(t, m, "tock_runs_finished_total", "queue=mail", "outcome=succeeded"))
		require.Equal(t, 13.0, value(t, m, "tock_fire_lateness_seconds"))
		require.Equal(t, 13.0, value(t, m, "tock_run_duration_seconds"))
		require.Equal(t, 4.0, value(t, m, "tock_lease_changes_total", "change=acquired"))

		// Queue depths come from Redis at scrape time.
		_, err = s.PauseQueue(ctx, "mail")
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			return value(t, m, "tock_queue_runs", "queue=default", "state=dead") == 1 &&
				value(t, m, "tock_queue_paused", "queue=mail") == 1
		}, 10*time.Second, 20*time.Millisecond)
		require.Zero(t, value(t, m, "tock_queue_stats_errors_total"))

		// The handler serves it all.
		var rc fasthttp.RequestCtx
		rc.Request.SetRequestURI("/metrics")
		m.Handler()(&rc)
		require.Equal(t, fasthttp.StatusOK, rc.Response.StatusCode())
		require.Contains(t, string(rc.Response.Body()), `tock_runs_finished_total{outcome="dead",queue="default"} 1`)

		stop()
		require.Equal(t, 4.0, value(t, m, "tock_lease_changes_total", "change=released"))
		require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP tock_lease_changes_total Shard lease changes of this process's dispatcher: acquired, lost, released.
# TYPE tock_lease_changes_total counter
tock_lease_changes_total{change="acquired"} 4
tock_lease_changes_total{change="lost"} 0
tock_lease_changes_total{change="released"} 4
`), "tock_lease_changes_total"))
	})
}
