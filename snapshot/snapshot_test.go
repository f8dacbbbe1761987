package snapshot_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/snapshot"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// open opens a store on a fresh namespace of b through rc.
func open(t *testing.T, b redistest.Backend, rc rueidis.Client, cfg shard.Config) *shard.Store {
	t.Helper()
	cfg.Namespace = redistest.Namespace(t, b)
	if cfg.Shards == 0 {
		cfg.Shards = 4
	}
	st, err := shard.Open(context.Background(), rc, cfg)
	require.NoError(t, err)
	return st
}

// dirBucket opens a bucket on a fresh local directory, and returns the directory too.
func dirBucket(t *testing.T) (*blob.Bucket, string) {
	t.Helper()
	dir := t.TempDir()
	bk, err := snapshot.OpenBucket(context.Background(), dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = bk.Close() })
	return bk, dir
}

// wipe deletes every key of the store's namespace.
func wipe(t *testing.T, st *shard.Store) {
	t.Helper()
	ctx := context.Background()
	rc := st.Client()
	addrs, nodes, err := shard.Primaries(ctx, rc)
	require.NoError(t, err)
	for _, addr := range addrs {
		n := nodes[addr]
		var cursor uint64
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(st.Config().Namespace+":*").Count(1000).Build()).AsScanEntry()
			require.NoError(t, err)
			cmds := make(rueidis.Commands, len(e.Elements))
			for i, k := range e.Elements {
				cmds[i] = rc.B().Unlink().Key(k).Build() // one key each: keys of several slots
			}
			for _, r := range rc.DoMulti(ctx, cmds...) {
				require.NoError(t, r.Error())
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	empty, err := st.Empty(ctx)
	require.NoError(t, err)
	require.True(t, empty)
}

// queueFigures returns the figures of every queue by name.
func queueFigures(t *testing.T, st *shard.Store) map[string]shard.QueueStats {
	t.Helper()
	qs, err := st.Queues(context.Background())
	require.NoError(t, err)
	out := map[string]shard.QueueStats{}
	for _, q := range qs {
		out[q.Queue] = q
	}
	return out
}

// OpenExistingBucket reads a location without creating it: a missing directory is an
// error that names it, and is still missing afterwards.
func TestOpenExistingBucket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	parent := t.TempDir()
	for _, loc := range []string{parent + "/missing", "file://" + parent + "/missing2"} {
		_, err := snapshot.OpenExistingBucket(ctx, loc)
		require.ErrorContains(t, err, "does not exist", loc)
		require.ErrorIs(t, err, snapshot.ErrNotFound)
	}
	entries, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing may be created")

	bk, err := snapshot.OpenExistingBucket(ctx, parent)
	require.NoError(t, err)
	infos, err := snapshot.List(ctx, bk, "")
	require.NoError(t, err)
	require.Empty(t, infos)
	require.NoError(t, bk.Close())
	// A file is no directory.
	file := parent + "/file"
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err = snapshot.OpenExistingBucket(ctx, file)
	require.ErrorContains(t, err, "not a directory")
}
