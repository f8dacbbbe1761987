package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/worker"
)

// A handler behind a breaker: after Failures failed attempts the type's next run is
// snoozed without calling the handler, and GET /v1/breakers' reader sees it open.
func TestWorker_HandleWithBreaker(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s, err := shard.Open(ctx, b.Client(t), shard.Config{Namespace: redistest.Namespace(t, b), Shards: 1})
		require.NoError(t, err)
		w, err := worker.New(worker.Config{Store: s, Sweep: 20 * time.Millisecond})
		require.NoError(t, err)
		var calls atomic.Int64
		w.HandleWithBreaker("flaky", worker.HandlerFunc(func(context.Context, *worker.Run) error {
			calls.Add(1)
			return errors.New("down")
		}), worker.Breaker{Failures: 2, Cooldown: time.Hour})
		require.NoError(t, w.Start(ctx))
		defer func() { require.NoError(t, w.Stop(context.Background())) }()
		wait := func(id string) job.Run {
			var got job.Run
			require.Eventually(t, func() bool {
				runs, err := s.Runs(ctx, id)
				require.NoError(t, err)
				if len(runs) > 0 {
					got = runs[0]
				}
				return len(runs) > 0
			}, 10*time.Second, 5*time.Millisecond)
			return got
		}
		for _, id := range []string{"a", "b", "c"} {
			res, err := s.Create(ctx, []*job.Job{{ID: id, Type: "flaky", Schedule: job.Schedule{Now: true}, Retry: job.RetryPolicy{MaxAttempts: 1}}})
			require.NoError(t, err)
			require.NoError(t, res[0].Err)
			r := wait(id)
			if id == "c" {
				require.Equal(t, job.OutcomeSnoozed, r.Outcome)
			} else {
				require.Equal(t, job.OutcomeDead, r.Outcome)
			}
		}
		require.EqualValues(t, 2, calls.Load())
		bs, err := s.Breakers(ctx, 0)
		require.NoError(t, err)
		require.Len(t, bs, 1)
		require.Equal(t, worker.BreakerKeyPrefix+"flaky", bs[0].Host)
		require.Equal(t, shard.BreakerOpen, bs[0].State)
	})
}
