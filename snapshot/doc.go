// Package snapshot exports the jobs and workflows of a namespace to object storage and restores them:
// the periodic snapshots of tock's durability story (DESIGN.md §8), next to Redis AOF and
// replicas. Storage goes through gocloud.dev/blob: a local directory (file:///dir, or a
// plain path) or S3 and S3-compatible stores such as MinIO (s3://bucket?...); see
// OpenBucket.
//
// # Layout
//
// A snapshot is a folder named by its id, "<namespace>/<UTC start time>", e.g.
// tock/20260102T150405.123Z/, holding one file per shard and a manifest:
//
//	tock/20260102T150405.123Z/shard-0000.ndjson.gz
//	...
//	tock/20260102T150405.123Z/shard-0063.ndjson.gz
//	tock/20260102T150405.123Z/manifest.json
//
// A shard file is gzip-compressed JSON lines, one job per line: the fields of the job's
// Redis hash, which hold its definition, state, runs and history ("f", with the values
// that are not valid UTF-8 base64-encoded in "b"), and its expiry time ("exp"); or (format
// 2) one workflow per line: its hash's fields, its expiry time, and its nodes' jobs
// ("nodes"), read together in one atomic step (lua/read_workflows.lua) and restored
// together in one (lua/restore_workflows.lua), so that a restored workflow continues;
// see docs/snapshots.md. The manifest (see Manifest) is written last, so a folder without one is
// an incomplete snapshot; it records the format and data schema versions, the namespace,
// shard count, bucket width, paused queues, the export's start and end times, and per
// file its job count, byte size and SHA-256.
//
// # Consistency
//
// Export does not block Redis: it lists the jobs of every shard with an HSCAN of each
// shard's packed jobs and one SCAN per primary for job hashes and cold jobs' index hashes
// (which visits each key once however many shards the primary serves: the hash tag of a
// key names its shard), spools the ids per shard to temporary files (bounded memory), then
// reads the jobs in batches with a script that reads each job whole, whatever its form
// (lua/read_jobs.lua) as it writes each shard's file. Each job in a snapshot is therefore
// self-consistent, but jobs are read at different moments between the manifest's Started
// and Finished: a snapshot is a fuzzy point in time. A job created during the export may
// be missing, a job removed during it may be present, a job that changed may appear in its
// state before or after the change. Runs are not stored apart from their jobs: where a run
// is filed (due bucket, ready set, in flight, dead-letter set) follows from its job's hash.
//
// # Restore
//
// Restore reads the whole snapshot and checks every byte of it before it writes anything
// (manifest, file sizes, SHA-256, decompression, every record, record counts), and
// refuses an incomplete or damaged one with an error naming the file and the problem
// (*CorruptError). It refuses a target namespace that holds jobs or workflows, then
// writes the jobs with a script (lua/restore_jobs.lua) that files each run again as its
// state says, with these changes: runs in flight at the snapshot become ready again
// without using an attempt (delivery stays at least once: they may have finished after
// the snapshot); runs in flight of a cancelled job are dropped; finished jobs whose
// retention ended since are skipped. Queue counts are rebuilt to match what is
// restored. The script leaves a job that exists alone, so a restore that was
// interrupted is completed by running it again.
//
// # Retention
//
// Prune keeps the newest n complete snapshots of a namespace and deletes everything
// older, complete or not, but for incomplete snapshots started within IncompleteGrace
// (their export may still be running). RunPeriodic exports and prunes on an interval, for tock server.
package snapshot
