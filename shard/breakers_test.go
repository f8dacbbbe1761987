package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/shard"
)

// While the half-open probe is out, a refused delivery is told to ask again after
// ProbeWait (or as long as the probe has been out), never at the probe's timeout; the
// probe's success closes the breaker at once.
func TestBreakerStep_ProbeWait(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		cooldown := time.Hour
		if b.Mini == nil {
			cooldown = 20 * time.Millisecond // real servers: their own clock
		}
		p := shard.BreakerPolicy{Failures: 1, Cooldown: cooldown, ProbeTimeout: time.Hour}.WithDefaults()
		const host = "h:443"
		st, err := s.BreakerStep(ctx, host, "fail", false, p)
		require.NoError(t, err)
		require.Equal(t, shard.BreakerOpen, st.Transition)
		if b.Mini != nil {
			b.Mini.SetTime(time.Now().Add(2 * time.Hour))
		}
		require.Eventually(t, func() bool {
			st, err = s.BreakerStep(ctx, host, "allow", false, p)
			require.NoError(t, err)
			return st.Verdict > 0
		}, 5*time.Second, time.Millisecond)
		require.Equal(t, 2, st.Verdict, "the probe")
		require.Equal(t, shard.BreakerHalfOpen, st.State)

		st, err = s.BreakerStep(ctx, host, "allow", false, p)
		require.NoError(t, err)
		require.Zero(t, st.Verdict, "refused while the probe is out")
		require.Positive(t, st.RetryIn)
		require.LessOrEqual(t, st.RetryIn, time.Second, "asks again after ProbeWait, not at the probe's timeout")
		if b.Mini != nil {
			// A probe out for 10 minutes: a refused delivery waits as long again.
			b.Mini.SetTime(time.Now().Add(2*time.Hour + 10*time.Minute))
			st, err = s.BreakerStep(ctx, host, "allow", false, p)
			require.NoError(t, err)
			require.Zero(t, st.Verdict)
			require.InDelta(t, float64(10*time.Minute), float64(st.RetryIn), float64(2*time.Second))
			// Never past the probe's timeout.
			b.Mini.SetTime(time.Now().Add(2*time.Hour + 50*time.Minute))
			st, err = s.BreakerStep(ctx, host, "allow", false, p)
			require.NoError(t, err)
			require.InDelta(t, float64(10*time.Minute), float64(st.RetryIn), float64(2*time.Second))
		}

		st, err = s.BreakerStep(ctx, host, "ok", true, p)
		require.NoError(t, err)
		require.Equal(t, shard.BreakerClosed, st.State)
		require.Equal(t, shard.BreakerClosed, st.Transition)
		st, err = s.BreakerStep(ctx, host, "allow", false, p)
		require.NoError(t, err)
		require.Equal(t, 1, st.Verdict, "closed at once: the held runs go")
	})
}

// Outcomes recorded in aggregate count as the same outcomes one by one would: a run
// of Failures consecutive failures opens the breaker wherever it is among them, a
// success resets the consecutive count to the failures after it, and the window counts
// them all.
func TestBreakerSync_Counts(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		p := shard.BreakerPolicy{Failures: 3, Cooldown: time.Hour}.WithDefaults()
		counts := func(outcomes string) shard.BreakerCounts {
			var c shard.BreakerCounts
			for _, o := range outcomes {
				c.Add(o == 'o')
			}
			return c
		}
		// Healthy outcomes of a host without a key keep none.
		st, err := s.BreakerSync(ctx, "a:80", counts("oooo"), true, p)
		require.NoError(t, err)
		require.Equal(t, shard.BreakerStep{State: shard.BreakerClosed, Verdict: 1}, st)
		bs, err := s.Breakers(ctx, 0)
		require.NoError(t, err)
		require.Empty(t, bs)

		// Two failures, then a success and two failures: 2 consecutive.
		st, err = s.BreakerSync(ctx, "a:80", counts("ff"), false, p)
		require.NoError(t, err)
		require.Equal(t, 2, st.Failures)
		st, err = s.BreakerSync(ctx, "a:80", counts("off"), true, p)
		require.NoError(t, err)
		require.Equal(t, shard.BreakerClosed, st.State)
		require.Equal(t, 1, st.Verdict)
		require.Equal(t, 2, st.Failures)
		require.Equal(t, 5, st.Attempts)
		require.Equal(t, 4, st.WindowFails)
		// One more before a success: 3 in a row, which opens it.
		st, err = s.BreakerSync(ctx, "a:80", counts("foo"), true, p)
		require.NoError(t, err)
		require.Equal(t, shard.BreakerOpen, st.State)
		require.Equal(t, shard.BreakerOpen, st.Transition)
		require.Zero(t, st.Verdict, "refused: open")
		require.Greater(t, st.RetryIn, 59*time.Minute)

		// Three in a row between successes open it too.
		st, err = s.BreakerSync(ctx, "b:80", counts("offfoo"), false, p)
		require.NoError(t, err)
		require.Equal(t, shard.BreakerOpen, st.State)
		// Two, two: not.
		st, err = s.BreakerSync(ctx, "c:80", counts("ffoffo"), false, p)
		require.NoError(t, err)
		require.Equal(t, shard.BreakerClosed, st.State)
		require.Zero(t, st.Failures)
		require.Equal(t, 6, st.Attempts)

		// The ratio rule counts them all.
		r := shard.BreakerPolicy{Failures: -1, Ratio: 0.5, MinRequests: 10, Cooldown: time.Hour}.WithDefaults()
		st, err = s.BreakerSync(ctx, "d:80", counts("fofofofof"), false, r)
		require.NoError(t, err)
		require.Equal(t, shard.BreakerClosed, st.State, "9 attempts: below MinRequests")
		st, err = s.BreakerSync(ctx, "d:80", counts("o"), false, r)
		require.NoError(t, err)
		require.Equal(t, shard.BreakerClosed, st.State, "a success does not open it")
		st, err = s.BreakerSync(ctx, "d:80", counts("f"), false, r)
		require.NoError(t, err)
		require.Equal(t, shard.BreakerOpen, st.State, "6 of 11 failed")
	})
}

func TestBreakerCounts_Then(t *testing.T) {
	t.Parallel()
	counts := func(outcomes string) shard.BreakerCounts {
		var c shard.BreakerCounts
		for _, o := range outcomes {
			c.Add(o == 'o')
		}
		return c
	}
	for _, tc := range []struct{ a, b string }{
		{"", ""}, {"f", "f"}, {"ff", "offf"}, {"off", "ffo"}, {"fof", ""}, {"", "ffoff"}, {"ooo", "f"}, {"fff", "ooo"},
	} {
		require.Equal(t, counts(tc.a+tc.b), counts(tc.a).Then(counts(tc.b)), "%q then %q", tc.a, tc.b)
	}
	require.Equal(t, shard.BreakerCounts{OK: 2, Failed: 5, Lead: 1, Longest: 3, Trail: 1}, counts("fofffof"))
}
