package shard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/lua"
)

// minColdAfter is the least Config.ColdAfter: a job due sooner is not worth packing and
// thawing again. The package's tests lower it (export_test.go) to see cold jobs thaw
// within seconds.
var minColdAfter = time.Minute

// DefaultColdAfter is Config.ColdAfter's default.
const DefaultColdAfter = 10 * time.Minute

// packArg is the create_jobs argument for Config.NoPack.
func (c Config) packArg() string {
	if c.NoPack {
		return "0"
	}
	return "1"
}

// coldMs is the create_jobs argument for Config.ColdAfter (0: never), thawMs fire_due's
// thaw time: cold jobs made before a change to a negative ColdAfter still thaw in time.
func (c Config) coldMs() string {
	return strconv.FormatInt(max(c.ColdAfter.Milliseconds(), 0), 10)
}

func (c Config) thawMs() string {
	if c.ColdAfter < 0 {
		return strconv.FormatInt(DefaultColdAfter.Milliseconds()/2, 10)
	}
	return strconv.FormatInt(c.ColdAfter.Milliseconds()/2, 10)
}

// Config configures a Store. The zero value is usable.
type Config struct {
	// Namespace prefixes every key and channel. Default "tock". 1 to 32 of
	// [A-Za-z0-9._~-]; tests use a unique one each.
	Namespace string
	// Shards is the shard count. Default 64, 1 to 4096. Fixed when the namespace is
	// initialised and recorded in Redis: Open refuses a different value.
	Shards int
	// BucketSize is the width of a due bucket. Default 1m. Fixed at initialisation too.
	BucketSize time.Duration
	// ColdAfter: a one-time job due further ahead than this when it is created is stored
	// cold, packed with the other cold jobs of its due bucket at about half a job hash's
	// memory, until the dispatcher thaws its bucket ColdAfter/2 before the bucket starts.
	// A cold job reads, lists and exports like any other; changing it thaws it first.
	// Default 10m, at least 1m; negative: never.
	ColdAfter time.Duration
	// NoPack stores every job as a job hash. By default a one-time job that is not cold
	// is packed: one value in a hash of its shard, its run's state in another, its
	// scheduled run in a plain set of its priority and queue, so that the fire, the claim
	// and the ack of many runs read and write once each, where job hashes cost a read and
	// a write per run (docs/architecture.md). Any change
	// to it other than a claim and a successful ack thaws it into its job hash first;
	// reads, lists and snapshots see it as that hash. Older versions of tock do not know
	// packed jobs: a worker of one drops a packed job's run as an orphan. A workflow
	// created with packing on packs its nodes' jobs as they are released, as it goes on
	// (its hash records it, and a snapshot keeps it), whatever the Config of the store
	// that ends its nodes; one created with NoPack never does.
	NoPack bool
	// History is how many recent runs each job keeps. Default 20.
	History int
	// Retention is how long finished one-time jobs (completed or cancelled) are kept.
	// Default 24h. Dead jobs stay until their dead-letter entry is removed.
	Retention time.Duration
	// MaxPayload bounds a job's payload in bytes. Default 1 MiB.
	MaxPayload int
	// MaxNodes bounds the nodes of one workflow. Default 10,000.
	MaxNodes int
	// Durability says what accepted writes wait for. Default: AOF and asynchronous
	// replication only. With Replicas > 0, Timeout defaults to 1s.
	Durability Durability
	// Clock is the local clock. Default time.Now. Tock's firing never depends on it (the
	// scripts use Redis TIME); it only seeds estimates of Redis's clock, corrected by a
	// measured offset. Tests set a skewed one.
	Clock func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = "tock"
	}
	if c.Shards == 0 {
		c.Shards = DefaultShards
	}
	if c.BucketSize == 0 {
		c.BucketSize = time.Minute
	}
	if c.ColdAfter == 0 {
		c.ColdAfter = DefaultColdAfter
	}
	if c.History == 0 {
		c.History = job.DefaultHistory
	}
	if c.Retention == 0 {
		c.Retention = job.DefaultRetention
	}
	if c.MaxNodes == 0 {
		c.MaxNodes = job.DefaultMaxNodes
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = job.DefaultMaxPayload
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Durability.Replicas > 0 && c.Durability.Timeout == 0 {
		c.Durability.Timeout = time.Second
	}
	return c
}

