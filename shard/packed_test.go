package shard_test

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/shard/shardtest"
)

// packedJobs are one-time jobs due when they are created, with payloads of every stored
// form (none, chunked, whole) holding the packed value's own separators, and non-default
// settings.
func packedJobs(now time.Time) []*job.Job {
	binary := []byte("a|b=c:d\x00\xff" + strings.Repeat("|=:", 30))
	pri := 7
	return []*job.Job{
		{ID: "bin", Type: "t", Payload: binary, Schedule: job.Schedule{Now: true}},
		{ID: "none", Type: "t", Schedule: job.Schedule{Now: true}},
		{ID: "chunks", Type: "t", Payload: bytes.Repeat([]byte("0123456789"), 30), Schedule: job.Schedule{Now: true}},
		{ID: "whole", Type: "t", Payload: bytes.Repeat([]byte("x"), 700), Schedule: job.Schedule{At: now.Add(-time.Minute).Truncate(time.Millisecond)}},
		{ID: "mail", Queue: "q", Type: "mail", Payload: []byte(`{"to":"a"}`), Priority: &pri,
			Retry: job.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second}, Timeout: 5 * time.Second,
			Visibility: 45 * time.Second, Schedule: job.Schedule{Now: true}},
	}
}

// packedKeys counts the keys of packed storage of a one-shard store.
func packedKeys(t *testing.T, b redistest.Backend, s *shard.Store) int {
	return shardKeys(t, b, s, func(rest string) bool {
		return strings.HasPrefix(rest, "packed:")
	})
}

// newTwins returns the twins of a store that packs jobs (Got) and one that keeps job
// hashes (Ref), of one shard each.
func newTwins(t *testing.T, b redistest.Backend, cfg shard.Config) *shardtest.Twins {
	cfg.Shards = 1
	h := cfg
	h.NoPack = true
	return &shardtest.Twins{T: t, Got: open(t, b, cfg), Ref: open(t, b, h)}
}

// A job due when it is created is packed, with no job hash, and reads, lists and exports
// as the same job kept as a hash does, before its run, while it runs and after it
// succeeded; its claim carries the same definition and token.
func TestPacked_ReadsAsHashes(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		w := newTwins(t, b, shard.Config{Retention: time.Hour})
		now, err := w.Got.ServerNow(ctx)
		require.NoError(t, err)
		jobs := packedJobs(now)
		w.Both(func(s *shard.Store) {
			res, err := s.Create(ctx, jobs)
			require.NoError(t, err)
			for _, r := range res {
				require.NoError(t, r.Err)
				require.True(t, r.Created, r.ID)
				require.Equal(t, job.StateReady, r.State, r.ID)
			}
		})
		var ids []string
		for _, j := range jobs {
			require.False(t, jobExists(t, b, w.Got, j.ID), "%s is packed", j.ID)
			require.True(t, jobExists(t, b, w.Ref, j.ID), j.ID)
			ids = append(ids, j.ID)
		}
		sort.Strings(ids)
		require.Positive(t, packedKeys(t, b, w.Got))
		w.Same(ids...)
		_, err = w.Got.Get(ctx, "nope")
		require.ErrorIs(t, err, shard.ErrNotFound)

		// List, in pages of one, and the snapshot scan see every job once.
		var listed []string
		for f := (shard.ListFilter{Limit: 1}); ; {
			page, err := w.Got.List(ctx, f)
			require.NoError(t, err)
			for _, info := range page.Jobs {
				require.Equal(t, job.StateReady, info.State)
				listed = append(listed, info.ID)
			}
			if page.Next == "" {
				break
			}
			f.Cursor = page.Next
		}
		sort.Strings(listed)
		require.Equal(t, ids, listed)
		var scanned []string
		require.NoError(t, w.Got.ScanAllJobs(ctx, func(_ shard.ID, jobIDs []string) error {
			scanned = append(scanned, jobIDs...)
			return nil
		}))
		sort.Strings(scanned)
		require.Equal(t, ids, scanned)

		// Creating again with the same definition finds the job (and unpacks it); with
		// another, conflicts.
		res, err := w.Got.Create(ctx, packedJobs(now)[:1])
		require.NoError(t, err)
		require.False(t, res[0].Created)
		require.False(t, res[0].Conflict)
		require.Equal(t, job.StateReady, res[0].State)
		other := packedJobs(now)[1]
		other.Payload = []byte("changed")
		res, err = w.Got.Create(ctx, []*job.Job{other})
		require.NoError(t, err)
		require.True(t, res[0].Conflict)
		w.Same(ids...)

		// Claimed: the same definitions and tokens; running alike.
		pc, hc := w.ClaimAll()
		require.Len(t, pc, len(jobs))
		for _, j := range jobs {
			p, h := pc[j.ID], hc[j.ID]
			require.Equal(t, string(j.Payload), string(p.Payload), j.ID)
			require.NotNil(t, p.Payload, j.ID)
			require.WithinDuration(t, h.Due, p.Due, time.Second, j.ID)
			require.WithinDuration(t, h.ClaimedAt, p.ClaimedAt, time.Second, j.ID)
			require.WithinDuration(t, h.StartAt, p.StartAt, time.Second, j.ID)
			p.Member, p.Due, p.ClaimedAt, p.StartAt = h.Member, h.Due, h.ClaimedAt, h.StartAt
			require.Equal(t, h, p, j.ID)
		}
		w.Same(ids...)

		// Succeeded: completed alike, with the same expiry and history.
		w.Both(func(s *shard.Store) {
			c := w.Of(s, pc, hc)
			var fin []shard.Finish
			for _, r := range c {
				fin = append(fin, shard.Finish{Member: r.Member, Token: r.Token, Outcome: shard.Succeeded})
			}
			errs, err := s.FinishRuns(ctx, 0, fin)
			require.NoError(t, err)
			for _, e := range errs {
				require.NoError(t, e)
			}
			// A second ack of the same run is refused.
			errs, err = s.FinishRuns(ctx, 0, fin[:1])
			require.NoError(t, err)
			require.ErrorIs(t, errs[0], shard.ErrTokenMismatch)
		})
		w.Same(ids...)
		for _, j := range jobs {
			// Those created again were unpacked then.
			unpacked := j.ID == "bin" || j.ID == "none"
			require.Equal(t, unpacked, jobExists(t, b, w.Got, j.ID), j.ID)
		}
		info, err := w.Got.Get(ctx, "bin")
		require.NoError(t, err)
		require.Equal(t, job.StateCompleted, info.State)
		require.WithinDuration(t, now.Add(time.Hour), info.Expires, 5*time.Second)
	})
}

