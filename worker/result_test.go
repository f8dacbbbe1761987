package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// A handler's result (Run.SetResult) is kept with its succeeded run; one over
// shard.MaxResult fails the attempt instead.
func TestRun_SetResult(t *testing.T) {
	_, c := redistest.Mini(t)
	ctx := context.Background()
	s, err := shard.Open(ctx, c, shard.Config{Namespace: "res", Shards: 2})
	require.NoError(t, err)
	w, err := New(Config{Store: s, Concurrency: 2, Sweep: 50 * time.Millisecond})
	require.NoError(t, err)
	w.HandleFunc("t", func(_ context.Context, r *Run) error {
		if r.JobID == "big" {
			r.SetResult(make([]byte, shard.MaxResult+1))
			return nil
		}
		r.SetResult([]byte("done:" + r.JobID))
		return nil
	})
	require.NoError(t, w.Start(ctx))
	defer func() { _ = w.Stop(ctx) }()
	_, err = s.Create(ctx, []*job.Job{
		{ID: "a", Type: "t", Schedule: job.Schedule{Now: true}},
		{ID: "big", Type: "t", Schedule: job.Schedule{Now: true}, Retry: job.RetryPolicy{MaxAttempts: 1}},
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		a, err1 := s.Runs(ctx, "a")
		big, err2 := s.Runs(ctx, "big")
		return err1 == nil && err2 == nil && len(a) == 1 && len(big) == 1
	}, 15*time.Second, 5*time.Millisecond)
	runs, err := s.Runs(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, job.OutcomeSucceeded, runs[0].Outcome)
	require.Equal(t, []byte("done:a"), runs[0].Result)
	runs, err = s.Runs(ctx, "big")
	require.NoError(t, err)
	require.Equal(t, job.OutcomeDead, runs[0].Outcome)
	require.Contains(t, runs[0].Error, "over the limit")
	require.Nil(t, runs[0].Result)
}