func (c Config) validate() error {
	if err := job.ValidateID("namespace", c.Namespace, 32); err != nil {
		return err
	}
	switch {
	case c.Shards < 1 || c.Shards > MaxShards:
		return fmt.Errorf("shards: must be 1 to %d, got %d", MaxShards, c.Shards)
	case c.BucketSize < time.Second || c.BucketSize > 24*time.Hour:
		return fmt.Errorf("bucket size: must be 1s to 24h, got %s", c.BucketSize)
	case c.ColdAfter > 0 && c.ColdAfter < minColdAfter:
		return fmt.Errorf("cold after: must be at least %s (or negative: never), got %s", strings.TrimSuffix(minColdAfter.String(), "0s"), c.ColdAfter)
	case c.History < 1 || c.History > 1000:
		return fmt.Errorf("history: must be 1 to 1000, got %d", c.History)
	case c.Retention < time.Second:
		return fmt.Errorf("retention: must be at least 1s, got %s", c.Retention)
	case c.MaxPayload < 0:
		return fmt.Errorf("max payload: must not be negative, got %d", c.MaxPayload)
	case c.Durability.Replicas < 0 || c.Durability.Replicas > MaxReplicas:
		return fmt.Errorf("durability: replicas must be 0 to %d, got %d", MaxReplicas, c.Durability.Replicas)
	case c.Durability.Replicas > 0 && c.Durability.Timeout < time.Millisecond:
		return fmt.Errorf("durability: timeout must be at least 1ms, got %s", c.Durability.Timeout)
	}
	return nil
}

// Store runs tock's scripts against one namespace in Redis (a server or a Cluster). It
// is the typed face of the lua package: one method per operation, reply decoding, and
// the signals (pub/sub) that follow state changes. A Store is safe for concurrent use
// and holds no goroutines; the rueidis client is the caller's to close.
type Store struct {
	c        rueidis.Client
	cfg      Config
	keys     *Keys
	scripts  *lua.Scripts
	bucketMs int64

	// initialised is true when Open recorded the namespace's settings (it was new).
	initialised bool

	// functions is true while the scripts run as Redis functions (FCALL of the lua
	// package's library), false on a server without them (miniredis, Redis before 7),
	// where they run with EVALSHA.
	functions atomic.Bool
	loadMu    sync.Mutex // one load of the library at a time; guards loadedAt
	loadedAt  time.Time  // when the library was last loaded

	clockMu    sync.Mutex
	offset     time.Duration // Redis TIME − local clock
	measuredAt time.Time
}

// loadScripts builds the scripts once per process and shares them between stores: they
// come from the embedded sources, so every load is the same, and lua.Scripts is
// read-only. A load expands and parses every include (seconds under the race detector,
// which every Open of a test paid).
var loadScripts = sync.OnceValues(lua.Load)

