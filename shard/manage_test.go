package shard_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// claimAll claims every ready run of queue on every shard.
func claimAll(t *testing.T, s *shard.Store, queue string) []shard.Claimed {
	t.Helper()
	var out []shard.Claimed
	for id := 0; id < s.Shards(); id++ {
		c, err := s.Claim(context.Background(), shard.ID(id), queue, 100, "w", "n")
		require.NoError(t, err)
		out = append(out, c...)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].JobID < out[b].JobID })
	return out
}

func finish(t *testing.T, s *shard.Store, c shard.Claimed, o shard.Outcome) {
	t.Helper()
	errs, err := s.FinishRuns(context.Background(), c.Shard, []shard.Finish{{Member: c.Member, Token: c.Token, Outcome: o, Error: "boom"}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
}

func queueStats(t *testing.T, s *shard.Store) map[string]shard.QueueStats {
	t.Helper()
	qs, err := s.Queues(context.Background())
	require.NoError(t, err)
	out := map[string]shard.QueueStats{}
	for _, q := range qs {
		out[q.Queue] = q
	}
	return out
}

func TestQueues_CountsAndDeadLetters(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		once := job.RetryPolicy{MaxAttempts: 1}
		jobs := []*job.Job{
			{ID: "a1", Queue: "a", Type: "t", Schedule: job.Schedule{Delay: time.Hour}},
			{ID: "a2", Queue: "a", Type: "t", Schedule: job.Schedule{Delay: time.Hour}},
			{ID: "a3", Queue: "a", Type: "t", Schedule: job.Schedule{Now: true}, Retry: once},
			{ID: "a4", Queue: "a", Type: "t", Schedule: job.Schedule{Now: true}, Retry: once},
			{ID: "a5", Queue: "a", Type: "t", Schedule: job.Schedule{Now: true}, Retry: once},
			{ID: "b1", Queue: "b", Type: "t", Schedule: job.Schedule{Now: true}},
		}
		_, err := s.Create(ctx, jobs)
		require.NoError(t, err)
		require.Equal(t, shard.QueueStats{Queue: "a", Scheduled: 2, Ready: 3, Fired: 3}, queueStats(t, s)["a"])

		c := claimAll(t, s, "a")
		require.Len(t, c, 3)
		finish(t, s, c[0], shard.Succeeded)
		finish(t, s, c[1], shard.Failed) // out of attempts: dead
		st := queueStats(t, s)
		require.Equal(t, shard.QueueStats{Queue: "a", Scheduled: 2, InFlight: 1, Dead: 1, Fired: 3}, st["a"])
		require.Equal(t, shard.QueueStats{Queue: "b", Ready: 1, Fired: 1}, st["b"])
		backlog, err := s.Backlog(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 2, backlog, "b's ready run and a's run in flight")

		dead, next, err := s.Dead(ctx, "", 0, "")
		require.NoError(t, err)
		require.Empty(t, next)
		require.Len(t, dead, 1)
		require.Equal(t, "a4", dead[0].JobID)
		require.Equal(t, "a", dead[0].Queue)
		require.Equal(t, "t", dead[0].Type)
		require.Equal(t, 1, dead[0].Attempts)
		require.Equal(t, "boom", dead[0].Error)
		dead, _, err = s.Dead(ctx, "b", 0, "")
		require.NoError(t, err)
		require.Empty(t, dead)

		// Requeue: ready again with fresh attempts.
		require.NoError(t, s.RequeueDead(ctx, c[1].Member))
		require.ErrorIs(t, s.RequeueDead(ctx, c[1].Member), shard.ErrNotFound)
		info, err := s.Get(ctx, "a4")
		require.NoError(t, err)
		require.Equal(t, job.StateReady, info.State)
		require.Equal(t, shard.QueueStats{Queue: "a", Scheduled: 2, Ready: 1, InFlight: 1, Fired: 4}, queueStats(t, s)["a"])
		again := claimAll(t, s, "a")
		require.Len(t, again, 1)
		require.Equal(t, 1, again[0].Attempt, "a requeued run starts its attempts again")
		finish(t, s, again[0], shard.Failed)

		// Delete: gone for good, and the finished job expires.
		require.NoError(t, s.DeleteDead(ctx, again[0].Member))
		require.ErrorIs(t, s.DeleteDead(ctx, again[0].Member), shard.ErrNotFound)
		require.ErrorIs(t, s.RequeueDead(ctx, again[0].Member), shard.ErrNotFound)
		info, err = s.Get(ctx, "a4")
		require.NoError(t, err)
		require.Equal(t, job.StateDead, info.State)
		require.False(t, info.Expires.IsZero())
		require.Equal(t, shard.QueueStats{Queue: "a", Scheduled: 2, InFlight: 1, Fired: 4}, queueStats(t, s)["a"])

		var fe *job.FieldError
		require.ErrorAs(t, s.DeleteDead(ctx, "no-colon"), &fe)
		require.Equal(t, "run", fe.Field)
		_, _, err = s.Dead(ctx, "", 0, "x.y")
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "cursor", fe.Field)
	})
}

