//go:build linux

package failtest

// A workflow's failures, on the standalone redis-server of redistest (what is tested is
// how a workflow's nodes survive the death of a process, not Redis): two dispatcher
// processes and two worker processes (this test binary started again) run a workflow of
// 267 nodes (a fan-out, joins of ten, chains of six, a join of the chains, a second
// fan-out and a final join), every 7th of which fails its first attempt. Once a third of
// the nodes ended, one process is killed with SIGKILL; the two scenarios run one after
// the other on one deployment, each with a workflow of its own:
//
//   - kill -9 dispatcher: the dispatcher that owns the workflow's shard. The other takes
//     the shard over when its lease expires and fires the retries of the failed first
//     attempts; nothing runs twice.
//   - kill -9 worker: one of the two workers. The runs it held come back after their
//     visibility timeout, as a new attempt, on the other worker: at least once.
//
// In both the workflow succeeds with every node succeeded; every node ran, each start
// after its parents' last success, and saw every parent's result (Run.ParentResults).
// Each worker records the runs it starts, with one write(2) each so that a SIGKILL loses
// none, and each node's job history names the worker of each attempt: a node runs again
// only after a designed failure of its first attempt or after an attempt lost by the
// killed worker (started there, or claimed there and never started), and succeeds once.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/worker"
)

const (
	wfNodeTime   = 40 * time.Millisecond // a node's handler runs this long
	wfVisibility = 2 * time.Second
	wfSettle     = 60 * time.Second // how long the workflow may take
	wfType       = "wfnode"
)

// wfPayload is a node's payload: its parents (whose results it checks) and whether its
// first attempt fails.
type wfPayload struct {
	Parents []string `json:"p,omitempty"`
	Flaky   bool     `json:"flaky,omitempty"`
}

// chaosWorkflow builds the workflow: root → 120 fan-out nodes → 12 joins of 10 → a chain
// of 6 after each join → one join of the chains → 60 fan-out nodes → the end: 267 nodes,
// 12 deep. Every 7th node fails its first attempt.
func chaosWorkflow(id string) *job.Workflow {
	w := &job.Workflow{ID: id}
	add := func(node string, parents ...string) {
		p := wfPayload{Parents: parents, Flaky: len(w.Jobs)%7 == 3}
		b, _ := json.Marshal(p)
		w.Jobs = append(w.Jobs, job.Node{Job: job.Job{ID: node, Type: wfType, Payload: b, Visibility: wfVisibility,
			Retry: job.RetryPolicy{MaxAttempts: 10, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}}, DependsOn: parents})
	}
	add("root")
	var tails []string
	for j := range 12 {
		var fan []string
		for k := range 10 {
			f := fmt.Sprintf("f%02d-%d", j, k)
			add(f, "root")
			fan = append(fan, f)
		}
		prev := fmt.Sprintf("j%02d", j)
		add(prev, fan...)
		for c := range 6 {
			n := fmt.Sprintf("c%02d-%d", j, c)
			add(n, prev)
			prev = n
		}
		tails = append(tails, prev)
	}
	add("mid", tails...)
	var second []string
	for g := range 60 {
		n := fmt.Sprintf("g%02d", g)
		add(n, "mid")
		second = append(second, n)
	}
	add("end", second...)
	return w
}

