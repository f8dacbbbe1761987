package shard_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/shard/shardtest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func open(t *testing.T, b redistest.Backend, cfg shard.Config) *shard.Store {
	t.Helper()
	cfg.Namespace = redistest.Namespace(t, b)
	if cfg.Shards == 0 {
		cfg.Shards = 4
	}
	s, err := shard.Open(context.Background(), b.Client(t), cfg)
	require.NoError(t, err)
	return s
}

// frozen returns a store on a miniredis whose clock stands at now until moved.
func frozen(t *testing.T, now time.Time, cfg shard.Config) (*shard.Store, *miniredis.Miniredis) {
	t.Helper()
	m, c := redistest.Mini(t)
	m.SetTime(now)
	if cfg.Shards == 0 {
		cfg.Shards = 4
	}
	s, err := shard.Open(context.Background(), c, cfg)
	require.NoError(t, err)
	return s, m
}

func TestOpen_RefusesOtherShardCount(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ns := redistest.Namespace(t, b)
		c := b.Client(t)
		_, err := shard.Open(context.Background(), c, shard.Config{Namespace: ns, Shards: 8})
		require.NoError(t, err)
		_, err = shard.Open(context.Background(), c, shard.Config{Namespace: ns, Shards: 16})
		var me *shard.ConfigMismatchError
		require.ErrorAs(t, err, &me)
		require.Equal(t, "shards", me.Setting)
		require.Equal(t, "8", me.Stored)
		_, err = shard.Open(context.Background(), c, shard.Config{Namespace: ns, Shards: 8})
		require.NoError(t, err)
	})
}

// TestOpen_ConcurrentFirstOpensAgree opens a new namespace from many goroutines at once
// with two different settings: the settings of one of them are recorded whole (never
// the shard count of one and the bucket width of the other), exactly one Open reports
// that it initialised the namespace, and every other Open either agrees with it or is
// refused.
func TestOpen_ConcurrentFirstOpensAgree(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ns := redistest.Namespace(t, b)
		c := b.Client(t)
		cfgs := []shard.Config{
			{Namespace: ns, Shards: 8, BucketSize: time.Minute},
			{Namespace: ns, Shards: 16, BucketSize: time.Second},
		}
		type result struct {
			cfg   int
			store *shard.Store
			err   error
		}
		results := make([]result, 20)
		var wg sync.WaitGroup
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := shard.Open(context.Background(), c, cfgs[i%2])
				results[i] = result{i % 2, s, err}
			}()
		}
		wg.Wait()
		initialised, winner := 0, -1
		for _, r := range results {
			if r.err == nil && r.store.Initialised() {
				initialised++
				winner = r.cfg
			}
		}
		require.Equal(t, 1, initialised)
		for _, r := range results {
			if r.cfg == winner {
				require.NoError(t, r.err)
				continue
			}
			var me *shard.ConfigMismatchError
			require.ErrorAs(t, r.err, &me)
		}
		got, err := c.Do(context.Background(), c.B().Hmget().Key(shard.NewKeys(ns, nil).Meta()).Field("shards", "bucket").Build()).AsStrSlice()
		require.NoError(t, err)
		want := cfgs[winner]
		require.Equal(t, []string{strconv.Itoa(want.Shards), strconv.FormatInt(want.BucketSize.Milliseconds(), 10)}, got)
	})
}

func TestCreate_CronJustBeforeOccurrence(t *testing.T) {
	t.Parallel()
	nine := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		skew time.Duration // local clock minus Redis clock, appearing after the offset was measured
	}{{"ExactClock", 0}, {"LocalAhead1s", 1500 * time.Millisecond}, {"LocalBehind1s", -1500 * time.Millisecond},
		{"LocalAheadHour", time.Hour}, {"LocalBehindHour", -time.Hour}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			local := nine.Add(-time.Minute)
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return local }
			s, m := frozen(t, nine.Add(-time.Minute), shard.Config{Clock: clock})
			// Redis now stands at 08:59:59.999; the local clock drifted by skew since
			// the offset was measured.
			m.SetTime(nine.Add(-time.Millisecond))
			mu.Lock()
			local = nine.Add(-time.Millisecond + tc.skew)
			mu.Unlock()
			res, err := s.Create(context.Background(), []*job.Job{{ID: "c", Type: "t", Schedule: job.Schedule{Cron: "0 9 * * *"}}})
			require.NoError(t, err)
			require.NoError(t, res[0].Err)
			require.Equal(t, nine, res[0].NextRunAt.UTC(), "fires at 09:00, not a day later")
		})
	}
}

func TestFinished_ExpireAfterRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	// A job hash, which Redis expires; TestPacked_ExpireAfterRetention has packed jobs.
	s, m := frozen(t, now, shard.Config{Retention: time.Hour, NoPack: true})
	_, err := s.Create(ctx, []*job.Job{{ID: "once", Type: "t", Schedule: job.Schedule{Now: true}}})
	require.NoError(t, err)
	id := s.ShardOf("once")
	c, err := s.Claim(ctx, id, "default", 1, "w", "n")
	require.NoError(t, err)
	require.Len(t, c, 1)
	errs, err := s.FinishRuns(ctx, id, []shard.Finish{{Member: c[0].Member, Token: c[0].Token, Outcome: shard.Succeeded}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	info, err := s.Get(ctx, "once")
	require.NoError(t, err)
	require.Equal(t, job.StateCompleted, info.State)
	m.FastForward(59 * time.Minute)
	_, err = s.Get(ctx, "once")
	require.NoError(t, err)
	m.FastForward(2 * time.Minute)
	_, err = s.Get(ctx, "once")
	require.ErrorIs(t, err, shard.ErrNotFound)
	_, err = s.Runs(ctx, "once")
	require.ErrorIs(t, err, shard.ErrNotFound)
	require.Equal(t, []string{s.Keys().Meta(), s.Keys().Inflight(id), s.Keys().Ready(id, "default"), s.Keys().Stats(id)}, m.Keys(),
		"nothing left behind but the namespace record, the queue counts and the sets' pins")
	for _, key := range []string{s.Keys().Inflight(id), s.Keys().Ready(id, "default")} {
		pinned, err := m.ZMembers(key)
		require.NoError(t, err)
		require.Len(t, pinned, 1, "%s holds only its pin", key)
	}
	qs, err := s.Queues(ctx)
	require.NoError(t, err)
	require.Equal(t, []shard.QueueStats{{Queue: "default", Fired: 1}}, qs)
}

func TestRuns_KeepsLastHistory(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{History: 5})
		_, err := s.Create(ctx, []*job.Job{{ID: "c", Type: "t", Overlap: job.OverlapAllow, Schedule: job.Schedule{Cron: "0 0 1 1 *"}}})
		require.NoError(t, err)
		id := s.ShardOf("c")
		for i := 0; i < 8; i++ {
			_, err := s.Trigger(ctx, "c")
			require.NoError(t, err)
			c, err := s.Claim(ctx, id, "default", 1, "w", "n")
			require.NoError(t, err)
			require.Len(t, c, 1)
			_, err = s.FinishRuns(ctx, id, []shard.Finish{{Member: c[0].Member, Token: c[0].Token, Outcome: shard.Failed, Error: fmt.Sprint("e", i)}})
			require.NoError(t, err)
		}
		runs, err := s.Runs(ctx, "c")
		require.NoError(t, err)
		require.Len(t, runs, 5)
		require.Equal(t, "e7", runs[0].Error, "newest first")
	})
}

