package snapshot_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/snapshot"
)

// corruptBundle is a seeded namespace exported to a local directory, and an empty
// namespace to restore into.
type corruptBundle struct {
	src, dst *shard.Store
	bk       *blob.Bucket
	dir      string // the snapshot's folder
	m        *snapshot.Manifest
}

func setupCorrupt(t *testing.T) *corruptBundle {
	t.Helper()
	b := redistest.Backends(t)[0]
	rc := b.Client(t)
	cb := &corruptBundle{src: open(t, b, rc, shard.Config{Shards: 2}), dst: open(t, b, rc, shard.Config{Shards: 2})}
	seed(t, cb.src)
	var root string
	cb.bk, root = dirBucket(t)
	var err error
	cb.m, err = snapshot.Export(context.Background(), cb.src, cb.bk, snapshot.ExportOptions{})
	require.NoError(t, err)
	cb.dir = filepath.Join(root, filepath.FromSlash(cb.m.ID))
	for _, f := range cb.m.Files {
		require.Positive(t, f.Jobs, "both shards hold jobs")
	}
	return cb
}

func (cb *corruptBundle) path(name string) string { return filepath.Join(cb.dir, name) }

// editManifest rewrites the manifest after fn changed it.
func (cb *corruptBundle) editManifest(t *testing.T, fn func(m map[string]any)) {
	t.Helper()
	raw, err := os.ReadFile(cb.path("manifest.json"))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	fn(m)
	raw, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cb.path("manifest.json"), raw, 0o644))
}

func file(m map[string]any, i int) map[string]any {
	return m["files"].([]any)[i].(map[string]any)
}

// setFile records the size and checksum of shard file i as it now is.
func (cb *corruptBundle) setFile(t *testing.T, m map[string]any, i int) {
	t.Helper()
	raw, err := os.ReadFile(cb.path(file(m, i)["name"].(string)))
	require.NoError(t, err)
	sum := sha256.Sum256(raw)
	m["bytes"] = m["bytes"].(float64) - file(m, i)["bytes"].(float64) + float64(len(raw))
	file(m, i)["bytes"] = len(raw)
	file(m, i)["sha256"] = hex.EncodeToString(sum[:])
}

// refused restores the snapshot, requires the restore to fail with an error for which
// check holds, and requires that nothing was written.
func (cb *corruptBundle) refused(t *testing.T, check func(error)) {
	t.Helper()
	ctx := context.Background()
	_, err := snapshot.Verify(ctx, cb.bk, cb.m.ID, snapshot.ReadOptions{})
	check(err)
	_, err = snapshot.Restore(ctx, cb.dst, cb.bk, cb.m.ID, snapshot.ReadOptions{})
	check(err)
	empty, err := cb.dst.Empty(ctx)
	require.NoError(t, err)
	require.True(t, empty, "nothing is restored from a bad snapshot")
}

func corrupt(t *testing.T, file string, msg ...string) func(error) {
	return func(err error) {
		t.Helper()
		var ce *snapshot.CorruptError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, file, ce.File, err.Error())
		for _, m := range msg {
			require.Contains(t, err.Error(), m)
		}
	}
}

