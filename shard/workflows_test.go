package shard_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/shard/shardtest"
)

// wfRunner plays the workers of a workflow's nodes: it claims the ready runs of the
// workflow's shard and ends each as outcome says (succeed when unnamed), recording the
// order in which nodes ran.
type wfRunner struct {
	t       *testing.T
	s       *shard.Store
	wf      string
	outcome func(node string) shard.Outcome
	ran     []string
	result  func(node string) []byte
	anyWF   bool // runs of other workflows of the shard are run too
	single  bool // each run is ended in a call of its own, not all of a step's in one
}

// step claims the ready runs once and ends them; it returns how many there were.
func (r *wfRunner) step(ctx context.Context) int {
	id := r.s.ShardOf(r.wf)
	c, err := r.s.Claim(ctx, id, "default", 1000, "w", "n")
	require.NoError(r.t, err)
	var fs []shard.Finish
	for _, run := range c {
		wf, node, ok := job.SplitNodeJobID(run.JobID)
		require.True(r.t, ok, run.JobID)
		if !r.anyWF {
			require.Equal(r.t, r.wf, wf)
		}
		r.ran = append(r.ran, node)
		f := shard.Finish{Member: run.Member, Token: run.Token, Outcome: shard.Succeeded}
		if r.outcome != nil {
			f.Outcome = r.outcome(node)
		}
		if f.Outcome == shard.Succeeded && r.result != nil {
			f.Result = r.result(node)
		}
		if f.Outcome == shard.Failed || f.Outcome == shard.Cancelled {
			f.Error = "node " + node + " says no"
		}
		fs = append(fs, f)
	}
	for len(fs) > 0 {
		n := len(fs)
		if r.single {
			n = 1
		}
		errs, err := r.s.FinishRuns(ctx, id, fs[:n])
		require.NoError(r.t, err)
		for _, e := range errs {
			require.NoError(r.t, e)
		}
		fs = fs[n:]
	}
	return len(c)
}

// run steps until no run is ready, and returns the workflow.
func (r *wfRunner) run(ctx context.Context) *shard.WorkflowInfo {
	for i := 0; r.step(ctx) > 0; i++ {
		require.Less(r.t, i, 1000, "the workflow does not end")
	}
	w, err := r.s.Workflow(ctx, r.wf)
	require.NoError(r.t, err)
	return w
}

func nodeStates(w *shard.WorkflowInfo) map[string]job.NodeState {
	out := map[string]job.NodeState{}
	for _, n := range w.Nodes {
		out[n.ID] = n.State
	}
	return out
}

func node(id string, deps ...string) job.Node {
	return job.Node{Job: job.Job{ID: id, Type: "t", Retry: job.RetryPolicy{MaxAttempts: 1}}, DependsOn: deps}
}

func ruled(n job.Node, r job.Rule) job.Node {
	n.Rule = r
	return n
}

// A diamond: the join runs after both branches, once; the parents' results reach it; the
// workflow succeeds; creating it again changes nothing, and a different graph under its
// id is a conflict.
func TestWorkflow_Diamond(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		wf := &job.Workflow{ID: "diamond", Jobs: []job.Node{node("d", "b", "c"), node("b", "a"), node("c", "a"), node("a")}}
		res, err := s.CreateWorkflow(ctx, wf)
		require.NoError(t, err)
		require.True(t, res.Created)
		require.Equal(t, job.WorkflowRunning, res.State)
		require.Equal(t, s.ShardOf("diamond"), res.Shard)
		require.Equal(t, "a", wf.Jobs[0].ID, "parents come first")

		w, err := s.Workflow(ctx, "diamond")
		require.NoError(t, err)
		require.Equal(t, map[string]job.NodeState{"a": job.NodeReady, "b": job.NodeWaiting, "c": job.NodeWaiting, "d": job.NodeWaiting}, nodeStates(w))

		r := &wfRunner{t: t, s: s, wf: "diamond", result: func(n string) []byte { return []byte("from " + n) }}
		require.Equal(t, 1, r.step(ctx))
		require.Equal(t, 2, r.step(ctx), "both branches at once")
		parents, err := s.ParentResults(ctx, "diamond@d")
		require.NoError(t, err)
		require.Equal(t, map[string][]byte{"b": []byte("from b"), "c": []byte("from c")}, parents)
		w = r.run(ctx)
		require.Equal(t, []string{"a", "b", "c", "d"}, sortedTail(r.ran))
		require.Equal(t, job.WorkflowSucceeded, w.State)
		require.False(t, w.EndedAt.IsZero())
		require.False(t, w.Expires.IsZero(), "an ended workflow expires")
		for _, n := range w.Nodes {
			require.Equal(t, job.NodeSucceeded, n.State, n.ID)
			require.Equal(t, 1, n.Attempts, n.ID)
			require.Equal(t, len("from "+n.ID), n.ResultSize)
			require.False(t, n.ReleasedAt.IsZero())
			require.False(t, n.EndedAt.Before(n.ReleasedAt))
		}
		info, err := s.Get(ctx, "diamond@d")
		require.NoError(t, err)
		require.Equal(t, job.StateCompleted, info.State)

		again, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "diamond", Jobs: []job.Node{node("a"), node("b", "a"), node("c", "a"), node("d", "b", "c")}})
		require.NoError(t, err)
		require.False(t, again.Created)
		require.False(t, again.Conflict, "the same graph")
		other, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "diamond", Jobs: []job.Node{node("a")}})
		require.NoError(t, err)
		require.False(t, other.Created)
		require.True(t, other.Conflict)
	})
}

// sortedTail sorts ran between its first and last entries (nodes that ran in one step
// come in claim order).
func sortedTail(ran []string) []string {
	out := append([]string(nil), ran...)
	if len(out) > 2 {
		mid := out[1 : len(out)-1]
		for i := range mid {
			for j := i + 1; j < len(mid); j++ {
				if mid[j] < mid[i] {
					mid[i], mid[j] = mid[j], mid[i]
				}
			}
		}
	}
	return out
}

// A failed node makes its dependants upstream_failed at once, down the graph; an
// all_done node runs anyway, a one_failed one runs as the error handler; the workflow
// fails. Retry runs the failed node and what hung on it again, keeping the rest.
func TestWorkflow_FailurePropagatesAndRetry(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		wf := &job.Workflow{ID: "etl", Jobs: []job.Node{
			node("extract"), node("transform", "extract"), node("load", "transform"), node("report", "load"),
			ruled(node("cleanup", "load"), job.RuleAllDone), ruled(node("alert", "transform"), job.RuleOneFailed),
			node("side", "extract"),
		}}
		_, err := s.CreateWorkflow(ctx, wf)
		require.NoError(t, err)
		fail := true
		r := &wfRunner{t: t, s: s, wf: "etl", outcome: func(n string) shard.Outcome {
			if n == "transform" && fail {
				return shard.Failed
			}
			return shard.Succeeded
		}}
		w := r.run(ctx)
		require.Equal(t, job.WorkflowFailed, w.State)
		require.Equal(t, map[string]job.NodeState{
			"extract": job.NodeSucceeded, "transform": job.NodeFailed, "load": job.NodeUpstreamFailed,
			"report": job.NodeUpstreamFailed, "cleanup": job.NodeSucceeded, "alert": job.NodeSucceeded, "side": job.NodeSucceeded,
		}, nodeStates(w))
		require.ElementsMatch(t, []string{"extract", "transform", "side", "alert", "cleanup"}, r.ran)
		info, err := s.Get(ctx, "etl@load")
		require.NoError(t, err)
		require.Equal(t, job.StateCancelled, info.State, "the job of a node that never ran ends cancelled")
		dead, _, err := s.Dead(ctx, "default", 10, "")
		require.NoError(t, err)
		require.Len(t, dead, 1, "the failed node's run is dead")

		// Retry: transform, load and report wait again; the succeeded nodes keep.
		fail = false
		r.ran = nil
		state, changed, err := s.RetryWorkflow(ctx, "etl")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, job.WorkflowRunning, state)
		dead, _, err = s.Dead(ctx, "default", 10, "")
		require.NoError(t, err)
		require.Empty(t, dead, "the retried node's dead run is gone")
		w = r.run(ctx)
		require.ElementsMatch(t, []string{"transform", "load", "report"}, r.ran, "the succeeded nodes are kept")
		require.Equal(t, job.WorkflowSucceeded, w.State)
		require.Equal(t, job.NodeSucceeded, nodeStates(w)["alert"])
		_, changed, err = s.RetryWorkflow(ctx, "etl")
		require.NoError(t, err)
		require.False(t, changed, "a succeeded workflow has nothing to retry")
	})
}

// Cancel a workflow with a running node and a ready one: the waiting nodes end at once,
// the ready run goes, the running one's worker is told through its heartbeat, and its
// late success changes nothing.
func TestWorkflow_CancelWithRunningNodes(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "c", Jobs: []job.Node{node("a"), node("b"), node("c", "a", "b")}})
		require.NoError(t, err)
		runs, err := s.Claim(ctx, 0, "default", 1, "w", "n")
		require.NoError(t, err)
		require.Len(t, runs, 1)
		state, changed, err := s.CancelWorkflow(ctx, "c")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, job.WorkflowCancelled, state)
		ext, err := s.Extend(ctx, 0, []shard.Held{{Member: runs[0].Member, Token: runs[0].Token}})
		require.NoError(t, err)
		require.Equal(t, []int{shard.ExtendCancelled}, ext, "the running node's worker learns it")
		more, err := s.Claim(ctx, 0, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Empty(t, more, "the ready node's run is gone")
		errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: runs[0].Member, Token: runs[0].Token, Outcome: shard.Succeeded}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		w, err := s.Workflow(ctx, "c")
		require.NoError(t, err)
		require.Equal(t, job.WorkflowCancelled, w.State)
		for _, n := range w.Nodes {
			require.Equal(t, job.NodeCancelled, n.State, n.ID)
		}
		_, changed, err = s.CancelWorkflow(ctx, "c")
		require.NoError(t, err)
		require.False(t, changed)
		_, _, err = s.CancelWorkflow(ctx, "nope")
		require.ErrorIs(t, err, shard.ErrWorkflowNotFound)

		// Retry after a cancel runs every node again.
		_, changed, err = s.RetryWorkflow(ctx, "c")
		require.NoError(t, err)
		require.True(t, changed)
		r := &wfRunner{t: t, s: s, wf: "c"}
		require.Equal(t, job.WorkflowSucceeded, r.run(ctx).State)
		require.ElementsMatch(t, []string{"a", "b", "c"}, r.ran)
	})
}

// A node's job is reachable by its id but only the workflow decides when it runs.
func TestWorkflow_NodeJobsRefuseDirectChanges(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "n", Jobs: []job.Node{node("a"), node("b", "a")}})
		require.NoError(t, err)
		var ne *shard.NodeError
		_, _, err = s.Pause(ctx, "n@b")
		require.ErrorAs(t, err, &ne)
		require.Equal(t, "b", ne.Node)
		_, err = s.Trigger(ctx, "n@b")
		require.ErrorAs(t, err, &ne)
		require.ErrorAs(t, s.Delete(ctx, "n@b"), &ne)
		info, err := s.Get(ctx, "n@b")
		require.NoError(t, err)
		require.Equal(t, job.StateWaiting, info.State)

		// Cancelling a node's job counts as the node cancelled: its child is upstream_failed.
		_, changed, err := s.Cancel(ctx, "n@a")
		require.NoError(t, err)
		require.True(t, changed)
		w, err := s.Workflow(ctx, "n")
		require.NoError(t, err)
		require.Equal(t, map[string]job.NodeState{"a": job.NodeCancelled, "b": job.NodeUpstreamFailed}, nodeStates(w))
		require.Equal(t, job.WorkflowFailed, w.State)
	})
}

