// Package shardtest holds test helpers for code built on the shard package.
package shardtest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// CheckCounts checks that the per-queue counts the scripts keep (shard.Store.Queues:
// scheduled, in flight, dead) match what the sets hold: the due buckets and cold packs,
// the in-flight and the dead-letter sets of every shard, each run counted under its
// job's queue.
func CheckCounts(t testing.TB, s *shard.Store) {
	t.Helper()
	ctx := context.Background()
	rc, k := s.Client(), s.Keys()
	want := map[string]*[3]int64{}
	// queueOf returns the queue of each of jobIDs of shard id, read as a whole job (a job
	// hash, or a cold or packed job as the hash it stands for); a job gone reads as the
	// default queue.
	queueOf := func(id shard.ID, jobIDs []string) map[string]string {
		jobs, err := s.ReadJobs(ctx, id, jobIDs)
		require.NoError(t, err)
		out := map[string]string{}
		for _, j := range jobs {
			out[j.ID] = job.DefaultQueue
			for f := 0; f+1 < len(j.Fields); f += 2 {
				if j.Fields[f] == "q" {
					out[j.ID] = j.Fields[f+1]
				}
			}
		}
		return out
	}
	add := func(q string, i int) {
		if q == "" {
			q = job.DefaultQueue
		}
		if want[q] == nil {
			want[q] = &[3]int64{}
		}
		want[q][i]++
	}
	count := func(id shard.ID, members []string, i int) {
		ids := make([]string, len(members))
		for k, m := range members {
			jobID, _, ok := shard.SplitMember(m)
			require.True(t, ok, m)
			ids[k] = jobID
		}
		qs := queueOf(id, ids)
		for _, jobID := range ids {
			add(qs[jobID], i)
		}
	}
	zrange := func(key string) []string {
		m, err := rc.Do(ctx, rc.B().Zrange().Key(key).Min("0").Max("-1").Build()).AsStrSlice()
		require.NoError(t, err)
		return m
	}
	for i := 0; i < s.Shards(); i++ {
		id := shard.ID(i)
		for _, b := range zrange(k.Buckets(id)) {
			n, _ := strconv.ParseInt(b, 10, 64)
			count(id, zrange(k.Due(id, n)), 0)
		}
		for _, p := range zrange(k.PlainIndex(id)) {
			pri, q, _ := strings.Cut(p, ":")
			n, err := strconv.Atoi(pri)
			require.NoError(t, err, p)
			count(id, zrange(k.Plain(id, n, q)), 0)
		}
		// Cold jobs (shard.Config.ColdAfter) count as scheduled: their records in the
		// shard's cold lists start with their ids.
		var cold []string
		for _, b := range zrange(k.ColdBuckets(id)) {
			n, err := strconv.ParseInt(b, 10, 64)
			require.NoError(t, err, b)
			recs, err := rc.Do(ctx, rc.B().Lrange().Key(k.ColdList(id, n)).Start(0).Stop(-1).Build()).AsStrSlice()
			require.NoError(t, err)
			for _, r := range recs {
				cold = append(cold, r[:strings.IndexByte(r, '|')])
			}
		}
		qs := queueOf(id, cold)
		require.Len(t, qs, len(cold), "every cold record is a job")
		for _, jobID := range cold {
			add(qs[jobID], 0)
		}
		// Below +inf: the set's pin is no run.
		inflight, err := rc.Do(ctx, rc.B().Zrange().Key(k.Inflight(id)).Min("-inf").Max(shard.RunScoreMax).Byscore().Build()).AsStrSlice()
		require.NoError(t, err)
		count(id, inflight, 1)
		count(id, zrange(k.Dead(id)), 2)
	}
	got, err := s.Queues(ctx)
	require.NoError(t, err)
	for _, g := range got {
		w := want[g.Queue]
		if w == nil {
			w = &[3]int64{}
		}
		require.Equal(t, *w, [3]int64{g.Scheduled, g.InFlight, g.Dead},
			"queue %q: scheduled, in flight and dead as counted vs as kept", g.Queue)
		delete(want, g.Queue)
	}
	require.Empty(t, want, "queues with runs but no counts")
}
