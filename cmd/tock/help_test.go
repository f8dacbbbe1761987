package main

import (
	"context"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// commandPaths are every command of the binary, as the top-level usage lists them.
var commandPaths = []string{
	"dev", "server", "ingest", "dispatcher", "init",
	"snapshot export", "snapshot restore", "snapshot verify", "snapshot ls",
	"jobs create", "jobs get", "jobs ls", "jobs patch", "jobs cancel", "jobs pause", "jobs resume", "jobs trigger", "jobs delete", "jobs runs", "jobs bulk",
	"workflows create", "workflows get", "workflows ls", "workflows cancel", "workflows retry", "workflows pause",
	"workflows resume", "workflows trigger", "workflows delete", "workflows result",
	"dead ls", "dead requeue", "dead rm", "dead bulk", "cluster", "figures", "audit",
	"queues", "queues pause", "queues resume",
	"bench fire", "bench throughput", "bench memory", "bench ingest", "bench bare", "bench ui", "bench workflow",
	"version",
}

// commandGroups are the commands that take a command.
var commandGroups = []string{"snapshot", "jobs", "workflows", "dead", "bench"}

// execTock runs the binary's main path with args: its exit status and what it printed.
func execTock(t *testing.T, env map[string]string, args ...string) (code int, out, errOut string) {
	t.Helper()
	var o, e syncBuffer
	c := &cli{out: &o, errOut: &e, in: strings.NewReader(""), getenv: func(k string) string { return env[k] }}
	code = execute(context.Background(), args, c)
	return code, o.String(), e.String()
}

// Every command: --help and -h print its help to stdout and exit 0; a bad flag prints
// the error and where to find the help to stderr and exits 2; a runtime error exits 1.
func TestCLI_HelpAndUsageErrors(t *testing.T) {
	t.Parallel()
	// Nothing a command would reach with a bad flag or --help: a run would fail.
	env := map[string]string{"TOCK_API": "http://127.0.0.1:1", "TOCK_REDIS": "127.0.0.1:1", "TOCK_TOKEN": "sekrit-0123456789abcdef"}
	for _, path := range commandPaths {
		t.Run(strings.ReplaceAll(path, " ", "_"), func(t *testing.T) {
			t.Parallel()
			args := strings.Fields(path)
			for _, h := range []string{"--help", "-h"} {
				code, out, errOut := execTock(t, env, append(args, h)...)
				require.Equal(t, 0, code, "tock %s %s\nstderr: %s", path, h, errOut)
				require.Empty(t, errOut, "tock %s %s", path, h)
				require.True(t, strings.HasPrefix(out, "Usage: tock "+path), "tock %s %s:\n%s", path, h, out)
				for _, line := range strings.Split(out, "\n") {
					require.LessOrEqual(t, len(line), 88, "tock %s %s: %s", path, h, line)
				}
				require.NotContains(t, out, "sekrit", "help must not print a token from the environment")
				if path != "version" {
					require.Regexp(t, `(?m)^Flags:\n  --\S`, out, "tock %s %s", path, h)
				}
			}
			code, out, errOut := execTock(t, env, append(args, "--no-such-flag")...)
			require.Equal(t, 2, code, "tock %s --no-such-flag\nstdout: %s\nstderr: %s", path, out, errOut)
			require.Empty(t, out, "tock %s --no-such-flag", path)
			require.Contains(t, errOut, "flag provided but not defined: -no-such-flag")
			require.Contains(t, errOut, "tock "+path+" --help")
		})
	}
	for _, group := range commandGroups {
		code, out, errOut := execTock(t, env, group, "--help")
		require.Equal(t, 0, code, "tock %s --help", group)
		require.Empty(t, errOut)
		require.True(t, strings.HasPrefix(out, "Usage:"), "tock %s --help:\n%s", group, out)
		code, out, errOut = execTock(t, env, group)
		require.Equal(t, 2, code, "tock %s", group)
		require.Empty(t, out)
		require.Contains(t, errOut, "Usage:")
		code, out, errOut = execTock(t, env, group, "frobnicate")
		require.Equal(t, 2, code, "tock %s frobnicate", group)
		require.Empty(t, out)
		require.Regexp(t, `unknown (command|scenario) "frobnicate"`, errOut)
		require.Contains(t, errOut, "tock "+group+" --help")
	}
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		code, out, errOut := execTock(t, env, args...)
		require.Equal(t, 0, code)
		require.Empty(t, errOut)
		require.Contains(t, out, "Usage:\n  tock dev")
	}
	code, out, errOut := execTock(t, env)
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "Usage:\n  tock dev")
	code, _, errOut = execTock(t, env, "frob")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown command "frob"`)

	// Missing and extra arguments are usage errors too.
	for _, tc := range []struct{ line, help string }{
		{"jobs get", "jobs get"}, {"jobs get a b", "jobs get"}, {"dead requeue", "dead requeue"},
		{"queues pause", "queues pause"}, {"dev extra", "dev"}, {"bench fire extra", "bench fire"},
		{"jobs create --now", "jobs create"}, {"jobs patch x", "jobs patch"}, {"version extra", "version"},
		{"server --shards x", "server"}, {"snapshot ls --parallel 0 --from x", "snapshot ls"},
	} {
		code, out, errOut := execTock(t, env, strings.Fields(tc.line)...)
		require.Equal(t, 2, code, "tock %s: %s", tc.line, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, "tock "+tc.help+" --help", tc.line)
	}
	// Runtime errors exit 1.
	for _, args := range [][]string{{"jobs", "ls"}, {"queues"}, {"init"}} {
		code, _, errOut := execTock(t, env, args...)
		require.Equal(t, 1, code, "tock %v: %s", args, errOut)
		require.True(t, strings.HasPrefix(errOut, "tock: "), errOut)
	}
}

// tock version and tock --version print the module version, the VCS commit when the
// binary was built from a checkout, and the Go version.
func TestCLI_Version(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := execTock(t, nil, args...)
		require.Equal(t, 0, code, errOut)
		require.Regexp(t, `^tock \S+`, out)
		require.Contains(t, out, runtime.Version())
	}
	require.Equal(t, "tock v1.2.3 (commit 0123456789ab, 2026-11-26T10:00:00Z) go1.26.8 linux/amd64\n",
		versionText("v1.2.3", map[string]string{"vcs.revision": "0123456789abcdef0123", "vcs.time": "2026-11-26T10:00:00Z"}, "go1.26.8", "linux/amd64"))
	require.Equal(t, "tock (devel) (commit 0123456789ab, modified) go1.26.8 linux/amd64\n",
		versionText("(devel)", map[string]string{"vcs.revision": "0123456789ab", "vcs.modified": "true"}, "go1.26.8", "linux/amd64"))
	require.Equal(t, "tock (devel) go1.26.8 linux/amd64\n", versionText("", nil, "go1.26.8", "linux/amd64"))
	require.Regexp(t, regexp.MustCompile(`(?m)^  tock version`), usage)
}