// Every rule against every mix of two parents' ends.
func TestWorkflow_Rules(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 2})
		rules := []job.Rule{job.RuleAllSuccess, job.RuleAllDone, job.RuleOneSuccess, job.RuleOneFailed, job.RuleNoneFailed}
		ends := [][2]bool{{true, true}, {true, false}, {false, false}}
		for _, rule := range rules {
			for _, e := range ends {
				id := fmt.Sprintf("%s-%v-%v", rule, e[0], e[1])
				_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: id, Jobs: []job.Node{node("p"), node("q"), ruled(node("x", "p", "q"), rule)}})
				require.NoError(t, err)
				ok := map[string]bool{"p": e[0], "q": e[1], "x": true}
				r := &wfRunner{t: t, s: s, wf: id, outcome: func(n string) shard.Outcome {
					if ok[n] {
						return shard.Succeeded
					}
					return shard.Failed
				}}
				w := r.run(ctx)
				want := evalRule(rule, []job.NodeState{endOf(e[0]), endOf(e[1])})
				if want == "run" {
					want = job.NodeSucceeded
				}
				require.Equal(t, want, nodeStates(w)["x"], id)
			}
		}
	})
}

func endOf(ok bool) job.NodeState {
	if ok {
		return job.NodeSucceeded
	}
	return job.NodeFailed
}

// evalRule is the rules as the documentation states them, for parents that all ended:
// "run", or the state of a node whose rule cannot be met.
func evalRule(rule job.Rule, parents []job.NodeState) job.NodeState {
	var ok, bad, skip int
	for _, p := range parents {
		switch p {
		case job.NodeSucceeded:
			ok++
		case job.NodeSkipped:
			skip++
		default:
			bad++
		}
	}
	switch rule {
	case job.RuleAllDone:
		return "run"
	case job.RuleOneSuccess:
		if ok > 0 {
			return "run"
		}
		if bad > 0 {
			return job.NodeUpstreamFailed
		}
		return job.NodeSkipped
	case job.RuleOneFailed:
		if bad > 0 {
			return "run"
		}
		return job.NodeSkipped
	case job.RuleNoneFailed:
		if bad > 0 {
			return job.NodeUpstreamFailed
		}
		return "run"
	default:
		if bad > 0 {
			return job.NodeUpstreamFailed
		}
		if skip > 0 {
			return job.NodeSkipped
		}
		return "run"
	}
}

// Random DAGs of up to 200 nodes with random rules and node outcomes, some nodes' jobs
// cancelled before anything runs: every node's final state matches an independent
// evaluation of the rules, no node runs twice, and the workflow's state follows from its
// nodes'.
func TestWorkflow_RandomDAGs(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		// Released nodes' jobs are packed (the default) or job hashes (NoPack), round by
		// round.
		stores := []*shard.Store{open(t, b, shard.Config{}), open(t, b, shard.Config{NoPack: true})}
		seed := uint64(time.Now().UnixNano())
		rounds := 12
		if b.Name != redistest.Miniredis {
			rounds = 4
		}
		for round := range rounds {
			s := stores[round%2]
			rng := rand.New(rand.NewPCG(seed, uint64(round)))
			n := 1 + rng.IntN(200)
			rules := []job.Rule{job.RuleAllSuccess, job.RuleAllDone, job.RuleOneSuccess, job.RuleOneFailed, job.RuleNoneFailed}
			nodes := make([]job.Node, n)
			fails := map[string]bool{}
			for i := range nodes {
				id := "n" + strconv.Itoa(i)
				nodes[i] = ruled(node(id), rules[rng.IntN(len(rules))])
				for p := range i {
					if rng.IntN(max(1, i/3)) == 0 && len(nodes[i].DependsOn) < 6 {
						nodes[i].DependsOn = append(nodes[i].DependsOn, "n"+strconv.Itoa(p))
					}
				}
				fails[id] = rng.IntN(4) == 0
			}
			// Some nodes' jobs are cancelled before anything runs: waiting ones (packed
			// or job hashes) and released roots. Never one with a cancelled ancestor,
			// which may have been decided by that cancel already.
			cancelled, tainted := map[string]bool{}, map[string]bool{}
			for _, nd := range nodes {
				for _, p := range nd.DependsOn {
					tainted[nd.ID] = tainted[nd.ID] || tainted[p] || cancelled[p]
				}
				cancelled[nd.ID] = !tainted[nd.ID] && rng.IntN(8) == 0
			}
			// Submitted shuffled: the store orders them.
			shuffled := append([]job.Node(nil), nodes...)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			id := fmt.Sprintf("rand-%d", round)
			_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: id, Jobs: shuffled})
			require.NoError(t, err, "seed %d round %d", seed, round)
			for _, nd := range nodes {
				if cancelled[nd.ID] {
					st, changed, err := s.Cancel(ctx, job.NodeJobID(id, nd.ID))
					require.NoError(t, err, "seed %d round %d", seed, round)
					require.True(t, changed, "%s (seed %d round %d)", nd.ID, seed, round)
					require.Equal(t, job.StateCancelled, st)
				}
			}
			// Half of the rounds end each run in a call of its own (a node's end then moves
			// its workflow alone, include workflow's wf_mark_one), the others all of a
			// step's runs in one call (wf_mark_many).
			r := &wfRunner{t: t, s: s, wf: id, single: round%4 >= 2, outcome: func(n string) shard.Outcome {
				if fails[n] {
					return shard.Failed
				}
				return shard.Succeeded
			}}
			w := r.run(ctx)

			// The independent evaluation, in index order (parents have lower indexes).
			want := map[string]job.NodeState{}
			for _, nd := range nodes {
				var ps []job.NodeState
				for _, p := range nd.DependsOn {
					ps = append(ps, want[p])
				}
				st := evalRule(nd.Rule, ps)
				if len(ps) == 0 {
					st = "run"
				}
				if st == "run" {
					st = endOf(!fails[nd.ID])
				}
				if cancelled[nd.ID] {
					st = job.NodeCancelled
				}
				want[nd.ID] = st
			}
			require.Equal(t, want, nodeStates(w), "seed %d round %d", seed, round)
			seen := map[string]bool{}
			for _, nd := range r.ran {
				require.False(t, seen[nd], "node %s ran twice (seed %d round %d)", nd, seed, round)
				seen[nd] = true
				require.Contains(t, []job.NodeState{job.NodeSucceeded, job.NodeFailed}, want[nd])
			}
			wantState := job.WorkflowSucceeded
			for _, st := range want {
				if st == job.NodeFailed || st == job.NodeUpstreamFailed || st == job.NodeCancelled {
					wantState = job.WorkflowFailed
				}
			}
			require.Equal(t, wantState, w.State, "seed %d round %d", seed, round)
		}
	})
}

// A scheduled workflow is a recurring job whose runs start instances; each overlap
// policy applies to whole instances: skip refuses an instance while one runs, allow
// runs them side by side, buffer_one holds one until the running one ends.
func TestWorkflow_ScheduledInstancesOverlap(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		for _, overlap := range []job.Overlap{job.OverlapSkip, job.OverlapAllow, job.OverlapBufferOne} {
			def := "nightly-" + string(overlap)
			def = def[:min(len(def), 20)]
			res, err := s.CreateWorkflow(ctx, &job.Workflow{ID: def, Jobs: []job.Node{node("a"), node("b", "a")},
				Schedule: &job.Schedule{Cron: "0 3 * * *", TimeZone: "Europe/Berlin"}, Overlap: overlap})
			require.NoError(t, err)
			require.True(t, res.Created)
			require.Equal(t, job.WorkflowScheduled, res.State)
			info, err := s.Get(ctx, def)
			require.NoError(t, err)
			require.Equal(t, job.WorkflowType, info.Type)
			require.True(t, info.Schedule.IsRecurring())

			start := func(at time.Time) shard.WorkflowResult {
				r, err := s.StartInstance(ctx, def, at, info.Payload)
				require.NoError(t, err)
				return r
			}
			first := start(t0)
			require.True(t, first.Created)
			require.Equal(t, def+"@"+strconv.FormatInt(t0.UnixMilli(), 10), first.ID)
			require.Equal(t, s.ShardOf(def), first.Shard, "an instance lives on its definition's shard")
			require.False(t, start(t0).Created, "the same occurrence again finds its instance")

			second := start(t0.Add(24 * time.Hour))
			third := start(t0.Add(48 * time.Hour))
			switch overlap {
			case job.OverlapSkip:
				require.True(t, second.Skipped)
				require.True(t, third.Skipped)
			case job.OverlapAllow:
				require.True(t, second.Created)
				require.False(t, second.Held)
			case job.OverlapBufferOne:
				require.True(t, second.Created)
				require.True(t, second.Held)
				require.True(t, third.Skipped, "one instance is buffered already")
				w, err := s.Workflow(ctx, second.ID)
				require.NoError(t, err)
				require.True(t, w.Held)
				require.Equal(t, job.NodeWaiting, nodeStates(w)["a"], "a held instance's roots wait")
			}
			// Run the first instance to its end (and the second's, when it runs alongside).
			r := &wfRunner{t: t, s: s, wf: first.ID, anyWF: true}
			for i := 0; r.step(ctx) > 0 || i == 0; i++ {
				require.Less(t, i, 100)
			}
			w, err := s.Workflow(ctx, first.ID)
			require.NoError(t, err)
			require.Equal(t, job.WorkflowSucceeded, w.State)
			if overlap == job.OverlapBufferOne {
				w, err := s.Workflow(ctx, second.ID)
				require.NoError(t, err)
				require.False(t, w.Held, "the buffered instance starts when the running one ends")
				require.Equal(t, job.WorkflowSucceeded, w.State, "and runs (the runner takes its runs too)")
				firstW, err := s.Workflow(ctx, first.ID)
				require.NoError(t, err)
				require.False(t, w.Nodes[0].ReleasedAt.Before(firstW.EndedAt))
			}
			if overlap == job.OverlapSkip {
				require.True(t, start(t0.Add(72*time.Hour)).Created, "with none running, the next starts")
			}
		}
	})
}

