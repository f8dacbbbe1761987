package clients_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/signature"
	"github.com/tockhq/tock/worker"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const (
	writeToken  = "writer-secret-0123456789"
	workerToken = "worker-secret-0123456789"
	shards      = 4
)

// needTools skips the test when python3 or node is missing, or fails it when the real
// backends are required (TOCK_REQUIRE_REDIS=1, as in CI).
func needTools(t *testing.T) (python, node string) {
	t.Helper()
	var missing []string
	python, err := exec.LookPath("python3")
	if err != nil {
		missing = append(missing, "python3")
	}
	node, err = exec.LookPath("node")
	if err != nil {
		missing = append(missing, "node")
	}
	if len(missing) > 0 {
		if redistest.RequireRedis() {
			t.Fatalf("%s not on PATH, but %s=1 requires the client tests", strings.Join(missing, ", "), redistest.RequireEnv)
		}
		t.Skipf("%s not on PATH (set %s=1 to make this an error)", strings.Join(missing, ", "), redistest.RequireEnv)
	}
	return python, node
}

// syncBuffer collects a process's output.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
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

type proc struct {
	name     string
	cmd      *exec.Cmd
	out, err *syncBuffer
	done     chan struct{}
	exitErr  error
}

// env is what the tests share: the server's URL and the tools.
type env struct {
	url          string
	python, node string
	dir          string // this directory (clients/)
}

// start runs a process until the test ends (SIGKILL then), showing its output when the
// test failed.
func start(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{name: name, cmd: cmd, out: &syncBuffer{}, err: &syncBuffer{}, done: make(chan struct{})}
	if cmd.Stdout == nil {
		cmd.Stdout = p.out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = p.err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start(), name)
	go func() {
		p.exitErr = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s stdout:\n%s\n%s stderr (its end):\n%s", name, tail(p.out.String()), name, tail(p.err.String()))
		}
	})
	return p
}

func tail(s string) string {
	if len(s) > 4000 {
		return s[len(s)-4000:]
	}
	return s
}

// stop sends SIGTERM and requires a clean exit within the deadline.
func (p *proc) stop(t *testing.T, within time.Duration) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
		require.NoError(t, p.exitErr, "%s exit after SIGTERM", p.name)
	case <-time.After(within):
		// What it waits for: SIGQUIT makes a Go program print every goroutine's stack and
		// exit; the ones in tock's own code are shown.
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
		t.Fatalf("%s did not stop within %s of SIGTERM; its goroutines in tock's code:\n%s", p.name, within, tockGoroutines(p.err.String()))
	}
}