// runWorkflowWorker is the worker child process: it runs workflow nodes until SIGTERM and
// records each handler start ("start"), designed failure ("fail"), success ("end") and
// wrong parent results ("parents") as a line "<kind> <job id> <attempt> <unix ns>" in the
// file named by envOut, with one write(2) each.
func runWorkflowWorker(ctx context.Context, store *shard.Store, logger *slog.Logger) error {
	f, err := os.OpenFile(os.Getenv(envOut), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := worker.New(worker.Config{Store: store, ID: os.Getenv(envName), Concurrency: 32, Sweep: 500 * time.Millisecond, Logger: logger})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	record := func(kind string, r *worker.Run) error {
		line := fmt.Sprintf("%s %s %d %d\n", kind, r.JobID, r.Attempt, time.Now().UnixNano())
		mu.Lock()
		defer mu.Unlock()
		_, err := f.WriteString(line)
		return err
	}
	w.HandleFunc(wfType, func(ctx context.Context, r *worker.Run) error {
		if err := record("start", r); err != nil {
			return err
		}
		var p wfPayload
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			return worker.Cancel(err)
		}
		got, err := r.ParentResults(ctx)
		if err != nil {
			return err
		}
		for _, parent := range p.Parents {
			if string(got[parent]) != parent {
				_ = record("parents", r)
				return worker.Cancel(fmt.Errorf("parent %s's result is %q, %d results", parent, got[parent], len(got)))
			}
		}
		select {
		case <-time.After(wfNodeTime):
		case <-ctx.Done():
			return ctx.Err()
		}
		if p.Flaky && r.Attempt == 1 {
			if err := record("fail", r); err != nil {
				return err
			}
			return errors.New("the first attempt fails")
		}
		if err := record("end", r); err != nil {
			return err
		}
		_, node, _ := r.Workflow()
		return worker.WithResult([]byte(node))
	})
	if err := w.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return w.Stop(sctx)
}

// runWorkflowDispatcher is the dispatcher child process, with a short lease so that the
// other takes a dead one's shards over quickly.
func runWorkflowDispatcher(ctx context.Context, store *shard.Store, logger *slog.Logger) error {
	d, err := dispatcher.New(dispatcher.Config{Store: store, Name: os.Getenv(envName), LeaseTTL: time.Second, Logger: logger})
	if err != nil {
		return err
	}
	if err := d.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return d.Stop(sctx)
}

// startRole starts this test binary as a child process in role.
func (d *deployment) startRole(role, name string, addrs []string) *proc {
	exe, err := os.Executable()
	require.NoError(d.t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envRole+"="+role, envName+"="+name,
		envSeeds+"="+strings.Join(addrs, ","), envNamespace+"="+d.ns,
		envOut+"="+filepath.Join(d.dir, name+".runs"))
	return d.start(name, cmd)
}

// nodeEvent is one line of a worker's file.
type nodeEvent struct {
	kind    string
	worker  string
	attempt int
	at      time.Time
}

// nodeEvents reads the workers' files: events by node job id, in the order written.
func (d *deployment) nodeEvents(t *testing.T) map[string][]nodeEvent {
	out := map[string][]nodeEvent{}
	for _, p := range d.workers {
		f, err := os.Open(filepath.Join(d.dir, p.name+".runs"))
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			require.Len(t, fs, 4, "line %q", sc.Text())
			att, err1 := strconv.Atoi(fs[2])
			ns, err2 := strconv.ParseInt(fs[3], 10, 64)
			require.NoError(t, errors.Join(err1, err2), sc.Text())
			out[fs[1]] = append(out[fs[1]], nodeEvent{kind: fs[0], worker: p.name, attempt: att, at: time.Unix(0, ns)})
		}
		f.Close()
		require.NoError(t, sc.Err())
	}
	return out
}

// wfFigures is what a workflow scenario measured.
type wfFigures struct {
	Scenario    string `json:"scenario"`
	Nodes       int    `json:"nodes"`
	Starts      int    `json:"starts"`      // handler starts, all attempts
	Designed    int    `json:"designed"`    // designed failures of first attempts
	Redelivered int    `json:"redelivered"` // starts after a start on the killed worker
	Unstarted   int    `json:"unstarted"`   // attempts claimed by the killed worker, never started
	Seconds     string `json:"seconds"`     // from the create to the workflow's end
}

func TestWorkflowFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("kills dispatcher and worker processes while a workflow runs")
	}
	b := redistest.ServerBackend(t)
	ns := redistest.Namespace(t, b)
	store, err := shard.Open(context.Background(), b.Client(t), shard.Config{Namespace: ns, Shards: shards})
	require.NoError(t, err)
	// One deployment for both scenarios (a process takes seconds to start under -race):
	// the dispatcher kill runs first, so the worker kill has one dispatcher left to reap
	// the dead worker's runs.
	d := &deployment{t: t, ns: ns, dir: t.TempDir()}
	for _, n := range []string{"dispatcher-a", "dispatcher-b"} {
		d.dispatchers = append(d.dispatchers, d.startRole("wfdispatcher", n, b.Addrs))
	}
	for _, n := range []string{"worker-a", "worker-b"} {
		d.workers = append(d.workers, d.startRole("wfworker", n, b.Addrs))
	}
	defer d.stopAll()
	scenarios := []struct {
		name, wf string
		fault    func(d *deployment, store *shard.Store, shardID shard.ID) (killed string, err error)
	}{
		{"kill -9 dispatcher", "chaos-d", killShardOwner},
		{"kill -9 worker", "chaos-w", func(d *deployment, _ *shard.Store, _ shard.ID) (string, error) {
			return d.workers[0].name, killWorker(d)
		}},
	}
	for _, sc := range scenarios {
		if !t.Run(sc.name, func(t *testing.T) {
			f := runWorkflow(t, d, store, sc.wf, sc.fault)
			f.Scenario = sc.name
			out, err := json.Marshal(f)
			require.NoError(t, err)
			t.Logf("figures: %s", out)
		}) {
			break
		}
	}
}

// killShardOwner kills the dispatcher that holds the lease of the workflow's shard (the
// first one when neither does yet).
func killShardOwner(d *deployment, store *shard.Store, id shard.ID) (string, error) {
	victim := d.dispatchers[0]
	v, err := store.Cluster(context.Background())
	if err != nil {
		return "", err
	}
	for _, p := range d.dispatchers {
		if v.Shards[id].Owner == p.name {
			victim = p
		}
	}
	d.t.Logf("killing %s (shard %d's owner: %q)", victim.name, id, v.Shards[id].Owner)
	kill(victim)
	return victim.name, nil
}

