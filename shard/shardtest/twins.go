package shardtest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/shard"
)

// Twins runs the same steps on two stores, Ref (the reference: jobs kept as job hashes)
// and Got (the store under test, e.g. one keeping jobs in another form), and checks that
// both read the same: Get (times within a second), Runs and the queue counts. The conformance
// suite of the storage forms (shard/forms_test.go) and the packed jobs' tests use it.
type Twins struct {
	T   testing.TB
	Ref *shard.Store
	Got *shard.Store
	// Slack is how far apart the twins' times may be; 0 is a second. miniredis needs
	// more after a test sleeps: it keeps a key's TTL, not its expiry time, and answers
	// PEXPIRETIME as now plus the TTL, which moves with the clock.
	Slack time.Duration
}

func (w *Twins) slack() time.Duration {
	if w.Slack > 0 {
		return w.Slack
	}
	return time.Second
}

// Both calls fn with Got, then with Ref.
func (w *Twins) Both(fn func(s *shard.Store)) {
	fn(w.Got)
	fn(w.Ref)
}

// Same checks that jobs ids read the same from both stores: their Get, their Runs, and
// the queue counts (which CheckCounts checks against Got's sets).
func (w *Twins) Same(ids ...string) {
	t := w.T
	t.Helper()
	ctx := context.Background()
	for _, id := range ids {
		want, err := w.Ref.Get(ctx, id)
		require.NoError(t, err, id)
		got, err := w.Got.Get(ctx, id)
		require.NoError(t, err, id)
		SameInfo(t, want, got, w.slack(), id)

		wantRuns, err := w.Ref.Runs(ctx, id)
		require.NoError(t, err, id)
		gotRuns, err := w.Got.Runs(ctx, id)
		require.NoError(t, err, id)
		require.Len(t, gotRuns, len(wantRuns), id)
		for k := range wantRuns {
			g, r := gotRuns[k], wantRuns[k]
			for _, p := range [][2]*time.Time{{&g.Due, &r.Due}, {&g.Start, &r.Start}, {&g.End, &r.End}} {
				require.WithinDuration(t, *p[1], *p[0], w.slack(), id)
				require.Equal(t, p[1].IsZero(), p[0].IsZero(), id)
				*p[0] = *p[1]
			}
			require.Equal(t, r, g, id)
		}
	}
	require.Equal(t, queueStats(t, w.Ref), queueStats(t, w.Got))
	CheckCounts(t, w.Got)
}

// SameInfo checks that got reads as want: equal but for times, which may differ by
// slack (the twins made them at different instants), though not in being set.
func SameInfo(t testing.TB, want, got *shard.Info, slack time.Duration, msg string) {
	t.Helper()
	w, g := *want, *got
	for _, p := range [][2]*time.Time{{&w.CreatedAt, &g.CreatedAt}, {&w.NextRunAt, &g.NextRunAt},
		{&w.Expires, &g.Expires}, {&w.RetryAt, &g.RetryAt}, {&w.Schedule.At, &g.Schedule.At}} {
		// A retry's time has jitter: within the spread of a 1s backoff.
		require.WithinDuration(t, *p[0], *p[1], slack, msg)
		require.Equal(t, p[0].IsZero(), p[1].IsZero(), msg)
		*p[1] = *p[0]
	}
	require.Equal(t, w, g, msg)
}

// Of returns the one of got and ref (e.g. runs claimed by ClaimAll) that belongs to s.
func (w *Twins) Of(s *shard.Store, got, ref map[string]shard.Claimed) map[string]shard.Claimed {
	if s == w.Ref {
		return ref
	}
	return got
}

// ClaimAll claims every ready run of queues (default: "default" and "q") of shard 0 of
// both stores, by job id.
func (w *Twins) ClaimAll(queues ...string) (got, ref map[string]shard.Claimed) {
	t := w.T
	t.Helper()
	if len(queues) == 0 {
		queues = []string{"default", "q"}
	}
	claim := func(s *shard.Store) map[string]shard.Claimed {
		out := map[string]shard.Claimed{}
		for _, q := range queues {
			c, err := s.Claim(context.Background(), 0, q, 100, "w", "n")
			require.NoError(t, err)
			for _, r := range c {
				out[r.JobID] = r
			}
		}
		return out
	}
	return claim(w.Got), claim(w.Ref)
}

// SameClaims checks that the runs of got were claimed as those of ref: the same
// definitions, tokens and attempts, times within slack.
func SameClaims(t testing.TB, ref, got map[string]shard.Claimed, slack time.Duration) {
	t.Helper()
	require.Len(t, got, len(ref))
	for id, r := range ref {
		g, ok := got[id]
		require.True(t, ok, id)
		for _, p := range [][2]*time.Time{{&r.Due, &g.Due}, {&r.ClaimedAt, &g.ClaimedAt}, {&r.StartAt, &g.StartAt}} {
			require.WithinDuration(t, *p[0], *p[1], slack, id)
			*p[1] = *p[0]
		}
		g.Member = r.Member
		require.Equal(t, r, g, id)
	}
}

func queueStats(t testing.TB, s *shard.Store) map[string]shard.QueueStats {
	t.Helper()
	qs, err := s.Queues(context.Background())
	require.NoError(t, err)
	out := map[string]shard.QueueStats{}
	for _, q := range qs {
		out[q.Queue] = q
	}
	return out
}
