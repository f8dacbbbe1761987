package worker

import (
	"context"
	"strings"
	"time"

	"github.com/tockhq/tock/internal/limit"
	"github.com/tockhq/tock/shard"
)

// recheckAfterLoss is how long after a lost signal subscription the heartbeat asks
// about runs waiting for their start time: past the next subscription (made 200 ms
// after the loss) by most of a second.
const recheckAfterLoss = time.Second

// listen turns ready and cancel signals into hot sources and cancelled handlers.
func (w *Worker) listen(ctx context.Context) {
	keys := w.store.Keys()
	channels := []string{keys.CancelChannel(), keys.HoldChannel(), keys.QueueChannel()}
	queueOf := map[string]string{}
	for _, q := range w.cfg.Queues {
		ch := keys.ReadyChannel(q)
		channels = append(channels, ch)
		queueOf[ch] = q
	}
	errs := limit.NewEvery(10 * time.Second)
	for ctx.Err() == nil {
		err := w.store.Subscribe(ctx, channels, func(ch, msg string) {
			if q, ok := queueOf[ch]; ok {
				w.readySignal(q, msg)
				return
			}
			w.signal(ch, msg)
		})
		if ctx.Err() != nil {
			return
		}
		if err != nil && errs.Allow() {
			w.logger.WarnContext(ctx, "signal subscription", "error", err)
		}
		// Signals may have been missed while disconnected: sweep, and have the heartbeat
		// ask about every run held for its start time until well after the next
		// subscription (a hold signal may have been lost).
		w.mu.Lock()
		w.markAllHot()
		w.recheckUntil = time.Now().Add(recheckAfterLoss)
		w.mu.Unlock()
		w.poke()
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// readySignal marks the source of a ready signal of queue q hot.
func (w *Worker) readySignal(q, msg string) {
	id, at, ok := shard.ParseReady(msg, w.store.Shards())
	if !ok {
		return
	}
	w.mu.Lock()
	w.markHot(source{q, id}, at)
	w.mu.Unlock()
	w.poke()
}

// signal handles a message of the cancel or queue channel.
func (w *Worker) signal(ch, msg string) {
	keys := w.store.Keys()
	switch ch {
	case keys.QueueChannel():
		verb, q, ok := strings.Cut(msg, " ")
		if !ok || !w.queues[q] || (verb != "pause" && verb != "resume") {
			return
		}
		w.mu.Lock()
		if verb == "pause" {
			w.pausedGen++
			w.setPaused(q, true)
		}
		// Either way, read the set soon: it says whether a resume still holds, and
		// it ends a pause that a stale signal brought back.
		w.rereadPaused = true
		w.mu.Unlock()
		w.poke()
	case keys.CancelChannel(), keys.HoldChannel():
		_, member, ok := strings.Cut(msg, " ")
		if !ok {
			return
		}
		w.mu.Lock()
		a := w.held[member]
		w.mu.Unlock()
		switch {
		case a == nil && ch == keys.HoldChannel():
			// Maybe a run whose claim has not reached takeClaims yet: the heartbeat asks
			// about waiting runs for a while (a paused job's run is then handed back).
			w.mu.Lock()
			w.recheckUntil = time.Now().Add(recheckAfterLoss)
			w.mu.Unlock()
		case a == nil:
		case ch == keys.CancelChannel():
			w.cancelRun(a, errJobCancelled)
		default:
			w.holdRun(a)
		}
	}
}

// holdRun hands back a run whose job was paused or changed, unless its handler has
// started (a run that started goes on, as a pause lets running runs finish).
func (w *Worker) holdRun(a *active) {
	w.mu.Lock()
	if a.started || a.cancelled != nil {
		w.mu.Unlock()
		return
	}
	a.cancelled = errHeldBack
	waiting := a.wait != nil && a.wait.Stop()
	w.mu.Unlock()
	if waiting {
		w.release(a)
	}
}

// cancelRun cancels a running handler, or marks a run whose handler has not started so
// that it never starts; a run waiting for its start time is released at once.
func (w *Worker) cancelRun(a *active, cause error) {
	w.mu.Lock()
	cancel := a.cancel
	if cancel == nil && a.cancelled == nil {
		a.cancelled = cause
	}
	waiting := a.wait != nil && a.wait.Stop()
	w.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
	if waiting {
		w.release(a)
	}
}
