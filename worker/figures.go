package worker

import (
	"context"
	"sync"
	"time"

	"github.com/tockhq/tock/internal/limit"
	"github.com/tockhq/tock/shard"
)

// figures gathers the lateness of the runs this worker finished, per queue and minute,
// and adds them to the namespace's per-minute figures (shard.AddFigures) once a second,
// so that the dashboard and GET /v1/figures show lateness without a metrics system. It
// also records the worker as seen (shard.WorkerSeen) every few seconds.
type figures struct {
	store *shard.Store
	id    string

	mu      sync.Mutex
	pending map[shard.FigureKey]*shard.FigureDelta
}

// figureMetrics passes measurements on to the configured Metrics and to figures.
type figureMetrics struct {
	Metrics
	f *figures
}

func (m figureMetrics) RunFinished(queue string, o Outcome, lateness, d time.Duration) {
	m.Metrics.RunFinished(queue, o, lateness, d)
	m.f.observe(queue, lateness)
}

func (f *figures) observe(queue string, lateness time.Duration) {
	k := shard.FigureKey{Queue: queue, Minute: shard.Minute(time.Now())}
	f.mu.Lock()
	d := f.pending[k]
	if d == nil {
		d = &shard.FigureDelta{}
		f.pending[k] = d
	}
	d.Add(lateness)
	f.mu.Unlock()
}

// flush writes what was gathered; on failure the figures are dropped (they are a
// dashboard's, not an account's: a retry could count them twice).
func (f *figures) flush(ctx context.Context) error {
	f.mu.Lock()
	p := f.pending
	f.pending = map[shard.FigureKey]*shard.FigureDelta{}
	f.mu.Unlock()
	if len(p) == 0 {
		return nil
	}
	return f.store.AddFigures(ctx, p)
}

// loop flushes every second until ctx ends, then once more (bounded by a second).
func (f *figures) loop(ctx context.Context, w *Worker) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	errs := limit.NewEvery(time.Minute)
	var seen time.Time
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = f.flush(fctx)
			cancel()
			return
		case <-tick.C:
		}
		err := f.flush(ctx)
		if now := time.Now(); err == nil && now.Sub(seen) >= 5*time.Second {
			seen = now
			err = f.store.WorkerSeen(ctx, f.id, now)
		}
		if err != nil && ctx.Err() == nil && errs.Allow() {
			w.logger.WarnContext(ctx, "per-minute figures", "error", err)
		}
	}
}
