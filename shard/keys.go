package shard

import (
	"crypto/sha1"
	"strconv"
	"strings"
)

// SchemaVersion is the version of the data layout; an incompatible change bumps it. v2
// named the keys of the packed, cold and plain forms after their form and dropped what
// v1 read of layouts that no build writes any more (see Open for a v1 namespace).
const SchemaVersion = 2

// OldestSnapshotSchema is the oldest schema whose snapshots this build restores. A
// snapshot holds jobs as job hashes (every form is exported as the hash it stands for),
// and v2 changed no field of a job hash, so a v1 snapshot restores as it is.
const OldestSnapshotSchema = 1

// Keys builds every Redis key and channel name of a namespace. It is the only place key
// strings are built in Go; the Lua scripts derive a shard's keys from Prefix with the
// same names (each include declares those of its form; TestKeys_MatchTheScripts checks
// them). Shard keys look like `<ns>:v2:{<tag>}:<kind>[:<id>]`; the hash tag holds the
// shard only, so all keys of a shard share one Cluster slot. Global keys have no tag and
// are never touched by a shard script. Keys is immutable and safe for concurrent use.
type Keys struct {
	ns       string
	prefixes []string // per shard `<ns>:v2:{<tag>}:`
}

// NewKeys returns the key builder of namespace ns for the given shard tags.
func NewKeys(ns string, tags []string) *Keys {
	k := &Keys{ns: ns, prefixes: make([]string, len(tags))}
	for i, t := range tags {
		k.prefixes[i] = ns + ":v" + strconv.Itoa(SchemaVersion) + ":{" + t + "}:"
	}
	return k
}

func (k *Keys) global() string { return k.ns + ":v" + strconv.Itoa(SchemaVersion) + ":" }

// Prefix is the prefix of every key of shard id; scripts derive per-job keys from it.
func (k *Keys) Prefix(id ID) string { return k.prefixes[id] }

// Meta is the namespace record: shard count, bucket width, schema. // HASH
func (k *Keys) Meta() string { return k.global() + "meta" }

// Members lists live dispatchers; score = expiry ms. // ZSET
func (k *Keys) Members() string { return k.global() + "members" }

// Buckets indexes the shard's non-empty due buckets; score = bucket start ms. // ZSET
func (k *Keys) Buckets(id ID) string { return k.prefixes[id] + "buckets" }

// Due holds the runs due in one bucket; score = due ms. // ZSET
func (k *Keys) Due(id ID, bucket int64) string {
	return k.prefixes[id] + "due:" + strconv.FormatInt(bucket, 10)
}

// Ready holds a queue's ready runs; score = (9-priority)*1e13 + due ms. It also holds a
// pin scored +inf that keeps it a skiplist (lua common's READY_PIN). // ZSET
func (k *Keys) Ready(id ID, queue string) string { return k.prefixes[id] + "ready:" + queue }

// RunScoreMax is the highest score of a run in an inflight or ready set, for ranges by
// score that leave the set's pin (scored +inf) out. Deadlines are ms since 1970, ready
// scores (9-priority)*1e13 plus a due time in ms: below 1e17 for a few million years.
// ("(+inf" is the exact bound, but miniredis takes it as inclusive.)
const RunScoreMax = "1e17"

// Inflight holds claimed runs; score = visibility deadline ms. It also holds a pin
// scored +inf that keeps it a skiplist (lua common's INFLIGHT_PIN). // ZSET
func (k *Keys) Inflight(id ID) string { return k.prefixes[id] + "inflight" }

// Dead is the dead-letter set; score = when the run died, ms. // ZSET
func (k *Keys) Dead(id ID) string { return k.prefixes[id] + "dead" }

// Stats counts runs per queue on the shard: fields 's:<queue>' scheduled (in due buckets,
// plain sets or cold records),
// 'f:<queue>' in flight, 'd:<queue>' dead, 'n:<queue>' fired since creation. // HASH
func (k *Keys) Stats(id ID) string { return k.prefixes[id] + "stats" }

