package worker

import (
	"context"
	"time"

	"github.com/tockhq/tock/internal/limit"
	"github.com/tockhq/tock/shard"
)

// heartbeat extends the deadlines of held runs at a third of their visibility timeout.
func (w *Worker) heartbeat(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	errs := limit.NewEvery(10 * time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := w.extendDue(ctx); err != nil && ctx.Err() == nil && errs.Allow() {
			w.logger.ErrorContext(ctx, "heartbeat", "error", err)
		}
	}
}

// extendDue heartbeats the held runs whose last heartbeat is older than a third of their
// visibility timeout, one call per shard.
func (w *Worker) extendDue(ctx context.Context) error {
	now := time.Now()
	byShard := map[shard.ID][]*active{}
	w.mu.Lock()
	recheck := now.Before(w.recheckUntil)
	for _, a := range w.held {
		if now.Sub(a.extended) >= a.c.Visibility/3 || (recheck && a.wait != nil) {
			byShard[a.c.Shard] = append(byShard[a.c.Shard], a)
		}
	}
	w.mu.Unlock()
	var firstErr error
	for id, as := range byShard {
		held := make([]shard.Held, len(as))
		for i, a := range as {
			held[i] = shard.Held{Member: a.c.Member, Token: a.c.Token}
		}
		res, err := w.store.Extend(ctx, id, held)
		if err != nil {
			firstErr = err
			continue
		}
		for i, r := range res {
			a := as[i]
			w.mu.Lock()
			a.extended = now
			w.mu.Unlock()
			switch r {
			case shard.ExtendCancelled:
				w.cancelRun(a, errJobCancelled)
			case shard.ExtendLost:
				w.cancelRun(a, shard.ErrTokenMismatch)
			case shard.ExtendHold:
				w.holdRun(a)
			}
		}
	}
	return firstErr
}
