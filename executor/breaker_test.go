package executor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/executor"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/shard"
)

type recMetrics struct {
	mu          sync.Mutex
	transitions []string
}

func (m *recMetrics) BreakerState(string, string) {}
func (m *recMetrics) BreakerTransition(_, s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.transitions = append(m.transitions, s)
}

// Two executors' breakers of one host share its state: one opens it, the other is
// refused; after the cooldown a single probe goes, and its success closes it for both.
func TestBreakers_SharedOpenProbeClose(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s, err := shard.Open(ctx, b.Client(t), shard.Config{Namespace: redistest.Namespace(t, b), Shards: 1})
		require.NoError(t, err)
		cooldown := time.Hour
		if b.Mini == nil {
			cooldown = 20 * time.Millisecond // real servers: their own clock; waited for below
		}
		// Sync: every step asks Redis (no local view), as the processes' views would
		// after Sync.
		cfg := executor.BreakerConfig{Failures: 3, Cooldown: cooldown, ProbeTimeout: time.Hour, Sync: time.Nanosecond}
		m := &recMetrics{}
		one, other := executor.NewBreakers(s, cfg, m), executor.NewBreakers(s, cfg, nil)
		const host = "hooks.example.com:443"

		for i := range 3 {
			d, err := one.Allow(ctx, host)
			require.NoError(t, err)
			require.True(t, d.Allowed, i)
			require.NoError(t, one.Record(ctx, host, false, false))
		}
		// A success in between would have reset the run of failures; open now.
		d, err := other.Allow(ctx, host)
		require.NoError(t, err)
		if b.Mini != nil {
			require.False(t, d.Allowed, "open for the other process too")
			require.Equal(t, shard.BreakerOpen, d.State)
			require.Greater(t, d.RetryIn, 59*time.Minute)
			b.Mini.SetTime(time.Now().Add(2 * time.Hour))
			d, err = other.Allow(ctx, host)
			require.NoError(t, err)
		} else {
			for !d.Allowed {
				require.Equal(t, shard.BreakerOpen, d.State)
				require.Eventually(t, func() bool {
					d, err = other.Allow(ctx, host)
					require.NoError(t, err)
					return d.Allowed
				}, 5*time.Second, time.Millisecond)
			}
		}
		require.True(t, d.Probe, "after the cooldown, one probe goes")
		d2, err := one.Allow(ctx, host)
		require.NoError(t, err)
		require.False(t, d2.Allowed, "while the probe is out, others wait")
		require.Equal(t, shard.BreakerHalfOpen, d2.State)

		// A failed probe opens it again; the next probe's success closes it.
		require.NoError(t, other.Record(ctx, host, false, true))
		infos, err := s.Breakers(ctx, 0)
		require.NoError(t, err)
		require.Len(t, infos, 1)
		require.Equal(t, shard.BreakerOpen, infos[0].State)
		if b.Mini != nil {
			b.Mini.SetTime(time.Now().Add(4 * time.Hour))
		}
		require.Eventually(t, func() bool {
			d, err = one.Allow(ctx, host)
			require.NoError(t, err)
			return d.Allowed
		}, 5*time.Second, time.Millisecond)
		require.True(t, d.Probe)
		require.NoError(t, one.Record(ctx, host, true, true))
		d, err = other.Allow(ctx, host)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.False(t, d.Probe)
		require.Equal(t, shard.BreakerClosed, d.State)
		infos, err = s.Breakers(ctx, 0)
		require.NoError(t, err)
		require.Equal(t, shard.BreakerClosed, infos[0].State)
		require.EqualValues(t, 5, infos[0].Transitions) // open, half_open, open, half_open, closed

		// One process saw: open (its third failure), half_open (its probe), closed.
		m.mu.Lock()
		require.Equal(t, []string{shard.BreakerOpen, shard.BreakerHalfOpen, shard.BreakerClosed}, m.transitions)
		m.mu.Unlock()
	})
}

// The ratio rule opens a breaker once a window has enough attempts.
func TestBreakers_Ratio(t *testing.T) {
	t.Parallel()
	b := redistest.Backends(t)[0]
	ctx := context.Background()
	s, err := shard.Open(ctx, b.Client(t), shard.Config{Namespace: redistest.Namespace(t, b), Shards: 1})
	require.NoError(t, err)
	br := executor.NewBreakers(s, executor.BreakerConfig{Failures: -1, Ratio: 0.5, MinRequests: 4, Cooldown: time.Hour}, nil)
	const host = "h:80"
	for _, ok := range []bool{false, true, false} {
		require.NoError(t, br.Record(ctx, host, ok, false))
		d, err := br.Allow(ctx, host)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	require.NoError(t, br.Record(ctx, host, false, false)) // 3 of 4 failed
	d, err := br.Allow(ctx, host)
	require.NoError(t, err)
	require.False(t, d.Allowed)
}

// A process's view of a host's breaker answers deliveries without Redis while it is
// fresh and counts their outcomes, recording them in aggregate: at once when they could
// open the breaker by themselves, else within Sync (Flush: at once). Another process
// sees the breaker open within its own Sync.
func TestBreakers_LocalView(t *testing.T) {
	t.Parallel()
	b := redistest.Backends(t)[0]
	ctx := context.Background()
	s, err := shard.Open(ctx, b.Client(t), shard.Config{Namespace: redistest.Namespace(t, b), Shards: 1})
	require.NoError(t, err)
	one := executor.NewBreakers(s, executor.BreakerConfig{Failures: 3, Cooldown: time.Hour, Sync: time.Hour}, nil)
	other := executor.NewBreakers(s, executor.BreakerConfig{Failures: 3, Cooldown: time.Hour, Sync: 50 * time.Millisecond}, nil)
	const host = "h:80"
	d, err := other.Allow(ctx, host)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	calls := b.Mini.CommandCount()
	d, err = one.Allow(ctx, host)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	asked := b.Mini.CommandCount()
	require.Greater(t, asked, calls, "a stale view asks Redis")
	for range 1000 {
		d, err := one.Allow(ctx, host)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.NoError(t, one.Record(ctx, host, true, false))
	}
	require.NoError(t, one.Record(ctx, host, false, false))
	require.NoError(t, one.Record(ctx, host, false, false))
	require.Equal(t, asked, b.Mini.CommandCount(), "a fresh view: no Redis call")
	require.NoError(t, one.Flush(ctx))
	infos, err := s.Breakers(ctx, 0)
	require.NoError(t, err)
	require.Len(t, infos, 1)
	require.Equal(t, 2, infos[0].Failures)
	// Recorded together, the successes count in the window with the failures (one by
	// one, those before the first failure would have kept no key).
	require.Equal(t, 1002, infos[0].Attempts)

	// The third failure in a row opens the breaker at once.
	require.NoError(t, one.Record(ctx, host, false, false))
	infos, err = s.Breakers(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, shard.BreakerOpen, infos[0].State)
	d, err = one.Allow(ctx, host)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Greater(t, d.RetryIn, 59*time.Minute)
	// The other process's view goes stale within its Sync.
	require.Eventually(t, func() bool {
		d, err := other.Allow(ctx, host)
		require.NoError(t, err)
		return !d.Allowed && d.State == shard.BreakerOpen
	}, 2*time.Second, 5*time.Millisecond)
}
