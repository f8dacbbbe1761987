package main

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/snapshot"
)

func TestSnapshot_ExportListVerifyRestore(t *testing.T) {
	t.Parallel()
	for _, b := range realBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rc := b.Client(t)
			ns := redistest.Namespace(t, b)
			src, err := shard.Open(ctx, rc, shard.Config{Namespace: ns, Shards: 4})
			require.NoError(t, err)
			_, err = src.Create(ctx, []*job.Job{
				{ID: "later", Type: "t", Schedule: job.Schedule{Delay: time.Hour}},
				{ID: "now", Type: "t", Queue: "q", Schedule: job.Schedule{Now: true}},
				{ID: "daily", Type: "t", Schedule: job.Schedule{Cron: "0 9 * * *", TimeZone: "Europe/London"}},
			})
			require.NoError(t, err)
			_, err = src.PauseQueue(ctx, "q")
			require.NoError(t, err)
			// A workflow: its nodes' jobs count with the jobs, and the outputs say so.
			_, err = src.CreateWorkflow(ctx, &job.Workflow{ID: "wf", Jobs: []job.Node{
				{Job: job.Job{ID: "a", Type: "t"}}, {Job: job.Job{ID: "b", Type: "t"}, DependsOn: []string{"a"}}}})
			require.NoError(t, err)
			dir := t.TempDir()
			env := map[string]string{"TOCK_REDIS": strings.Join(b.Addrs, ","), "TOCK_SNAPSHOT_TO": dir}
			tock := func(args ...string) result {
				return runTock(t, ctx, env, "", args...)
			}
			ok := func(args ...string) string {
				t.Helper()
				r := tock(args...)
				require.NoError(t, r.err, "tock %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.out, r.errOut)
				return r.out
			}

			out := ok("snapshot", "export", "--namespace", ns, "--to", "file://"+filepath.ToSlash(dir))
			require.Regexp(t, `^snapshot `+ns+`/\d{8}T\d{6}\.\d{3}Z: 5 jobs \(with the nodes of 1 workflow\) in 4 files, \d+ B, in \d`, out)
			first := strings.Fields(out)[1]
			first = first[:len(first)-1]
			// Settings from a config file alone.
			file := writeConfig(t, "redis:\n"+yamlList(b.Addrs)+"snapshot_to: "+dir+"\nnamespace: "+ns+"\n")
			r := runTock(t, ctx, map[string]string{"TOCK_CONFIG": file}, "", "snapshot", "export", "--json")
			require.NoError(t, r.err, r.errOut)
			var m snapshot.Manifest
			require.NoError(t, json.Unmarshal([]byte(r.out), &m))
			require.Equal(t, int64(5), m.Jobs)
			require.Equal(t, int64(1), m.Workflows)
			require.Equal(t, []string{"q"}, m.PausedQueues)
			out = ok("snapshot", "export", "--namespace", ns, "--keep", "2")
			require.Contains(t, out, "deleted "+first+"\n")

			out = ok("snapshot", "ls", "--namespace", ns)
			require.Regexp(t, `(?m)^ID\s+STARTED\s+JOBS\s+WORKFLOWS\s+SHARDS\s+SIZE\s+STATUS$`, out)
			require.Len(t, regexp.MustCompile(`(?m)^`+ns+`/\S+\s+\S+ \S+\s+5\s+1\s+4\s+\d+ B\s+complete$`).FindAllString(out, -1), 2, out)
			require.NotContains(t, out, first)
			require.Contains(t, ok("snapshot", "verify", "--namespace", ns), "is intact: 5 jobs (with the nodes of 1 workflow) in 4 files")

			// Into a new namespace with another shard count; the snapshot named by its
			// namespace (its newest).
			ns2 := redistest.Namespace(t, b)
			out = ok("snapshot", "restore", "--namespace", ns2, "--snapshot", ns, "--shards", "3")
			require.Regexp(t, `^restored 5 jobs \(with the nodes of 1 workflow\) from `+ns+`/\S+ into namespace "`+ns2+`" \(3 shards\)\n$`, out)
			dst, err := shard.Open(ctx, rc, shard.Config{Namespace: ns2, Shards: 3})
			require.NoError(t, err)
			for _, id := range []string{"later", "now", "daily"} {
				info, err := dst.Get(ctx, id)
				require.NoError(t, err, id)
				want, err := src.Get(ctx, id)
				require.NoError(t, err)
				require.Equal(t, want.State, info.State)
				require.Equal(t, want.NextRunAt, info.NextRunAt)
			}
			paused, err := dst.PausedQueues(ctx)
			require.NoError(t, err)
			require.True(t, paused["q"])

			r = tock("snapshot", "restore", "--namespace", ns2, "--snapshot", ns)
			require.ErrorIs(t, r.err, shard.ErrNotEmpty)
			require.ErrorContains(t, r.err, "namespace holds jobs or workflows: \""+ns2+"\"")
			r = tock("snapshot", "restore", "--namespace", ns2, "--snapshot", ns, "--shards", "5")
			require.ErrorContains(t, r.err, `snapshot restore: --shards "5": namespace "`+ns2+`" exists with 3 shards`)

			// A damaged snapshot is refused before the namespace is even initialised.
			infos, err := os.ReadDir(filepath.Join(dir, ns))
			require.NoError(t, err)
			newest := filepath.Join(dir, ns, infos[len(infos)-1].Name(), "shard-0002.ndjson.gz")
			require.NoError(t, os.Truncate(newest, 5))
			r = tock("snapshot", "verify", "--namespace", ns)
			require.ErrorContains(t, r.err, "shard-0002.ndjson.gz: 5 bytes, the manifest says")
			ns3 := redistest.Namespace(t, b)
			r = tock("snapshot", "restore", "--namespace", ns3, "--snapshot", ns)
			var ce *snapshot.CorruptError
			require.ErrorAs(t, r.err, &ce)
			_, _, exists, err := shard.NamespaceSettings(ctx, rc, ns3)
			require.NoError(t, err)
			require.False(t, exists)

			r = tock("snapshot", "export", "--namespace", redistest.Namespace(t, b))
			require.ErrorContains(t, r.err, "does not exist in Redis")
		})
	}
}

