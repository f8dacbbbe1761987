package worker

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/shard"
)

// Of a shard's claim replies, the one that maps the Redis clock tightest serves, while
// it is recent and the Redis clock has not gone back; each shard has its own.
func TestClockOf_KeepsTheTightestRecentReply(t *testing.T) {
	t.Parallel()
	w := &Worker{}
	t0 := time.Now()
	r0 := time.Unix(5000, 0)
	first := clockRef{local: t0, redis: r0}
	require.Equal(t, first, w.clockOf(1, first))

	// 10 ms later on both clocks, but the reply waited 3 ms more: the first maps tighter.
	late := clockRef{local: t0.Add(13 * time.Millisecond), redis: r0.Add(10 * time.Millisecond)}
	require.Equal(t, first, w.clockOf(1, late))
	// Another shard keeps its own.
	require.Equal(t, late, w.clockOf(2, late))

	// A reply that waited less than the first: it serves from now on.
	tight := clockRef{local: t0.Add(20 * time.Millisecond), redis: r0.Add(21 * time.Millisecond)}
	require.Equal(t, tight, w.clockOf(1, tight))
	require.Equal(t, tight, w.clockOf(1, clockRef{local: t0.Add(30 * time.Millisecond), redis: r0.Add(25 * time.Millisecond)}))

	// Too old: the new reply serves, even though it maps looser.
	old := clockRef{local: tight.local.Add(clockRefAge), redis: tight.redis.Add(clockRefAge - time.Millisecond)}
	require.Equal(t, old, w.clockOf(1, old))

	// The Redis clock went back: the new reply serves.
	back := clockRef{local: old.local.Add(time.Millisecond), redis: old.redis.Add(-time.Second)}
	require.Equal(t, back, w.clockOf(1, back))
}

func TestClockRef_Until(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	c := clockRef{local: t0, redis: time.Unix(5000, 0)}
	// Due 100 ms after the claim on the Redis clock, asked 30 ms after the reply:
	// 70 ms, plus 1 ms a second of margin (0.1 ms).
	require.Equal(t, 70*time.Millisecond+100*time.Microsecond, c.until(c.redis.Add(100*time.Millisecond), t0.Add(30*time.Millisecond)))
	require.LessOrEqual(t, c.until(c.redis.Add(-time.Millisecond), t0), time.Duration(0), "due already")
	require.Equal(t, c.redis.Add(40*time.Millisecond), c.redisAt(t0.Add(40*time.Millisecond)))
}

// Whatever delays the replies had, a run started at the time until gives is never
// early on the Redis clock, and starts at most the smallest delay of the shard's recent
// replies (plus the margin) after its start time.
func TestClockRef_NeverEarly(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	t0, r0 := time.Now(), time.Unix(1_700_000_000, 0)
	// The Redis clock at local time l.
	redisAt := func(l time.Time) time.Time { return r0.Add(l.Sub(t0)) }
	for trial := range 500 {
		w := &Worker{}
		rc := r0.Add(time.Duration(trial) * time.Second)
		minDelay := time.Hour
		var ref clockRef
		var got time.Time
		// 20 claims at most 10 ms apart: all within clockRefAge.
		for range 20 {
			rc = rc.Add(time.Duration(rng.Int64N(int64(10 * time.Millisecond))))
			delay := time.Duration(rng.Int64N(int64(10 * time.Millisecond)))
			got = t0.Add(rc.Sub(r0) + delay) // the reply arrives delay after the claim ran
			minDelay = min(minDelay, delay)
			ref = w.clockOf(shard.ID(3), clockRef{local: got, redis: rc})
		}
		startAt := rc.Add(time.Duration(rng.Int64N(int64(100 * time.Millisecond))))
		start := got.Add(max(ref.until(startAt, got), 0))
		late := redisAt(start).Sub(startAt)
		require.GreaterOrEqual(t, late, time.Duration(0), "trial %d: early", trial)
		if startAt.After(redisAt(got)) {
			require.LessOrEqual(t, late, minDelay+startAt.Sub(ref.redis)/1000+time.Microsecond, "trial %d", trial)
		}
	}
}
