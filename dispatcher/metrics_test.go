package dispatcher

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// fakeMetrics records what a Dispatcher reports.
type fakeMetrics struct {
	mu     sync.Mutex
	fired  map[shard.ID]int
	reaped map[shard.ID]int
	leases map[string][]shard.ID
}

func newFakeMetrics() *fakeMetrics {
	return &fakeMetrics{fired: map[shard.ID]int{}, reaped: map[shard.ID]int{}, leases: map[string][]shard.ID{}}
}

func (f *fakeMetrics) RunsFired(id shard.ID, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fired[id] += n
}

func (f *fakeMetrics) RunsReaped(id shard.ID, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reaped[id] += n
}

func (f *fakeMetrics) LeaseChanged(id shard.ID, change string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leases[change] = append(f.leases[change], id)
}

func (f *fakeMetrics) lease(change string) []shard.ID {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]shard.ID(nil), f.leases[change]...)
}

func TestStep_Metrics(t *testing.T) {
	t.Parallel()
	b := newStepBundle(t)
	fm := newFakeMetrics()
	b.d.cfg.Metrics = fm
	ctx := context.Background()
	_, err := b.store.Create(ctx, []*job.Job{
		{ID: "a", Type: "t", Visibility: time.Second, Schedule: job.Schedule{Delay: time.Minute}},
		{ID: "b", Type: "t", Visibility: time.Second, Schedule: job.Schedule{Delay: time.Minute}},
		{ID: "c", Type: "t", Visibility: time.Second, Schedule: job.Schedule{Cron: "* * * * *"}},
	})
	require.NoError(t, err)
	b.at(30 * time.Second) // nothing due
	require.Empty(t, fm.fired)
	b.at(time.Minute) // two one-time runs and one cron occurrence
	require.Equal(t, map[shard.ID]int{0: 3}, fm.fired)
	require.Empty(t, fm.reaped)

	// Two runs are claimed, and their workers vanish.
	c, err := b.store.Claim(ctx, 0, "default", 2, "w", "n")
	require.NoError(t, err)
	require.Len(t, c, 2)
	b.at(time.Minute + 500*time.Millisecond)
	require.Empty(t, fm.reaped, "deadline not passed yet")
	b.at(time.Minute + 2*time.Second)
	require.Equal(t, map[shard.ID]int{0: 2}, fm.reaped)
	require.Equal(t, map[shard.ID]int{0: 3}, fm.fired)
}

func TestDispatcher_LeaseMetrics(t *testing.T) {
	t.Parallel()
	m, c := redistest.Mini(t)
	s, err := shard.Open(context.Background(), c, shard.Config{Namespace: "lm", Shards: 4})
	require.NoError(t, err)
	fm := newFakeMetrics()
	d, err := New(Config{Store: s, Name: "lm", LeaseTTL: 300 * time.Millisecond, MaxSleep: 10 * time.Millisecond, Metrics: fm})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	require.Eventually(t, func() bool { return len(d.Owned()) == 4 }, 5*time.Second, 5*time.Millisecond)
	require.ElementsMatch(t, []shard.ID{0, 1, 2, 3}, fm.lease(LeaseAcquired))

	// Another owner takes shard 2 behind the dispatcher's back (as after a long pause).
	require.NoError(t, m.Set(s.Keys().Lease(2), "other:999"))
	require.Eventually(t, func() bool { return len(fm.lease(LeaseLost)) > 0 }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return len(d.Owned()) == 3 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, []shard.ID{2}, fm.lease(LeaseLost), "a loss is counted once")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, d.Stop(ctx))
	require.ElementsMatch(t, []shard.ID{0, 1, 3}, fm.lease(LeaseReleased))
	require.Equal(t, []shard.ID{2}, fm.lease(LeaseLost))
	require.Len(t, fm.lease(LeaseAcquired), 4)
}
