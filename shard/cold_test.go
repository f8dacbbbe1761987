package shard_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// coldJobs are one-time jobs due hours ahead, with payloads of every stored form
// (none, chunked, whole) holding the record's own separators, and non-default settings.
func coldJobs(now time.Time) []*job.Job {
	at := now.Add(2 * time.Hour).Truncate(time.Millisecond)
	binary := []byte("a|b=c:d\x00\xff" + strings.Repeat("|=:", 30)) // 100 bytes
	pri := 7
	return []*job.Job{
		{ID: "bin", Type: "t", Payload: binary, Schedule: job.Schedule{At: at}},
		{ID: "none", Type: "t", Schedule: job.Schedule{At: at.Add(time.Second)}},
		{ID: "chunks", Type: "t", Payload: bytes.Repeat([]byte("0123456789"), 30), Schedule: job.Schedule{At: at.Add(time.Minute)}},
		{ID: "whole", Type: "t", Payload: bytes.Repeat([]byte("x"), 700), Schedule: job.Schedule{At: at}},
		{ID: "delay", Queue: "q", Type: "mail", Payload: []byte(`{"to":"a"}`), Priority: &pri,
			Retry: job.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second}, Timeout: 5 * time.Second,
			Schedule: job.Schedule{Delay: 3 * time.Hour}},
	}
}

// coldKeys counts the keys of cold storage of a one-shard store.
func coldKeys(t *testing.T, b redistest.Backend, s *shard.Store) int {
	return shardKeys(t, b, s, func(rest string) bool {
		return strings.HasPrefix(rest, "cold:")
	})
}

// shardKeys counts the keys of shard 0 of s whose names after the shard's prefix match.
func shardKeys(t *testing.T, b redistest.Backend, s *shard.Store, match func(rest string) bool) int {
	t.Helper()
	c := b.Client(t)
	n := 0
	for _, node := range c.Nodes() {
		keys, err := node.Do(context.Background(), node.B().Keys().Pattern(s.Keys().Prefix(0)+"*").Build()).AsStrSlice()
		if err != nil {
			continue // a replica
		}
		for _, k := range keys {
			if match(strings.TrimPrefix(k, s.Keys().Prefix(0))) {
				n++
			}
		}
	}
	return n
}

// reopen opens another store on cfg.Namespace.
func reopen(t *testing.T, b redistest.Backend, cfg shard.Config) *shard.Store {
	t.Helper()
	s, err := shard.Open(context.Background(), b.Client(t), cfg)
	require.NoError(t, err)
	return s
}

// jobExists reports whether jobID has a job hash. It asks through the store's client: a
// client of its own per call (per job of a loop) cost a topology refresh on the cluster.
func jobExists(t *testing.T, _ redistest.Backend, s *shard.Store, jobID string) bool {
	t.Helper()
	c := s.Client()
	n, err := c.Do(context.Background(), c.B().Exists().Key(s.Keys().Job(s.ShardOf(jobID), jobID)).Build()).AsInt64()
	require.NoError(t, err)
	return n == 1
}

