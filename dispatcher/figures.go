package dispatcher

import (
	"context"
	"time"

	"github.com/tockhq/tock/internal/limit"
)

// figureSample is how often a dispatcher samples the queues' fired totals for the
// per-minute figures (shard.SampleFired). The first sample of a minute counts, so a fire
// count per minute is off by at most this much time at each end.
const figureSample = 5 * time.Second

// sampleFigures records the fired totals every figureSample until ctx ends.
func (d *Dispatcher) sampleFigures(ctx context.Context) {
	tick := time.NewTicker(figureSample)
	defer tick.Stop()
	errs := limit.NewEvery(time.Minute)
	for {
		if err := d.store.SampleFired(ctx, time.Now()); err != nil && ctx.Err() == nil && errs.Allow() {
			d.logger.WarnContext(ctx, "per-minute figures", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