func TestDead_Pages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := frozen(t, time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), shard.Config{})
	var jobs []*job.Job
	for i := range 25 {
		jobs = append(jobs, &job.Job{ID: fmt.Sprintf("d%02d", i), Type: "t", Schedule: job.Schedule{Now: true}, Retry: job.RetryPolicy{MaxAttempts: 1}})
	}
	_, err := s.Create(ctx, jobs)
	require.NoError(t, err)
	// All die in the same millisecond: the cursor must step through equal scores.
	for _, c := range claimAll(t, s, "default") {
		finish(t, s, c, shard.Failed)
	}
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 20)
		runs, next, err := s.Dead(ctx, "", 4, cursor)
		require.NoError(t, err)
		require.LessOrEqual(t, len(runs), 4)
		for _, r := range runs {
			require.False(t, seen[r.JobID], "%s listed twice", r.JobID)
			seen[r.JobID] = true
		}
		if next == "" {
			break
		}
		cursor = next
	}
	require.Len(t, seen, 25)
}

func TestList_PagesAndFilters(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		var jobs []*job.Job
		for i := range 230 {
			q, sch := "x", job.Schedule{Delay: time.Hour}
			if i%3 == 0 {
				q, sch = "y", job.Schedule{Now: true}
			}
			jobs = append(jobs, &job.Job{ID: fmt.Sprintf("j%03d", i), Queue: q, Type: "t", Schedule: sch})
		}
		_, err := s.Create(ctx, jobs)
		require.NoError(t, err)

		list := func(f shard.ListFilter) map[string]*shard.Info {
			out := map[string]*shard.Info{}
			for pages := 0; ; pages++ {
				require.Less(t, pages, 100)
				p, err := s.List(ctx, f)
				require.NoError(t, err)
				limit := f.Limit
				if limit == 0 {
					limit = shard.DefaultListLimit
				}
				if b.Mini == nil { // miniredis's SCAN ignores COUNT: one batch holds every key
					require.LessOrEqual(t, len(p.Jobs), 2*limit+16, "about limit")
				}
				for _, j := range p.Jobs {
					require.NotContains(t, out, j.ID, "listed twice")
					out[j.ID] = j
				}
				if p.Next == "" {
					return out
				}
				f.Cursor = p.Next
			}
		}
		all := list(shard.ListFilter{Limit: 50})
		require.Len(t, all, 230)
		require.Len(t, list(shard.ListFilter{Limit: 7}), 230)
		require.Equal(t, "x", all["j001"].Queue)
		require.Equal(t, job.StateScheduled, all["j001"].State)
		ys := list(shard.ListFilter{Queue: "y"})
		require.Len(t, ys, 77)
		for _, j := range ys {
			require.Equal(t, job.StateReady, j.State)
		}
		require.Len(t, list(shard.ListFilter{Queue: "x", State: job.StateReady}), 0)
		require.Len(t, list(shard.ListFilter{State: job.StateScheduled}), 153)

		var fe *job.FieldError
		for field, f := range map[string]shard.ListFilter{
			"cursor": {Cursor: "%%%"}, "limit": {Limit: 5000}, "state": {State: "sleeping"}, "queue": {Queue: "a b"},
		} {
			_, err := s.List(ctx, f)
			require.ErrorAs(t, err, &fe, field)
			require.Equal(t, field, fe.Field)
		}
	})
}

func TestUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	s, m := frozen(t, now, shard.Config{})
	pri := func(p int) *int { return &p }
	orig := func() *job.Job {
		return &job.Job{ID: "u", Queue: "q", Type: "t", Payload: []byte("old"), Schedule: job.Schedule{At: now.Add(time.Hour)}}
	}
	_, err := s.Create(ctx, []*job.Job{orig(),
		{ID: "c", Queue: "q", Type: "t", Schedule: job.Schedule{Cron: "0 * * * *"}}})
	require.NoError(t, err)

	// Payload, priority, retry and schedule of a scheduled one-time job.
	payload := []byte("new payload")
	info, err := s.Update(ctx, "u", shard.Update{
		Schedule: &job.Schedule{At: now.Add(2 * time.Hour)}, Payload: &payload, Priority: pri(9),
		Retry: &job.RetryPolicy{MaxAttempts: 3},
	})
	require.NoError(t, err)
	require.Equal(t, now.Add(2*time.Hour), info.NextRunAt.UTC())
	require.Equal(t, "new payload", string(info.Payload))
	require.Equal(t, 9, *info.Priority)
	require.Equal(t, 3, info.Retry.MaxAttempts)
	require.Equal(t, job.StateScheduled, info.State)
	require.Equal(t, "q", info.Queue)
	require.EqualValues(t, 2, queueStats(t, s)["q"].Scheduled, "the run moved, it was not added")

	// Creating again with the old definition is a conflict now; with the new, not.
	res, err := s.Create(ctx, []*job.Job{orig()})
	require.NoError(t, err)
	require.True(t, res[0].Conflict)
	updated := orig()
	updated.Payload, updated.Priority, updated.Retry = payload, pri(9), job.RetryPolicy{MaxAttempts: 3}
	updated.Schedule = job.Schedule{At: now.Add(2 * time.Hour)}
	res, err = s.Create(ctx, []*job.Job{updated})
	require.NoError(t, err)
	require.False(t, res[0].Conflict)
	require.False(t, res[0].Created)

	// Nothing fires at the old time; the new one does.
	m.SetTime(now.Add(time.Hour + time.Minute))
	due, err := s.Get(ctx, "u")
	require.NoError(t, err)
	require.Equal(t, job.StateScheduled, due.State)

	// Now: the run is ready at once; then the schedule cannot change any more.
	info, err = s.Update(ctx, "u", shard.Update{Schedule: &job.Schedule{Now: true}})
	require.NoError(t, err)
	require.Equal(t, job.StateReady, info.State)
	require.True(t, info.NextRunAt.IsZero())
	c := claimAll(t, s, "q")
	require.Len(t, c, 1)
	require.Equal(t, "new payload", string(c[0].Payload))
	_, err = s.Update(ctx, "u", shard.Update{Schedule: &job.Schedule{Delay: time.Minute}})
	var se *shard.StateError
	require.ErrorAs(t, err, &se)
	// A payload change is still fine (the next attempt sees it).
	p2 := []byte("p2")
	_, err = s.Update(ctx, "u", shard.Update{Payload: &p2})
	require.NoError(t, err)
	require.EqualValues(t, 1, queueStats(t, s)["q"].Scheduled)

	// A recurring job moves to its new expression's next occurrence.
	info, err = s.Update(ctx, "c", shard.Update{Schedule: &job.Schedule{Cron: "30 * * * *", TimeZone: "Europe/London"}})
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 21, 13, 30, 0, 0, time.UTC), info.NextRunAt.UTC())
	require.Equal(t, "Europe/London", info.Schedule.TimeZone)
	require.EqualValues(t, 1, queueStats(t, s)["q"].Scheduled)

	// Bad changes name the field and change nothing.
	var fe *job.FieldError
	_, err = s.Update(ctx, "c", shard.Update{Schedule: &job.Schedule{Delay: time.Minute}})
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "schedule", fe.Field)
	_, err = s.Update(ctx, "c", shard.Update{Priority: pri(12)})
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "priority", fe.Field)
	_, err = s.Update(ctx, "c", shard.Update{Schedule: &job.Schedule{Cron: "not cron"}})
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "schedule.cron", fe.Field)
	_, err = s.Update(ctx, "nope", shard.Update{Priority: pri(1)})
	require.ErrorIs(t, err, shard.ErrNotFound)
	info, err = s.Get(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, 5, *info.Priority)
}

