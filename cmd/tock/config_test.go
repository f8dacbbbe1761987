package main

import (
	"bytes"
	"errors"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/shard"
)

var updateDocs = flag.Bool("update", false, "rewrite the settings table in docs/config.md")

// writeConfig writes a config file and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

func load(cmd command, env map[string]string, args ...string) (*config, error) {
	return loadConfig(cmd, args, func(k string) string { return env[k] }, &bytes.Buffer{}, nil)
}

func TestLoadConfig_Defaults(t *testing.T) {
	t.Parallel()
	c, err := load(cmdServer, map[string]string{"TOCK_REDIS": "r:6379"})
	require.NoError(t, err)
	require.Equal(t, []string{"r:6379"}, c.redis)
	require.Equal(t, "tock", c.namespace)
	require.Equal(t, shard.DefaultShards, c.shards)
	require.Equal(t, time.Minute, c.bucket)
	require.Equal(t, ingest.DefaultAddr, c.http)
	require.Empty(t, c.tokens)
	require.Zero(t, c.maxBacklog)
	require.Equal(t, ingest.DefaultMaxBatch, c.maxBatch)
	require.Equal(t, shard.Durability{Timeout: time.Second}, c.durability)
	require.True(t, c.api)
	require.True(t, c.dispatch)
	require.Empty(t, c.name)
	require.Equal(t, 3*time.Second, c.leaseTTL)
	require.Equal(t, 100*time.Millisecond, c.fireLead)
	require.Equal(t, shard.DefaultColdAfter, c.coldAfter)
	require.Empty(t, c.snapshotTo)
	require.Zero(t, c.snapshotEvery)
	require.Equal(t, 24, c.snapshotKeep)
	require.Empty(t, c.metricsHTTP)
	require.Equal(t, slog.LevelInfo, c.logLevel)
	require.Equal(t, 30*time.Second, c.shutdown)
	require.False(t, c.given("shards"))
	require.True(t, c.given("redis"))

	// The role commands run their role.
	c, err = load(cmdIngest, map[string]string{"TOCK_REDIS": "r:6379"})
	require.NoError(t, err)
	require.True(t, c.api)
	require.False(t, c.dispatch)
	c, err = load(cmdDispatcher, map[string]string{"TOCK_REDIS": "r:6379"})
	require.NoError(t, err)
	require.False(t, c.api)
	require.True(t, c.dispatch)
}

func TestLoadConfig_Precedence(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, "redis: file:1\nshards: 10\nhttp: file:80\ntokens:\n  - file-secret-0123456789:read\nlog_level: warn\n")
	for _, tc := range []struct {
		name       string
		env        map[string]string
		args       []string
		shards     int
		http       string
		tokens     []string
		logLevel   slog.Level
		shardsFrom source
	}{
		{"default", map[string]string{"TOCK_REDIS": "r:1"}, nil, 64, ingest.DefaultAddr, nil, slog.LevelInfo, fromDefault},
		{"file", map[string]string{"TOCK_CONFIG": file}, nil, 10, "file:80", []string{"file-secret-0123456789"}, slog.LevelWarn, fromFile},
		{"env over file", map[string]string{"TOCK_CONFIG": file, "TOCK_SHARDS": "20", "TOCK_TOKENS": "env-secret-0123456789:write,env-secret-9876543210:read"},
			nil, 20, "file:80", []string{"env-secret-0123456789", "env-secret-9876543210"}, slog.LevelWarn, fromEnv},
		{"flag over env", map[string]string{"TOCK_CONFIG": file, "TOCK_SHARDS": "20", "TOCK_HTTP": "env:80", "TOCK_TOKENS": "env-secret-0123456789:write"},
			[]string{"--shards", "30", "--token", "flag-secret-0123456789:write", "--token", "flag-secret-9876543210:read", "--log-level", "debug"},
			30, "env:80", []string{"flag-secret-0123456789", "flag-secret-9876543210"}, slog.LevelDebug, fromFlag},
		{"config flag over env", map[string]string{"TOCK_CONFIG": "/nonexistent.yaml"}, []string{"--config", file},
			10, "file:80", []string{"file-secret-0123456789"}, slog.LevelWarn, fromFile},
		{"last flag wins", map[string]string{"TOCK_REDIS": "r:1"}, []string{"--shards", "5", "--shards", "6"}, 6, ingest.DefaultAddr, nil, slog.LevelInfo, fromFlag},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(cmdServer, tc.env, tc.args...)
			require.NoError(t, err)
			require.Equal(t, tc.shards, c.shards)
			require.Equal(t, tc.http, c.http)
			var secrets []string
			for _, tok := range c.tokens {
				secrets = append(secrets, tok.Secret)
			}
			require.Equal(t, tc.tokens, secrets)
			require.Equal(t, tc.logLevel, c.logLevel)
			require.Equal(t, tc.shardsFrom, c.values["shards"].src)
		})
	}
}

