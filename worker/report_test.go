package worker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// An outcome whose report fails (Redis answering errors for a while, as during a
// failover) is sent again until Redis takes it: the run ends once, acked, and is not
// redelivered.
func TestReport_RetriedUntilRedisTakesIt(t *testing.T) {
	m, c := redistest.Mini(t)
	ctx := context.Background()
	s, err := shard.Open(ctx, c, shard.Config{Namespace: "rr", Shards: 2})
	require.NoError(t, err)
	w, err := New(Config{Store: s, Concurrency: 2, Sweep: 50 * time.Millisecond})
	require.NoError(t, err)
	var calls atomic.Int32
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	w.HandleFunc("t", func(context.Context, *Run) error {
		calls.Add(1)
		<-release
		return nil
	})
	require.NoError(t, w.Start(ctx))
	// A failed check must not leave the handler blocked: Stop would wait for it forever.
	defer func() { releaseOnce(); _ = w.Stop(ctx) }()
	_, err = s.Create(ctx, []*job.Job{{ID: "a", Type: "t", Schedule: job.Schedule{Now: true}}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return calls.Load() == 1 }, 15*time.Second, 5*time.Millisecond)

	m.SetError("LOADING Redis is loading the dataset in memory")
	releaseOnce()
	// Longer than the four tries of the reporter before this change.
	time.Sleep(1500 * time.Millisecond)
	w.mu.Lock()
	require.Len(t, w.held, 1, "held while its report is retried")
	w.mu.Unlock()
	m.SetError("")

	require.Eventually(t, func() bool {
		info, err := s.Get(ctx, "a")
		return err == nil && info.State == job.StateCompleted
	}, 15*time.Second, 10*time.Millisecond)
	w.mu.Lock()
	require.Empty(t, w.held)
	w.mu.Unlock()
	require.Equal(t, int32(1), calls.Load(), "never redelivered")
}

func reportOf(id shard.ID, member string) report {
	return report{a: &active{c: shard.Claimed{Shard: id, Member: member}}, f: shard.Finish{Member: member, Outcome: shard.Succeeded}}
}

func members(batch [][]report) [][]string {
	var out [][]string
	for _, reps := range batch {
		var ms []string
		for _, r := range reps {
			ms = append(ms, r.a.c.Member)
		}
		out = append(out, ms)
	}
	return out
}

// A shard's first outcome after a quiet spell goes at once; the ones after it wait for
// the shard's turn, AckDelay after its last call, and then go together.
func TestReportQueue_OutcomesOfAShardGoTogetherOncePerDelay(t *testing.T) {
	t.Parallel()
	const delay = 50 * time.Millisecond
	q := newReportQueue(delay)
	t0 := time.Unix(1000, 0)

	q.add(reportOf(1, "a:1"))
	byShard, batch, _ := q.due(t0, false)
	require.Equal(t, [][]string{{"a:1"}}, members(batch))
	require.Len(t, byShard[1], 1)
	require.Equal(t, "a:1", byShard[1][0].Member)
	require.Equal(t, 0, q.index[1])
	q.sent(1, t0, nil)

	q.add(reportOf(1, "b:1"))
	q.add(reportOf(1, "c:1"))
	// Another shard is not held back by the first one's turn.
	q.add(reportOf(2, "d:1"))
	_, batch, next := q.due(t0.Add(10*time.Millisecond), false)
	require.Equal(t, [][]string{{"d:1"}}, members(batch))
	require.True(t, next.IsZero(), "something went: the caller comes back at once")
	q.sent(2, t0.Add(10*time.Millisecond), nil)

	_, batch, next = q.due(t0.Add(20*time.Millisecond), false)
	require.Empty(t, batch)
	require.Equal(t, t0.Add(delay), next, "shard 1's turn")
	require.Equal(t, 2, q.waiting)

	byShard, batch, _ = q.due(t0.Add(delay), false)
	require.Equal(t, [][]string{{"b:1", "c:1"}}, members(batch))
	require.Len(t, byShard[1], 2)
	require.Equal(t, 0, q.waiting)
}