// runWorkflow creates workflow wf, applies the fault once a third of its nodes ended,
// waits for its end and checks what ran.
func runWorkflow(t *testing.T, d *deployment, store *shard.Store, wf string, fault func(*deployment, *shard.Store, shard.ID) (string, error)) wfFigures {
	ctx := context.Background()
	w := chaosWorkflow(wf)
	flaky := map[string]bool{}
	parents := map[string][]string{}
	for _, n := range w.Jobs {
		var p wfPayload
		require.NoError(t, json.Unmarshal(n.Payload, &p))
		flaky[n.ID] = p.Flaky
		parents[n.ID] = n.DependsOn
	}
	start := time.Now()
	res, err := store.CreateWorkflow(ctx, w)
	require.NoError(t, err)
	require.True(t, res.Created)

	ended := func() (*shard.WorkflowInfo, int) {
		info, err := store.Workflow(ctx, wf)
		require.NoError(t, err)
		n := 0
		for _, node := range info.Nodes {
			if node.State.Ended() {
				n++
			}
		}
		return info, n
	}
	for {
		info, n := ended()
		require.Equal(t, job.WorkflowRunning, info.State, "the workflow ended before the fault")
		if n >= len(w.Jobs)/3 {
			break
		}
		require.Less(t, time.Since(start), wfSettle, "the workflow does not progress")
		time.Sleep(20 * time.Millisecond)
	}
	killed, err := fault(d, store, res.Shard)
	require.NoError(t, err)
	var info *shard.WorkflowInfo
	for {
		info, _ = ended()
		if info.State != job.WorkflowRunning || time.Since(start) > wfSettle {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(start)
	require.Eventually(t, func() bool { return drained(ctx, store) }, 10*time.Second, 50*time.Millisecond,
		"runs left ready or in flight after the workflow ended")

	events := d.nodeEvents(t)
	f := wfFigures{Nodes: len(w.Jobs), Seconds: took.Round(10 * time.Millisecond).String()}
	require.Equal(t, job.WorkflowSucceeded, info.State, "%v", info.Counts())
	lastEnd := map[string]time.Time{} // by node: its last success
	for _, n := range info.Nodes {
		require.Equal(t, job.NodeSucceeded, n.State, n.ID)
		for _, e := range events[n.JobID] {
			if e.kind == "end" && e.at.After(lastEnd[n.ID]) {
				lastEnd[n.ID] = e.at
			}
		}
		require.False(t, lastEnd[n.ID].IsZero(), "node %s succeeded without a handler that ended", n.ID)
	}
	for _, n := range info.Nodes {
		var starts, bad []nodeEvent
		failed := map[int]bool{} // attempts that failed as designed
		for _, e := range events[n.JobID] {
			switch e.kind {
			case "start":
				starts = append(starts, e)
			case "parents":
				bad = append(bad, e)
			case "fail":
				failed[e.attempt] = true
			}
		}
		require.Empty(t, bad, "node %s did not see its parents' results", n.ID)
		require.NotEmpty(t, starts, "node %s never ran", n.ID)
		f.Starts += len(starts)
		// A node starts after its parents' last success.
		for _, s := range starts {
			for _, p := range parents[n.ID] {
				require.True(t, s.at.After(lastEnd[p]), "node %s started before its parent %s ended", n.ID, p)
			}
		}
		// Attempts go up by one per start, unless the killed worker claimed an attempt
		// and died before starting it; a start after the first follows a designed failure
		// of attempt 1 or a start on the killed worker.
		slices.SortFunc(starts, func(a, b nodeEvent) int { return a.attempt - b.attempt })
		// The job's history: one success, a failure only of a designed first attempt,
		// and an attempt lost only by the killed worker.
		lost := map[int]bool{}
		hist, err := store.Runs(ctx, n.JobID)
		require.NoError(t, err)
		var succeeded int
		for _, h := range hist {
			switch h.Outcome {
			case job.OutcomeSucceeded:
				succeeded++
			case job.OutcomeFailed:
				require.True(t, flaky[n.ID] && h.Attempt == 1, "node %s: attempt %d failed: %s", n.ID, h.Attempt, h.Error)
			case job.OutcomeLost:
				require.Equal(t, killed, h.Worker, "node %s: attempt %d lost by a live worker", n.ID, h.Attempt)
				lost[h.Attempt] = true
			default:
				t.Fatalf("node %s: attempt %d %s (%s)", n.ID, h.Attempt, h.Outcome, h.Error)
			}
		}
		require.Equal(t, 1, succeeded, "node %s: one success in its history %+v", n.ID, hist)
		require.Equal(t, n.Attempts, starts[len(starts)-1].attempt, "node %s: its attempts as stored", n.ID)
		prev := 0
		prevOn := ""
		for i, s := range starts {
			switch {
			case s.attempt == prev:
				t.Fatalf("node %s: attempt %d started twice (%s, %s)", n.ID, s.attempt, prevOn, s.worker)
			case i == 0 && s.attempt == 1:
			case prev == 1 && s.attempt == 2 && flaky[n.ID] && failed[1] && prevOn != killed:
				f.Designed++
			case prevOn == killed && s.attempt == prev+1:
				f.Redelivered++
			case s.attempt > prev+1 && killed == d.workers[0].name:
				// The attempts between were claimed by the killed worker and never started.
				for a := prev + 1; a < s.attempt; a++ {
					require.True(t, lost[a], "node %s: attempt %d never started, and its worker was not killed", n.ID, a)
				}
				f.Unstarted += s.attempt - prev - 1
				if prevOn == killed {
					f.Redelivered++
				}
			default:
				t.Fatalf("node %s: attempt %d (on %s) after attempt %d (on %s), killed %s; flaky %v",
					n.ID, s.attempt, s.worker, prev, prevOn, killed, flaky[n.ID])
			}
			prev, prevOn = s.attempt, s.worker
		}
	}
	if killed != d.workers[0].name {
		require.Zero(t, f.Redelivered+f.Unstarted, "without a worker killed nothing runs twice")
	}
	return f
}
