package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// wfBundle is a store with a started worker (and a dispatcher when asked for one) that
// run workflows' nodes: every node's job has type "n", and handle decides what a node
// does; ran counts each node's handler starts.
type wfBundle struct {
	s   *shard.Store
	w   *Worker
	mu  sync.Mutex
	ran map[string]int // by node job id
}

type wfOpts struct {
	dispatcher bool
	scheduled  bool // the worker starts scheduled workflows' instances too
	handle     func(ctx context.Context, r *Run) error
	observe    func(Result) // Config.ObserveFunc
}

func startWorkflows(t *testing.T, b redistest.Backend, o wfOpts) *wfBundle {
	t.Helper()
	ctx := context.Background()
	s := openStore(t, b)
	bu := &wfBundle{s: s, ran: map[string]int{}}
	// Queues is left at its default: HandleWorkflows adds the definitions' queue.
	w, err := New(Config{Store: s, Concurrency: 8, Sweep: 100 * time.Millisecond, AckDelay: -1, ObserveFunc: o.observe})
	require.NoError(t, err)
	w.HandleFunc("n", func(ctx context.Context, r *Run) error {
		bu.mu.Lock()
		bu.ran[r.JobID]++
		bu.mu.Unlock()
		return o.handle(ctx, r)
	})
	if o.scheduled {
		w.HandleWorkflows()
	}
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { stopSoon(w) })
	bu.w = w
	if o.dispatcher {
		d, err := dispatcher.New(dispatcher.Config{Store: s, Name: "wf", LeaseTTL: time.Second, MaxSleep: 200 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, d.Start(ctx))
		t.Cleanup(func() { _ = d.Stop(context.Background()) })
	}
	return bu
}

func (bu *wfBundle) runs(jobID string) int {
	bu.mu.Lock()
	defer bu.mu.Unlock()
	return bu.ran[jobID]
}

// ended waits until workflow wf has ended and returns it.
func (bu *wfBundle) ended(t *testing.T, wf string) *shard.WorkflowInfo {
	t.Helper()
	var w *shard.WorkflowInfo
	require.Eventually(t, func() bool {
		var err error
		w, err = bu.s.Workflow(context.Background(), wf)
		require.NoError(t, err)
		return w.State != job.WorkflowRunning
	}, 20*time.Second, 5*time.Millisecond, "workflow %s does not end", wf)
	return w
}

func wfNode(id string, deps ...string) job.Node {
	return job.Node{Job: job.Job{ID: id, Type: "n"}, DependsOn: deps}
}

func wfStates(w *shard.WorkflowInfo) map[string]job.NodeState {
	out := map[string]job.NodeState{}
	for _, n := range w.Nodes {
		out[n.ID] = n.State
	}
	return out
}