func TestLoadConfig_File(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, `# every kind of value
redis: [a:1, b:2]
redis_password: "p@ss: word"
namespace: prod
max_backlog: 1000000
durability: replicas:2
durability_timeout: 250ms
roles: dispatcher
snapshot_to: s3://bucket?region=eu-west-1&prefix=tock/
snapshot_every: 1h
snapshot_keep: 7
name: ~
tokens: a-secret-0123456789:write, b-secret-0123456789:read
`)
	c, err := load(cmdServer, map[string]string{"TOCK_CONFIG": file})
	require.NoError(t, err)
	require.Equal(t, []string{"a:1", "b:2"}, c.redis)
	require.Equal(t, "p@ss: word", c.redisPassword)
	require.Equal(t, "prod", c.namespace)
	require.Equal(t, int64(1000000), c.maxBacklog)
	require.Equal(t, shard.Durability{Replicas: 2, Timeout: 250 * time.Millisecond}, c.durability)
	require.False(t, c.api)
	require.True(t, c.dispatch)
	require.Equal(t, "s3://bucket?region=eu-west-1&prefix=tock/", c.snapshotTo)
	require.Equal(t, time.Hour, c.snapshotEvery)
	require.Equal(t, 7, c.snapshotKeep)
	require.Empty(t, c.name)
	require.Len(t, c.tokens, 2)
	require.Equal(t, fromFile, c.values["redis"].src)
	require.Equal(t, 2, c.values["redis"].line)

	// A file may hold settings of other commands: tock init ignores roles and tokens.
	_, err = load(cmdInit, map[string]string{"TOCK_CONFIG": file})
	require.NoError(t, err)
	// An empty file is no settings.
	_, err = load(cmdInit, map[string]string{"TOCK_CONFIG": writeConfig(t, ""), "TOCK_REDIS": "r:1"})
	require.NoError(t, err)
}

