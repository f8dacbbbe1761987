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
	// Misfired: list the occurrences up to now (bounded).
	occ := []int64{e.Due}
	for t := next(e.Due); t > 0 && t <= now && len(occ) < maxWalk; t = next(t) {
		occ = append(occ, t)
	}
	fp.Next = next(now)
	switch job.Misfire(e.Misfire) {
	case job.MisfireSkip:
		fp.Missed = len(occ)
	case job.MisfireRunAll:
		n := min(len(occ), job.MaxRunAll)
		fp.Fires = occ[:n]
		fp.Missed = len(occ) - n
	default: // run_once: the latest occurrence stands for all of them
		fp.Fires = occ[len(occ)-1:]
		fp.Missed = len(occ) - 1
	}
	return fp
}
