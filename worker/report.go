package worker

import (
	"context"
	"time"

	"github.com/tockhq/tock/shard"
)

// report is a finished attempt waiting to be sent to Redis.
type report struct {
	a       *active
	f       shard.Finish
	run     *Run // nil for a hand-back of a run that never started
	started time.Time
	ended   time.Time // when the handler returned
	err     error
	failed  time.Time // when a call with this report first failed (zero: none yet)
}

// maxReportBatch bounds the reports sent in one pipeline (with the ones sent again).
const maxReportBatch = 1024

// A report whose call failed is sent again every reportRetryPause, along with new ones,
// for up to reportRetry: long enough to outlast a Redis Cluster failover of a few
// seconds, after which the run, held and heartbeated all along, is still in flight under
// its token and the outcome lands. Given up, the run is redelivered after its visibility
// deadline.
const (
	reportRetry      = 5 * time.Second
	reportRetryPause = 200 * time.Millisecond
)

// report sends finished attempts to Redis, one script call per shard in one pipeline
// per round. A shard's outcomes go at once after a quiet spell, then at most once per
// Config.AckDelay (sooner once shardReportBatch of them wait, and all at once when the
// worker stops): under load each call carries many runs instead of one or two, which is
// most of what Redis spends on acknowledgements. The reports of a shard whose call failed
// go again with its next ones, no sooner than reportRetryPause later, for up to
// reportRetry (their runs stay held and heartbeated meanwhile); then they are given up
// and the runs are redelivered after their deadlines. After w.reports closes, it sends
// what is left before it returns.
func (w *Worker) report() {
	outcomes := map[shard.Outcome]Outcome{
		shard.Succeeded: OutcomeSucceeded, shard.Failed: OutcomeFailed, shard.Cancelled: OutcomeCancelled,
		shard.Snoozed: OutcomeSnoozed, shard.HandBack: OutcomeHandedBack,
	}
	q := newReportQueue(w.cfg.AckDelay)
	// Reports are taken from the channel while fewer than maxReportsWaiting wait, so
	// that handlers feel a reporter that cannot keep up.
	maxWaiting := max(cap(w.reports), maxReportsWaiting)
	closed := false
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for !closed || q.waiting > 0 {
		// Whatever has queued up goes along.
	drain:
		for !closed && q.waiting < maxWaiting {
			select {
			case r, ok := <-w.reports:
				if !ok {
					closed = true
					break drain
				}
				q.add(r)
			default:
				break drain
			}
		}
		now := time.Now()
		byShard, batch, next := q.due(now, closed)
		if len(batch) == 0 {
			if closed && q.waiting == 0 {
				return // the channel closed while draining it, and everything went
			}
			// Nothing may go yet: wait for a report or the next shard's turn.
			var timeout <-chan time.Time
			if !next.IsZero() {
				wake.Reset(next.Sub(now))
				timeout = wake.C
			}
			in := w.reports
			if closed || q.waiting >= maxWaiting {
				in = nil
			}
			select {
			case r, ok := <-in:
				if !ok {
					closed = true
				} else {
					q.add(r)
				}
			case <-timeout:
			}
			wake.Stop() // no stale tick after Stop (Go 1.23 timers)
			continue
		}
		rejected := make([][]bool, len(batch))
		failed := map[shard.ID]error{}
		fctx, cancel := context.WithTimeout(w.baseCtx, redisCallTimeout)
		finished := w.store.FinishMany(fctx, byShard)
		cancel()
		for id, fr := range finished {
			if fr.Err != nil {
				failed[id] = fr.Err
				continue
			}
			rejected[q.index[id]] = make([]bool, len(fr.Errs))
			for k, e := range fr.Errs {
				rejected[q.index[id]][k] = e != nil
			}
		}
		now = time.Now()
		for k, reps := range batch {
			id := reps[0].a.c.Shard
			err := failed[id]
			var retry []report
			for i, r := range reps {
				if err != nil {
					if r.failed.IsZero() {
						r.failed = now
					}
					if now.Sub(r.failed) < reportRetry {
						retry = append(retry, r) // still held and heartbeated meanwhile
						continue
					}
					w.logger.Error("report run outcome", "shard", int(id), "run", r.a.c.Member, "error", err)
				}
				rej := err == nil && rejected[k] != nil && rejected[k][i]
				w.done(r.a)
				w.measure(r, outcomes[r.f.Outcome], rej)
				if r.run != nil {
					w.observe(Result{Run: r.run, Started: r.started, Finished: now, Outcome: outcomes[r.f.Outcome], Err: r.err, Rejected: rej})
				}
			}
			q.sent(id, now, retry)
		}
	}
}

