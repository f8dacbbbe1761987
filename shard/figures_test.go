package shard_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

func TestFigures_AddSampleRead(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		now := time.Now()
		prev := now.Add(-time.Minute)
		// Two fired runs of queue "a" between two samples of the fired total.
		require.NoError(t, s.SampleFired(ctx, prev)) // no queue yet: nothing sampled
		_, err := s.Create(ctx, []*job.Job{
			{ID: "f1", Queue: "a", Type: "t", Schedule: job.Schedule{Now: true}},
		})
		require.NoError(t, err)
		require.NoError(t, s.SampleFired(ctx, prev))
		_, err = s.Create(ctx, []*job.Job{
			{ID: "f2", Queue: "a", Type: "t", Schedule: job.Schedule{Now: true}},
			{ID: "f3", Queue: "a", Type: "t", Schedule: job.Schedule{Now: true}},
		})
		require.NoError(t, err)
		require.NoError(t, s.SampleFired(ctx, now))
		require.NoError(t, s.SampleFired(ctx, now)) // a later sample of a minute changes nothing

		var d shard.FigureDelta
		d.Add(3 * time.Millisecond)
		d.Add(40 * time.Millisecond)
		d.Add(2 * time.Minute)
		require.NoError(t, s.AddFigures(ctx, map[shard.FigureKey]*shard.FigureDelta{{Queue: "a", Minute: shard.Minute(prev)}: &d}))

		figs, err := s.Figures(ctx, nil, prev, now)
		require.NoError(t, err)
		require.Len(t, figs, 1)
		require.Equal(t, "a", figs[0].Queue)
		require.Len(t, figs[0].Minutes, 2)
		m := figs[0].Minutes[0]
		require.Equal(t, int64(2), m.Fired, "fired in the earlier minute: its sample to the next")
		require.Equal(t, int64(3), m.Ended)
		p50, ok := shard.LatenessQuantile(m.Lateness, 0.5)
		require.True(t, ok)
		require.Equal(t, 50*time.Millisecond, p50)
		p99, _ := shard.LatenessQuantile(m.Lateness, 0.99)
		require.Equal(t, time.Minute, p99)
		require.Equal(t, int64(0), figs[0].Minutes[1].Fired, "the current minute, against the live total")

		_, err = s.Figures(ctx, nil, now, now.Add(-time.Minute))
		require.ErrorContains(t, err, "minutes")
	})
}

func TestLatenessQuantile_Empty(t *testing.T) {
	t.Parallel()
	_, ok := shard.LatenessQuantile([shard.NumLatenessBuckets]int64{}, 0.5)
	require.False(t, ok)
	require.Equal(t, 0, shard.LatenessBucket(0))
	require.Equal(t, shard.NumLatenessBuckets-1, shard.LatenessBucket(time.Hour))
	require.Len(t, shard.LatenessBounds, shard.NumLatenessBuckets-1)
}

func TestCluster_View(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 4})
		_, err := s.Heartbeat(ctx, "disp-a", 10*time.Second, false)
		require.NoError(t, err)
		res := s.AcquireLeases(ctx, "disp-a", []shard.ID{1, 3}, 10*time.Second)
		require.True(t, res[0].Held)
		_, err = s.Create(ctx, []*job.Job{
			{ID: "c1", Type: "t", Schedule: job.Schedule{Now: true}},
			{ID: "c2", Type: "t", Schedule: job.Schedule{Delay: time.Hour}},
		})
		require.NoError(t, err)
		require.NoError(t, s.WorkerSeen(ctx, "w-1", time.Now()))
		require.NoError(t, s.WorkerSeen(ctx, "w-old", time.Now().Add(-time.Hour)))

		v, err := s.Cluster(ctx)
		require.NoError(t, err)
		require.Len(t, v.Members, 1)
		require.Equal(t, "disp-a", v.Members[0].Name)
		require.Equal(t, []shard.ID{1, 3}, v.Members[0].Shards)
		require.Len(t, v.Shards, 4)
		require.Equal(t, "disp-a", v.Shards[1].Owner)
		require.Positive(t, v.Shards[1].Epoch)
		require.Empty(t, v.Shards[0].Owner)
		var ready, sched int64
		for _, sv := range v.Shards {
			ready += sv.Ready
			sched += sv.Scheduled
		}
		require.Equal(t, int64(1), ready)
		require.Equal(t, int64(1), sched)
		require.Equal(t, []shard.WorkerInfo{{ID: "w-1", LastSeen: v.Workers[0].LastSeen}}, v.Workers)
		require.NotEmpty(t, v.Nodes)
	})
}

func TestSessions_PutGetDelete(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		_, err := s.GetSession(ctx, "nope")
		require.ErrorIs(t, err, shard.ErrNotFound)
		require.NoError(t, s.PutSession(ctx, "cookie", shard.Session{Scope: "read", CSRF: "x"}, time.Minute))
		got, err := s.GetSession(ctx, "cookie")
		require.NoError(t, err)
		require.Equal(t, shard.Session{Scope: "read", CSRF: "x"}, got)
		require.NoError(t, s.DeleteSession(ctx, "cookie"))
		_, err = s.GetSession(ctx, "cookie")
		require.ErrorIs(t, err, shard.ErrNotFound)
	})
}