// A workflow cancelled while a node ran and retried before that node's worker reported:
// the retry takes the old run out of flight (the queue's in-flight count goes back to
// zero, and the reaper has nothing left of it), the old worker's late report and
// heartbeat are refused, and the node's new run takes the workflow to its end.
func TestWorkflow_RetryWhileACancelledNodeStillRuns(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "rr", Jobs: []job.Node{node("a"), node("b", "a")}})
		require.NoError(t, err)
		old, err := s.Claim(ctx, 0, "default", 1, "w", "n")
		require.NoError(t, err)
		require.Len(t, old, 1)
		_, changed, err := s.CancelWorkflow(ctx, "rr")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, int64(1), queueStats(t, s)["default"].InFlight, "the cancelled run is in flight until its worker reports")

		_, changed, err = s.RetryWorkflow(ctx, "rr")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, int64(0), queueStats(t, s)["default"].InFlight, "the old run left flight with the retry")
		ext, err := s.Extend(ctx, 0, []shard.Held{{Member: old[0].Member, Token: old[0].Token}})
		require.NoError(t, err)
		require.Equal(t, []int{shard.ExtendLost}, ext, "the old run's worker learns it lost the run")
		errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: old[0].Member, Token: old[0].Token, Outcome: shard.Succeeded}})
		require.NoError(t, err)
		require.ErrorIs(t, errs[0], shard.ErrTokenMismatch)

		r := &wfRunner{t: t, s: s, wf: "rr"}
		w := r.run(ctx)
		require.Equal(t, job.WorkflowSucceeded, w.State)
		require.ElementsMatch(t, []string{"a", "b"}, r.ran)
		q := queueStats(t, s)["default"]
		require.Zero(t, q.Scheduled+q.Ready+q.InFlight+q.Dead, "%+v", q)
	})
}

// A scheduled workflow's instances run their nodes with the definition's retry policy:
// a node without jitter (-1, "none") keeps none in every instance. The definition is
// stored normalised, where "none" is 0, and each instance normalises it again, where 0
// is the default 0.2.
func TestWorkflow_ScheduledInstanceKeepsRetryPolicy(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		n := node("a")
		n.Retry = job.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, Jitter: -1}
		m := node("b", "a")
		m.Retry = job.RetryPolicy{MaxAttempts: 2, Jitter: 0.5}
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "nojit", Jobs: []job.Node{n, m},
			Schedule: &job.Schedule{Cron: "0 3 * * *"}})
		require.NoError(t, err)
		def, err := s.Get(ctx, "nojit")
		require.NoError(t, err)
		inst, err := s.StartInstance(ctx, "nojit", time.Date(2030, 1, 1, 3, 0, 0, 0, time.UTC), def.Payload)
		require.NoError(t, err)
		require.True(t, inst.Created)
		a, err := s.Get(ctx, job.NodeJobID(inst.ID, "a"))
		require.NoError(t, err)
		require.Equal(t, -1.0, a.Retry.Jitter, "no jitter stays none")
		require.Equal(t, 3, a.Retry.MaxAttempts)
		bn, err := s.Get(ctx, job.NodeJobID(inst.ID, "b"))
		require.NoError(t, err)
		require.Equal(t, 0.5, bn.Retry.Jitter)

		// A one-off workflow's node keeps none too.
		_, err = s.CreateWorkflow(ctx, &job.Workflow{ID: "nojit1", Jobs: []job.Node{n}})
		require.NoError(t, err)
		a, err = s.Get(ctx, "nojit1@a")
		require.NoError(t, err)
		require.Equal(t, -1.0, a.Retry.Jitter)
	})
}

// reviewDef creates a scheduled workflow def (a, b after a) with the overlap policy and
// returns its definition payload.
func reviewDef(t *testing.T, s *shard.Store, def string, overlap job.Overlap) []byte {
	t.Helper()
	ctx := context.Background()
	_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: def, Jobs: []job.Node{node("a"), node("b", "a")},
		Schedule: &job.Schedule{Cron: "0 3 * * *"}, Overlap: overlap})
	require.NoError(t, err)
	info, err := s.Get(ctx, def)
	require.NoError(t, err)
	return info.Payload
}

// heldT0 is when heldInstances starts the first instance; the second starts a day later.
var heldT0 = time.Date(2030, 1, 1, 3, 0, 0, 0, time.UTC)

// heldInstances creates buffer_one definition def (reviewDef) and starts two of its
// instances: the first runs, the second is held behind it. Returns them and the
// definition's payload.
func heldInstances(t *testing.T, s *shard.Store, def string) (first, second shard.WorkflowResult, payload []byte) {
	t.Helper()
	ctx := context.Background()
	payload = reviewDef(t, s, def, job.OverlapBufferOne)
	first, err := s.StartInstance(ctx, def, heldT0, payload)
	require.NoError(t, err)
	second, err = s.StartInstance(ctx, def, heldT0.Add(24*time.Hour), payload)
	require.NoError(t, err)
	require.True(t, second.Held)
	return first, second, payload
}

// Cancelling the running instance of a buffer_one definition starts the buffered one
// (docs/workflows.md: "it starts when the running one ends"): its root must get a run a
// worker can claim. cancel_workflow.lua releases the held instance's roots through
// wf_finished → wf_hold_release → wf_release → new_run, which only collects the ready
// run (add_ready); the script never calls flush_ready, so the run is never written.
func TestWorkflow_CancelRunningInstanceStartsBufferedOne(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		first, second, _ := heldInstances(t, s, "buf")
		require.True(t, first.Created)
		// The first instance's root run is claimed, so that the only ready run afterwards
		// can be the second instance's.
		runs, err := s.Claim(ctx, 0, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, runs, 1)
		require.Equal(t, first.ID+"@a", runs[0].JobID)

		_, changed, err := s.CancelWorkflow(ctx, first.ID)
		require.NoError(t, err)
		require.True(t, changed)

		w, err := s.Workflow(ctx, second.ID)
		require.NoError(t, err)
		require.False(t, w.Held, "the buffered instance started")
		require.Equal(t, job.NodeReady, nodeStates(w)["a"])
		runs, err = s.Claim(ctx, 0, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, runs, 1, "the started instance's root has a run to claim")
		require.Equal(t, second.ID+"@a", runs[0].JobID)
	})
}

// A buffered instance cancelled before it started is held no more; a retry of it while
// its definition's other instance runs is refused (overlap buffer_one allows no second
// one beside it: the retry would start it), and allowed once that one ended, starting it
// unheld. Overlap allow lets a retry run beside the other.
func TestWorkflow_RetryInstanceObeysOverlap(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		first, second, _ := heldInstances(t, s, "buf2")
		_, changed, err := s.CancelWorkflow(ctx, second.ID)
		require.NoError(t, err)
		require.True(t, changed)
		w, err := s.Workflow(ctx, second.ID)
		require.NoError(t, err)
		require.False(t, w.Held, "a cancelled instance is held no more")

		_, _, err = s.RetryWorkflow(ctx, second.ID)
		var we *shard.WorkflowError
		require.ErrorAs(t, err, &we)
		require.Contains(t, we.Error(), first.ID)
		w, err = s.Workflow(ctx, second.ID)
		require.NoError(t, err)
		require.Equal(t, job.WorkflowCancelled, w.State, "the refused retry changed nothing")

		r := &wfRunner{t: t, s: s, wf: first.ID}
		require.Equal(t, job.WorkflowSucceeded, r.run(ctx).State)
		_, changed, err = s.RetryWorkflow(ctx, second.ID)
		require.NoError(t, err)
		require.True(t, changed)
		w, err = s.Workflow(ctx, second.ID)
		require.NoError(t, err)
		require.False(t, w.Held)
		require.Equal(t, job.NodeReady, nodeStates(w)["a"])
		r = &wfRunner{t: t, s: s, wf: second.ID}
		require.Equal(t, job.WorkflowSucceeded, r.run(ctx).State)

		// Overlap allow: a retry runs beside a running instance.
		payload := reviewDef(t, s, "all", job.OverlapAllow)
		one, err := s.StartInstance(ctx, "all", heldT0, payload)
		require.NoError(t, err)
		two, err := s.StartInstance(ctx, "all", heldT0.Add(time.Hour), payload)
		require.NoError(t, err)
		_, _, err = s.CancelWorkflow(ctx, two.ID)
		require.NoError(t, err)
		_, changed, err = s.RetryWorkflow(ctx, two.ID)
		require.NoError(t, err)
		require.True(t, changed)
		w, err = s.Workflow(ctx, one.ID)
		require.NoError(t, err)
		require.Equal(t, job.WorkflowRunning, w.State)
	})
}

// The shards count workflows started and ended; the queue stats do not show them.
func TestWorkflow_Counts(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		for _, id := range []string{"ok1", "ok2", "bad", "gone"} {
			_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: id, Jobs: []job.Node{node("n-" + id)}})
			require.NoError(t, err)
		}
		_, _, err := s.CancelWorkflow(ctx, "gone")
		require.NoError(t, err)
		for _, id := range []string{"ok1", "ok2", "bad"} {
			r := &wfRunner{t: t, s: s, wf: id, anyWF: true, outcome: func(n string) shard.Outcome {
				if n == "n-bad" {
					return shard.Failed
				}
				return shard.Succeeded
			}}
			r.run(ctx)
		}
		_, _, err = s.RetryWorkflow(ctx, "bad")
		require.NoError(t, err)
		c, err := s.WorkflowCounts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(4), c.Created)
		require.Equal(t, int64(1), c.Retried)
		require.Equal(t, map[job.WorkflowState]int64{job.WorkflowSucceeded: 2, job.WorkflowFailed: 1, job.WorkflowCancelled: 1}, c.Ended)
		require.Equal(t, int64(1), c.Running(), "the retried one")
		qs, err := s.Queues(ctx)
		require.NoError(t, err)
		for _, q := range qs {
			require.Equal(t, "default", q.Queue)
		}
	})
}