// A packed job due later is fired by the dispatcher (ahead of its due time, with a lead)
// as a job hash's is, and reads the same while scheduled, ready, running and done.
func TestPacked_ScheduledFiresAsHashes(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		w := newTwins(t, b, shard.Config{Retention: time.Hour})
		now, err := w.Got.ServerNow(ctx)
		require.NoError(t, err)
		at := now.Add(30 * time.Second).Truncate(time.Millisecond)
		pri := 3
		jobs := []*job.Job{
			{ID: "s1", Type: "t", Payload: []byte("one"), Schedule: job.Schedule{At: at}},
			{ID: "s2", Queue: "q", Type: "t", Priority: &pri, Visibility: 45 * time.Second, Schedule: job.Schedule{At: at.Add(time.Second)}},
			{ID: "s3", Type: "t", Payload: bytes.Repeat([]byte("z"), 200), Schedule: job.Schedule{At: at.Add(2 * time.Second)}},
			{ID: "paused", Type: "t", Schedule: job.Schedule{At: at}},
		}
		ids := []string{"paused", "s1", "s2", "s3"}
		leases := map[*shard.Store]shard.Lease{}
		w.Both(func(s *shard.Store) {
			res, err := s.Create(ctx, jobs)
			require.NoError(t, err)
			for _, r := range res {
				require.True(t, r.Created, r.ID)
				require.Equal(t, job.StateScheduled, r.State, r.ID)
			}
			_, _, err = s.Pause(ctx, "paused")
			require.NoError(t, err)
			l := s.AcquireLeases(ctx, "d", []shard.ID{0}, time.Hour)[0]
			require.True(t, l.Held)
			leases[s] = l.Lease
		})
		require.False(t, jobExists(t, b, w.Got, "s1"), "packed")
		require.True(t, jobExists(t, b, w.Got, "paused"), "unpacked by the pause")
		w.Same(ids...)

		// Fired a minute ahead: all but the paused one, alike.
		w.Both(func(s *shard.Store) {
			d, err := s.FireDue(ctx, leases[s], 100, time.Minute)
			require.NoError(t, err)
			require.Equal(t, 3, d.Fired)
		})
		require.False(t, jobExists(t, b, w.Got, "s1"), "still packed")
		w.Same(ids...)

		pc, hc := w.ClaimAll()
		require.Len(t, pc, 3)
		for _, id := range ids[1:] {
			p, h := pc[id], hc[id]
			require.Equal(t, h.Due, p.Due, id)
			require.Equal(t, p.Due, p.StartAt, "%s starts at its due time", id)
			require.WithinDuration(t, h.ClaimedAt, p.ClaimedAt, time.Second, id)
			p.ClaimedAt = h.ClaimedAt
			require.Equal(t, h, p, id)
		}
		w.Same(ids...)

		w.Both(func(s *shard.Store) {
			c := w.Of(s, pc, hc)
			var fin []shard.Finish
			for _, id := range ids[1:] {
				fin = append(fin, shard.Finish{Member: c[id].Member, Token: c[id].Token, Outcome: shard.Succeeded})
			}
			errs, err := s.FinishRuns(ctx, 0, fin)
			require.NoError(t, err)
			require.Equal(t, []error{nil, nil, nil}, errs)
		})
		w.Same(ids...)
	})
}

