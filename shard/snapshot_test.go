package shard_test

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

func TestScanAllJobs_ReadJobs(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 6})
		empty, err := s.Empty(ctx)
		require.NoError(t, err)
		require.True(t, empty)

		want := map[shard.ID][]string{}
		var jobs []*job.Job
		for i := range 300 {
			id := "j" + strconv.Itoa(i)
			jobs = append(jobs, &job.Job{ID: id, Type: "t", Schedule: job.Schedule{Delay: time.Hour}})
			want[s.ShardOf(id)] = append(want[s.ShardOf(id)], id)
		}
		_, err = s.Create(ctx, jobs)
		require.NoError(t, err)
		empty, err = s.Empty(ctx)
		require.NoError(t, err)
		require.False(t, empty)

		byShard := map[shard.ID][]string{}
		require.NoError(t, s.ScanAllJobs(ctx, func(id shard.ID, ids []string) error {
			byShard[id] = append(byShard[id], ids...)
			return nil
		}))
		for id := range shard.ID(6) {
			got := byShard[id]
			sort.Strings(got)
			sort.Strings(want[id])
			require.Equal(t, want[id], got, "shard %d", id)

			recs, err := s.ReadJobs(ctx, id, append([]string{"gone"}, got...))
			require.NoError(t, err)
			require.Len(t, recs, len(got), "a job that does not exist is left out")
			for _, r := range recs {
				require.Equal(t, s.ShardOf(r.ID), id)
				require.Zero(t, r.ExpireAt)
				require.Contains(t, r.Fields, "scheduled")
			}
		}
	})
}

// ScanAllJobs lists every job of the namespace once, with its shard, and nothing else: not
// the jobs of a namespace whose name starts with this one's, not other keys of the
// namespace that the SCAN pattern matches too. The namespace holds '.', '-' and '~'.
func TestScanAllJobs_EachJobOnceWithItsShard(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		c := b.Client(t)
		base := redistest.Namespace(t, b)
		openNS := func(ns string, shards int) *shard.Store {
			t.Cleanup(func() { unlinkAll(t, c, ns+":*") })
			s, err := shard.Open(ctx, c, shard.Config{Namespace: ns, Shards: shards})
			require.NoError(t, err)
			return s
		}
		s := openNS(base+".a-b~c", 12)
		others := []*shard.Store{openNS(base+".a-b~c0", 12), openNS(base, 3)}

		create := func(s *shard.Store, n int) map[shard.ID][]string {
			want := map[shard.ID][]string{}
			var jobs []*job.Job
			for i := range n {
				id := "j-" + strconv.Itoa(i) + ".x~"
				jobs = append(jobs, &job.Job{ID: id, Type: "t", Schedule: job.Schedule{Delay: time.Hour}})
				want[s.ShardOf(id)] = append(want[s.ShardOf(id)], id)
			}
			res, err := s.Create(ctx, jobs)
			require.NoError(t, err)
			for _, r := range res {
				require.True(t, r.Created, r.ID)
			}
			return want
		}
		want := create(s, 500)
		for _, o := range others {
			create(o, 50)
		}
		// Keys of the namespace that the SCAN pattern matches but that are no job's.
		k := s.Keys()
		for _, key := range []string{
			k.Ready(3, "q}:job:stray"),
			strings.Replace(k.Job(0, "unknown-tag"), k.Prefix(0), s.Config().Namespace+":v2:{nope}:", 1),
			k.Prefix(5) + "job:",
		} {
			require.NoError(t, c.Do(ctx, c.B().Set().Key(key).Value("1").Build()).Error(), key)
		}

		got := map[shard.ID][]string{}
		calls := 0
		require.NoError(t, s.ScanAllJobs(ctx, func(id shard.ID, ids []string) error {
			calls++
			require.NotEmpty(t, ids)
			got[id] = append(got[id], ids...)
			return nil
		}))
		require.Len(t, got, len(want))
		for id, ids := range want {
			sort.Strings(ids)
			sort.Strings(got[id])
			require.Equal(t, ids, got[id], "shard %d: each job once", id)
		}

		// fn's error stops the scan and is returned.
		stop := errors.New("stop")
		n := 0
		err := s.ScanAllJobs(ctx, func(shard.ID, []string) error { n++; return stop })
		require.ErrorIs(t, err, stop)
		require.Equal(t, 1, n)
	})
}

