package shard_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// A job whose time is out of range (job.Schedule.Validate) is refused, with the field
// named, and nothing of it is stored; the jobs beside it in the call are created.
func TestCreate_RefusesTimesOutOfRange(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		for _, noPack := range []bool{false, true} {
			t.Run(fmt.Sprintf("NoPack=%v", noPack), func(t *testing.T) {
				ctx := context.Background()
				s := open(t, b, shard.Config{NoPack: noPack})
				bad := []struct {
					id, field string
					sch       job.Schedule
					retry     job.RetryPolicy
				}{
					{"year-1", "schedule.at", job.Schedule{At: time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC)}, job.RetryPolicy{}},
					{"y1969", "schedule.at", job.Schedule{At: time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)}, job.RetryPolicy{}},
					{"y1969-ms", "schedule.at", job.Schedule{At: time.UnixMilli(-1)}, job.RetryPolicy{}},
					{"epoch", "schedule.at", job.Schedule{At: time.Unix(0, 0)}, job.RetryPolicy{}},
					{"y1999", "schedule.at", job.Schedule{At: job.MinAt.Add(-time.Millisecond)}, job.RetryPolicy{}},
					{"y2200", "schedule.at", job.Schedule{At: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)}, job.RetryPolicy{}},
					{"y9999", "schedule.at", job.Schedule{At: time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)}, job.RetryPolicy{}},
					{"delay-max", "schedule.delay", job.Schedule{Delay: math.MaxInt64}, job.RetryPolicy{}},
					{"delay-over", "schedule.delay", job.Schedule{Delay: job.MaxDelay + time.Millisecond}, job.RetryPolicy{}},
					{"backoff", "retry.max_backoff", job.Schedule{Now: true}, job.RetryPolicy{MaxBackoff: math.MaxInt64}},
				}
				var jobs []*job.Job
				for _, c := range bad {
					jobs = append(jobs, &job.Job{ID: c.id, Type: "t", Schedule: c.sch, Retry: c.retry})
				}
				jobs = append(jobs,
					&job.Job{ID: "first", Type: "t", Schedule: job.Schedule{At: job.MinAt}},
					&job.Job{ID: "last", Type: "t", Schedule: job.Schedule{At: time.Date(2199, 12, 31, 23, 59, 59, 999e6, time.UTC)}},
					&job.Job{ID: "far", Type: "t", Schedule: job.Schedule{Delay: job.MaxDelay}})
				res, err := s.Create(ctx, jobs)
				require.NoError(t, err)
				for i, c := range bad {
					var fe *job.FieldError
					require.ErrorAs(t, res[i].Err, &fe, c.id)
					require.Equal(t, c.field, fe.Field, c.id)
					_, err := s.Get(ctx, c.id)
					require.ErrorIs(t, err, shard.ErrNotFound, c.id)
				}
				for _, r := range res[len(bad):] {
					require.NoError(t, r.Err, r.ID)
					require.True(t, r.Created, r.ID)
				}

				// The first time in range runs, and reads back as it was given.
				claimed := claimAll(t, s, "default")
				require.Len(t, claimed, 1)
				require.Equal(t, "first", claimed[0].JobID)
				require.True(t, claimed[0].Due.Equal(job.MinAt), claimed[0].Due)
				finish(t, s, claimed[0], shard.Succeeded)
				info, err := s.Get(ctx, "first")
				require.NoError(t, err)
				require.Equal(t, job.StateCompleted, info.State)
				require.True(t, info.Schedule.At.Equal(job.MinAt), info.Schedule.At)
				runs, err := s.Runs(ctx, "first")
				require.NoError(t, err)
				require.Len(t, runs, 1)
				require.True(t, runs[0].Due.Equal(job.MinAt), runs[0].Due)
				for _, id := range []string{"last", "far"} {
					info, err := s.Get(ctx, id)
					require.NoError(t, err)
					require.Equal(t, job.StateScheduled, info.State, id)
				}

				// An update is refused the same way.
				for _, sch := range []job.Schedule{{At: time.UnixMilli(-1000)}, {At: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)}} {
					_, err = s.Update(ctx, "last", shard.Update{Schedule: &sch})
					var fe *job.FieldError
					require.ErrorAs(t, err, &fe)
					require.Equal(t, "schedule.at", fe.Field)
				}
				sch := job.Schedule{Delay: job.MaxDelay + time.Second}
				_, err = s.Update(ctx, "far", shard.Update{Schedule: &sch})
				var fe *job.FieldError
				require.ErrorAs(t, err, &fe)
				require.Equal(t, "schedule.delay", fe.Field)
			})
		}
	})
}

// TestPreEpochJob_StoredByOlderBinary writes a one-time job due before 1970 into Redis
// as an older binary, which accepted such times, stored it at its create (a packed job
// or a job hash, ready at once since it is past due), and checks that every reader and
// every change still works on it: it runs, a success and a failure are recorded, and it
// can be read, listed, cancelled and created again, its dead run read, requeued and
// deleted.
func TestPreEpochJob_StoredByOlderBinary(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		for _, due := range []int64{-1000, time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC).UnixMilli()} {
			for _, packed := range []bool{true, false} {
				for _, outcome := range []shard.Outcome{shard.Succeeded, shard.Failed, ""} {
					name := fmt.Sprintf("due=%d/packed=%v/outcome=%s", due, packed, outcome)
					t.Run(name, func(t *testing.T) {
						testPreEpochJob(t, b, due, packed, outcome)
					})
				}
			}
		}
	})
}

