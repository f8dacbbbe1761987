package worker

import (
	"time"

	"github.com/tockhq/tock/shard"
)

// clockRef is a claim reply's arrival (local, with Go's monotonic reading) and the
// Redis time of the claim. The reply came after the claim, so the Redis clock read at
// least redis + (t - local) at any later local time t: a run that waits until then for
// its start time never starts early. Of a shard's replies, the one with the smallest
// local - redis maps tightest: a reply that waited for the rest of its claim round's
// pipeline, or for the worker's goroutines, does not make later runs start later.
type clockRef struct {
	local, redis time.Time
}

// A shard's clockRef serves for at most clockRefAge: the Redis clock may be stepped (a
// failover to a replica with another clock, an NTP step), and local and Redis clocks may
// run at rates that differ by NTP's slew (at most 500 ppm), for which until adds a margin
// of twice that.
const clockRefAge = 250 * time.Millisecond

// clockOf returns the clockRef to use for the runs of a claim of shard id that gives
// obs: obs, or the shard's earlier one when that maps tighter and is recent.
func (w *Worker) clockOf(id shard.ID, obs clockRef) clockRef {
	if w.clocks == nil {
		w.clocks = map[shard.ID]clockRef{}
	}
	best, ok := w.clocks[id]
	// A shard's claims are made one after another: a Redis time before the last one's
	// is a clock stepped back, and the earlier reply no longer maps it.
	if age := obs.local.Sub(best.local); ok && age < clockRefAge && !obs.redis.Before(best.redis) &&
		age >= obs.redis.Sub(best.redis) {
		return best
	}
	w.clocks[id] = obs
	return obs
}

// until is how long after now (local) the Redis clock reaches t by c, with a margin of
// 1 ms a second since c's reply for the rates of the clocks; 0 or less when it has.
func (c clockRef) until(t, now time.Time) time.Duration {
	ahead := t.Sub(c.redis)
	if ahead <= 0 {
		return ahead
	}
	return c.local.Add(ahead + ahead/1000).Sub(now)
}

// redisAt is local time t on the Redis clock by c (a lower bound).
func (c clockRef) redisAt(t time.Time) time.Time {
	return c.redis.Add(t.Sub(c.local))
}