// A job due beyond ColdAfter is stored cold, with no job hash, and reads, lists and
// exports as the same job stored hot does; changing it thaws it; the dispatcher thaws
// the rest ahead of their time, and their runs carry their payloads unchanged.
func TestCold_ReadsAsHotAndThaws(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1, ColdAfter: time.Minute, NoPack: true})
		hot := open(t, b, shard.Config{Shards: 1, ColdAfter: -1, NoPack: true})
		now, err := s.ServerNow(ctx)
		require.NoError(t, err)
		jobs := append(coldJobs(now), &job.Job{ID: "soon", Type: "t", Schedule: job.Schedule{Delay: 30 * time.Second}})
		for _, st := range []*shard.Store{s, hot} {
			res, err := st.Create(ctx, jobs)
			require.NoError(t, err)
			for _, r := range res {
				require.NoError(t, r.Err)
				require.True(t, r.Created, r.ID)
				require.Equal(t, job.StateScheduled, r.State, r.ID)
			}
		}
		for _, j := range jobs {
			require.Equal(t, j.ID == "soon", jobExists(t, b, s, j.ID), "%s has a job hash only when hot", j.ID)
		}
		require.Positive(t, coldKeys(t, b, s))

		// Get: the same job as the hot store's (creation times may differ by a few ms).
		same := func(id string) {
			t.Helper()
			want, err := hot.Get(ctx, id)
			require.NoError(t, err)
			got, err := s.Get(ctx, id)
			require.NoError(t, err)
			require.WithinDuration(t, want.CreatedAt, got.CreatedAt, time.Second, id)
			if got.Schedule.Delay > 0 {
				// Due a delay after creation: as apart as the creation times.
				require.WithinDuration(t, want.NextRunAt, got.NextRunAt, time.Second, id)
				got.NextRunAt = want.NextRunAt
			}
			got.CreatedAt, want.CreatedAt = time.Time{}, time.Time{}
			require.Equal(t, want, got, id)
		}
		for _, j := range jobs {
			same(j.ID)
		}
		runs, err := s.Runs(ctx, "bin")
		require.NoError(t, err)
		require.Empty(t, runs)
		_, err = s.Runs(ctx, "nope")
		require.ErrorIs(t, err, shard.ErrNotFound)
		_, err = s.Get(ctx, "nope")
		require.ErrorIs(t, err, shard.ErrNotFound)
		require.EqualValues(t, 5, queueStats(t, s)["default"].Scheduled)
		require.EqualValues(t, 1, queueStats(t, s)["q"].Scheduled)

		// List and the snapshot scan see every job once.
		page, err := s.List(ctx, shard.ListFilter{Limit: 1000})
		require.NoError(t, err)
		var listed []string
		for _, info := range page.Jobs {
			listed = append(listed, info.ID)
		}
		var ids []string
		for _, j := range jobs {
			ids = append(ids, j.ID)
		}
		sort.Strings(ids)
		require.Equal(t, ids, listed)
		var scanned []string
		require.NoError(t, s.ScanAllJobs(ctx, func(_ shard.ID, jobIDs []string) error {
			scanned = append(scanned, jobIDs...)
			return nil
		}))
		sort.Strings(scanned)
		require.Equal(t, ids, scanned)

		// Creating again with the same definition finds the job; with another, conflicts.
		res, err := s.Create(ctx, coldJobs(now)[:1])
		require.NoError(t, err)
		require.False(t, res[0].Created)
		require.False(t, res[0].Conflict)
		other := coldJobs(now)[1]
		other.Payload = []byte("changed")
		res, err = s.Create(ctx, []*job.Job{other})
		require.NoError(t, err)
		require.True(t, res[0].Conflict)
		same("bin")
		same("none")

		// Changing a cold job thaws it first.
		st, changed, err := s.Cancel(ctx, "chunks")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, job.StateCancelled, st)
		require.True(t, jobExists(t, b, s, "chunks"))
		require.EqualValues(t, 4, queueStats(t, s)["default"].Scheduled)
		p := 2
		info, err := s.Update(ctx, "whole", shard.Update{Priority: &p})
		require.NoError(t, err)
		require.Equal(t, 2, *info.Priority)
		require.Equal(t, bytes.Repeat([]byte("x"), 700), info.Payload)

		// A dispatcher thaws buckets that start within ColdAfter/2: one whose ColdAfter
		// is 10h thaws them all now, and no cold key is left.
		thawer := reopen(t, b, shard.Config{Namespace: s.Config().Namespace, Shards: 1, ColdAfter: 10 * time.Hour})
		lease := thawer.AcquireLeases(ctx, "d", []shard.ID{0}, time.Hour)[0]
		require.True(t, lease.Held)
		d, err := thawer.FireDue(ctx, lease.Lease, 100, 0)
		require.NoError(t, err)
		require.Zero(t, d.Fired)
		require.Zero(t, coldKeys(t, b, s))
		for _, j := range jobs {
			if j.ID != "chunks" && j.ID != "whole" {
				require.True(t, jobExists(t, b, s, j.ID), j.ID)
				same(j.ID)
			}
		}
		require.EqualValues(t, 4, queueStats(t, s)["default"].Scheduled)

		// Fired (with a lead beyond their due times) and claimed: the payloads as given.
		d, err = thawer.FireDue(ctx, lease.Lease, 100, 4*time.Hour)
		require.NoError(t, err)
		require.Equal(t, 5, d.Fired, "all but the cancelled one")
		want := map[string][]byte{}
		for _, j := range jobs {
			want[j.ID] = j.Payload
		}
		for _, q := range []string{"default", "q"} {
			c, err := s.Claim(ctx, 0, q, 10, "w", "n")
			require.NoError(t, err)
			for _, r := range c {
				require.Equal(t, string(want[r.JobID]), string(r.Payload), r.JobID)
				delete(want, r.JobID)
			}
		}
		require.ElementsMatch(t, []string{"chunks"}, slices.Collect(maps.Keys(want)))
	})
}

