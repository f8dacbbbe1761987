package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// stepBundle drives one shard by hand on a miniredis whose clock stands still.
type stepBundle struct {
	t     *testing.T
	m     *miniredis.Miniredis
	store *shard.Store
	d     *Dispatcher
	lease shard.Lease
	now   time.Time
}

func newStepBundle(t *testing.T) *stepBundle {
	t.Helper()
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	m, c := redistest.Mini(t)
	m.SetTime(now)
	s, err := shard.Open(context.Background(), c, shard.Config{Shards: 1, Clock: func() time.Time { return now }})
	require.NoError(t, err)
	d, err := New(Config{Store: s, Name: "step"})
	require.NoError(t, err)
	l := s.AcquireLeases(context.Background(), "step", []shard.ID{0}, time.Hour)
	require.True(t, l[0].Held)
	return &stepBundle{t: t, m: m, store: s, d: d, lease: l[0].Lease, now: now}
}

func (b *stepBundle) at(d time.Duration) {
	b.m.SetTime(b.now.Add(d))
	_, err := b.d.step(context.Background(), b.lease)
	require.NoError(b.t, err)
}

func (b *stepBundle) ready() []string {
	c := b.store.Client()
	// Below +inf: the set's pin is no run.
	out, err := c.Do(context.Background(), c.B().Zrange().Key(b.store.Keys().Ready(0, "default")).Min("-inf").Max(shard.RunScoreMax).Byscore().Build()).AsStrSlice()
	require.NoError(b.t, err)
	return out
}

func (b *stepBundle) outcomes(id string) []job.Outcome {
	runs, err := b.store.Runs(context.Background(), id)
	require.NoError(b.t, err)
	var out []job.Outcome
	for _, r := range runs {
		out = append(out, r.Outcome)
	}
	return out
}

func member(id string, t time.Time) string { return shard.RunMember(id, t.UnixMilli()) }

func TestStep_OverlapBufferOne(t *testing.T) {
	t.Parallel()
	b := newStepBundle(t)
	ctx := context.Background()
	_, err := b.store.Create(ctx, []*job.Job{{ID: "buf", Type: "t", Visibility: time.Hour, Overlap: job.OverlapBufferOne, Schedule: job.Schedule{Cron: "* * * * *"}}})
	require.NoError(t, err)
	b.at(time.Minute)
	require.Equal(t, []string{member("buf", b.now.Add(time.Minute))}, b.ready())
	c, err := b.store.Claim(ctx, 0, "default", 10, "w", "n")
	require.NoError(t, err)
	require.Len(t, c, 1)
	b.at(2 * time.Minute) // still running: buffered
	require.Empty(t, b.ready())
	b.at(3 * time.Minute) // buffer full: skipped
	require.Empty(t, b.ready())
	require.Equal(t, []job.Outcome{job.OutcomeSkipped}, b.outcomes("buf"))
	_, err = b.store.FinishRuns(ctx, 0, []shard.Finish{{Member: c[0].Member, Token: c[0].Token, Outcome: shard.Succeeded}})
	require.NoError(t, err)
	require.Equal(t, []string{member("buf", b.now.Add(2*time.Minute))}, b.ready(), "the buffered occurrence starts when the previous run ends")
}

func TestStep_Misfire(t *testing.T) {
	t.Parallel()
	b := newStepBundle(t)
	ctx := context.Background()
	_, err := b.store.Create(ctx, []*job.Job{
		{ID: "once", Type: "t", Misfire: job.MisfireRunOnce, Overlap: job.OverlapAllow, Schedule: job.Schedule{Cron: "* * * * *"}},
		{ID: "skip", Type: "t", Misfire: job.MisfireSkip, Overlap: job.OverlapAllow, Schedule: job.Schedule{Cron: "* * * * *"}},
		{ID: "all", Type: "t", Misfire: job.MisfireRunAll, Overlap: job.OverlapAllow, Schedule: job.Schedule{Cron: "* * * * *"}},
	})
	require.NoError(t, err)
	// An outage: the dispatcher comes back 10 minutes and 30 s after the first occurrence.
	b.at(10*time.Minute + 30*time.Second)
	var once, all int
	for _, m := range b.ready() {
		id, _, _ := shard.SplitMember(m)
		switch id {
		case "once":
			once++
			require.Equal(t, member("once", b.now.Add(10*time.Minute)), m, "the latest missed occurrence stands for all")
		case "all":
			all++
		case "skip":
			t.Fatalf("misfire=skip fired %s", m)
		}
	}
	require.Equal(t, 1, once)
	require.Equal(t, 10, all)
	runs, err := b.store.Runs(ctx, "skip")
	require.NoError(t, err)
	require.Equal(t, job.OutcomeMissed, runs[0].Outcome)
	require.Equal(t, 10, runs[0].Missed)
	runs, err = b.store.Runs(ctx, "once")
	require.NoError(t, err)
	require.Equal(t, 9, runs[0].Missed)
	for _, id := range []string{"once", "skip", "all"} {
		info, err := b.store.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, b.now.Add(11*time.Minute), info.NextRunAt.UTC(), "%s: next occurrence in the future", id)
	}
}

