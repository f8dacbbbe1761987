package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// An outcome whose report fails (Redis answering errors for a while, as during a
// failover) is sent again until Redis takes it: the run ends once, acked, and is not
// redelivered.
func TestReport_RetriedUntilRedisTakesIt(t *testing.T) {
	m, c := redistest.Mini(t)
	ctx := context.Background()
	s, err := shard.Open(ctx, c, shard.Config{Namespace: "rr", Shards: 2})
	require.NoError(t, err)
	w, err := New(Config{Store: s, Concurrency: 2, Sweep: 50 * time.Millisecond})
	require.NoError(t, err)
	var calls atomic.Int32
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	w.HandleFunc("t", func(context.Context, *Run) error {
		calls.Add(1)
		<-release
		return nil
	})
	require.NoError(t, w.Start(ctx))
	// A failed check must not leave the handler blocked: Stop would wait for it forever.
	defer func() { releaseOnce(); _ = w.Stop(ctx) }()
	_, err = s.Create(ctx, []*job.Job{{ID: "a", Type: "t", Schedule: job.Schedule{Now: true}}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return calls.Load() == 1 }, 15*time.Second, 5*time.Millisecond)

	m.SetError("LOADING Redis is loading the dataset in memory")
	releaseOnce()
	// Longer than the four tries of the reporter before this change.
	time.Sleep(1500 * time.Millisecond)
	w.mu.Lock()
	require.Len(t, w.held, 1, "held while its report is retried")
	w.mu.Unlock()
	m.SetError("")

	require.Eventually(t, func() bool {
		info, err := s.Get(ctx, "a")
		return err == nil && info.State == job.StateCompleted
	}, 15*time.Second, 10*time.Millisecond)
	w.mu.Lock()
	require.Empty(t, w.held)
	w.mu.Unlock()
	require.Equal(t, int32(1), calls.Load(), "never redelivered")
}
