package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/bench"
	"github.com/tockhq/tock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// The scenarios are checked for what they count, never for how fast they ran: speed is
// measured with `tock bench`, not in tests.

// common targets b; on the miniredis backend it uses the bench's own embedded Redis, the
// path `tock bench` takes without --redis.
func common(b redistest.Backend) bench.Common {
	c := bench.Common{Redis: b.Addrs, Shards: 8, Dispatchers: 1}
	if b.Mini != nil {
		c.Redis = nil
	}
	return c
}

func TestFire_EveryJobOnceAndNeverEarly(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		res, err := bench.Fire(context.Background(), bench.FireConfig{Common: common(b),
			Jobs: 300, Window: time.Second, Lead: 3 * time.Second, Concurrency: 20, Payload: 10, Pending: 50, Grace: 20 * time.Second})
		require.NoError(t, err)
		require.Equal(t, 300, res.Fired)
		require.Zero(t, res.Duplicates)
		require.Zero(t, res.Missing)
		require.Zero(t, res.Early, "a handler started before its run was due")
		require.Equal(t, 50, res.Pending)
		l := res.LatenessMs
		require.True(t, 0 <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.Max, "percentiles out of order: %+v", l)
		require.Positive(t, res.FiresPerSec)
		require.Positive(t, res.EnqueuePerSec)
		requireCPUFigure(t, b, res.RedisCPUUsPerRun)
		// 300 runs a second and 20 slots: most runs are claimed within the default lead
		// of 100ms before they are due, none more than that.
		a := res.ClaimAheadMs
		require.Less(t, res.ClaimedAfterDue, 300)
		require.Positive(t, a.Max)
		require.LessOrEqual(t, a.Max, 101.0)
	})
}

func TestThroughput_ProcessesEveryJob(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		res, err := bench.Throughput(context.Background(), bench.ThroughputConfig{Common: common(b), Jobs: 500, Concurrency: 20, Payload: 10})
		require.NoError(t, err)
		require.Equal(t, 500, res.Processed)
		require.Zero(t, res.Duplicates)
		require.Positive(t, res.ProcessedPerSec)
		requireCPUFigure(t, b, res.RedisCPUUsPerRun)
	})
}

func TestThroughput_DefaultSlotsByBackend(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		res, err := bench.Throughput(context.Background(), bench.ThroughputConfig{Common: common(b), Jobs: 50, Payload: 10})
		require.NoError(t, err)
		require.Equal(t, 50, res.Processed)
		want := bench.DefaultConcurrency
		if b.Name == redistest.Cluster {
			want = bench.DefaultClusterConcurrency
		}
		require.Equal(t, want, res.Concurrency, "on %s (%s)", b.Name, res.Backend)
	})
}

// requireCPUFigure checks that a real Redis's CPU time per run was measured, and that the
// embedded one (no INFO cpu) reports none.
func requireCPUFigure(t *testing.T, b redistest.Backend, perRun float64) {
	t.Helper()
	if b.Mini != nil {
		require.Zero(t, perRun)
	} else {
		require.Positive(t, perRun)
	}
}

func TestMemory_CountsTheScheduledJobs(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		if b.Mini != nil {
			_, err := bench.Memory(context.Background(), bench.MemoryConfig{Common: common(b), Jobs: 10, Payload: 100})
			require.ErrorContains(t, err, "needs a real Redis")
			return
		}
		res, err := bench.Memory(context.Background(), bench.MemoryConfig{Common: common(b), Jobs: 2000, Payload: 100})
		require.NoError(t, err)
		// A job holds at least its payload; a sanity bound, not a target.
		require.Greater(t, res.BytesPerJob, 100.0)
		require.Less(t, res.BytesPerJob, 10000.0)
	})
}

func TestScenarios_RejectBadSettings(t *testing.T) {
	ctx := context.Background()
	_, err := bench.Fire(ctx, bench.FireConfig{Jobs: 0, Window: time.Second, Lead: time.Second})
	require.ErrorContains(t, err, "--jobs")
	_, err = bench.Fire(ctx, bench.FireConfig{Jobs: 1, Window: time.Second, Lead: time.Second, ProducerOnly: true, WorkersOnly: true})
	require.ErrorContains(t, err, "exclude each other")
	_, err = bench.Throughput(ctx, bench.ThroughputConfig{Jobs: -1})
	require.ErrorContains(t, err, "--jobs")
	_, err = bench.Throughput(ctx, bench.ThroughputConfig{Jobs: 1, Concurrency: -1})
	require.ErrorContains(t, err, "--concurrency -1")
	_, err = bench.Memory(ctx, bench.MemoryConfig{Jobs: 10})
	require.ErrorContains(t, err, "needs a real Redis")
	_, err = bench.Bare(ctx, bench.BareConfig{Jobs: 0})
	require.ErrorContains(t, err, "--jobs")
	_, err = bench.Bare(ctx, bench.BareConfig{Jobs: 10, Batch: -1})
	require.ErrorContains(t, err, "--batch -1")
}

