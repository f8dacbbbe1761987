package shard_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

func TestParseDurability(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want shard.Durability
		err  string
	}{
		{"", shard.Durability{}, ""},
		{"async", shard.Durability{}, ""},
		{"replicas:1", shard.Durability{Replicas: 1}, ""},
		{"replicas:16", shard.Durability{Replicas: 16}, ""},
		{"replicas:0", shard.Durability{}, "from 1 to 16"},
		{"replicas:17", shard.Durability{}, "from 1 to 16"},
		{"replicas:x", shard.Durability{}, "from 1 to 16"},
		{"sync", shard.Durability{}, "want async or replicas:N"},
	} {
		got, err := shard.ParseDurability(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
		if tc.in != "" {
			require.Equal(t, tc.in, got.String())
		}
	}
}

func TestOpen_DurabilityDefaultsAndLimits(t *testing.T) {
	t.Parallel()
	_, c := redistest.Mini(t)
	ctx := context.Background()
	s, err := shard.Open(ctx, c, shard.Config{Durability: shard.Durability{Replicas: 1}})
	require.NoError(t, err)
	require.Equal(t, shard.Durability{Replicas: 1, Timeout: time.Second}, s.Config().Durability)
	s, err = shard.Open(ctx, c, shard.Config{})
	require.NoError(t, err)
	require.Equal(t, shard.Durability{}, s.Config().Durability)
	_, err = shard.Open(ctx, c, shard.Config{Durability: shard.Durability{Replicas: 17}})
	require.ErrorContains(t, err, "durability: replicas must be 0 to 16")
	_, err = shard.Open(ctx, c, shard.Config{Durability: shard.Durability{Replicas: 1, Timeout: time.Microsecond}})
	require.ErrorContains(t, err, "durability: timeout")
}

func TestKeys_FenceSharesTheSlot(t *testing.T) {
	t.Parallel()
	tags, err := shard.Tags(8)
	require.NoError(t, err)
	k := shard.NewKeys("tock", tags)
	for id := range shard.ID(8) {
		for _, key := range []string{k.Buckets(id), k.Dead(id), k.Job(id, "a:{b}"), k.PackedJobs(id), k.PackedRuns(id),
			k.PackedExpiry(id), k.PackedExpiryList(id, 7), k.Plain(id, 5, "q"), k.PlainIndex(id), k.ColdBuckets(id),
			k.ColdList(id, 7), k.ColdIndex(id, 9)} {
			f := k.Fence(key)
			require.Equal(t, k.Prefix(id)+"fence", f)
			require.Equal(t, shard.Slot(key), shard.Slot(f), key)
		}
	}
	f := k.Fence(k.PausedQueues())
	require.Equal(t, "tock:v2:paused:fence{tock:v2:paused}", f)
	require.Equal(t, shard.Slot(k.PausedQueues()), shard.Slot(f))
}

// recorder is a rueidis client that records the names of the commands sent through it.
type recorder struct {
	rueidis.Client
	mu   sync.Mutex
	sent map[string]int
}

func (r *recorder) note(cmds ...rueidis.Completed) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cmds {
		r.sent[c.Commands()[0]]++
	}
}

func (r *recorder) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	r.note(cmd)
	return r.Client.Do(ctx, cmd)
}

func (r *recorder) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	r.note(cmds...)
	return r.Client.DoMulti(ctx, cmds...)
}

func (r *recorder) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent[name]
}