// inspect reads where a run is.
type where struct {
	ready, inflight bool
	state           string
}

func locate(t *testing.T, s *shard.Store, jobID string, member string) where {
	t.Helper()
	ctx := context.Background()
	c := s.Client()
	k := s.Keys()
	id := s.ShardOf(jobID)
	var w where
	_, err := c.Do(ctx, c.B().Zscore().Key(k.Ready(id, "default")).Member(member).Build()).AsFloat64()
	w.ready = err == nil
	_, err = c.Do(ctx, c.B().Zscore().Key(k.Inflight(id)).Member(member).Build()).AsFloat64()
	w.inflight = err == nil
	_, due, _ := shard.SplitMember(member)
	run, _ := c.Do(ctx, c.B().Hget().Key(k.Job(id, jobID)).Field("r"+strconv.FormatInt(due, 10)).Build()).ToString()
	w.state, _, _ = strings.Cut(run, "|")
	return w
}

func TestRace_CancelAndPauseVersusClaim(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		const n = 60
		var jobs []*job.Job
		for i := 0; i < n; i++ {
			jobs = append(jobs, &job.Job{ID: fmt.Sprintf("r%02d", i), Type: "t", Schedule: job.Schedule{Now: true}})
		}
		_, err := s.Create(ctx, jobs)
		require.NoError(t, err)
		var claimed sync.Map
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { // a worker claiming one at a time
			defer wg.Done()
			for i := 0; i < n; i++ {
				c, err := s.Claim(ctx, 0, "default", 1, "w", "n")
				if err == nil && len(c) == 1 {
					claimed.Store(c[0].JobID, c[0])
				}
			}
		}()
		go func() { // cancelling the even jobs, twice each
			defer wg.Done()
			for i := 0; i < n; i += 2 {
				for range 2 {
					_, _, err := s.Cancel(ctx, fmt.Sprintf("r%02d", i))
					require.NoError(t, err)
				}
			}
		}()
		go func() { // pausing the odd ones
			defer wg.Done()
			for i := 1; i < n; i += 2 {
				_, _, err := s.Pause(ctx, fmt.Sprintf("r%02d", i))
				require.NoError(t, err)
			}
		}()
		wg.Wait()
		for i := 0; i < n; i++ {
			jobID := fmt.Sprintf("r%02d", i)
			info, err := s.Get(ctx, jobID)
			require.NoError(t, err)
			v, wasClaimed := claimed.Load(jobID)
			var member string
			if wasClaimed {
				member = v.(shard.Claimed).Member
			} else {
				// The job lists its active runs' due times in its 'rl' field.
				c := s.Client()
				rl, err := c.Do(ctx, c.B().Hget().Key(s.Keys().Job(0, jobID)).Field("rl").Build()).ToString()
				require.NoError(t, err)
				if due := strings.Trim(rl, ","); due != "" {
					member = jobID + ":" + due
				}
			}
			w := locate(t, s, jobID, member)
			require.False(t, w.ready && w.inflight, "%s both ready and in flight", jobID)
			if i%2 == 0 {
				require.Equal(t, job.StateCancelled, info.State, jobID)
				require.False(t, w.ready, "%s: a cancelled job has no ready run", jobID)
				if w.inflight {
					require.Equal(t, "cancelled", w.state, "%s: in flight after cancel only as cancelled", jobID)
				}
			} else {
				require.False(t, w.ready, "%s: a paused job has no ready run", jobID)
				if wasClaimed {
					require.True(t, w.inflight, jobID)
					require.Equal(t, "running", w.state, jobID)
				} else {
					require.Equal(t, "paused", w.state, "%s parked", jobID)
				}
			}
		}
		// The worker finishes what it claimed: cancelled runs end cancelled, not retried.
		claimed.Range(func(k, v any) bool {
			c := v.(shard.Claimed)
			errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: c.Member, Token: c.Token, Outcome: shard.Failed, Error: "x"}})
			require.NoError(t, err)
			require.NoError(t, errs[0])
			info, err := s.Get(ctx, c.JobID)
			require.NoError(t, err)
			if info.State == job.StateCancelled {
				require.Zero(t, info.ActiveRuns, c.JobID)
				// Out of every set; its record ends cancelled and expires with the job.
				require.Equal(t, where{state: "cancelled"}, locate(t, s, c.JobID, c.Member), c.JobID)
			}
			return true
		})
	})
}

