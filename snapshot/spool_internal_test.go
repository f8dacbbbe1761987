package snapshot

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/shard"
)

// The spool gives back each shard's ids in the order they were added, in batches, across
// several appends to the shard's file, and nothing for a shard without ids; close removes
// its directory.
func TestSpool_RoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sp, err := newSpool(dir, 3)
	require.NoError(t, err)
	sp.limit = 100 // many appends
	want := map[shard.ID][]string{}
	for i := range 1000 {
		id := shard.ID(i % 2 * 2) // shards 0 and 2; 1 stays empty
		j := "j" + strconv.Itoa(i) + strings.Repeat("x", i%200)
		want[id] = append(want[id], j)
		require.NoError(t, sp.add(id, []string{j}))
	}
	require.NoError(t, sp.flush())
	for id := range shard.ID(3) {
		var got []string
		require.NoError(t, sp.read(id, 64, func(ids []string) error {
			require.LessOrEqual(t, len(ids), 64)
			got = append(got, ids...)
			return nil
		}))
		require.Equal(t, want[id], got, "shard %d", id)
	}
	require.NoError(t, sp.close())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}
