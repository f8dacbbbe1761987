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

// ErrNotEmpty is returned by BeginRestore when the namespace holds jobs.
var ErrNotEmpty = errors.New("namespace holds jobs")

// ScanAllJobs calls fn with the ids of every job of the namespace and the shard of each.
// It first reads each shard's packed jobs (Config.NoPack) from their hash, in pieces,
// then runs one SCAN over each primary, whose MATCH covers the job keys of all shards,
// and maps the hash tag of each key back to its shard, so each key of each primary is
// visited once however many shards the primary serves (a SCAN per shard would visit the
// primary's keys once per shard: Redis 7.0 has no SCAN of one slot). In that order, a
// job unpacked during the scan is listed: packed when its shard was read, or a job key
// from before the SCAN began. fn is called from the caller's goroutine, once per piece
// of a shard's packed jobs and once per shard that a SCAN batch holds jobs of, in shard
// order; it may keep jobIDs. Its error stops the scan and is returned. Keys of the
// namespace whose tag names no shard of it are left out. A job that exists throughout
// the scan is listed at least once: rarely twice, when Redis resized its table meanwhile.
// One created or removed meanwhile may or may not be.
func (s *Store) ScanAllJobs(ctx context.Context, fn func(id ID, jobIDs []string) error) error {
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
				if err := fn(id, ids); err != nil {
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
			ids := make([]ID, 0, len(batch))
			for id := range batch {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			for _, id := range ids {
				if err := fn(id, batch[id]); err != nil {
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

// scanPacked returns the ids of a piece of shard id's packed jobs (Config.NoPack), from
// an HSCAN of their hash, and the cursor of the next piece (0: none). A large shard's
// packed jobs are read in pieces: all at once would hold Redis up.
func (s *Store) scanPacked(ctx context.Context, id ID, cursor uint64, count int64) ([]string, uint64, error) {
	e, err := s.c.Do(ctx, s.c.B().Hscan().Key(s.keys.Packed(id)).Cursor(cursor).Count(count).Build()).AsScanEntry()
	if err != nil {
		return nil, 0, fmt.Errorf("packed jobs of shard %d: %w", id, err)
	}
	ids := make([]string, 0, len(e.Elements)/2)
	for k := 0; k+1 < len(e.Elements); k += 2 {
		// The field "" is no job: it keeps the hash a hash table (lua common's as_table).
		if e.Elements[k] != "" {
			ids = append(ids, e.Elements[k])
		}
	}
	return ids, e.Cursor, nil
}

// jobMatch is the SCAN pattern matching the job keys and cold job indexes (lua
// common's cold_index) of every shard of the namespace: `<ns>:v1:{*}:job*`, the
// namespace's glob characters escaped. It may match other keys of the namespace too (a
// '*' spans ':' and '}'); splitJobKey tells them apart.
func (s *Store) jobMatch() string {
	var b strings.Builder
	for _, c := range s.keys.global() {
		switch c {
		case '*', '?', '[', ']', '\\', '^':
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String() + "{*}:job*"
}

// shardIDs maps the key prefix of each shard to its id, for splitJobKey.
func (s *Store) shardIDs() map[string]ID {
	shards := make(map[string]ID, len(s.keys.prefixes))
	for i, p := range s.keys.prefixes {
		shards[p] = ID(i)
	}
	return shards
}

// splitJobKey returns the shard of key when it is the key of a job of one of the shards
// (keyed by their Keys.Prefix), `<prefix>job:<id>`, with the job id, or the key of one of
// their cold job indexes, `<prefix>jobs:<slot>`, with cold true.
func (s *Store) splitJobKey(shards map[string]ID, key string) (id ID, jobID string, cold, ok bool) {
	g := s.keys.global()
	if !strings.HasPrefix(key, g+"{") {
		return 0, "", false, false
	}
	end := strings.IndexByte(key[len(g):], '}')
	if end < 0 {
		return 0, "", false, false
	}
	prefix := key[:len(g)+end+1] + ":" // `<ns>:v1:{<tag>}:`, as Keys.Prefix
	id, ok = shards[prefix]
	switch rest := key[len(prefix):]; {
	case !ok:
		return 0, "", false, false
	case strings.HasPrefix(rest, "job:") && len(rest) > len("job:"):
		return id, rest[len("job:"):], false, true
	case rest == "jobs:packed":
		// Packed jobs are listed from their hash, in pieces (scanPacked).
		return 0, "", false, false
	case strings.HasPrefix(rest, "jobs:") && len(rest) > len("jobs:"):
		return id, "", true, true
	}
	return 0, "", false, false
}

// jobsOfKeys returns, per shard, the ids of the jobs that keys (a SCAN batch of
// jobMatch) name: a job key its job, a cold job index the cold jobs it holds (read in
// one pipeline). Other keys are left out.
func (s *Store) jobsOfKeys(ctx context.Context, shards map[string]ID, keys []string) (map[ID][]string, error) {
	batch := map[ID][]string{}
	var idx []string
	var idxShard []ID
	for _, k := range keys {
		id, jobID, cold, ok := s.splitJobKey(shards, k)
		switch {
		case !ok:
		case cold:
			idx, idxShard = append(idx, k), append(idxShard, id)
		default:
			batch[id] = append(batch[id], jobID)
		}
	}
	if len(idx) == 0 {
		return batch, nil
	}
	cmds := make(rueidis.Commands, len(idx))
	for i, k := range idx {
		cmds[i] = s.c.B().Hkeys().Key(k).Build()
	}
	for i, r := range s.c.DoMulti(ctx, cmds...) {
		ids, err := r.AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("read cold jobs %s: %w", idx[i], err)
		}
		batch[idxShard[i]] = append(batch[idxShard[i]], ids...)
	}
	return batch, nil
}

// ReadJobs reads whole jobs of shard id: each job with its hash and expiry in one atomic
// step (read_jobs), so each record is self-consistent; different jobs may be read at
// slightly different times. Jobs that do not exist are left out. The calls of one
// ReadJobs go in one pipeline.
func (s *Store) ReadJobs(ctx context.Context, id ID, jobIDs []string) ([]JobRecord, error) {
	recs, err := s.readJobsOf(ctx, map[ID][]string{id: jobIDs})
	return recs[id], err
}

// readJobsOf is ReadJobs for the jobs of several shards, in one pipeline.
func (s *Store) readJobsOf(ctx context.Context, jobIDs map[ID][]string) (map[ID][]JobRecord, error) {
	var calls []call
	var shardOf []ID
	bucket := strconv.FormatInt(s.bucketMs, 10)
	for id, ids := range jobIDs {
		for len(ids) > 0 {
			n := min(len(ids), readBatch)
			args := append([]string{s.keys.Prefix(id), bucket}, ids[:n]...)
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

// RestoreCounts are what RestoreJobs did with the jobs it was given.
type RestoreCounts struct {
	Restored int // written, their runs filed again
	Existed  int // left alone: a job with the id exists (a restore run again)
	Expired  int // skipped: their expiry time has passed
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
			r := recs[n]
			args = append(args, r.ID, strconv.FormatInt(r.ExpireAt, 10), strconv.Itoa(len(r.Fields)/2))
			args = append(args, r.Fields...)
			for _, f := range r.Fields {
				size += len(f)
			}
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

// Empty reports whether the namespace holds no job, scanning every primary until it meets
// one.
func (s *Store) Empty(ctx context.Context) (bool, error) {
	errFound := errors.New("found a job")
	err := s.ScanAllJobs(ctx, func(ID, []string) error { return errFound })
	if errors.Is(err, errFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("check the namespace is empty: %w", err)
	}
	return true, nil
}

// NamespaceSettings returns the shard count and bucket width that namespace ns was
// initialised with (see Open), or ok false when it was not initialised. It writes nothing.
func NamespaceSettings(ctx context.Context, c rueidis.Client, ns string) (shards int, bucket time.Duration, ok bool, err error) {
	f, err := c.Do(ctx, c.B().Hmget().Key(NewKeys(ns, nil).Meta()).Field("shards", "bucket").Build()).ToArray()
	if err == nil && len(f) != 2 {
		err = fmt.Errorf("reply of %d values, want 2", len(f))
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("read namespace %q: %w", ns, err)
	}
	if f[0].IsNil() {
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
// chooses): the namespace must hold no job (ErrNotEmpty otherwise), unless a restore of
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
		return false, fmt.Errorf("%w: %q (a restore writes into a namespace without jobs only)", ErrNotEmpty, s.cfg.Namespace)
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
