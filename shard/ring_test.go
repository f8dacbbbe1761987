package shard

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOf_Balanced(t *testing.T) {
	t.Parallel()
	const shards, perShard = 64, 100000
	counts := make([]int, shards)
	for i := 0; i < shards*perShard; i++ {
		counts[Of("job-"+strconv.Itoa(i), shards)]++
	}
	for id, n := range counts {
		dev := float64(n-perShard) / perShard
		require.Less(t, dev, 0.012, "shard %d holds %d (%.2f%% off the mean)", id, n, dev*100)
		require.Greater(t, dev, -0.012, "shard %d holds %d (%.2f%% off the mean)", id, n, dev*100)
	}
}

func TestOf_GrowingMovesFew(t *testing.T) {
	t.Parallel()
	const n = 200000
	moved := 0
	for i := 0; i < n; i++ {
		id := "j" + strconv.Itoa(i)
		a, b := Of(id, 64), Of(id, 65)
		if a != b {
			require.Equal(t, ID(64), b, "a moved id goes to the new shard only")
			moved++
		}
	}
	frac := float64(moved) / n
	require.InDelta(t, 1.0/65, frac, 0.003)
}

func TestTags_SpreadOverSlots(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3, 64, 1000, MaxShards} {
		tags, err := Tags(n)
		require.NoError(t, err)
		seen := map[string]bool{}
		masters := [3]int{}
		for i, tag := range tags {
			require.False(t, seen[tag])
			seen[tag] = true
			slot := Slot("tock:v2:{" + tag + "}:job:x")
			require.GreaterOrEqual(t, slot, i*16384/n, "shard %d tag %s", i, tag)
			require.Less(t, slot, (i+1)*16384/n, "shard %d tag %s", i, tag)
			masters[slot*3/16384]++ // three masters with even slot ranges
		}
		if n >= 64 {
			for _, m := range masters {
				require.InDelta(t, float64(n)/3, float64(m), 1, "shards per master %v", masters)
			}
		}
	}
	_, err := Tags(0)
	require.Error(t, err)
	_, err = Tags(MaxShards + 1)
	require.ErrorContains(t, err, "4096")
}

func TestSlot_KnownValues(t *testing.T) {
	t.Parallel()
	// Values from Redis CLUSTER KEYSLOT.
	require.Equal(t, 12182, Slot("foo"))
	require.Equal(t, 5061, Slot("bar"))
	require.Equal(t, Slot("user1000"), Slot("{user1000}.following"))
}

func TestRunMember_RoundTrip(t *testing.T) {
	t.Parallel()
	m := RunMember("a.b-c_d~e", 1795290527339)
	id, due, ok := SplitMember(m)
	require.True(t, ok)
	require.Equal(t, "a.b-c_d~e", id)
	require.Equal(t, int64(1795290527339), due)
	_, _, ok = SplitMember("nocolon")
	require.False(t, ok)
}

func BenchmarkOf(b *testing.B) {
	b.ReportAllocs()
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = fmt.Sprintf("job-%d", i)
	}
	for i := 0; b.Loop(); i++ {
		Of(ids[i%len(ids)], 64)
	}
}