// A retry starts a reset node afresh: nothing of a run of its earlier attempt passes for
// its new run. Its job loses 'hs' (the run a fast-path success names) and its kept
// results ('xs', 'x<due>'), its history keeps the old run, and its result in the
// workflow goes, so NodeResult has none and a child that runs while the node runs again
// does not get the old result among its parents'. No retry resets a succeeded node
// today (the succeeded nodes are kept), so the node's end is turned into a failure by
// hand: the state such a reset meets (a node whose last run succeeded, with a result).
// Before the fix, the retry dropped the run field 'hs' named, and Runs failed on it.
func TestWorkflow_RetryResetsANodesRunData(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		c := b.Client(t)
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "rs", Jobs: []job.Node{
			node("a"), node("c"), ruled(node("j", "a", "c"), job.RuleOneSuccess)}})
		require.NoError(t, err)
		attempt := 1
		r := &wfRunner{t: t, s: s, wf: "rs",
			result: func(n string) []byte { return []byte(n + "-" + strconv.Itoa(attempt)) },
			outcome: func(n string) shard.Outcome {
				if n == "j" && attempt == 1 {
					return shard.Failed
				}
				return shard.Succeeded
			}}
		require.Equal(t, job.WorkflowFailed, r.run(ctx).State)
		id := s.ShardOf("rs")
		jobKey := s.Keys().Job(id, "rs@a")
		old, err := c.Do(ctx, c.B().Hget().Key(jobKey).Field("hs").Build()).ToString()
		require.NoError(t, err, "a's run succeeded on the ack's fast path")
		require.Equal(t, []string{"a-1"}, hmget(t, c, jobKey, "x"+old), "with its result")
		wk := s.Keys().Workflow(id, "rs")
		st, err := c.Do(ctx, c.B().Hget().Key(wk).Field("s:a").Build()).ToString()
		require.NoError(t, err)
		require.NoError(t, c.Do(ctx, c.B().Hset().Key(wk).FieldValue().FieldValue("s:a", "failed"+strings.TrimPrefix(st, "succeeded")).Build()).Error())
		// The new run's due time differs from the old one's.
		oldDue, err := strconv.ParseInt(old, 10, 64)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			now, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
			require.NoError(t, err)
			sec, _ := strconv.ParseInt(now[0], 10, 64)
			usec, _ := strconv.ParseInt(now[1], 10, 64)
			return sec*1000+usec/1000 > oldDue
		}, time.Second, time.Millisecond)

		attempt = 2
		_, changed, err := s.RetryWorkflow(ctx, "rs")
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, []string{"", "", ""}, hmget(t, c, jobKey, "hs", "xs", "x"+old), "what the new run owns is reset")
		runs, err := s.Runs(ctx, "rs@a")
		require.NoError(t, err)
		require.Len(t, runs, 1, "the old run stays in the history")
		require.Equal(t, old, strconv.FormatInt(runs[0].Due.UnixMilli(), 10))
		require.Equal(t, job.OutcomeSucceeded, runs[0].Outcome)
		require.Equal(t, 1, runs[0].Attempt)
		require.Empty(t, runs[0].Result, "without its result")
		_, ok, err := s.NodeResult(ctx, "rs", "a")
		require.NoError(t, err)
		require.False(t, ok, "a reset node has no result")
		w, err := s.Workflow(ctx, "rs")
		require.NoError(t, err)
		for _, n := range w.Nodes {
			if n.ID == "a" {
				require.Zero(t, n.ResultSize)
				require.Equal(t, job.NodeReady, n.State)
			}
		}
		info, err := s.Get(ctx, "rs@a")
		require.NoError(t, err)
		require.Equal(t, job.StateReady, info.State)
		require.True(t, info.Expires.IsZero())

		// j runs again beside a (one_success: c succeeded): its parents' results are c's.
		claimed, err := s.Claim(ctx, id, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, claimed, 2)
		parents, err := s.ParentResults(ctx, "rs@j")
		require.NoError(t, err)
		require.Equal(t, map[string][]byte{"c": []byte("c-1")}, parents)
		var fs []shard.Finish
		for _, run := range claimed {
			_, n, _ := job.SplitNodeJobID(run.JobID)
			fs = append(fs, shard.Finish{Member: run.Member, Token: run.Token, Outcome: shard.Succeeded, Result: []byte(n + "-2")})
		}
		errs, err := s.FinishRuns(ctx, id, fs)
		require.NoError(t, err)
		for _, e := range errs {
			require.NoError(t, e)
		}
		w, err = s.Workflow(ctx, "rs")
		require.NoError(t, err)
		require.Equal(t, job.WorkflowSucceeded, w.State)
		res, ok, err := s.NodeResult(ctx, "rs", "a")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "a-2", string(res))
		runs, err = s.Runs(ctx, "rs@a")
		require.NoError(t, err)
		require.Len(t, runs, 2)
		require.Equal(t, "a-2", string(runs[0].Result), "the new run, with its result")
		require.Equal(t, old, strconv.FormatInt(runs[1].Due.UnixMilli(), 10))
		require.Empty(t, runs[1].Result)
	})
}

// A scheduled workflow's definition hash (wfd:) lives while the definition has running
// or buffered instances, and goes with the last one: deleting the definition leaves its
// instances running (the buffered one starts when the running one ends) and their ends
// make no hash again; a cancel or retry of an instance of the deleted definition keeps
// its bookkeeping only while it runs. Deleting a definition removes an empty hash left by
// an earlier version.
func TestWorkflow_DeletedDefinitionLeavesNoHash(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		c := b.Client(t)
		dk := s.Keys().WorkflowDefinition(0, "gone")
		exists := func(key string) bool {
			n, err := c.Do(ctx, c.B().Exists().Key(key).Build()).AsInt64()
			require.NoError(t, err)
			return n == 1
		}
		first, second, payload := heldInstances(t, s, "gone")
		require.NoError(t, s.Delete(ctx, "gone"))
		_, err := s.Get(ctx, "gone")
		require.ErrorIs(t, err, shard.ErrNotFound)
		require.Equal(t, []string{"," + first.ID + ",", second.ID}, hmget(t, c, dk, "act", "bf"), "kept for the instances")

		r := &wfRunner{t: t, s: s, wf: first.ID}
		require.Equal(t, 1, r.step(ctx))
		require.Equal(t, 1, r.step(ctx))
		w, err := s.Workflow(ctx, first.ID)
		require.NoError(t, err)
		require.Equal(t, job.WorkflowSucceeded, w.State)
		w, err = s.Workflow(ctx, second.ID)
		require.NoError(t, err)
		require.False(t, w.Held, "the buffered instance starts when the running one ends")
		require.Equal(t, []string{"," + second.ID + ",", ""}, hmget(t, c, dk, "act", "bf"))
		r = &wfRunner{t: t, s: s, wf: second.ID}
		require.Equal(t, job.WorkflowSucceeded, r.run(ctx).State)
		require.False(t, exists(dk), "the last instance's end deletes it")

		// An instance started after the delete (its definition's run was under way), then
		// cancelled and retried.
		third, err := s.StartInstance(ctx, "gone", heldT0.Add(48*time.Hour), payload)
		require.NoError(t, err)
		require.True(t, third.Created)
		require.True(t, exists(dk))
		_, _, err = s.CancelWorkflow(ctx, third.ID)
		require.NoError(t, err)
		require.False(t, exists(dk), "a cancel ends it as well")
		_, changed, err := s.RetryWorkflow(ctx, third.ID)
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, []string{"," + third.ID + ",", ""}, hmget(t, c, dk, "act", "bf"), "a retried instance runs under its policy")
		r = &wfRunner{t: t, s: s, wf: third.ID}
		require.Equal(t, job.WorkflowSucceeded, r.run(ctx).State)
		require.False(t, exists(dk))

		// A live definition's hash goes too when its instances ended, and comes back with
		// the next.
		payload = reviewDef(t, s, "live", job.OverlapSkip)
		live, err := s.StartInstance(ctx, "live", heldT0, payload)
		require.NoError(t, err)
		r = &wfRunner{t: t, s: s, wf: live.ID}
		require.Equal(t, job.WorkflowSucceeded, r.run(ctx).State)
		require.False(t, exists(s.Keys().WorkflowDefinition(0, "live")))
		next, err := s.StartInstance(ctx, "live", heldT0.Add(24*time.Hour), payload)
		require.NoError(t, err)
		require.True(t, next.Created)
		require.Equal(t, []string{"," + next.ID + ",", ""}, hmget(t, c, s.Keys().WorkflowDefinition(0, "live"), "act", "bf"))

		// An empty hash an earlier version left behind goes with its definition.
		reviewDef(t, s, "old", job.OverlapSkip)
		oldKey := s.Keys().WorkflowDefinition(0, "old")
		require.NoError(t, c.Do(ctx, c.B().Hset().Key(oldKey).FieldValue().FieldValue("act", ",").FieldValue("bf", "").Build()).Error())
		require.NoError(t, s.Delete(ctx, "old"))
		require.False(t, exists(oldKey))
	})
}

// hmget returns the fields of hash key, "" for a missing one.
func hmget(t *testing.T, c rueidis.Client, key string, fields ...string) []string {
	t.Helper()
	vs, err := c.Do(context.Background(), c.B().Hmget().Key(key).Field(fields...).Build()).ToArray()
	require.NoError(t, err)
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i], _ = v.ToString()
	}
	return out
}