func TestClaimMany_PipelinesShardsAndQueues(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 4})
		var jobs []*job.Job
		perSource := map[shard.ClaimRequest]int{}
		for i := 0; i < 40; i++ {
			q := []string{"default", "mail"}[i%2]
			j := &job.Job{ID: fmt.Sprintf("m%02d", i), Queue: q, Type: "t", Schedule: job.Schedule{Now: true}}
			jobs = append(jobs, j)
			perSource[shard.ClaimRequest{Shard: s.ShardOf(j.ID), Queue: q}]++
		}
		_, err := s.Create(ctx, jobs)
		require.NoError(t, err)

		var reqs []shard.ClaimRequest
		for src := range perSource {
			src.N = 3
			reqs = append(reqs, src)
		}
		// A source nobody created jobs for gets nothing, without failing the others.
		reqs = append(reqs, shard.ClaimRequest{Shard: 0, Queue: "empty", N: 5})
		seen := map[string]bool{}
		for round := 0; len(seen) < len(jobs); round++ {
			require.Less(t, round, 20, "claims stopped making progress")
			res := s.ClaimMany(ctx, reqs, "w", "n")
			require.Len(t, res, len(reqs))
			for i, r := range res {
				require.NoError(t, r.Err)
				require.LessOrEqual(t, len(r.Runs), reqs[i].N, "a request never gets more than it asked for")
				for _, c := range r.Runs {
					require.Equal(t, reqs[i].Shard, c.Shard, "runs come back in the order of the requests")
					require.Equal(t, reqs[i].Shard, s.ShardOf(c.JobID))
					require.False(t, seen[c.JobID], "claimed twice: %s", c.JobID)
					seen[c.JobID] = true
				}
			}
			require.Empty(t, res[len(res)-1].Runs)
		}
	})
}

func TestPayload_StoredCompactAndReturnedWhole(t *testing.T) {
	for _, noPack := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoPack=%v", noPack), func(t *testing.T) { testPayloadStoredCompact(t, noPack) })
	}
}

// testPayloadStoredCompact checks payloads of every stored form, of packed jobs and of
// job hashes.
func testPayloadStoredCompact(t *testing.T, noPack bool) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1, NoPack: noPack})
		sizes := []int{0, 1, 64, 65, 100, 127, 128, 129, 192, 193, 511, 512, 513, 3000}
		var jobs []*job.Job
		for _, n := range sizes {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(i*31 + n)
			}
			jobs = append(jobs, &job.Job{ID: fmt.Sprintf("pl%d", n), Type: "t", Payload: p, Schedule: job.Schedule{Now: true}})
		}
		_, err := s.Create(ctx, jobs)
		require.NoError(t, err)
		for _, j := range jobs {
			info, err := s.Get(ctx, j.ID)
			require.NoError(t, err)
			require.Equal(t, j.Payload, info.Payload, "Get of %s", j.ID)
		}
		claimed, err := s.Claim(ctx, 0, "default", len(jobs), "w", "n")
		require.NoError(t, err)
		require.Len(t, claimed, len(jobs))
		byID := map[string][]byte{}
		var fin []shard.Finish
		for _, c := range claimed {
			byID[c.JobID] = c.Payload
			fin = append(fin, shard.Finish{Member: c.Member, Token: c.Token, Outcome: shard.Succeeded})
		}
		for _, j := range jobs {
			require.Equal(t, j.Payload, byID[j.ID], "claim of %s", j.ID)
		}
		_, err = s.FinishRuns(ctx, 0, fin)
		require.NoError(t, err)
		runs, err := s.Runs(ctx, "pl100")
		require.NoError(t, err)
		require.Len(t, runs, 1)
		require.Equal(t, job.OutcomeSucceeded, runs[0].Outcome)
		require.Equal(t, "w", runs[0].Worker)
		require.False(t, runs[0].Start.IsZero())

		if b.Mini == nil {
			// The inflight set's pin keeps it a skiplist, also when no run is in flight.
			c := s.Client()
			enc, err := c.Do(ctx, c.B().ObjectEncoding().Key(s.Keys().Inflight(0)).Build()).ToString()
			require.NoError(t, err)
			require.Equal(t, "skiplist", enc)
		}
		if b.Mini == nil && noPack {
			// Redis keeps the job of a 100-byte payload as a listpack, before and after its run.
			c := s.Client()
			enc, err := c.Do(ctx, c.B().ObjectEncoding().Key(s.Keys().Job(0, "pl100")).Build()).ToString()
			require.NoError(t, err)
			require.Equal(t, "listpack", enc)
		}
	})
}

// FireDue signals the queues that got runs itself, from inside its script: on a cluster
// the signal reaches a subscriber on any node.
func TestFireDue_SignalsReadyQueues(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s := open(t, b, shard.Config{Shards: 4})
		got := make(chan string, 16)
		go func() {
			_ = s.Subscribe(ctx, []string{s.Keys().ReadyChannel("mail")}, func(ch, msg string) { got <- msg })
		}()
		ids := []shard.ID{0, 1, 2, 3}
		var leases []shard.Lease
		for _, l := range s.AcquireLeases(ctx, "d", ids, time.Minute) {
			require.True(t, l.Held, "%v", l.Err)
			leases = append(leases, l.Lease)
		}
		now, err := s.ServerNow(ctx)
		require.NoError(t, err)
		// A subscription is not confirmed to its caller: fire new runs until a signal arrives.
		for k := 0; k < 50; k++ {
			if b.Mini == nil {
				now, err = s.ServerNow(ctx)
				require.NoError(t, err)
			}
			jobID := "sig" + strconv.Itoa(k)
			_, err := s.Create(ctx, []*job.Job{{ID: jobID, Type: "t", Queue: "mail", Schedule: job.Schedule{At: now.Add(30 * time.Millisecond)}}})
			require.NoError(t, err)
			now = now.Add(60 * time.Millisecond)
			if b.Mini != nil {
				b.Mini.SetTime(now)
			} else {
				time.Sleep(60 * time.Millisecond)
			}
			fired := 0
			for _, l := range leases {
				d, err := s.FireDue(ctx, l, 100, 0)
				require.NoError(t, err)
				fired += d.Fired
			}
			require.Equal(t, 1, fired)
			select {
			case msg := <-got:
				id, at, ok := shard.ParseReady(msg, s.Shards())
				require.True(t, ok, msg)
				require.Equal(t, s.ShardOf(jobID), id)
				require.Positive(t, at)
				// A claim made after the signal reads a later Redis time, in the same unit:
				// the worker knows it saw the runs.
				res := s.ClaimMany(ctx, []shard.ClaimRequest{{Shard: id, Queue: "mail", N: 10}}, "w", "n")[0]
				require.NoError(t, res.Err)
				require.Len(t, res.Runs, 1)
				if b.Mini == nil {
					require.Greater(t, res.At, at)
					require.Less(t, res.At-at, int64(10*time.Second/time.Microsecond))
				}
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		t.Fatal("no ready signal")
	})
}