// unlinkAll deletes the keys matching pattern on every primary.
func unlinkAll(t *testing.T, c rueidis.Client, pattern string) {
	ctx := context.Background()
	addrs, nodes, err := shard.Primaries(ctx, c)
	require.NoError(t, err)
	for _, addr := range addrs {
		n := nodes[addr]
		var cursor uint64
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
			require.NoError(t, err)
			for _, key := range e.Elements {
				require.NoError(t, c.Do(ctx, c.B().Unlink().Key(key).Build()).Error()) // routed by slot
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
}

func TestRestoreJobs_IdempotentAndExpiry(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		src := open(t, b, shard.Config{Shards: 2})
		dst := open(t, b, shard.Config{Shards: 2})
		_, err := src.Create(ctx, []*job.Job{
			{ID: "later", Type: "t", Schedule: job.Schedule{Delay: time.Hour}},
			{ID: "now", Type: "t", Schedule: job.Schedule{Now: true}},
		})
		require.NoError(t, err)
		now, err := src.ServerNow(ctx)
		require.NoError(t, err)
		recs, err := src.ReadJobs(ctx, src.ShardOf("now"), []string{"now"})
		require.NoError(t, err)
		require.Len(t, recs, 1)
		// The same job, finished: once expiring in a minute, once expired.
		done := func(newID string, exp time.Time) shard.JobRecord {
			r := shard.JobRecord{ID: newID, ExpireAt: exp.UnixMilli()}
			for k := 0; k < len(recs[0].Fields); k += 2 {
				f, v := recs[0].Fields[k], recs[0].Fields[k+1]
				switch f {
				case "st":
					v = "completed"
				case "rl":
					v = ","
				}
				r.Fields = append(r.Fields, f, v)
			}
			return r
		}
		recs = append(recs, done("expiring", now.Add(time.Minute)), done("expired", now.Add(-time.Second)))

		restore := func() (total shard.RestoreCounts) {
			for _, r := range recs {
				c, err := dst.RestoreJobs(ctx, dst.ShardOf(r.ID), []shard.JobRecord{r})
				require.NoError(t, err)
				total.Restored += c.Restored
				total.Existed += c.Existed
				total.Expired += c.Expired
			}
			return total
		}
		require.Equal(t, shard.RestoreCounts{Restored: 2, Expired: 1}, restore())
		require.Equal(t, shard.RestoreCounts{Existed: 2, Expired: 1}, restore())

		info, err := dst.Get(ctx, "expiring")
		require.NoError(t, err)
		require.Equal(t, job.StateCompleted, info.State)
		// Generous: the test's own steps take real time on a loaded machine.
		require.WithinDuration(t, now.Add(time.Minute), info.Expires, 10*time.Second)
		_, err = dst.Get(ctx, "expired")
		require.ErrorIs(t, err, shard.ErrNotFound)
		// The ready run is filed once, however many restores ran.
		qs, err := dst.Queues(ctx)
		require.NoError(t, err)
		require.Len(t, qs, 1)
		require.Equal(t, int64(1), qs[0].Ready)
		require.Equal(t, int64(1), qs[0].Fired, "a run restored ready counts as fired")
	})
}

func TestBeginRestore(t *testing.T) {
	t.Parallel()
	b := redistest.Backends(t)[0]
	ctx := context.Background()
	s := open(t, b, shard.Config{Shards: 2})
	resumed, err := s.BeginRestore(ctx, "a")
	require.NoError(t, err)
	require.False(t, resumed)
	// Nothing written yet: another restore may start over.
	resumed, err = s.BeginRestore(ctx, "b")
	require.NoError(t, err)
	require.False(t, resumed)
	_, err = s.Create(ctx, []*job.Job{{ID: "x", Type: "t", Schedule: job.Schedule{Now: true}}})
	require.NoError(t, err)
	resumed, err = s.BeginRestore(ctx, "b")
	require.NoError(t, err)
	require.True(t, resumed)
	_, err = s.BeginRestore(ctx, "a")
	require.ErrorIs(t, err, shard.ErrNotEmpty)
	require.ErrorContains(t, err, "a restore of snapshot b began and did not end")
	require.NoError(t, s.EndRestore(ctx))
	_, err = s.BeginRestore(ctx, "b")
	require.ErrorIs(t, err, shard.ErrNotEmpty)
	require.NotContains(t, err.Error(), "began")
}

func TestClaimSnapshotPeriod(t *testing.T) {
	t.Parallel()
	m, c := redistest.Mini(t)
	ctx := context.Background()
	s, err := shard.Open(ctx, c, shard.Config{Shards: 1})
	require.NoError(t, err)
	ok, err := s.ClaimSnapshotPeriod(ctx, "a", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = s.ClaimSnapshotPeriod(ctx, "b", time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "a holds the period")
	m.FastForward(time.Minute)
	ok, err = s.ClaimSnapshotPeriod(ctx, "b", time.Minute)
	require.NoError(t, err)
	require.True(t, ok, "the period ended")
}

// A namespace whose only keys are a workflow's hash (its nodes' jobs expired before it,
// as they do Retention after each ends) is not empty: a restore into it would leave out
// the snapshot's workflow of the same id, with its nodes (restore_workflows keeps a
// workflow that exists), so BeginRestore refuses it.
func TestEmpty_AWorkflowWithoutItsNodesJobsIsNotEmpty(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 3, NoPack: true})
		w := &job.Workflow{ID: "alone", Jobs: []job.Node{{Job: job.Job{ID: "a", Type: "t"}}}}
		_, err := s.CreateWorkflow(ctx, w)
		require.NoError(t, err)
		(&wfRunner{t: t, s: s, wf: "alone"}).run(ctx)
		c := b.Client(t)
		id := s.ShardOf("alone")
		require.NoError(t, c.Do(ctx, c.B().Del().Key(s.Keys().Job(id, job.NodeJobID("alone", "a"))).Build()).Error())
		n, err := c.Do(ctx, c.B().Exists().Key(s.Keys().Workflow(id, "alone")).Build()).AsInt64()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "the workflow's hash")

		empty, err := s.Empty(ctx)
		require.NoError(t, err)
		require.False(t, empty, "a workflow's hash is left")
		_, err = s.BeginRestore(ctx, "snap")
		require.ErrorIs(t, err, shard.ErrNotEmpty)
	})
}
