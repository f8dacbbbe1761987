package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/bench"
	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/shard"
)

func TestIngest_AcceptsEveryJob(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		for _, tc := range []struct {
			name               string
			jobs, conns, batch int
		}{
			{"Single", 300, 4, 1},
			{"Batch", 1000, 3, 64}, // the last batch is short
		} {
			t.Run(tc.name, func(t *testing.T) {
				res, err := bench.Ingest(context.Background(), bench.IngestConfig{Common: common(b),
					Jobs: tc.jobs, Conns: tc.conns, Batch: tc.batch, Payload: 100})
				require.NoError(t, err)
				require.Equal(t, tc.jobs, res.Accepted)
				require.Zero(t, res.Rejected)
				require.Zero(t, res.Existing)
				require.Empty(t, res.FirstError)
				wantReqs := (tc.jobs + tc.batch - 1) / tc.batch
				require.Equal(t, wantReqs, res.Requests)
				status := "201"
				if tc.batch > 1 {
					status = "200"
				}
				require.Equal(t, map[string]int{status: wantReqs}, res.Statuses)
				require.Positive(t, res.AcceptedPerSec)
				l := res.LatencyMs
				require.True(t, 0 < l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.Max, "percentiles out of order: %+v", l)
			})
		}
	})
}

// An API elsewhere (--api): the jobs land in its namespace, due later, and refused
// requests are counted, not fatal.
func TestIngest_AgainstAnAPI(t *testing.T) {
	_, rc := redistest.Mini(t)
	ctx := context.Background()
	store, err := shard.Open(ctx, rc, shard.Config{Namespace: "bi", Shards: 4})
	require.NoError(t, err)
	srv, err := ingest.New(ingest.Config{Store: store, Addr: "127.0.0.1:0",
		Tokens: []ingest.Token{{Secret: "bench-0123456789abcdef", Scope: ingest.ScopeWrite}}})
	require.NoError(t, err)
	require.NoError(t, srv.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, srv.Stop(sctx))
	})
	api := "http://" + srv.Addr()

	res, err := bench.Ingest(ctx, bench.IngestConfig{API: api, Token: "bench-0123456789abcdef", Jobs: 100, Conns: 2, Batch: 30, Payload: 10})
	require.NoError(t, err)
	require.Equal(t, "api", res.Backend)
	require.Equal(t, 100, res.Accepted)
	qs, err := store.Queues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 1)
	require.Equal(t, "bench", qs[0].Queue)
	require.Equal(t, int64(100), qs[0].Scheduled)

	for _, batch := range []int{1, 25} {
		res, err = bench.Ingest(ctx, bench.IngestConfig{API: api, Jobs: 50, Conns: 2, Batch: batch})
		require.NoError(t, err)
		require.Zero(t, res.Accepted)
		require.Equal(t, 50, res.Rejected)
		require.Equal(t, map[string]int{"401": (50 + batch - 1) / batch}, res.Statuses)
		require.Contains(t, res.FirstError, "401 unauthenticated")
	}

	// Nothing listening is an error.
	_, err = bench.Ingest(ctx, bench.IngestConfig{API: "http://127.0.0.1:1", Jobs: 10, Conns: 1})
	require.Error(t, err)
}

func TestIngest_RejectsBadSettings(t *testing.T) {
	ctx := context.Background()
	_, err := bench.Ingest(ctx, bench.IngestConfig{Jobs: 0})
	require.ErrorContains(t, err, "--jobs")
	_, err = bench.Ingest(ctx, bench.IngestConfig{Jobs: 1, Batch: -1})
	require.ErrorContains(t, err, "--batch")
	_, err = bench.Ingest(ctx, bench.IngestConfig{Jobs: 1, API: "localhost:8080"})
	require.ErrorContains(t, err, "--api")
}