// FireDue reports when to come back: the earliest entry after now, whether it is in the
// bucket it just fired from or in a later one, and now when more is due than it took. An
// emptied bucket leaves the index; one that still holds runs stays. (The clock is moved,
// so miniredis only.)
// firingShard returns a store of one shard with one-minute buckets on a miniredis whose
// clock stands at t0, a bucket boundary, and fire, which moves the clock to at and fires
// the shard (up to limit entries, no lead) under a lease held for the test.
// claimIDs claims up to n runs of queue on shard 0 and returns their job ids, in claim
// order.
func claimIDs(t *testing.T, s *shard.Store, queue string, n int) []string {
	t.Helper()
	claimed, err := s.Claim(context.Background(), 0, queue, n, "w", "n")
	require.NoError(t, err)
	var ids []string
	for _, r := range claimed {
		ids = append(ids, r.JobID)
	}
	return ids
}

func firingShard(t *testing.T) (s *shard.Store, t0 time.Time, fire func(at time.Time, limit int) *shard.Due) {
	return firingShardOf(t, shard.Config{})
}

// firingShardOf is firingShard with cfg (its shards and bucket size set).
func firingShardOf(t *testing.T, cfg shard.Config) (s *shard.Store, t0 time.Time, fire func(at time.Time, limit int) *shard.Due) {
	t.Helper()
	ctx := context.Background()
	t0 = time.UnixMilli(1_800_000_000_000).Truncate(time.Minute)
	cfg.Shards, cfg.BucketSize = 1, time.Minute
	s, m := frozen(t, t0, cfg)
	lease := s.AcquireLeases(ctx, "d", []shard.ID{0}, time.Hour)[0]
	require.True(t, lease.Held)
	return s, t0, func(at time.Time, limit int) *shard.Due {
		t.Helper()
		m.SetTime(at)
		d, err := s.FireDue(ctx, lease.Lease, limit, 0)
		require.NoError(t, err)
		return d
	}
}

// A fire reports when the next entry comes due, whether the runs are plain (packed jobs,
// in the shard's plain set of their priority and queue) or filed in due buckets (job
// hashes).
func TestFireDue_NextDue(t *testing.T) {
	for _, tc := range []struct {
		name   string
		noPack bool
		// per check: due buckets in the index, runs in the plain set
		want [][2]int
	}{
		{"plain runs", false, [][2]int{{0, 5}, {0, 4}, {0, 1}, {0, 0}}},
		{"runs in due buckets", true, [][2]int{{2, 0}, {2, 0}, {1, 0}, {0, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, t0, fire := firingShardOf(t, shard.Config{NoPack: tc.noPack})
			check := 0
			filed := func() {
				t.Helper()
				c := s.Client()
				b, err := c.Do(ctx, c.B().Zcard().Key(s.Keys().Buckets(0)).Build()).AsInt64()
				require.NoError(t, err)
				p, err := c.Do(ctx, c.B().Zcard().Key(s.Keys().Plain(0, 7, "default")).Build()).AsInt64()
				require.NoError(t, err)
				require.Equal(t, tc.want[check], [2]int{int(b), int(p)}, "check %d: buckets, plain runs", check)
				check++
			}

			d := fire(t0, 100)
			require.Equal(t, int64(-1), d.NextDue, "nothing scheduled")

			seven := 7
			dues := []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 30 * time.Second, 90 * time.Second}
			for i, off := range dues {
				_, err := s.Create(ctx, []*job.Job{{ID: "n" + strconv.Itoa(i), Type: "t", Priority: &seven, Schedule: job.Schedule{At: t0.Add(off)}}})
				require.NoError(t, err)
			}
			filed()

			d = fire(t0.Add(time.Second), 100)
			require.Zero(t, d.Fired)
			require.Equal(t, t0.Add(10*time.Second).UnixMilli(), d.NextDue)

			d = fire(t0.Add(15*time.Second), 100) // fires one; the bucket still holds three
			require.Equal(t, 1, d.Fired)
			require.Equal(t, t0.Add(20*time.Second).UnixMilli(), d.NextDue)
			filed()

			d = fire(t0.Add(35*time.Second), 1) // two are due (three runs), one taken: come back now
			require.Equal(t, 1, d.Fired)
			require.Equal(t, d.Now, d.NextDue)
			d = fire(t0.Add(35*time.Second), 100)
			require.Equal(t, 2, d.Fired)
			require.Equal(t, t0.Add(90*time.Second).UnixMilli(), d.NextDue, "the next entry is in a later bucket")
			filed() // an emptied bucket left the index

			d = fire(t0.Add(2*time.Minute), 100)
			require.Equal(t, 1, d.Fired)
			require.Equal(t, int64(-1), d.NextDue)
			filed()
		})
	}
}

