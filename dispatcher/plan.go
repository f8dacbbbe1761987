package dispatcher

import (
	"sync"
	"time"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// maxWalk bounds how many missed occurrences a misfire plan walks one by one; beyond it
// the count of missed occurrences is capped.
const maxWalk = 10000

// planner turns peeked due entries into fire plans: for cron jobs it computes the next
// occurrence and applies the misfire policy. It caches parsed cron expressions.
type planner struct {
	mu    sync.Mutex
	crons map[string]*job.Cron
}

func newPlanner() *planner { return &planner{crons: map[string]*job.Cron{}} }

func (p *planner) cron(expr, tz string) (*job.Cron, error) {
	key := expr + "\x00" + tz
	p.mu.Lock()
	c := p.crons[key]
	p.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := job.ParseCron(expr, tz)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if len(p.crons) > 100000 {
		p.crons = map[string]*job.Cron{}
	}
	p.crons[key] = c
	p.mu.Unlock()
	return c, nil
}

// plan decides what firing e at now (Redis ms) means.
func (p *planner) plan(e shard.DueEntry, now int64) shard.FirePlan {
	fp := shard.FirePlan{Entry: e}
	if e.Kind != shard.KindCron {
		return fp
	}
	c, err := p.cron(e.Cron, e.TZ)
	if err != nil {
		// Cannot happen for a job that passed validation; fire this occurrence and file
		// no next one rather than loop on it.
		fp.Fires = []int64{e.Due}
		return fp
	}
	next := func(t int64) int64 {
		n := c.Next(time.UnixMilli(t))
		if n.IsZero() {
			return 0
		}
		return n.UnixMilli()
	}
	if time.Duration(now-e.Due)*time.Millisecond <= e.MisfireAfter {
		fp.Fires = []int64{e.Due}
		fp.Next = next(e.Due)
		return fp
	}
	// Misfired: count the occurrences up to now (the walk is bounded) and keep the newest
	// job.MaxRunAll of them.
	count, newest := missedOccurrences(e.Due, now, next)
	fp.Next = next(now)
	switch job.Misfire(e.Misfire) {
	case job.MisfireSkip:
		fp.Missed = count
	case job.MisfireRunAll:
		// The newest fire; the older ones, e.Due first, are recorded as missed.
		fp.Fires = newest
		fp.Missed = count - len(newest)
	default: // run_once: the latest occurrence stands for all of them
		fp.Fires = newest[len(newest)-1:]
		fp.Missed = count - 1
	}
	return fp
}

// missedOccurrences walks the occurrences from due (one) up to now with next, and returns
// how many there are (at most maxWalk when the walk stops early) and the newest
// job.MaxRunAll of them, oldest first. When there are more than maxWalk, the newest are
// found by walking again from ever earlier points before now, so that they are the ones
// just before now and not the ones just after due.
func missedOccurrences(due, now int64, next func(int64) int64) (int, []int64) {
	ring := make([]int64, 0, job.MaxRunAll)
	count := 0
	walk := func(t int64) {
		for ; t > 0 && t <= now && count < maxWalk; t = next(t) {
			if len(ring) == job.MaxRunAll {
				copy(ring, ring[1:])
				ring = ring[:job.MaxRunAll-1]
			}
			ring = append(ring, t)
			count++
		}
	}
	walk(due)
	last := ring[len(ring)-1]
	if count < maxWalk || next(last) > now || next(last) <= 0 {
		return count, ring
	}
	// More than maxWalk: walk (now-span, now] for a span that holds at least
	// job.MaxRunAll occurrences and at most maxWalk, found by doubling from MaxRunAll
	// times the mean gap walked, then bisecting (a schedule may fire in bursts). A span
	// that reaches back to the first walk's newest joins the two walks.
	span := max((last-due)/int64(maxWalk)*job.MaxRunAll, 1)
	var lo, hi int64 // spans known to hold too few and too many occurrences (0: none yet)
	for range 128 {
		from := max(now-span, last)
		tail := make([]int64, 0, job.MaxRunAll)
		n, reached := 0, true
		for t := next(from); t > 0 && t <= now; t = next(t) {
			if n == maxWalk {
				reached = false
				break
			}
			if len(tail) == job.MaxRunAll {
				copy(tail, tail[1:])
				tail = tail[:job.MaxRunAll-1]
			}
			tail = append(tail, t)
			n++
		}
		switch {
		case !reached:
			hi = span
		case n < job.MaxRunAll && from > last:
			lo = span
		default:
			if from == last {
				tail = append(ring, tail...)
				tail = tail[max(len(tail)-job.MaxRunAll, 0):]
			}
			return count, tail
		}
		if hi == 0 {
			span *= 2
		} else {
			span = lo + (hi-lo)/2
		}
		if hi != 0 && hi-lo <= 1 {
			break
		}
	}
	return count, ring
}