func TestUpdate_PriorityReordersReadyRuns(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		_, err := s.Create(ctx, []*job.Job{
			{ID: "first", Type: "t", Schedule: job.Schedule{Now: true}},
			{ID: "second", Type: "t", Schedule: job.Schedule{Now: true}},
		})
		require.NoError(t, err)
		p := 9
		_, err = s.Update(ctx, "second", shard.Update{Priority: &p})
		require.NoError(t, err)
		c, err := s.Claim(ctx, 0, "default", 1, "w", "n")
		require.NoError(t, err)
		require.Len(t, c, 1)
		require.Equal(t, "second", c[0].JobID)
	})
}

func TestPauseQueue(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		changed, err := s.PauseQueue(ctx, "mail")
		require.NoError(t, err)
		require.True(t, changed)
		changed, err = s.PauseQueue(ctx, "mail")
		require.NoError(t, err)
		require.False(t, changed)
		paused, err := s.PausedQueues(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]bool{"mail": true}, paused)
		require.True(t, queueStats(t, s)["mail"].Paused)
		changed, err = s.ResumeQueue(ctx, "mail")
		require.NoError(t, err)
		require.True(t, changed)
		paused, err = s.PausedQueues(ctx)
		require.NoError(t, err)
		require.Empty(t, paused)
		_, err = s.PauseQueue(ctx, "bad queue")
		var fe *job.FieldError
		require.True(t, errors.As(err, &fe))
	})
}

func TestDead_PagesWhileRequeueing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := frozen(t, time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), shard.Config{Shards: 1})
	var jobs []*job.Job
	for i := range 3 {
		jobs = append(jobs, &job.Job{ID: fmt.Sprintf("d%d", i), Type: "t", Schedule: job.Schedule{Now: true}, Retry: job.RetryPolicy{MaxAttempts: 1}})
	}
	_, err := s.Create(ctx, jobs)
	require.NoError(t, err)
	for _, c := range claimAll(t, s, "default") {
		finish(t, s, c, shard.Failed)
	}
	// The operator's loop: list a page, requeue it, list the next page.
	page, next, err := s.Dead(ctx, "", 2, "")
	require.NoError(t, err)
	require.Len(t, page, 2)
	for _, r := range page {
		require.NoError(t, s.RequeueDead(ctx, r.Member))
	}
	rest, next, err := s.Dead(ctx, "", 2, next)
	require.NoError(t, err)
	require.Len(t, rest, 1, "the third dead run is not skipped")
	require.Equal(t, "d2", rest[0].JobID)
	if next != "" {
		more, _, err := s.Dead(ctx, "", 2, next)
		require.NoError(t, err)
		require.Empty(t, more)
	}
}

func TestCancel_RecurringJobLeavesNoDeadRuns(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		_, err := s.Create(ctx, []*job.Job{{ID: "c", Queue: "q", Type: "t", Schedule: job.Schedule{Cron: "0 0 1 1 *"}, Retry: job.RetryPolicy{MaxAttempts: 1}}})
		require.NoError(t, err)
		_, err = s.Trigger(ctx, "c")
		require.NoError(t, err)
		c := claimAll(t, s, "q")
		require.Len(t, c, 1)
		finish(t, s, c[0], shard.Failed)
		require.EqualValues(t, 1, queueStats(t, s)["q"].Dead)
		_, changed, err := s.Cancel(ctx, "c")
		require.NoError(t, err)
		require.True(t, changed)
		dead, _, err := s.Dead(ctx, "", 0, "")
		require.NoError(t, err)
		require.Empty(t, dead, "a cancelled job's dead runs leave the dead-letter set with it")
		require.Equal(t, shard.QueueStats{Queue: "q", Fired: 1}, queueStats(t, s)["q"])
	})
}