// SettleDefinitions deletes a definition's hash that is left with no instance (one it
// listed had ended), as the scripts that end instances do.
func TestSettleDefinitions_DeletesAnEmptyHash(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		c := b.Client(t)
		payload := reviewDef(t, s, "st", job.OverlapBufferOne)
		t0 := time.Date(2030, 1, 1, 3, 0, 0, 0, time.UTC)
		ended, err := s.StartInstance(ctx, "st", t0, payload)
		require.NoError(t, err)
		r := &wfRunner{t: t, s: s, wf: ended.ID}
		require.Equal(t, job.WorkflowSucceeded, r.run(ctx).State)
		// As a restore leaves it when an instance it joined ended before the settling.
		dk := s.Keys().WorkflowDefinition(0, "st")
		require.NoError(t, c.Do(ctx, c.B().Hset().Key(dk).FieldValue().FieldValue("act", ","+ended.ID+",").FieldValue("bf", "").Build()).Error())
		started, err := s.SettleDefinitions(ctx, 0, []string{"st"})
		require.NoError(t, err)
		require.Zero(t, started)
		n, err := c.Do(ctx, c.B().Exists().Key(dk).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

// listAll follows a workflow listing's cursors to its end and returns the ids, the
// pages, the pages that were empty while Next was not, and the Redis primary each
// page's Next names. Each page is sorted by id and holds only ids with f.Prefix.
func listAll(t *testing.T, s *shard.Store, f shard.WorkflowFilter) (ids []string, pages, emptyWithNext int, nodes []string) {
	t.Helper()
	for {
		p, err := s.ListWorkflows(context.Background(), f)
		require.NoError(t, err)
		pages++
		require.True(t, sort.SliceIsSorted(p.Workflows, func(a, b int) bool { return p.Workflows[a].ID < p.Workflows[b].ID }))
		for _, w := range p.Workflows {
			require.True(t, strings.HasPrefix(w.ID, f.Prefix), "%s listed for prefix %q", w.ID, f.Prefix)
			ids = append(ids, w.ID)
		}
		if p.Next == "" {
			slices.Sort(ids)
			return slices.Compact(ids), pages, emptyWithNext, nodes
		}
		if len(p.Workflows) == 0 {
			emptyWithNext++
		}
		// A cursor is "<primary address>|<SCAN cursor>", base64 (encodeListCursor).
		raw, err := base64.RawURLEncoding.DecodeString(p.Next)
		require.NoError(t, err)
		nodes = append(nodes, string(raw[:bytes.LastIndexByte(raw, '|')]))
		require.Less(t, pages, 10000, "the listing does not end")
		f.Cursor = p.Next
	}
}

// GET /v1/workflows?prefix= in the store: `<def>@` lists a definition's instances, which
// live on its shard (shard.Of routes an id by what precedes its first '@'), running, held
// and ended alike, and whether or not the run that started them has ended; with '@' the
// listing scans only the primary that holds that shard (a Cluster's other masters never
// see it). Paging keeps its rules with the filter: Next is empty only once the listing is
// complete, and a page may be empty while it is not (each page does a bounded number of
// SCAN calls): following the cursors finds every match, whatever the limit.
func TestWorkflow_ListByPrefix(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		const shards = 16
		s := open(t, b, shard.Config{Shards: shards})
		t0 := time.Date(2030, 1, 1, 3, 0, 0, 0, time.UTC)
		day := 24 * time.Hour
		want := map[string][]string{} // prefix → ids
		defs := []string{"nightly", "nightly-x", "hourly", "daily", "weekly", "monthly"}
		for i, def := range defs {
			payload := reviewDef(t, s, def, job.OverlapAllow)
			for k := range 2 + i%3 {
				r, err := s.StartInstance(ctx, def, t0.Add(time.Duration(k)*day), payload)
				require.NoError(t, err)
				require.True(t, r.Created)
				require.Equal(t, shard.Of(def, shards), shard.Of(r.ID, shards), "routed by what precedes '@'")
				require.Equal(t, s.ShardOf(def), r.Shard)
				want[def+"@"] = append(want[def+"@"], r.ID)
			}
		}
		payload := reviewDef(t, s, "buf", job.OverlapBufferOne)
		first, err := s.StartInstance(ctx, "buf", t0, payload)
		require.NoError(t, err)
		held, err := s.StartInstance(ctx, "buf", t0.Add(day), payload)
		require.NoError(t, err)
		require.True(t, held.Held)
		for _, id := range []string{"nightlyz", "nightly-report"} {
			_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: id, Jobs: []job.Node{node("a")}})
			require.NoError(t, err)
		}
		cancelled := want["nightly@"][1]
		_, _, err = s.CancelWorkflow(ctx, cancelled)
		require.NoError(t, err)
		// Other keys on nightly's shard, more than one page scans: its listing takes pages.
		sh := s.ShardOf("nightly")
		var sets rueidis.Commands
		for i := range 20000 {
			sets = append(sets, s.Client().B().Set().Key(s.Keys().Prefix(sh)+"decoy:"+strconv.Itoa(i)).Value("x").Build())
		}
		for _, r := range s.Client().DoMulti(ctx, sets...) {
			require.NoError(t, r.Error())
		}
		real := b.Name != redistest.Miniredis // miniredis answers a SCAN with every key at once

		for _, def := range append(defs, "buf") {
			ids, _, _, nodes := listAll(t, s, shard.WorkflowFilter{Prefix: def + "@"})
			if def == "buf" {
				require.Equal(t, []string{first.ID, held.ID}, ids)
			} else {
				require.ElementsMatch(t, want[def+"@"], ids, def)
			}
			for _, n := range nodes {
				require.Equal(t, nodes[0], n, "one primary, the shard's")
			}
		}
		// A small limit: more pages, the same workflows. (Not one page per workflow: a
		// SCAN batch is never split, and one may hold two of them.)
		ids, pages, _, _ := listAll(t, s, shard.WorkflowFilter{Prefix: "nightly@", Limit: 1})
		require.ElementsMatch(t, want["nightly@"], ids)
		if real {
			require.Greater(t, pages, 1)
		}
		// A prefix nothing matches, on a shard of 20,000 keys: empty pages, each with a
		// cursor, until the listing ends; every cursor names the primary of the shard.
		ids, pages, empty, nodes := listAll(t, s, shard.WorkflowFilter{Prefix: "nightly@9"})
		require.Empty(t, ids)
		if real {
			require.Greater(t, pages, 1)
			require.Equal(t, pages-1, empty)
			n := s.Client().Nodes()[nodes[0]]
			exists, err := n.Do(ctx, n.B().Exists().Key(s.Keys().Workflow(sh, cancelled)).Build()).AsInt64()
			require.NoError(t, err, "the primary of the cursors holds nightly's instances")
			require.EqualValues(t, 1, exists)
		}
		// Without '@': every shard. The definitions are jobs, not listed here.
		ids, _, _, _ = listAll(t, s, shard.WorkflowFilter{Prefix: "nightly"})
		require.ElementsMatch(t, slices.Concat(want["nightly@"], want["nightly-x@"], []string{"nightly-report", "nightlyz"}), ids)
		ids, _, _, _ = listAll(t, s, shard.WorkflowFilter{Prefix: "nightly-"})
		require.ElementsMatch(t, append(want["nightly-x@"], "nightly-report"), ids)
		// With a state.
		ids, _, _, _ = listAll(t, s, shard.WorkflowFilter{Prefix: "nightly@", State: job.WorkflowCancelled})
		require.Equal(t, []string{cancelled}, ids)
		ids, _, _, _ = listAll(t, s, shard.WorkflowFilter{Prefix: "buf@", State: job.WorkflowRunning})
		require.Equal(t, []string{first.ID, held.ID}, ids)
		// What a page says of each: held, nodes, created.
		p, err := s.ListWorkflows(ctx, shard.WorkflowFilter{Prefix: held.ID})
		for p.Next != "" && len(p.Workflows) == 0 {
			require.NoError(t, err)
			p, err = s.ListWorkflows(ctx, shard.WorkflowFilter{Prefix: held.ID, Cursor: p.Next})
		}
		require.NoError(t, err)
		require.Len(t, p.Workflows, 1)
		w := p.Workflows[0]
		require.True(t, w.Held)
		require.Equal(t, job.WorkflowRunning, w.State)
		require.Equal(t, 2, w.Nodes)
		require.Equal(t, 2, w.Left)
		require.False(t, w.CreatedAt.IsZero())

		// What no workflow id could start with is refused, naming the prefix.
		for _, bad := range []string{"@", "a@b", "a@1@2", "a b", "x*", strings.Repeat("x", 65)} {
			_, err := s.ListWorkflows(ctx, shard.WorkflowFilter{Prefix: bad})
			var fe *job.FieldError
			require.ErrorAs(t, err, &fe, bad)
			require.Equal(t, "prefix", fe.Field)
		}
	})
}

// A released node's job is packed, as a one-time job due now is (a root at once, any
// other when its parent ends), and reads as its job hash would at each step; a node
// released again by a retry keeps its job hash, with its history. With NoPack every node
// is a job hash.
func TestWorkflow_ReleasedNodesArePacked(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		c := b.Client(t)
		for _, noPack := range []bool{false, true} {
			s := open(t, b, shard.Config{NoPack: noPack})
			id := s.ShardOf("chain")
			packed := func(node string) bool {
				t.Helper()
				jobID := job.NodeJobID("chain", node)
				n, err := c.Do(ctx, c.B().Hexists().Key(s.Keys().PackedJobs(id)).Field(jobID).Build()).AsBool()
				require.NoError(t, err)
				h, err := c.Do(ctx, c.B().Exists().Key(s.Keys().Job(id, jobID)).Build()).AsInt64()
				require.NoError(t, err)
				require.NotEqual(t, n, h == 1, "%s is in one form exactly", node)
				return n
			}
			state := func(node string) job.State {
				t.Helper()
				info, err := s.Get(ctx, job.NodeJobID("chain", node))
				require.NoError(t, err)
				return info.State
			}
			_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "chain", Jobs: []job.Node{node("a"), node("b", "a")}})
			require.NoError(t, err)
			require.Equal(t, !noPack, packed("a"), "NoPack %v", noPack)
			require.Equal(t, !noPack, packed("b"), "a waiting node is packed unless NoPack")
			require.Equal(t, job.StateReady, state("a"))
			require.Equal(t, job.StateWaiting, state("b"))

			r := &wfRunner{t: t, s: s, wf: "chain", outcome: func(n string) shard.Outcome {
				if n == "b" {
					return shard.Failed
				}
				return shard.Succeeded
			}}
			cl, err := s.Claim(ctx, id, "default", 10, "w", "n")
			require.NoError(t, err)
			require.Len(t, cl, 1)
			w, err := s.Workflow(ctx, "chain")
			require.NoError(t, err)
			require.Equal(t, job.NodeRunning, nodeStates(w)["a"])
			require.Equal(t, job.StateRunning, state("a"))
			finish(t, s, cl[0], shard.Succeeded)
			require.Equal(t, job.StateCompleted, state("a"))
			require.Equal(t, !noPack, packed("b"), "released: packed unless NoPack")
			require.Equal(t, job.StateReady, state("b"))

			w = r.run(ctx) // b fails: a job hash from then on
			require.Equal(t, job.WorkflowFailed, w.State)
			require.False(t, packed("b"))
			_, changed, err := s.RetryWorkflow(ctx, "chain")
			require.NoError(t, err)
			require.True(t, changed)
			require.False(t, packed("b"), "a retried node keeps its job hash")
			runs, err := s.Runs(ctx, job.NodeJobID("chain", "b"))
			require.NoError(t, err)
			require.NotEmpty(t, runs, "with its history")
			r.outcome = nil
			w = r.run(ctx)
			require.Equal(t, job.WorkflowSucceeded, w.State)
			require.Equal(t, job.StateCompleted, state("b"))
		}
	})
}

// A node's payload, split into chunks in its job hash, comes back whole and in order once
// its job is packed at its release, though a value over 64 bytes (here its type) makes
// the hash a hash table, whose fields come in no set order.
func TestWorkflow_ReleasedNodeKeepsItsPayload(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		var payload []byte
		for c := range 8 {
			payload = append(payload, bytes.Repeat([]byte{byte('a' + c)}, 64)...)
		}
		long := strings.Repeat("t", 100)
		child := node("b", "a")
		child.Type, child.Payload = long, payload
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "pl", Jobs: []job.Node{node("a"), child}})
		require.NoError(t, err)
		id := s.ShardOf("pl")
		c, err := s.Claim(ctx, id, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, c, 1)
		finish(t, s, c[0], shard.Succeeded)

		info, err := s.Get(ctx, "pl@b")
		require.NoError(t, err)
		require.Equal(t, job.StateReady, info.State)
		require.Equal(t, string(payload), string(info.Payload))
		c, err = s.Claim(ctx, id, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, c, 1)
		require.Equal(t, long, c[0].Type)
		require.Equal(t, string(payload), string(c[0].Payload))
	})
}

// One id names one workflow: a scheduled definition refuses the id of a workflow without
// a schedule, and the other way round, in the script that would store the second (no
// read before it to race with). A plain job of the same id is no workflow, and stops
// neither.
func TestWorkflow_OneIDOneKind(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		sched := func(id string) *job.Workflow {
			return &job.Workflow{ID: id, Jobs: []job.Node{node("a")}, Schedule: &job.Schedule{Cron: "0 3 * * *"}}
		}
		plain := func(id string) *job.Workflow { return &job.Workflow{ID: id, Jobs: []job.Node{node("a")}} }

		r, err := s.CreateWorkflow(ctx, sched("nightly"))
		require.NoError(t, err)
		require.True(t, r.Created)
		_, err = s.CreateWorkflow(ctx, plain("nightly"))
		require.ErrorIs(t, err, shard.ErrWorkflowIDTaken)
		_, err = s.Workflow(ctx, "nightly")
		require.ErrorIs(t, err, shard.ErrWorkflowNotFound, "nothing stored")

		r, err = s.CreateWorkflow(ctx, plain("etl"))
		require.NoError(t, err)
		require.True(t, r.Created)
		_, err = s.CreateWorkflow(ctx, sched("etl"))
		require.ErrorIs(t, err, shard.ErrWorkflowIDTaken)
		_, err = s.Get(ctx, "etl")
		require.ErrorIs(t, err, shard.ErrNotFound, "no definition stored")

		_, err = s.Create(ctx, []*job.Job{{ID: "report", Type: "t", Schedule: job.Schedule{Cron: "0 3 * * *"}}})
		require.NoError(t, err)
		r, err = s.CreateWorkflow(ctx, plain("report"))
		require.NoError(t, err)
		require.True(t, r.Created)
	})
}

