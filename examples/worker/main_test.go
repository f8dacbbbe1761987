package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/tockhq/tock"
	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseConfig(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	cfg, err := parseConfig(nil, env(map[string]string{
		"TOCK_REDIS": "redis-1:6379, redis-2:6379", "TOCK_QUEUES": "default,mail",
		"TOCK_CONCURRENCY": "4", "TOCK_DEMO": "true", "TOCK_SHUTDOWN_TIMEOUT": "5s",
	}), &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, []string{"redis-1:6379", "redis-2:6379"}, cfg.redis)
	require.Equal(t, []string{"default", "mail"}, cfg.queues)
	require.Equal(t, 4, cfg.concurrency)
	require.True(t, cfg.demo)
	require.Equal(t, 5*time.Second, cfg.shutdownTimeout)
	require.Equal(t, "tock", cfg.namespace)
	require.Zero(t, cfg.shards, "the namespace's shard count")

	cfg, err = parseConfig([]string{"--concurrency", "7", "--redis", "127.0.0.1:7000"},
		env(map[string]string{"TOCK_REDIS": "ignored:1", "TOCK_CONCURRENCY": "4"}), &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, 7, cfg.concurrency, "a flag wins over its environment variable")
	require.Equal(t, []string{"127.0.0.1:7000"}, cfg.redis)

	_, err = parseConfig(nil, env(nil), &bytes.Buffer{})
	require.ErrorContains(t, err, "TOCK_REDIS")
	_, err = parseConfig(nil, env(map[string]string{"TOCK_REDIS": "r:1", "TOCK_CONCURRENCY": "many"}), &bytes.Buffer{})
	require.ErrorContains(t, err, "TOCK_CONCURRENCY")
	_, err = parseConfig([]string{"--redis", "r:1", "extra"}, env(nil), &bytes.Buffer{})
	require.ErrorContains(t, err, "extra")
}

// Every flag appears in --help as --name with its environment variable, the form
// cmd/tock's compose test reads.
func TestHelp(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	_, err := parseConfig([]string{"--help"}, func(string) string { return "" }, &out)
	require.Error(t, err)
	for _, name := range []string{"redis", "redis-password", "namespace", "shards", "queues", "concurrency", "id", "demo", "shutdown-timeout", "log-level"} {
		require.Contains(t, out.String(), "  --"+name+" ", "help lists --%s", name)
		require.Contains(t, out.String(), envName(name), "help names the variable of --%s", name)
	}
	require.Equal(t, "TOCK_SHUTDOWN_TIMEOUT", envName("shutdown-timeout"))
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"3s": 3 * time.Second, ` "250ms" `: 250 * time.Millisecond, "0s": 0} {
		got, err := parseDuration([]byte(in))
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "soon", "-1s", `"3s`, `{"d":"3s"}`} {
		_, err := parseDuration([]byte(in))
		require.Error(t, err, in)
	}
}

// The worker follows the shard count and bucket width a namespace was initialised with,
// unless --shards asks for another.
func TestOpenNamespace(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, rc := redistest.Mini(t)
	_, err := tock.New(ctx, rc, shard.Config{Namespace: "srv", Shards: 8, BucketSize: 10 * time.Second})
	require.NoError(t, err)

	c, err := openNamespace(ctx, rc, "srv", 0)
	require.NoError(t, err)
	require.Equal(t, 8, c.Store().Shards())
	_, err = openNamespace(ctx, rc, "srv", 16)
	var me *shard.ConfigMismatchError
	require.ErrorAs(t, err, &me)
	require.ErrorContains(t, err, "--shards")

	c, err = openNamespace(ctx, rc, "new", 0)
	require.NoError(t, err)
	require.Equal(t, shard.DefaultShards, c.Store().Shards(), "a new namespace gets the default")
}

// syncBuffer is a bytes.Buffer safe for the worker's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lines returns the log lines that contain every one of parts.
func (s *syncBuffer) lines(parts ...string) []string {
	var out []string
next:
	for _, l := range strings.Split(s.String(), "\n") {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// The handlers run jobs fired by a dispatcher and every run is logged with its
// outcome; a graceful stop lets a running handler finish.
func TestWorker(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, rc := redistest.Mini(t)
	client, err := tock.New(ctx, rc, shard.Config{Shards: 4})
	require.NoError(t, err)

	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	d, err := dispatcher.New(dispatcher.Config{Store: client.Store(), Name: "test"})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { require.NoError(t, d.Stop(context.WithoutCancel(ctx))) })
	w, err := newWorker(client.Store(), config{queues: []string{job.DefaultQueue}, concurrency: 2, id: "example-test"}, logger)
	require.NoError(t, err)
	require.NoError(t, w.Start(context.WithoutCancel(ctx)))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = w.Stop(context.WithoutCancel(ctx))
		}
	})

	require.NoError(t, createDemoJob(ctx, client, logger))
	require.NoError(t, createDemoJob(ctx, client, logger), "the demo job is created once")
	require.Len(t, logs.lines("demo job created"), 1)
	require.Len(t, logs.lines("demo job exists"), 1)

	now := job.Schedule{Now: true}
	_, err = client.CreateMany(ctx, []*job.Job{
		{ID: "echo-1", Type: TypeEcho, Payload: []byte(`{"hi":1}`), Schedule: now},
		{ID: "sleep-bad", Type: TypeSleep, Payload: []byte("soon"), Schedule: now},
		{ID: "sleep-1", Type: TypeSleep, Payload: []byte(`"1s"`), Schedule: now},
	})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return len(logs.lines("msg=run", "job_id=echo-1", "outcome=succeeded", "attempt=1/")) == 1 &&
			len(logs.lines("msg=run", "job_id=sleep-bad", "outcome=cancelled")) == 1 &&
			len(logs.lines("msg=echo", `payload="{\"hi\":1}"`)) == 1
	}, 10*time.Second, 10*time.Millisecond, logs.String())

	// Stop while sleep-1 runs: it is let finish, not handed back.
	require.Eventually(t, func() bool {
		info, err := client.Get(ctx, "sleep-1")
		return err == nil && info.State == job.StateRunning
	}, 10*time.Second, 10*time.Millisecond, "sleep-1 runs")
	stopped = true
	require.NoError(t, w.Stop(context.WithoutCancel(ctx)))
	require.Len(t, logs.lines("msg=run", "job_id=sleep-1", "outcome=succeeded"), 1, logs.String())
	require.Empty(t, logs.lines(string(worker.OutcomeHandedBack)))
}