// Plain runs (packed jobs' scheduled runs) wait in a set of their shard per priority and
// queue, not in a due bucket; a fire takes the first ones by due time, as many as its
// limit leaves, into their queue's ready set at their priority; whatever unpacks such a
// job (an update, a cancel) moves its run to its due bucket first, so the fire's unread
// path never meets a job that is no longer plain.
func TestFireDue_PlainRuns(t *testing.T) {
	ctx := context.Background()
	s, t0, fireAt := firingShard(t)
	fire := func(at time.Duration, limit int) *shard.Due { t.Helper(); return fireAt(t0.Add(at), limit) }
	c := s.Client()
	zrange := func(key string) []string {
		t.Helper()
		out, err := c.Do(ctx, c.B().Zrange().Key(key).Min("0").Max("-1").Build()).AsStrSlice()
		require.NoError(t, err)
		return out
	}
	plain := func(pri int, q string) []string { t.Helper(); return zrange(s.Keys().Plain(0, pri, q)) }
	plains := func() []string { t.Helper(); return zrange(s.Keys().PlainIndex(0)) }
	bucket := func() []string { t.Helper(); return zrange(s.Keys().Due(0, t0.UnixMilli()/time.Minute.Milliseconds())) }
	member := func(id string, at time.Duration) string { return shard.RunMember(id, t0.Add(at).UnixMilli()) }
	create := func(j *job.Job) {
		t.Helper()
		_, err := s.Create(ctx, []*job.Job{j})
		require.NoError(t, err)
	}
	once := func(id string, at time.Duration) *job.Job {
		return &job.Job{ID: id, Type: "t", Schedule: job.Schedule{At: t0.Add(at)}}
	}

	for i, at := range []time.Duration{12 * time.Second, 10 * time.Second, 11 * time.Second} {
		create(once("p"+strconv.Itoa(i), at))
	}
	other := once("q", 14*time.Second)
	other.Queue = "other"
	create(other)
	two := 2
	lo := once("lo", 15*time.Second)
	lo.Priority = &two
	create(lo)
	create(&job.Job{ID: "cron", Type: "t", Schedule: job.Schedule{Cron: "50 * * * * *"}}) // a job hash
	require.Equal(t, []string{member("p1", 10*time.Second), member("p2", 11*time.Second), member("p0", 12*time.Second)}, plain(5, "default"))
	require.Equal(t, []string{member("q", 14*time.Second)}, plain(5, "other"))
	require.Equal(t, []string{member("lo", 15*time.Second)}, plain(2, "default"))
	require.ElementsMatch(t, []string{"5:default", "5:other", "2:default"}, plains())
	require.Equal(t, []string{member("cron", 50*time.Second)}, bucket())

	d := fire(13*time.Second, 2)
	require.Equal(t, 2, d.Fired)
	require.Equal(t, []string{member("p0", 12*time.Second)}, plain(5, "default"))
	d = fire(16*time.Second, 100)
	require.Equal(t, 3, d.Fired)
	require.Empty(t, plain(5, "default"))
	require.Empty(t, plain(5, "other"))
	require.Empty(t, plain(2, "default"))
	require.Empty(t, plains(), "a fire drops the names of the sets it emptied")

	// Unpacked by an update and by a cancel: moved to the bucket, then as a job hash's run.
	create(once("u", 40*time.Second))
	create(once("x", 41*time.Second))
	create(once("k", 42*time.Second))
	seven := 7
	_, err := s.Update(ctx, "u", shard.Update{Priority: &seven})
	require.NoError(t, err)
	_, _, err = s.Cancel(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, []string{member("k", 42*time.Second)}, plain(5, "default"))
	require.Equal(t, []string{member("u", 40*time.Second), member("cron", 50*time.Second)}, bucket())
	d = fire(45*time.Second, 100)
	require.Equal(t, 2, d.Fired)

	// Priority first (higher numbers first: u 7, the default 5, lo 2), then due time.
	require.Equal(t, []string{"u", "p1", "p2", "p0", "k", "lo"}, claimIDs(t, s, "default", 10))
	require.Empty(t, plain(5, "default"))
	others, err := s.Claim(ctx, 0, "other", 10, "w", "n")
	require.NoError(t, err)
	require.Len(t, others, 1)
	require.Equal(t, "q", others[0].JobID)
}

// What an acknowledged one-time run leaves in its job's hash, field by field: the run's
// state with the token cleared, the job completed with no active run, one compact history
// entry, and the job's expiry.
func TestAck_OneTimeRunFields(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		// A job hash: packed jobs read as this hash (TestPacked_ReadsAsHashes).
		s := open(t, b, shard.Config{Shards: 1, Retention: time.Hour, NoPack: true})
		_, err := s.Create(ctx, []*job.Job{{ID: "ack1", Type: "t", Schedule: job.Schedule{Now: true}}})
		require.NoError(t, err)
		c, err := s.Claim(ctx, 0, "default", 1, "w1", "nonce")
		require.NoError(t, err)
		require.Len(t, c, 1)
		errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: c[0].Member, Token: c[0].Token, Outcome: shard.Succeeded}})
		require.NoError(t, err)
		require.NoError(t, errs[0])

		rc := s.Client()
		key := s.Keys().Job(0, "ack1")
		h, err := rc.Do(ctx, rc.B().Hgetall().Key(key).Build()).AsStrMap()
		require.NoError(t, err)
		_, due, _ := shard.SplitMember(c[0].Member)
		sa := c[0].ClaimedAt.UnixMilli()
		dueStr := strconv.FormatInt(due, 10)
		// The run field keeps the end time where a retry time is kept; the history is
		// not rewritten, 'hs' names the run instead.
		prefix := "succeeded|1|1||w1|" + strconv.FormatInt(sa, 10) + "|"
		rf := h["r"+dueStr]
		require.True(t, strings.HasPrefix(rf, prefix) && strings.HasSuffix(rf, "|"), rf)
		end, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(rf, prefix), "|"), 10, 64)
		require.NoError(t, err, rf)
		require.GreaterOrEqual(t, end, sa)
		require.Equal(t, "completed", h["st"])
		require.Equal(t, ",", h["rl"])
		require.Equal(t, dueStr, h["hs"])
		require.NotContains(t, h, "h")
		runs, err := s.Runs(ctx, "ack1")
		require.NoError(t, err)
		require.Equal(t, []job.Run{{Due: time.UnixMilli(due), Start: time.UnixMilli(sa), End: time.UnixMilli(end),
			Worker: "w1", Attempt: 1, Outcome: job.OutcomeSucceeded}}, runs)
		ttl, err := rc.Do(ctx, rc.B().Pttl().Key(key).Build()).AsInt64()
		require.NoError(t, err)
		require.InDelta(t, time.Hour.Milliseconds(), ttl, float64(time.Minute.Milliseconds()))

		// A second ack with the same token is refused.
		errs, err = s.FinishRuns(ctx, 0, []shard.Finish{{Member: c[0].Member, Token: c[0].Token, Outcome: shard.Succeeded}})
		require.NoError(t, err)
		require.ErrorIs(t, errs[0], shard.ErrTokenMismatch)
	})
}

