package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/shard"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// syncBuffer is a bytes.Buffer safe for the concurrent writes of tock dev.
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

// apiBundle is an ingest server on miniredis, and how to run CLI commands against it.
type apiBundle struct {
	url   string
	store *shard.Store
	env   map[string]string
}

func setupAPI(t *testing.T, tokens ...ingest.Token) *apiBundle {
	t.Helper()
	_, rc := redistest.Mini(t)
	ctx := context.Background()
	store, err := shard.Open(ctx, rc, shard.Config{Namespace: "cli", Shards: 4})
	require.NoError(t, err)
	srv, err := ingest.New(ingest.Config{Store: store, Addr: "127.0.0.1:0", Tokens: tokens})
	require.NoError(t, err)
	require.NoError(t, srv.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, srv.Stop(sctx))
	})
	u := "http://" + srv.Addr()
	return &apiBundle{url: u, store: store, env: map[string]string{"TOCK_API": u}}
}

// result is what one CLI command printed and returned.
type result struct {
	out, errOut string
	err         error
}

// run runs `tock args...` with stdin in; TOCK_API points at the bundle's server.
func (b *apiBundle) run(t *testing.T, in string, args ...string) result {
	t.Helper()
	return runTock(t, context.Background(), b.env, in, args...)
}

func runTock(t *testing.T, ctx context.Context, env map[string]string, in string, args ...string) result {
	t.Helper()
	var out, errOut syncBuffer
	c := &cli{out: &out, errOut: &errOut, in: strings.NewReader(in), loc: time.UTC,
		getenv: func(k string) string { return env[k] }}
	err := run(ctx, args, c)
	return result{out.String(), errOut.String(), err}
}

// ok runs a command that must succeed and returns its stdout.
func (b *apiBundle) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := b.run(t, "", args...)
	require.NoError(t, r.err, "tock %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.out, r.errOut)
	return r.out
}

func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal([]byte(s), &v), s)
	return v
}

func TestJobs_CreateGetList(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)

	out := b.ok(t, "jobs", "create", "--id", "welcome-42", "--type", "email.welcome", "--payload", `{"user":42}`,
		"--delay", "90s", "--priority", "7", "--max-attempts", "3", "--timeout", "1m")
	require.Contains(t, out, "welcome-42")
	require.Contains(t, out, "created")
	require.Regexp(t, `(?m)^ID\s+QUEUE\s+TYPE\s+STATE\s+NEXT RUN\s+RESULT$`, out)

	// The same definition again is the existing job; another one is a conflict.
	out = b.ok(t, "jobs", "create", "--id", "welcome-42", "--type", "email.welcome", "--payload", `{"user":42}`,
		"--delay", "90s", "--priority", "7", "--max-attempts", "3", "--timeout", "1m")
	require.Contains(t, out, "exists")
	r := b.run(t, "", "jobs", "create", "--id", "welcome-42", "--type", "email.other", "--now")
	require.ErrorContains(t, r.err, "409 conflict")

	out = b.ok(t, "jobs", "create", "--id", "daily", "--type", "report", "--cron", "0 9 * * MON-FRI", "--tz", "Europe/London", "--queue", "reports")
	require.Contains(t, out, "daily")

	out = b.ok(t, "jobs", "get", "welcome-42")
	require.Regexp(t, `(?m)^id:\s+welcome-42$`, out)
	require.Regexp(t, `(?m)^type:\s+email.welcome$`, out)
	require.Regexp(t, `(?m)^schedule:\s+delay 1m30s$|(?m)^schedule:\s+delay 90s$`, out)
	require.Regexp(t, `(?m)^priority:\s+7$`, out)
	require.Regexp(t, `(?m)^retry:\s+max 3 attempts`, out)
	require.Regexp(t, `(?m)^payload:\s+\{"user":42\}$`, out)

	// Flags after the argument work too.
	j := decodeJSON[ingest.Job](t, b.ok(t, "jobs", "get", "daily", "--json"))
	require.Equal(t, "daily", j.ID)
	require.Equal(t, "reports", j.Queue)
	require.Equal(t, "Europe/London", j.Schedule.Timezone)
	require.NotNil(t, j.NextRunAt)

	out = b.ok(t, "jobs", "ls")
	require.Regexp(t, `(?m)^ID\s+QUEUE\s+TYPE\s+STATE\s+SCHEDULE\s+NEXT RUN\s+PRIORITY$`, out)
	require.Regexp(t, `(?m)^daily\s+reports\s+report\s+scheduled\s+cron "0 9 \* \* MON-FRI" Europe/London\s`, out)
	require.Regexp(t, `(?m)^welcome-42\s+default\s+email.welcome\s+scheduled\s`, out)

	out = b.ok(t, "jobs", "ls", "--queue", "reports", "--json")
	l := decodeJSON[ingest.JobList](t, out)
	require.Len(t, l.Jobs, 1)
	require.Equal(t, "daily", l.Jobs[0].ID)

	r = b.run(t, "", "jobs", "get", "nope")
	require.ErrorContains(t, r.err, "404 not_found")
}

