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

func TestJobMatch_EscapesGlob(t *testing.T) {
	t.Parallel()
	tags, err := Tags(2)
	require.NoError(t, err)
	for _, tc := range []struct{ ns, want string }{
		{"tock", "tock:v1:{*}:job:*"},
		{"a.b-c~d_e", "a.b-c~d_e:v1:{*}:job:*"},
		{`a*b?c[d]e\f^g`, `a\*b\?c\[d\]e\\f\^g:v1:{*}:job:*`},
	} {
		s := &Store{keys: NewKeys(tc.ns, tags)}
		require.Equal(t, tc.want, s.jobMatch(), tc.ns)
	}
}

func TestSplitJobKey(t *testing.T) {
	t.Parallel()
	tags, err := Tags(3)
	require.NoError(t, err)
	s := &Store{keys: NewKeys("ns.x", tags)}
	shards := map[string]ID{}
	for i, p := range s.keys.prefixes {
		shards[p] = ID(i)
	}
	for _, tc := range []struct {
		key   string
		id    ID
		jobID string
		ok    bool
	}{
		{s.keys.Job(2, "a-b.c~d"), 2, "a-b.c~d", true},
		{s.keys.Job(0, "x:job:y"), 0, "x:job:y", true},
		{s.keys.Job(1, ""), 0, "", false},
		{s.keys.Ready(1, "q}:job:x"), 0, "", false},
		{"ns.x:v1:{nope}:job:x", 0, "", false},
		{"ns.x:v1:{" + tags[0] + "}:jobs:x", 0, "", false},
		{"ns.xy:v1:{" + tags[0] + "}:job:x", 0, "", false},
		{"ns.x:v1:{" + tags[0], 0, "", false},
	} {
		id, jobID, ok := s.splitJobKey(shards, tc.key)
		require.Equal(t, tc.ok, ok, tc.key)
		if ok {
			require.Equal(t, tc.id, id, tc.key)
			require.Equal(t, tc.jobID, jobID, tc.key)
		}
	}
}
