package shard_test

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// A workflow's node ends of one finish_runs call are moved by wf_mark_one when the call
// holds one end of the workflow, a success (include workflow), and by wf_mark_many
// otherwise; the two must leave the same state. Each scenario runs twice, on two
// namespaces: once with every end in a call of its own (wf_mark_one where it takes the
// end), once with the ends of a step in one call (wf_mark_many: two ends or more of one
// workflow). After each step the workflow hashes (field by field, times masked), their
// expiries, the definitions' hashes, the node jobs' states, the replies and the runs
// then claimable are compared.

// markEnd is one node run's end in a step of a markScenario.
type markEnd struct {
	job     string // the node's job id
	outcome shard.Outcome
	result  []byte
	retry   bool // Failed with a retry due at once (another attempt follows)
}

// markAct is one step: ends to report, or an action on the store (do).
type markAct struct {
	ends []markEnd
	do   func(t *testing.T, s *shard.Store, b redistest.Backend)
}

type markScenario struct {
	name  string
	setup func(t *testing.T, s *shard.Store) // creates the workflows
	wfs   []string                           // workflows compared
	defs  []string                           // scheduled definitions whose hashes are compared
	acts  []markAct
}

// markRunner plays a scenario on one store: it claims every ready run before each step
// (firing retries due within a second first) and keeps them by job id.
type markRunner struct {
	t     *testing.T
	s     *shard.Store
	b     redistest.Backend
	lease shard.Lease
	held  map[string]shard.Claimed
	alone bool
}

func (m *markRunner) claim(ctx context.Context) []string {
	_, err := m.s.FireDue(ctx, m.lease, 1000, time.Second)
	require.NoError(m.t, err)
	c, err := m.s.Claim(ctx, 0, "default", 1000, "w", "n")
	require.NoError(m.t, err)
	var got []string
	for _, r := range c {
		m.held[r.JobID] = r
		got = append(got, r.JobID)
	}
	sort.Strings(got)
	return got
}

// ends reports ends, each in a call of its own or all in one; it returns each end's
// error as text.
func (m *markRunner) ends(ctx context.Context, ends []markEnd) []string {
	var fs []shard.Finish
	for _, e := range ends {
		r, ok := m.held[e.job]
		require.True(m.t, ok, "no claimed run of %s", e.job)
		delete(m.held, e.job)
		f := shard.Finish{Member: r.Member, Token: r.Token, Outcome: e.outcome, Result: e.result}
		if f.Outcome == "" {
			f.Outcome = shard.Succeeded
		}
		if f.Outcome == shard.Failed || f.Outcome == shard.Cancelled {
			f.Error = "no"
		}
		if e.retry {
			f.Delay = time.Millisecond
		}
		fs = append(fs, f)
	}
	var out []string
	report := func(fs []shard.Finish) {
		errs, err := m.s.FinishRuns(ctx, 0, fs)
		require.NoError(m.t, err)
		for _, e := range errs {
			out = append(out, fmt.Sprint(e))
		}
	}
	if m.alone {
		for k := range fs {
			report(fs[k : k+1])
		}
	} else {
		report(fs)
	}
	return out
}

// times masks times in ms (and µs) in workflow hash values.
var times = regexp.MustCompile(`[0-9]{13,}`)