// Handlers end with WithResult; a node reads its parents' results with ParentResults: a
// fan-out reads its root's, a join every branch's, a node whose parent succeeded without
// a result gets none. Every node runs once and the workflow succeeds.
func TestWorker_WorkflowResultsReachJoins(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		var mu sync.Mutex
		seen := map[string]map[string]string{} // node -> its parents' results
		bu := startWorkflows(t, b, wfOpts{handle: func(ctx context.Context, r *Run) error {
			wf, node, ok := r.Workflow()
			if !ok || wf != "fan" {
				return Cancel(fmt.Errorf("not a node of fan: %q", r.JobID))
			}
			parents, err := r.ParentResults(ctx)
			if err != nil {
				return err
			}
			got := map[string]string{}
			for p, v := range parents {
				got[p] = string(v)
			}
			mu.Lock()
			seen[node] = got
			mu.Unlock()
			switch {
			case node == "split":
				return WithResult([]byte("4"))
			case strings.HasPrefix(node, "part"):
				return WithResult([]byte(node + "/" + got["split"]))
			case node == "join":
				vals := make([]string, 0, len(got))
				for _, v := range got {
					vals = append(vals, v)
				}
				slices.Sort(vals)
				return WithResult([]byte(strings.Join(vals, ",")))
			}
			return nil // "quiet" and "after": no result
		}})

		jobs := []job.Node{wfNode("split"), wfNode("quiet")}
		var parts []string
		for i := range 4 {
			p := "part" + strconv.Itoa(i)
			parts = append(parts, p)
			jobs = append(jobs, wfNode(p, "split"))
		}
		jobs = append(jobs, wfNode("join", parts...), wfNode("after", "join", "quiet"))
		_, err := bu.s.CreateWorkflow(ctx, &job.Workflow{ID: "fan", Jobs: jobs})
		require.NoError(t, err)

		w := bu.ended(t, "fan")
		require.Equal(t, job.WorkflowSucceeded, w.State)
		for _, n := range w.Nodes {
			require.Equal(t, job.NodeSucceeded, n.State, n.ID)
			require.Equal(t, 1, bu.runs(n.JobID), "node %s ran once", n.ID)
		}
		mu.Lock()
		defer mu.Unlock()
		require.Empty(t, seen["split"], "a root has no parents")
		require.Equal(t, map[string]string{"split": "4"}, seen["part2"])
		require.Equal(t, map[string]string{"part0": "part0/4", "part1": "part1/4", "part2": "part2/4", "part3": "part3/4"}, seen["join"])
		require.Equal(t, map[string]string{"join": "part0/4,part1/4,part2/4,part3/4"}, seen["after"],
			"a parent that succeeded without a result is left out")
		res, ok, err := bu.s.NodeResult(ctx, "fan", "join")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "part0/4,part1/4,part2/4,part3/4", string(res))
	})
}

// A node whose retries run out fails; its all_success dependants end upstream_failed
// without running, an all_done one runs anyway, and the workflow fails. RetryWorkflow
// then runs the failed node and what hung on it again (from attempt 1), and not the
// nodes that succeeded; the workflow succeeds.
func TestWorker_WorkflowFailureThenRetry(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		var failing atomic.Bool
		failing.Store(true)
		var mu sync.Mutex
		attempts := map[string][]int{}
		bu := startWorkflows(t, b, wfOpts{dispatcher: true, handle: func(_ context.Context, r *Run) error {
			_, node, _ := r.Workflow()
			mu.Lock()
			attempts[node] = append(attempts[node], r.Attempt)
			mu.Unlock()
			if node == "bad" && failing.Load() {
				return errors.New("bad says no")
			}
			return nil
		}})
		bad := wfNode("bad", "a")
		bad.Retry = job.RetryPolicy{MaxAttempts: 2, InitialBackoff: 20 * time.Millisecond}
		_, err := bu.s.CreateWorkflow(ctx, &job.Workflow{ID: "etl", Jobs: []job.Node{
			wfNode("a"), bad, wfNode("after", "bad"), wfNode("after2", "after"), wfNode("side", "a"),
			{Job: job.Job{ID: "cleanup", Type: "n"}, DependsOn: []string{"after"}, Rule: job.RuleAllDone},
		}})
		require.NoError(t, err)

		w := bu.ended(t, "etl")
		require.Equal(t, job.WorkflowFailed, w.State)
		require.Equal(t, map[string]job.NodeState{
			"a": job.NodeSucceeded, "bad": job.NodeFailed, "after": job.NodeUpstreamFailed,
			"after2": job.NodeUpstreamFailed, "side": job.NodeSucceeded, "cleanup": job.NodeSucceeded,
		}, wfStates(w))
		for _, n := range w.Nodes {
			if n.ID == "bad" {
				require.Equal(t, 2, n.Attempts, "both attempts used")
			}
		}
		mu.Lock()
		require.Equal(t, []int{1, 2}, attempts["bad"])
		require.Empty(t, attempts["after"], "an upstream_failed node never runs")
		require.Empty(t, attempts["after2"])
		mu.Unlock()
		info, err := bu.s.Get(ctx, "etl@after")
		require.NoError(t, err)
		require.Equal(t, job.StateCancelled, info.State)

		failing.Store(false)
		state, changed, err := bu.s.RetryWorkflow(ctx, "etl")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, job.WorkflowRunning, state)
		w = bu.ended(t, "etl")
		require.Equal(t, job.WorkflowSucceeded, w.State)
		for _, n := range w.Nodes {
			require.Equal(t, job.NodeSucceeded, n.State, n.ID)
		}
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []int{1, 2, 1}, attempts["bad"], "the retried node starts from attempt 1")
		require.Equal(t, []int{1}, attempts["after"])
		require.Equal(t, []int{1}, attempts["after2"])
		require.Equal(t, []int{1}, attempts["a"], "succeeded nodes do not run again")
		require.Equal(t, []int{1}, attempts["side"])
		require.Equal(t, []int{1}, attempts["cleanup"])
		info, err = bu.s.Get(ctx, "etl@bad")
		require.NoError(t, err)
		require.Equal(t, job.StateCompleted, info.State)
	})
}