// On the Redis clock, a cold job thaws ColdAfter/2 before its bucket starts and fires at
// its due time; the dispatcher is told when to come back for each.
func TestCold_ThawsAheadAndFiresOnTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 11, 21, 12, 0, 30, 0, time.UTC)
	s, m := frozen(t, now, shard.Config{Shards: 1, ColdAfter: 10 * time.Minute})
	due := now.Add(20 * time.Minute)
	_, err := s.Create(ctx, []*job.Job{{ID: "c", Type: "t", Schedule: job.Schedule{At: due}}})
	require.NoError(t, err)
	lease := s.AcquireLeases(ctx, "d", []shard.ID{0}, 24*time.Hour)[0]
	require.True(t, lease.Held)

	bucketStart := due.Truncate(time.Minute)
	thawAt := bucketStart.Add(-5 * time.Minute)
	d, err := s.FireDue(ctx, lease.Lease, 100, 0)
	require.NoError(t, err)
	require.Equal(t, thawAt.UnixMilli(), d.NextDue, "come back when the bucket thaws")

	m.SetTime(thawAt.Add(-time.Millisecond))
	d, err = s.FireDue(ctx, lease.Lease, 100, 0)
	require.NoError(t, err)
	require.Equal(t, thawAt.UnixMilli(), d.NextDue)
	info, err := s.Get(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, due, info.NextRunAt.UTC())

	m.SetTime(thawAt)
	d, err = s.FireDue(ctx, lease.Lease, 100, 0)
	require.NoError(t, err)
	require.Zero(t, d.Fired)
	require.Equal(t, due.UnixMilli(), d.NextDue, "thawed: its due time is next")

	m.SetTime(due)
	d, err = s.FireDue(ctx, lease.Lease, 100, 0)
	require.NoError(t, err)
	require.Equal(t, 1, d.Fired)
	c, err := s.Claim(ctx, 0, "default", 10, "w", "n")
	require.NoError(t, err)
	require.Len(t, c, 1)
	require.Equal(t, due, c[0].Due.UTC())
}

// A bucket of more cold jobs than one call thaws is thawed over several calls, each
// asking to be called again at once; none is lost or thawed twice.
func TestCold_LargeBucketThawsInSlices(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1, ColdAfter: time.Minute})
		now, err := s.ServerNow(ctx)
		require.NoError(t, err)
		at := now.Add(time.Hour).Truncate(time.Minute)
		var jobs []*job.Job
		for i := range 600 {
			jobs = append(jobs, &job.Job{ID: fmt.Sprintf("j-%d", i), Type: "t", Schedule: job.Schedule{At: at.Add(time.Duration(i) * time.Millisecond)}})
		}
		_, err = s.Create(ctx, jobs)
		require.NoError(t, err)
		// Two of them are thawed by a change first: their records must not thaw again.
		_, _, err = s.Pause(ctx, "j-0")
		require.NoError(t, err)
		_, err = s.Trigger(ctx, "j-599")
		require.NoError(t, err)

		thawer := reopen(t, b, shard.Config{Namespace: s.Config().Namespace, Shards: 1, ColdAfter: 4 * time.Hour})
		lease := thawer.AcquireLeases(ctx, "d", []shard.ID{0}, time.Hour)[0]
		require.True(t, lease.Held)
		calls := 0
		for {
			d, err := thawer.FireDue(ctx, lease.Lease, 1000, 0)
			require.NoError(t, err)
			calls++
			if d.NextDue != d.Now {
				require.Equal(t, jobs[1].Schedule.At.UnixMilli(), d.NextDue)
				break
			}
			require.Less(t, calls, 10)
		}
		require.Equal(t, 3, calls, "598 records, 256 a call")
		require.Zero(t, coldKeys(t, b, s))
		for _, j := range jobs {
			require.True(t, jobExists(t, b, s, j.ID), j.ID)
		}
		qs := queueStats(t, s)["default"]
		require.EqualValues(t, 598, qs.Scheduled, "scheduled, not counted twice")
		d, err := thawer.FireDue(ctx, lease.Lease, 1000, 2*time.Hour)
		require.NoError(t, err)
		require.Equal(t, 598, d.Fired, "each once; the paused one stays parked")
	})
}

func TestConfig_ColdAfterBound(t *testing.T) {
	t.Parallel()
	_, c := redistest.Mini(t)
	// The tests' floor is 1s (export_test.go); a binary's is 1m.
	_, err := shard.Open(context.Background(), c, shard.Config{ColdAfter: 500 * time.Millisecond})
	require.ErrorContains(t, err, "cold after: must be at least 1s (or negative: never), got 500ms")
}
