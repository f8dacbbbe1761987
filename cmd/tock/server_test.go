package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/shard"
)

// role is a tock server, ingest or dispatcher running in the test.
type role struct {
	url    string // the API's, "" without it
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan error
}

// startRole runs `tock <cmd> args...` with env until stop or the end of the test.
func startRole(t *testing.T, cmd command, env map[string]string, args ...string) *role {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &role{logs: &syncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		c := &cli{out: r.logs, errOut: r.logs, getenv: func(k string) string { return env[k] }}
		r.done <- runRoles(ctx, c, cmd, args, func(a string) { addr <- a })
	}()
	select {
	case a := <-addr:
		if a != "" {
			r.url = "http://" + a
		}
	case err := <-r.done:
		cancel()
		t.Fatalf("tock %s ended before it ran: %v\n%s", cmd, err, r.logs.String())
	}
	t.Cleanup(func() {
		if r.cancel != nil {
			r.stop(t)
		}
	})
	return r
}

// stop sends the shutdown signal, checks that the role ended cleanly and returns the
// components in the order they stopped.
func (r *role) stop(t *testing.T) []string {
	t.Helper()
	r.cancel()
	r.cancel = nil
	require.NoError(t, <-r.done, r.logs.String())
	var order []string
	for _, m := range regexp.MustCompile(`msg=stopped component=(\S+)`).FindAllStringSubmatch(r.logs.String(), -1) {
		order = append(order, m[1])
	}
	return order
}

// realBackends returns the real Redis backends (none without redis-server): the roles
// talk to Redis as it is, and miniredis needs a client set up for it.
func realBackends(t *testing.T) []redistest.Backend {
	var bs []redistest.Backend
	for _, b := range redistest.Backends(t) {
		if b.Mini == nil {
			bs = append(bs, b)
		}
	}
	return bs
}

func TestServer_RunsTheAPIAndADispatcher(t *testing.T) {
	t.Parallel()
	for _, b := range realBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ns := redistest.Namespace(t, b)
			env := map[string]string{
				"TOCK_REDIS":  strings.Join(b.Addrs, ","),
				"TOCK_TOKENS": "writer-0123456789abcdef:write, reader-0123456789abcdef:read",
			}
			s := startRole(t, cmdServer, env, "--http", "127.0.0.1:0", "--namespace", ns, "--shards", "8",
				"--metrics-http", "127.0.0.1:0", "--snapshot-to", "file://"+t.TempDir(), "--snapshot-every", "1h")
			api := map[string]string{"TOCK_API": s.url, "TOCK_TOKEN": "writer-0123456789abcdef"}
			// No worker runs in tock server: the dispatcher moves the run to ready.
			createAndAwaitReady(t, api, "soon", "300ms")
			r := runTock(t, context.Background(), map[string]string{"TOCK_API": s.url, "TOCK_TOKEN": "reader-0123456789abcdef"}, "", "jobs", "cancel", "soon")
			require.ErrorContains(t, r.err, "403")
			r = runTock(t, context.Background(), map[string]string{"TOCK_API": s.url}, "", "jobs", "get", "soon")
			require.ErrorContains(t, r.err, "401")
			require.Contains(t, httpGet(t, s.url+"/metrics", "reader-0123456789abcdef"), `tock_http_requests_total{code="201",route="POST /v1/jobs"} 1`)
			m := regexp.MustCompile(`metrics=(http://\S+/metrics)`).FindStringSubmatch(s.logs.String())
			require.NotNil(t, m, s.logs.String())
			require.Contains(t, httpGet(t, m[1]), "tock_runs_fired_total{shard=")

			require.Equal(t, []string{"ingest", "dispatcher", "workers", "snapshots", "metrics", "redis"}, s.stop(t))
			require.Contains(t, s.logs.String(), "tock server shutting down")
		})
	}
}

// TestIngestAndDispatcher runs the two roles as separate processes would: the API
// takes a job and the dispatcher fires it.
func TestIngestAndDispatcher(t *testing.T) {
	t.Parallel()
	for _, b := range realBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ns := redistest.Namespace(t, b)
			// The dispatcher reads a config file; the API the environment.
			file := filepath.Join(t.TempDir(), "tock.yaml")
			require.NoError(t, os.WriteFile(file, []byte("redis:\n"+yamlList(b.Addrs)+"namespace: "+ns+
				"\nshards: 8\nname: disp-a\nlease_ttl: 1s\nlog_level: info\nmetrics_http: 127.0.0.1:0\n"), 0o600))
			d := startRole(t, cmdDispatcher, map[string]string{"TOCK_CONFIG": file})
			require.Empty(t, d.url)
			require.Contains(t, d.logs.String(), `dispatcher=disp-a`)
			api := startRole(t, cmdIngest, map[string]string{"TOCK_REDIS": strings.Join(b.Addrs, ","),
				"TOCK_NAMESPACE": ns, "TOCK_HTTP": "127.0.0.1:0", "TOCK_DURABILITY": "async"})
			require.NotContains(t, api.logs.String(), "dispatcher=")
			require.Contains(t, api.logs.String(), "shards=8") // the namespace's, without --shards

			env := map[string]string{"TOCK_API": api.url}
			createAndAwaitReady(t, env, "soon", "200ms")

			require.Equal(t, []string{"ingest", "redis"}, api.stop(t))
			require.Equal(t, []string{"dispatcher", "workers", "metrics", "redis"}, d.stop(t))
			require.Contains(t, d.logs.String(), "tock dispatcher shutting down")
		})
	}
}