// TestLoadConfig_Errors lists the message of every invalid setting.
func TestLoadConfig_Errors(t *testing.T) {
	t.Parallel()
	redis := map[string]string{"TOCK_REDIS": "r:6379"}
	with := func(kv ...string) map[string]string {
		env := map[string]string{"TOCK_REDIS": "r:6379"}
		for i := 0; i+1 < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		return env
	}
	for _, tc := range []struct {
		cmd  command
		env  map[string]string
		args []string
		want string
	}{
		{cmdServer, nil, nil, "--redis (or TOCK_REDIS, or redis in the --config file): required: address of a Redis server, " +
			"or of Redis Cluster nodes (one is enough: the client finds the others)"},
		{cmdInit, map[string]string{"TOCK_REDIS": " , "}, nil, "--redis (or TOCK_REDIS, or redis in the --config file): required: "},
		{cmdServer, nil, []string{"--redis", "r"}, `--redis "r": want host:port with a port from 1 to 65535`},
		{cmdServer, nil, []string{"--redis", "a:1,:2"}, `--redis "a:1,:2": item 2: want host:port with a port from 1 to 65535`},
		{cmdServer, nil, []string{"--redis", "r:0"}, `--redis "r:0": want host:port with a port from 1 to 65535`},
		{cmdServer, with("TOCK_SHARDS", "abc"), nil, `TOCK_SHARDS="abc" (env): want a whole number from 1 to 4096`},
		{cmdInit, redis, []string{"--shards", "0"}, `--shards "0": want a whole number from 1 to 4096`},
		{cmdInit, redis, []string{"--shards", "4097"}, `--shards "4097": want a whole number from 1 to 4096`},
		{cmdInit, redis, []string{"--bucket", "1ms"}, `--bucket "1ms": want a duration from 1s to 24h, such as 90s or 10m`},
		{cmdInit, redis, []string{"--bucket", "60"}, `--bucket "60": want a duration from 1s to 24h, such as 90s or 10m`},
		{cmdInit, redis, []string{"--namespace", "a b"}, `--namespace "a b": "a b": character ' ' at 1 is not one of A-Z a-z 0-9 . _ ~ -`},
		{cmdInit, redis, []string{"--namespace", strings.Repeat("n", 33)}, `--namespace "` + strings.Repeat("n", 33) + `": longer than 32 bytes`},
		{cmdServer, redis, []string{"--http", ":99999"}, `--http ":99999": want host:port or :port with a port from 0 to 65535`},
		{cmdIngest, redis, []string{"--http", "localhost"}, `--http "localhost": want host:port or :port with a port from 0 to 65535`},
		{cmdIngest, with("TOCK_HTTP", ""), []string{"--http", ""}, `--http "": want host:port or :port with a port from 0 to 65535`},
		{cmdDispatcher, with("TOCK_METRICS_HTTP", "x"), nil, `TOCK_METRICS_HTTP="x" (env): want host:port or :port with a port from 0 to 65535`},
		{cmdServer, redis, []string{"--token", "nocolon"}, `--token: want "secret:scope" with scope read, write or worker`},
		{cmdServer, redis, []string{"--token", "short:read"}, `--token: secret shorter than 16 characters`},
		{cmdServer, redis, []string{"--token", "0123456789abcdef:admin"}, `--token: scope "admin": want read, write or worker`},
		{cmdServer, with("TOCK_TOKENS", "0123456789abcdef:read,0123456789abcdef:write"), nil, `TOCK_TOKENS (env): item 2: the same secret twice`},
		{cmdServer, redis, []string{"--max-backlog", "-1"}, `--max-backlog "-1": want a whole number, 0 or more`},
		{cmdServer, redis, []string{"--max-batch", "0"}, `--max-batch "0": want a whole number from 1 to 1000000`},
		{cmdIngest, with("TOCK_DURABILITY", "all"), nil, `TOCK_DURABILITY="all" (env): want async or replicas:N with N from 1 to 16`},
		{cmdIngest, redis, []string{"--durability", "replicas:17"}, `--durability "replicas:17": want async or replicas:N with N from 1 to 16`},
		{cmdIngest, redis, []string{"--durability-timeout", "0s"}, `--durability-timeout "0s": want a duration from 1ms to 1m, such as 90s or 10m`},
		{cmdServer, redis, []string{"--roles", "api,cook"}, `--roles "api,cook": item 2: unknown role "cook": want api, dispatcher, push, or several`},
		{cmdServer, redis, []string{"--roles", ","}, `--roles ",": want api, dispatcher, push, or several`},
		{cmdDispatcher, redis, []string{"--name", "a/b"}, `--name "a/b": "a/b": character '/' at 1 is not one of A-Z a-z 0-9 . _ ~ -`},
		{cmdDispatcher, redis, []string{"--lease-ttl", "100ms"}, `--lease-ttl "100ms": want a duration from 300ms to 1m, such as 90s or 10m`},
		{cmdIngest, redis, []string{"--cold-after", "30s"}, `--cold-after "30s": want 0 (never) or a duration from 1m to 8760h, such as 10m`},
		{cmdServer, redis, []string{"--cold-after", "-1m"}, `--cold-after "-1m": want a duration from 0s to 8760h, such as 90s or 10m`},
		{cmdDispatcher, redis, []string{"--fire-lead", "2s"}, `--fire-lead "2s": want a duration from 0s to 1s, such as 90s or 10m`},
		{cmdDispatcher, redis, []string{"--snapshot-to", "s3://b%zz"}, `--snapshot-to "s3://b%zz": want a directory or a URL such as file:///var/lib/tock/snapshots or s3://bucket?region=us-east-1`},
		{cmdDispatcher, redis, []string{"--snapshot-every", "-1s"}, `--snapshot-every "-1s": want 0, or a duration of 1s or more such as 10m or 1h`},
		// Below 1s snapshot.RunPeriodic refuses to run: the server would run without snapshots.
		{cmdDispatcher, redis, []string{"--snapshot-to", "x", "--snapshot-every", "500ms"}, `--snapshot-every "500ms": want 0, or a duration of 1s or more such as 10m or 1h`},
		// A scheme no blob driver opens would only fail when the first export starts.
		{cmdDispatcher, redis, []string{"--snapshot-to", "gs://bucket"}, `--snapshot-to "gs://bucket": scheme "gs": want a directory, file:///dir or s3://bucket?region=<region>`},
		{cmdServer, redis, []string{"--snapshot-to", "https://example.com/x"}, `--snapshot-to "https://example.com/x": scheme "https": want a directory, file:///dir or s3://bucket?region=<region>`},
		{cmdDispatcher, redis, []string{"--snapshot-every", "1h"}, `--snapshot-every "1h": --snapshot-to is required to export snapshots`},
		{cmdDispatcher, redis, []string{"--snapshot-keep", "0"}, `--snapshot-keep "0": want a whole number from 1 to 100000`},
		{cmdServer, redis, []string{"--log-level", "loud"}, `--log-level "loud": want debug, info, warn or error`},
		{cmdServer, redis, []string{"--log-level", "INFO+2"}, `--log-level "INFO+2": want debug, info, warn or error`},
		{cmdServer, redis, []string{"--shutdown-timeout", "0"}, `--shutdown-timeout "0": want a duration from 1ms to 1h, such as 90s or 10m`},
		{cmdServer, with("TOCK_REDIS_PASSWORD", ""), []string{"extra"}, `unexpected argument "extra" (tock server --help lists the flags)`},
		{cmdInit, redis, []string{"--roles", "api"}, `flag provided but not defined: -roles (tock init --help lists the flags)`},
		{cmdServer, map[string]string{"TOCK_CONFIG": "/nonexistent/tock.yaml"}, nil, `--config: open /nonexistent/tock.yaml: no such file or directory`},
		// Every invalid setting at once.
		{cmdServer, with("TOCK_SHARDS", "x"), []string{"--http", "x"}, "TOCK_SHARDS=\"x\" (env): want a whole number from 1 to 4096\n" +
			`--http "x": want host:port or :port with a port from 0 to 65535`},
	} {
		_, err := load(tc.cmd, tc.env, tc.args...)
		require.Error(t, err, "%s %v %v", tc.cmd, tc.env, tc.args)
		if strings.HasSuffix(tc.want, ": ") {
			require.ErrorContains(t, err, tc.want)
			continue
		}
		require.EqualError(t, err, tc.want, "%s %v %v", tc.cmd, tc.env, tc.args)
	}
}