func TestJobs_ListPages(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	var batch []ingest.JobRequest
	for i := range 25 {
		batch = append(batch, ingest.JobRequest{ID: fmt.Sprintf("p%02d", i), Type: "t", Schedule: ingest.Schedule{Delay: "1h"}})
	}
	body, err := json.Marshal(batch)
	require.NoError(t, err)
	r := b.run(t, string(body), "jobs", "create", "--file", "-")
	require.NoError(t, r.err, r.errOut)
	require.Contains(t, r.out, "created 25, existing 0, failed 0")

	// --all follows the cursors; every job exactly once.
	l := decodeJSON[ingest.JobList](t, b.ok(t, "jobs", "ls", "--limit", "4", "--all", "--json"))
	require.Empty(t, l.NextCursor)
	seen := map[string]int{}
	for _, j := range l.Jobs {
		seen[j.ID]++
	}
	require.Len(t, seen, 25)

	// Page by hand until the cursor is empty.
	cursor, total := "", 0
	for range 100 {
		args := []string{"jobs", "ls", "--limit", "10", "--json"}
		if cursor != "" {
			args = append(args, "--cursor", cursor)
		}
		page := decodeJSON[ingest.JobList](t, b.ok(t, args...))
		total += len(page.Jobs)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	require.GreaterOrEqual(t, total, 25)

	// The table says how to go on.
	r = b.run(t, "", "jobs", "ls", "--limit", "3")
	require.NoError(t, r.err)
	if strings.Count(r.out, "\n") < 26 {
		require.Contains(t, r.errOut, "--cursor")
	}
}

func TestJobs_CreateFromFile(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	dir := t.TempDir()
	one := filepath.Join(dir, "job.json")
	require.NoError(t, os.WriteFile(one, []byte(`{"id":"f1","type":"t","payload":"hi","schedule":{"delay":"1h"}}`), 0o600))
	out := b.ok(t, "jobs", "create", "--file", one)
	require.Contains(t, out, "f1")
	require.Contains(t, out, "created")

	// A batch with one bad item: the good ones are created, the command fails.
	r := b.run(t, `[{"id":"f2","type":"t","schedule":{"now":true}}, {"id":"f3","schedule":{"now":true}}]`, "jobs", "create", "--file", "-")
	require.ErrorContains(t, r.err, "1 of 2 jobs failed")
	require.Regexp(t, `(?m)^0\s+201\s+f2\s`, r.out)
	require.Regexp(t, `(?m)^1\s+400\s+f3\s.*type`, r.out)
	require.Contains(t, r.out, "created 1, existing 0, failed 1")

	r = b.run(t, `[{"id":"f2","type":"t","schedule":{"now":true}}]`, "jobs", "create", "--file", "-", "--json")
	require.NoError(t, r.err)
	br := decodeJSON[ingest.BatchReply](t, r.out)
	require.Equal(t, 1, br.Existing)

	// A typo is caught before sending, named as the server names it (with the index of
	// the batch's item).
	r = b.run(t, `{"type":"t","shedule":{"now":true}}`, "jobs", "create", "--file", "-")
	require.ErrorContains(t, r.err, `shedule: unknown field`)
	r = b.run(t, `[{"type":"t"},{"type":"t","priority":"high"}]`, "jobs", "create", "--file", "-")
	require.ErrorContains(t, r.err, `[1].priority: must be`)
	// --file excludes the job flags.
	r = b.run(t, `{}`, "jobs", "create", "--file", "-", "--type", "x")
	require.ErrorContains(t, r.err, "--file excludes --type")

	// The idempotency key names a job without an id: twice is one job.
	out = b.ok(t, "jobs", "create", "--type", "t", "--now", "--idempotency-key", "order-7")
	require.Contains(t, out, "created")
	out = b.ok(t, "jobs", "create", "--type", "t", "--now", "--idempotency-key", "order-7")
	require.Contains(t, out, "exists")

	// Payload files: JSON goes as JSON, other bytes as base64, and both come back.
	bin := filepath.Join(dir, "payload.bin")
	require.NoError(t, os.WriteFile(bin, []byte{0, 1, 2, 0xff}, 0o600))
	b.ok(t, "jobs", "create", "--id", "bin", "--type", "t", "--delay", "1h", "--payload-file", bin)
	j := decodeJSON[ingest.Job](t, b.ok(t, "jobs", "get", "bin", "--json"))
	require.Equal(t, "AAEC/w==", j.PayloadBase64)
}

func TestJobs_Errors(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"BadCron", []string{"jobs", "create", "--type", "t", "--cron", "bad"}, "400 invalid_argument: schedule.cron"},
		{"BadDelay", []string{"jobs", "create", "--type", "t", "--delay", "soon"}, "schedule.delay"},
		{"BadPriority", []string{"jobs", "create", "--type", "t", "--now", "--priority", "12"}, "priority"},
		{"NoType", []string{"jobs", "create", "--now"}, "--type is required"},
		{"NoSchedule", []string{"jobs", "create", "--type", "t"}, "a schedule is required"},
		{"PayloadNotJSON", []string{"jobs", "create", "--type", "t", "--now", "--payload", "hello"}, "--payload: not valid JSON"},
		{"TwoPayloads", []string{"jobs", "create", "--type", "t", "--now", "--payload", "1", "--payload-base64", "AA=="}, "exclude each other"},
		{"GetNoID", []string{"jobs", "get"}, "a job id is required"},
		{"GetTwoIDs", []string{"jobs", "get", "a", "b"}, `unexpected argument "b"`},
		{"UnknownSub", []string{"jobs", "frobnicate"}, `unknown command "frobnicate"`},
		{"CancelMissing", []string{"jobs", "cancel", "nope"}, "404 not_found"},
		{"PatchNothing", []string{"jobs", "patch", "x"}, "nothing to change"},
		{"DeadBadRun", []string{"dead", "rm", "nope:1"}, "404"},
		{"BadAPI", []string{"jobs", "ls", "--api", "localhost:1"}, "--api"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := b.run(t, "", tc.args...)
			require.ErrorContains(t, r.err, tc.want)
		})
	}
	// Nothing listening.
	r := runTock(t, context.Background(), map[string]string{"TOCK_API": "http://127.0.0.1:1"}, "", "queues")
	require.ErrorContains(t, r.err, "connection refused")
	// Help is not an error; no command is a usage error, with the usage.
	r = b.run(t, "", "jobs", "--help")
	require.ErrorIs(t, r.err, flag.ErrHelp)
	require.Contains(t, r.out, "tock jobs create")
	r = b.run(t, "", "jobs")
	var ue *usageError
	require.ErrorAs(t, r.err, &ue)
	require.Contains(t, ue.usage, "tock jobs create")
}

