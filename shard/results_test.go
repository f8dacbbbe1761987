package shard_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// A NoAhead claim takes only runs that start now: it stops at the first run a dispatcher
// fired ahead of its due time (its lead), in the ready set's order, and says more may be
// left; a plain claim takes that run as before. Hash and packed jobs.
func TestClaimMany_NoAheadStopsAtRunsFiredAhead(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		for _, noPack := range []bool{true, false} {
			ctx := context.Background()
			s := open(t, b, shard.Config{Shards: 1, ColdAfter: -1, NoPack: noPack})
			now, err := s.ServerNow(ctx)
			require.NoError(t, err)
			hi := 9
			_, err = s.Create(ctx, []*job.Job{
				{ID: "now", Type: "t", Schedule: job.Schedule{Now: true}},
				{ID: "ahead", Type: "t", Schedule: job.Schedule{At: now.Add(time.Hour)}},
				{ID: "urgent", Queue: "q2", Type: "t", Priority: &hi, Schedule: job.Schedule{At: now.Add(time.Hour)}},
				{ID: "later", Queue: "q2", Type: "t", Schedule: job.Schedule{Now: true}},
			})
			require.NoError(t, err)
			lease := s.AcquireLeases(ctx, "d", []shard.ID{0}, time.Hour)[0]
			require.True(t, lease.Held)
			d, err := s.FireDue(ctx, lease.Lease, 100, 2*time.Hour)
			require.NoError(t, err)
			require.Equal(t, 2, d.Fired, "the runs due in an hour are fired ahead")

			res := s.ClaimMany(ctx, []shard.ClaimRequest{
				{Shard: 0, Queue: "default", N: 10, NoAhead: true},
				{Shard: 0, Queue: "q2", N: 10, NoAhead: true},
			}, "w", "n")
			require.NoError(t, res[0].Err)
			require.NoError(t, res[1].Err)
			require.Len(t, res[0].Runs, 1, "noPack %v", noPack)
			require.Equal(t, "now", res[0].Runs[0].JobID)
			require.True(t, res[0].More, "the run fired ahead is left")
			require.Empty(t, res[1].Runs, "the urgent run fired ahead comes first and stops the claim")
			require.True(t, res[1].More)

			again := s.ClaimMany(ctx, []shard.ClaimRequest{{Shard: 0, Queue: "default", N: 10, NoAhead: true}}, "w", "n")[0]
			require.NoError(t, again.Err)
			require.Empty(t, again.Runs)
			require.True(t, again.More)

			c, err := s.Claim(ctx, 0, "default", 10, "w", "n")
			require.NoError(t, err)
			require.Len(t, c, 1)
			require.Equal(t, "ahead", c[0].JobID, "a plain claim takes runs fired ahead")
			require.True(t, c[0].StartAt.After(c[0].ClaimedAt))
		}
	})
}

// A success with a result keeps the result with the run: Runs reads it back, for hash,
// packed and recurring jobs; a recurring job keeps those of its newest History runs. A
// success without one has none.
func TestFinish_ResultKeptWithRun(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		for _, noPack := range []bool{true, false} {
			ctx := context.Background()
			s := open(t, b, shard.Config{Shards: 1, ColdAfter: -1, NoPack: noPack, History: 2})
			_, err := s.Create(ctx, []*job.Job{
				{ID: "one", Type: "t", Schedule: job.Schedule{Now: true}},
				{ID: "plain", Type: "t", Schedule: job.Schedule{Now: true}},
				{ID: "bin", Type: "t", Schedule: job.Schedule{Now: true}},
				{ID: "cron", Type: "t", Schedule: job.Schedule{Cron: "0 0 1 1 *"}},
			})
			require.NoError(t, err)
			c, err := s.Claim(ctx, 0, "default", 10, "w", "n")
			require.NoError(t, err)
			require.Len(t, c, 3)
			byID := map[string]shard.Claimed{}
			for _, r := range c {
				byID[r.JobID] = r
			}
			binary := []byte{0, 1, 2, 255, '|', ','}
			errs, err := s.FinishRuns(ctx, 0, []shard.Finish{
				{Member: byID["one"].Member, Token: byID["one"].Token, Outcome: shard.Succeeded, Result: []byte(`{"ok":1}`)},
				{Member: byID["plain"].Member, Token: byID["plain"].Token, Outcome: shard.Succeeded},
				{Member: byID["bin"].Member, Token: byID["bin"].Token, Outcome: shard.Succeeded, Result: binary},
			})
			require.NoError(t, err)
			require.Equal(t, []error{nil, nil, nil}, errs)
			for id, want := range map[string][]byte{"one": []byte(`{"ok":1}`), "plain": nil, "bin": binary} {
				runs, err := s.Runs(ctx, id)
				require.NoError(t, err)
				require.Len(t, runs, 1, id)
				require.Equal(t, job.OutcomeSucceeded, runs[0].Outcome, id)
				require.Equal(t, want, runs[0].Result, "%s noPack %v", id, noPack)
			}

			// A recurring job: three triggered runs, each with its result; the oldest
			// result goes once History (2) newer ones are kept.
			var members []string
			var last int64
			for i := range 3 {
				// Each run due at its own millisecond: a trigger takes the time of the call
				// on the shard's Redis clock, and two in one millisecond make one run.
				require.Eventually(t, func() bool {
					ms, err := shardClockMs(ctx, s, 0)
					return err == nil && ms > last
				}, 10*time.Second, time.Millisecond)
				_, err := s.Trigger(ctx, "cron")
				require.NoError(t, err)
				c, err := s.Claim(ctx, 0, "default", 10, "w", "n")
				require.NoError(t, err)
				require.Len(t, c, 1)
				require.NotContains(t, members, c[0].Member, "each trigger makes a run of its own")
				members = append(members, c[0].Member)
				last = c[0].Due.UnixMilli()
				errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: c[0].Member, Token: c[0].Token, Outcome: shard.Succeeded, Result: []byte{byte('a' + i)}}})
				require.NoError(t, err)
				require.NoError(t, errs[0])
			}
			runs, err := s.Runs(ctx, "cron")
			require.NoError(t, err)
			require.Len(t, runs, 2)
			require.Equal(t, []byte("c"), runs[0].Result)
			require.Equal(t, []byte("b"), runs[1].Result)
			_, first, _ := shard.SplitMember(members[0])
			cl := s.Client()
			n, err := cl.Do(ctx, cl.B().Hexists().Key(s.Keys().Job(0, "cron")).Field("x"+strconv.FormatInt(first, 10)).Build()).AsInt64()
			require.NoError(t, err)
			require.Zero(t, n, "the oldest result is deleted")
		}
	})
}