func TestLoadConfig_SecretsStayHidden(t *testing.T) {
	t.Parallel()
	_, err := load(cmdServer, map[string]string{"TOCK_REDIS": "r:1", "TOCK_TOKENS": "hunter2hunter2:admin"})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2")
	file := writeConfig(t, "redis: r:1\ntokens: [hunter2hunter2hunter2:root]\n")
	_, err = load(cmdServer, map[string]string{"TOCK_CONFIG": file})
	require.EqualError(t, err, file+` line 2: tokens: scope "root": want read, write or worker`)
	// --help shows no value from the environment (tock snapshot's own flags once took
	// TOCK_REDIS_PASSWORD as their default, which --help printed).
	env := map[string]string{"TOCK_REDIS_PASSWORD": "hunter2", "TOCK_TOKENS": "hunter2hunter2hunter2:write"}
	for _, ci := range commandInfo {
		r := runTock(t, t.Context(), env, "", append(strings.Fields(ci.name), "--help")...)
		require.ErrorIs(t, r.err, flag.ErrHelp)
		require.NotContains(t, r.out+r.errOut, "hunter2", ci.name)
	}
}

func TestLoadConfig_FileErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		want string // after "<path> "
	}{
		{"redis: r:1\nshards: 8\nhttp: :80\nredis_adress: r:2\n", `line 4: unknown setting "redis_adress"`},
		{"redis: r:1\nfrobnicate: yes\n", `line 2: unknown setting "frobnicate"`},
		{"redis: r:1\nconfig: other.yaml\n", `line 2: unknown setting "config"`},
		{"redis: r:1\nshards: abc\n", `line 2: shards "abc": want a whole number from 1 to 4096`},
		{"redis: r:1\nredis: r:2\n", `line 2: redis given twice (first on line 1)`},
		{"redis: r:1\nhttp: [a:1, b:2]\n", `line 2: http: want a single value`},
		{"redis: r:1\nhttp:\n  host: a\n", `line 3: http: want a single value`},
		{"redis:\n  - [a:1]\n", `line 2: redis: item 1: want a single value`},
		{"redis:\n  - a:1,b:2\n", `line 2: redis: item 1: a value cannot hold a comma`},
		{"redis: {a: 1}\n", `line 1: redis: want a value or a list of values`},
		{"- redis\n", `line 1: want settings as key: value lines`},
		{"redis: [\n", `yaml: line 1: did not find expected node content`},
		// All the file's errors at once.
		{"shard: 8\nnamespce: x\n", "line 1: unknown setting \"shard\" (did you mean \"shards\"?)\n<path> line 2: unknown setting \"namespce\" (did you mean \"namespace\"?)"},
	} {
		file := writeConfig(t, tc.text)
		_, err := load(cmdServer, map[string]string{"TOCK_CONFIG": file})
		want := file + " " + tc.want
		if strings.HasPrefix(tc.want, "yaml:") {
			want = file + ": " + tc.want
		}
		require.EqualError(t, err, strings.ReplaceAll(want, "<path>", file), tc.text)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, ci := range commandInfo {
		r := runTock(t, t.Context(), nil, "", append(strings.Fields(ci.name), "--help")...)
		require.ErrorIs(t, r.err, flag.ErrHelp)
		require.Contains(t, r.out, "Usage: tock "+ci.name+" [flags]")
		for _, line := range strings.Split(r.out, "\n") {
			require.LessOrEqual(t, len(line), 88, line)
		}
		for _, s := range settings {
			if s.cmds&ci.cmd == 0 {
				require.NotContains(t, r.out, "--"+s.flag+" ", ci.name)
				continue
			}
			require.Contains(t, r.out, "\n  --"+s.flagName(ci.cmd)+" "+s.arg+"\n", ci.name)
			require.Contains(t, r.out, "env "+s.envName(), ci.name)
		}
	}
	r := runTock(t, t.Context(), nil, "", "server", "-h")
	require.ErrorIs(t, r.err, flag.ErrHelp)
	require.Contains(t, r.out, "      env TOCK_REDIS, file key redis, required\n")
	require.Contains(t, r.out, "      env TOCK_HTTP, file key http, default 127.0.0.1:8080\n")
	require.Contains(t, r.out, "      env TOCK_TOKENS, file key tokens\n")
	require.Contains(t, r.out, "      env TOCK_CONFIG\n")
	require.Contains(t, r.out, "      env TOCK_SHARDS, file key shards, default the namespace's; for a new one 64\n")
	r = runTock(t, t.Context(), nil, "", "init", "--help")
	require.Contains(t, r.out, "  --json\n      print the result as JSON\n")
	// The snapshot commands: the location setting under its own flag name, required;
	// command flags with their argument and default.
	r = runTock(t, t.Context(), nil, "", "snapshot", "export", "--help")
	require.ErrorIs(t, r.err, flag.ErrHelp)
	require.Contains(t, r.out, "\n  --to location\n")
	require.Contains(t, r.out, "      env TOCK_SNAPSHOT_TO, file key snapshot_to, required\n")
	require.Contains(t, r.out, "\n  --parallel N\n      N shard files written or read at once (default 4)\n")
	require.NotContains(t, r.out, "--from ")
	r = runTock(t, t.Context(), nil, "", "snapshot", "ls", "-h")
	require.ErrorIs(t, r.err, flag.ErrHelp)
	require.Contains(t, r.out, "\n  --from location\n")
	require.NotContains(t, r.out, "--redis ")
}

