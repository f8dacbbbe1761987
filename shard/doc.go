// Package shard is tock's Redis layer: the partition of jobs into shards, the key layout,
// and a typed Store over the Lua scripts of package lua.
//
// A job belongs to shard jump(xxhash(id), S) (Of); S is fixed when a namespace is
// initialised (Open records it). Every key of a shard carries the shard's hash tag
// (Tags), so a shard lives in one Redis Cluster slot and every script runs atomically on
// one slot. Keys builds every key and channel name; keys.go is the only place key strings
// are built, and each builder's comment gives the key's Redis type.
//
// Store has one method per operation (Create, FireDue, Fire, ClaimMany, Extend,
// FinishMany, Reap, Cancel, Pause, Resume, Trigger, Update, RequeueDead, DeleteDead,
// ReadJobs, RestoreJobs, AcquireLeases, Heartbeat, ...). Each runs its script with FCALL
// of one function library on Redis 7 and later, or with EVALSHA and EVAL elsewhere,
// decodes the reply, maps negative reply codes to the errors of errors.go, and publishes
// the signals that follow a change (ready, wake, cancel, hold). Scripts read the clock
// with Redis TIME, so the caller's clock never decides when a run fires. Dispatcher
// scripts are fenced: they run only under the caller's shard lease (Lease, with its
// epoch).
//
// A job is stored in one of three forms: a job hash, packed (one value in a hash of its
// shard), or cold (one record in a list per due bucket). Reads see every job as the job
// hash it stands for; a change turns a packed or cold job into a job hash first.
//
// docs/architecture.md describes every key, which script reads and writes it, the life
// of a job and of a run, the clocks, and why each optimisation exists; the headers of
// lua/*.lua document each script's KEYS, ARGV and replies.
package shard
