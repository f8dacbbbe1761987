package snapshot_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/snapshot"
)

func ids(infos []snapshot.Info) []string {
	out := make([]string, len(infos))
	for i, in := range infos {
		out[i] = in.ID
	}
	return out
}

func TestPrune_KeepsNewestComplete(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	b := redistest.Backends(t)[0]
	rc := b.Client(t)
	st := open(t, b, rc, shard.Config{Shards: 2})
	other := open(t, b, rc, shard.Config{Shards: 2})
	_, err := st.Create(ctx, []*job.Job{{ID: "a", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
	require.NoError(t, err)
	bk, root := dirBucket(t)
	ns := st.Config().Namespace

	var exported []string
	for range 3 {
		m, err := snapshot.Export(ctx, st, bk, snapshot.ExportOptions{})
		require.NoError(t, err)
		exported = append(exported, m.ID)
	}
	om, err := snapshot.Export(ctx, other, bk, snapshot.ExportOptions{})
	require.NoError(t, err)
	// A failed export long ago, one running now (its time is the newest), and a folder
	// that is not a snapshot.
	for _, dir := range []string{ns + "/20000101T000000.000Z", ns + "/29991231T000000.000Z", ns + "/other"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, dir), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, dir, "shard-0000.ndjson.gz"), []byte("x"), 0o644))
	}

	infos, err := snapshot.List(ctx, bk, ns)
	require.NoError(t, err)
	require.Equal(t, []string{ns + "/29991231T000000.000Z", exported[2], exported[1], exported[0], ns + "/20000101T000000.000Z"}, ids(infos))
	require.False(t, infos[0].Complete())
	require.ErrorIs(t, infos[0].Err, snapshot.ErrIncomplete)
	require.True(t, infos[1].Complete())
	require.Equal(t, int64(1), infos[1].Manifest.Jobs)

	all, err := snapshot.List(ctx, bk, "")
	require.NoError(t, err)
	require.Len(t, all, 6)

	latest, err := snapshot.Resolve(ctx, bk, "", ns)
	require.NoError(t, err)
	require.Equal(t, exported[2], latest, "the newest complete one")
	byTime, err := snapshot.Resolve(ctx, bk, exported[0][len(ns)+1:], ns)
	require.NoError(t, err)
	require.Equal(t, exported[0], byTime)
	byNS, err := snapshot.Resolve(ctx, bk, other.Config().Namespace, ns)
	require.NoError(t, err)
	require.Equal(t, om.ID, byNS)
	_, err = snapshot.Resolve(ctx, bk, "", "nothing-here")
	require.ErrorIs(t, err, snapshot.ErrNotFound)

	deleted, err := snapshot.Prune(ctx, bk, ns, 2)
	require.NoError(t, err)
	require.Equal(t, []string{exported[0], ns + "/20000101T000000.000Z"}, deleted)
	infos, err = snapshot.List(ctx, bk, ns)
	require.NoError(t, err)
	require.Equal(t, []string{ns + "/29991231T000000.000Z", exported[2], exported[1]}, ids(infos))
	_, err = snapshot.ReadManifest(ctx, bk, exported[0])
	require.ErrorIs(t, err, snapshot.ErrNotFound)
	_, err = snapshot.Verify(ctx, bk, exported[1], snapshot.ReadOptions{})
	require.NoError(t, err, "kept snapshots are intact")

	// Another namespace's snapshots are not touched; keep must be positive.
	_, err = snapshot.ReadManifest(ctx, bk, om.ID)
	require.NoError(t, err)
	_, err = snapshot.Prune(ctx, bk, ns, 0)
	require.Error(t, err)
}

func TestRunPeriodic(t *testing.T) {
	t.Parallel()
	b := redistest.Backends(t)[0]
	rc := b.Client(t)
	st := open(t, b, rc, shard.Config{Shards: 2})
	_, err := st.Create(context.Background(), []*job.Job{{ID: "a", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
	require.NoError(t, err)
	dir := t.TempDir()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- snapshot.RunPeriodic(ctx, snapshot.PeriodicConfig{Store: st, To: "file://" + filepath.ToSlash(dir), Every: time.Hour, Keep: 1})
	}()
	bk, err := snapshot.OpenBucket(context.Background(), dir)
	require.NoError(t, err)
	defer bk.Close()
	// It exports when it starts.
	require.Eventually(t, func() bool {
		infos, err := snapshot.List(context.Background(), bk, st.Config().Namespace)
		return err == nil && len(infos) == 1 && infos[0].Complete()
	}, 30*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-done)

	// The period is claimed: another process skips it.
	claimed, err := st.ClaimSnapshotPeriod(context.Background(), "other", time.Hour)
	require.NoError(t, err)
	require.False(t, claimed)
}

func TestRunPeriodic_InvalidConfig(t *testing.T) {
	t.Parallel()
	b := redistest.Backends(t)[0]
	st := open(t, b, b.Client(t), shard.Config{Shards: 1})
	notDir := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notDir, nil, 0o644))
	for _, tc := range []struct {
		cfg  snapshot.PeriodicConfig
		want string
	}{
		{snapshot.PeriodicConfig{To: "x"}, "Store is required"},
		{snapshot.PeriodicConfig{Store: st}, "To is required"},
		{snapshot.PeriodicConfig{Store: st, To: "x", Every: time.Millisecond}, "Every must be at least 1s"},
		{snapshot.PeriodicConfig{Store: st, To: "gs://bucket"}, `snapshot location "gs://bucket"`},
		{snapshot.PeriodicConfig{Store: st, To: notDir}, notDir},
	} {
		err := snapshot.RunPeriodic(context.Background(), tc.cfg)
		require.ErrorContains(t, err, tc.want)
		require.False(t, errors.Is(err, context.Canceled))
	}
}

// An export that started before the newest complete snapshot may still be running (on
// another server, or by hand): Prune leaves a recent incomplete snapshot alone, whatever
// its place, and deletes an old one.
func TestPrune_LeavesRecentIncompleteSnapshots(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	b := redistest.Backends(t)[0]
	st := open(t, b, b.Client(t), shard.Config{Shards: 2})
	bk, root := dirBucket(t)
	ns := st.Config().Namespace
	first, err := snapshot.Export(ctx, st, bk, snapshot.ExportOptions{})
	require.NoError(t, err)
	// Snapshot ids have millisecond precision: the two exports must be far enough apart
	// that `running` (1 ms before the last) is not the first one's id.
	time.Sleep(10 * time.Millisecond)
	last, err := snapshot.Export(ctx, st, bk, snapshot.ExportOptions{})
	require.NoError(t, err)
	require.Greater(t, last.Started.Sub(first.Started), 2*time.Millisecond)
	running := ns + "/" + last.Started.Add(-time.Millisecond).UTC().Format("20060102T150405.000Z")
	failed := ns + "/" + last.Started.Add(-48*time.Hour).UTC().Format("20060102T150405.000Z")
	for _, id := range []string{running, failed} {
		dir := filepath.Join(root, filepath.FromSlash(id))
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "shard-0000.ndjson.gz"), []byte("x"), 0o644))
	}
	deleted, err := snapshot.Prune(ctx, bk, ns, 1)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{first.ID, failed}, deleted)
	infos, err := snapshot.List(ctx, bk, ns)
	require.NoError(t, err)
	require.Equal(t, []string{last.ID, running}, ids(infos))
}