func TestStep_FencedAfterLeaseLoss(t *testing.T) {
	t.Parallel()
	b := newStepBundle(t)
	ctx := context.Background()
	_, err := b.store.Create(ctx, []*job.Job{{ID: "f", Type: "t", Schedule: job.Schedule{Delay: time.Minute}}})
	require.NoError(t, err)
	// The lease expires (a long pause) and another dispatcher takes the shard.
	b.m.FastForward(2 * time.Hour)
	other := b.store.AcquireLeases(ctx, "other", []shard.ID{0}, time.Hour)
	require.True(t, other[0].Held)
	require.Greater(t, other[0].Lease.Epoch, b.lease.Epoch)
	b.m.SetTime(b.now.Add(2 * time.Minute))
	_, err = b.d.step(ctx, b.lease)
	require.ErrorIs(t, err, shard.ErrLeaseLost)
	require.Empty(t, b.ready(), "the old owner cannot fire")
	_, err = b.d.step(ctx, other[0].Lease)
	require.NoError(t, err)
	require.Len(t, b.ready(), 1)
}

// A shard loop wakes Lead ahead of the next due run and fires it then; without a lead it
// waits for the due time itself.
func TestStep_FiresLeadAhead(t *testing.T) {
	b := newStepBundle(t) // default Lead
	require.Equal(t, DefaultLead, b.d.cfg.Lead)
	require.Equal(t, DefaultLead/2, b.d.cfg.Coalesce, "with a lead, runs coalesce over half of it")
	ctx := context.Background()
	due := b.now.Add(10 * time.Second)
	_, err := b.store.Create(ctx, []*job.Job{{ID: "a", Type: "t", Schedule: job.Schedule{At: due}}})
	require.NoError(t, err)
	sleep, err := b.d.step(ctx, b.lease)
	require.NoError(t, err)
	require.Equal(t, 10*time.Second-DefaultLead, sleep)
	b.at(10*time.Second - DefaultLead - time.Millisecond)
	require.Empty(t, b.ready())
	b.at(10*time.Second - DefaultLead)
	require.Equal(t, []string{member("a", due)}, b.ready())

	none, err := New(Config{Store: b.store, Name: "none", Lead: -1})
	require.NoError(t, err)
	require.Zero(t, none.cfg.Lead)
	require.Equal(t, 2*time.Millisecond, none.cfg.Coalesce)
	_, err = New(Config{Store: b.store, Name: "far", Lead: 2 * time.Second})
	require.ErrorContains(t, err, "Lead must be at most 1s")
	_, err = b.store.Create(ctx, []*job.Job{{ID: "b", Type: "t", Schedule: job.Schedule{At: due.Add(time.Second)}}})
	require.NoError(t, err)
	sleep, err = none.step(ctx, b.lease)
	require.NoError(t, err)
	require.Equal(t, time.Second+DefaultLead, sleep)
}

// A loop whose last call fired a quarter batch or more fires one call at a time with the
// other such loops; a loop firing a few runs per call is never held back.
func TestStep_HeavyFiringOneAtATime(t *testing.T) {
	b := newStepBundle(t)
	ctx := context.Background()
	d, err := New(Config{Store: b.store, Name: "heavy", BatchSize: 4})
	require.NoError(t, err)
	create := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			_, err := b.store.Create(ctx, []*job.Job{{ID: id, Type: "t", Schedule: job.Schedule{Now: true}}})
			require.NoError(t, err)
		}
	}
	stepDone := func() chan error {
		done := make(chan error, 1)
		go func() {
			_, err := d.step(ctx, b.lease)
			done <- err
		}()
		return done
	}

	// Light: nothing fired last time, so a held token does not matter.
	d.heavyFiring <- struct{}{}
	require.NoError(t, <-stepDone())

	// A retry due now fires one run: a quarter of the batch of 4, so the loop is heavy.
	create("a")
	c, err := b.store.Claim(ctx, 0, "default", 10, "w", "n")
	require.NoError(t, err)
	require.Len(t, c, 1)
	_, err = b.store.FinishRuns(ctx, 0, []shard.Finish{{Member: c[0].Member, Token: c[0].Token, Outcome: shard.Snoozed}})
	require.NoError(t, err)
	<-d.heavyFiring
	require.NoError(t, <-stepDone())
	d.heavyMu.Lock()
	require.True(t, d.heavy[0])
	d.heavyMu.Unlock()

	// Heavy: the next step waits for the token.
	d.heavyFiring <- struct{}{}
	done := stepDone()
	select {
	case err := <-done:
		t.Fatalf("a heavy loop fired while another held the token: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	<-d.heavyFiring
	require.NoError(t, <-done)
	d.heavyMu.Lock()
	require.False(t, d.heavy[0], "that step fired nothing: light again")
	d.heavyMu.Unlock()
}

// misfire=run_all after an outage longer than job.MaxRunAll occurrences fires the newest
// of them, and records the older ones as missed, naming the first (item 5).
func TestStep_MisfireRunAllFiresTheNewest(t *testing.T) {
	t.Parallel()
	b := newStepBundle(t)
	ctx := context.Background()
	_, err := b.store.Create(ctx, []*job.Job{{ID: "all", Type: "t", Misfire: job.MisfireRunAll, Overlap: job.OverlapAllow,
		Schedule: job.Schedule{Cron: "* * * * *"}}})
	require.NoError(t, err)
	b.at(150*time.Minute + 30*time.Second) // 150 occurrences, from minute 1
	ready := b.ready()
	require.Len(t, ready, job.MaxRunAll)
	require.Contains(t, ready, member("all", b.now.Add(150*time.Minute)))
	require.Contains(t, ready, member("all", b.now.Add(51*time.Minute)))
	require.NotContains(t, ready, member("all", b.now.Add(50*time.Minute)))
	runs, err := b.store.Runs(ctx, "all")
	require.NoError(t, err)
	require.Equal(t, job.OutcomeMissed, runs[0].Outcome)
	require.Equal(t, 50, runs[0].Missed)
	require.Equal(t, b.now.Add(time.Minute), runs[0].Due.UTC(), "the missed entry names a missed occurrence")
}