func TestSnapshot_Usage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	none := map[string]string{}
	r := runTock(t, ctx, none, "", "snapshot", "--help")
	require.ErrorIs(t, r.err, flag.ErrHelp)
	require.Contains(t, r.out, "tock snapshot export --to LOCATION")
	r = runTock(t, ctx, none, "", "snapshot")
	var ue *usageError
	require.ErrorAs(t, r.err, &ue)
	require.Contains(t, ue.usage, "tock snapshot export --to LOCATION")
	r = runTock(t, ctx, none, "", "snapshot", "frobnicate")
	require.ErrorAs(t, r.err, &ue)
	r = runTock(t, ctx, none, "", "snapshot", "export", "--redis", "127.0.0.1:1")
	require.ErrorContains(t, r.err, "snapshot export: --to (or TOCK_SNAPSHOT_TO, or snapshot_to in the --config file): required: ")
	r = runTock(t, ctx, map[string]string{"TOCK_SNAPSHOT_TO": t.TempDir()}, "", "snapshot", "restore")
	require.ErrorContains(t, r.err, "snapshot restore: --redis (or TOCK_REDIS, or redis in the --config file): required: ")
	r = runTock(t, ctx, none, "", "snapshot", "ls", "--from", t.TempDir(), "extra")
	require.EqualError(t, r.err, `snapshot ls: unexpected argument "extra" (tock snapshot ls --help lists the flags)`)
	// The settings are validated as for tock server, each named as it was given.
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{none, []string{"ls", "--from", "s3://b%zz"}, `snapshot ls: --from "s3://b%zz": want a directory or a URL`},
		{map[string]string{"TOCK_SNAPSHOT_TO": "s3://b%zz"}, []string{"verify"}, `snapshot verify: TOCK_SNAPSHOT_TO="s3://b%zz" (env): want a directory or a URL`},
		{map[string]string{"TOCK_NAMESPACE": "a b"}, []string{"ls", "--from", "x"}, `snapshot ls: TOCK_NAMESPACE="a b" (env): "a b": character ' ' at 1`},
		{none, []string{"export", "--to", "x", "--redis", "r"}, `snapshot export: --redis "r": want host:port with a port from 1 to 65535`},
		{none, []string{"restore", "--from", "x", "--redis", "r:1", "--shards", "0"}, `snapshot restore: --shards "0": want a whole number from 1 to 4096`},
		{none, []string{"restore", "--from", "x", "--redis", "r:1", "--bucket", "60"}, `snapshot restore: --bucket "60": want a duration from 1s to 24h`},
		{none, []string{"verify", "--from", "x", "--shards", "3"}, `snapshot verify: flag provided but not defined: -shards`},
		{none, []string{"export", "--from", "x"}, `snapshot export: flag provided but not defined: -from`},
		{none, []string{"ls", "--from", "x", "--parallel", "0"}, `snapshot ls: --parallel must be at least 1, got 0`},
		{none, []string{"export", "--to", "x", "--redis", "r:1", "--keep", "-1"}, `snapshot export: --keep must not be negative, got -1`},
		{map[string]string{"TOCK_REDIS_PASSWORD": "hunter2"}, []string{"export", "--to", "x", "--redis", "r"}, `snapshot export: --redis "r": `},
	} {
		r := runTock(t, ctx, tc.env, "", append([]string{"snapshot"}, tc.args...)...)
		require.ErrorContains(t, r.err, tc.want, "%v %v", tc.env, tc.args)
		require.NotContains(t, r.err.Error(), "hunter2")
	}
	r = runTock(t, ctx, none, "", "snapshot", "ls", "--from", t.TempDir())
	require.NoError(t, r.err)
	require.Equal(t, "no snapshots\n", r.errOut)
	r = runTock(t, ctx, none, "", "snapshot", "verify", "--from", t.TempDir())
	require.ErrorIs(t, r.err, snapshot.ErrNotFound)

	// A server's config file serves the snapshot commands too; the flag and the
	// environment come first.
	file := writeConfig(t, "redis: 127.0.0.1:1\nsnapshot_to: "+t.TempDir()+"\nsnapshot_every: 1h\nnamespace: prod\n"+
		"tokens: [0123456789abcdef:write]\n")
	r = runTock(t, ctx, none, "", "snapshot", "ls", "--config", file)
	require.NoError(t, r.err)
	require.Equal(t, "no snapshots of namespace \"prod\"\n", r.errOut)
	r = runTock(t, ctx, map[string]string{"TOCK_CONFIG": file}, "", "snapshot", "verify")
	require.ErrorIs(t, r.err, snapshot.ErrNotFound)
	require.ErrorContains(t, r.err, "prod")
	r = runTock(t, ctx, map[string]string{"TOCK_CONFIG": file, "TOCK_NAMESPACE": "other"}, "", "snapshot", "verify", "--from", t.TempDir())
	require.ErrorIs(t, r.err, snapshot.ErrNotFound)
	require.ErrorContains(t, r.err, "other")
	bad := writeConfig(t, "snapshot_to: \"s3://b%zz\"\n")
	r = runTock(t, ctx, none, "", "snapshot", "ls", "--config", bad)
	require.EqualError(t, r.err, "snapshot ls: "+bad+` line 1: snapshot_to "s3://b%zz": want a directory or a URL such as `+
		"file:///var/lib/tock/snapshots or s3://bucket?region=us-east-1")
}

