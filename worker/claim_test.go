package worker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

func newTestWorker(t *testing.T) *Worker {
	t.Helper()
	_, c := redistest.Mini(t)
	s, err := shard.Open(context.Background(), c, shard.Config{Namespace: "wt", Shards: 4})
	require.NoError(t, err)
	w, err := New(Config{Store: s, Concurrency: 4})
	require.NoError(t, err)
	return w
}

func TestTakeClaims_ReadySignalNewerThanTheClaimKeepsSourceHot(t *testing.T) {
	w := newTestWorker(t)
	a, b, c := source{"default", 1}, source{"default", 2}, source{"default", 3}
	// Shard 1 got runs ready at 1000 ms, after its claim ran at 990 ms (the claim was in
	// flight when the signal came); shard 2's runs were ready at 980, before its claim;
	// shard 3 was marked by a sweep.
	w.markHot(a, 1000)
	w.markHot(b, 980)
	w.markHot(c, 0)
	reqs := []shard.ClaimRequest{{Shard: 1, Queue: "default", N: 2}, {Shard: 2, Queue: "default", N: 2}, {Shard: 3, Queue: "default", N: 2}}
	failed := w.takeClaims(reqs, []shard.ClaimResult{{At: 990}, {At: 990}, {At: 990}}, time.Now())
	require.Empty(t, failed)
	require.Contains(t, w.hot, a, "runs made ready after the claim ran must still be claimed")
	require.NotContains(t, w.hot, b, "the claim saw shard 2's runs: it is empty")
	require.NotContains(t, w.hot, c)

	// It is claimed once more; short again with no new signal, it goes.
	w.takeClaims(reqs[:1], []shard.ClaimResult{{At: 995}}, time.Now())
	require.NotContains(t, w.hot, a)

	// Same millisecond: the order is unknown, so claim once more.
	w.markHot(a, 1000)
	w.takeClaims(reqs[:1], []shard.ClaimResult{{At: 1000}}, time.Now())
	require.Contains(t, w.hot, a)
	w.takeClaims(reqs[:1], []shard.ClaimResult{{At: 1001}}, time.Now())
	require.NotContains(t, w.hot, a)

	// A signal stamped far ahead (a skewed clock estimate) buys one more claim, not more.
	w.markHot(a, 1_000_000)
	w.takeClaims(reqs[:1], []shard.ClaimResult{{At: 1002}}, time.Now())
	require.Contains(t, w.hot, a)
	w.takeClaims(reqs[:1], []shard.ClaimResult{{At: 1003}}, time.Now())
	require.NotContains(t, w.hot, a)

	// An older signal never lowers a newer mark.
	w.markHot(a, 2000)
	w.markHot(a, 1500)
	require.Equal(t, int64(2000), w.hot[a])
}

func TestTakeClaims_HoldsRunsAndReportsFailures(t *testing.T) {
	w := newTestWorker(t)
	a := source{"default", 3}
	w.markHot(a, 5)
	reqs := []shard.ClaimRequest{{Shard: 3, Queue: "default", N: 2}, {Shard: 0, Queue: "default", N: 1}}
	runs := []shard.Claimed{{Shard: 3, Member: "x:1"}, {Shard: 3, Member: "y:1"}}
	failed := w.takeClaims(reqs, []shard.ClaimResult{{Runs: runs, At: 10, More: true}, {Err: errors.New("down")}}, time.Now())
	require.Equal(t, []int{1}, failed)
	require.Len(t, w.held, 2)
	require.Len(t, w.runs, 2)
	require.Contains(t, w.hot, a, "a source that filled the request may have more")
}

// A run whose handler has finished frees its slot at once, while its outcome still waits
// for the reporter: a slow acknowledgement does not hold back the next claims.
func TestClaimable_RunWaitingForItsReportTakesNoSlot(t *testing.T) {
	w := newTestWorker(t) // Concurrency 4
	reqs := []shard.ClaimRequest{{Shard: 3, Queue: "default", N: 2}}
	runs := []shard.Claimed{{Shard: 3, Member: "x:1", Token: "t"}, {Shard: 3, Member: "y:1", Token: "t"}}
	require.Empty(t, w.takeClaims(reqs, []shard.ClaimResult{{Runs: runs, At: 10}}, time.Now()))
	require.Equal(t, 2, w.claimNow())
	x, y := <-w.runs, <-w.runs

	w.finish(x, nil, shard.Finish{Outcome: shard.Succeeded}, time.Time{}, time.Time{}, nil)
	require.Len(t, w.reports, 1)
	require.Len(t, w.held, 2, "held (and heartbeated) until Redis has the outcome")
	require.Equal(t, 3, w.claimNow())

	w.done(x) // the reporter's call once the outcome is stored
	require.Len(t, w.held, 1)
	require.Equal(t, 3, w.claimNow())

	w.done(y) // a run lost to another worker: done without a report
	require.Zero(t, w.reporting)
	require.Equal(t, 4, w.claimNow())
}

