package tock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// Retrying a create with the same *job.Job returns the existing job, and Create leaves
// the caller's job as it was: normalising is not idempotent (a jitter of -1, "none",
// becomes 0, which a second normalise reads as "default 0.2").
func TestClient_CreateTwiceWithTheSamePointer(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{})
		ctx := ctxT(t)
		j := &job.Job{ID: "retry-me", Type: "t", Payload: []byte("p"),
			Schedule: job.Schedule{Delay: time.Hour},
			Retry:    job.RetryPolicy{MaxAttempts: 3, Jitter: -1}}
		before := *j
		first, err := tb.client.Create(ctx, j)
		require.NoError(t, err)
		require.True(t, first.Created)
		require.Equal(t, before, *j, "Create must not change the caller's job")
		again, err := tb.client.Create(ctx, j)
		require.NoError(t, err)
		require.False(t, again.Created)
		require.False(t, again.Conflict, "the same job again is the existing job, not a conflict")
		require.Equal(t, first.NextRunAt, again.NextRunAt)

		// CreateMany too; a job without an id stays without one (the result names it).
		anon := &job.Job{Type: "t", Schedule: job.Schedule{Now: true}}
		res, err := tb.client.CreateMany(ctx, []*job.Job{j, anon})
		require.NoError(t, err)
		require.NoError(t, res[0].Err)
		require.False(t, res[0].Conflict)
		require.NoError(t, res[1].Err)
		require.NotEmpty(t, res[1].ID)
		require.Empty(t, anon.ID)
		require.Nil(t, anon.Priority)
		require.Equal(t, before, *j)
	})
}

// Delete removes the job at once, where Cancel keeps it for the retention period.
func TestClient_DeleteRemovesTheJob(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		tb := setup(t, b, shard.Config{})
		ctx := ctxT(t)
		for _, id := range []string{"gone", "kept"} {
			_, err := tb.client.Create(ctx, &job.Job{ID: id, Type: "t", Schedule: job.Schedule{Delay: time.Hour}})
			require.NoError(t, err)
		}
		require.NoError(t, tb.client.Delete(ctx, "gone"))
		_, err := tb.client.Get(ctx, "gone")
		require.ErrorIs(t, err, shard.ErrNotFound)
		require.ErrorIs(t, tb.client.Delete(ctx, "gone"), shard.ErrNotFound)
		_, _, err = tb.client.Cancel(ctx, "kept")
		require.NoError(t, err)
		info, err := tb.client.Get(ctx, "kept")
		require.NoError(t, err)
		require.Equal(t, job.StateCancelled, info.State)
	})
}