// Lease holds `owner:epoch` of the dispatcher owning the shard, with a TTL. // STRING
func (k *Keys) Lease(id ID) string { return k.prefixes[id] + "lease" }

// Epoch is the shard's fencing counter; it never expires. // STRING
func (k *Keys) Epoch(id ID) string { return k.prefixes[id] + "epoch" }

// Job holds a job's definition, its state, its runs (fields 'r<due ms>') and its recent
// history (field 'h', and 'hs' naming a one-time job's last, succeeded run). // HASH
func (k *Keys) Job(id ID, jobID string) string { return k.prefixes[id] + "job:" + jobID }

// Workflow is the hash of workflow wf on its shard (lua/include/workflow.lua).
func (k *Keys) Workflow(id ID, wf string) string { return k.prefixes[id] + "wf:" + wf }

// WorkflowDefinition is the hash of a scheduled workflow's running and buffered
// instances on its shard.
func (k *Keys) WorkflowDefinition(id ID, def string) string { return k.prefixes[id] + "wfd:" + def }

// The keys of the storage forms other than the job hash (lua/include/forms.lua lists the
// forms; docs/architecture.md shows how a job moves between them).

// PackedJobs is the hash of shard id's packed jobs (lua/include/packed.lua): job id ->
// "created|visibility|queue|priority|" and its definition record. // HASH
func (k *Keys) PackedJobs(id ID) string { return k.prefixes[id] + "packed:jobs" }

// PackedRuns is the hash of the run states of shard id's packed jobs: job id -> state
// while its run is in flight or after it succeeded. // HASH
func (k *Keys) PackedRuns(id ID) string { return k.prefixes[id] + "packed:runs" }

// PackedExpiry indexes the lists of succeeded packed jobs of shard id by the end of the
// bucket in which they expire (PackedExpiryList); score = bucket end ms. // ZSET
func (k *Keys) PackedExpiry(id ID) string { return k.prefixes[id] + "packed:expiry" }

// PackedExpiryList lists the ids of shard id's packed jobs that expire in bucket (the
// bucket's number: its start in ms / the bucket width). // LIST
func (k *Keys) PackedExpiryList(id ID, bucket int64) string {
	return k.PackedExpiry(id) + ":" + strconv.FormatInt(bucket, 10)
}

// Plain holds the plain runs (the scheduled runs of packed jobs) of shard id of one
// priority and queue (lua/include/plain.lua); score = due ms. // ZSET
func (k *Keys) Plain(id ID, priority int, queue string) string {
	return k.prefixes[id] + "plain:" + strconv.Itoa(priority) + ":" + queue
}

// PlainIndex indexes shard id's plain sets, as "<priority>:<queue>"; score = at most the
// due ms of the set's first run. // ZSET
func (k *Keys) PlainIndex(id ID) string { return k.prefixes[id] + "plain:index" }

// ColdBuckets indexes the buckets of shard id that hold cold jobs (lua/include/cold.lua);
// score = the bucket's start ms. // ZSET
func (k *Keys) ColdBuckets(id ID) string { return k.prefixes[id] + "cold:buckets" }

// ColdList holds the records of shard id's cold jobs due in bucket (its number). // LIST
func (k *Keys) ColdList(id ID, bucket int64) string {
	return k.prefixes[id] + "cold:" + strconv.FormatInt(bucket, 10)
}

// ColdSlots is how many cold indexes a shard has (lua cold's COLD_SLOTS).
const ColdSlots = 1024

// ColdIndex is one of the ColdSlots hashes of shard id that map a cold job's id to its
// bucket: the one of the job ids whose SHA-1's first 24 bits modulo ColdSlots are slot
// (ColdSlot). // HASH
func (k *Keys) ColdIndex(id ID, slot int) string {
	return k.prefixes[id] + coldIndexKind + strconv.Itoa(slot)
}

const coldIndexKind = "cold:index:"

// ColdSlot returns the slot of the cold index that holds job jobID when it is cold.
func ColdSlot(jobID string) int {
	sum := sha1.Sum([]byte(jobID))
	return int(uint32(sum[0])<<16|uint32(sum[1])<<8|uint32(sum[2])) % ColdSlots
}