// Every end of a packed job's run other than a success, a cancel, a heartbeat and a late
// ack unpack the job first and then behave as they do on a job hash.
func TestPacked_OtherEndsUnpack(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		w := newTwins(t, b, shard.Config{Retention: time.Hour})
		ids := []string{"back", "cancel-ready", "cancel-running", "extend", "fail", "snooze", "stale"}
		w.Both(func(s *shard.Store) {
			var jobs []*job.Job
			for _, id := range ids {
				jobs = append(jobs, &job.Job{ID: id, Type: "t", Payload: []byte("p-" + id), Schedule: job.Schedule{Now: true}})
			}
			_, err := s.Create(ctx, jobs)
			require.NoError(t, err)
			st, changed, err := s.Cancel(ctx, "cancel-ready")
			require.NoError(t, err)
			require.True(t, changed)
			require.Equal(t, job.StateCancelled, st)
		})
		require.True(t, jobExists(t, b, w.Got, "cancel-ready"), "unpacked by the cancel")
		w.Same(ids...)

		pc, hc := w.ClaimAll()
		require.Len(t, pc, len(ids)-1, "the cancelled job's run left the ready set")
		w.Both(func(s *shard.Store) {
			c := w.Of(s, pc, hc)
			_, _, err := s.Cancel(ctx, "cancel-running")
			require.NoError(t, err)
			res, err := s.Extend(ctx, 0, []shard.Held{{Member: c["extend"].Member, Token: c["extend"].Token}})
			require.NoError(t, err)
			require.Equal(t, []int{shard.ExtendOK}, res)
			errs, err := s.FinishRuns(ctx, 0, []shard.Finish{
				{Member: c["back"].Member, Token: c["back"].Token, Outcome: shard.HandBack},
				{Member: c["cancel-running"].Member, Token: c["cancel-running"].Token, Outcome: shard.Succeeded},
				{Member: c["extend"].Member, Token: c["extend"].Token, Outcome: shard.Succeeded},
				{Member: c["fail"].Member, Token: c["fail"].Token, Outcome: shard.Failed, Error: "boom"},
				{Member: c["snooze"].Member, Token: c["snooze"].Token, Outcome: shard.Snoozed, Delay: time.Minute},
				{Member: c["stale"].Member, Token: "9-other", Outcome: shard.Succeeded},
			})
			require.NoError(t, err)
			require.Equal(t, []error{nil, nil, nil, nil, nil, shard.ErrTokenMismatch}, errs)
		})
		for _, id := range []string{"back", "cancel-running", "extend", "fail", "snooze"} {
			require.True(t, jobExists(t, b, w.Got, id), "%s unpacked", id)
		}
		require.False(t, jobExists(t, b, w.Got, "stale"), "a late ack leaves the job packed")
		w.Same(ids...)

		// The handed-back run is claimed again, its attempt not used.
		pc, hc = w.ClaimAll()
		require.Len(t, pc, 1)
		require.Equal(t, hc["back"].Attempt, pc["back"].Attempt)
		require.Equal(t, 1, pc["back"].Attempt)
		w.Same(ids...)
	})
}

