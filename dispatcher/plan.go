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
	// More than maxWalk: look back from now over a span that doubles until it holds
	// job.MaxRunAll occurrences (it starts at that many times the mean gap walked).
	span := max((last-due)/int64(maxWalk)*job.MaxRunAll, 1)
	for from := now - span; ; from = now - span {
		var tail []int64
		if from <= last {
			from = last
		}
		for t := next(from); t > 0 && t <= now && len(tail) < maxWalk; t = next(t) {
			tail = append(tail, t)
		}
		if from == last {
			// Every occurrence after the first walk: they follow its newest.
			tail = append(ring, tail...)
		}
		if len(tail) >= job.MaxRunAll || from == last {
			return count, tail[max(len(tail)-job.MaxRunAll, 0):]
		}
		span *= 2
	}
}
