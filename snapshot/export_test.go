package snapshot_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/snapshot"
)

// An export visits each key of the node once, however many shards the node serves: on
// a real redis-server holding 32 shards, it makes about as many SCAN calls as one pass
// over the keyspace takes (keys/COUNT), not one pass per shard (32 times as many). The
// test is not parallel, so that nothing else SCANs the package's server meanwhile.
func TestExport_ScansEachKeyOnce(t *testing.T) {
	const shards, jobs = 32, 10_000
	b := redistest.ServerBackend(t)
	ctx := ctxT(t)
	c := b.Client(t)
	// Job hashes, one key each (packed jobs are read from one hash per shard).
	st := open(t, b, c, shard.Config{Shards: shards, NoPack: true})
	batch := make([]*job.Job, 0, 1000)
	for i := 0; i < jobs; i += cap(batch) {
		batch = batch[:0]
		for k := i; k < i+cap(batch); k++ {
			batch = append(batch, &job.Job{ID: "j" + strconv.Itoa(k), Type: "t", Schedule: job.Schedule{Delay: 5 * time.Minute}})
		}
		res, err := st.Create(ctx, batch)
		require.NoError(t, err)
		for _, r := range res {
			require.True(t, r.Created, r.ID)
		}
	}
	scans := func() int {
		info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
		require.NoError(t, err)
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_scan:calls="); ok {
				n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				require.NoError(t, err)
				return n
			}
		}
		return 0 // no SCAN yet
	}
	keys, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64()
	require.NoError(t, err)
	require.GreaterOrEqual(t, keys, int64(jobs))

	before := scans()
	bk, _ := dirBucket(t)
	m, err := snapshot.Export(ctx, st, bk, snapshot.ExportOptions{TempDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, int64(jobs), m.Jobs)
	calls := scans() - before

	// One pass takes about keys/2000 calls (the SCAN COUNT); allow twice that. A pass per
	// shard would take at least one call per shard, and about 32 times as many.
	onePass := int(keys+1999) / 2000
	t.Logf("%d keys on the node, %d shards: %d SCAN calls (one pass: about %d)", keys, shards, calls, onePass)
	require.Positive(t, calls)
	require.LessOrEqual(t, calls, 2*onePass+2)
	require.Less(t, calls, shards)
}