// A recurring job whose latest handled occurrence ('lf') is ahead of the server's clock
// (a clock stepped back, say by a failover to a replica) can still be updated and
// resumed: the candidates reach past it, and the next run is filed after it.
func TestUpdateResume_LatestHandledAheadOfTheClock(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		sched := job.Schedule{Cron: "* * * * * *"}
		_, err := s.Create(ctx, []*job.Job{{ID: "c", Type: "t", Schedule: sched}})
		require.NoError(t, err)
		now, err := s.ServerNow(ctx)
		require.NoError(t, err)
		lf := now.Add(10 * time.Second).Truncate(time.Second)
		c := s.Client()
		require.NoError(t, c.Do(ctx, c.B().Hset().Key(s.Keys().Job(0, "c")).FieldValue().FieldValue("lf", strconv.FormatInt(lf.UnixMilli(), 10)).Build()).Error())

		info, err := s.Update(ctx, "c", shard.Update{Schedule: &sched})
		require.NoError(t, err)
		require.True(t, info.NextRunAt.After(lf), "next %s after %s", info.NextRunAt, lf)
		_, _, err = s.Pause(ctx, "c")
		require.NoError(t, err)
		_, _, err = s.Resume(ctx, "c")
		require.NoError(t, err)
		info, err = s.Get(ctx, "c")
		require.NoError(t, err)
		require.True(t, info.NextRunAt.After(lf), "next %s after %s", info.NextRunAt, lf)
	})
}

// A filtered page reads a bounded number of jobs (listReadBudget): over 12,000 cold jobs
// that the filter does not match, the first page comes back empty with a cursor instead of
// reading them all, and the cursors then cover every job once.
func TestList_FilteredPageReadsABoundedNumberOfJobs(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1, ColdAfter: time.Minute})
		now, err := s.ServerNow(ctx)
		require.NoError(t, err)
		n := 12000
		if b.Name == redistest.Miniredis {
			// miniredis's SCAN ignores COUNT (below): its first page reads every job
			// whatever their number, so the bound is shown on the real servers only and
			// miniredis checks the cursors' walk over fewer jobs (12,000 took its Lua
			// interpreter past the client's read timeout under -race).
			n = 2000
		}
		for i := 0; i < n; i += 1000 {
			var jobs []*job.Job
			for k := i; k < i+1000; k++ {
				// Spread over 200 buckets: reading a cold job scans its bucket's list.
				at := now.Add(time.Hour + time.Duration(k)*time.Second)
				jobs = append(jobs, &job.Job{ID: "c" + strconv.Itoa(k), Type: "t", Schedule: job.Schedule{At: at}})
			}
			_, err := s.Create(ctx, jobs)
			require.NoError(t, err)
		}
		page, err := s.List(ctx, shard.ListFilter{State: job.StateRunning})
		require.NoError(t, err)
		require.Empty(t, page.Jobs)
		if b.Name != redistest.Miniredis {
			// miniredis's SCAN ignores COUNT: its first call returns every key.
			require.NotEmpty(t, page.Next, "the first page stops before reading every job")
		}
		seen := map[string]bool{}
		for f := (shard.ListFilter{State: job.StateScheduled, Limit: 1000}); ; {
			page, err := s.List(ctx, f)
			require.NoError(t, err)
			for _, info := range page.Jobs {
				seen[info.ID] = true
			}
			if page.Next == "" {
				break
			}
			f.Cursor = page.Next
		}
		require.Len(t, seen, n)
	})
}

// Cancelling a one-time job whose run is ready records the cancel against that run's due
// time, as a scheduled one's is; it said 0001-01-01 (the job's next occurrence, none once
// its run fired).
func TestCancel_ReadyRunKeepsItsDueInTheHistory(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		later := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		_, err := s.Create(ctx, []*job.Job{{ID: "ready", Type: "t", Schedule: job.Schedule{Now: true}},
			{ID: "later", Type: "t", Schedule: job.Schedule{At: later}}})
		require.NoError(t, err)
		created := time.Now()
		for id, want := range map[string]time.Time{"ready": created, "later": later} {
			_, changed, err := s.Cancel(ctx, id)
			require.NoError(t, err)
			require.True(t, changed)
			runs, err := s.Runs(ctx, id)
			require.NoError(t, err)
			require.Len(t, runs, 1, id)
			require.Equal(t, job.OutcomeCancelled, runs[0].Outcome, id)
			require.WithinDuration(t, want, runs[0].Due, 5*time.Second, id)
		}
	})
}