func TestFire_ProducerAndWorkersInSeparateRuns(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		if b.Mini != nil {
			t.Skip("the roles meet in a shared Redis; the embedded one lives in one process")
		}
		ns := redistest.Namespace(t, b)
		c := common(b)
		c.Namespace = ns
		cfg := bench.FireConfig{Common: c, Jobs: 200, Window: time.Second, Lead: 3 * time.Second, Concurrency: 20, Payload: 10, Grace: 20 * time.Second}
		workers := cfg
		workers.WorkersOnly = true
		done := make(chan *bench.FireResult, 1)
		errs := make(chan error, 1)
		go func() {
			res, err := bench.Fire(context.Background(), workers)
			errs <- err
			done <- res
		}()
		producer := cfg
		producer.ProducerOnly = true
		producer.Dispatchers = 0
		pres, err := bench.Fire(context.Background(), producer)
		require.NoError(t, err)
		require.Positive(t, pres.EnqueuePerSec)
		require.Zero(t, pres.Fired, "the producer runs no workers")

		require.NoError(t, <-errs)
		res := <-done
		require.Equal(t, 200, res.Fired)
		require.Zero(t, res.Duplicates)
		require.Zero(t, res.Missing)
		require.Zero(t, res.Early)
	})
}

func TestBare_MovesEveryJobOnce(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		// 1,003 jobs over 3 streams in batches of 100: shares of 335 and 334, each with a
		// short last batch.
		res, err := bench.Bare(context.Background(), bench.BareConfig{Common: common(b), Jobs: 1003, Batch: 100, Streams: 3, Payload: 10})
		require.NoError(t, err)
		require.Equal(t, 1003, res.Processed)
		require.Zero(t, res.Duplicates)
		require.Positive(t, res.JobsPerSec)
		requireCPUFigure(t, b, res.RedisCPUUsPerJob)
		require.Equal(t, "bare", res.Scenario)
	})
}

// Workers over the pull protocol, through an API server in the process.
func TestThroughput_HTTPWorkers(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		res, err := bench.Throughput(context.Background(), bench.ThroughputConfig{Common: common(b), Jobs: 300, HTTPWorkers: 3, ClaimMax: 50, Payload: 10})
		require.NoError(t, err)
		require.Equal(t, 300, res.Processed)
		require.Zero(t, res.Duplicates)
		require.Zero(t, res.AckErrors)
		require.Equal(t, 3, res.HTTPWorkers)
		require.GreaterOrEqual(t, res.Claims, 6) // at most 50 runs a claim
		require.LessOrEqual(t, res.AckCalls, res.Claims, "one ack request per claim")
		require.GreaterOrEqual(t, res.AckCalls, 6)
		require.Equal(t, res.Claims+res.AckCalls, res.Requests)
		require.Positive(t, res.ProcessedPerSec)
		require.NotNil(t, res.AckMs)
		requireCPUFigure(t, b, res.RedisCPUUsPerRun)
	})
}

// The same with one ack request per run.
func TestThroughput_HTTPWorkersSingleAcks(t *testing.T) {
	b := redistest.Backends(t)[0]
	res, err := bench.Throughput(context.Background(), bench.ThroughputConfig{Common: common(b), Jobs: 200, HTTPWorkers: 2, ClaimMax: 50, Payload: 10, SingleAcks: true})
	require.NoError(t, err)
	require.Equal(t, 200, res.Processed)
	require.Zero(t, res.AckErrors)
	require.Equal(t, 200, res.AckCalls, "one ack request per run")
	require.Equal(t, res.Claims+200, res.Requests)
}

func TestPush_DeliversEveryJobSigned(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		res, err := bench.Push(context.Background(), bench.PushConfig{Common: common(b), Jobs: 300, Concurrency: 16, Payload: 10})
		require.NoError(t, err)
		require.Equal(t, 300, res.Delivered)
		require.Zero(t, res.Duplicates)
		require.Zero(t, res.BadSignatures)
		require.Positive(t, res.DeliveriesPerSec)
		requireCPUFigure(t, b, res.RedisCPUUsPerRun)
	})
}

func TestThroughputAndPush_RejectBadSettings(t *testing.T) {
	ctx := context.Background()
	_, err := bench.Throughput(ctx, bench.ThroughputConfig{Jobs: 1, HTTPWorkers: -1})
	require.ErrorContains(t, err, "--http-workers")
	_, err = bench.Throughput(ctx, bench.ThroughputConfig{Jobs: 1, HTTPWorkers: 1, ClaimMax: 5000})
	require.ErrorContains(t, err, "--claim-max")
	_, err = bench.Push(ctx, bench.PushConfig{Jobs: 0})
	require.ErrorContains(t, err, "--jobs")
	_, err = bench.Push(ctx, bench.PushConfig{Jobs: 1, Concurrency: -1})
	require.ErrorContains(t, err, "--concurrency")
}

func TestWorkflow_FanOutAndChains(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		res, err := bench.Workflow(context.Background(), bench.WorkflowConfig{Common: common(b), FanOut: 200, Rounds: 2, Chains: 100, Concurrency: 20})
		require.NoError(t, err)
		f := res.FanOut
		require.Equal(t, 201, f.Nodes)
		require.Equal(t, 2, f.Rounds)
		require.Zero(t, f.Duplicates)
		require.Positive(t, f.NodesPerSec)
		require.GreaterOrEqual(t, f.JoinClaimAfterAckMs.P50, 0.0, "the join is claimed after its last parent's ack")
		require.LessOrEqual(t, f.JoinClaimAfterAckMs.P50, f.JoinStartAfterAckMs.P50+1)
		c := res.Chains
		require.Equal(t, 100, c.Completed)
		require.Zero(t, c.Duplicates)
		require.Positive(t, c.ChainsPerSec)
		require.InDelta(t, 3*c.ChainsPerSec, c.NodesPerSec, 1)
	})
}