// CancelWorkflow while a node's handler runs ends that handler's context, with the job's
// cancellation as its cause; the nodes that wait never run, a node that succeeded keeps
// its state, and the workflow ends cancelled. RetryWorkflow before that handler has
// returned runs the node again: the old run's late report is refused, and it is no
// longer counted in flight (it was, for good, before retry_workflow took it out).
func TestWorker_CancelWorkflowCancelsRunningHandler(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		started := make(chan struct{})
		causes := make(chan error, 1)
		release := make(chan struct{})
		var slowRuns atomic.Int32
		var mu sync.Mutex
		var rejected []string
		bu := startWorkflows(t, b, wfOpts{
			observe: func(r Result) {
				if r.Rejected {
					mu.Lock()
					rejected = append(rejected, r.Run.JobID)
					mu.Unlock()
				}
			},
			handle: func(ctx context.Context, r *Run) error {
				_, node, _ := r.Workflow()
				if node != "slow" || slowRuns.Add(1) > 1 {
					return nil
				}
				close(started)
				select {
				case <-ctx.Done():
					causes <- context.Cause(ctx)
				case <-time.After(20 * time.Second):
					causes <- nil
				}
				<-release // the handler takes its time to wind up
				return ctx.Err()
			}})
		_, err := bu.s.CreateWorkflow(ctx, &job.Workflow{ID: "c", Jobs: []job.Node{
			wfNode("quick"), wfNode("slow"), wfNode("next", "slow", "quick"), wfNode("last", "next"),
		}})
		require.NoError(t, err)
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the slow node did not start")
		}
		require.Eventually(t, func() bool {
			w, err := bu.s.Workflow(ctx, "c")
			require.NoError(t, err)
			return wfStates(w)["quick"] == job.NodeSucceeded
		}, 10*time.Second, 5*time.Millisecond)

		at := time.Now()
		state, changed, err := bu.s.CancelWorkflow(ctx, "c")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, job.WorkflowCancelled, state)
		select {
		case cause := <-causes:
			require.ErrorIs(t, cause, errJobCancelled, "the handler learns why its context ended")
			// The cancel signal tells the worker at once, well before a heartbeat would.
			require.Less(t, time.Since(at), 5*time.Second)
		case <-time.After(15 * time.Second):
			t.Fatal("the running handler's context did not end")
		}
		w, err := bu.s.Workflow(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, job.WorkflowCancelled, w.State)
		require.Equal(t, map[string]job.NodeState{"quick": job.NodeSucceeded, "slow": job.NodeCancelled,
			"next": job.NodeCancelled, "last": job.NodeCancelled}, wfStates(w))
		require.Zero(t, bu.runs("c@next"), "a node that waited never runs")
		require.Zero(t, bu.runs("c@last"))

		// Retried while the cancelled handler still winds up.
		state, changed, err = bu.s.RetryWorkflow(ctx, "c")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, job.WorkflowRunning, state)
		w = bu.ended(t, "c")
		require.Equal(t, job.WorkflowSucceeded, w.State)
		require.Equal(t, 2, bu.runs("c@slow"), "the node ran again")
		require.Equal(t, 1, bu.runs("c@quick"), "the succeeded node did not")
		require.Equal(t, 1, bu.runs("c@last"))
		close(release)
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(rejected) == 1
		}, 10*time.Second, 5*time.Millisecond, "the old run's report is refused")
		require.Equal(t, []string{"c@slow"}, rejected)
		qs, err := bu.s.Queues(ctx)
		require.NoError(t, err)
		for _, q := range qs {
			require.Zero(t, q.InFlight+q.Ready+q.Scheduled+q.Dead, "%+v", q)
		}
	})
}