// tock snapshot ls lists what tock snapshot export wrote: without a namespace setting,
// the snapshots of every namespace; with one that has none, it names the namespaces
// that have some. Listing or verifying a location that does not exist creates nothing.
func TestSnapshot_LsFindsTheExport(t *testing.T) {
	t.Parallel()
	for _, b := range realBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			rc := b.Client(t)
			ns := redistest.Namespace(t, b)
			st, err := shard.Open(ctx, rc, shard.Config{Namespace: ns, Shards: 2})
			require.NoError(t, err)
			_, err = st.Create(ctx, []*job.Job{{ID: "a", Type: "t", Schedule: job.Schedule{Delay: time.Hour}}})
			require.NoError(t, err)
			dir := t.TempDir()
			env := map[string]string{"TOCK_REDIS": strings.Join(b.Addrs, ",")}
			code, out, errOut := execTock(t, env, "snapshot", "export", "--namespace", ns, "--to", dir)
			require.Equal(t, 0, code, errOut)
			id := strings.TrimSuffix(strings.Fields(out)[1], ":")

			// No namespace given: every namespace's snapshots.
			code, out, errOut = execTock(t, nil, "snapshot", "ls", "--from", dir)
			require.Equal(t, 0, code, errOut)
			require.Regexp(t, `(?m)^`+regexp.QuoteMeta(id)+`\s.*\s1\s+0\s+2\s+.*complete$`, out)
			// The namespace given, and another one.
			code, out, _ = execTock(t, nil, "snapshot", "ls", "--from", dir, "--namespace", ns)
			require.Equal(t, 0, code)
			require.Contains(t, out, id)
			code, out, errOut = execTock(t, map[string]string{"TOCK_NAMESPACE": "other"}, "snapshot", "ls", "--from", dir)
			require.Equal(t, 0, code)
			require.Empty(t, out)
			require.Contains(t, errOut, `no snapshots of namespace "other"`)
			require.Contains(t, errOut, "snapshots of namespace "+ns)
			// verify without --snapshot looks for the namespace's; the error names the others.
			code, _, errOut = execTock(t, nil, "snapshot", "verify", "--from", dir)
			require.Equal(t, 1, code)
			require.Contains(t, errOut, "snapshots of namespace "+ns)

			for _, cmd := range []string{"ls", "verify"} {
				missing := filepath.Join(dir, "missing-"+cmd)
				code, _, errOut = execTock(t, nil, "snapshot", cmd, "--from", missing)
				require.Equal(t, 1, code, errOut)
				require.Contains(t, errOut, "does not exist")
				require.NoDirExists(t, missing, "tock snapshot %s created the directory it reads", cmd)
			}
		})
	}
}