func yamlList(items []string) string {
	var b strings.Builder
	for _, it := range items {
		b.WriteString("  - " + it + "\n")
	}
	return b.String()
}

func TestInit(t *testing.T) {
	t.Parallel()
	for _, b := range realBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			ns := redistest.Namespace(t, b)
			env := map[string]string{"TOCK_REDIS": strings.Join(b.Addrs, ","), "TOCK_NAMESPACE": ns}
			run := func(args ...string) result {
				return runTock(t, context.Background(), env, "", append([]string{"init"}, args...)...)
			}

			r := run("--shards", "16", "--bucket", "5m")
			require.NoError(t, r.err)
			require.Equal(t, `created namespace "`+ns+`": 16 shards, 5m buckets, schema v2 (Redis `+env["TOCK_REDIS"]+")\n", r.out)

			r = run("--shards", "16", "--json")
			require.NoError(t, r.err)
			require.Equal(t, initResult{Namespace: ns, Created: false, Shards: 16, Bucket: "5m", Schema: shard.SchemaVersion},
				decodeJSON[initResult](t, r.out))
			r = run() // no settings: the namespace's
			require.NoError(t, r.err)
			require.Contains(t, r.out, `namespace already initialised: "`+ns+`": 16 shards, 5m buckets`)

			r = run("--shards", "32")
			require.EqualError(t, r.err, `init: --shards "32": namespace "`+ns+`" was initialised with 16 shards, and its shard count cannot change `+
				`(leave the setting out to use the namespace's, or choose another --namespace)`)
			env["TOCK_BUCKET"] = "1m"
			r = run()
			require.EqualError(t, r.err, `init: TOCK_BUCKET="1m" (env): namespace "`+ns+`" was initialised with 5m buckets, and its bucket width cannot change `+
				`(leave the setting out to use the namespace's, or choose another --namespace)`)

			// Explicit settings that differ are refused by the roles too.
			r = runTock(t, context.Background(), map[string]string{"TOCK_REDIS": env["TOCK_REDIS"]},
				"", "dispatcher", "--namespace", ns, "--shards", "64")
			require.ErrorContains(t, r.err, `dispatcher: --shards "64": namespace "`+ns+`" was initialised with 16 shards`)
		})
	}
}

func TestServer_Flags(t *testing.T) {
	t.Parallel()
	redis := map[string]string{"TOCK_REDIS": "127.0.0.1:1"}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, nil, "server: --redis (or TOCK_REDIS, or redis in the --config file): required"},
		{redis, []string{"--roles", "api,cook"}, `server: --roles "api,cook": item 2: unknown role "cook": want api, dispatcher, push, or several`},
		{redis, []string{"--roles", ""}, `server: --roles "": want api, dispatcher, push, or several`},
		{redis, []string{"--token", "short:write"}, "server: --token: secret shorter than 16 characters"},
		{redis, []string{"--token", "0123456789abcdefg:admin"}, `server: --token: scope "admin": want read, write or worker`},
		{map[string]string{"TOCK_REDIS": "127.0.0.1:1", "TOCK_TOKENS": "0123456789abcdefg:read,nocolon"}, nil,
			`server: TOCK_TOKENS (env): item 2: want "secret:scope" with scope read, write or worker`},
		{redis, []string{"--log-level", "loud"}, `server: --log-level "loud": want debug, info, warn or error`},
		{redis, []string{"extra"}, `server: unexpected argument "extra" (tock server --help lists the flags)`},
		{redis, []string{"--bogus"}, `server: flag provided but not defined: -bogus (tock server --help lists the flags)`},
		{redis, []string{"--snapshot-every", "1h"}, `server: --snapshot-every "1h": --snapshot-to is required to export snapshots`},
		// A setting of another command is no flag of this one.
		{redis, []string{"--roles", "api"}, "ingest: flag provided but not defined: -roles"},
	} {
		cmd := "server"
		if strings.HasPrefix(tc.want, "ingest") {
			cmd = "ingest"
		}
		r := runTock(t, context.Background(), tc.env, "", append([]string{cmd}, tc.args...)...)
		require.ErrorContains(t, r.err, tc.want, "%v %v", tc.env, tc.args)
	}
	require.True(t, isLoopback("127.0.0.1:8080"))
	require.True(t, isLoopback("[::1]:8080"))
	require.True(t, isLoopback("localhost:8080"))
	require.False(t, isLoopback(":8080"))
	require.False(t, isLoopback("0.0.0.0:8080"))
}

// createAndAwaitReady creates job id due after delay through the API of env (TOCK_API,
// TOCK_TOKEN) and waits until a dispatcher has made its run ready.
func createAndAwaitReady(t *testing.T, env map[string]string, id, delay string) {
	t.Helper()
	r := runTock(t, context.Background(), env, "", "jobs", "create", "--id", id, "--type", "t", "--delay", delay)
	require.NoError(t, r.err, r.errOut)
	require.Eventually(t, func() bool {
		r := runTock(t, context.Background(), env, "", "jobs", "get", id, "--json")
		return r.err == nil && decodeJSON[ingest.Job](t, r.out).State == "ready"
	}, 10*time.Second, 20*time.Millisecond)
}