// A round shares the free slots among as few sources as take minClaimPerSource each, and
// visits every hot source in turn over the rounds.
func TestNextRound_SharesFreeSlotsAmongFewSources(t *testing.T) {
	w := newTestWorker(t)
	for id := range shard.ID(8) {
		w.markHot(source{"default", id}, 1)
	}
	seen := map[shard.ID]int{}
	var order []source
	var reqs []shard.ClaimRequest
	for range 4 {
		order, reqs = w.nextRound(order, reqs[:0], 2*minClaimPerSource, 0)
		require.Len(t, reqs, 2)
		for _, r := range reqs {
			require.Equal(t, minClaimPerSource, r.N)
			seen[r.Shard]++
		}
	}
	require.Len(t, seen, 8, "every hot source is claimed from once in four rounds")
	for id, n := range seen {
		require.Equal(t, 1, n, "shard %d", id)
	}

	// Fewer free slots than a source's share: one source gets them all.
	_, reqs = w.nextRound(nil, nil, 10, 0)
	require.Len(t, reqs, 1)
	require.Equal(t, 10, reqs[0].N)
	require.Equal(t, 10, reqs[0].Now)
	// None free: no round, whatever could be held.
	_, reqs = w.nextRound(nil, nil, 0, 1000)
	require.Empty(t, reqs)

	// Runs to hold for their start time widen the round; the free slots are shared out
	// as runs that may start now, and a source whose share is none takes only held runs.
	_, reqs = w.nextRound(nil, nil, 1, 4*minClaimPerSource-1)
	require.Len(t, reqs, 4)
	require.Equal(t, shard.ClaimRequest{Shard: reqs[0].Shard, Queue: "default", N: minClaimPerSource + 1, Now: 1}, reqs[0])
	for i, r := range reqs[1:] {
		require.Equal(t, minClaimPerSource-i/2, r.N) // 64, 64, 63: 255 shared
		require.Equal(t, -1, r.Now)
	}
	// Free slots go to as few sources as take minClaimPerSource each: with runs due now
	// (no lead), slots spread over every source would claim a run or two per call.
	_, reqs = w.nextRound(nil, nil, 2*minClaimPerSource, 2*minClaimPerSource)
	require.Len(t, reqs, 4)
	for i, r := range reqs {
		if i < 2 {
			require.Equal(t, minClaimPerSource, r.Now)
			require.Equal(t, minClaimPerSource+minClaimPerSource/2, r.N)
		} else {
			require.Equal(t, -1, r.Now)
			require.Equal(t, minClaimPerSource/2, r.N)
		}
	}
}

// A claim takes at most shard.MaxClaim runs. A round with more free slots asks a source
// for no more than that, and a claim that took that many keeps its source hot: taking it
// for an empty source left the rest of a deep ready set to the next sweep.
func TestClaims_NoMoreThanMaxClaimAndAFullOneKeepsTheSourceHot(t *testing.T) {
	_, c := redistest.Mini(t)
	s, err := shard.Open(context.Background(), c, shard.Config{Namespace: "wm", Shards: 4})
	require.NoError(t, err)
	w, err := New(Config{Store: s, Concurrency: 2 * shard.MaxClaim, Prefetch: shard.MaxClaim})
	require.NoError(t, err)
	src := source{"default", 1}
	w.markHot(src, 0)
	_, reqs := w.nextRound(nil, nil, 3*shard.MaxClaim, 0)
	require.Equal(t, []shard.ClaimRequest{{Shard: 1, Queue: "default", N: shard.MaxClaim, Now: shard.MaxClaim}}, reqs)

	claimed := func(n int) []shard.Claimed {
		runs := make([]shard.Claimed, n)
		for i := range runs {
			runs[i] = shard.Claimed{Shard: 1, Member: fmt.Sprintf("j%d-%d:1", n, i), Token: "t"}
		}
		return runs
	}
	// Asked for more than a claim takes (as a caller of an older nextRound did), and got
	// MaxClaim: not empty.
	over := []shard.ClaimRequest{{Shard: 1, Queue: "default", N: 3 * shard.MaxClaim}}
	require.Empty(t, w.takeClaims(over, []shard.ClaimResult{{Runs: claimed(shard.MaxClaim), At: 10, More: true}}, time.Now()))
	require.Contains(t, w.hot, src)
	require.Empty(t, w.takeClaims(reqs, []shard.ClaimResult{{Runs: claimed(shard.MaxClaim), At: 11, More: true}}, time.Now()))
	require.Contains(t, w.hot, src)
	// The claim found the set empty: the source is no longer hot.
	require.Empty(t, w.takeClaims(reqs, []shard.ClaimResult{{Runs: claimed(shard.MaxClaim - 1), At: 12}}, time.Now()))
	require.NotContains(t, w.hot, src)
}