// A packed job's run whose worker is lost is reaped as a job hash's is: unpacked, retried.
func TestPacked_ReapedRunRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	var stores []*shard.Store
	var runs []shard.Claimed
	for _, noPack := range []bool{false, true} {
		s, m := frozen(t, now, shard.Config{Shards: 1, NoPack: noPack})
		_, err := s.Create(ctx, []*job.Job{{ID: "lost", Type: "t", Schedule: job.Schedule{Now: true}}})
		require.NoError(t, err)
		c, err := s.Claim(ctx, 0, "default", 1, "w", "n")
		require.NoError(t, err)
		require.Len(t, c, 1)
		lease := s.AcquireLeases(ctx, "d", []shard.ID{0}, 24*time.Hour)[0]
		require.True(t, lease.Held)
		m.SetTime(now.Add(job.DefaultVisibility - time.Millisecond))
		n, err := s.Reap(ctx, lease.Lease, 100)
		require.NoError(t, err)
		require.Zero(t, n, "not before its deadline")
		m.SetTime(now.Add(job.DefaultVisibility))
		n, err = s.Reap(ctx, lease.Lease, 100)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		stores, runs = append(stores, s), append(runs, c[0])
	}
	for i, s := range stores {
		info, err := s.Get(ctx, "lost")
		require.NoError(t, err)
		require.Equal(t, job.StateRetrying, info.State, "NoPack=%v", i == 1)
		r, err := s.Runs(ctx, "lost")
		require.NoError(t, err)
		require.Len(t, r, 1)
		require.Equal(t, job.OutcomeLost, r[0].Outcome)
		require.Equal(t, "w", r[0].Worker)
		// The lost worker's late ack is refused.
		errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: runs[i].Member, Token: runs[i].Token, Outcome: shard.Succeeded}})
		require.NoError(t, err)
		require.ErrorIs(t, errs[0], shard.ErrTokenMismatch)
	}
}

// On the Redis clock, a succeeded packed job reads as gone once its retention has passed,
// and the dispatcher deletes it at the end of its expiry bucket, then leaves nothing
// behind.
func TestPacked_ExpireAfterRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	s, m := frozen(t, now, shard.Config{Shards: 1, Retention: time.Hour})
	var jobs []*job.Job
	for _, id := range []string{"a", "b", "c"} {
		jobs = append(jobs, &job.Job{ID: id, Type: "t", Schedule: job.Schedule{Now: true}})
	}
	_, err := s.Create(ctx, jobs)
	require.NoError(t, err)
	c, err := s.Claim(ctx, 0, "default", 10, "w", "n")
	require.NoError(t, err)
	require.Len(t, c, 3)
	var fin []shard.Finish
	for _, r := range c {
		fin = append(fin, shard.Finish{Member: r.Member, Token: r.Token, Outcome: shard.Succeeded})
	}
	_, err = s.FinishRuns(ctx, 0, fin)
	require.NoError(t, err)
	lease := s.AcquireLeases(ctx, "d", []shard.ID{0}, 24*time.Hour)[0]
	require.True(t, lease.Held)
	d, err := s.FireDue(ctx, lease.Lease, 100, 0)
	require.NoError(t, err)
	// The expiry bucket of now + 1h ends at the next minute after it.
	end := now.Add(time.Hour).Truncate(time.Minute).Add(time.Minute)
	require.Equal(t, end.UnixMilli(), d.NextDue, "come back when the expiry bucket ends")
	require.True(t, m.Exists(s.Keys().PackedExpiry(0)))
	require.True(t, m.Exists(s.Keys().PackedExpiryList(0, end.UnixMilli()/time.Minute.Milliseconds())))

	m.SetTime(now.Add(time.Hour - time.Millisecond))
	info, err := s.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, job.StateCompleted, info.State)
	require.Equal(t, now.Add(time.Hour), info.Expires.UTC())

	m.SetTime(now.Add(time.Hour))
	_, err = s.Get(ctx, "a")
	require.ErrorIs(t, err, shard.ErrNotFound, "gone once expired, before the dispatcher deletes it")
	_, err = s.Runs(ctx, "a")
	require.ErrorIs(t, err, shard.ErrNotFound)
	page, err := s.List(ctx, shard.ListFilter{})
	require.NoError(t, err)
	require.Empty(t, page.Jobs)
	// A create of an expired id makes a new job.
	res, err := s.Create(ctx, jobs[2:])
	require.NoError(t, err)
	require.True(t, res[0].Created)

	m.SetTime(end)
	d, err = s.FireDue(ctx, lease.Lease, 100, 0)
	require.NoError(t, err)
	require.Equal(t, end.UnixMilli(), d.NextDue, "called again at once after deleting")
	d, err = s.FireDue(ctx, lease.Lease, 100, 0)
	require.NoError(t, err)
	require.Equal(t, int64(-1), d.NextDue)
	// The inflight set stays, holding only its pin.
	require.ElementsMatch(t, []string{s.Keys().Meta(), s.Keys().Stats(0), s.Keys().Lease(0), s.Keys().Epoch(0),
		s.Keys().Ready(0, "default"), s.Keys().PackedJobs(0), s.Keys().PackedRuns(0), s.Keys().Inflight(0)}, m.Keys(), "only the new job c is left")
	pinned, err := m.ZMembers(s.Keys().Inflight(0))
	require.NoError(t, err)
	require.Len(t, pinned, 1)
	require.NotContains(t, pinned[0], ":", "the pin is no run")
	info, err = s.Get(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, job.StateReady, info.State)
}