func TestJobs_Actions(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	b.ok(t, "jobs", "create", "--id", "a", "--type", "t", "--cron", "@hourly")
	b.ok(t, "jobs", "create", "--id", "b", "--type", "t", "--delay", "1h")

	out := b.ok(t, "jobs", "pause", "a", "b")
	require.Regexp(t, `(?m)^ID\s+STATE\s+CHANGED$`, out)
	require.Regexp(t, `(?m)^a\s+paused\s+true$`, out)
	require.Regexp(t, `(?m)^b\s+paused\s+true$`, out)
	sr := decodeJSON[ingest.StateReply](t, b.ok(t, "jobs", "pause", "a", "--json"))
	require.False(t, sr.Changed)
	out = b.ok(t, "jobs", "resume", "a")
	require.Regexp(t, `(?m)^a\s+scheduled\s+true$`, out)

	out = b.ok(t, "jobs", "trigger", "a")
	require.Regexp(t, `(?m)^a\s+a:\d+$`, out)

	out = b.ok(t, "jobs", "patch", "b", "--priority", "9", "--payload", `"new"`)
	require.Regexp(t, `(?m)^priority:\s+9$`, out)
	require.Regexp(t, `(?m)^payload:\s+"new"$`, out)
	j := decodeJSON[ingest.Job](t, b.ok(t, "jobs", "patch", "b", "--delay", "2h", "--json"))
	require.Equal(t, "2h0m0s", j.Schedule.Delay)

	out = b.ok(t, "jobs", "cancel", "b")
	require.Regexp(t, `(?m)^b\s+cancelled\s+true$`, out)
	// Several ids, one missing: what came before is printed, then the error.
	r := b.run(t, "", "jobs", "cancel", "a", "missing")
	require.ErrorContains(t, r.err, "cancel missing: 404")
	require.Regexp(t, `(?m)^a\s+cancelled\s+true$`, r.out)

	out = b.ok(t, "jobs", "runs", "b")
	require.Regexp(t, `(?m)^DUE\s+STARTED\s+TOOK\s+WORKER\s+ATTEMPT\s+OUTCOME\s+ERROR$`, out)
	require.Regexp(t, `(?m)^\S+ \S+\s+-\s+-\s+-\s+0\s+cancelled\s+job cancelled$`, out)
	rl := decodeJSON[ingest.RunList](t, b.ok(t, "jobs", "runs", "b", "--json"))
	require.Len(t, rl.Runs, 1)

	b.ok(t, "jobs", "create", "--id", "c", "--type", "t", "--delay", "1h")
	r = b.run(t, "", "jobs", "runs", "c")
	require.NoError(t, r.err)
	require.Contains(t, r.errOut, "no runs yet")
}