// TestConfigDoc checks that docs/config.md lists every setting as the table says; run
// with -update to rewrite its table.
func TestConfigDoc(t *testing.T) {
	t.Parallel()
	const path = "../../docs/config.md"
	const begin, end = "<!-- settings:begin (generated by go test ./cmd/tock -run TestConfigDoc -update) -->\n", "<!-- settings:end -->\n"
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	require.True(t, i >= 0 && j > i, "docs/config.md has no settings markers")
	want := doc[:i+len(begin)] + settingsMarkdown() + doc[j:]
	if *updateDocs {
		require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
		return
	}
	require.Equal(t, want, doc, "docs/config.md is out of date: go test ./cmd/tock -run TestConfigDoc -update")
}

func TestSettingsTable(t *testing.T) {
	t.Parallel()
	envs, keys := map[string]bool{}, map[string]bool{}
	for _, s := range settings {
		require.False(t, envs[s.envName()], s.flag)
		envs[s.envName()] = true
		require.True(t, strings.HasPrefix(s.envName(), "TOCK_"), s.flag)
		if k := s.fileKey(); k != "" {
			require.False(t, keys[k], s.flag)
			keys[k] = true
		}
		require.NotEmpty(t, s.help, s.flag)
		require.NotEmpty(t, s.arg, s.flag)
		require.NotZero(t, s.cmds, s.flag)
		require.Equal(t, s.required, s.required&s.cmds, "%s is required by commands that do not read it", s.flag)
		for cmd := range s.flagIn {
			require.NotZero(t, s.cmds&cmd, "%s has a flag name in a command that does not read it", s.flag)
		}
		if s.flag != "config" {
			require.NotNil(t, s.parse, s.flag)
		}
		// Every default is valid.
		if s.def != "" {
			require.NoError(t, s.parseValue(&config{}, s.def), s.flag)
		}
	}
}