// shardReportBatch is how many outcomes of one shard go at once, without waiting for
// the shard's turn (Config.AckDelay): enough that a call's fixed cost (about as much as
// two or three runs' acks) is small beside its runs, few enough that a busy worker's
// shards report as their outcomes come instead of all together at each turn. With 256,
// a worker at 100,000 runs a second sent 5,000 outcomes in one burst every AckDelay, and
// its claims waited behind them with its handlers idle (tock bench throughput: 78,000
// and 106,000 runs a second against 127,000 and 124,000 without batching).
//
// maxReportsWaiting bounds the outcomes the reporter holds, all shards, before handlers
// wait for it: a bound of 1,024 capped such a worker near 60,000 runs a second.
const (
	shardReportBatch  = 32
	maxReportsWaiting = 16384
)

// reportQueue holds finished attempts by shard until their shard's turn.
type reportQueue struct {
	delay   time.Duration
	shards  map[shard.ID]*shardReports
	waiting int // reports held, all shards
	// index maps the shards of the batch last returned by due to their place in it.
	index map[shard.ID]int
}

type shardReports struct {
	reps []report
	next time.Time // no call for the shard before then (AckDelay after its last call)
	// retry is when reports of a failed call may go again (zero when the last call
	// succeeded): retries pause even when the worker stops.
	retry time.Time
}

func newReportQueue(delay time.Duration) *reportQueue {
	return &reportQueue{delay: delay, shards: map[shard.ID]*shardReports{}, index: map[shard.ID]int{}}
}

func (q *reportQueue) add(r report) {
	id := r.a.c.Shard
	s := q.shards[id]
	if s == nil {
		s = &shardReports{}
		q.shards[id] = s
	}
	s.reps = append(s.reps, r)
	q.waiting++
}

// due takes the reports of the shards whose turn it is at now (every shard's, but
// for failed calls' pauses, when stopping), up to about maxReportBatch, as the
// Finish lists to send and the reports in the same order, one slice per shard. With
// none due, next is when the earliest shard's turn comes (zero: no report waits).
func (q *reportQueue) due(now time.Time, stopping bool) (byShard map[shard.ID][]shard.Finish, batch [][]report, next time.Time) {
	clear(q.index)
	n := 0
	for id, s := range q.shards {
		if len(s.reps) == 0 {
			continue
		}
		at := s.next
		if stopping || len(s.reps) >= shardReportBatch {
			at = time.Time{}
		}
		if s.retry.After(at) {
			at = s.retry
		}
		if now.Before(at) || n >= maxReportBatch {
			if next.IsZero() || at.Before(next) {
				next = at
			}
			continue
		}
		if byShard == nil {
			byShard = map[shard.ID][]shard.Finish{}
		}
		fs := make([]shard.Finish, len(s.reps))
		for i, r := range s.reps {
			fs[i] = r.f
		}
		byShard[id] = fs
		q.index[id] = len(batch)
		batch = append(batch, s.reps)
		n += len(s.reps)
		q.waiting -= len(s.reps)
		s.reps = nil
	}
	if n > 0 {
		next = time.Time{}
	}
	return byShard, batch, next
}

// sent records a call for shard id made at now; retry are its reports to send again
// (the call failed).
func (q *reportQueue) sent(id shard.ID, now time.Time, retry []report) {
	s := q.shards[id]
	s.next = now.Add(q.delay)
	s.retry = time.Time{}
	if len(retry) > 0 {
		s.retry = now.Add(reportRetryPause)
		s.reps = append(retry, s.reps...)
		q.waiting += len(retry)
	}
}

func (w *Worker) done(a *active) {
	w.mu.Lock()
	// A run handed back may have been claimed again (by this worker) before its
	// report's round trip ended: the new claim's entry stays.
	if w.held[a.c.Member] == a {
		delete(w.held, a.c.Member)
	}
	if a.reporting {
		a.reporting = false
		w.reporting--
	}
	w.mu.Unlock()
	w.poke()
}

// measure reports a finished attempt to Metrics.
func (w *Worker) measure(r report, o Outcome, rejected bool) {
	switch {
	case rejected:
		o = OutcomeRejected
	case o == OutcomeFailed && r.a.c.Attempt >= r.a.c.MaxAttempts:
		o = OutcomeDead
	}
	a := r.a
	if r.started.IsZero() {
		w.cfg.Metrics.RunFinished(a.queue, o, max(a.c.ClaimedAt.Sub(a.c.Due), 0), 0)
		return
	}
	w.cfg.Metrics.RunFinished(a.queue, o, a.lateness(r.started), r.ended.Sub(r.started))
}

func (w *Worker) observe(res Result) {
	if w.cfg.ObserveFunc != nil {
		w.cfg.ObserveFunc(res)
	}
}
