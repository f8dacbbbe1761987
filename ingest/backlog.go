package ingest

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// Backpressure (Config.MaxBacklog). Measuring the backlog reads every shard, far too much
// work for every create, so a measure is reused for Config.BacklogRefresh. Between two
// measures the server adds to it the runs its own creates made ready since the measure
// began (Server.admitted), so that a flood of creates cannot run far past the limit on
// a stale figure: a create is admitted only while that estimate is under MaxBacklog, and
// its ready runs are counted before it is sent to Redis. Through one server the backlog
// therefore exceeds MaxBacklog by less than one request's jobs (a single create never
// takes it over); n servers each count only their own creates, so together they can
// admit up to (n-1) x MaxBacklog more before the next measure. Runs that come due
// meanwhile are seen by the next measure.

// backlogCache holds the last measured backlog. One request measures it again when it
// is older than Config.BacklogRefresh while the others keep using the old figure (they
// wait only when there is none yet).
type backlogCache struct {
	mu         sync.Mutex
	val        int64
	base       int64         // Server.admitted when the measure began
	ok         bool          // false when the last measure failed: creates are let through
	at         time.Time     // when measured; zero before the first measure
	refreshing chan struct{} // non-nil while a request measures; closed when it is done
}

// backlogNow returns the last measure (measuring again if it is too old) and the value
// of Server.admitted when it began; ok is false when it could not be measured (the
// error is logged).
func (s *Server) backlogNow(ctx *fasthttp.RequestCtx) (n, base int64, ok bool) {
	c := &s.backlog
	c.mu.Lock()
	for {
		if !c.at.IsZero() && (c.refreshing != nil || s.now().Sub(c.at) < s.cfg.BacklogRefresh) {
			n, base, ok = c.val, c.base, c.ok
			c.mu.Unlock()
			return n, base, ok
		}
		if c.refreshing == nil {
			break
		}
		ch := c.refreshing
		c.mu.Unlock()
		<-ch // bounded by the measuring request's Redis timeout
		c.mu.Lock()
	}
	ch := make(chan struct{})
	c.refreshing = ch
	c.mu.Unlock()

	// Runs admitted from here on may be counted twice (by Redis and on top of it): an
	// estimate on the safe side.
	base = s.admitted.Load()
	rc, cancel := s.rctx(ctx)
	n, err := s.store.Backlog(rc)
	cancel()
	if err != nil {
		s.logError(rc, "measure the backlog (creates are let through)", err)
	}

	c.mu.Lock()
	c.val, c.base, c.ok, c.at = n, base, err == nil, s.now()
	c.refreshing = nil
	close(ch)
	c.mu.Unlock()
	return n, base, err == nil
}

// admit decides whether a create whose jobs make ready runs ready at once may go on,
// under Config.MaxBacklog. When it may, the runs are counted in Server.admitted (the
// caller corrects the count with settle once Redis has answered); when not, it writes
// the 429 with Retry-After and returns false. ready 0 only checks.
func (s *Server) admit(ctx *fasthttp.RequestCtx, ready int) bool {
	if s.cfg.MaxBacklog <= 0 {
		return true
	}
	n, base, ok := s.backlogNow(ctx)
	if !ok {
		s.admitted.Add(int64(ready))
		return true
	}
	before := s.admitted.Add(int64(ready)) - int64(ready)
	est := n + before - base
	if est < s.cfg.MaxBacklog {
		return true
	}
	s.admitted.Add(-int64(ready))
	retry := max(1, int(math.Ceil(s.cfg.BacklogRefresh.Seconds())))
	ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, strconv.Itoa(retry))
	writeError(ctx, &apiError{status: 429, code: CodeOverloaded,
		msg: "about " + strconv.FormatInt(est, 10) + " runs are ready or in flight, at or over the limit of " +
			strconv.FormatInt(s.cfg.MaxBacklog, 10) + ": retry later"})
	return false
}

// settle corrects the runs admit counted (counted) to the ones the create made ready.
func (s *Server) settle(counted int, res []shard.CreateResult) {
	if s.cfg.MaxBacklog <= 0 {
		return
	}
	made := 0
	for i := range res {
		if res[i].Created && res[i].State == job.StateReady {
			made++
		}
	}
	if made != counted {
		s.admitted.Add(int64(made - counted))
	}
}

// readyClockSkew is how far ahead a job's time may be and still be counted as ready at
// once by admit: the Redis clock, which decides, may be ahead of this one.
const readyClockSkew = time.Second

// readyAtOnce reports whether j's first run is ready as soon as it is created (settle
// corrects the guess).
func readyAtOnce(j *job.Job, now time.Time) bool {
	sch := j.Schedule
	switch {
	case sch.Cron != "":
		return false // its first run is after now
	case !sch.At.IsZero():
		return !sch.At.After(now.Add(readyClockSkew))
	}
	return sch.Now || sch.Delay == 0
}

// minRateWindow is the shortest interval a fire rate is computed over; a request sooner
// than that after the sample gets the previous rate.
const minRateWindow = time.Second

// rateTracker computes each queue's fire rate from the Fired counter of successive
// GET /v1/queues requests.
type rateTracker struct {
	mu      sync.Mutex
	samples map[string]rateSample
}

type rateSample struct {
	fired int64
	at    time.Time
	rate  float64 // over the interval that ended at 'at'
}

// update records the figures of qs measured at now and returns each queue's rate.
func (t *rateTracker) update(now time.Time, qs []shard.QueueStats) []float64 {
	rates := make([]float64, len(qs))
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.samples == nil {
		t.samples = map[string]rateSample{}
	}
	seen := make(map[string]bool, len(qs))
	for i, q := range qs {
		seen[q.Queue] = true
		prev, ok := t.samples[q.Queue]
		switch {
		case !ok:
			t.samples[q.Queue] = rateSample{fired: q.Fired, at: now}
		case now.Sub(prev.at) < minRateWindow:
			rates[i] = prev.rate
		default:
			r := float64(q.Fired-prev.fired) / now.Sub(prev.at).Seconds()
			if r < 0 { // counters reset
				r = 0
			}
			rates[i] = r
			t.samples[q.Queue] = rateSample{fired: q.Fired, at: now, rate: r}
		}
	}
	for q := range t.samples {
		if !seen[q] {
			delete(t.samples, q)
		}
	}
	return rates
}