func TestRestore_RefusesDamagedSnapshots(t *testing.T) {
	t.Parallel()
	shard0 := "shard-0000.ndjson.gz"
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, cb *corruptBundle)
		check  func(t *testing.T, cb *corruptBundle) func(error)
	}{
		{"Truncated", func(t *testing.T, cb *corruptBundle) {
			require.NoError(t, os.Truncate(cb.path(shard0), cb.m.Files[0].Bytes/2))
		}, func(t *testing.T, cb *corruptBundle) func(error) {
			return corrupt(t, shard0, "truncated")
		}},
		{"TruncatedManifestUpdated", func(t *testing.T, cb *corruptBundle) {
			// The size matches, so reading finds out: the checksum says why.
			require.NoError(t, os.Truncate(cb.path(shard0), cb.m.Files[0].Bytes-10))
			cb.editManifest(t, func(m map[string]any) {
				file(m, 0)["bytes"] = cb.m.Files[0].Bytes - 10
				m["bytes"] = cb.m.Bytes - 10
			})
		}, func(t *testing.T, cb *corruptBundle) func(error) {
			return corrupt(t, shard0, "SHA-256", "reading it failed")
		}},
		{"BadChecksum", func(t *testing.T, cb *corruptBundle) {
			cb.editManifest(t, func(m map[string]any) {
				file(m, 1)["sha256"] = "0000000000000000000000000000000000000000000000000000000000000000"
			})
		}, func(t *testing.T, cb *corruptBundle) func(error) {
			return corrupt(t, "shard-0001.ndjson.gz", "SHA-256", "the manifest says 0000")
		}},
		{"FlippedByte", func(t *testing.T, cb *corruptBundle) {
			raw, err := os.ReadFile(cb.path(shard0))
			require.NoError(t, err)
			raw[len(raw)/2] ^= 0x40
			require.NoError(t, os.WriteFile(cb.path(shard0), raw, 0o644))
		}, func(t *testing.T, cb *corruptBundle) func(error) {
			return corrupt(t, shard0, "SHA-256", "damaged")
		}},
		{"MissingFile", func(t *testing.T, cb *corruptBundle) {
			require.NoError(t, os.Remove(cb.path("shard-0001.ndjson.gz")))
		}, func(t *testing.T, cb *corruptBundle) func(error) {
			return corrupt(t, "shard-0001.ndjson.gz", "missing")
		}},
		{"MissingManifest", func(t *testing.T, cb *corruptBundle) {
			require.NoError(t, os.Remove(cb.path("manifest.json")))
		}, func(t *testing.T, cb *corruptBundle) func(error) {
			return func(err error) { require.ErrorIs(t, err, snapshot.ErrIncomplete) }
		}},
		{"RecordCount", func(t *testing.T, cb *corruptBundle) {
			cb.editManifest(t, func(m map[string]any) {
				file(m, 0)["jobs"] = cb.m.Files[0].Jobs + 1
				m["jobs"] = cb.m.Jobs + 1
			})
		}, func(t *testing.T, cb *corruptBundle) func(error) {
			return corrupt(t, shard0, "jobs, the manifest says")
		}},
		{"FilesSwapped", func(t *testing.T, cb *corruptBundle) {
			// Intact files of the wrong shards: their records tell.
			a, b := cb.path(shard0), cb.path("shard-0001.ndjson.gz")
			require.NoError(t, os.Rename(a, a+".tmp"))
			require.NoError(t, os.Rename(b, a))
			require.NoError(t, os.Rename(a+".tmp", b))
			cb.editManifest(t, func(m map[string]any) {
				cb.setFile(t, m, 0)
				cb.setFile(t, m, 1)
				file(m, 0)["jobs"], file(m, 1)["jobs"] = file(m, 1)["jobs"], file(m, 0)["jobs"]
			})
		}, func(t *testing.T, cb *corruptBundle) func(error) {
			// Both files are wrong, and shard files are read in parallel: the error names
			// whichever was read first.
			return func(err error) {
				t.Helper()
				var ce *snapshot.CorruptError
				require.ErrorAs(t, err, &ce)
				switch ce.File {
				case shard0:
					require.Contains(t, err.Error(), "belongs to shard 1")
				case "shard-0001.ndjson.gz":
					require.Contains(t, err.Error(), "belongs to shard 0")
				default:
					t.Fatalf("error names %s, want one of the swapped files: %v", ce.File, err)
				}
			}
		}},
		{"NewerFormat", func(t *testing.T, cb *corruptBundle) {
			cb.editManifest(t, func(m map[string]any) { m["format"] = 3 })
		}, func(t *testing.T, cb *corruptBundle) func(error) {
			return corrupt(t, "manifest.json", "format 3")
		}},
		{"OtherSchema", func(t *testing.T, cb *corruptBundle) {
			cb.editManifest(t, func(m map[string]any) { m["schema"] = 9 })
		}, func(t *testing.T, cb *corruptBundle) func(error) {
			return corrupt(t, "manifest.json", "schema v9")
		}},
		{"FileMissingFromManifest", func(t *testing.T, cb *corruptBundle) {
			cb.editManifest(t, func(m map[string]any) { m["files"] = m["files"].([]any)[:1] })
		}, func(t *testing.T, cb *corruptBundle) func(error) {
			return corrupt(t, "manifest.json", "1 files for 2 shards")
		}},
		{"ManifestNotJSON", func(t *testing.T, cb *corruptBundle) {
			require.NoError(t, os.WriteFile(cb.path("manifest.json"), []byte(`{"format":1,`), 0o644))
		}, func(t *testing.T, cb *corruptBundle) func(error) {
			return corrupt(t, "manifest.json", "not valid JSON")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cb := setupCorrupt(t)
			_, err := snapshot.Verify(context.Background(), cb.bk, cb.m.ID, snapshot.ReadOptions{})
			require.NoError(t, err, "intact before the damage")
			tc.damage(t, cb)
			cb.refused(t, tc.check(t, cb))
		})
	}
}

func TestRestore_UnknownSnapshot(t *testing.T) {
	t.Parallel()
	cb := setupCorrupt(t)
	ctx := context.Background()
	for _, id := range []string{cb.src.Config().Namespace + "/20200101T000000.000Z", "nope", "a/b"} {
		_, err := snapshot.Restore(ctx, cb.dst, cb.bk, id, snapshot.ReadOptions{})
		require.ErrorIs(t, err, snapshot.ErrNotFound, id)
	}
}

