package shard

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestJobMatch_EscapesGlob(t *testing.T) {
	t.Parallel()
	tags, err := Tags(2)
	require.NoError(t, err)
	for _, tc := range []struct{ ns, want string }{
		{"tock", "tock:v2:{*}:[jc]*"},
		{"a.b-c~d_e", "a.b-c~d_e:v2:{*}:[jc]*"},
		{`a*b?c[d]e\f^g`, `a\*b\?c\[d\]e\\f\^g:v2:{*}:[jc]*`},
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
	shards := s.shardIDs()
	for _, tc := range []struct {
		key   string
		id    ID
		jobID string
		cold  bool
		ok    bool
	}{
		{s.keys.Job(2, "a-b.c~d"), 2, "a-b.c~d", false, true},
		{s.keys.Job(0, "x:job:y"), 0, "x:job:y", false, true},
		{s.keys.Job(1, ""), 0, "", false, false},
		{s.keys.Ready(1, "q}:job:x"), 0, "", false, false},
		{"ns.x:v2:{nope}:job:x", 0, "", false, false},
		{"ns.x:v2:{" + tags[1] + "}:cold:index:17", 1, "", true, true},
		{"ns.x:v2:{" + tags[1] + "}:cold:index:", 0, "", false, false},
		{"ns.x:v2:{" + tags[0] + "}:jobx:1", 0, "", false, false},
		{"ns.xy:v2:{" + tags[0] + "}:job:x", 0, "", false, false},
		{"ns.x:v2:{" + tags[0], 0, "", false, false},
	} {
		id, jobID, cold, ok := s.splitJobKey(shards, tc.key)
		require.Equal(t, tc.ok, ok, tc.key)
		if ok {
			require.Equal(t, tc.id, id, tc.key)
			require.Equal(t, tc.jobID, jobID, tc.key)
			require.Equal(t, tc.cold, cold, tc.key)
		}
	}
}