// A one-time job that succeeds after earlier attempts: its history is the earlier
// entries with the success first, within Config.History, though the ack's fast path
// records the success in the run's field and not in the history.
func TestRuns_OneTimeSuccessAfterSnoozes(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{History: 2})
		_, err := s.Create(ctx, []*job.Job{{ID: "o", Type: "t", Schedule: job.Schedule{Now: true}}})
		require.NoError(t, err)
		id := s.ShardOf("o")
		leases := s.AcquireLeases(ctx, "owner", []shard.ID{id}, time.Minute)
		require.True(t, leases[0].Held)
		claim := func() shard.Claimed {
			t.Helper()
			var c []shard.Claimed
			require.Eventually(t, func() bool {
				_, err := s.FireDue(ctx, leases[0].Lease, 100, 0)
				require.NoError(t, err)
				c, err = s.Claim(ctx, id, "default", 1, "w", "n")
				require.NoError(t, err)
				return len(c) == 1
			}, 5*time.Second, 10*time.Millisecond)
			return c[0]
		}
		for range 2 {
			c := claim()
			errs, err := s.FinishRuns(ctx, id, []shard.Finish{{Member: c.Member, Token: c.Token, Outcome: shard.Snoozed, Delay: time.Millisecond}})
			require.NoError(t, err)
			require.NoError(t, errs[0])
		}
		c := claim()
		errs, err := s.FinishRuns(ctx, id, []shard.Finish{{Member: c.Member, Token: c.Token, Outcome: shard.Succeeded}})
		require.NoError(t, err)
		require.NoError(t, errs[0])

		runs, err := s.Runs(ctx, "o")
		require.NoError(t, err)
		require.Len(t, runs, 2)
		require.Equal(t, job.OutcomeSucceeded, runs[0].Outcome, "newest first")
		require.Equal(t, c.Attempt, runs[0].Attempt)
		require.Equal(t, job.OutcomeSnoozed, runs[1].Outcome)
		require.False(t, runs[0].End.Before(runs[0].Start))
		info, err := s.Get(ctx, "o")
		require.NoError(t, err)
		require.Equal(t, job.StateCompleted, info.State)
	})
}

// A claim returns a job's settings and a run's token and attempt: defaults and a first
// attempt in the short form, anything else spelled out (claim_runs).
func TestClaim_SettingsTokensAndAttempts(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		_, err := s.Create(ctx, []*job.Job{
			{ID: "d", Type: "t", Payload: []byte("x"), Schedule: job.Schedule{Now: true}},
			{ID: "v", Type: "u", Schedule: job.Schedule{Now: true}, Timeout: 5 * time.Second, Visibility: 7 * time.Second,
				Retry: job.RetryPolicy{MaxAttempts: 3}},
			{ID: "w", Type: "u", Schedule: job.Schedule{Now: true}, Visibility: 9 * time.Second},
		})
		require.NoError(t, err)
		c, err := s.Claim(ctx, 0, "default", 10, "w1", "n1")
		require.NoError(t, err)
		require.Len(t, c, 3)
		byID := map[string]shard.Claimed{}
		for _, r := range c {
			require.NotEmpty(t, r.Token)
			require.Equal(t, 1, r.Attempt)
			byID[r.JobID] = r
		}
		d, v, w := byID["d"], byID["v"], byID["w"]
		require.Equal(t, "t", d.Type)
		require.Equal(t, []byte("x"), d.Payload)
		require.Equal(t, []time.Duration{job.DefaultTimeout, job.DefaultVisibility}, []time.Duration{d.Timeout, d.Visibility})
		require.Equal(t, job.DefaultMaxAttempts, d.MaxAttempts)
		require.Equal(t, []time.Duration{5 * time.Second, 7 * time.Second}, []time.Duration{v.Timeout, v.Visibility})
		require.Equal(t, 3, v.MaxAttempts)
		require.Equal(t, []time.Duration{job.DefaultTimeout, 9 * time.Second}, []time.Duration{w.Timeout, w.Visibility})
		require.Equal(t, job.DefaultMaxAttempts, w.MaxAttempts)
		require.Equal(t, d.Token, v.Token, "first attempts of one call share a token")

		// A second attempt (handed back) gets a new token; its settings come back too.
		for _, r := range []shard.Claimed{d, v} {
			errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: r.Member, Token: r.Token, Outcome: shard.HandBack}})
			require.NoError(t, err)
			require.NoError(t, errs[0])
		}
		again, err := s.Claim(ctx, 0, "default", 10, "w2", "n2")
		require.NoError(t, err)
		require.Len(t, again, 2)
		for _, r := range again {
			prev := byID[r.JobID]
			require.NotEqual(t, prev.Token, r.Token)
			require.Equal(t, 1, r.Attempt, "a hand-back uses no attempt")
			require.Equal(t, []time.Duration{prev.Timeout, prev.Visibility}, []time.Duration{r.Timeout, r.Visibility})
			require.Equal(t, prev.MaxAttempts, r.MaxAttempts)
			errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: r.Member, Token: prev.Token, Outcome: shard.Succeeded}})
			require.NoError(t, err)
			require.ErrorIs(t, errs[0], shard.ErrTokenMismatch, "the old token is void")
			errs, err = s.FinishRuns(ctx, 0, []shard.Finish{{Member: r.Member, Token: r.Token, Outcome: shard.Succeeded}})
			require.NoError(t, err)
			require.NoError(t, errs[0])
		}
	})
}