// markState is what a step left, as compared.
func markState(t *testing.T, s *shard.Store, b redistest.Backend, sc markScenario) map[string]string {
	ctx := context.Background()
	c := b.Client(t)
	out := map[string]string{}
	for _, wf := range sc.wfs {
		key := s.Keys().Workflow(0, wf)
		h, err := c.Do(ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
		require.NoError(t, err)
		for f, v := range h {
			out[wf+" field "+f] = times.ReplaceAllString(v, "T")
		}
		ttl := keyTTL(t, c, key)
		out[wf+" ttl"] = fmt.Sprint(min(ttl, 0), ttl > 0)
		nodes := map[string]bool{}
		for f := range h {
			if len(f) > 2 && f[:2] == "s:" {
				nodes[f[2:]] = true
			}
		}
		for n := range nodes {
			info, err := s.Get(ctx, job.NodeJobID(wf, n))
			if err != nil {
				out[wf+" job "+n] = err.Error()
				continue
			}
			out[wf+" job "+n] = string(info.State)
		}
	}
	for _, def := range sc.defs {
		h, err := c.Do(ctx, c.B().Hgetall().Key(s.Keys().WorkflowDefinition(0, def)).Build()).AsStrMap()
		require.NoError(t, err)
		for f, v := range h {
			out["def "+def+" "+f] = v
		}
	}
	return out
}

func TestWorkflow_OneEndAloneMovesAsWithOthers(t *testing.T) {
	nodeJ := func(wf, n string) string { return job.NodeJobID(wf, n) }
	w := func(n string) string { return nodeJ("w", n) }
	ok := func(n string) markEnd { return markEnd{job: w(n)} }
	res := func(n, r string) markEnd { return markEnd{job: w(n), result: []byte(r)} }
	fail := func(n string) markEnd { return markEnd{job: w(n), outcome: shard.Failed} }
	create := func(nodes ...job.Node) func(t *testing.T, s *shard.Store) {
		return func(t *testing.T, s *shard.Store) {
			_, err := s.CreateWorkflow(context.Background(), &job.Workflow{ID: "w", Jobs: nodes})
			require.NoError(t, err)
		}
	}
	roots := func(names ...string) []job.Node {
		var ns []job.Node
		for _, n := range names {
			ns = append(ns, node(n))
		}
		return ns
	}
	with := func(a []job.Node, more ...job.Node) []job.Node { return append(append([]job.Node{}, a...), more...) }
	retried := node("a")
	retried.Retry.MaxAttempts = 3

	// A scheduled definition (buffer_one) of a, z (roots) and b after a, with two
	// instances: the second is held until the first ends.
	inst1, inst2 := "sd@"+fmt.Sprint(heldT0.UnixMilli()), "sd@"+fmt.Sprint(heldT0.Add(24*time.Hour).UnixMilli())
	scheduled := func(t *testing.T, s *shard.Store) {
		ctx := context.Background()
		_, err := s.CreateWorkflow(ctx, &job.Workflow{ID: "sd", Jobs: []job.Node{node("a"), node("z"), node("b", "a")},
			Schedule: &job.Schedule{Cron: "0 3 * * *"}, Overlap: job.OverlapBufferOne})
		require.NoError(t, err)
		info, err := s.Get(ctx, "sd")
		require.NoError(t, err)
		first, err := s.StartInstance(ctx, "sd", heldT0, info.Payload)
		require.NoError(t, err)
		require.Equal(t, inst1, first.ID)
		second, err := s.StartInstance(ctx, "sd", heldT0.Add(24*time.Hour), info.Payload)
		require.NoError(t, err)
		require.Equal(t, inst2, second.ID)
		require.True(t, second.Held)
	}
	hset := func(wf string, kv ...string) func(t *testing.T, s *shard.Store, b redistest.Backend) {
		return func(t *testing.T, s *shard.Store, b redistest.Backend) {
			c := b.Client(t)
			require.NoError(t, c.Do(context.Background(), c.B().Hset().Key(s.Keys().Workflow(0, wf)).FieldValue().
				FieldValue(kv[0], kv[1]).Build()).Error())
		}
	}

	scenarios := []markScenario{{
		name:  "ChainWithResults",
		setup: create(with(roots("z1", "z2", "z3", "a"), node("b", "a"), node("c", "b"))...),
		acts: []markAct{
			{ends: []markEnd{res("a", `{"a":1}`), res("z1", "1")}}, // a releases b; z1 a leaf
			{ends: []markEnd{ok("b"), ok("z2")}},
			{ends: []markEnd{res("c", "c"), res("z3", "")}}, // z3, alone, ends the workflow
		},
	}, {
		name: "OddNodeIDs",
		setup: create(node("z-1"), node("a.b-c~d_e"), node("x_y.z~", "a.b-c~d_e"), node("Z-9_", "x_y.z~"),
			node("q.-~_"), node("p-")),
		acts: []markAct{
			{ends: []markEnd{res("a.b-c~d_e", "r"), ok("z-1")}},
			{ends: []markEnd{ok("x_y.z~"), ok("q.-~_")}},
			{ends: []markEnd{ok("Z-9_"), ok("p-")}},
		},
	}, {
		name:  "FanInParentEndedAlone",
		setup: create(with(roots("z1", "z2", "z3", "p1", "p2"), node("j", "p1", "p2"))...),
		acts: []markAct{
			{ends: []markEnd{res("p1", "1"), ok("z1")}}, // j waits, one parent counted
			{ends: []markEnd{ok("p2"), ok("z2")}},       // j released
			{ends: []markEnd{ok("j"), ok("z3")}},
		},
	}, {
		name:  "FailedWorkflowEndsOnASuccess",
		setup: create(with(roots("f", "z1", "z2", "z3", "a"), node("b", "a"))...),
		acts: []markAct{
			{ends: []markEnd{fail("f"), ok("z1")}}, // f's run is dead
			{ends: []markEnd{ok("a"), ok("z2")}},
			{ends: []markEnd{ok("b"), ok("z3")}}, // z3, alone, ends it failed, with a dead run ('dd')
		},
	}, {
		name: "ChildRuleEndsIt",
		setup: create(with(roots("z1", "z2", "p", "q", "r"), ruled(node("k", "p"), job.RuleOneFailed),
			ruled(node("n", "q"), job.RuleNoneFailed), ruled(node("o", "r"), job.RuleOneSuccess), node("k2", "k"))...),
		acts: []markAct{
			{ends: []markEnd{ok("p"), ok("z1")}}, // k skipped, k2 after it
			{ends: []markEnd{ok("q"), ok("r")}},
			{ends: []markEnd{ok("n"), ok("z2")}},
			{ends: []markEnd{ok("o")}},
		},
	}, {
		name:  "ChildNotWaiting",
		setup: create(with(roots("z1", "z2", "a"), node("b", "a"), node("c", "b"))...),
		acts: []markAct{
			{do: func(t *testing.T, s *shard.Store, _ redistest.Backend) {
				_, changed, err := s.Cancel(context.Background(), w("b"))
				require.NoError(t, err)
				require.True(t, changed)
			}},
			{ends: []markEnd{ok("a"), ok("z1")}}, // b was cancelled
			{ends: []markEnd{ok("z2")}},
		},
	}, {
		name:  "CancelledWorkflowLateReports",
		setup: create(with(roots("z1", "z2", "a"), node("b", "a"))...),
		acts: []markAct{
			{do: func(t *testing.T, s *shard.Store, _ redistest.Backend) {
				_, changed, err := s.CancelWorkflow(context.Background(), "w")
				require.NoError(t, err)
				require.True(t, changed)
			}},
			{ends: []markEnd{res("a", "late"), ok("z1")}},
			{ends: []markEnd{ok("z2")}},
		},
	}, {
		name:  "RetriedWorkflow",
		setup: create(with(roots("z1", "a", "y"), node("b", "a"), node("c", "b"))...),
		acts: []markAct{
			{ends: []markEnd{fail("a"), fail("y")}},
			{ends: []markEnd{ok("z1")}}, // the workflow fails
			{do: func(t *testing.T, s *shard.Store, _ redistest.Backend) {
				_, changed, err := s.RetryWorkflow(context.Background(), "w")
				require.NoError(t, err)
				require.True(t, changed)
			}},
			{ends: []markEnd{res("a", "2"), ok("y")}},
			{ends: []markEnd{ok("b")}},
			{ends: []markEnd{ok("c")}},
		},
	}, {
		name:  "SecondAttempt",
		setup: create(with(roots("z1", "z2", "z3"), retried, node("b", "a"))...),
		acts: []markAct{
			{ends: []markEnd{{job: w("a"), outcome: shard.Failed, retry: true}, ok("z1")}},
			{ends: []markEnd{res("a", "second"), ok("z2")}}, // attempt 2
			{ends: []markEnd{ok("b"), ok("z3")}},
		},
	}, {
		name:  "HeldInstance",
		setup: scheduled,
		wfs:   []string{inst1, inst2},
		defs:  []string{"sd"},
		acts: []markAct{
			{do: hset(inst1, "hold", "1")}, // as a held instance whose node ran (white box)
			{ends: []markEnd{{job: nodeJ(inst1, "a")}, {job: nodeJ(inst1, "z")}}},
		},
	}, {
		name:  "ScheduledInstanceEnds",
		setup: scheduled,
		wfs:   []string{inst1, inst2},
		defs:  []string{"sd"},
		acts: []markAct{
			{ends: []markEnd{{job: nodeJ(inst1, "a"), result: []byte("x")}, {job: nodeJ(inst1, "z")}}},
			{ends: []markEnd{{job: nodeJ(inst1, "b")}}}, // starts the held instance
			{ends: []markEnd{{job: nodeJ(inst2, "a")}, {job: nodeJ(inst2, "z")}}},
			{ends: []markEnd{{job: nodeJ(inst2, "b")}}},
		},
	}, {
		name:  "WorkflowHashGone",
		setup: create(with(roots("z1", "a"), node("b", "a"))...),
		acts: []markAct{
			{do: func(t *testing.T, s *shard.Store, b redistest.Backend) {
				c := b.Client(t)
				require.NoError(t, c.Do(context.Background(), c.B().Del().Key(s.Keys().Workflow(0, "w")).Build()).Error())
			}},
			{ends: []markEnd{res("a", "r"), ok("z1")}},
		},
	}}

	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		for _, noPack := range []bool{false, true} {
			for _, sc := range scenarios {
				t.Run(fmt.Sprintf("%s/NoPack=%v", sc.name, noPack), func(t *testing.T) {
					ctx := context.Background()
					if sc.wfs == nil {
						sc.wfs = []string{"w"}
					}
					var rs [2]*markRunner
					for k := range rs {
						s := open(t, b, shard.Config{Shards: 1, NoPack: noPack})
						sc.setup(t, s)
						l := s.AcquireLeases(ctx, "d", []shard.ID{0}, time.Hour)[0]
						require.True(t, l.Held)
						rs[k] = &markRunner{t: t, s: s, b: b, lease: l.Lease, held: map[string]shard.Claimed{}, alone: k == 0}
					}
					require.Equal(t, rs[0].claim(ctx), rs[1].claim(ctx))
					for step, a := range sc.acts {
						var got [2][]string
						for k, r := range rs {
							if a.do != nil {
								a.do(t, r.s, b)
							} else {
								got[k] = r.ends(ctx, a.ends)
							}
						}
						require.Equal(t, got[0], got[1], "step %d: the replies", step)
						require.Equal(t, markState(t, rs[1].s, b, sc), markState(t, rs[0].s, b, sc),
							"step %d: ended together (want) and one by one (got)", step)
						require.Equal(t, rs[1].claim(ctx), rs[0].claim(ctx), "step %d: the runs then ready", step)
					}
				})
			}
		}
	})
}