// A scheduled workflow with a cron of seconds, and a worker that starts instances: each
// occurrence creates the instance `<def>@<due ms>`, whose nodes run to its end. The
// worker's queues are the default ones: HandleWorkflows adds the definitions' queue
// (before, such a worker never claimed a definition's run, and no instance started).
func TestWorker_ScheduledWorkflowRunsInstances(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		ctx := context.Background()
		var mu sync.Mutex
		instances := map[string]int{} // instance -> node runs
		bu := startWorkflows(t, b, wfOpts{dispatcher: true, scheduled: true, handle: func(_ context.Context, r *Run) error {
			wf, node, _ := r.Workflow()
			mu.Lock()
			instances[wf]++
			mu.Unlock()
			return WithResult([]byte(node))
		}})
		res, err := bu.s.CreateWorkflow(ctx, &job.Workflow{ID: "tick", Jobs: []job.Node{wfNode("a"), wfNode("b", "a"), wfNode("c", "a"), wfNode("d", "b", "c")},
			Schedule: &job.Schedule{Cron: "*/1 * * * * *"}})
		require.NoError(t, err)
		require.True(t, res.Created)
		require.Equal(t, job.WorkflowScheduled, res.State)

		// Two instances that ended.
		done := func() []string {
			mu.Lock()
			defer mu.Unlock()
			var out []string
			for wf := range instances {
				w, err := bu.s.Workflow(ctx, wf)
				require.NoError(t, err)
				if w.State != job.WorkflowRunning {
					out = append(out, wf)
				}
			}
			slices.Sort(out)
			return out
		}
		require.Eventually(t, func() bool { return len(done()) >= 2 }, 20*time.Second, 20*time.Millisecond)
		_, _, err = bu.s.Cancel(ctx, "tick")
		require.NoError(t, err)

		for _, wf := range done() {
			def, due, ok := strings.Cut(wf, "@")
			require.True(t, ok, wf)
			require.Equal(t, "tick", def)
			ms, err := strconv.ParseInt(due, 10, 64)
			require.NoError(t, err, wf)
			require.Zero(t, ms%1000, "an instance is named by its occurrence, a whole second: %s", wf)
			require.Equal(t, bu.s.ShardOf("tick"), bu.s.ShardOf(wf))
			w, err := bu.s.Workflow(ctx, wf)
			require.NoError(t, err)
			require.Equal(t, job.WorkflowSucceeded, w.State, wf)
			for _, n := range w.Nodes {
				require.Equal(t, job.NodeSucceeded, n.State, "%s %s", wf, n.ID)
				require.Equal(t, 1, bu.runs(n.JobID), "%s ran once", n.JobID)
			}
			r, ok, err := bu.s.NodeResult(ctx, wf, "d")
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, "d", string(r))
		}
		// The definition's runs say what they did.
		runs, err := bu.s.Runs(ctx, "tick")
		require.NoError(t, err)
		var created int
		for _, r := range runs {
			if strings.Contains(string(r.Result), `"outcome":"created"`) {
				created++
			}
		}
		require.GreaterOrEqual(t, created, 2)
	})
}