// A worker that packs no jobs (NoPack) still claims and acks the packed jobs of others.
func TestPacked_ReadByAStoreThatDoesNotPack(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		other := reopen(t, b, shard.Config{Namespace: s.Config().Namespace, Shards: 1, NoPack: true})
		_, err := s.Create(ctx, []*job.Job{{ID: "p", Type: "t", Payload: []byte("x"), Schedule: job.Schedule{Now: true}}})
		require.NoError(t, err)
		c, err := other.Claim(ctx, 0, "default", 1, "w", "n")
		require.NoError(t, err)
		require.Len(t, c, 1)
		require.Equal(t, "x", string(c[0].Payload))
		errs, err := other.FinishRuns(ctx, 0, []shard.Finish{{Member: c[0].Member, Token: c[0].Token, Outcome: shard.Succeeded}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		info, err := other.Get(ctx, "p")
		require.NoError(t, err)
		require.Equal(t, job.StateCompleted, info.State)
	})
}

// Packed runs fired together, of two queues and every priority, are claimed in the order
// job hashes are: by priority, then due time. fire_due reads a packed run's queue and
// priority by position when its queue is the one of the run before.
func TestPacked_FiredInPriorityOrder(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		w := newTwins(t, b, shard.Config{})
		now, err := w.Got.ServerNow(ctx)
		require.NoError(t, err)
		at := now.Add(30 * time.Second).Truncate(time.Millisecond)
		var jobs []*job.Job
		var ids []string
		for i := range 48 {
			j := &job.Job{ID: "j" + strconv.Itoa(i), Type: "t", Schedule: job.Schedule{At: at.Add(time.Duration(i%7) * time.Millisecond)}}
			if p := i % 11; p < 10 {
				j.Priority = &p // 10: the default
			}
			if i%5 == 0 || i%5 == 1 {
				j.Queue = "q"
			}
			jobs = append(jobs, j)
			ids = append(ids, j.ID)
		}
		w.Both(func(s *shard.Store) {
			_, err := s.Create(ctx, jobs)
			require.NoError(t, err)
			l := s.AcquireLeases(ctx, "d", []shard.ID{0}, time.Hour)[0]
			require.True(t, l.Held)
			d, err := s.FireDue(ctx, l.Lease, 100, time.Minute)
			require.NoError(t, err)
			require.Equal(t, len(jobs), d.Fired)
		})
		w.Same(ids...)
		byID := map[string]*job.Job{}
		for _, j := range jobs {
			byID[j.ID] = j
		}
		for q, n := range map[string]int{"default": 28, "q": 20} {
			var orders [2][]string
			for k, s := range []*shard.Store{w.Got, w.Ref} {
				c, err := s.Claim(ctx, 0, q, 100, "w", "n")
				require.NoError(t, err)
				for _, r := range c {
					orders[k] = append(orders[k], r.JobID)
				}
			}
			require.Len(t, orders[0], n, q)
			require.Equal(t, orders[1], orders[0], q)
			require.True(t, sort.SliceIsSorted(orders[0], func(a, b int) bool {
				ja, jb := byID[orders[0][a]], byID[orders[0][b]]
				if pa, pb := ja.PriorityOrDefault(), jb.PriorityOrDefault(); pa != pb {
					return pa > pb
				}
				return ja.Schedule.At.Before(jb.Schedule.At)
			}), "%s: %v", q, orders[0])
		}
	})
}

