package snapshot_test

import (
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/snapshot"
)

// fakeS3 starts an in-process S3 server holding bucket "snapshots" and returns an s3://
// URL of that bucket as one would give for MinIO.
func fakeS3(t *testing.T) string {
	t.Helper()
	backend := s3mem.New()
	require.NoError(t, backend.CreateBucket("snapshots"))
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	q := url.Values{"endpoint": {srv.URL}, "region": {"us-east-1"}, "use_path_style": {"true"}}
	return "s3://snapshots?" + q.Encode()
}

func TestS3_ExportRestore(t *testing.T) {
	// Credentials come from the usual AWS environment variables (the fake server does
	// not check them); t.Setenv rules out t.Parallel.
	t.Setenv("AWS_ACCESS_KEY_ID", "tock")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret-key")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	ctx := ctxT(t)
	u := fakeS3(t)
	b := redistest.Backends(t)[0]
	rc := b.Client(t)
	src := open(t, b, rc, shard.Config{Shards: 3})
	seed(t, src)

	for _, loc := range []string{u, u + "&prefix=backups/tock/"} {
		bk, err := snapshot.OpenBucket(ctx, loc)
		require.NoError(t, err)
		defer bk.Close()
		m, err := snapshot.Export(ctx, src, bk, snapshot.ExportOptions{})
		require.NoError(t, err)
		require.Equal(t, int64(len(seeded)), m.Jobs)
		infos, err := snapshot.List(ctx, bk, "")
		require.NoError(t, err)
		require.Len(t, infos, 1)
		require.True(t, infos[0].Complete())

		dst := open(t, b, rc, shard.Config{Shards: 3})
		res, err := snapshot.Restore(ctx, dst, bk, m.ID, snapshot.ReadOptions{})
		require.NoError(t, err)
		require.Equal(t, len(seeded), res.Restored)
		requireSameJobs(t, src, dst)

		// A shard file that is gone is noticed on S3 too.
		require.NoError(t, bk.Delete(ctx, m.ID+"/shard-0002.ndjson.gz"))
		_, err = snapshot.Verify(ctx, bk, m.ID, snapshot.ReadOptions{})
		var ce *snapshot.CorruptError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "shard-0002.ndjson.gz", ce.File)

		deleted, err := snapshot.Prune(ctx, bk, src.Config().Namespace, 1)
		require.NoError(t, err)
		require.Empty(t, deleted)
		require.NoError(t, snapshot.Delete(ctx, bk, m.ID))
		infos, err = snapshot.List(ctx, bk, "")
		require.NoError(t, err)
		require.Empty(t, infos)
	}
}