// TestSettingsTable_FlagNames checks that no two settings of a command share a flag.
func TestSettingsTable_FlagNames(t *testing.T) {
	t.Parallel()
	for _, ci := range commandInfo {
		seen := map[string]string{}
		for _, s := range settings {
			if s.cmds&ci.cmd == 0 {
				continue
			}
			name := s.flagName(ci.cmd)
			require.Empty(t, seen[name], "tock %s: --%s is %s and %s", ci.name, name, seen[name], s.flag)
			seen[name] = s.flag
		}
	}
}

func TestHelpers(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{time.Minute: "1m", 24 * time.Hour: "24h", 90 * time.Second: "1m30s",
		300 * time.Millisecond: "300ms", time.Hour + time.Second: "1h0m1s", 0: "0s"} {
		require.Equal(t, want, shortDuration(d))
	}
	require.Equal(t, 0, editDistance("redis", "redis"))
	require.Equal(t, 1, editDistance("redis_adress", "redis_address"))
	require.Equal(t, 3, editDistance("", "abc"))
	require.Equal(t, "  a b\n  c", wrap("a b c", 5, "  "))
	require.Equal(t, "longword\nx", wrap("longword x", 4, ""))
	var se *settingError
	_, err := load(cmdServer, map[string]string{"TOCK_REDIS": "r:1", "TOCK_SHARDS": "x"})
	require.True(t, errors.As(err, &se))
	// Locations the snapshot package opens.
	for _, v := range []string{"/var/lib/tock", "snapshots", "./s", `C:\tock`, "file:///var/lib/tock", "s3://b?region=eu-west-1", "S3://b"} {
		c, err := load(cmdDispatcher, map[string]string{"TOCK_REDIS": "r:1", "TOCK_SNAPSHOT_TO": v})
		require.NoError(t, err, v)
		require.Equal(t, v, c.snapshotTo)
	}
	c, err := load(cmdDispatcher, map[string]string{"TOCK_REDIS": "r:1", "TOCK_SNAPSHOT_TO": "d", "TOCK_SNAPSHOT_EVERY": "1s"})
	require.NoError(t, err)
	require.Equal(t, time.Second, c.snapshotEvery)
}

// --cold-after 0 turns cold storage off (shard.Config's negative); other values pass.
func TestLoadConfig_ColdAfter(t *testing.T) {
	t.Parallel()
	env := map[string]string{"TOCK_REDIS": "r:6379"}
	c, err := load(cmdIngest, env, "--cold-after", "0")
	require.NoError(t, err)
	require.Negative(t, c.coldAfter)
	c, err = load(cmdDispatcher, env, "--cold-after", "2h")
	require.NoError(t, err)
	require.Equal(t, 2*time.Hour, c.coldAfter)
}

// --pack off stores job hashes (shard.Config.NoPack); on is the default.
func TestLoadConfig_Pack(t *testing.T) {
	t.Parallel()
	env := map[string]string{"TOCK_REDIS": "r:6379"}
	c, err := load(cmdIngest, env)
	require.NoError(t, err)
	require.False(t, c.noPack)
	c, err = load(cmdServer, env, "--pack", "off")
	require.NoError(t, err)
	require.True(t, c.noPack)
	c, err = load(cmdDispatcher, env, "--pack", "ON")
	require.NoError(t, err)
	require.False(t, c.noPack)
	_, err = load(cmdServer, env, "--pack", "maybe")
	require.ErrorContains(t, err, `--pack "maybe": want on or off`)
}