// A packed job's ready run has no run state: it reads as ready from its member in the
// ready set, and cancels as a ready job does.
func TestPacked_ReadyRunWithoutState(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		_, err := s.Create(ctx, []*job.Job{
			{ID: "plain", Queue: "q", Type: "t", Schedule: job.Schedule{Now: true}},
			{ID: "other", Queue: "q", Type: "t", Schedule: job.Schedule{Now: true}},
			{ID: "gone", Type: "t", Schedule: job.Schedule{Now: true}},
		})
		require.NoError(t, err)
		require.False(t, jobExists(t, b, s, "plain"), "packed")
		c := b.Client(t)
		runs, err := c.Do(ctx, c.B().Hgetall().Key(s.Keys().PackedRuns(0)).Build()).AsStrMap()
		require.NoError(t, err)
		require.Equal(t, []string{""}, slices.Collect(maps.Keys(runs)), "no run state but the table marker")

		for _, id := range []string{"plain", "other", "gone"} {
			info, err := s.Get(ctx, id)
			require.NoError(t, err, id)
			require.Equal(t, job.StateReady, info.State, id)
		}
		state, changed, err := s.Cancel(ctx, "gone")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, job.StateCancelled, state)
		info, err := s.Get(ctx, "gone")
		require.NoError(t, err)
		require.Equal(t, job.StateCancelled, info.State)

		claimed, err := s.Claim(ctx, 0, "q", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, claimed, 2)
		var fin []shard.Finish
		for _, r := range claimed {
			info, err := s.Get(ctx, r.JobID)
			require.NoError(t, err)
			require.Equal(t, job.StateRunning, info.State, r.JobID)
			fin = append(fin, shard.Finish{Member: r.Member, Token: r.Token, Outcome: shard.Succeeded})
		}
		errs, err := s.FinishRuns(ctx, 0, fin)
		require.NoError(t, err)
		require.Equal(t, []error{nil, nil}, errs)
		for _, id := range []string{"plain", "other"} {
			info, err := s.Get(ctx, id)
			require.NoError(t, err, id)
			require.Equal(t, job.StateCompleted, info.State, id)
		}
		shardtest.CheckCounts(t, s)
	})
}

// One claim returns runs of packed jobs and of job hashes together, each read whole, in
// the ready set's order.
func TestClaim_PackedAndHashedRunsTogether(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		other := reopen(t, b, shard.Config{Namespace: s.Config().Namespace, Shards: 1, NoPack: true})
		mk := func(id string, pri int, vt time.Duration) *job.Job {
			return &job.Job{ID: id, Type: "t-" + id, Payload: []byte("p|" + id), Priority: &pri, Visibility: vt, Schedule: job.Schedule{Now: true}}
		}
		// Alternating kinds, in descending priority: the claim's order.
		_, err := s.Create(ctx, []*job.Job{mk("a", 9, 0), mk("c", 7, 2*time.Minute)})
		require.NoError(t, err)
		_, err = other.Create(ctx, []*job.Job{mk("b", 8, 0), mk("d", 6, time.Minute)})
		require.NoError(t, err)
		c, err := s.Claim(ctx, 0, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, c, 4)
		vts := map[string]time.Duration{"a": job.DefaultVisibility, "b": job.DefaultVisibility, "c": 2 * time.Minute, "d": time.Minute}
		for i, id := range []string{"a", "b", "c", "d"} {
			require.Equal(t, id, c[i].JobID)
			require.Equal(t, "t-"+id, c[i].Type)
			require.Equal(t, "p|"+id, string(c[i].Payload))
			require.Equal(t, vts[id], c[i].Visibility, id)
			require.Equal(t, 1, c[i].Attempt)
		}
		var fin []shard.Finish
		for _, r := range c {
			fin = append(fin, shard.Finish{Member: r.Member, Token: r.Token, Outcome: shard.Succeeded})
		}
		errs, err := s.FinishRuns(ctx, 0, fin)
		require.NoError(t, err)
		require.Equal(t, []error{nil, nil, nil, nil}, errs)
		shardtest.CheckCounts(t, s)
	})
}

