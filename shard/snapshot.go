package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/tockhq/tock/job"
)

// What the snapshot package needs from a namespace: its job ids shard by shard, whole jobs
// read atomically, jobs written back with their runs filed again, and the marks of a
// restore under way and of the periodic export's period.

// JobRecord is one job as a snapshot holds it: the fields of its hash, which hold its
// definition, its state, its runs and its history (see Keys.Job and lua/include/common.lua),
// and its expiry time.
type JobRecord struct {
	ID string
	// Fields are the hash's field/value pairs, as stored.
	Fields []string
	// ExpireAt is when the job expires, in ms since the epoch on the Redis clock; 0 never.
	// Finished one-time jobs expire (Config.Retention).
	ExpireAt int64
}

// Check reports what in the record's fields a restore could not file as the scripts
// would have left it (RestoreJobs files each run from them): a field without a name, a
// state that is none of a job's, a queue that is no queue name, a priority that is no
// digit, a time or count that is no number, an active run list ('rl') or a run field
// ('r<due>') that is not of the scripts' form. The error names the job and the field. A
// record that passes may still hold a definition no create would accept; Check looks at
// what the restore and the scripts after it parse.
func (r JobRecord) Check() error {
	fail := func(f, v, why string) error {
		if len(v) > 64 {
			v = v[:64] + "..."
		}
		return fmt.Errorf("job %q: field %q: %q %s", r.ID, f, v, why)
	}
	if len(r.Fields)%2 != 0 {
		return fmt.Errorf("job %q: %d field names and values, want pairs", r.ID, len(r.Fields))
	}
	for k := 0; k < len(r.Fields); k += 2 {
		f, v := r.Fields[k], r.Fields[k+1]
		switch f {
		case "":
			return fail(f, v, "is the value of a field without a name")
		case "st":
			if !job.ValidState(job.State(v)) {
				return fail(f, v, "is no job state")
			}
		case "q":
			if v != "" && job.ValidateID("queue", v, job.MaxQueueLen) != nil {
				return fail(f, v, "is no queue name")
			}
		case "pr":
			if len(v) > 1 || (v != "" && (v[0] < '0' || v[0] > '9')) {
				return fail(f, v, "is no priority (a digit)")
			}
		case "sk":
			if v != "" && v != "at" && v != "cron" {
				return fail(f, v, "is no schedule kind (at or cron)")
			}
		case "nx", "cr", "bf", "ma", "ib", "mb", "to", "vt", "mt":
			if v != "" && !isUint(v) {
				return fail(f, v, "is no number")
			}
		case "mu", "ji":
			if _, err := strconv.ParseFloat(v, 64); v != "" && err != nil {
				return fail(f, v, "is no number")
			}
		case "rl":
			if v != "" && v != "," && !isRunList(v) {
				return fail(f, v, "is no list of due times (,d1,d2,)")
			}
		default:
			if f[0] != 'r' {
				continue
			}
			if !isUint(f[1:]) {
				return fail(f, v, "is a run field whose name is no due time (r<due ms>)")
			}
			if !isRunField(v) {
				return fail(f, v, "is no run (state|attempts|deliveries|token|worker|start|retry|error)")
			}
		}
	}
	return nil
}