// Once shardReportBatch outcomes of a shard wait, they go without waiting for its turn;
// one round sends about maxReportBatch at most, and the rest follow in the next.
func TestReportQueue_FullShardGoesAtOnceAndRoundsAreBounded(t *testing.T) {
	t.Parallel()
	q := newReportQueue(time.Second)
	t0 := time.Unix(1000, 0)
	q.add(reportOf(1, "first:1"))
	_, batch, _ := q.due(t0, false)
	require.Len(t, batch, 1)
	q.sent(1, t0, nil)

	for i := range shardReportBatch - 1 {
		q.add(reportOf(1, fmt.Sprintf("a%d:1", i)))
	}
	_, batch, next := q.due(t0.Add(time.Millisecond), false)
	require.Empty(t, batch)
	require.Equal(t, t0.Add(time.Second), next)
	q.add(reportOf(1, "last:1"))
	_, batch, _ = q.due(t0.Add(time.Millisecond), false)
	require.Len(t, batch, 1)
	require.Len(t, batch[0], shardReportBatch)
	q.sent(1, t0.Add(time.Millisecond), nil)

	// Many full shards: a round stops taking shards once maxReportBatch runs are in it.
	shards := maxReportBatch/shardReportBatch + 2
	for id := range shards {
		for i := range shardReportBatch {
			q.add(reportOf(shard.ID(10+id), fmt.Sprintf("s%d-%d:1", id, i)))
		}
	}
	total := 0
	for round := 0; q.waiting > 0; round++ {
		require.Less(t, round, shards, "every shard goes in a few rounds")
		_, batch, _ := q.due(t0.Add(2*time.Millisecond), false)
		n := 0
		for _, reps := range batch {
			n += len(reps)
			q.sent(reps[0].a.c.Shard, t0.Add(2*time.Millisecond), nil)
		}
		require.Positive(t, n)
		require.LessOrEqual(t, n, maxReportBatch)
		total += n
	}
	require.Equal(t, shards*shardReportBatch, total)
}

// When the worker stops, every waiting outcome goes without waiting for its shard's turn,
// but the outcomes of a failed call still pause before they go again, ahead of the ones
// that came after them.
func TestReportQueue_StopSendsAllButFailedCallsPause(t *testing.T) {
	t.Parallel()
	q := newReportQueue(time.Second)
	t0 := time.Unix(1000, 0)
	q.add(reportOf(1, "a:1"))
	q.add(reportOf(2, "b:1"))
	_, batch, _ := q.due(t0, false)
	require.Len(t, batch, 2)
	q.sent(1, t0, nil)
	q.sent(2, t0, batch[q.index[2]]) // shard 2's call failed; its report goes again

	q.add(reportOf(1, "c:1"))
	q.add(reportOf(2, "d:1"))
	_, batch, next := q.due(t0.Add(time.Millisecond), true)
	require.Equal(t, [][]string{{"c:1"}}, members(batch), "stopping: shard 1 goes before its turn")
	require.True(t, next.IsZero())
	q.sent(1, t0.Add(time.Millisecond), nil)

	_, batch, next = q.due(t0.Add(2*time.Millisecond), true)
	require.Empty(t, batch)
	require.Equal(t, t0.Add(reportRetryPause), next, "a failed call pauses even when stopping")

	_, batch, _ = q.due(t0.Add(reportRetryPause), true)
	require.Equal(t, [][]string{{"b:1", "d:1"}}, members(batch), "the retried report first")
	require.Equal(t, 0, q.waiting)
}

// With no delay (AckDelay < 0) every outcome goes as soon as the reporter sees it.
func TestReportQueue_NoDelay(t *testing.T) {
	t.Parallel()
	q := newReportQueue(0)
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		q.add(reportOf(1, fmt.Sprintf("a%d:1", i)))
		_, batch, _ := q.due(t0, false)
		require.Len(t, batch, 1)
		q.sent(1, t0, nil)
	}
}

func TestConfig_AckDelay(t *testing.T) {
	t.Parallel()
	_, c := redistest.Mini(t)
	s, err := shard.Open(context.Background(), c, shard.Config{Namespace: "ad", Shards: 2})
	require.NoError(t, err)
	for _, tc := range []struct {
		in, want time.Duration
		err      string
	}{
		{0, DefaultAckDelay, ""},
		{-1, 0, ""},
		{time.Second, time.Second, ""},
		{time.Second + 1, 0, "worker: AckDelay must be at most 1s, got 1.000000001s"},
	} {
		w, err := New(Config{Store: s, AckDelay: tc.in})
		if tc.err != "" {
			require.EqualError(t, err, tc.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, w.cfg.AckDelay)
	}
}
