package shard

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
)

// On a Cluster, the SCAN of a shard's jobs visits only the primary serving its slot.
func TestNodesOf_OnePrimaryPerShard(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		s, err := Open(ctx, b.Client(t), Config{Namespace: redistest.Namespace(t, b), Shards: 12})
		require.NoError(t, err)
		primaries, _, err := Primaries(ctx, s.c)
		require.NoError(t, err)
		used := map[string]bool{}
		for id := range ID(12) {
			addrs, nodes, err := s.nodesOf(ctx, id)
			require.NoError(t, err)
			require.Len(t, addrs, 1, "shard %d", id)
			used[addrs[0]] = true
			// The node holds the shard's slot: a key of the shard written through the
			// cluster client is found there.
			key := s.keys.Job(id, "probe")
			require.NoError(t, s.c.Do(ctx, s.c.B().Set().Key(key).Value("1").Build()).Error())
			n := nodes[addrs[0]]
			require.NoError(t, n.Do(ctx, n.B().Get().Key(key).Build()).Error(), "shard %d on %s", id, addrs[0])
		}
		require.Len(t, used, len(primaries), "shards spread over every primary")
	})
}