func TestQueues(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	b.ok(t, "jobs", "create", "--type", "t", "--delay", "1h", "--queue", "mail")
	b.ok(t, "jobs", "create", "--type", "t", "--now", "--queue", "mail")

	out := b.ok(t, "queues")
	require.Regexp(t, `(?m)^QUEUE\s+PAUSED\s+SCHEDULED\s+READY\s+IN FLIGHT\s+DEAD\s+FIRED\s+FIRED/S\s+PROCESSED\s+FAILED\s+LATENESS P99$`, out)
	require.Regexp(t, `(?m)^mail\s+-\s+1\s+1\s+0\s+0\s`, out)

	out = b.ok(t, "queues", "pause", "mail")
	require.Regexp(t, `(?m)^QUEUE\s+STATE\s+CHANGED$`, out)
	require.Regexp(t, `(?m)^mail\s+paused\s+true$`, out)
	ql := decodeJSON[ingest.QueueList](t, b.ok(t, "queues", "--json"))
	require.Len(t, ql.Queues, 1)
	require.True(t, ql.Queues[0].Paused)
	b.ok(t, "queues", "resume", "mail")

	// --watch redraws until the context ends.
	ctx, cancel := context.WithCancel(context.Background())
	var out2 syncBuffer
	done := make(chan error, 1)
	go func() {
		c := &cli{out: &out2, errOut: &out2, in: strings.NewReader(""), loc: time.UTC, tty: true, getenv: func(k string) string { return b.env[k] }}
		done <- run(ctx, []string{"queues", "--watch", "--interval", "20ms"}, c)
	}()
	require.Eventually(t, func() bool { return strings.Count(out2.String(), "QUEUE") >= 3 }, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.Contains(t, out2.String(), "\x1b[H\x1b[2J")
}

func TestAuth(t *testing.T) {
	t.Parallel()
	b := setupAPI(t, ingest.Token{Secret: "reader-0123456789", Scope: ingest.ScopeRead}, ingest.Token{Secret: "writer-0123456789", Scope: ingest.ScopeWrite})
	r := b.run(t, "", "queues")
	require.ErrorContains(t, r.err, "401")
	r = b.run(t, "", "jobs", "create", "--type", "t", "--now", "--token", "reader-0123456789")
	require.ErrorContains(t, r.err, "403")
	b.env["TOCK_TOKEN"] = "writer-0123456789"
	b.ok(t, "jobs", "create", "--type", "t", "--now")
	b.ok(t, "queues", "--token", "reader-0123456789")
}

func TestParseInterspersed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		pos  []string
		json bool
	}{
		{[]string{"a", "--json", "b"}, []string{"a", "b"}, true},
		{[]string{"--json", "a"}, []string{"a"}, true},
		{[]string{"a", "--", "--json"}, []string{"a", "--json"}, false},
		{[]string{"-"}, []string{"-"}, false},
		{nil, nil, false},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		j := fs.Bool("json", false, "")
		pos, err := parseInterspersed(fs, tc.args)
		require.NoError(t, err)
		require.Equal(t, tc.pos, pos, "%q", tc.args)
		require.Equal(t, tc.json, *j, "%q", tc.args)
	}
}

func TestRun_UnknownCommand(t *testing.T) {
	t.Parallel()
	r := runTock(t, context.Background(), nil, "", "frob")
	var ue *usageError
	require.ErrorAs(t, r.err, &ue)
	r = runTock(t, context.Background(), nil, "", "help")
	require.NoError(t, r.err)
	for _, cmd := range []string{"tock dev", "tock server", "tock jobs", "tock dead", "tock queues", "tock bench"} {
		require.Contains(t, r.out, cmd)
	}
}