// shardClockMs reads the clock of shard id's Redis node in ms, as the shard's scripts
// read it. ServerNow only estimates it: the local clock plus an offset measured to half a
// round trip, which a loaded machine made tens of milliseconds ahead.
func shardClockMs(ctx context.Context, s *shard.Store, id shard.ID) (int64, error) {
	// A script with one of the shard's keys runs on the node that holds the shard.
	c := s.Client()
	tm, err := c.Do(ctx, c.B().Eval().Script("return redis.call('TIME')").Numkeys(1).Key(s.Keys().Stats(id)).Build()).AsStrSlice()
	if err != nil || len(tm) != 2 {
		return 0, fmt.Errorf("time of shard %d: %v %q", id, err, tm)
	}
	sec, err := strconv.ParseInt(tm[0], 10, 64)
	if err != nil {
		return 0, err
	}
	usec, err := strconv.ParseInt(tm[1], 10, 64)
	if err != nil {
		return 0, err
	}
	return sec*1000 + usec/1000, nil
}

// A failure with a Delay retries after that delay instead of the job's backoff; the
// attempt is used.
func TestFinish_FailedWithDelay(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1, ColdAfter: -1})
		_, err := s.Create(ctx, []*job.Job{{ID: "f", Type: "t", Schedule: job.Schedule{Now: true},
			Retry: job.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Hour}}})
		require.NoError(t, err)
		c, err := s.Claim(ctx, 0, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, c, 1)
		errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: c[0].Member, Token: c[0].Token, Outcome: shard.Failed, Error: "busy", Delay: 10 * time.Minute}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		info, err := s.Get(ctx, "f")
		require.NoError(t, err)
		now, err := s.ServerNow(ctx)
		require.NoError(t, err)
		require.WithinRange(t, info.RetryAt, now.Add(9*time.Minute), now.Add(11*time.Minute), "not the hour of the backoff")
		runs, err := s.Runs(ctx, "f")
		require.NoError(t, err)
		require.Equal(t, job.OutcomeFailed, runs[0].Outcome)
		require.Equal(t, "busy", runs[0].Error)
		require.Equal(t, 1, runs[0].Attempt)
	})
}

// A snapshot keeps results: a job read with ReadJobs and restored reads them back.
func TestResult_KeptBySnapshot(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		src := open(t, b, shard.Config{Shards: 1, ColdAfter: -1})
		dst := open(t, b, shard.Config{Shards: 1, ColdAfter: -1})
		_, err := src.Create(ctx, []*job.Job{{ID: "r", Type: "t", Schedule: job.Schedule{Now: true}}})
		require.NoError(t, err)
		c, err := src.Claim(ctx, 0, "default", 1, "w", "n")
		require.NoError(t, err)
		require.Len(t, c, 1)
		errs, err := src.FinishRuns(ctx, 0, []shard.Finish{{Member: c[0].Member, Token: c[0].Token, Outcome: shard.Succeeded, Result: []byte("42")}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		recs, err := src.ReadJobs(ctx, 0, []string{"r"})
		require.NoError(t, err)
		_, err = dst.RestoreJobs(ctx, 0, recs)
		require.NoError(t, err)
		runs, err := dst.Runs(ctx, "r")
		require.NoError(t, err)
		require.Len(t, runs, 1)
		require.Equal(t, []byte("42"), runs[0].Result)
	})
}

// Two triggers of a recurring job in one millisecond of the Redis clock, the first run
// acked in between, make two runs: the second takes the next millisecond, and neither
// overwrites the other's record or result. (Miniredis: its clock stands still.)
func TestTrigger_SameMillisecondAfterAnAck(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	s, _ := frozen(t, now, shard.Config{Shards: 1})
	_, err := s.Create(ctx, []*job.Job{{ID: "cron", Type: "t", Schedule: job.Schedule{Cron: "0 0 1 1 *"}}})
	require.NoError(t, err)
	var members []string
	for i := range 2 {
		_, err := s.Trigger(ctx, "cron")
		require.NoError(t, err)
		c, err := s.Claim(ctx, 0, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, c, 1)
		members = append(members, c[0].Member)
		errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: c[0].Member, Token: c[0].Token, Outcome: shard.Succeeded, Result: []byte{byte('a' + i)}}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
	}
	require.NotEqual(t, members[0], members[1])
	runs, err := s.Runs(ctx, "cron")
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.Equal(t, []byte("b"), runs[0].Result)
	require.Equal(t, []byte("a"), runs[1].Result)
	require.True(t, now.Add(time.Millisecond).Equal(runs[0].Due), "%v", runs[0].Due)
	require.True(t, now.Equal(runs[1].Due), "%v", runs[1].Due)
}