// Fence is the key, in the same Cluster slot as key (a key of this namespace), that a
// write waiting for replicas sets right before its WAIT (see Durability): "1". A shard
// key's fence is `<ns>:v2:{<tag>}:fence`; a global key K's is `K:fence{K}`, whose hash
// tag is K itself. // STRING
func (k *Keys) Fence(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i:], '}'); j > 1 {
			return key[:i+j+1] + ":fence"
		}
	}
	return key + ":fence{" + key + "}"
}

// PausedQueues holds the queues workers must not claim from. // SET
func (k *Keys) PausedQueues() string { return k.global() + "paused" }

// SnapshotClaim is held by the process whose turn it is to export the namespace's periodic
// snapshot: its name, expiring after a period (see Store.ClaimSnapshotPeriod). // STRING
func (k *Keys) SnapshotClaim() string { return k.global() + "snapshot" }

// QueueChannel carries "pause <queue>" and "resume <queue>" when PausedQueues changes.
func (k *Keys) QueueChannel() string { return k.global() + "queues" }

// WakeChannel carries "<shard> <due ms>" when a run lands earlier than a shard's earliest.
func (k *Keys) WakeChannel() string { return k.global() + "wake" }

// ReadyChannel carries "<shard> <ms>" when a queue got ready runs on that shard (see
// ParseReady).
func (k *Keys) ReadyChannel(queue string) string { return k.global() + "ready:" + queue }

// CancelChannel carries "<shard> <member>" when a running run is cancelled.
func (k *Keys) CancelChannel() string { return k.global() + "cancel" }

// HoldChannel carries "<shard> <member>" when the job of a run that a worker claimed
// ahead of its start time is paused or changed: the worker hands the run back unless its
// handler has started.
func (k *Keys) HoldChannel() string { return k.global() + "hold" }

// RunMember is the member naming a run in the due, ready, inflight and dead sets.
func RunMember(jobID string, due int64) string { return jobID + ":" + strconv.FormatInt(due, 10) }

// SplitMember splits a run member into job id and due ms.
func SplitMember(member string) (jobID string, due int64, ok bool) {
	i := strings.LastIndexByte(member, ':')
	if i <= 0 {
		return "", 0, false
	}
	due, err := strconv.ParseInt(member[i+1:], 10, 64)
	return member[:i], due, err == nil
}

// Figures holds one queue's figures of one minute (minute = unix ms / 60000): field 'c'
// the queue's fired total when the minute was first sampled, 'n' runs whose attempt
// ended, 's' the sum of their lateness in ms, 'b<i>' the lateness histogram
// (LatenessBounds); it expires FiguresTTL after it was last written (figures.go). // HASH
func (k *Keys) Figures(queue string, minute int64) string {
	return k.global() + "fig:" + queue + ":" + strconv.FormatInt(minute, 10)
}

// Workers lists the workers seen recently; score = last seen ms (figures.go). // ZSET
func (k *Keys) Workers() string { return k.global() + "workers" }

// Session holds a dashboard session: "<scope>|<csrf token>|<who>", keyed by the SHA-256 (hex)
// of the session's cookie, with the session's TTL (sessions.go). // STRING
func (k *Keys) Session(sum string) string { return k.global() + "session:" + sum }

// Breaker is the circuit breaker of push target host (host:port), shared by every
// executor (lua/breaker_step.lua). Global: a single-key script, its own slot. // HASH
func (k *Keys) Breaker(host string) string { return k.global() + "breaker:" + host }

// Breakers lists the hosts whose breakers have counted a failure; score = ms of the
// last report (breakers.go). // ZSET
func (k *Keys) Breakers() string { return k.global() + "breakers" }

// Audit is the audit log: one entry per management action (who, what, result, from
// where), the newest AuditMax kept; the entry id's milliseconds are when (audit.go). // STREAM
func (k *Keys) Audit() string { return k.global() + "audit" }