func TestRestore_RefusesNonEmptyNamespace(t *testing.T) {
	t.Parallel()
	cb := setupCorrupt(t)
	ctx := context.Background()
	_, err := cb.dst.Create(ctx, []*job.Job{{ID: "mine", Type: "t", Schedule: job.Schedule{Now: true}}})
	require.NoError(t, err)
	_, err = snapshot.Restore(ctx, cb.dst, cb.bk, cb.m.ID, snapshot.ReadOptions{})
	require.ErrorIs(t, err, shard.ErrNotEmpty)
	_, err = cb.dst.Get(ctx, "sched")
	require.ErrorIs(t, err, shard.ErrNotFound, "nothing restored")
}

func TestRestore_ResumesInterruptedRestore(t *testing.T) {
	t.Parallel()
	cb := setupCorrupt(t)
	ctx := context.Background()
	// A restore that wrote some jobs, then stopped.
	resumed, err := cb.dst.BeginRestore(ctx, cb.m.ID)
	require.NoError(t, err)
	require.False(t, resumed)
	part := []string{"inflight", "retry", "dead", "sched", "cron"}
	byShard := map[shard.ID][]string{}
	for _, id := range part {
		byShard[cb.src.ShardOf(id)] = append(byShard[cb.src.ShardOf(id)], id)
	}
	for sh, ids := range byShard {
		recs, err := cb.src.ReadJobs(ctx, sh, ids)
		require.NoError(t, err)
		c, err := cb.dst.RestoreJobs(ctx, sh, recs)
		require.NoError(t, err)
		require.Equal(t, len(ids), c.Restored)
	}

	// Another snapshot may not go on top of it.
	other, err := snapshot.Export(ctx, cb.src, cb.bk, snapshot.ExportOptions{})
	require.NoError(t, err)
	_, err = snapshot.Restore(ctx, cb.dst, cb.bk, other.ID, snapshot.ReadOptions{})
	require.ErrorIs(t, err, shard.ErrNotEmpty)
	require.ErrorContains(t, err, "a restore of snapshot "+cb.m.ID+" began and did not end")

	// The same one completes it, without filing a run twice.
	res, err := snapshot.Restore(ctx, cb.dst, cb.bk, cb.m.ID, snapshot.ReadOptions{})
	require.NoError(t, err)
	require.True(t, res.Resumed)
	require.Equal(t, shard.RestoreCounts{Restored: len(seeded) - len(part), Existed: len(part)}, res.RestoreCounts)
	requireSameJobs(t, cb.src, cb.dst)

	// Once complete, the namespace is like any other that holds jobs.
	_, err = snapshot.Restore(ctx, cb.dst, cb.bk, cb.m.ID, snapshot.ReadOptions{})
	require.ErrorIs(t, err, shard.ErrNotEmpty)
}

// The paused queues are paused before any job is written: a restore that stops half-way
// (or one that workers watch as it runs) never leaves a ready run of a paused queue
// claimable.
func TestRestore_PausesQueuesBeforeWritingJobs(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	b := redistest.Backends(t)[0]
	rc := b.Client(t)
	src := open(t, b, rc, shard.Config{Shards: 2})
	dst := open(t, b, rc, shard.Config{Shards: 2})
	idOn := func(prefix string, sh shard.ID) string {
		for i := 0; ; i++ {
			if id := prefix + strconv.Itoa(i); src.ShardOf(id) == sh {
				return id
			}
		}
	}
	held, other := idOn("held-", 0), idOn("other-", 1)
	_, err := src.Create(ctx, []*job.Job{
		{ID: held, Type: "t", Queue: "q-paused", Schedule: job.Schedule{Now: true}},
		{ID: other, Type: "t", Schedule: job.Schedule{Now: true}},
	})
	require.NoError(t, err)
	_, err = src.PauseQueue(ctx, "q-paused")
	require.NoError(t, err)
	bk, root := dirBucket(t)
	m, err := snapshot.Export(ctx, src, bk, snapshot.ExportOptions{})
	require.NoError(t, err)

	// Shard 1's file is damaged after the check: the restore writes shard 0's jobs, then
	// stops.
	m, err = snapshot.Verify(ctx, bk, m.ID, snapshot.ReadOptions{})
	require.NoError(t, err)
	f, err := os.OpenFile(filepath.Join(root, filepath.FromSlash(m.ID), m.Files[1].Name), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte{0})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	res, err := snapshot.RestoreVerified(ctx, dst, bk, m, snapshot.ReadOptions{Parallel: 1})
	var ce *snapshot.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 1, res.Restored)
	_, err = dst.Get(ctx, held)
	require.NoError(t, err)
	paused, err := dst.PausedQueues(ctx)
	require.NoError(t, err)
	require.True(t, paused["q-paused"], "the restored run of q-paused must not be claimable")
}