func testPreEpochJob(t *testing.T, b redistest.Backend, due int64, packed bool, outcome shard.Outcome) {
	ctx := context.Background()
	s := open(t, b, shard.Config{Shards: 1, NoPack: !packed})
	c := s.Client()
	now, err := s.ServerNow(ctx)
	require.NoError(t, err)
	nowStr := strconv.FormatInt(now.UnixMilli(), 10)
	dueStr := strconv.FormatInt(due, 10)
	member := "old:" + dueStr

	// What create_jobs of an older binary wrote for {"id": "old", "type": "t", "at": due,
	// "retry": {"max_attempts": 1}}.
	if packed {
		v := nowStr + "||default|5|old|" + dueStr + "|0|olddh|@t=1:tma=1:1"
		require.NoError(t, c.Do(ctx, c.B().Hset().Key(s.Keys().PackedJobs(0)).FieldValue().FieldValue("old", v).Build()).Error())
	} else {
		require.NoError(t, c.Do(ctx, c.B().Hset().Key(s.Keys().Job(0, "old")).FieldValue().
			FieldValue("cr", nowStr).FieldValue("dh", "olddh").FieldValue("ma", "1").FieldValue("nx", "0").
			FieldValue("rl", ","+dueStr+",").FieldValue("st", "ready").FieldValue("sv", "@"+dueStr).FieldValue("t", "t").Build()).Error())
	}
	score := float64(4e13 + due) // (9-priority)*1e13 + due
	require.NoError(t, c.Do(ctx, c.B().Zadd().Key(s.Keys().Ready(0, "default")).ScoreMember().ScoreMember(score, member).Build()).Error())
	require.NoError(t, c.Do(ctx, c.B().Hincrby().Key(s.Keys().Stats(0)).Field("n:default").Increment(1).Build()).Error())

	at := time.UnixMilli(due)
	get := func(want job.State) {
		t.Helper()
		info, err := s.Get(ctx, "old")
		require.NoError(t, err)
		require.Equal(t, want, info.State)
		require.True(t, info.Schedule.At.Equal(at), "at %s", info.Schedule.At)
		page, err := s.List(ctx, shard.ListFilter{})
		require.NoError(t, err)
		require.Len(t, page.Jobs, 1)
		require.Equal(t, want, page.Jobs[0].State)
	}
	get(job.StateReady)

	wantState, wantOutcome := job.StateCancelled, job.OutcomeCancelled
	if outcome != "" {
		claimed := claimAll(t, s, "default")
		require.Len(t, claimed, 1)
		require.Equal(t, member, claimed[0].Member)
		require.True(t, claimed[0].Due.Equal(at), "due %s", claimed[0].Due)
		get(job.StateRunning)
		finish(t, s, claimed[0], outcome)
		wantState, wantOutcome = job.StateCompleted, job.OutcomeSucceeded
		if outcome == shard.Failed {
			wantState, wantOutcome = job.StateDead, job.OutcomeDead
		}
		get(wantState)
	}

	// Cancel (DELETE /v1/jobs/{id}): a finished job stays as it is.
	state, changed, err := s.Cancel(ctx, "old")
	require.NoError(t, err)
	require.Equal(t, wantState, state)
	require.Equal(t, outcome == "", changed)
	get(wantState)

	runs, err := s.Runs(ctx, "old")
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, wantOutcome, runs[0].Outcome)
	// A cancel records the ready run it removed.
	require.True(t, runs[0].Due.Equal(at), "due %s", runs[0].Due)

	// Created again: an invalid definition is refused, a valid one finds the job.
	res, err := s.Create(ctx, []*job.Job{{ID: "old", Type: "t", Schedule: job.Schedule{At: at}, Retry: job.RetryPolicy{MaxAttempts: 1}}})
	require.NoError(t, err)
	var fe *job.FieldError
	require.ErrorAs(t, res[0].Err, &fe)
	require.Equal(t, "schedule.at", fe.Field)
	res, err = s.Create(ctx, []*job.Job{{ID: "old", Type: "t", Schedule: job.Schedule{Now: true}}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	require.False(t, res[0].Created)
	require.Equal(t, wantState, res[0].State)

	dead, _, err := s.Dead(ctx, "", 10, "")
	require.NoError(t, err)
	if outcome != shard.Failed {
		require.Empty(t, dead)
		return
	}
	require.Len(t, dead, 1)
	require.Equal(t, member, dead[0].Member)
	require.True(t, dead[0].Due.Equal(at), "due %s", dead[0].Due)
	require.Equal(t, 1, dead[0].Attempts)

	// Requeued, it runs again and dies again.
	require.NoError(t, s.RequeueDead(ctx, member))
	claimed := claimAll(t, s, "default")
	require.Len(t, claimed, 1)
	require.Equal(t, member, claimed[0].Member)
	require.True(t, claimed[0].Due.Equal(at), "due %s", claimed[0].Due)
	finish(t, s, claimed[0], shard.Failed)
	dead, _, err = s.Dead(ctx, "", 10, "")
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, member, dead[0].Member)

	require.NoError(t, s.DeleteDead(ctx, member))
	dead, _, err = s.Dead(ctx, "", 10, "")
	require.NoError(t, err)
	require.Empty(t, dead)
	get(job.StateDead)
}
