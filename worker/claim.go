package worker

import (
	"context"
	"time"

	"github.com/tockhq/tock/internal/limit"
	"github.com/tockhq/tock/shard"
)

// A claim round asks each source for at least minClaimPerSource runs (when that many
// slots are free), from at most maxClaimSources sources. A claim is one script call per
// source, whose fixed part costs Redis about as much as a few runs: asking for 64 rather
// than 16 at a time took about a tenth less Redis CPU per run in `tock bench throughput`
// on 64 shards, and kept the fire benchmark's lateness (bench/README.md).
const (
	minClaimPerSource = 64
	maxClaimSources   = 64
)

// holdHorizon is how far ahead a worker counts on its handlers' mean duration when it
// bounds the runs it holds ahead of their start time (dispatcher.MaxLead), and
// firstMeanRun the duration it guesses before it has measured one: a worker that starts
// while runs of a lead window wait holds a hundred per handler slot at first, and fewer
// as soon as a handler turns out slower.
const (
	holdHorizon  = time.Second
	firstMeanRun = 10 * time.Millisecond
)

type source struct {
	queue string
	shard shard.ID
}

// claimLoop claims from hot sources while there are free slots. Each round claims from
// up to maxClaimSources hot sources at once, in one pipeline, so a worker fed by many
// shards does not wait one round trip per shard.
func (w *Worker) claimLoop(ctx context.Context) {
	sweep := time.NewTicker(w.cfg.Sweep)
	defer sweep.Stop()
	errs := limit.NewEvery(10 * time.Second)
	var order []source
	var reqs []shard.ClaimRequest
	var pausedRead time.Time // last read of the paused set
	for {
		// Read the paused set at start and then about once a sweep, even when the loop
		// is never idle: it repairs what a lost pause or resume signal left wrong.
		w.mu.Lock()
		reread := w.rereadPaused
		w.rereadPaused = false
		w.mu.Unlock()
		if now := time.Now(); reread || now.Sub(pausedRead) >= w.cfg.Sweep {
			w.refreshPaused(ctx)
			pausedRead = now
		}
		w.mu.Lock()
		now, ahead := w.claimable()
		order, reqs = w.nextRound(order, reqs[:0], now, ahead)
		w.mu.Unlock()
		if len(reqs) > 0 {
			// Not cancelled by Stop: runs claimed in Redis must reach takeClaims, which
			// holds them (Stop then hands them back), or they would stay claimed until
			// their visibility deadline.
			cctx, cancel := context.WithTimeout(w.baseCtx, redisCallTimeout)
			results := w.store.ClaimMany(cctx, reqs, w.cfg.ID, w.nonce)
			cancel()
			got := time.Now()
			for i, res := range results {
				if res.Err == nil && len(res.Runs) > 0 {
					w.cfg.Metrics.RunsClaimed(reqs[i].Queue, len(res.Runs))
				}
			}
			w.mu.Lock()
			failed := w.takeClaims(reqs, results, got)
			w.mu.Unlock()
			for _, i := range failed {
				if ctx.Err() == nil && errs.Allow() {
					w.logger.ErrorContext(ctx, "claim", "shard", int(reqs[i].Shard), "queue", reqs[i].Queue, "error", results[i].Err)
				}
			}
			if len(failed) == len(results) {
				// Redis is unreachable or failing: do not spin.
				select {
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-w.claimWake:
		case <-sweep.C:
			pausedRead = time.Time{}
			w.mu.Lock()
			w.markAllHot()
			w.mu.Unlock()
			order = nil
			if w.afterSweep != nil {
				w.afterSweep()
			}
		}
	}
}

// nextRound picks the sources of the next claim round, given what may be claimed (now
// runs that start at once, and ahead runs held until their start time: claimable): up
// to maxClaimSources hot sources of queues that are not paused, taken round-robin from
// order (refilled from the hot set when it runs out, so no shard starves), with both
// shared among them. It returns the rest of order and the requests (appended to reqs),
// none when no slot is free or no claimable source is hot. The caller holds w.mu.
func (w *Worker) nextRound(order []source, reqs []shard.ClaimRequest, now, ahead int) ([]source, []shard.ClaimRequest) {
	if now <= 0 {
		return order, reqs
	}
	free := now + max(ahead, 0)
	if len(order) == 0 {
		for s := range w.hot {
			if !w.paused[s.queue] {
				order = append(order, s)
			}
		}
	}
	sources := min(max(free/minClaimPerSource, 1), maxClaimSources)
	// The free slots go to as few sources as take minClaimPerSource each, the first of
	// the round (a claim call costs Redis about as much as a few runs, so slots spread
	// thin would make one call per run or two when runs are due now); the others claim
	// only runs held until their start time.
	nowSources := min(max(now/minClaimPerSource, 1), sources)
	lateIn := 0 // late sources in reqs, first
	for len(order) > 0 && len(reqs) < sources {
		var src source
		src, order = order[0], order[1:]
		if _, ok := w.hot[src]; !ok || w.paused[src.queue] {
			continue
		}
		req := shard.ClaimRequest{Shard: src.shard, Queue: src.queue}
		if !w.late[src] {
			reqs = append(reqs, req)
			continue
		}
		// A late source takes free slots or waits for a round that has them for it:
		// without, its claim would stop at its head again.
		if lateIn >= nowSources {
			continue
		}
		reqs = append(reqs, req)
		copy(reqs[lateIn+1:], reqs[lateIn:len(reqs)-1])
		reqs[lateIn] = req
		lateIn++
	}
	// Share what may be claimed: the free slots among the first nowSources sources, the
	// runs to hold among all, the first ones the rest, and none more than a claim takes
	// (shard.MaxClaim): a claim that fills what it asked for keeps its source hot, so
	// what is left over goes to the next round at once. A source that would get nothing
	// is left out.
	share := func(total, n, i int) int {
		v := total / n
		if i < total%n {
			v++
		}
		return v
	}
	k := min(nowSources, len(reqs))
	out := reqs[:0]
	for i, req := range reqs {
		n, nowN := share(max(ahead, 0), len(reqs), i), -1
		if i < k {
			nowN = share(now, k, i)
			n += nowN
			if i < lateIn {
				// Its head starts now: what it may take beyond its slots comes after the
				// runs due, which the claim may not reach.
				n = nowN
			}
		}
		req.N = min(n, shard.MaxClaim)
		req.Now = min(nowN, req.N)
		if req.N > 0 {
			out = append(out, req)
		}
	}
	reqs = out
	return order, reqs
}

// takeClaims holds and queues the runs of a claim round whose replies arrived at got
// (local), and returns the indexes of the requests that failed. A source that gave fewer
// runs than asked was empty when the claim ran and stops being hot, unless a ready signal
// says runs became ready at or after that moment: then it is claimed once more (its mark
// drops to 0, so a signal stamped late by a skewed clock estimate cannot keep it hot for
// longer). The caller holds w.mu.
func (w *Worker) takeClaims(reqs []shard.ClaimRequest, results []shard.ClaimResult, got time.Time) (failed []int) {
	taken, ahead := 0, 0
	defer func() {
		if taken > 0 {
			// The share of runs claimed that wait for their start time (claimable).
			w.aheadShare += aheadWeight * (float64(ahead)/float64(taken) - w.aheadShare)
		}
	}()
	for i, res := range results {
		req := reqs[i]
		if res.Err != nil {
			failed = append(failed, i)
			continue
		}
		src := source{req.Queue, req.Shard}
		// A claim that stopped short of what it asked for with runs left met a run that
		// starts now beyond its free slots: the source is late until a claim takes a run
		// held for its start time (its head is then ahead again) or finds it empty.
		switch n := len(res.Runs); {
		case res.More && n < min(req.N, shard.MaxClaim):
			w.late[src] = true
		case !res.More || (n > 0 && res.Runs[n-1].StartAt.After(res.Runs[n-1].ClaimedAt)):
			delete(w.late, src)
		}
		// A claim that took what it asked for, or stopped at a run that did not fit,
		// did not find the source empty.
		if !res.More {
			if at, ok := w.hot[src]; ok && at >= res.At {
				w.hot[src] = 0
			} else {
				delete(w.hot, src)
			}
			delete(w.late, src)
		}
		if len(res.Runs) == 0 {
			continue
		}
		// The claim's time in µs (At) where it agrees with its time in ms: a clock read
		// to the millisecond is up to 1 ms early, which would hold the runs that much late.
		claimed := res.Runs[0].ClaimedAt
		if us := time.UnixMicro(res.At); !us.Before(claimed) && us.Sub(claimed) < time.Millisecond {
			claimed = us
		}
		clock := w.clockOf(req.Shard, clockRef{local: got, redis: claimed})
		for k := range res.Runs {
			a := &active{c: res.Runs[k], queue: req.Queue, extended: got, clock: clock}
			if old := w.held[a.c.Member]; old != nil && old.reporting {
				// Handed back (its job was paused or changed) and claimed again before the
				// hand-back's report returned: the old entry no longer counts (done leaves
				// the new one).
				old.reporting = false
				w.reporting--
			}
			w.held[a.c.Member] = a
			// A run fired ahead of its time waits for it (clockRef.until).
			taken++
			if wait := clock.until(a.c.StartAt, got); wait > 0 {
				ahead++
				w.waiting++
				a.wait = time.AfterFunc(wait, func() { w.release(a) })
				continue
			}
			w.runs <- a // never blocks (see claimable)
		}
	}
	return failed
}

// release queues a run whose start time has come (or that was cancelled while it
// waited) for a handler.
func (w *Worker) release(a *active) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if a.wait == nil || w.runsClosed {
		return // released already, or left to Stop
	}
	a.wait = nil
	w.waiting--
	w.runs <- a // never blocks (see claimable)
}

// claimable is how many more runs the worker may claim: now, runs that may start at
// once, are the free handler slots plus prefetch (less the held runs that take one:
// queued for a handler, or running; a run whose outcome only waits for the reporter
// takes none, nor does one waiting for its start time); ahead, runs fired ahead of their
// start time, fill holdCap, only while now is not 0 and while most runs claimed are
// such runs (aheadShare: without a dispatcher's lead there are none, and when Redis
// falls behind the runs are due before they are claimed; room to hold them would then
// only widen claim rounds with calls that take nothing). A round takes at most
// now+ahead runs, and
// runs waiting beyond holdCap take slots, so runs queued, running and waiting never
// number more than Concurrency+Prefetch+Hold, within the capacity of w.runs (twice the
// slots plus Hold): pushing never blocks. Called with w.mu held.
func (w *Worker) claimable() (now, ahead int) {
	slots := w.cfg.Concurrency + w.cfg.Prefetch
	now = slots - (len(w.held) - w.reporting - w.waiting)
	if now <= 0 {
		return 0, 0
	}
	// Runs held beyond holdCap take slots: a claim may take runs fired ahead up to its
	// whole N whatever its share of them, and without this a worker whose ready sets
	// hold only such runs would take more every round.
	hold := w.holdCap()
	now -= max(w.waiting-hold, 0)
	if now <= 0 {
		return 0, 0
	}
	if w.aheadShare < aheadOn {
		return now, 0
	}
	return now, max(hold-w.waiting, 0)
}

// A worker keeps room to hold runs fired ahead (claimable) while a moving share of the
// runs it claims (weight aheadWeight a claim round) that wait for their start time is
// at least aheadOn. A claim without that room still takes such runs within what it may
// take, so the share rises as soon as a dispatcher fires ahead again.
const (
	aheadWeight = 0.2
	aheadOn     = 0.5
)

// holdCap bounds the runs held ahead of their start time: as many as the handlers can
// start within holdHorizon at their mean duration (guessed as firstMeanRun until one is
// measured), at least Concurrency+Prefetch and at most Config.Hold. Called with w.mu
// held.
func (w *Worker) holdCap() int {
	mean := w.meanRun
	if mean == 0 {
		mean = float64(firstMeanRun)
	}
	n := max(float64(w.cfg.Concurrency+w.cfg.Prefetch), float64(w.cfg.Concurrency)*float64(holdHorizon)/mean)
	return int(min(n, float64(w.cfg.Hold)))
}

// observeDuration adds a handler's duration to meanRun. Called with w.mu held.
func (w *Worker) observeDuration(d time.Duration) {
	const weight = 0.05
	if w.meanRun == 0 {
		w.meanRun = max(float64(d), 1)
		return
	}
	w.meanRun += weight * (max(float64(d), 1) - w.meanRun)
}

// markAllHot marks every source hot. The caller holds w.mu.
func (w *Worker) markAllHot() {
	for _, q := range w.cfg.Queues {
		w.markQueueHot(q)
	}
}

// markQueueHot marks every shard of queue q hot. The caller holds w.mu.
func (w *Worker) markQueueHot(q string) {
	for i := 0; i < w.store.Shards(); i++ {
		w.markHot(source{q, shard.ID(i)}, 0)
	}
}

// markHot marks src as possibly having runs ready since Redis time at (µs). The caller
// holds w.mu.
func (w *Worker) markHot(src source, at int64) {
	if cur, ok := w.hot[src]; !ok || at > cur {
		w.hot[src] = at
	}
}

func (w *Worker) poke() {
	select {
	case w.claimWake <- struct{}{}:
	default:
	}
}

// refreshPaused reads which of the worker's queues are paused, repairing what a lost
// pause or resume signal left wrong. A queue found resumed is marked hot. When the read
// fails, the worker keeps what it knew (nothing paused at first) and logs, rate-limited:
// claiming must not stop because the paused set cannot be read.
func (w *Worker) refreshPaused(ctx context.Context) {
	w.mu.Lock()
	gen := w.pausedGen
	w.mu.Unlock()
	set, err := w.store.PausedQueues(ctx)
	if err != nil {
		if ctx.Err() == nil && w.pauseErrs.Allow() {
			w.logger.WarnContext(ctx, "read paused queues", "error", err)
		}
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if gen != w.pausedGen {
		// A signal arrived meanwhile; it is at least as new as this read. The next
		// sweep reads again.
		return
	}
	for q := range w.queues {
		w.setPaused(q, set[q])
	}
}

// setPaused records whether queue q is paused; resuming marks its sources hot. The
// caller holds w.mu.
func (w *Worker) setPaused(q string, paused bool) {
	if paused == w.paused[q] {
		return
	}
	if paused {
		w.paused[q] = true
		return
	}
	delete(w.paused, q)
	w.markQueueHot(q)
}