// tockGoroutines returns the goroutine stacks of a Go program's SIGQUIT dump that pass
// through tock's own packages.
func tockGoroutines(dump string) string {
	var out []string
	for _, g := range strings.Split(dump, "\n\n") {
		if strings.HasPrefix(g, "goroutine ") && strings.Contains(g, "github.com/tockhq/tock/") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

func (e *env) pythonCmd(token string, args ...string) *exec.Cmd {
	cmd := exec.Command(e.python, append([]string{filepath.Join(e.dir, "python", "examples", "interop.py")}, args...)...)
	cmd.Env = append(os.Environ(), "TOCK_API="+e.url, "TOCK_TOKEN="+token, "PYTHONUNBUFFERED=1")
	return cmd
}

func (e *env) nodeCmd(token string, args ...string) *exec.Cmd {
	cmd := exec.Command(e.node, append([]string{filepath.Join(e.dir, "node", "examples", "interop.js")}, args...)...)
	cmd.Env = append(os.Environ(), "TOCK_API="+e.url, "TOCK_TOKEN="+token)
	return cmd
}

// output runs cmd to its end and returns its stdout, requiring success.
func output(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	require.NoError(t, err, "%s\nstdout: %s\nstderr: %s", cmd.String(), out, errOut.String())
	return string(out)
}

// waitFor polls cond until it holds, for at most d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	end := time.Now().Add(d)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(end) {
			t.Fatalf("%s: not within %s; last: %s", what, d, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// succeeded waits until the job's newest run succeeded and returns it.
func succeeded(t *testing.T, c *ingest.Client, id string, d time.Duration) (ingest.Run, []ingest.Run) {
	t.Helper()
	var got ingest.RunList
	waitFor(t, d, "job "+id+" succeeded", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := c.Runs(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		got = l
		b, _ := json.Marshal(l)
		return len(l.Runs) > 0 && l.Runs[0].Outcome == "succeeded", string(b)
	})
	return got.Runs[0], got.Runs
}

type echoResult struct {
	Echo    map[string]any `json:"echo"`
	By      string         `json:"by"`
	Attempt int            `json:"attempt"`
}

func ids(out string) []string { return strings.Fields(out) }

func TestClients(t *testing.T) {
	python, node := needTools(t)
	b := redistest.ServerBackend(t)
	ns := redistest.Namespace(t, b)
	dir, err := os.Getwd()
	require.NoError(t, err)

	tock := filepath.Join(t.TempDir(), "tock")
	if out, err := exec.Command("go", "build", "-o", tock, "github.com/tockhq/tock/cmd/tock").CombinedOutput(); err != nil {
		t.Fatalf("go build tock: %v\n%s", err, out)
	}
	srvCmd := exec.Command(tock, "server", "--redis", b.Addrs[0], "--namespace", ns, "--shards", fmt.Sprint(shards),
		"--http", "127.0.0.1:0", "--token", writeToken+":write", "--token", workerToken+":worker", "--lease-ttl", "1s")
	srvCmd.Env = os.Environ()
	logs, err := srvCmd.StderrPipe()
	require.NoError(t, err)
	srv := start(t, "tock server", srvCmd)
	e := &env{python: python, node: node, dir: dir, url: apiURL(t, logs, srv)}
	t.Logf("tock server at %s; python3 %s; node %s", e.url, version(python, "--version"), version(node, "--version"))
	api, err := ingest.NewClient(e.url, writeToken)
	require.NoError(t, err)

	t.Run("unit", func(t *testing.T) {
		t.Run("python", func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(python, "-m", "unittest", "discover", "-s", "tests")
			cmd.Dir = filepath.Join(dir, "python")
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "OK")
		})
		t.Run("node", func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(node, "--test", "test/signature.test.js", "test/worker.test.js")
			cmd.Dir = filepath.Join(dir, "node")
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "# fail 0")
		})
	})

	t.Run("cross-language", func(t *testing.T) {
		t.Run("python jobs on a node worker", func(t *testing.T) {
			t.Parallel()
			w := start(t, "node worker", e.nodeCmd(workerToken, "work", "q-py2node", "node-w1"))
			created := ids(output(t, e.pythonCmd(writeToken, "create", "q-py2node", "py2node", "5")))
			require.Len(t, created, 5)
			for i, id := range created {
				run, _ := succeeded(t, api, id, 15*time.Second)
				var r echoResult
				require.NoError(t, json.Unmarshal(run.Result, &r), "%s", run.Result)
				require.Equal(t, echoResult{Echo: map[string]any{"n": float64(i), "from": "python"}, By: "node", Attempt: 1}, r)
				require.Equal(t, "node-w1", run.Worker)
			}
			w.stop(t, 10*time.Second)
		})
		t.Run("node jobs on a python worker", func(t *testing.T) {
			t.Parallel()
			w := start(t, "python worker", e.pythonCmd(workerToken, "work", "q-node2py", "py-w1"))
			created := ids(output(t, e.nodeCmd(writeToken, "create", "q-node2py", "node2py", "5")))
			require.Len(t, created, 5)
			for i, id := range created {
				run, _ := succeeded(t, api, id, 15*time.Second)
				var r echoResult
				require.NoError(t, json.Unmarshal(run.Result, &r), "%s", run.Result)
				require.Equal(t, echoResult{Echo: map[string]any{"n": float64(i), "from": "node"}, By: "python", Attempt: 1}, r)
				require.Equal(t, "py-w1", run.Worker)
			}
			w.stop(t, 10*time.Second)
		})
		t.Run("python jobs on a go worker", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			store, err := shard.Open(ctx, b.Client(t), shard.Config{Namespace: ns, Shards: shards})
			require.NoError(t, err)
			w, err := worker.New(worker.Config{Store: store, Queues: []string{"q-py2go"}, ID: "go-w1", NoFigures: true})
			require.NoError(t, err)
			w.HandleFunc("echo", func(ctx context.Context, r *worker.Run) error {
				var p map[string]any
				if err := json.Unmarshal(r.Payload, &p); err != nil {
					return err
				}
				res, err := json.Marshal(echoResult{Echo: p, By: "go", Attempt: r.Attempt})
				r.SetResult(res)
				return err
			})
			require.NoError(t, w.Start(ctx))
			defer func() {
				sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				require.NoError(t, w.Stop(sctx))
			}()
			created := ids(output(t, e.pythonCmd(writeToken, "create", "q-py2go", "py2go", "5")))
			require.Len(t, created, 5)
			for i, id := range created {
				run, _ := succeeded(t, api, id, 15*time.Second)
				var r echoResult
				require.NoError(t, json.Unmarshal(run.Result, &r), "%s", run.Result)
				require.Equal(t, echoResult{Echo: map[string]any{"n": float64(i), "from": "python"}, By: "go", Attempt: 1}, r)
			}
		})
		t.Run("a workflow across python and node workers", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			py := start(t, "python worker", e.pythonCmd(workerToken, "work", "q-wf-py", "py-wf"))
			nd := start(t, "node worker", e.nodeCmd(workerToken, "work", "q-wf-node", "node-wf"))
			_, _, err := api.CreateWorkflow(ctx, ingest.WorkflowRequest{ID: "xlang", Jobs: []ingest.NodeRequest{
				{ID: "extract", Queue: "q-wf-py", Type: "echo", Payload: json.RawMessage(`{"rows":2}`)},
				{ID: "audit", Queue: "q-wf-node", Type: "echo", Payload: json.RawMessage(`{"ok":true}`)},
				{ID: "load", Queue: "q-wf-node", Type: "echo", DependsOn: []string{"extract", "audit"}},
				{ID: "report", Queue: "q-wf-py", Type: "echo", DependsOn: []string{"load"}},
				{ID: "blob-a", Queue: "q-wf-py", Type: "blob", Payload: json.RawMessage(`{"size":40000}`)},
				{ID: "blob-b", Queue: "q-wf-node", Type: "blob", Payload: json.RawMessage(`{"size":40000}`)},
				{ID: "join-py", Queue: "q-wf-py", Type: "echo", DependsOn: []string{"blob-a", "blob-b"}},
				{ID: "join-node", Queue: "q-wf-node", Type: "echo", DependsOn: []string{"blob-a", "blob-b"}},
			}}, "")
			require.NoError(t, err)
			waitFor(t, 30*time.Second, "the workflow succeeded", func() (bool, string) {
				w, err := api.Workflow(ctx, "xlang")
				return err == nil && w.State == "succeeded", fmt.Sprintf("%+v %v", w, err)
			})
			result := func(node string) map[string]any {
				b, err := api.NodeResult(ctx, "xlang", node)
				require.NoError(t, err)
				var m map[string]any
				require.NoError(t, json.Unmarshal(b, &m), "%s", b)
				return m
			}
			load := result("load")
			require.Equal(t, "node", load["by"])
			none := map[string]any{}
			require.Equal(t, map[string]any{
				"extract": map[string]any{"echo": map[string]any{"rows": float64(2)}, "by": "python", "attempt": float64(1), "node": "extract", "parents": none, "omitted": none},
				"audit":   map[string]any{"echo": map[string]any{"ok": true}, "by": "node", "attempt": float64(1), "node": "audit", "parents": none, "omitted": none},
			}, load["parents"], "a node worker sees what a python and a node worker returned")
			report := result("report")
			require.Equal(t, "python", report["by"])
			require.Equal(t, "node", report["parents"].(map[string]any)["load"].(map[string]any)["by"])
			// Two parents' results of 40,002 bytes do not both fit in a claim's 64 KiB: the
			// one left out is read with the worker's token.
			for _, join := range []string{"join-py", "join-node"} {
				r := result(join)
				require.Equal(t, map[string]any{"blob-b": float64(40000)}, r["omitted"], join)
				require.Len(t, r["parents"].(map[string]any)["blob-a"], 40000, join)
			}
			py.stop(t, 10*time.Second)
			nd.stop(t, 10*time.Second)
		})
		t.Run("a killed python worker's run is redelivered", func(t *testing.T) {
			t.Parallel()
			out := &syncBuffer{}
			cmd := e.pythonCmd(workerToken, "work", "q-kill", "py-doomed")
			cmd.Stdout = out
			doomed := start(t, "doomed python worker", cmd)
			id := strings.TrimSpace(output(t, e.pythonCmd(writeToken, "create-slow", "q-kill", "kill-1", "60")))
			require.Equal(t, "kill-1", id)
			waitFor(t, 15*time.Second, "the handler started", func() (bool, string) {
				return strings.Contains(out.String(), "start kill-1:"), out.String()
			})
			require.NoError(t, doomed.cmd.Process.Signal(syscall.SIGKILL))
			<-doomed.done
			// Its run's visibility deadline (1s) passes with no heartbeat: the reaper takes
			// it back and another worker completes the retry.
			rescuer := start(t, "python worker", e.pythonCmd(workerToken, "work", "q-kill", "py-rescuer"))
			run, runs := succeeded(t, api, id, 20*time.Second)
			require.Equal(t, "py-rescuer", run.Worker)
			require.Equal(t, 2, run.Attempt)
			var r echoResult
			require.NoError(t, json.Unmarshal(run.Result, &r), "%s", run.Result)
			require.Equal(t, "python", r.By)
			require.Equal(t, 2, r.Attempt)
			require.Len(t, runs, 2, "%+v", runs)
			require.Equal(t, "lost", runs[1].Outcome, "%+v", runs)
			require.Equal(t, "py-doomed", runs[1].Worker)
			require.Equal(t, 1, runs[1].Attempt)
			rescuer.stop(t, 10*time.Second)
		})
		t.Run("a stopped python worker hands back its run", func(t *testing.T) {
			// Still running when its grace period ends, the run is handed back (a snooze
			// of 0s), not left to its deadline to be taken for lost: the next worker runs
			// it as attempt 1.
			t.Parallel()
			out := &syncBuffer{}
			cmd := e.pythonCmd(workerToken, "work", "q-handback", "py-doomed-stopped", "0.3")
			cmd.Stdout = out
			stopped := start(t, "stopped python worker", cmd)
			id := strings.TrimSpace(output(t, e.pythonCmd(writeToken, "create-slow", "q-handback", "handback-1", "60")))
			require.Equal(t, "handback-1", id)
			waitFor(t, 15*time.Second, "the handler started", func() (bool, string) {
				return strings.Contains(out.String(), "start handback-1:"), out.String()
			})
			stopped.stop(t, 10*time.Second)
			rescuer := start(t, "python worker", e.pythonCmd(workerToken, "work", "q-handback", "py-rescuer-2"))
			run, runs := succeeded(t, api, id, 20*time.Second)
			require.Equal(t, "py-rescuer-2", run.Worker)
			require.Equal(t, 1, run.Attempt, "%+v", runs)
			require.Len(t, runs, 2, "%+v", runs)
			require.Equal(t, "snoozed", runs[1].Outcome, "%+v", runs)
			require.Equal(t, "py-doomed-stopped", runs[1].Worker)
			rescuer.stop(t, 10*time.Second)
		})
	})

	t.Run("signatures", func(t *testing.T) {
		secret := []byte("whsec_interop_0123456789")
		body := `{"run":"sig-1:1764000000000","payload":{"to":"a@example.com"}}`
		now := time.Now()
		cases := []struct {
			name, header, want string
		}{
			{"valid", signature.Sign(secret, now, []byte(body)), "ok"},
			{"rotation", signature.Sign([]byte("whsec_old_secret_000000"), now, []byte(body), secret), "ok"},
			{"forged", signature.Sign([]byte("whsec_forger_0000000000"), now, []byte(body)), "mismatch"},
			{"other body", signature.Sign(secret, now, []byte(body+" ")), "mismatch"},
			{"stale", signature.Sign(secret, now.Add(-10*time.Minute), []byte(body)), "stale"},
			{"future", signature.Sign(secret, now.Add(10*time.Minute), []byte(body)), "stale"},
			{"malformed", "v1=" + strings.Repeat("0", 64), "malformed"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				err := signature.Verify(c.header, []byte(body), [][]byte{secret}, now, 0)
				if c.want == "ok" {
					require.NoError(t, err)
				} else {
					require.Error(t, err)
				}
				for lang, cmd := range map[string]*exec.Cmd{
					"python": e.pythonCmd("", "verify", string(secret), c.header, body),
					"node":   e.nodeCmd("", "verify", string(secret), c.header, body),
				} {
					out, err := cmd.Output()
					if c.want == "ok" {
						require.NoError(t, err, lang)
					} else {
						require.Error(t, err, "%s accepted a %s signature", lang, c.name)
					}
					require.Equal(t, c.want, strings.TrimSpace(string(out)), lang)
				}
			})
		}
	})

	srv.stop(t, 20*time.Second)
}

// apiURL reads the server's log until it names the API's address.
func apiURL(t *testing.T, logs io.Reader, srv *proc) string {
	t.Helper()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(logs)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			_, _ = srv.err.Write([]byte(line + "\n"))
			if sent {
				continue
			}
			for f := range strings.FieldsSeq(line) {
				if u, ok := strings.CutPrefix(f, "api="); ok {
					found <- u
					sent = true
				}
			}
		}
	}()
	select {
	case u := <-found:
		return u
	case <-srv.done:
		t.Fatalf("tock server exited: %v\n%s", srv.exitErr, srv.err.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("tock server did not start within 20s:\n%s", srv.err.String())
	}
	return ""
}

func version(exe, flag string) string {
	out, err := exec.Command(exe, flag).CombinedOutput()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}