// Many nodes of one workflow end in one call (a fan-in of 1,200 parents, some failed, some
// succeeded, acked together: more than one read's worth of fields): each join decides as
// it would have parent by parent, and the counts come out right.
func TestWorkflow_ManyNodesEndInOneCall(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{})
		const n = 1200
		var nodes []job.Node
		var parents []string
		for i := range n {
			p := "p" + strconv.Itoa(i)
			parents = append(parents, p)
			nodes = append(nodes, node(p))
		}
		nodes = append(nodes,
			ruled(node("done", parents...), job.RuleAllDone),
			ruled(node("strict", parents...), job.RuleAllSuccess),
			ruled(node("any", parents...), job.RuleOneSuccess),
			ruled(node("alarm", parents...), job.RuleOneFailed),
			node("after", "strict"))
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "fanin", Jobs: nodes})
		require.NoError(t, err)
		id := s.ShardOf("fanin")
		var fs []shard.Finish
		for len(fs) < n {
			c, err := s.Claim(ctx, id, "default", 1000, "w", "n")
			require.NoError(t, err)
			require.NotEmpty(t, c)
			for _, r := range c {
				f := shard.Finish{Member: r.Member, Token: r.Token, Outcome: shard.Succeeded}
				if len(fs)%7 == 3 {
					f.Outcome, f.Error = shard.Failed, "no"
				}
				fs = append(fs, f)
			}
		}
		errs, err := s.FinishRuns(ctx, id, fs)
		require.NoError(t, err)
		for _, e := range errs {
			require.NoError(t, e)
		}
		w, err := s.Workflow(ctx, "fanin")
		require.NoError(t, err)
		st := nodeStates(w)
		require.Equal(t, job.NodeReady, st["done"])
		require.Equal(t, job.NodeUpstreamFailed, st["strict"])
		require.Equal(t, job.NodeUpstreamFailed, st["after"], "down the graph in the same call")
		require.Equal(t, job.NodeReady, st["any"])
		require.Equal(t, job.NodeReady, st["alarm"])
		failed := 0
		for i := range n {
			if st["p"+strconv.Itoa(i)] == job.NodeFailed {
				failed++
			}
		}
		require.Equal(t, (n+3)/7, failed)

		r := &wfRunner{t: t, s: s, wf: "fanin"}
		w = r.run(ctx)
		require.Equal(t, job.WorkflowFailed, w.State)
		require.ElementsMatch(t, []string{"done", "any", "alarm"}, r.ran)
	})
}

// An entry that fails a finish_runs call (here a job key of the wrong type) still leaves
// the entries before it whole: their workflows moved (the child of an acked root is
// released), as when each entry moved its workflow at once; then the call fails.
func TestWorkflow_FailedCallStillMovesTheEntriesBefore(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		c := b.Client(t)
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "w", Jobs: []job.Node{node("a"), node("b", "a")}})
		require.NoError(t, err)
		require.NoError(t, c.Do(ctx, c.B().Set().Key(s.Keys().Job(0, "bogus")).Value("x").Build()).Error())
		cl, err := s.Claim(ctx, 0, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, cl, 1)
		_, err = s.FinishRuns(ctx, 0, []shard.Finish{
			{Member: cl[0].Member, Token: cl[0].Token, Outcome: shard.Succeeded},
			{Member: shard.RunMember("bogus", 1), Token: "t", Outcome: shard.Failed, Error: "no"},
		})
		require.Error(t, err)
		w, err := s.Workflow(ctx, "w")
		require.NoError(t, err)
		require.Equal(t, map[string]job.NodeState{"a": job.NodeSucceeded, "b": job.NodeReady}, nodeStates(w))
		next, err := s.Claim(ctx, 0, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, next, 1, "b's run is ready")
		require.True(t, strings.HasPrefix(next[0].Member, job.NodeJobID("w", "b")+":"), next[0].Member)
	})
}

// A node that waits is packed without a due time: it reads and lists as a waiting job,
// and a change to it (a cancel of its job) or its end without a run (upstream_failed)
// makes it the job hash it stands for first.
func TestWorkflow_WaitingPackedNode(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		c := b.Client(t)
		s := open(t, b, shard.Config{Shards: 1})
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "w", Jobs: []job.Node{node("a"), node("b", "a"), node("c", "b")}})
		require.NoError(t, err)
		packed := func(node string) bool {
			t.Helper()
			n, err := c.Do(ctx, c.B().Hexists().Key(s.Keys().PackedJobs(0)).Field(job.NodeJobID("w", node)).Build()).AsBool()
			require.NoError(t, err)
			return n
		}
		require.True(t, packed("b"))
		require.True(t, packed("c"))
		info, err := s.Get(ctx, job.NodeJobID("w", "b"))
		require.NoError(t, err)
		require.Equal(t, job.StateWaiting, info.State)
		require.Equal(t, "t", info.Job.Type)
		page, err := s.List(ctx, shard.ListFilter{State: job.StateWaiting})
		require.NoError(t, err)
		var listed []string
		for _, j := range page.Jobs {
			listed = append(listed, j.Job.ID)
		}
		require.ElementsMatch(t, []string{job.NodeJobID("w", "b"), job.NodeJobID("w", "c")}, listed)

		st, changed, err := s.Cancel(ctx, job.NodeJobID("w", "b"))
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, job.StateCancelled, st)
		require.False(t, packed("b"), "cancelled: a job hash")
		require.False(t, packed("c"), "upstream_failed: a job hash")
		runs, err := s.Runs(ctx, job.NodeJobID("w", "c"))
		require.NoError(t, err)
		require.Len(t, runs, 1)
		require.Contains(t, runs[0].Error, "upstream failed")
		info, err = s.Get(ctx, job.NodeJobID("w", "c"))
		require.NoError(t, err)
		require.Equal(t, job.StateCancelled, info.State)

		r := &wfRunner{t: t, s: s, wf: "w"}
		w := r.run(ctx)
		require.Equal(t, []string{"a"}, r.ran)
		require.Equal(t, job.WorkflowFailed, w.State)
		require.Equal(t, map[string]job.NodeState{"a": job.NodeSucceeded, "b": job.NodeCancelled, "c": job.NodeUpstreamFailed}, nodeStates(w))
	})
}

// A workflow whose move fails (a bug: here its hash is no hash) before the others of the
// call: the others are still moved (their nodes' runs are filed as ended by the call, so
// a workflow left unmoved would wait forever for nodes that will not end again), and
// their children are released.
func TestWorkflow_FailedWorkflowStillMovesTheOthersAfterIt(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		for _, noPack := range []bool{false, true} {
			t.Run(fmt.Sprintf("NoPack=%v", noPack), func(t *testing.T) { failedWorkflowAmongOthers(t, b, noPack) })
		}
	})
}

func failedWorkflowAmongOthers(t *testing.T, b redistest.Backend, noPack bool) {
	ctx := context.Background()
	s := open(t, b, shard.Config{Shards: 1, NoPack: noPack})
	c := b.Client(t)
	for _, wf := range []string{"w1", "w2", "w3"} {
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: wf, Jobs: []job.Node{node("a"), node("b", "a")}})
		require.NoError(t, err)
	}
	cl, err := s.Claim(ctx, 0, "default", 10, "w", "n")
	require.NoError(t, err)
	require.Len(t, cl, 3)
	slices.SortFunc(cl, func(x, y shard.Claimed) int { return strings.Compare(x.Member, y.Member) })
	key := s.Keys().Prefix(0) + "wf:w2"
	require.NoError(t, c.Do(ctx, c.B().Del().Key(key).Build()).Error())
	require.NoError(t, c.Do(ctx, c.B().Set().Key(key).Value("x").Build()).Error())
	var fs []shard.Finish
	for _, r := range cl {
		fs = append(fs, shard.Finish{Member: r.Member, Token: r.Token, Outcome: shard.Succeeded})
	}
	_, err = s.FinishRuns(ctx, 0, fs)
	require.Error(t, err)
	for _, wf := range []string{"w1", "w3"} {
		w, err := s.Workflow(ctx, wf)
		require.NoError(t, err)
		require.Equal(t, map[string]job.NodeState{"a": job.NodeSucceeded, "b": job.NodeReady}, nodeStates(w), wf)
	}
	next, err := s.Claim(ctx, 0, "default", 10, "w", "n")
	require.NoError(t, err)
	var got []string
	for _, r := range next {
		got = append(got, r.JobID)
	}
	require.ElementsMatch(t, []string{job.NodeJobID("w1", "b"), job.NodeJobID("w3", "b")}, got)
}

// A workflow created again under its id after the first one's hash expired, by a store
// with packing off: a packed job left by the first (it may outlive the workflow hash by
// up to an expiry bucket) is deleted, so the new node's run is its job hash's, with its
// own payload.
func TestWorkflow_CreatedAgainWithoutPacking(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		c := b.Client(t)
		ns := redistest.Namespace(t, b)
		packed, err := shard.Open(ctx, c, shard.Config{Namespace: ns, Shards: 1})
		require.NoError(t, err)
		first := node("a")
		first.Payload = []byte("first")
		_, err = packed.CreateWorkflow(ctx, &job.Workflow{ID: "w", Jobs: []job.Node{first}})
		require.NoError(t, err)
		require.Equal(t, job.WorkflowSucceeded, (&wfRunner{t: t, s: packed, wf: "w"}).run(ctx).State)
		require.NoError(t, c.Do(ctx, c.B().Del().Key(packed.Keys().Prefix(0)+"wf:w").Build()).Error())

		s, err := shard.Open(ctx, c, shard.Config{Namespace: ns, Shards: 1, NoPack: true})
		require.NoError(t, err)
		second := node("a")
		second.Payload = []byte("second")
		_, err = s.CreateWorkflow(ctx, &job.Workflow{ID: "w", Jobs: []job.Node{second}})
		require.NoError(t, err)
		cl, err := s.Claim(ctx, 0, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, cl, 1)
		require.Equal(t, []byte("second"), cl[0].Payload)
		finish(t, s, cl[0], shard.Succeeded)
		info, err := s.Get(ctx, job.NodeJobID("w", "a"))
		require.NoError(t, err)
		require.Equal(t, job.StateCompleted, info.State)
		w, err := s.Workflow(ctx, "w")
		require.NoError(t, err)
		require.Equal(t, job.WorkflowSucceeded, w.State)
	})
}

// A workflow's hash never expires before its nodes' jobs: a node whose run was cancelled
// while it ran (its workflow cancelled) has its job's expiry set again when that run's
// worker reports, after the workflow ended; the workflow's expiry moves with it. Before
// the fix, the hash expired first, for as long as the worker took to report.
func TestWorkflow_HashOutlivesACancelledNodesLateReport(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1, Retention: time.Hour})
		c := b.Client(t)
		for _, o := range []shard.Outcome{shard.Succeeded, shard.Failed} {
			wf := "late-" + string(o)
			_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: wf, Jobs: []job.Node{node("a"), node("b", "a")}})
			require.NoError(t, err)
			runs, err := s.Claim(ctx, 0, "default", 1, "w", "n")
			require.NoError(t, err)
			require.Len(t, runs, 1)
			_, _, err = s.CancelWorkflow(ctx, wf)
			require.NoError(t, err)
			// The worker reports a while later.
			if b.Mini != nil {
				b.Mini.FastForward(time.Minute)
			} else {
				time.Sleep(20 * time.Millisecond)
			}
			errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: runs[0].Member, Token: runs[0].Token, Outcome: o, Error: "late"}})
			require.NoError(t, err)
			require.NoError(t, errs[0])
			jobAt, wfAt := keyExpireAt(t, c, s.Keys().Job(0, wf+"@a")), keyExpireAt(t, c, s.Keys().Workflow(0, wf))
			require.Positive(t, jobAt)
			require.GreaterOrEqual(t, wfAt, jobAt, "the workflow hash expires after its node's job")
			w, err := s.Workflow(ctx, wf)
			require.NoError(t, err)
			require.Equal(t, job.WorkflowCancelled, w.State)
		}
	})
}