// Open initialises the namespace if it is new (recording shard count, bucket width and
// schema version at once, in one script) and returns a Store, or a *ConfigMismatchError
// when the namespace was initialised with other settings.
func Open(ctx context.Context, c rueidis.Client, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tags, err := Tags(cfg.Shards)
	if err != nil {
		return nil, err
	}
	scripts, err := loadScripts()
	if err != nil {
		return nil, err
	}
	s := &Store{c: c, cfg: cfg, keys: NewKeys(cfg.Namespace, tags), scripts: scripts, bucketMs: cfg.BucketSize.Milliseconds()}
	s.loadLibrary(ctx)
	if v, err := oldSchema(ctx, c, cfg.Namespace); err != nil {
		return nil, fmt.Errorf("open namespace %q: %w", cfg.Namespace, err)
	} else if v > 0 {
		return nil, &OldSchemaError{Namespace: cfg.Namespace, Schema: v}
	}
	want := []string{strconv.Itoa(cfg.Shards), strconv.FormatInt(s.bucketMs, 10), strconv.Itoa(SchemaVersion)}
	reply, err := s.exec1(ctx, call{scripts.InitNamespace, []string{s.keys.Meta()}, want}).ToArray()
	if err != nil {
		return nil, fmt.Errorf("open namespace %q: %w", cfg.Namespace, err)
	}
	if len(reply) != 4 {
		return nil, fmt.Errorf("open namespace %q: init_namespace replied %d values, want 4", cfg.Namespace, len(reply))
	}
	created, err := reply[0].AsInt64()
	if err != nil {
		return nil, fmt.Errorf("open namespace %q: %w", cfg.Namespace, err)
	}
	s.initialised = created == 1
	for i, f := range []string{"shards", "bucket", "schema"} {
		got, err := reply[i+1].ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			return nil, fmt.Errorf("open namespace %q: %w", cfg.Namespace, err)
		}
		if got != want[i] {
			return nil, &ConfigMismatchError{Namespace: cfg.Namespace, Setting: f, Stored: got, Given: want[i]}
		}
	}
	if err := s.measureClock(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// OldSchemaError is returned by Open when the namespace holds data in the layout of an
// earlier schema, which this build does not read: its keys (`<ns>:v<schema>:*`) are
// apart from this build's, so the jobs are there but invisible to it.
type OldSchemaError struct {
	Namespace string
	Schema    int
}

func (e *OldSchemaError) Error() string {
	return fmt.Sprintf("namespace %q holds jobs in data layout v%d, written by an earlier build of tock; this build "+
		"uses v%d and does not read them. To keep them: export a snapshot with the earlier build (tock snapshot "+
		"export), delete the keys %s:v%d:*, and restore the snapshot with this build (tock snapshot restore). "+
		"To drop them: delete those keys",
		e.Namespace, e.Schema, SchemaVersion, e.Namespace, e.Schema)
}

// oldSchema returns the earlier schema whose settings record namespace ns has, 0 when
// none. Open refuses such a namespace (OldSchemaError): an upgrade is never done in
// place, as a start-up that rewrote every job would hold Redis up for as long as the
// namespace is large, and the hot paths must not read two layouts. A namespace that holds
// both (the old one restored from) is refused too until the old keys are deleted, so
// that no job is left behind unseen.
func oldSchema(ctx context.Context, c rueidis.Client, ns string) (int, error) {
	for v := 1; v < SchemaVersion; v++ {
		n, err := c.Do(ctx, c.B().Exists().Key(ns+":v"+strconv.Itoa(v)+":meta").Build()).AsInt64()
		if err != nil {
			return 0, err
		}
		if n > 0 {
			return v, nil
		}
	}
	return 0, nil
}

// Initialised reports whether Open initialised the namespace: true when it was new and
// this Store recorded its settings, false when they were recorded already.
func (s *Store) Initialised() bool { return s.initialised }

// Functions reports whether the scripts run as Redis functions (FCALL), as on Redis 7
// and later, rather than with EVALSHA (miniredis, older Redis).
func (s *Store) Functions() bool { return s.functions.Load() }

// Shards returns the shard count.
func (s *Store) Shards() int { return s.cfg.Shards }

// Keys returns the key builder.
func (s *Store) Keys() *Keys { return s.keys }

// Config returns the effective configuration.
func (s *Store) Config() Config { return s.cfg }

// Client returns the Redis client.
func (s *Store) Client() rueidis.Client { return s.c }

// ShardOf returns the shard of a job id.
func (s *Store) ShardOf(jobID string) ID { return Of(jobID, s.cfg.Shards) }

// measureClock estimates the offset between Redis TIME and the local clock.
func (s *Store) measureClock(ctx context.Context) error {
	before := s.cfg.Clock()
	t, err := s.c.Do(ctx, s.c.B().Time().Build()).AsStrSlice()
	after := s.cfg.Clock()
	if err != nil || len(t) != 2 {
		return fmt.Errorf("read redis time: %v", err)
	}
	sec, _ := strconv.ParseInt(t[0], 10, 64)
	usec, _ := strconv.ParseInt(t[1], 10, 64)
	server := time.Unix(sec, usec*1000)
	local := before.Add(after.Sub(before) / 2)
	s.clockMu.Lock()
	s.offset = server.Sub(local)
	s.measuredAt = after
	s.clockMu.Unlock()
	return nil
}

// ServerNow estimates Redis's clock: the local clock corrected by the offset measured
// at most 30 s ago (measured again, one TIME round trip, when older).
func (s *Store) ServerNow(ctx context.Context) (time.Time, error) {
	s.clockMu.Lock()
	stale := s.cfg.Clock().Sub(s.measuredAt) > 30*time.Second
	s.clockMu.Unlock()
	if stale {
		if err := s.measureClock(ctx); err != nil {
			return time.Time{}, err
		}
	}
	return s.estimateNow(), nil
}

// estimateNow is the local clock corrected by the last measured offset, without
// measuring again.
func (s *Store) estimateNow() time.Time {
	s.clockMu.Lock()
	defer s.clockMu.Unlock()
	return s.cfg.Clock().Add(s.offset)
}

// candidates lists, as the scripts take them ("from,c1,c2,..." in ms), every occurrence
// of c after from = est−2s up to the first one after est+2s, where est estimates the
// server's time. The script uses the first occurrence after its own now, so an estimate
// a little off still picks the right occurrence, and one far off is detected (ErrClockSkew).
func candidates(c *job.Cron, est time.Time) (string, error) {
	return candidatesAfter(c, est, time.Time{})
}

// candidatesAfter is candidates for a job whose latest occurrence handled (its field
// 'lf', common's cron_floor) is floor: the list goes on past floor+2s, since the script
// files the first occurrence after the later of its now and floor. A floor ahead of the
// server's clock (one stepped back, say by a failover) then still finds one.
func candidatesAfter(c *job.Cron, est, floor time.Time) (string, error) {
	const margin = 2 * time.Second
	end := est.Add(margin)
	if floor.Add(margin).After(end) {
		end = floor.Add(margin)
	}
	t := est.Add(-margin)
	b := strconv.AppendInt(nil, t.UnixMilli(), 10)
	n := 0
	for ; n < 1024; n++ {
		t = c.Next(t)
		if t.IsZero() {
			break
		}
		b = append(b, ',')
		b = strconv.AppendInt(b, t.UnixMilli(), 10)
		if t.After(end) {
			return string(b), nil
		}
	}
	if n == 0 {
		return "", fmt.Errorf("cron %q has no occurrence in the next 5 years", c.Expr())
	}
	return string(b), nil
}

// call is one script invocation.
type call struct {
	script *lua.Script
	keys   []string
	args   []string
}

// exec runs the calls in one pipeline, as FCALLs of the script library (see
// loadLibrary) or with EVALSHA, runs again with EVAL those the server did not know, and
// retries (bounded) those that met TRYAGAIN, CLUSTERDOWN, MOVED or ASK during a slot
// migration or failover: such a script did not run, so running it again is safe.
func (s *Store) exec(ctx context.Context, calls ...call) []rueidis.RedisResult {
	out, _ := s.execute(ctx, false, calls)
	return out
}

// execReplicated is exec for the writes that Config.Durability covers: with Replicas > 0
// each call is also confirmed by that many replicas (see doReplicated), and the second
// result holds, per call, nil or a *ReplicationError (meaningful only when the call's
// own result is not an error). With Replicas 0 it is exec.
func (s *Store) execReplicated(ctx context.Context, calls ...call) ([]rueidis.RedisResult, []error) {
	out, errs := s.execute(ctx, s.cfg.Durability.Replicas > 0, calls)
	if errs == nil {
		errs = make([]error, len(calls))
	}
	return out, errs
}

// exec1Replicated runs one call with execReplicated.
func (s *Store) exec1Replicated(ctx context.Context, c call) (rueidis.RedisResult, error) {
	res, errs := s.execReplicated(ctx, c)
	return res[0], errs[0]
}

// execute is exec, and execReplicated when replicated (the errors are nil otherwise).
func (s *Store) execute(ctx context.Context, replicated bool, calls []call) ([]rueidis.RedisResult, []error) {
	out := make([]rueidis.RedisResult, len(calls))
	var replErrs []error
	if replicated {
		replErrs = make([]error, len(calls))
	}
	pending := make([]int, len(calls))
	for i := range calls {
		pending[i] = i
	}
	// How each call runs: FCALL while the server has the library, else EVALSHA, else
	// EVAL.
	const (
		viaFcall = iota
		viaEvalsha
		viaEval
	)
	via := make([]int, len(calls))
	if !s.functions.Load() {
		for i := range via {
			via[i] = viaEvalsha
		}
	}
	reloaded := false
	for attempt := 0; len(pending) > 0; attempt++ {
		cmds := make(rueidis.Commands, len(pending))
		for k, i := range pending {
			c := calls[i]
			switch via[i] {
			case viaFcall:
				cmds[k] = s.c.B().Fcall().Function(c.script.Fn).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()
			case viaEvalsha:
				cmds[k] = s.c.B().Evalsha().Sha1(c.script.SHA).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()
			default:
				cmds[k] = s.c.B().Eval().Script(c.script.Src).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()
			}
		}
		var res []rueidis.RedisResult
		if replicated {
			fences := make([]string, len(pending))
			for k, i := range pending {
				fences[k] = s.keys.Fence(calls[i].keys[0])
			}
			var errs []error
			res, errs = s.doReplicated(ctx, cmds, fences)
			for k, i := range pending {
				replErrs[i] = errs[k]
			}
		} else {
			res = s.c.DoMulti(ctx, cmds...)
		}
		var again []int
		missing := false
		for k, i := range pending {
			out[i] = res[k]
			re, ok := rueidis.IsRedisErr(res[k].Error())
			switch {
			case !ok:
			case via[i] == viaFcall && functionMissing(re):
				// A node without the library (restarted without persistence, new in the
				// cluster, flushed): it is loaded once more, then the call falls back to
				// EVALSHA. The function did not run.
				if reloaded {
					via[i] = viaEvalsha
				}
				missing = true
				again = append(again, i)
			case re.IsNoScript() && via[i] == viaEvalsha:
				via[i] = viaEval
				again = append(again, i)
			case redirected(re) && attempt < 20:
				again = append(again, i)
			}
		}
		if missing && !reloaded {
			reloaded = true
			// Without a load now (one was made less than a second ago, or none took),
			// the calls go straight to EVALSHA rather than meet the same error again.
			if !s.reloadLibrary(ctx) || !s.functions.Load() {
				for _, i := range again {
					if via[i] == viaFcall {
						via[i] = viaEvalsha
					}
				}
			}
		}
		pending = again
		if len(pending) > 0 && attempt > 0 {
			select {
			case <-ctx.Done():
				for _, i := range pending {
					out[i] = rueidis.NewErrorResult(ctx.Err())
				}
				return out, replErrs
			case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
			}
		}
	}
	return out, replErrs
}

// loadLibrary loads the script library on every node the client knows (a server, or the
// nodes of a Cluster; a replica refuses and gets it from its master) and turns FCALL on
// when at least one node took it, off when none did (miniredis and Redis before 7 have no
// functions: EVALSHA is used there). FUNCTION LOAD REPLACE makes a second load, by this or
// another process, harmless.
func (s *Store) loadLibrary(ctx context.Context) {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	s.loadLocked(ctx)
}

// reloadLibrary is loadLibrary for a call that found a node without the library, at most
// once a second: a node that cannot take it (an ACL that refuses FUNCTION LOAD) must not
// get the library sent with every call; its calls fall back to EVALSHA meanwhile. It
// reports whether it loaded now.
func (s *Store) reloadLibrary(ctx context.Context) bool {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	if time.Since(s.loadedAt) < time.Second {
		return false
	}
	s.loadLocked(ctx)
	return true
}

func (s *Store) loadLocked(ctx context.Context) {
	s.loadedAt = time.Now()
	loaded := false
	for _, n := range s.c.Nodes() {
		if err := n.Do(ctx, n.B().FunctionLoad().Replace().FunctionCode(s.scripts.Library).Build()).Error(); err == nil {
			loaded = true
		}
	}
	s.functions.Store(loaded)
}

// functionMissing reports whether FCALL failed because the node lacks the function.
func functionMissing(re *rueidis.RedisError) bool {
	return strings.Contains(re.Error(), "Function not found")
}

// redirected reports whether a command met a slot migration or failover and did not run:
// TRYAGAIN, CLUSTERDOWN, or a MOVED or ASK that reached the caller (a Cluster client
// follows them itself but on the connections of writes that wait for replicas, see
// doOnOneConn). Running it again is safe.
func redirected(re *rueidis.RedisError) bool {
	if _, ok := re.IsMoved(); ok {
		return true
	}
	if _, ok := re.IsAsk(); ok {
		return true
	}
	return re.IsTryAgain() || re.IsClusterDown()
}

// exec1 runs one call.
func (s *Store) exec1(ctx context.Context, c call) rueidis.RedisResult {
	return s.exec(ctx, c)[0]
}

// publish sends best-effort signals in one pipeline. Errors are dropped on purpose:
// pub/sub may lose messages anyway, and the dispatchers' and workers' sweeps recover.
func (s *Store) publish(ctx context.Context, msgs [][2]string) {
	if len(msgs) == 0 {
		return
	}
	cmds := make(rueidis.Commands, len(msgs))
	for i, m := range msgs {
		cmds[i] = s.c.B().Publish().Channel(m[0]).Message(m[1]).Build()
	}
	s.c.DoMulti(ctx, cmds...)
}

// readySignals appends a ready signal per queue: "<shard> <at>", where at is the Redis
// time (µs) by which the runs were ready, estimated from the server's clock plus a
// margin, on the late side. A worker whose claim of that shard ran before at knows the
// claim could not have seen those runs (see ParseReady). fire_due publishes its own
// signals from its script, stamped with its own clock.
func (s *Store) readySignals(msgs [][2]string, id ID, queues []string) [][2]string {
	if len(queues) == 0 {
		return msgs
	}
	at := s.estimateNow().Add(5 * time.Millisecond).UnixMicro()
	msg := strconv.Itoa(int(id)) + " " + strconv.FormatInt(at, 10)
	for _, q := range queues {
		msgs = append(msgs, [2]string{s.keys.ReadyChannel(q), msg})
	}
	return msgs
}

// ParseReady decodes a ready signal: the shard, and the Redis time (µs) by which its runs
// were ready (0 when the signal does not say). Microseconds order a signal against a
// claim of the same shard exactly: a claim that starts after the script that made the
// runs ready ended reads a later TIME, where milliseconds often tie and cost an extra,
// empty claim. A time in milliseconds (a signal of an older version) is converted.
func ParseReady(msg string, shards int) (id ID, at int64, ok bool) {
	sh, t, hasTime := strings.Cut(msg, " ")
	n, err := strconv.Atoi(sh)
	if err != nil || n < 0 || n >= shards {
		return 0, 0, false
	}
	if hasTime {
		if at, err = strconv.ParseInt(t, 10, 64); err != nil || at < 0 {
			return 0, 0, false
		}
		if at < 1e14 { // milliseconds: 1e14 µs is 1973, 1e14 ms is far beyond year 3000
			at *= 1000
		}
	}
	return ID(n), at, true
}

// holdSignals appends to msgs a hold signal for each run member of shard id: a run a
// worker claimed ahead of its start time whose job was paused or changed since.
func (s *Store) holdSignals(msgs [][2]string, id ID, members []string) [][2]string {
	for _, m := range members {
		msgs = append(msgs, [2]string{s.keys.HoldChannel(), strconv.Itoa(int(id)) + " " + m})
	}
	return msgs
}

func (s *Store) wakeSignal(id ID, due int64) [2]string {
	return [2]string{s.keys.WakeChannel(), strconv.Itoa(int(id)) + " " + strconv.FormatInt(due, 10)}
}

// Reply decoding helpers.

func arr(m rueidis.RedisMessage) []rueidis.RedisMessage {
	a, _ := m.ToArray()
	return a
}

func i64(m rueidis.RedisMessage) int64 {
	if v, err := m.AsInt64(); err == nil {
		return v
	}
	if s, err := m.ToString(); err == nil {
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return int64(f)
		}
	}
	return 0
}

func str(m rueidis.RedisMessage) string {
	s, _ := m.ToString()
	return s
}

func strs(m rueidis.RedisMessage) []string {
	s, _ := m.AsStrSlice()
	return s
}

func ms(t int64) time.Time {
	if t <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(t)
}

// dueTime returns the due time of a run from its ms. Unlike ms, 0 and negative values
// are times: a run always has one, and binaries that did not check job.MinAt stored
// runs due at or before 1970.
func dueTime(t int64) time.Time { return time.UnixMilli(t) }