// isUint reports whether s is a non-negative integer in decimal digits.
func isUint(s string) bool {
	if s == "" || len(s) > 18 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isRunList reports whether s is an active run list: ",d1,d2,", each a due time.
func isRunList(s string) bool {
	if len(s) < 3 || s[0] != ',' || s[len(s)-1] != ',' {
		return false
	}
	for _, d := range strings.Split(s[1:len(s)-1], ",") {
		if !isUint(d) {
			return false
		}
	}
	return true
}

// runStates are the states of a run field (common's run_get).
var runStates = map[string]bool{"ready": true, "running": true, "retrying": true, "paused": true,
	"buffered": true, "cancelled": true, "succeeded": true, "dead": true}

// isRunField reports whether v is a run field: "st|att|dl|tok|wk|sa|ra|er" with a known
// state and numbers of attempts and deliveries.
func isRunField(v string) bool {
	p := strings.SplitN(v, "|", 8)
	return len(p) == 8 && runStates[p[0]] && isUint(p[1]) && isUint(p[2])
}

// fieldMap returns the record's fields as a map.
func (r JobRecord) fieldMap() map[string]string {
	m := make(map[string]string, len(r.Fields)/2)
	for i := 0; i+1 < len(r.Fields); i += 2 {
		m[r.Fields[i]] = r.Fields[i+1]
	}
	return m
}

// Snapshot batches.
const (
	// readBatch bounds the jobs one read_jobs call reads.
	readBatch = 200
	// restoreBatch and restoreBatchBytes bound the jobs one restore_jobs call writes.
	restoreBatch      = 200
	restoreBatchBytes = 1 << 20
	// snapshotScanCount is the COUNT of the SCANs that list jobs (ScanAllJobs, Empty). It
	// is larger than List's: these SCANs run to the end of the keyspace.
	snapshotScanCount = 2000
)

// ErrNotEmpty is returned by BeginRestore when the namespace holds jobs or workflows.
var ErrNotEmpty = errors.New("namespace holds jobs or workflows")

// ScanAllJobs calls fn with the ids of every job of the namespace and the shard of each.
// It first reads each shard's packed jobs (Config.NoPack) from their hash, in pieces,
// then runs one SCAN over each primary, whose MATCH covers the job keys of all shards,
// and maps the hash tag of each key back to its shard, so each key of each primary is
// visited once however many shards the primary serves (a SCAN per shard would visit the
// primary's keys once per shard: Redis 7.0 has no SCAN of one slot). In that order, a
// job thawed during the scan is listed: packed when its shard was read, or a job key
// from before the SCAN began. fn is called from the caller's goroutine, once per piece
// of a shard's packed jobs and once per shard that a SCAN batch holds jobs of, in shard
// order; it may keep jobIDs. Its error stops the scan and is returned. Keys of the
// namespace whose tag names no shard of it are left out. A job that exists throughout
// the scan is listed at least once: rarely twice, when Redis resized its table meanwhile.
// One created or removed meanwhile may or may not be.
func (s *Store) ScanAllJobs(ctx context.Context, fn func(id ID, jobIDs []string) error) error {
	return s.scanAll(ctx, false, func(id ID, jobIDs, _ []string) error { return fn(id, jobIDs) })
}

// ScanJobsAndWorkflows is ScanAllJobs that also lists the namespace's workflows (their
// hashes, Keys.Workflow) in the same SCANs: fn is called with a shard's job ids, its
// workflow ids, or both, once per piece and shard as ScanAllJobs calls it. A workflow
// that exists throughout the scan is listed at least once.
func (s *Store) ScanJobsAndWorkflows(ctx context.Context, fn func(id ID, jobIDs, workflowIDs []string) error) error {
	return s.scanAll(ctx, true, fn)
}

func (s *Store) scanAll(ctx context.Context, workflows bool, fn func(id ID, jobIDs, workflowIDs []string) error) error {
	addrs, nodes, err := Primaries(ctx, s.c)
	if err != nil {
		return fmt.Errorf("scan jobs: %w", err)
	}
	for id := range ID(s.cfg.Shards) {
		for cursor := uint64(0); ; {
			ids, next, err := s.scanPacked(ctx, id, cursor, snapshotScanCount)
			if err != nil {
				return fmt.Errorf("scan jobs: %w", err)
			}
			if len(ids) > 0 {
				if err := fn(id, ids, nil); err != nil {
					return err
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	shards := s.shardIDs()
	match := s.jobMatch()
	if workflows {
		// `[jcw]*` adds the workflow hashes (wf:) and the definitions' (wfd:, left out).
		match = strings.TrimSuffix(match, "[jc]*") + "[jcw]*"
	}
	for _, addr := range addrs {
		n := nodes[addr]
		var cursor uint64
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(match).Count(snapshotScanCount).Build()).AsScanEntry()
			if err != nil {
				return fmt.Errorf("scan jobs on %s: %w", addr, err)
			}
			batch, err := s.jobsOfKeys(ctx, shards, e.Elements)
			if err != nil {
				return fmt.Errorf("scan jobs on %s: %w", addr, err)
			}
			var wfs map[ID][]string
			if workflows {
				wfs = s.workflowsOfKeys(shards, e.Elements)
			}
			ids := make([]ID, 0, len(batch)+len(wfs))
			for id := range batch {
				ids = append(ids, id)
			}
			for id := range wfs {
				if _, ok := batch[id]; !ok {
					ids = append(ids, id)
				}
			}
			slices.Sort(ids)
			for _, id := range ids {
				if err := fn(id, batch[id], wfs[id]); err != nil {
					return err
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// workflowsOfKeys returns, per shard, the ids of the workflows whose hashes keys name
// (`<prefix>wf:<id>`). Other keys are left out.
func (s *Store) workflowsOfKeys(shards map[string]ID, keys []string) map[ID][]string {
	out := map[ID][]string{}
	g := s.keys.global()
	for _, k := range keys {
		if !strings.HasPrefix(k, g+"{") {
			continue
		}
		end := strings.IndexByte(k[len(g):], '}')
		if end < 0 {
			continue
		}
		prefix := k[:len(g)+end+1] + ":"
		id, ok := shards[prefix]
		if rest, found := strings.CutPrefix(k[len(prefix):], "wf:"); ok && found && rest != "" {
			out[id] = append(out[id], rest)
		}
	}
	return out
}

// ReadJobs reads whole jobs of shard id: each job with its hash and expiry in one atomic
// step (read_jobs), so each record is self-consistent; different jobs may be read at
// slightly different times. Jobs that do not exist are left out. The calls of one
// ReadJobs go in one pipeline.
func (s *Store) ReadJobs(ctx context.Context, id ID, jobIDs []string) ([]JobRecord, error) {
	recs, err := s.readJobsOf(ctx, map[ID][]string{id: jobIDs}, false)
	return recs[id], err
}

// ReadJobsButNodes is ReadJobs for a snapshot: it leaves out the jobs of workflow nodes
// whose workflow exists, which ReadWorkflows reads with their workflow, in one step.
// The job of a node whose workflow is gone is read as any job.
func (s *Store) ReadJobsButNodes(ctx context.Context, id ID, jobIDs []string) ([]JobRecord, error) {
	recs, err := s.readJobsOf(ctx, map[ID][]string{id: jobIDs}, true)
	return recs[id], err
}

// readJobsOf is ReadJobs for the jobs of several shards, in one pipeline.
func (s *Store) readJobsOf(ctx context.Context, jobIDs map[ID][]string, butNodes bool) (map[ID][]JobRecord, error) {
	nodes := "0"
	if butNodes {
		nodes = "1"
	}
	var calls []call
	var shardOf []ID
	bucket := strconv.FormatInt(s.bucketMs, 10)
	for id, ids := range jobIDs {
		for len(ids) > 0 {
			n := min(len(ids), readBatch)
			args := append([]string{s.keys.Prefix(id), bucket, nodes}, ids[:n]...)
			calls = append(calls, call{s.scripts.ReadJobs, []string{s.keys.Buckets(id)}, args})
			shardOf = append(shardOf, id)
			ids = ids[n:]
		}
	}
	out := make(map[ID][]JobRecord, len(jobIDs))
	for i, r := range s.exec(ctx, calls...) {
		id := shardOf[i]
		reply, err := r.ToArray()
		if err != nil {
			return nil, fmt.Errorf("read jobs of shard %d: %w", id, err)
		}
		if len(reply)%3 != 0 {
			return nil, fmt.Errorf("read jobs of shard %d: reply of %d entries, want 3 per job", id, len(reply))
		}
		for k := 0; k < len(reply); k += 3 {
			rec := JobRecord{ID: str(reply[k]), Fields: strs(reply[k+2])}
			if exp := i64(reply[k+1]); exp > 0 {
				rec.ExpireAt = exp
			}
			out[id] = append(out[id], rec)
		}
	}
	return out, nil
}

// RestoreCounts are what RestoreJobs and RestoreWorkflows did with the jobs and
// workflows they were given. The job counts include workflows' node jobs.
type RestoreCounts struct {
	Restored int // jobs written, their runs filed again
	Existed  int // jobs left alone: a job with the id exists (a restore run again)
	Expired  int // jobs skipped: their expiry time has passed

	Workflows        int // workflows written, with their nodes
	WorkflowsExisted int // workflows left alone, with their nodes: the id exists
	WorkflowsExpired int // workflows skipped, with their nodes: their expiry time has passed
}

// Add adds o's counts to c's.
func (c *RestoreCounts) Add(o RestoreCounts) {
	c.Restored += o.Restored
	c.Existed += o.Existed
	c.Expired += o.Expired
	c.Workflows += o.Workflows
	c.WorkflowsExisted += o.WorkflowsExisted
	c.WorkflowsExpired += o.WorkflowsExpired
}

// RestoreJobs writes jobs read by ReadJobs into shard id and files their runs again from
// their hashes (restore_jobs): in-flight runs become ready again without using an attempt,
// as after a worker's hand-back, so they run at least once more; runs in flight when their
// job was cancelled are dropped; every other run goes back where its state says. A job
// whose id exists is left as it is, so running a restore again adds nothing; a job whose
// expiry time has passed is skipped. The calls go in one pipeline; dispatchers and workers
// are signalled as after a create. On error, the counts cover the calls that succeeded.
func (s *Store) RestoreJobs(ctx context.Context, id ID, recs []JobRecord) (RestoreCounts, error) {
	var calls []call
	for len(recs) > 0 {
		args := []string{s.keys.Prefix(id), strconv.FormatInt(s.bucketMs, 10), ""}
		n, size := 0, 0
		for ; n < len(recs) && n < restoreBatch && (n == 0 || size < restoreBatchBytes); n++ {
			var sz int
			args, sz = appendJobRecord(args, recs[n])
			size += sz
		}
		args[2] = strconv.Itoa(n)
		calls = append(calls, call{s.scripts.RestoreJobs, []string{s.keys.Buckets(id), s.keys.Dead(id)}, args})
		recs = recs[n:]
	}
	var counts RestoreCounts
	var firstErr error
	var msgs [][2]string
	for _, r := range s.exec(ctx, calls...) {
		reply, err := r.ToArray()
		if err == nil && len(reply) != 5 {
			err = fmt.Errorf("restore_jobs: reply of %d entries, want 5", len(reply))
		}
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("restore jobs into shard %d: %w", id, err)
			}
			continue
		}
		counts.Restored += int(i64(reply[0]))
		counts.Existed += int(i64(reply[1]))
		counts.Expired += int(i64(reply[2]))
		if wake := i64(reply[3]); wake > 0 {
			msgs = append(msgs, s.wakeSignal(id, wake))
		}
		msgs = s.readySignals(msgs, id, strs(reply[4]))
	}
	s.publish(ctx, msgs)
	return counts, firstErr
}

// Empty reports whether the namespace holds no job and no workflow, scanning every
// primary until it meets one. A workflow's hash outlives its nodes' jobs (each expires
// Retention after its own end): a namespace holding one is not empty, since a restore
// leaves the snapshot's workflow of its id out, with its nodes.
func (s *Store) Empty(ctx context.Context) (bool, error) {
	errFound := errors.New("found a job or a workflow")
	err := s.ScanJobsAndWorkflows(ctx, func(ID, []string, []string) error { return errFound })
	if errors.Is(err, errFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("check the namespace is empty: %w", err)
	}
	return true, nil
}

// NamespaceSettings returns the shard count and bucket width that namespace ns was
// initialised with (see Open), or ok false when it was not initialised; an OldSchemaError
// when it was, by an earlier build with another schema. It writes nothing.
func NamespaceSettings(ctx context.Context, c rueidis.Client, ns string) (shards int, bucket time.Duration, ok bool, err error) {
	f, err := c.Do(ctx, c.B().Hmget().Key(NewKeys(ns, nil).Meta()).Field("shards", "bucket").Build()).ToArray()
	if err == nil && len(f) != 2 {
		err = fmt.Errorf("reply of %d values, want 2", len(f))
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("read namespace %q: %w", ns, err)
	}
	if f[0].IsNil() {
		// A namespace of an earlier schema exists, but not for this build.
		if v, err := oldSchema(ctx, c, ns); err != nil {
			return 0, 0, false, fmt.Errorf("read namespace %q: %w", ns, err)
		} else if v > 0 {
			return 0, 0, false, &OldSchemaError{Namespace: ns, Schema: v}
		}
		return 0, 0, false, nil
	}
	n, err1 := strconv.Atoi(str(f[0]))
	b, err2 := strconv.ParseInt(str(f[1]), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, false, fmt.Errorf("read namespace %q: %w", ns, err)
	}
	return n, time.Duration(b) * time.Millisecond, true, nil
}

// restoreField is the field of the namespace record (Keys.Meta) naming the snapshot being
// restored, from BeginRestore to EndRestore.
const restoreField = "restore"

// BeginRestore readies the namespace for a restore of snapshot (a name the caller
// chooses): the namespace must hold no job and no workflow (ErrNotEmpty otherwise), unless a restore of
// the same snapshot began before and did not end (it was interrupted: resumed is then
// true, and restoring again completes it, RestoreJobs leaving alone the jobs written
// already). The namespace records the snapshot until EndRestore.
func (s *Store) BeginRestore(ctx context.Context, snapshot string) (resumed bool, err error) {
	meta := s.keys.Meta()
	cur, err := s.c.Do(ctx, s.c.B().Hget().Key(meta).Field(restoreField).Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		return false, fmt.Errorf("begin restore: %w", err)
	}
	if cur == snapshot {
		return true, nil
	}
	empty, err := s.Empty(ctx)
	if err != nil {
		return false, fmt.Errorf("begin restore: %w", err)
	}
	if !empty {
		if cur != "" {
			return false, fmt.Errorf("%w: %q (a restore of snapshot %s began and did not end: run that one again to complete it)",
				ErrNotEmpty, s.cfg.Namespace, cur)
		}
		return false, fmt.Errorf("%w: %q (a restore writes into a namespace without jobs or workflows only)", ErrNotEmpty, s.cfg.Namespace)
	}
	if err := s.c.Do(ctx, s.c.B().Hset().Key(meta).FieldValue().FieldValue(restoreField, snapshot).Build()).Error(); err != nil {
		return false, fmt.Errorf("begin restore: %w", err)
	}
	return false, nil
}

// EndRestore records that the restore begun by BeginRestore is complete.
func (s *Store) EndRestore(ctx context.Context) error {
	if err := s.c.Do(ctx, s.c.B().Hdel().Key(s.keys.Meta()).Field(restoreField).Build()).Error(); err != nil {
		return fmt.Errorf("end restore: %w", err)
	}
	return nil
}

// ClaimSnapshotPeriod claims the current period of the periodic export for owner: true
// when no other process claimed a period in the last period (then owner exports, and the
// others skip until the claim expires). It keeps several servers exporting the same
// namespace from each writing a snapshot every period.
func (s *Store) ClaimSnapshotPeriod(ctx context.Context, owner string, period time.Duration) (bool, error) {
	err := s.c.Do(ctx, s.c.B().Set().Key(s.keys.SnapshotClaim()).Value(owner).Nx().
		Px(period).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim the snapshot period: %w", err)
	}
	return true, nil
}

// appendJobRecord appends a job record as restore_jobs and restore_workflows take it
// (id, expiry, field count, fields) and returns the bytes of its fields.
func appendJobRecord(args []string, r JobRecord) ([]string, int) {
	args = append(args, r.ID, strconv.FormatInt(r.ExpireAt, 10), strconv.Itoa(len(r.Fields)/2))
	args = append(args, r.Fields...)
	size := 0
	for _, f := range r.Fields {
		size += len(f)
	}
	return args, size
}