// everyWrite makes each write that Durability covers once, on jobs named prefix+…, and
// returns each one's error by operation.
func everyWrite(t *testing.T, s *shard.Store, prefix string) map[string]error {
	t.Helper()
	ctx := context.Background()
	out := map[string]error{}
	a, b, c := prefix+"a", prefix+"b", prefix+"c"
	_, out["create"] = s.Create(ctx, []*job.Job{
		{ID: a, Type: "t", Schedule: job.Schedule{Delay: time.Hour}},
		{ID: b, Type: "t", Schedule: job.Schedule{Now: true}, Retry: job.RetryPolicy{MaxAttempts: 1}},
		{ID: c, Type: "t", Schedule: job.Schedule{Cron: "0 0 1 1 *"}},
	})
	// Claims and fails do not wait: kill b's run to get a dead run.
	kill := func() string {
		claimed, err := s.Claim(ctx, s.ShardOf(b), "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		errs, err := s.FinishRuns(ctx, claimed[0].Shard, []shard.Finish{{Member: claimed[0].Member, Token: claimed[0].Token, Outcome: shard.Failed}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		return claimed[0].Member
	}
	dead := kill()
	_, _, out["pause"] = s.Pause(ctx, a)
	_, _, out["resume"] = s.Resume(ctx, a)
	pri := 7
	_, out["update"] = s.Update(ctx, a, shard.Update{Priority: &pri})
	_, out["trigger"] = s.Trigger(ctx, c)
	_, _, out["cancel"] = s.Cancel(ctx, c)
	out["requeue dead"] = s.RequeueDead(ctx, dead)
	out["delete dead"] = s.DeleteDead(ctx, kill())
	_, out["pause queue"] = s.PauseQueue(ctx, "mail")
	_, out["resume queue"] = s.ResumeQueue(ctx, "mail")
	return out
}

func requireNotReplicated(t *testing.T, err error, want, got int) {
	t.Helper()
	require.ErrorIs(t, err, shard.ErrNotReplicated)
	var re *shard.ReplicationError
	require.ErrorAs(t, err, &re)
	require.Equal(t, want, re.Want, err.Error())
	require.Equal(t, got, re.Got, err.Error())
	require.NoError(t, re.Err)
	require.ErrorContains(t, err, fmt.Sprintf("%d of %d replica(s) confirmed", got, want))
}

func TestDurability_AsyncSendsNoWait(t *testing.T) {
	t.Parallel()
	m, c := redistest.Mini(t)
	rec := &recorder{Client: c, sent: map[string]int{}}
	s, err := shard.Open(context.Background(), rec, shard.Config{Shards: 4})
	require.NoError(t, err)
	for op, err := range everyWrite(t, s, "j") {
		require.NoError(t, err, op)
	}
	require.Zero(t, rec.count("WAIT"))
	for _, k := range m.Keys() {
		require.NotContains(t, k, "fence")
	}
}

// Miniredis answers WAIT with 0, as a server without replicas does: every covered write
// is applied but reported as not replicated.
func TestDurability_NoReplicaConfirms(t *testing.T) {
	t.Parallel()
	_, c := redistest.Mini(t)
	rec := &recorder{Client: c, sent: map[string]int{}}
	s, err := shard.Open(context.Background(), rec, shard.Config{Shards: 4, Durability: shard.Durability{Replicas: 1}})
	require.NoError(t, err)
	errs := everyWrite(t, s, "j")
	require.Len(t, errs, 10)
	for op, err := range errs {
		require.Error(t, err, op)
		requireNotReplicated(t, err, 1, 0)
	}
	require.GreaterOrEqual(t, rec.count("WAIT"), 10) // a script the server did not know yet waits again with EVAL
	// The writes were applied all the same.
	info, err := s.Get(context.Background(), "jc")
	require.NoError(t, err)
	require.Equal(t, job.StateCancelled, info.State)

	// A batch reports every item; a retry of a create that exists is not confirmed either.
	res, err := s.Create(context.Background(), []*job.Job{
		{ID: "ja", Type: "t", Schedule: job.Schedule{Delay: time.Hour}},
		{ID: "new", Type: "t", Schedule: job.Schedule{Delay: time.Hour}},
		{ID: "bad", Type: ""},
	})
	requireNotReplicated(t, err, 1, 0)
	require.False(t, res[0].Created)
	requireNotReplicated(t, res[0].Err, 1, 0)
	require.True(t, res[1].Created)
	requireNotReplicated(t, res[1].Err, 1, 0)
	var fe *job.FieldError
	require.ErrorAs(t, res[2].Err, &fe)
}

// openOn opens a store on b's first address with cfg; namespace "dur" (the servers are
// the test's own).
func openOn(t *testing.T, b redistest.Backend, cfg shard.Config) *shard.Store {
	t.Helper()
	cfg.Namespace = "dur"
	if cfg.Shards == 0 {
		cfg.Shards = 8
	}
	s, err := shard.Open(context.Background(), b.Client(t), cfg)
	require.NoError(t, err)
	return s
}

func TestDurability_ReplicaSet(t *testing.T) {
	t.Parallel()
	rs := redistest.StartReplicaSet(t, 1)
	ctx := context.Background()
	replica := rs.Replica(0).Client(t)
	// onReplica reports whether the replica holds the job: its hash, or packed.
	onReplica := func(s *shard.Store, jobID string) bool {
		id := s.ShardOf(jobID)
		n, err := replica.Do(ctx, replica.B().Exists().Key(s.Keys().Job(id, jobID)).Build()).AsInt64()
		require.NoError(t, err)
		p, err := replica.Do(ctx, replica.B().Hexists().Key(s.Keys().PackedJobs(id)).Field(jobID).Build()).AsInt64()
		require.NoError(t, err)
		return n+p == 1
	}

	t.Run("Confirmed", func(t *testing.T) {
		s := openOn(t, rs.Backend(), shard.Config{Durability: shard.Durability{Replicas: 1, Timeout: time.Minute}})
		for op, err := range everyWrite(t, s, "ok-") {
			require.NoError(t, err, op)
		}
		// A confirmed write is on the replica when the call returns.
		var jobs []*job.Job
		for i := range 50 {
			jobs = append(jobs, &job.Job{ID: fmt.Sprintf("batch-%d", i), Type: "t", Schedule: job.Schedule{Delay: time.Minute}})
		}
		res, err := s.Create(ctx, jobs)
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err)
			require.True(t, onReplica(s, r.ID), r.ID)
		}
	})

	t.Run("FewerReplicasThanAskedFor", func(t *testing.T) {
		s := openOn(t, rs.Backend(), shard.Config{Durability: shard.Durability{Replicas: 2, Timeout: time.Second}})
		res, err := s.Create(ctx, []*job.Job{{ID: "two", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
		requireNotReplicated(t, err, 2, 1)
		require.True(t, res[0].Created)
		_, err = s.Get(ctx, "two")
		require.NoError(t, err)
		_, _, err = s.Cancel(ctx, "two")
		requireNotReplicated(t, err, 2, 1)
	})

	t.Run("FrozenReplica", func(t *testing.T) {
		// A frozen replica confirms nothing, however long the wait.
		d := shard.Durability{Replicas: 1, Timeout: 100 * time.Millisecond}
		s := openOn(t, rs.Backend(), shard.Config{Durability: d})
		other := openOn(t, rs.Backend(), shard.Config{Durability: d}) // another process: its own connections
		require.NoError(t, rs.Freeze(0))
		thawed := false
		t.Cleanup(func() {
			if !thawed {
				_ = rs.Thaw(0)
			}
		})
		create := func(s *shard.Store) (shard.CreateResult, error) {
			res, err := s.Create(ctx, []*job.Job{{ID: "frozen", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
			return res[0], err
		}
		r, err := create(s)
		requireNotReplicated(t, err, 1, 0)
		require.True(t, r.Created)
		// The retry changes nothing, but must not be confirmed before the replica holds
		// the job, also on connections that never wrote it.
		r, err = create(other)
		requireNotReplicated(t, err, 1, 0)
		require.False(t, r.Created)

		require.NoError(t, rs.Thaw(0))
		thawed = true
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		require.NoError(t, rs.WaitSynced(wctx))
		patient := openOn(t, rs.Backend(), shard.Config{Durability: shard.Durability{Replicas: 1, Timeout: time.Minute}})
		r, err = create(patient)
		require.NoError(t, err)
		require.False(t, r.Created)
		require.True(t, onReplica(s, "frozen"))
	})
}

func TestDurability_ClusterWaitsOnEachShardsMaster(t *testing.T) {
	t.Parallel()
	tp := redistest.StartTopology(t, redistest.TopologyOptions{Masters: 3, Replicas: 1})
	ctx := context.Background()
	b := redistest.Backend{Name: redistest.Cluster, Addrs: tp.Seeds()}
	d := shard.Durability{Replicas: 1, Timeout: time.Minute}
	s := openOn(t, b, shard.Config{Shards: 16, Durability: d})
	for op, err := range everyWrite(t, s, "ok-") {
		require.NoError(t, err, op)
	}

	// Freeze the replica of the master that holds the paused-queues key: the writes to
	// that master's shards fail, the others succeed.
	master, onMaster := "", map[string]bool{}
	nodes := map[string]rueidis.Client{}
	node := func(addr string) rueidis.Client {
		if nodes[addr] == nil {
			nodes[addr] = redistest.Backend{Name: redistest.Server, Addrs: []string{addr}}.Client(t)
		}
		return nodes[addr]
	}
	// holds reports whether the master at addr serves key's slot.
	holds := func(addr, key string) bool {
		c := node(addr)
		_, err := c.Do(ctx, c.B().Exists().Key(key).Build()).AsInt64()
		if err != nil {
			require.ErrorContains(t, err, "MOVED")
			return false
		}
		return true
	}
	for _, m := range tp.Masters() {
		if holds(m.Addr, s.Keys().PausedQueues()) {
			master = m.Addr
		}
	}
	require.NotEmpty(t, master)
	var frozen []*redistest.Node
	_, port, _ := strings.Cut(master, ":")
	for _, n := range tp.Nodes {
		if n.Addr == master {
			continue
		}
		c := node(n.Addr)
		repl, err := c.Do(ctx, c.B().Info().Section("replication").Build()).ToString()
		require.NoError(t, err)
		if strings.Contains(repl, "master_port:"+port+"\r\n") {
			frozen = append(frozen, n)
		}
	}
	require.Len(t, frozen, 1)
	// Open before the freeze: the client dials every seed address, and a frozen node
	// accepts connections but never answers.
	short := openOn(t, b, shard.Config{Shards: 16, Durability: shard.Durability{Replicas: 1, Timeout: time.Second}})
	require.NoError(t, frozen[0].Freeze())
	t.Cleanup(func() { _ = frozen[0].Thaw() })

	var jobs []*job.Job
	for i := 0; len(jobs) < 16*4; i++ {
		id := fmt.Sprintf("c-%d", i)
		jobs = append(jobs, &job.Job{ID: id, Type: "t", Schedule: job.Schedule{Delay: time.Hour}})
		onMaster[id] = holds(master, short.Keys().Job(short.ShardOf(id), id))
	}
	res, err := short.Create(ctx, jobs)
	require.Error(t, err)
	failed := 0
	for _, r := range res {
		if onMaster[r.ID] {
			requireNotReplicated(t, r.Err, 1, 0)
			failed++
		} else {
			require.NoError(t, r.Err, r.ID)
		}
		require.True(t, r.Created, r.ID)
	}
	require.NotZero(t, failed)
	require.Less(t, failed, len(jobs))
	_, err = short.PauseQueue(ctx, "mail")
	requireNotReplicated(t, err, 1, 0)
	_, _, err = short.Pause(ctx, "ok-a")
	if holds(master, short.Keys().Job(short.ShardOf("ok-a"), "ok-a")) {
		requireNotReplicated(t, err, 1, 0)
	} else {
		require.NoError(t, err)
	}
}

func TestReplicationError_Messages(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("create jobs on shard 3: %w", &shard.ReplicationError{Want: 2, Got: 1, Timeout: time.Second})
	require.EqualError(t, err, "create jobs on shard 3: 1 of 2 replica(s) confirmed the write within 1s")
	require.ErrorIs(t, err, shard.ErrNotReplicated)
	cause := errors.New("connection reset")
	err = &shard.ReplicationError{Want: 1, Err: cause}
	require.EqualError(t, err, "wait for 1 replica(s): connection reset")
	require.ErrorIs(t, err, shard.ErrNotReplicated)
	require.ErrorIs(t, err, cause)
}

// A write whose slot moved to another master since the client last read the slot map is
// answered MOVED. Its WAIT must be the new master's, on the connection that made the
// write: a cluster DoMulti would follow the MOVED of the script and of the fence to other
// connections, leave the keyless WAIT on the old master (whose replica confirms it at
// once) and confirm a write that no replica of the new master holds.
func TestDurability_ClusterSlotMovedIsWaitedForOnTheNewMaster(t *testing.T) {
	t.Parallel()
	tp := redistest.StartTopology(t, redistest.TopologyOptions{Masters: 3, Replicas: 1})
	ctx := context.Background()
	b := redistest.Backend{Name: redistest.Cluster, Addrs: tp.Seeds()}
	s := openOn(t, b, shard.Config{Shards: 16, Durability: shard.Durability{Replicas: 1, Timeout: time.Second}})

	nodes := map[string]rueidis.Client{}
	do := func(addr string, args ...string) rueidis.RedisResult {
		if nodes[addr] == nil {
			nodes[addr] = redistest.Backend{Name: redistest.Server, Addrs: []string{addr}}.Client(t)
		}
		c := nodes[addr]
		return c.Do(ctx, c.B().Arbitrary(args[0]).Args(args[1:]...).Build())
	}
	var masters []string
	for _, m := range tp.Masters() {
		masters = append(masters, m.Addr)
	}
	// owner returns the master that CLUSTER SLOTS names for slot.
	owner := func(slot int) string {
		ranges, err := do(masters[0], "CLUSTER", "SLOTS").ToArray()
		require.NoError(t, err)
		for _, r := range ranges {
			f, err := r.ToArray()
			require.NoError(t, err)
			lo, _ := f[0].AsInt64()
			hi, _ := f[1].AsInt64()
			if int64(slot) >= lo && int64(slot) <= hi {
				p, err := f[2].ToArray()
				require.NoError(t, err)
				host, _ := p[0].ToString()
				port, _ := p[1].AsInt64()
				return host + ":" + strconv.FormatInt(port, 10)
			}
		}
		t.Fatalf("no master serves slot %d", slot)
		return ""
	}
	id := s.ShardOf("warm")
	shardSlot, pausedSlot := shard.Slot(s.Keys().Prefix(id)), shard.Slot(s.Keys().PausedQueues())
	// to, the master both slots move to, serves neither now.
	var to string
	for _, m := range masters {
		if m != owner(shardSlot) && m != owner(pausedSlot) {
			to = m
		}
	}
	require.NotEmpty(t, to)
	toHost, toPort, _ := strings.Cut(to, ":")
	toID, err := do(to, "CLUSTER", "MYID").ToString()
	require.NoError(t, err)
	// move moves slot and its keys to to, as redis-cli --cluster reshard does.
	move := func(slot int) {
		n := strconv.Itoa(slot)
		from := owner(slot)
		fromID, err := do(from, "CLUSTER", "MYID").ToString()
		require.NoError(t, err)
		require.NoError(t, do(to, "CLUSTER", "SETSLOT", n, "IMPORTING", fromID).Error())
		require.NoError(t, do(from, "CLUSTER", "SETSLOT", n, "MIGRATING", toID).Error())
		for {
			keys, err := do(from, "CLUSTER", "GETKEYSINSLOT", n, "100").AsStrSlice()
			require.NoError(t, err)
			if len(keys) == 0 {
				break
			}
			require.NoError(t, do(from, append([]string{"MIGRATE", toHost, toPort, "", "0", "10000", "KEYS"}, keys...)...).Error())
		}
		require.NoError(t, do(to, "CLUSTER", "SETSLOT", n, "NODE", toID).Error())
		for _, m := range masters {
			if m != to {
				require.NoError(t, do(m, "CLUSTER", "SETSLOT", n, "NODE", toID).Error())
			}
		}
	}

	// The client reads the slot map, and the old masters' connections write.
	res, err := s.Create(ctx, []*job.Job{{ID: "warm", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
	require.NoError(t, err)
	require.True(t, res[0].Created)
	_, err = s.PauseQueue(ctx, "mail")
	require.NoError(t, err)

	// The new master's replica confirms nothing from now on.
	var frozen *redistest.Node
	for _, n := range tp.Nodes {
		repl, err := do(n.Addr, "INFO", "replication").ToString()
		require.NoError(t, err)
		if strings.Contains(repl, "master_port:"+toPort+"\r\n") {
			frozen = n
		}
	}
	require.NotNil(t, frozen)
	require.NoError(t, frozen.Freeze())
	t.Cleanup(func() { _ = frozen.Thaw() })

	move(shardSlot)
	var moved string
	for i := 0; moved == ""; i++ {
		if c := fmt.Sprintf("moved-%d", i); s.ShardOf(c) == id {
			moved = c
		}
	}
	res, err = s.Create(ctx, []*job.Job{{ID: moved, Type: "t", Schedule: job.Schedule{Delay: time.Minute}}})
	requireNotReplicated(t, err, 1, 0)
	require.True(t, res[0].Created)
	requireNotReplicated(t, res[0].Err, 1, 0)
	n, err := do(to, "HEXISTS", s.Keys().PackedJobs(id), moved).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the job (packed) is on the new master")

	// The same for a queue pause (not a script), after the client's map was refreshed.
	move(pausedSlot)
	_, err = s.ResumeQueue(ctx, "mail")
	requireNotReplicated(t, err, 1, 0)
	n, err = do(to, "SISMEMBER", s.Keys().PausedQueues(), "mail").AsInt64()
	require.NoError(t, err)
	require.Zero(t, n, "the queue is resumed on the new master")
}