// A held instance that ends before it started, its nodes' jobs cancelled one by one
// (cancelling a node's job is allowed), is held no more: neither it nor a listing shows
// an ended workflow as held, and its definition's next instance starts once the
// running one ended. Before the fix, only cancel_workflow dropped 'hold'.
func TestWorkflow_HeldInstanceEndedByItsNodesJobsIsHeldNoMore(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		first, second, payload := heldInstances(t, s, "hn")
		_, changed, err := s.Cancel(ctx, second.ID+"@a")
		require.NoError(t, err)
		require.True(t, changed)
		w, err := s.Workflow(ctx, second.ID)
		require.NoError(t, err)
		require.Equal(t, job.WorkflowFailed, w.State)
		require.False(t, w.Held, "an ended instance is held no more")
		page, err := s.ListWorkflows(ctx, shard.WorkflowFilter{Prefix: "hn@"})
		require.NoError(t, err)
		for _, l := range page.Workflows {
			require.False(t, l.Held, l.ID)
		}
		r := &wfRunner{t: t, s: s, wf: first.ID}
		require.Equal(t, job.WorkflowSucceeded, r.run(ctx).State)
		third, err := s.StartInstance(ctx, "hn", heldT0.Add(48*time.Hour), payload)
		require.NoError(t, err)
		require.True(t, third.Created)
		require.False(t, third.Held)
	})
}

// A buffered (buffer_one) instance runs no node while it is held, even one whose rule is
// met before it starts: cancelling the held instance's root job decides its one_failed
// child, which waits with its rule met and is released with the roots when the running
// instance ends, not beside it.
func TestWorkflow_HeldInstanceRunsNoNodeUntilItStarts(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "hr", Jobs: []job.Node{node("a"), node("c", "a"),
			ruled(node("h", "a"), job.RuleOneFailed)}, Schedule: &job.Schedule{Cron: "0 3 * * *"}, Overlap: job.OverlapBufferOne})
		require.NoError(t, err)
		info, err := s.Get(ctx, "hr")
		require.NoError(t, err)
		first, err := s.StartInstance(ctx, "hr", heldT0, info.Payload)
		require.NoError(t, err)
		second, err := s.StartInstance(ctx, "hr", heldT0.Add(24*time.Hour), info.Payload)
		require.NoError(t, err)
		require.True(t, second.Held)

		_, changed, err := s.Cancel(ctx, second.ID+"@a")
		require.NoError(t, err)
		require.True(t, changed)
		w, err := s.Workflow(ctx, second.ID)
		require.NoError(t, err)
		require.True(t, w.Held)
		require.Equal(t, map[string]job.NodeState{"a": job.NodeCancelled, "c": job.NodeUpstreamFailed, "h": job.NodeWaiting},
			nodeStates(w), "a held instance's node whose rule is met waits")

		// Each step claims every ready run: the held instance's h runs only in the step
		// after the running instance's last node (c; its h was skipped) ended.
		r := &wfRunner{t: t, s: s, wf: first.ID, anyWF: true}
		require.Equal(t, job.WorkflowSucceeded, r.run(ctx).State)
		require.Equal(t, []string{"a", "c", "h"}, r.ran)
		w, err = s.Workflow(ctx, second.ID)
		require.NoError(t, err)
		require.False(t, w.Held)
		require.Equal(t, job.WorkflowFailed, w.State)
		require.Equal(t, map[string]job.NodeState{"a": job.NodeCancelled, "c": job.NodeUpstreamFailed, "h": job.NodeSucceeded},
			nodeStates(w))
	})
}

// A failed workflow's hash stays while a node's dead run does (a dead job has no expiry:
// the dead-letter set is the user's to clear), so "retry the workflow", which a requeue
// of the node's run says to do, still finds it; deleting the dead run gives the job its
// retention and the workflow at least as much. Before, the workflow hash expired after
// its retention and left the dead node's job, whose requeue named a workflow that was
// gone.
func TestWorkflow_HashStaysWhileANodesRunIsDead(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1, Retention: time.Hour})
		c := b.Client(t)
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "dn", Jobs: []job.Node{node("a"), node("x"), node("b", "a")}})
		require.NoError(t, err)
		r := &wfRunner{t: t, s: s, wf: "dn", outcome: func(n string) shard.Outcome {
			if n == "a" || n == "x" {
				return shard.Failed
			}
			return shard.Succeeded
		}}
		require.Equal(t, job.WorkflowFailed, r.run(ctx).State)
		wk := s.Keys().Workflow(0, "dn")
		require.Equal(t, int64(-1), keyTTL(t, c, wk), "no expiry while a node's run is dead")

		var ne *shard.NodeError
		require.ErrorAs(t, s.RequeueDead(ctx, deadMember(t, s, "dn@a")), &ne)
		require.NoError(t, s.DeleteDead(ctx, deadMember(t, s, "dn@a")))
		require.Equal(t, int64(-1), keyTTL(t, c, wk), "x's run is still dead")
		require.NoError(t, s.DeleteDead(ctx, deadMember(t, s, "dn@x")))
		// When each expires (not what is left of it: the two reads are apart).
		jobAt, wfAt := keyExpireAt(t, c, s.Keys().Job(0, "dn@x")), keyExpireAt(t, c, wk)
		require.Positive(t, jobAt)
		require.GreaterOrEqual(t, wfAt, jobAt, "the workflow outlives its nodes' jobs")
		w, err := s.Workflow(ctx, "dn")
		require.NoError(t, err)
		require.Equal(t, job.WorkflowFailed, w.State)
	})
}

// deadMember returns the member of job id's run in the dead-letter set.
func deadMember(t *testing.T, s *shard.Store, id string) string {
	t.Helper()
	runs, _, err := s.Dead(context.Background(), "", 100, "")
	require.NoError(t, err)
	for _, r := range runs {
		if r.JobID == id {
			return r.Member
		}
	}
	t.Fatalf("no dead run of %s", id)
	return ""
}

// A node whose run was cancelled while it ran (its workflow cancelled, or its job) shows
// the attempt it made, as a node that ended otherwise does. It showed 0.
func TestWorkflow_CancelledRunningNodeKeepsItsAttempts(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		for _, byJob := range []bool{false, true} {
			wf := fmt.Sprintf("ca-%v", byJob)
			_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: wf, Jobs: []job.Node{node("a"), node("b", "a")}})
			require.NoError(t, err)
			runs, err := s.Claim(ctx, 0, "default", 10, "w", "n")
			require.NoError(t, err)
			require.Len(t, runs, 1)
			if byJob {
				_, _, err = s.Cancel(ctx, wf+"@a")
			} else {
				_, _, err = s.CancelWorkflow(ctx, wf)
			}
			require.NoError(t, err)
			w, err := s.Workflow(ctx, wf)
			require.NoError(t, err)
			require.Equal(t, job.NodeCancelled, w.Nodes[0].State, wf)
			require.Equal(t, 1, w.Nodes[0].Attempts, wf)
		}
	})
}

// A workflow cancelled while one of its nodes' runs is dead (the node failed, another
// branch still ran) keeps its hash as a failed one does: the dead job never expires by
// itself, and its requeue says to retry the workflow, which must still be there. Before,
// only a failed workflow was kept: a cancelled one expired after its retention and left
// the dead node's job.
func TestWorkflow_CancelledHashStaysWhileANodesRunIsDead(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1, Retention: time.Hour})
		c := b.Client(t)
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "cd", Jobs: []job.Node{node("a"), node("x"), node("b", "x")}})
		require.NoError(t, err)
		runs, err := s.Claim(ctx, 0, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, runs, 2)
		for _, run := range runs {
			if run.JobID == "cd@a" {
				errs, err := s.FinishRuns(ctx, 0, []shard.Finish{{Member: run.Member, Token: run.Token, Outcome: shard.Failed, Error: "no"}})
				require.NoError(t, err)
				require.NoError(t, errs[0])
			}
		}
		_, _, err = s.CancelWorkflow(ctx, "cd")
		require.NoError(t, err)
		w, err := s.Workflow(ctx, "cd")
		require.NoError(t, err)
		require.Equal(t, job.WorkflowCancelled, w.State)
		wk := s.Keys().Workflow(0, "cd")
		require.Equal(t, int64(-1), keyTTL(t, c, s.Keys().Job(0, "cd@a")), "a dead job has no expiry")
		require.Equal(t, int64(-1), keyTTL(t, c, wk), "no expiry while a node's run is dead")
		require.NoError(t, s.DeleteDead(ctx, deadMember(t, s, "cd@a")))
		require.Positive(t, keyTTL(t, c, wk))
	})
}

// A workflow created before the definition hash ignored order (its 'dh' taken over its
// nodes in their normalised order, parents as listed) is still the same definition when
// sent again as it was first sent: a client's retry of a create across an upgrade is
// 200, not a 409 naming no node. The stored hash is written here as that code wrote it.
func TestWorkflow_CreatedBeforeTheOrderFreeHashIsTheSameDefinition(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1, NoPack: true})
		c := b.Client(t)
		def := func() *job.Workflow {
			return &job.Workflow{ID: "old", Jobs: []job.Node{node("extract"), node("transform", "extract"),
				node("load", "transform"), node("report", "load", "extract")}}
		}
		w := def()
		res, err := s.CreateWorkflow(ctx, w)
		require.NoError(t, err)
		require.True(t, res.Created)
		h := xxhash.New()
		for _, n := range w.Jobs {
			dh, err := c.Do(ctx, c.B().Hget().Key(s.Keys().Job(0, "old@"+n.ID)).Field("dh").Build()).ToString()
			require.NoError(t, err)
			for _, f := range []string{n.ID, string(n.Rule), strings.Join(n.DependsOn, ","), dh} {
				_, _ = h.WriteString(f)
				_, _ = h.Write([]byte{0})
			}
		}
		require.NoError(t, c.Do(ctx, c.B().Hset().Key(s.Keys().Workflow(0, "old")).FieldValue().
			FieldValue("dh", strconv.FormatUint(h.Sum64(), 36)).Build()).Error())
		res, err = s.CreateWorkflow(ctx, def())
		require.NoError(t, err)
		require.False(t, res.Created)
		require.False(t, res.Conflict, "the same definition, hashed by the earlier code")
		w = def()
		w.Jobs[2].Job.Payload = []byte(`"other"`)
		res, err = s.CreateWorkflow(ctx, w)
		require.NoError(t, err)
		require.True(t, res.Conflict, "another definition")
	})
}