// A claim takes at most MaxClaim runs, however many it asks for: more would pass a Redis
// command more arguments than a script can.
func TestClaim_AtMostMaxClaim(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		var jobs []*job.Job
		for i := range shard.MaxClaim + 500 {
			jobs = append(jobs, &job.Job{ID: "m" + strconv.Itoa(i), Type: "t", Schedule: job.Schedule{Now: true}})
		}
		for k := 0; k < len(jobs); k += 500 {
			_, err := s.Create(ctx, jobs[k:k+500])
			require.NoError(t, err)
		}
		c, err := s.Claim(ctx, 0, "default", 10*shard.MaxClaim, "w", "n")
		require.NoError(t, err)
		require.Len(t, c, shard.MaxClaim)
		c, err = s.Claim(ctx, 0, "default", 10*shard.MaxClaim, "w", "n")
		require.NoError(t, err)
		require.Len(t, c, 500)
	})
}

// One ack call mixes short entries (a success with the call's first success token) and
// long ones (any other outcome or token), over packed jobs and job hashes; each entry
// gets its own result, in order.
func TestFinishRuns_ShortAndLongEntriesInOneCall(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		other := reopen(t, b, shard.Config{Namespace: s.Config().Namespace, Shards: 1, NoPack: true})
		now := job.Schedule{Now: true}
		retry := job.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Hour}
		_, err := s.Create(ctx, []*job.Job{
			{ID: "a", Type: "t", Schedule: now}, {ID: "b", Type: "t", Schedule: now},
			{ID: "c", Type: "t", Schedule: now, Retry: retry},
		})
		require.NoError(t, err)
		_, err = other.Create(ctx, []*job.Job{{ID: "h", Type: "t", Schedule: now}, {ID: "x", Type: "t", Schedule: now}})
		require.NoError(t, err)
		first, err := s.Claim(ctx, 0, "default", 4, "w1", "n1")
		require.NoError(t, err)
		require.Len(t, first, 4)
		second, err := s.Claim(ctx, 0, "default", 4, "w2", "n2")
		require.NoError(t, err)
		require.Len(t, second, 1)
		byID := map[string]shard.Claimed{}
		for _, r := range append(first, second...) {
			byID[r.JobID] = r
		}
		tok := byID["a"].Token
		require.NotEqual(t, tok, byID[second[0].JobID].Token)
		fs := []shard.Finish{
			{Member: byID["a"].Member, Token: tok, Outcome: shard.Succeeded},          // short, packed
			{Member: byID["b"].Member, Token: "9-bogus", Outcome: shard.Succeeded},    // long: another token, refused
			{Member: byID["c"].Member, Token: tok, Outcome: shard.Failed, Error: "e"}, // long: retried in an hour
			{Member: byID["h"].Member, Token: tok, Outcome: shard.Succeeded},          // short, job hash
			{Member: byID["a"].Member, Token: tok, Outcome: shard.Succeeded},          // short, finished already
			{Member: byID["x"].Member, Token: byID["x"].Token, Outcome: shard.Succeeded},
		}
		if byID["x"].Token == tok {
			fs[5].Token = "9-other" // x came with the first claim: make it a refused long entry
		}
		errs, err := s.FinishRuns(ctx, 0, fs)
		require.NoError(t, err)
		require.Len(t, errs, len(fs))
		require.NoError(t, errs[0])
		require.ErrorIs(t, errs[1], shard.ErrTokenMismatch)
		require.NoError(t, errs[2])
		require.NoError(t, errs[3])
		require.ErrorIs(t, errs[4], shard.ErrTokenMismatch)
		if byID["x"].Token == tok {
			require.ErrorIs(t, errs[5], shard.ErrTokenMismatch)
		} else {
			require.NoError(t, errs[5])
		}
		states := map[string]job.State{"a": job.StateCompleted, "c": job.StateRetrying, "h": job.StateCompleted}
		for id, want := range states {
			info, err := s.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, want, info.State, id)
		}
		// The refused entry changed nothing: b is still held with its token.
		errs, err = s.FinishRuns(ctx, 0, []shard.Finish{{Member: byID["b"].Member, Token: tok, Outcome: shard.Succeeded}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		info, err := s.Get(ctx, "b")
		require.NoError(t, err)
		require.Equal(t, job.StateCompleted, info.State)
	})
}