// With a lead, FireDue fires the runs due within it, ahead of their time, and reports
// the first entry beyond it. A claim of such a run says when it may start (its due time,
// or a retry's retry time) and records that as the run's start, not the claim time.
func TestFireDue_LeadFiresAhead(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		// Hot jobs only: a cold one's next due time is when its bucket thaws.
		s := open(t, b, shard.Config{Shards: 1, ColdAfter: -1, NoPack: true})
		now, err := s.ServerNow(ctx)
		require.NoError(t, err)
		dueA, dueB := now.Add(time.Hour).Truncate(time.Millisecond), now.Add(3*time.Hour).Truncate(time.Millisecond)
		_, err = s.Create(ctx, []*job.Job{
			{ID: "a", Type: "t", Schedule: job.Schedule{At: dueA}},
			{ID: "b", Type: "t", Schedule: job.Schedule{At: dueB}},
			{ID: "r", Type: "t", Schedule: job.Schedule{Now: true}},
		})
		require.NoError(t, err)
		lease := s.AcquireLeases(ctx, "d", []shard.ID{0}, time.Hour)[0]
		require.True(t, lease.Held)

		d, err := s.FireDue(ctx, lease.Lease, 100, 0)
		require.NoError(t, err)
		require.Zero(t, d.Fired, "nothing is due without a lead")
		require.Equal(t, dueA.UnixMilli(), d.NextDue)

		d, err = s.FireDue(ctx, lease.Lease, 100, 2*time.Hour)
		require.NoError(t, err)
		require.Equal(t, 1, d.Fired, "a is due within the lead, b is not")
		require.Equal(t, dueB.UnixMilli(), d.NextDue, "the first entry beyond the lead")

		c, err := s.Claim(ctx, 0, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, c, 2)
		byID := map[string]shard.Claimed{}
		for _, r := range c {
			byID[r.JobID] = r
		}
		a, r := byID["a"], byID["r"]
		require.True(t, dueA.Equal(a.StartAt), "%s, want %s", a.StartAt, dueA)
		require.True(t, a.ClaimedAt.Before(a.StartAt))
		require.False(t, r.StartAt.After(r.ClaimedAt), "a run due already starts at once")
		runField := func(id string, due time.Time) string {
			t.Helper()
			cl := s.Client()
			v, err := cl.Do(ctx, cl.B().Hget().Key(s.Keys().Job(0, id)).Field("r"+strconv.FormatInt(due.UnixMilli(), 10)).Build()).ToString()
			require.NoError(t, err)
			return v
		}
		require.Contains(t, runField("a", dueA), "|w|"+strconv.FormatInt(dueA.UnixMilli(), 10)+"||",
			"the run starts at its due time, not at the claim")

		// A snoozed run fired ahead starts at its retry time, though its due time is past.
		errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: r.Member, Token: r.Token, Outcome: shard.Snoozed, Delay: time.Hour}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		d, err = s.FireDue(ctx, lease.Lease, 100, 2*time.Hour)
		require.NoError(t, err)
		require.Equal(t, 1, d.Fired)
		c, err = s.Claim(ctx, 0, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, c, 1)
		again := c[0]
		require.Equal(t, r.Member, again.Member)
		require.Equal(t, 1, again.Attempt, "a snooze uses no attempt")
		require.WithinRange(t, again.StartAt, again.ClaimedAt.Add(59*time.Minute), again.ClaimedAt.Add(61*time.Minute))
		require.Contains(t, runField("r", r.Due), "|w|"+strconv.FormatInt(again.StartAt.UnixMilli(), 10)+"|")
	})
}

// A ready set holds a pin that keeps it a skiplist (lua common's READY_PIN): claims never
// return or remove it, and the counts leave it out.
func TestReadySet_PinIsNoRun(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		now := job.Schedule{Now: true}
		low, high, first := 0, 9, 7
		_, err := s.Create(ctx, []*job.Job{
			{ID: "low", Type: "t", Priority: &low, Schedule: now},
			{ID: "mid", Type: "t", Schedule: now},
			{ID: "high", Type: "t", Priority: &high, Schedule: now},
		})
		require.NoError(t, err)
		c := s.Client()
		key := s.Keys().Ready(0, "default")
		if b.Mini == nil {
			enc, err := c.Do(ctx, c.B().ObjectEncoding().Key(key).Build()).ToString()
			require.NoError(t, err)
			require.Equal(t, "skiplist", enc, "three runs, and a skiplist already")
		}
		ready := func() int64 {
			t.Helper()
			qs, err := s.Queues(ctx)
			require.NoError(t, err)
			require.Len(t, qs, 1)
			return qs[0].Ready
		}
		backlog := func() int64 {
			t.Helper()
			n, err := s.Backlog(ctx)
			require.NoError(t, err)
			return n
		}
		require.Equal(t, int64(3), ready())
		require.Equal(t, int64(3), backlog())

		// A claim asking for more than there is gets the runs, in priority order, and leaves
		// the pin.
		claimed, err := s.Claim(ctx, 0, "default", 10, "w", "n")
		require.NoError(t, err)
		var ids []string
		for _, r := range claimed {
			ids = append(ids, r.JobID)
		}
		require.Equal(t, []string{"high", "mid", "low"}, ids)
		require.Zero(t, ready())
		require.Equal(t, int64(3), backlog(), "in flight")
		n, err := c.Do(ctx, c.B().Zcard().Key(key).Build()).AsInt64()
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "the pin stays")
		again, err := s.Claim(ctx, 0, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Empty(t, again)

		// Runs added to the pinned set are claimed as before.
		_, err = s.Create(ctx, []*job.Job{{ID: "next", Type: "t", Schedule: now}, {ID: "first", Type: "t", Priority: &first, Schedule: now}})
		require.NoError(t, err)
		require.Equal(t, int64(2), ready())
		one, err := s.Claim(ctx, 0, "default", 1, "w", "n")
		require.NoError(t, err)
		require.Len(t, one, 1)
		require.Equal(t, "first", one[0].JobID)
		require.Equal(t, int64(1), ready())
		var fin []shard.Finish
		for _, r := range append(claimed, one...) {
			fin = append(fin, shard.Finish{Member: r.Member, Token: r.Token, Outcome: shard.Succeeded})
		}
		_, err = s.FinishRuns(ctx, 0, fin)
		require.NoError(t, err)
		require.Equal(t, int64(1), backlog(), "the run still ready")
	})
}

