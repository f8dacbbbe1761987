package ingest

import (
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/shard"
)

// backlogCache holds the last measured backlog. One request measures it again when it
// is older than Config.BacklogRefresh while the others keep using the old figure (they
// wait only when there is none yet): Backlog reads every shard, far too much work for
// every create.
type backlogCache struct {
	mu         sync.Mutex
	val        int64
	ok         bool          // false when the last measure failed: creates are let through
	at         time.Time     // when measured; zero before the first measure
	refreshing chan struct{} // non-nil while a request measures; closed when it is done
}

// backlogNow returns the backlog, measuring it if the cached one is too old; ok is false
// when it could not be measured (the error is logged).
func (s *Server) backlogNow(ctx *fasthttp.RequestCtx) (n int64, ok bool) {
	c := &s.backlog
	c.mu.Lock()
	for {
		if !c.at.IsZero() && (c.refreshing != nil || s.now().Sub(c.at) < s.cfg.BacklogRefresh) {
			n, ok = c.val, c.ok
			c.mu.Unlock()
			return n, ok
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

	rc, cancel := s.rctx(ctx)
	n, err := s.store.Backlog(rc)
	cancel()
	if err != nil {
		s.logError(rc, "measure the backlog (creates are let through)", err)
	}

	c.mu.Lock()
	c.val, c.ok, c.at = n, err == nil, s.now()
	c.refreshing = nil
	close(ch)
	c.mu.Unlock()
	return n, err == nil
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