// A claim takes at most ClaimRequest.Now runs that start at once; the rest of what it
// asks for are runs fired ahead of their start time, which a worker holds without a
// handler slot. It stops at the first run, in the ready set's order, that does not fit,
// and says whether more may be left. Packed jobs and job hashes alike.
func TestClaim_NowBoundsTheRunsThatStartAtOnce(t *testing.T) {
	for _, noPack := range []bool{false, true} {
		t.Run(map[bool]string{false: "Packed", true: "JobHashes"}[noPack], func(t *testing.T) {
			redistest.Run(t, func(t *testing.T, b redistest.Backend) {
				ctx := context.Background()
				s := open(t, b, shard.Config{Shards: 1, NoPack: noPack})
				now, err := s.ServerNow(ctx)
				require.NoError(t, err)
				var jobs []*job.Job
				for i := range 3 {
					jobs = append(jobs, &job.Job{ID: "now" + strconv.Itoa(i), Type: "t", Schedule: job.Schedule{At: now.Add(-time.Minute)}})
				}
				for i := range 3 {
					jobs = append(jobs, &job.Job{ID: "ahead" + strconv.Itoa(i), Type: "t", Schedule: job.Schedule{At: now.Add(time.Minute + time.Duration(i)*time.Second)}})
				}
				_, err = s.Create(ctx, jobs)
				require.NoError(t, err)
				lease := s.AcquireLeases(ctx, "d", []shard.ID{0}, time.Minute)[0]
				require.True(t, lease.Held)
				// The past ones were ready at once; the others fire five minutes ahead.
				fd, err := s.FireDue(ctx, lease.Lease, 100, 5*time.Minute)
				require.NoError(t, err)
				require.Equal(t, 3, fd.Fired)

				claim := func(n, nowMax int) shard.ClaimResult {
					r := s.ClaimMany(ctx, []shard.ClaimRequest{{Shard: 0, Queue: "default", N: n, Now: nowMax}}, "w", "n")[0]
					require.NoError(t, r.Err)
					return r
				}
				// Two that start now, then the third due run does not fit: the claim stops.
				r := claim(5, 2)
				require.Len(t, r.Runs, 2)
				require.True(t, r.More)
				for _, c := range r.Runs {
					require.Contains(t, c.JobID, "now")
				}
				// None that start now: the due run heads the set, so nothing is taken.
				r = claim(5, -1)
				require.Empty(t, r.Runs)
				require.True(t, r.More)
				// One that starts now, then the three held ahead.
				r = claim(10, 1)
				require.Len(t, r.Runs, 4)
				require.False(t, r.More, "the set is empty")
				for _, c := range r.Runs[1:] {
					require.Contains(t, c.JobID, "ahead")
					require.True(t, c.StartAt.After(c.ClaimedAt))
				}
				shardtest.CheckCounts(t, s)
			})
		})
	}
}

// A retry fired ahead of its retry time is a run held for its start, though its member
// names an earlier due time: a claim that may take no run that starts now takes it.
func TestClaim_RetryFiredAheadIsHeldNotDue(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		_, err := s.Create(ctx, []*job.Job{{ID: "r", Type: "t", Schedule: job.Schedule{Now: true},
			Retry: job.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Minute, Jitter: -1}}})
		require.NoError(t, err)
		c, err := s.Claim(ctx, 0, "default", 1, "w", "n")
		require.NoError(t, err)
		require.Len(t, c, 1)
		errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: c[0].Member, Token: c[0].Token, Outcome: shard.Failed, Error: "x"}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		lease := s.AcquireLeases(ctx, "d", []shard.ID{0}, time.Minute)[0]
		fd, err := s.FireDue(ctx, lease.Lease, 10, 2*time.Minute)
		require.NoError(t, err)
		require.Equal(t, 1, fd.Fired)
		r := s.ClaimMany(ctx, []shard.ClaimRequest{{Shard: 0, Queue: "default", N: 5, Now: -1}}, "w", "n")[0]
		require.NoError(t, r.Err)
		require.Len(t, r.Runs, 1)
		require.Equal(t, 2, r.Runs[0].Attempt)
		require.True(t, r.Runs[0].StartAt.After(r.Runs[0].ClaimedAt.Add(50*time.Second)))
		shardtest.CheckCounts(t, s)
	})
}