// Deleting a dead run of a large failed workflow costs a few commands, however many
// nodes it has: a bulk delete of its dead runs (POST /v1/dead:bulk) is no scan of every
// node per run. Each delete read every node's state and the jobs of the failed ones
// until it found one still dead: 4,000 dead nodes took 50 s of Redis time to delete,
// each call blocking it for up to 20 ms.
func TestWorkflow_DeletingADeadNodeRunScansNoNodes(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		if b.Name != redistest.Server {
			t.Skip("counts the server's commands (INFO commandstats)")
		}
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1, Retention: time.Hour})
		c := b.Client(t)
		calls := func() int {
			info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
			require.NoError(t, err)
			n := 0
			for _, line := range strings.Split(info, "\n") {
				if _, rest, ok := strings.Cut(line, ":calls="); ok {
					v, _, _ := strings.Cut(rest, ",")
					k, err := strconv.Atoi(v)
					require.NoError(t, err)
					n += k
				}
			}
			return n
		}
		const n = 300
		var nodes []job.Node
		for i := 0; i < n; i++ {
			nodes = append(nodes, node(fmt.Sprintf("n%03d", i)))
		}
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "dd", Jobs: nodes})
		require.NoError(t, err)
		r := &wfRunner{t: t, s: s, wf: "dd", outcome: func(string) shard.Outcome { return shard.Failed }}
		require.Equal(t, job.WorkflowFailed, r.run(ctx).State)
		wk := s.Keys().Workflow(0, "dd")
		most := 0
		for i := 0; i < n; i++ {
			member := deadMember(t, s, fmt.Sprintf("dd@n%03d", i))
			before := calls()
			require.NoError(t, s.DeleteDead(ctx, member))
			most = max(most, calls()-before-1) // less the INFO
			pttl, err := c.Do(ctx, c.B().Pttl().Key(wk).Build()).AsInt64()
			require.NoError(t, err)
			if i < n-1 {
				require.Equal(t, int64(-1), pttl, "%d of %d dead runs deleted", i+1, n)
			} else {
				require.Positive(t, pttl, "the last dead run deleted")
			}
		}
		require.Less(t, most, 30, "commands of one delete")
	})
}

// keyTTL is key's PTTL: ms left, -1 no expiry, -2 no key.
func keyTTL(t *testing.T, c rueidis.Client, key string) int64 {
	t.Helper()
	v, err := c.Do(context.Background(), c.B().Pttl().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	return v
}

// keyExpireAt is key's PEXPIRETIME: when it expires (Unix ms), -1 never, -2 no key.
func keyExpireAt(t *testing.T, c rueidis.Client, key string) int64 {
	t.Helper()
	v, err := c.Do(context.Background(), c.B().Pexpiretime().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	return v
}

// A scheduled workflow's definition may hold up to 32 MiB (docs/workflows.md, Limits),
// each node's payload up to the job limit: a definition of three nodes of 600 KB each is
// stored, and its instance starts with every node's payload whole. Store.Create
// normalised the definition's job again against the job limit (1 MiB): it was refused,
// with an error naming "payload", a field no workflow request has.
func TestWorkflow_DefinitionOverTheJobLimit(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		big := func(id string, deps ...string) job.Node {
			n := node(id, deps...)
			n.Payload = []byte(`"` + strings.Repeat(id, 600_000) + `"`)
			return n
		}
		w := &job.Workflow{ID: "big", Jobs: []job.Node{big("a"), big("b", "a"), big("c", "a")},
			Schedule: &job.Schedule{Cron: "0 3 * * *"}}
		res, err := s.CreateWorkflow(ctx, w)
		require.NoError(t, err)
		require.True(t, res.Created)
		info, err := s.Get(ctx, "big")
		require.NoError(t, err)
		require.Greater(t, len(info.Payload), 1<<20)
		inst, err := s.StartInstance(ctx, "big", heldT0, info.Payload)
		require.NoError(t, err)
		require.True(t, inst.Created)
		for _, n := range []string{"a", "b", "c"} {
			j, err := s.Get(ctx, inst.ID+"@"+n)
			require.NoError(t, err)
			require.Len(t, j.Payload, 600_002, n)
		}
		// Sent again, it is the same definition.
		w = &job.Workflow{ID: "big", Jobs: []job.Node{big("a"), big("b", "a"), big("c", "a")},
			Schedule: &job.Schedule{Cron: "0 3 * * *"}}
		res, err = s.CreateWorkflow(ctx, w)
		require.NoError(t, err)
		require.False(t, res.Created)
		require.False(t, res.Conflict)
	})
}

// The type "@workflow" is a scheduled workflow's definition's (job.WorkflowType): the
// runs of a job of that type start workflow instances (worker.HandleWorkflows). A job
// created with it through the job API, or a workflow node given it, was stored, and its
// runs started instances that no workflow validation had checked: a 100-byte job id
// made instances whose 114-byte ids the workflow API refuses (over 64), with nodes whose
// job ids the job API refuses (over 128), so that nothing could read or cancel them. It
// is refused, naming the node; an instance of a definition id no definition could have
// is not started.
func TestWorkflow_DefinitionTypeIsReserved(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		payload := []byte(`{"jobs":[{"id":"a","type":"t"}],"overlap":"allow"}`)
		long := strings.Repeat("x", 100)
		rs, err := s.Create(ctx, []*job.Job{{ID: long, Queue: job.WorkflowQueue, Type: job.WorkflowType, Payload: payload,
			Schedule: job.Schedule{Cron: "0 3 * * *"}}})
		require.NoError(t, err)
		var fe *job.FieldError
		require.ErrorAs(t, rs[0].Err, &fe)
		require.Equal(t, "type", fe.Field)
		_, err = s.Get(ctx, long)
		require.ErrorIs(t, err, shard.ErrNotFound)

		n := node("b", "a")
		n.Type, n.Payload = job.WorkflowType, payload
		_, err = s.CreateWorkflow(ctx, &job.Workflow{ID: "nest", Jobs: []job.Node{node("a"), n}})
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "jobs[1].type", fe.Field)
		require.Contains(t, fe.Msg, `node "b"`)

		// A run of such a job stored before (or restored) starts nothing.
		for _, def := range []string{long, "nest@b"} {
			_, err = s.StartInstance(ctx, def, heldT0, payload)
			require.ErrorAs(t, err, &fe, def)
			_, err = s.Workflow(ctx, shard.InstanceID(def, heldT0))
			require.Error(t, err)
		}
	})
}

// A scheduled workflow's definition is a job, which the job API may update: its payload
// is the workflow, checked when the workflow was created; a new one (PATCH
// /v1/jobs/{id} with a payload) replaced the graph unchecked (a cycle, here), and every
// occurrence then failed to start an instance until its run was dead. A changed
// schedule changed the job's but not the one in its payload, which GET
// /v1/workflows/{id} shows as its definition's and a create compares with: sent again
// with the new schedule, the workflow was a 409 (its schedule differs), with the old one
// a 200, the same definition. A payload is refused; a schedule changes both.
func TestWorkflow_DefinitionUpdate(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		def := func(cron string) *job.Workflow {
			return &job.Workflow{ID: "upd", Jobs: []job.Node{node("a"), node("b", "a")}, Schedule: &job.Schedule{Cron: cron}}
		}
		_, err := s.CreateWorkflow(ctx, def("0 3 * * *"))
		require.NoError(t, err)

		bad := []byte(`{"jobs":[{"id":"a","type":"t","depends_on":["a"]}]}`)
		_, err = s.Update(ctx, "upd", shard.Update{Payload: &bad})
		var we *shard.WorkflowError
		require.ErrorAs(t, err, &we)
		info, err := s.Get(ctx, "upd")
		require.NoError(t, err)
		_, err = s.StartInstance(ctx, "upd", heldT0, info.Payload)
		require.NoError(t, err, "the definition is as created")

		_, err = s.Update(ctx, "upd", shard.Update{Schedule: &job.Schedule{Cron: "0 4 * * *"}})
		require.NoError(t, err)
		info, err = s.Get(ctx, "upd")
		require.NoError(t, err)
		require.Equal(t, "0 4 * * *", info.Schedule.Cron)
		var stored job.Workflow
		require.NoError(t, json.Unmarshal(info.Payload, &stored))
		require.Equal(t, "0 4 * * *", stored.Schedule.Cron, "the definition's schedule")
		res, err := s.CreateWorkflow(ctx, def("0 4 * * *"))
		require.NoError(t, err)
		require.False(t, res.Created)
		require.False(t, res.Conflict, "sent again as it is now")
		res, err = s.CreateWorkflow(ctx, def("0 3 * * *"))
		require.NoError(t, err)
		require.True(t, res.Conflict, "sent again as it was")
	})
}

// One call that ends a packed job's run twice (an HTTP worker's batch naming it twice: a
// snooze and an ack, a failure and an ack): the first end thaws the job, and the second,
// a plain success, was checked against the packed run state read before the first, so
// that it succeeded too: a workflow's root was marked succeeded (its children released)
// while its job waited for its snoozed retry, which then ran it again, and its queue's
// in-flight count was taken down twice. The second is refused, as it is for a job hash.
func TestFinish_PackedRunEndedTwiceInACall(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "twice", Jobs: []job.Node{node("a"), node("b", "a")}})
		require.NoError(t, err)
		_, err = s.Create(ctx, []*job.Job{{ID: "plain", Type: "t", Schedule: job.Schedule{Now: true}}})
		require.NoError(t, err)
		runs, err := s.Claim(ctx, 0, "default", 10, "w", "n")
		require.NoError(t, err)
		require.Len(t, runs, 2)
		var fs []shard.Finish
		for _, r := range runs {
			first := shard.Finish{Member: r.Member, Token: r.Token, Outcome: shard.Snoozed, Delay: time.Hour}
			if r.JobID == "plain" {
				first = shard.Finish{Member: r.Member, Token: r.Token, Outcome: shard.Failed, Error: "no"}
			}
			fs = append(fs, first, shard.Finish{Member: r.Member, Token: r.Token, Outcome: shard.Succeeded})
		}
		errs, err := s.FinishRuns(ctx, 0, fs)
		require.NoError(t, err)
		require.NoError(t, errs[0])
		require.ErrorIs(t, errs[1], shard.ErrTokenMismatch)
		require.NoError(t, errs[2])
		require.ErrorIs(t, errs[3], shard.ErrTokenMismatch)

		w, err := s.Workflow(ctx, "twice")
		require.NoError(t, err)
		require.Equal(t, map[string]job.NodeState{"a": job.NodeRetrying, "b": job.NodeWaiting}, nodeStates(w))
		for _, id := range []string{"twice@a", "plain"} {
			info, err := s.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, job.StateRetrying, info.State, id)
		}
		shardtest.CheckCounts(t, s)
	})
}

// A job id with an '@' that names no job (an instance's id taken for a job's, a node a
// workflow does not have) is not found, as any job id that names none: pausing,
// resuming, triggering, updating or deleting it was refused as a workflow's node's
// ("it is node "1893466800000" of workflow "nightly", which decides when it runs"), a
// 409 naming a workflow and a node that do not exist. A node's job that exists is still
// refused so.
func TestWorkflow_NoSuchNodeJobIsNotFound(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s := open(t, b, shard.Config{Shards: 1})
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "nightly", Jobs: []job.Node{node("a"), node("b", "a")}})
		require.NoError(t, err)
		ops := map[string]func(id string) error{
			"pause":   func(id string) error { _, _, err := s.Pause(ctx, id); return err },
			"resume":  func(id string) error { _, _, err := s.Resume(ctx, id); return err },
			"trigger": func(id string) error { _, err := s.Trigger(ctx, id); return err },
			"delete":  func(id string) error { return s.Delete(ctx, id) },
			"update": func(id string) error {
				p := 3
				_, err := s.Update(ctx, id, shard.Update{Priority: &p})
				return err
			},
		}
		for name, op := range ops {
			for _, id := range []string{"nightly@1893466800000", "nightly@zz", "other@a"} {
				require.ErrorIs(t, op(id), shard.ErrNotFound, "%s %s", name, id)
			}
			var ne *shard.NodeError
			for _, id := range []string{"nightly@a", "nightly@b"} {
				require.ErrorAs(t, op(id), &ne, "%s %s", name, id)
			}
		}
	})
}
