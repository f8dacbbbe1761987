package worker

import (
	"context"
	"errors"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/shard"
)

func newTestWorker(t *testing.T) *Worker {
	t.Helper()
	m := miniredis.RunT(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, AlwaysRESP2: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	s, err := shard.Open(context.Background(), c, shard.Config{Namespace: "wt", Shards: 4})
	require.NoError(t, err)
	w, err := New(Config{Store: s, Concurrency: 4})
	require.NoError(t, err)
	return w
}

func TestTakeClaims_SignalDuringClaimKeepsSourceHot(t *testing.T) {
	w := newTestWorker(t)
	a, b := source{"default", 1}, source{"default", 2}
	w.markHot(a)
	w.markHot(b)
	reqs := []shard.ClaimRequest{{Shard: 1, Queue: "default", N: 2}, {Shard: 2, Queue: "default", N: 2}}
	marks := []uint64{w.hot[a], w.hot[b]}

	// While the claim round is in flight, the dispatcher fires new runs on shard 1.
	w.markHot(a)
	failed := w.takeClaims(reqs, marks, []shard.ClaimResult{{}, {}})
	require.Empty(t, failed)
	require.Contains(t, w.hot, a, "a signal that arrived during the claim must not be lost")
	require.NotContains(t, w.hot, b, "an empty source without a new signal stops being hot")

	// The next round finds shard 1 empty too, with no signal in between: now it goes.
	marks = []uint64{w.hot[a]}
	w.takeClaims(reqs[:1], marks, []shard.ClaimResult{{}})
	require.NotContains(t, w.hot, a)
}

func TestTakeClaims_HoldsRunsAndReportsFailures(t *testing.T) {
	w := newTestWorker(t)
	a := source{"default", 3}
	w.markHot(a)
	reqs := []shard.ClaimRequest{{Shard: 3, Queue: "default", N: 2}, {Shard: 0, Queue: "default", N: 1}}
	runs := []shard.Claimed{{Shard: 3, Member: "x:1"}, {Shard: 3, Member: "y:1"}}
	failed := w.takeClaims(reqs, []uint64{w.hot[a], 0}, []shard.ClaimResult{{Runs: runs}, {Err: errors.New("down")}})
	require.Equal(t, []int{1}, failed)
	require.Len(t, w.held, 2)
	require.Len(t, w.runs, 2)
	require.Contains(t, w.hot, a, "a source that filled the request may have more")
}