// An id given twice in one create is created once, and the second entry reports the
// first one's job, in every form a job is stored in (job hash, packed, cold, cron); so
// is an id that existed before the call, given twice. Every job keeps exactly one run.
func TestCreate_SameIDTwiceInACall(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		for _, tc := range []struct {
			name string
			cfg  shard.Config
		}{{"hashes", shard.Config{NoPack: true, ColdAfter: -1}}, {"packed", shard.Config{}}} {
			t.Run(tc.name, func(t *testing.T) {
				tc.cfg.Shards = 1
				tc.cfg.ColdAfter = min(tc.cfg.ColdAfter, time.Hour)
				s := open(t, b, tc.cfg)
				now, err := s.ServerNow(ctx)
				require.NoError(t, err)
				soon := now.Add(time.Minute).Truncate(time.Millisecond)
				far := now.Add(48 * time.Hour).Truncate(time.Millisecond)
				mk := func(id string, sch job.Schedule) *job.Job { return &job.Job{ID: id, Type: "t", Schedule: sch} }
				old := []*job.Job{mk("old-now", job.Schedule{Now: true}), mk("old-far", job.Schedule{At: far})}
				res, err := s.Create(ctx, old)
				require.NoError(t, err)
				for _, r := range res {
					require.True(t, r.Created, r.ID)
				}
				batch := []*job.Job{
					mk("now", job.Schedule{Now: true}), mk("soon", job.Schedule{At: soon}),
					mk("far", job.Schedule{At: far}), mk("cron", job.Schedule{Cron: "0 9 * * *"}),
					mk("old-now", job.Schedule{Now: true}), mk("old-far", job.Schedule{At: far}),
				}
				res, err = s.Create(ctx, append(batch, batch...))
				require.NoError(t, err)
				for k, r := range res {
					require.NoError(t, r.Err, r.ID)
					first := k < len(batch) && !strings.HasPrefix(r.ID, "old-")
					require.Equal(t, first, r.Created, "%s (entry %d)", r.ID, k)
					if k >= len(batch) {
						require.Equal(t, res[k-len(batch)].State, r.State, r.ID)
						require.Equal(t, res[k-len(batch)].NextRunAt, r.NextRunAt, r.ID)
					}
				}
				qs := queueStats(t, s)["default"]
				require.EqualValues(t, 2, qs.Ready, "now and old-now, once each")
				require.EqualValues(t, 4, qs.Scheduled, "soon, far, cron and old-far, once each")
				shardtest.CheckCounts(t, s)
			})
		}
	})
}

// A create wakes the shard's dispatcher only for a run due before every run the shard
// holds, plain runs (packed jobs' runs, in the shard's plain sets) among them.
func TestCreate_WakesOnlyForAnEarlierRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	t0 := time.UnixMilli(1_800_000_000_000).Truncate(time.Minute)
	s, _ := frozen(t, t0, shard.Config{Shards: 1})
	got := make(chan string, 64)
	go func() {
		_ = s.Subscribe(ctx, []string{s.Keys().WakeChannel()}, func(ch, msg string) { got <- msg })
	}()
	create := func(id string, at time.Duration) {
		t.Helper()
		_, err := s.Create(ctx, []*job.Job{{ID: id, Type: "t", Schedule: job.Schedule{At: t0.Add(at)}}})
		require.NoError(t, err)
	}
	wake := func(at time.Duration) string { return "0 " + strconv.FormatInt(t0.Add(at).UnixMilli(), 10) }
	// A subscription is not confirmed to its caller: create ever earlier runs, each of
	// which wakes, until a signal arrives.
	at := time.Minute
	for k := 0; ; k++ {
		require.Less(t, k, 100, "no wake signal")
		at -= time.Millisecond
		create("a"+strconv.Itoa(k), at)
		select {
		case <-got:
		case <-time.After(50 * time.Millisecond):
			continue
		}
		break
	}
	for len(got) > 0 {
		<-got
	}
	plain, err := s.Client().Do(ctx, s.Client().B().Zcard().Key(s.Keys().Plain(0, job.DefaultPriority, job.DefaultQueue)).Build()).AsInt64()
	require.NoError(t, err)
	require.Positive(t, plain, "the runs are plain")

	create("later", 90*time.Second) // after the plain runs held: no wake
	// Nor in a plain set of its own (another queue).
	_, err = s.Create(ctx, []*job.Job{{ID: "elsewhere", Type: "t", Queue: "other", Schedule: job.Schedule{At: t0.Add(80 * time.Second)}}})
	require.NoError(t, err)
	create("sooner", 10*time.Second)
	select {
	case msg := <-got:
		require.Equal(t, wake(10*time.Second), msg, "the later run woke the dispatcher")
	case <-ctx.Done():
		t.Fatal("no wake signal for the earlier run")
	}
}

// The plain sets' index holds, per set, at most the due time of its first run: a cancel
// that takes the first run leaves it early, and the fire that comes at that time fires
// nothing, corrects it and reports the set's real next run.
func TestFireDue_PlainIndexMayBeEarly(t *testing.T) {
	ctx := context.Background()
	s, t0, fireAt := firingShard(t)
	fire := func(at time.Duration) *shard.Due { t.Helper(); return fireAt(t0.Add(at), 100) }
	c := s.Client()
	indexed := func() int64 {
		t.Helper()
		score, err := c.Do(ctx, c.B().Zscore().Key(s.Keys().PlainIndex(0)).Member("5:default").Build()).AsFloat64()
		require.NoError(t, err)
		return int64(score)
	}
	for id, at := range map[string]time.Duration{"a": 10 * time.Second, "b": 20 * time.Second} {
		_, err := s.Create(ctx, []*job.Job{{ID: id, Type: "t", Schedule: job.Schedule{At: t0.Add(at)}}})
		require.NoError(t, err)
	}
	require.Equal(t, t0.Add(10*time.Second).UnixMilli(), fire(time.Second).NextDue)
	_, _, err := s.Cancel(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, t0.Add(10*time.Second).UnixMilli(), indexed(), "early after the cancel")

	d := fire(11 * time.Second)
	require.Zero(t, d.Fired)
	require.Equal(t, t0.Add(20*time.Second).UnixMilli(), d.NextDue)
	require.Equal(t, t0.Add(20*time.Second).UnixMilli(), indexed())
	d = fire(21 * time.Second)
	require.Equal(t, 1, d.Fired)
	require.Equal(t, int64(-1), d.NextDue)
	n, err := c.Do(ctx, c.B().Zcard().Key(s.Keys().PlainIndex(0)).Build()).AsInt64()
	require.NoError(t, err)
	require.Zero(t, n, "the emptied set left the index")
}