// End to end: a worker with more slots than a claim takes drains a ready set deeper than
// one claim without waiting for its sweep (an hour here).
func TestWorker_DrainsMoreThanOneClaimWithoutTheSweep(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		s, err := shard.Open(ctx, b.Client(t), shard.Config{Namespace: redistest.Namespace(t, b), Shards: 1})
		require.NoError(t, err)
		const n = 2*shard.MaxClaim + 500
		jobs := make([]*job.Job, n)
		for i := range jobs {
			jobs[i] = &job.Job{ID: fmt.Sprintf("d%d", i), Type: "t", Schedule: job.Schedule{Now: true}}
		}
		_, err = s.Create(ctx, jobs)
		require.NoError(t, err)
		var done atomic.Int64
		w, err := New(Config{Store: s, Concurrency: shard.MaxClaim + 500, Sweep: time.Hour})
		require.NoError(t, err)
		w.HandleFunc("t", func(context.Context, *Run) error {
			done.Add(1)
			return nil
		})
		require.NoError(t, w.Start(ctx))
		defer stopSoon(w)
		for deadline := time.Now().Add(45 * time.Second); done.Load() < n && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		require.Equal(t, int64(n), done.Load(), "runs handled")
	})
}

// claimNow is claimable's count of runs that may start at once.
func (w *Worker) claimNow() int {
	now, _ := w.claimable()
	return now
}

// A source whose claim stopped at a run that starts at once, for want of a free slot, is
// late: rounds give it the free slots first and leave it out when they have none, so
// claims of runs held ahead do not knock at its head again and again.
func TestNextRound_LateSourcesTakeTheFreeSlotsFirst(t *testing.T) {
	w := newTestWorker(t)
	// takeClaims and the timers of held runs take w.mu.
	take := func(reqs []shard.ClaimRequest, res []shard.ClaimResult, got time.Time) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.takeClaims(reqs, res, got)
	}
	defer func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, a := range w.held {
			if a.wait != nil {
				a.wait.Stop()
			}
		}
	}()
	for id := range shard.ID(4) {
		w.markHot(source{"default", id}, 1)
	}
	late := source{"default", 2}
	req := []shard.ClaimRequest{{Shard: 2, Queue: "default", N: 10, Now: -1}}
	take(req, []shard.ClaimResult{{At: 5, More: true}}, time.Now())
	require.True(t, w.late[late])

	_, reqs := w.nextRound(nil, nil, 1, 4*minClaimPerSource-1)
	require.Len(t, reqs, 4)
	require.Equal(t, shard.ID(2), reqs[0].Shard, "the late source first")
	require.Equal(t, 1, reqs[0].Now)
	require.Equal(t, 1, reqs[0].N, "a late source takes what its slots allow")
	for _, r := range reqs[1:] {
		require.Equal(t, -1, r.Now)
	}
	// A claim that takes the run due now and stops at the next is still late; one that
	// reaches a run held for its start time is not.
	req[0].Now = 1
	now := time.Now()
	take(req, []shard.ClaimResult{{At: 6, More: true, Runs: []shard.Claimed{{Shard: 2, Member: "l:1", Token: "t", ClaimedAt: now, StartAt: now}}}}, now)
	require.True(t, w.late[late])
	take(req, []shard.ClaimResult{{At: 6, More: true, Runs: []shard.Claimed{{Shard: 2, Member: "l:2", Token: "t", ClaimedAt: now, StartAt: now},
		{Shard: 2, Member: "l:3", Token: "t", ClaimedAt: now, StartAt: now.Add(time.Hour)}}}}, now)
	require.True(t, w.late[late], "stopped short: it met another run due now")
	req[0].N = 2
	take(req, []shard.ClaimResult{{At: 6, More: true, Runs: []shard.Claimed{{Shard: 2, Member: "l:4", Token: "t", ClaimedAt: now, StartAt: now},
		{Shard: 2, Member: "l:5", Token: "t", ClaimedAt: now, StartAt: now.Add(time.Hour)}}}}, now)
	require.False(t, w.late[late], "its head is a held run again")
	req[0].N = 10

	// Late again, and no free slot to give: it waits.
	req[0].Now = -1
	take(req, []shard.ClaimResult{{At: 7, More: true}}, time.Now())
	w.late[source{"default", 0}] = true
	_, reqs = w.nextRound(nil, nil, 1, 4*minClaimPerSource-1)
	require.Len(t, reqs, 3, "one late source takes the slot, the other waits")
	require.True(t, w.late[source{"default", reqs[0].Shard}])
	require.Equal(t, 1, reqs[0].Now)
}