// tock bench --fire-lead takes 0 (fire at the due time) to 1s, like tock server's.
func TestBench_FireLead(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"-1ms", "2s"} {
		r := runTock(t, context.Background(), nil, "", "bench", "fire", "--fire-lead", v, "--jobs", "10")
		require.ErrorContains(t, r.err, "--fire-lead "+v+": want a duration from 0s to 1s")
	}
	r := runTock(t, context.Background(), nil, "", "bench", "fire", "--fire-lead", "0", "--jobs", "20",
		"--window", "200ms", "--lead", "3s", "--json") // a lead a loaded CI machine schedules 20 jobs within (500ms was not)
	require.NoError(t, r.err)
	var res struct {
		Fired        int `json:"fired"`
		Early        int `json:"early"`
		ClaimAheadMs struct {
			Max float64 `json:"max"`
		} `json:"claim_ahead_ms"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &res), r.out)
	require.Equal(t, 20, res.Fired)
	require.Zero(t, res.Early)
	require.Less(t, res.ClaimAheadMs.Max, 1.0, "without a lead no run is claimed ahead")
}

// tock bench leaves the Redis server a core of its own when it runs on this machine, and
// reports the GOMAXPROCS it ran with.
func TestBench_Procs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		redis []string
		cpus  int
		want  int
	}{
		{nil, 8, 0}, // the embedded Redis runs in this process
		{[]string{"127.0.0.1:6379"}, 2, 1},
		{[]string{"localhost:6379", "[::1]:7000", "127.0.0.2:7001"}, 8, 7},
		{[]string{"127.0.0.1:6379", "10.0.0.5:6379"}, 8, 0}, // a remote master
		{[]string{"redis.internal:6379"}, 8, 0},
		{[]string{"127.0.0.1:6379"}, 1, 0},
	} {
		require.Equal(t, tc.want, autoProcs(tc.redis, tc.cpus), "%v on %d CPUs", tc.redis, tc.cpus)
	}

	r := runTock(t, context.Background(), nil, "", "bench", "throughput", "--procs", "-1", "--jobs", "10")
	require.ErrorContains(t, r.err, "--procs -1: want 0 (automatic) or more")
	before := runtime.GOMAXPROCS(0)
	r = runTock(t, context.Background(), nil, "", "bench", "throughput", "--procs", "1", "--jobs", "20", "--json")
	require.NoError(t, r.err)
	var res struct {
		Processed int `json:"processed"`
		Procs     int `json:"procs"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.out), &res), r.out)
	require.Equal(t, 20, res.Processed)
	require.Equal(t, 1, res.Procs)
	require.Equal(t, before, runtime.GOMAXPROCS(0), "restored afterwards")
}

// tock jobs delete removes jobs now (get then fails with 404), one missing stops it after
// printing what was deleted; tock jobs cancel still keeps the job readable.
func TestJobs_Delete(t *testing.T) {
	t.Parallel()
	b := setupAPI(t)
	for _, id := range []string{"a", "b", "c"} {
		b.ok(t, "jobs", "create", "--id", id, "--type", "t", "--delay", "1h")
	}
	out := b.ok(t, "jobs", "delete", "a", "b")
	require.Regexp(t, `(?m)^ID\s+STATE\s+CHANGED$`, out)
	require.Regexp(t, `(?m)^a\s+deleted\s+true$`, out)
	require.Regexp(t, `(?m)^b\s+deleted\s+true$`, out)
	for _, id := range []string{"a", "b"} {
		r := b.run(t, "", "jobs", "get", id)
		require.ErrorContains(t, r.err, "404 not_found", id)
	}
	b.ok(t, "jobs", "create", "--id", "a", "--type", "t", "--delay", "1h")
	r := b.run(t, "", "jobs", "delete", "a", "missing", "c")
	require.ErrorContains(t, r.err, "jobs delete missing: 404 not_found")
	require.Regexp(t, `(?m)^a\s+deleted\s+true$`, r.out)
	b.ok(t, "jobs", "get", "c") // not reached
	sr := decodeJSON[ingest.StateReply](t, b.ok(t, "jobs", "delete", "c", "--json"))
	require.Equal(t, ingest.StateReply{ID: "c", State: "deleted", Changed: true}, sr)
	r = b.run(t, "", "jobs", "delete")
	require.ErrorContains(t, r.err, "a job id is required")
	// dead delete is still dead rm.
	r = b.run(t, "", "dead", "delete", "nope:1")
	require.ErrorContains(t, r.err, "dead rm nope:1: 404")
}
