package ingest_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// runNodes plays the workers of workflow wf: it claims the ready runs of its shard until
// none is left and ends each as fail says (succeeded, with the result "from <node>",
// unless fail names it), returning the nodes run in order.
func (tb *bundle) runNodes(t *testing.T, wf string, fail func(node string) bool) []string {
	t.Helper()
	ctx := t.Context()
	id := tb.store.ShardOf(wf)
	var ran []string
	for i := 0; ; i++ {
		require.Less(t, i, 100, "the workflow does not end")
		runs, err := tb.store.Claim(ctx, id, "default", 100, "w", "n")
		require.NoError(t, err)
		if len(runs) == 0 {
			return ran
		}
		fs := make([]shard.Finish, len(runs))
		for k, r := range runs {
			_, node, ok := job.SplitNodeJobID(r.JobID)
			require.True(t, ok, r.JobID)
			ran = append(ran, node)
			fs[k] = shard.Finish{Member: r.Member, Token: r.Token, Outcome: shard.Succeeded, Result: []byte(`"from ` + node + `"`)}
			if fail != nil && fail(node) {
				fs[k] = shard.Finish{Member: r.Member, Token: r.Token, Outcome: shard.Failed, Error: node + " says no"}
			}
		}
		errs, err := tb.store.FinishRuns(ctx, id, fs)
		require.NoError(t, err)
		for _, e := range errs {
			require.NoError(t, e)
		}
	}
}

// getWorkflow reads a workflow through the API.
func (tb *bundle) getWorkflow(t *testing.T, id string) ingest.Workflow {
	t.Helper()
	var w ingest.Workflow
	tb.doJSON("GET", "/v1/workflows/"+id, nil, &w).requireStatus(t, 200)
	return w
}

func nodeStates(w ingest.Workflow) map[string]string {
	out := map[string]string{}
	for _, n := range w.Nodes {
		out[n.ID] = n.State
	}
	return out
}

const etlBody = `{"id": "etl-1", "jobs": [
  {"id": "extract", "type": "etl.extract", "payload": {"day": "2030-01-01"}, "retry": {"max_attempts": 1}},
  {"id": "transform", "type": "etl.transform", "depends_on": ["extract"], "retry": {"max_attempts": 1}, "timeout": "5m"},
  {"id": "load", "type": "etl.load", "depends_on": ["transform"], "retry": {"max_attempts": 1}},
  {"id": "alert", "type": "etl.alert", "depends_on": ["transform", "load"], "rule": "one_failed"}]}`

// A workflow through the API: created (201, then 200 for the same definition, 409 naming
// the node that differs), read with every node, run until a node fails, retried from
// there, its nodes' results read; cancel and retry of ended and unknown workflows.
func TestWorkflows_CreateGetRetry(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		m := &workflowRecorder{}
		tb := setup(t, b, ingest.Config{Metrics: m})

		r := tb.do("POST", "/v1/workflows", []byte(etlBody))
		r.requireStatus(t, 201)
		require.Equal(t, "/v1/workflows/etl-1", r.header["Location"])
		var created ingest.WorkflowCreated
		require.NoError(t, json.Unmarshal(r.body, &created))
		require.Equal(t, ingest.WorkflowCreated{ID: "etl-1", Shard: int(tb.store.ShardOf("etl-1")), State: "running", Nodes: 4}, created)
		// The same definition again, laid out otherwise, is the existing workflow.
		tb.do("POST", "/v1/workflows", []byte(strings.ReplaceAll(etlBody, "\n", " "))).requireStatus(t, 200)
		other := strings.Replace(etlBody, `"timeout": "5m"`, `"timeout": "6m"`, 1)
		e := tb.do("POST", "/v1/workflows", []byte(other)).requireError(t, 409, ingest.CodeConflict, "id")
		require.Contains(t, e.Message, `"transform" (its timeout)`)
		other = strings.Replace(etlBody, `"rule": "one_failed"`, `"rule": "all_done"`, 1)
		e = tb.do("POST", "/v1/workflows", []byte(other)).requireError(t, 409, ingest.CodeConflict, "id")
		require.Contains(t, e.Message, `"alert" (its dependencies or rule)`)
		require.Equal(t, 1, m.count("created false"))

		w := tb.getWorkflow(t, "etl-1")
		require.Equal(t, "running", w.State)
		require.NotNil(t, w.CreatedAt)
		require.Nil(t, w.EndedAt)
		require.Equal(t, map[string]string{"extract": "ready", "transform": "waiting", "load": "waiting", "alert": "waiting"}, nodeStates(w))
		require.Equal(t, map[string]int{"ready": 1, "waiting": 3}, w.Counts)
		require.Equal(t, ingest.Node{ID: "alert", JobID: "etl-1@alert", State: "waiting", Rule: "one_failed",
			DependsOn: []string{"transform", "load"}}, w.Nodes[3])

		// transform fails: load is upstream_failed, alert (one_failed) runs.
		fail := true
		ran := tb.runNodes(t, "etl-1", func(n string) bool { return n == "transform" && fail })
		require.Equal(t, []string{"extract", "transform", "alert"}, ran)
		w = tb.getWorkflow(t, "etl-1")
		require.Equal(t, "failed", w.State)
		require.NotNil(t, w.EndedAt)
		require.Nil(t, w.ExpiresAt, "kept while transform's run is dead")
		require.Equal(t, map[string]string{"extract": "succeeded", "transform": "failed", "load": "upstream_failed", "alert": "succeeded"}, nodeStates(w))
		require.Equal(t, 1, w.Nodes[0].Attempts)
		require.NotNil(t, w.Nodes[0].ReleasedAt)
		require.NotNil(t, w.Nodes[0].EndedAt)
		require.Equal(t, len(`"from extract"`), w.Nodes[0].ResultSize)

		// The results: raw bytes, JSON here.
		r = tb.do("GET", "/v1/workflows/etl-1/nodes/extract/result", nil)
		r.requireStatus(t, 200)
		require.Equal(t, `"from extract"`, string(r.body))
		require.Equal(t, "application/json", r.header["Content-Type"])
		e = tb.do("GET", "/v1/workflows/etl-1/nodes/transform/result", nil).requireError(t, 404, ingest.CodeNotFound, "node")
		require.Contains(t, e.Message, "it is failed")
		tb.do("GET", "/v1/workflows/etl-1/nodes/nope/result", nil).requireError(t, 404, ingest.CodeNotFound, "node")
		tb.do("GET", "/v1/workflows/nope/nodes/extract/result", nil).requireError(t, 404, ingest.CodeNotFound, "")

		// Retry: from the nodes that did not succeed.
		var sr ingest.StateReply
		tb.doJSON("POST", "/v1/workflows/etl-1:retry", nil, &sr).requireStatus(t, 200)
		require.Equal(t, ingest.StateReply{ID: "etl-1", State: "running", Changed: true}, sr)
		fail = false
		ran = tb.runNodes(t, "etl-1", nil)
		require.Equal(t, []string{"transform", "load"}, ran)
		w = tb.getWorkflow(t, "etl-1")
		require.Equal(t, "succeeded", w.State)
		require.Equal(t, "succeeded", nodeStates(w)["alert"], "alert ran the first time and keeps its end")
		tb.doJSON("POST", "/v1/workflows/etl-1:retry", nil, &sr).requireStatus(t, 200)
		require.False(t, sr.Changed, "a succeeded workflow has nothing to retry")
		tb.doJSON("POST", "/v1/workflows/etl-1:cancel", nil, &sr).requireStatus(t, 200)
		require.Equal(t, ingest.StateReply{ID: "etl-1", State: "succeeded", Changed: false}, sr)
		tb.do("POST", "/v1/workflows/nope:cancel", nil).requireError(t, 404, ingest.CodeNotFound, "")
		tb.do("POST", "/v1/workflows/nope:retry", nil).requireError(t, 404, ingest.CodeNotFound, "")
		tb.do("GET", "/v1/workflows/nope", nil).requireError(t, 404, ingest.CodeNotFound, "")
		require.Equal(t, map[string]int{"created false": 1, "retried": 1}, m.all())
	})
}

// Cancel a running workflow: its nodes that did not end are cancelled; a second cancel
// changes nothing; a retry runs them again.
func TestWorkflows_Cancel(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		m := &workflowRecorder{}
		tb := setup(t, b, ingest.Config{Metrics: m})
		tb.do("POST", "/v1/workflows", []byte(`{"id":"c","jobs":[{"id":"a","type":"t"},{"id":"b","type":"t","depends_on":["a"]}]}`)).requireStatus(t, 201)
		var sr ingest.StateReply
		tb.doJSON("POST", "/v1/workflows/c:cancel", nil, &sr).requireStatus(t, 200)
		require.Equal(t, ingest.StateReply{ID: "c", State: "cancelled", Changed: true}, sr)
		w := tb.getWorkflow(t, "c")
		require.Equal(t, "cancelled", w.State)
		require.Equal(t, map[string]string{"a": "cancelled", "b": "cancelled"}, nodeStates(w))
		tb.doJSON("POST", "/v1/workflows/c:cancel", nil, &sr).requireStatus(t, 200)
		require.False(t, sr.Changed)
		tb.doJSON("POST", "/v1/workflows/c:retry", nil, &sr).requireStatus(t, 200)
		require.True(t, sr.Changed)
		require.Equal(t, []string{"a", "b"}, tb.runNodes(t, "c", nil))
		require.Equal(t, "succeeded", tb.getWorkflow(t, "c").State)
		require.Equal(t, map[string]int{"created false": 1, "cancelled": 1, "retried": 1}, m.all())
	})
}

// Every way a workflow can be invalid is a 400 naming the node's field.
func TestWorkflows_ValidationErrors(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		rc := b.Client(t)
		st, ns := openStore(t, b, rc, shard.Config{MaxNodes: 3, MaxPayload: 100})
		tb := serve(t, b, rc, ns, ingest.Config{Store: st})
		for _, tc := range []struct {
			name, body, field, msg string
			status                 int
		}{
			{"UnknownDependency", `{"jobs":[{"id":"a","type":"t"},{"id":"b","type":"t","depends_on":["a","zz"]}]}`,
				"jobs[1].depends_on", `node "b" depends on "zz", which is no node of the workflow`, 400},
			{"Cycle", `{"jobs":[{"id":"a","type":"t","depends_on":["c"]},{"id":"b","type":"t","depends_on":["a"]},{"id":"c","type":"t","depends_on":["b"]}]}`,
				"jobs", "dependency cycle: a → b → c → a", 400},
			{"SelfDependency", `{"jobs":[{"id":"a","type":"t","depends_on":["a"]}]}`, "jobs", "dependency cycle: a → a", 400},
			{"DuplicateNode", `{"jobs":[{"id":"a","type":"t"},{"id":"a","type":"u"}]}`, "jobs[1].id", `duplicate node id "a"`, 400},
			{"TooManyNodes", `{"jobs":[{"id":"a","type":"t"},{"id":"b","type":"t"},{"id":"c","type":"t"},{"id":"d","type":"t"}]}`,
				"jobs", "4 jobs is over the limit of 3", 400},
			{"NoJobs", `{"jobs":[]}`, "jobs", "at least one job", 400},
			{"NodeWithoutID", `{"jobs":[{"type":"t"}]}`, "jobs[0].id", "is required", 400},
			{"NodeWithoutType", `{"jobs":[{"id":"a"}]}`, "jobs[0].type", `node "a"`, 400},
			{"BadRule", `{"jobs":[{"id":"a","type":"t","rule":"most_success"}]}`, "jobs[0].rule", `node "a": must be all_success`, 400},
			{"NodeSchedule", `{"jobs":[{"id":"a","type":"t","schedule":{"delay":"1h"}}]}`, "jobs[0].schedule", "a node has no schedule", 400},
			{"NodeOverlap", `{"jobs":[{"id":"a","type":"t","overlap":"allow"}]}`, "jobs[0].overlap", "not to nodes", 400},
			{"BadDuration", `{"jobs":[{"id":"a","type":"t"},{"id":"b","type":"t","timeout":"soon"}]}`, "jobs[1].timeout", `node "b": not a duration`, 400},
			{"UnknownField", `{"jobs":[{"id":"a","type":"t"},{"id":"b","type":"t","shedule":{}}]}`, "jobs[1].shedule", "unknown field", 400},
			{"UnknownTopField", `{"jobs":[{"id":"a","type":"t"}],"cron":"x"}`, "cron", "unknown field", 400},
			{"WrongType", `{"jobs":[{"id":"a","type":"t","depends_on":"b"}]}`, "jobs[0].depends_on", "must be an array", 400},
			// The node at fault is named by its index, as for an unknown field.
			{"WrongTypeLaterNode", `{"jobs":[{"id":"a","type":"t","priority":1},{"id":"b","type":"t","priority":"high"}]}`,
				"jobs[1].priority", "must be an integer, got string", 400},
			{"WrongTypeNested", `{"jobs":[{"id":"a","type":"t"},{"id":"b","type":"t","retry":{"max_attempts":[3]}}]}`,
				"jobs[1].retry.max_attempts", "must be an integer, got array", 400},
			{"WrongTypeParent", `{"jobs":[{"id":"a","type":"t"},{"id":"b","type":"t","depends_on":["a",{"id":"c"}]}]}`,
				"jobs[1].depends_on[1]", "must be a string, got object", 400},
			{"WrongTypeNode", `{"jobs":[{"id":"a","type":"t"}, "b"]}`, "jobs[1]", "must be an object, got string", 400},
			{"BadNodeID", `{"jobs":[{"id":"a@b","type":"t"}]}`, "jobs[0].id", "", 400},
			{"BadWorkflowID", `{"id":"a/b","jobs":[{"id":"a","type":"t"}]}`, "id", "", 400},
			{"LongWorkflowID", `{"id":"` + strings.Repeat("x", 65) + `","jobs":[{"id":"a","type":"t"}]}`, "id", "longer than 64", 400},
			{"LongScheduledID", `{"id":"` + strings.Repeat("x", 51) + `","jobs":[{"id":"a","type":"t"}],"schedule":{"cron":"@daily"}}`, "id", "longer than 50", 400},
			{"PayloadTooLarge", `{"jobs":[{"id":"a","type":"t","payload":"` + strings.Repeat("x", 200) + `"}]}`, "jobs[0].payload", "over the limit", 413},
			{"OverlapWithoutSchedule", `{"jobs":[{"id":"a","type":"t"}],"overlap":"allow"}`, "schedule", "a cron schedule is required", 400},
			{"ScheduleNotCron", `{"jobs":[{"id":"a","type":"t"}],"schedule":{"delay":"1h"}}`, "schedule", "a cron expression", 400},
			{"BadCron", `{"jobs":[{"id":"a","type":"t"}],"schedule":{"cron":"61 * * * *"}}`, "schedule.cron", "", 400},
			{"BadTimezone", `{"jobs":[{"id":"a","type":"t"}],"schedule":{"cron":"@daily","timezone":"Mars/Olympus"}}`, "schedule.timezone", "", 400},
			{"BadOverlap", `{"jobs":[{"id":"a","type":"t"}],"schedule":{"cron":"@daily"},"overlap":"sometimes"}`, "overlap", "", 400},
			// A node's job id is the workflow id, '@' and the node id, at most 128 bytes:
			// a node id is at most 63, and the error names the node, whatever its length.
			{"LongNodeID", `{"jobs":[{"id":"` + strings.Repeat("n", 64) + `","type":"t"}]}`, "jobs[0].id",
				`node "` + strings.Repeat("n", 64) + `": longer than 63 bytes`, 400},
			{"VeryLongNodeID", `{"jobs":[{"id":"` + strings.Repeat("n", 129) + `","type":"t"}]}`, "jobs[0].id",
				`node "` + strings.Repeat("n", 129) + `": longer than 63 bytes`, 400},
			{"DefinitionTypeNode", `{"jobs":[{"id":"a","type":"@workflow"}]}`, "jobs[0].type", `node "a": "@workflow" is reserved`, 400},
			{"PushTargetRefused", `{"jobs":[{"id":"a","target":{"url":"http://127.0.0.1/x"}}]}`, "jobs[0].target.url", `node "a"`, 400},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code := ingest.CodeInvalid
				if tc.status == 413 {
					code = ingest.CodeTooLarge
				}
				e := tb.do("POST", "/v1/workflows", []byte(tc.body)).requireError(t, tc.status, code, tc.field)
				require.Contains(t, e.Message, tc.msg)
			})
		}
		// Nothing was created.
		var l ingest.WorkflowList
		tb.doJSON("GET", "/v1/workflows", nil, &l).requireStatus(t, 200)
		require.Empty(t, l.Workflows)
	})
}

// GET /v1/workflows: a page at a time, filtered by state.
func TestWorkflows_List(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		tb := setup(t, b, ingest.Config{})
		for i := range 7 {
			id := fmt.Sprintf("wf-%d", i)
			tb.do("POST", "/v1/workflows", []byte(`{"id":"`+id+`","jobs":[{"id":"a","type":"t"}]}`)).requireStatus(t, 201)
			if i%3 == 0 {
				tb.do("POST", "/v1/workflows/"+id+":cancel", nil).requireStatus(t, 200)
			}
		}
		tb.do("POST", "/v1/workflows", []byte(`{"id":"nightly","jobs":[{"id":"a","type":"t"}],"schedule":{"cron":"@daily"}}`)).requireStatus(t, 201)
		tb.do("POST", "/v1/jobs", []byte(`{"id":"plain","queue":"workflows","type":"t","schedule":{"delay":"1h"}}`)).requireStatus(t, 201)

		list := func(query string) []ingest.WorkflowSummary {
			var all []ingest.WorkflowSummary
			cursor := ""
			for i := 0; ; i++ {
				require.Less(t, i, 100)
				var l ingest.WorkflowList
				tb.doJSON("GET", "/v1/workflows?limit=2"+query+"&cursor="+cursor, nil, &l).requireStatus(t, 200)
				require.NotNil(t, l.Workflows)
				all = append(all, l.Workflows...)
				if cursor = l.NextCursor; cursor == "" {
					return all
				}
			}
		}
		ids := func(ws []ingest.WorkflowSummary) map[string]string {
			out := map[string]string{}
			for _, w := range ws {
				out[w.ID] = w.State
			}
			return out
		}
		require.Equal(t, map[string]string{"wf-0": "cancelled", "wf-1": "running", "wf-2": "running", "wf-3": "cancelled",
			"wf-4": "running", "wf-5": "running", "wf-6": "cancelled"}, ids(list("")))
		require.Equal(t, map[string]string{"wf-0": "cancelled", "wf-3": "cancelled", "wf-6": "cancelled"}, ids(list("&state=cancelled")))
		running := list("&state=running")
		require.Len(t, running, 4)
		require.Equal(t, 1, running[0].Nodes)
		require.Equal(t, 1, running[0].Left)
		require.NotNil(t, running[0].CreatedAt)
		sched := list("&state=scheduled")
		require.Len(t, sched, 1, "the plain job of queue workflows is no definition")
		require.Equal(t, "nightly", sched[0].ID)
		require.Equal(t, "scheduled", sched[0].State)
		require.Equal(t, "@daily", sched[0].Schedule.Cron)
		require.NotNil(t, sched[0].NextRunAt)
		require.Equal(t, 1, sched[0].Nodes)

		tb.do("GET", "/v1/workflows?state=done", nil).requireError(t, 400, ingest.CodeInvalid, "state")
		tb.do("GET", "/v1/workflows?limit=0", nil).requireError(t, 400, ingest.CodeInvalid, "limit")
		tb.do("GET", "/v1/workflows?cursor=zz", nil).requireError(t, 400, ingest.CodeInvalid, "cursor")
	})
}

// GET /v1/workflows?prefix=: the workflows whose id starts with it; `<def>@` lists the
// instances of a definition, a held one too, with state=scheduled the definitions. A
// prefix no workflow id could start with is a 400 naming prefix.
func TestWorkflows_ListByPrefix(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		tb := setup(t, b, ingest.Config{})
		ctx := t.Context()
		t0 := time.Date(2030, 1, 1, 3, 0, 0, 0, time.UTC)
		var instances []string
		for _, def := range []string{"nightly", "nightly-x"} {
			tb.do("POST", "/v1/workflows", []byte(`{"id":"`+def+`","jobs":[{"id":"a","type":"t"}],"schedule":{"cron":"0 3 * * *"},"overlap":"buffer_one"}`)).requireStatus(t, 201)
			info, err := tb.store.Get(ctx, def)
			require.NoError(t, err)
			for k := range 2 {
				r, err := tb.store.StartInstance(ctx, def, t0.Add(time.Duration(k)*24*time.Hour), info.Payload)
				require.NoError(t, err)
				instances = append(instances, r.ID)
			}
		}
		tb.do("POST", "/v1/workflows", []byte(`{"id":"nightlyz","jobs":[{"id":"a","type":"t"}]}`)).requireStatus(t, 201)
		tb.do("POST", "/v1/workflows", []byte(`{"id":"other","jobs":[{"id":"a","type":"t"}]}`)).requireStatus(t, 201)

		list := func(query string) map[string]ingest.WorkflowSummary {
			t.Helper()
			out := map[string]ingest.WorkflowSummary{}
			cursor := ""
			for i := 0; ; i++ {
				require.Less(t, i, 100)
				var l ingest.WorkflowList
				tb.doJSON("GET", "/v1/workflows?limit=1"+query+"&cursor="+cursor, nil, &l).requireStatus(t, 200)
				for _, w := range l.Workflows {
					out[w.ID] = w
				}
				if cursor = l.NextCursor; cursor == "" {
					return out
				}
			}
		}
		ids := func(m map[string]ingest.WorkflowSummary) []string {
			out := slices.Collect(maps.Keys(m))
			slices.Sort(out)
			return out
		}
		got := list("&prefix=nightly@")
		require.Equal(t, instances[:2], ids(got))
		require.Equal(t, "running", got[instances[0]].State)
		require.False(t, got[instances[0]].Held)
		require.Equal(t, "running", got[instances[1]].State)
		require.True(t, got[instances[1]].Held, "held: it waits for the running one (buffer_one)")
		require.Equal(t, instances[:2], ids(list("&prefix=nightly%40")), "'@' encoded")
		require.Equal(t, instances[1:2], ids(list("&prefix="+instances[1])))
		require.ElementsMatch(t, append(slices.Clone(instances), "nightlyz"), ids(list("&prefix=nightly")))
		require.Equal(t, instances[2:], ids(list("&prefix=nightly-x@&state=running")))
		require.Empty(t, list("&prefix=nightly@&state=succeeded"))
		require.Equal(t, []string{"nightly", "nightly-x"}, ids(list("&prefix=nightly&state=scheduled")))
		require.Equal(t, []string{"nightly-x"}, ids(list("&prefix=nightly-&state=scheduled")))
		var l ingest.WorkflowList
		tb.doJSON("GET", "/v1/workflows?state=scheduled&prefix=nightly@", nil, &l).requireStatus(t, 200)
		require.Equal(t, ingest.WorkflowList{Workflows: []ingest.WorkflowSummary{}}, l, "no definition's id has '@': complete at once")

		for bad, msg := range map[string]string{
			"@":                     "no workflow id starts with '@'",
			"a@b":                   "after '@' an instance's id has only digits",
			"a@1@":                  "no workflow id has two '@'s",
			"a%20b":                 "character ' ' at 1 is in no workflow id",
			"x*":                    "character '*' at 1 is in no workflow id",
			"x%2F":                  "character '/' at 1 is in no workflow id",
			strings.Repeat("x", 65): "65 bytes is longer than any workflow id (at most 64)",
		} {
			for _, state := range []string{"", "&state=scheduled"} {
				e := tb.do("GET", "/v1/workflows?prefix="+bad+state, nil).requireError(t, 400, ingest.CodeInvalid, "prefix")
				require.Contains(t, e.Message, msg, bad)
			}
		}

		// The Go client.
		c := tb.client("")
		cl, err := c.ListWorkflows(ctx, ingest.WorkflowFilter{Prefix: "nightly-x@"}, 0, "")
		require.NoError(t, err)
		for cl.NextCursor != "" {
			more, err := c.ListWorkflows(ctx, ingest.WorkflowFilter{Prefix: "nightly-x@"}, 0, cl.NextCursor)
			require.NoError(t, err)
			cl.Workflows, cl.NextCursor = append(cl.Workflows, more.Workflows...), more.NextCursor
		}
		require.Len(t, cl.Workflows, 2)
		_, err = c.ListWorkflows(ctx, ingest.WorkflowFilter{Prefix: "@x"}, 0, "")
		var ae *ingest.APIError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, 400, ae.Status)
		require.Equal(t, "prefix", ae.Detail.Field)
	})
}

// A scheduled workflow: its definition is created, read, paused, resumed, triggered
// (its instance, "<id>@<due ms>", is addressable) and deleted through the workflow
// routes; its id and a workflow's without a schedule never name both.
func TestWorkflows_Scheduled(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		m := &workflowRecorder{}
		tb := setup(t, b, ingest.Config{Metrics: m})
		body := `{"id":"nightly","jobs":[{"id":"a","type":"t","retry":{"max_attempts":1}},{"id":"b","type":"t","depends_on":["a"]}],
		  "schedule":{"cron":"0 3 * * *","timezone":"Europe/Berlin"},"overlap":"buffer_one","misfire_after":"5m"}`
		var created ingest.WorkflowCreated
		r := tb.doJSON("POST", "/v1/workflows", json.RawMessage(body), &created)
		r.requireStatus(t, 201)
		require.Equal(t, ingest.WorkflowCreated{ID: "nightly", Shard: int(tb.store.ShardOf("nightly")), State: "scheduled", Scheduled: true, Nodes: 2}, created)
		tb.do("POST", "/v1/workflows", []byte(body)).requireStatus(t, 200)
		e := tb.do("POST", "/v1/workflows", []byte(strings.Replace(body, "0 3 * * *", "0 4 * * *", 1))).requireError(t, 409, ingest.CodeConflict, "id")
		require.Contains(t, e.Message, "its schedule differ")
		e = tb.do("POST", "/v1/workflows", []byte(strings.Replace(body, `"depends_on":["a"]`, `"depends_on":[]`, 1))).requireError(t, 409, ingest.CodeConflict, "id")
		require.Contains(t, e.Message, "its jobs differ")
		// The id names a scheduled workflow: not a workflow too, and the other way round.
		e = tb.do("POST", "/v1/workflows", []byte(`{"id":"nightly","jobs":[{"id":"a","type":"t"}]}`)).requireError(t, 409, ingest.CodeConflict, "id")
		require.Contains(t, e.Message, "exists as a scheduled workflow")
		tb.do("POST", "/v1/workflows", []byte(`{"id":"once","jobs":[{"id":"a","type":"t"}]}`)).requireStatus(t, 201)
		e = tb.do("POST", "/v1/workflows", []byte(`{"id":"once","jobs":[{"id":"a","type":"t"}],"schedule":{"cron":"@daily"}}`)).requireError(t, 409, ingest.CodeConflict, "id")
		require.Contains(t, e.Message, "without a schedule")

		w := tb.getWorkflow(t, "nightly")
		require.Equal(t, "scheduled", w.State)
		require.Equal(t, "scheduled", w.JobState)
		require.Equal(t, &ingest.Schedule{Cron: "0 3 * * *", Timezone: "Europe/Berlin"}, w.Schedule)
		require.Equal(t, "buffer_one", w.Overlap)
		require.Equal(t, "run_once", w.Misfire)
		require.Equal(t, "5m0s", w.MisfireAfter)
		require.NotNil(t, w.NextRunAt)
		require.Empty(t, w.Nodes)
		require.NotNil(t, w.Definition)
		require.Len(t, w.Definition.Jobs, 2)
		require.Equal(t, []string{"a"}, w.Definition.Jobs[1].DependsOn)
		require.Equal(t, "all_success", w.Definition.Jobs[1].Rule)

		var sr ingest.StateReply
		tb.doJSON("POST", "/v1/workflows/nightly:pause", nil, &sr).requireStatus(t, 200)
		require.Equal(t, ingest.StateReply{ID: "nightly", State: "paused", Changed: true}, sr)
		require.Equal(t, "paused", tb.getWorkflow(t, "nightly").JobState)
		tb.doJSON("POST", "/v1/workflows/nightly:resume", nil, &sr).requireStatus(t, 200)
		require.Equal(t, ingest.StateReply{ID: "nightly", State: "scheduled", Changed: true}, sr)
		tb.do("POST", "/v1/workflows/nightly:retry", nil).requireError(t, 409, ingest.CodeState, "")

		var tr ingest.WorkflowTriggerReply
		tb.doJSON("POST", "/v1/workflows/nightly:trigger", nil, &tr).requireStatus(t, 200)
		require.Equal(t, "nightly", tr.ID)
		_, due, ok := shard.SplitMember(tr.Run)
		require.True(t, ok, tr.Run)
		require.Equal(t, "nightly@"+strconv.FormatInt(due, 10), tr.Instance)
		// The workflow starter: the definition's run starts the instance.
		def, err := tb.store.Get(t.Context(), "nightly")
		require.NoError(t, err)
		inst, err := tb.store.StartInstance(t.Context(), "nightly", time.UnixMilli(due), def.Payload)
		require.NoError(t, err)
		require.Equal(t, tr.Instance, inst.ID)
		iw := tb.getWorkflow(t, tr.Instance)
		require.Equal(t, "running", iw.State)
		require.Equal(t, tr.Instance+"@a", iw.Nodes[0].JobID)
		require.Equal(t, []string{"a", "b"}, tb.runNodes(t, tr.Instance, nil))
		r = tb.do("GET", "/v1/workflows/"+tr.Instance+"/nodes/b/result", nil)
		r.requireStatus(t, 200)
		require.Equal(t, `"from b"`, string(r.body))
		// An instance has nothing to pause: only its definition has.
		tb.do("POST", "/v1/workflows/"+tr.Instance+":pause", nil).requireError(t, 404, ingest.CodeNotFound, "")
		tb.do("POST", "/v1/workflows/once:pause", nil).requireError(t, 404, ingest.CodeNotFound, "")
		// The definition ops never act on a job that is no definition.
		tb.do("POST", "/v1/jobs", []byte(`{"id":"plain","type":"t","schedule":{"cron":"@daily"}}`)).requireStatus(t, 201)
		for _, v := range []string{"pause", "resume", "trigger", "delete", "cancel", "retry"} {
			tb.do("POST", "/v1/workflows/plain:"+v, nil).requireError(t, 404, ingest.CodeNotFound, "")
		}
		tb.do("GET", "/v1/workflows/plain", nil).requireError(t, 404, ingest.CodeNotFound, "")
		var j ingest.Job
		tb.doJSON("GET", "/v1/jobs/plain", nil, &j).requireStatus(t, 200)
		require.Equal(t, "scheduled", j.State)

		// :cancel on a definition cancels it (no more instances); :delete removes it.
		tb.do("POST", "/v1/workflows", []byte(`{"id":"weekly","jobs":[{"id":"a","type":"t"}],"schedule":{"cron":"@weekly"}}`)).requireStatus(t, 201)
		tb.doJSON("POST", "/v1/workflows/weekly:cancel", nil, &sr).requireStatus(t, 200)
		require.Equal(t, ingest.StateReply{ID: "weekly", State: "cancelled", Changed: true}, sr)
		require.Equal(t, "cancelled", tb.getWorkflow(t, "weekly").JobState)
		tb.doJSON("POST", "/v1/workflows/nightly:delete", nil, &sr).requireStatus(t, 200)
		require.Equal(t, ingest.StateReply{ID: "nightly", State: "deleted", Changed: true}, sr)
		tb.do("GET", "/v1/workflows/nightly", nil).requireError(t, 404, ingest.CodeNotFound, "")
		tb.do("POST", "/v1/workflows/nightly:delete", nil).requireError(t, 404, ingest.CodeNotFound, "")
		require.Equal(t, "succeeded", tb.getWorkflow(t, tr.Instance).State, "the instance outlives its definition")
		require.Equal(t, map[string]int{"created true": 2, "created false": 1}, m.all())
	})
}

// Ids with '@' (instances, node jobs) are addressable, and a path only ever addresses
// the id it names: encoded slashes and dot segments never reach another workflow or
// route.
func TestWorkflows_Paths(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		tb := setup(t, b, ingest.Config{})
		tb.do("POST", "/v1/workflows", []byte(`{"id":"x","jobs":[{"id":"a","type":"t"}]}`)).requireStatus(t, 201)
		tb.do("POST", "/v1/workflows", []byte(`{"id":"victim","jobs":[{"id":"a","type":"t"}]}`)).requireStatus(t, 201)
		tb.do("POST", "/v1/jobs", []byte(`{"id":"job-victim","type":"t","schedule":{"delay":"1h"}}`)).requireStatus(t, 201)

		// "x@a" is x's node's job, no workflow; "x@1" no workflow either: never x.
		tb.do("GET", "/v1/workflows/x@a", nil).requireError(t, 404, ingest.CodeNotFound, "")
		tb.do("GET", "/v1/workflows/x%40a", nil).requireError(t, 404, ingest.CodeNotFound, "")
		tb.do("POST", "/v1/workflows/x@1:cancel", nil).requireError(t, 404, ingest.CodeNotFound, "")
		require.Equal(t, "x", tb.getWorkflow(t, "%78").ID, "each segment is decoded on its own")
		var j ingest.Job
		tb.doJSON("GET", "/v1/jobs/x@a", nil, &j).requireStatus(t, 200)
		require.Equal(t, "x@a", j.ID)
		tb.doJSON("GET", "/v1/jobs/x%40a", nil, &j).requireStatus(t, 200)

		for _, p := range []string{"..%2Fvictim", "x%2F..%2Fvictim", "%2E%2E", "x@..", "x@.", "x@", "@x", "x@@a", "x@a%2Fb",
			"..%2Fjobs%2Fjob-victim", "%zz", "x%2F..%2F..%2Fmetrics"} {
			for _, rt := range []struct{ method, suffix string }{{"GET", ""}, {"POST", ":cancel"}, {"POST", ":retry"},
				{"POST", ":pause"}, {"POST", ":delete"}, {"GET", "/nodes/a/result"}} {
				tb.do(rt.method, "/v1/workflows/"+p+rt.suffix, nil).requireError(t, 400, ingest.CodeInvalid, "id")
			}
		}
		for _, p := range []string{"..", "%2E%2E", "..%2F..%2Fmetrics", "a@b", "a%2Fb", "%zz", "a:b"} {
			tb.do("GET", "/v1/workflows/x/nodes/"+p+"/result", nil).requireError(t, 400, ingest.CodeInvalid, "node")
		}
		// Dot segments as sent are segments like any other: no route.
		for _, p := range []string{"/v1/workflows/../jobs/job-victim", "/v1/workflows/x/nodes/../../victim", "/v1/workflows/x/nodes/a/result/x",
			"/v1/workflows/x/nodes//result", "/v1/workflows/x/runs", "/v1/workflows/"} {
			tb.do("GET", p, nil).requireError(t, 404, ingest.CodeNotFound, "")
		}
		for _, id := range []string{"victim", "x"} {
			require.Equal(t, "running", tb.getWorkflow(t, id).State)
		}
		tb.doJSON("GET", "/v1/jobs/job-victim", nil, &j).requireStatus(t, 200)
		require.Equal(t, "scheduled", j.State)

		// The Go client escapes ids: the server refuses them rather than reaching elsewhere.
		c := tb.client("")
		_, err := c.CancelWorkflow(t.Context(), "../victim")
		require.True(t, ingest.IsCode(err, ingest.CodeInvalid), "%v", err)
		_, err = c.NodeResult(t.Context(), "x", "../../victim")
		require.True(t, ingest.IsCode(err, ingest.CodeInvalid), "%v", err)
		require.Equal(t, "running", tb.getWorkflow(t, "victim").State)
	})
}

// A node's job may be read, cancelled and its runs listed through /v1/jobs, but only its
// workflow decides when it runs: pause, resume, trigger, update and delete are refused
// with 409 and why (they were 500 internal errors).
func TestWorkflows_NodeJobOperations(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		tb := setup(t, b, ingest.Config{})
		tb.do("POST", "/v1/workflows", []byte(`{"id":"n","jobs":[{"id":"a","type":"t"},{"id":"b","type":"t","depends_on":["a"]}]}`)).requireStatus(t, 201)
		for _, rq := range []struct {
			method, path, body, op string
		}{
			{"POST", "/v1/jobs/n@b:pause", "", "pause"},
			{"POST", "/v1/jobs/n@b:resume", "", "resume"},
			{"POST", "/v1/jobs/n@b:trigger", "", "trigger"},
			{"POST", "/v1/jobs/n@b:delete", "", "delete"},
			{"PATCH", "/v1/jobs/n@b", `{"priority":1}`, "update"},
		} {
			var body []byte
			if rq.body != "" {
				body = []byte(rq.body)
			}
			e := tb.do(rq.method, rq.path, body).requireError(t, 409, ingest.CodeState, "")
			require.Equal(t, rq.op+` job "n@b": it is node "b" of workflow "n", which decides when it runs: cancel or retry the workflow instead`, e.Message)
		}
		// In a bulk action too.
		var br ingest.BulkReply
		tb.doJSON("POST", "/v1/jobs:bulk", map[string]any{"action": "pause", "ids": []string{"n@a"}}, &br).requireStatus(t, 200)
		require.Equal(t, 1, br.Failed)
		require.Contains(t, fmt.Sprint(br), "decides when it runs")

		var j ingest.Job
		tb.doJSON("GET", "/v1/jobs/n@b", nil, &j).requireStatus(t, 200)
		require.Equal(t, "waiting", j.State)
		tb.do("GET", "/v1/jobs/n@b/runs", nil).requireStatus(t, 200)
		var sr ingest.StateReply
		tb.doJSON("DELETE", "/v1/jobs/n@a", nil, &sr).requireStatus(t, 200)
		require.True(t, sr.Changed)
		w := tb.getWorkflow(t, "n")
		require.Equal(t, "failed", w.State)
		require.Equal(t, map[string]string{"a": "cancelled", "b": "upstream_failed"}, nodeStates(w))
	})
}

// Read tokens may read workflows; changing them takes a write token.
func TestWorkflows_Scopes(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{Tokens: []ingest.Token{{Secret: "r", Scope: ingest.ScopeRead}, {Secret: "w", Scope: ingest.ScopeWrite}}})
	reader, writer := "Bearer r", "Bearer w"
	body := []byte(`{"id":"s","jobs":[{"id":"a","type":"t"}]}`)
	tb.do("POST", "/v1/workflows", body, "Authorization", reader).requireError(t, 403, ingest.CodeForbidden, "")
	tb.do("POST", "/v1/workflows", body).requireError(t, 401, ingest.CodeUnauthenticated, "")
	tb.do("POST", "/v1/workflows", body, "Authorization", writer).requireStatus(t, 201)
	for _, p := range []string{"/v1/workflows", "/v1/workflows/s"} {
		tb.do("GET", p, nil, "Authorization", reader).requireStatus(t, 200)
		tb.do("GET", p, nil).requireError(t, 401, ingest.CodeUnauthenticated, "")
	}
	tb.do("GET", "/v1/workflows/s/nodes/a/result", nil, "Authorization", reader).requireError(t, 404, ingest.CodeNotFound, "node")
	for _, v := range []string{"cancel", "retry", "pause", "resume", "trigger", "delete"} {
		tb.do("POST", "/v1/workflows/s:"+v, nil, "Authorization", reader).requireError(t, 403, ingest.CodeForbidden, "")
	}
	tb.do("POST", "/v1/workflows/s:cancel", nil, "Authorization", writer).requireStatus(t, 200)
	tb.do("POST", "/v1/workflows/s:pause", nil, "Authorization", writer).requireError(t, 404, ingest.CodeNotFound, "")
	tb.do("DELETE", "/v1/workflows/s", nil, "Authorization", writer).requireError(t, 405, ingest.CodeMethod, "")

	// The actions are in the audit log; creates and reads are not.
	var page ingest.AuditPage
	tb.doJSON("GET", "/v1/audit", nil, &page, "Authorization", writer).requireStatus(t, 200)
	var got []string
	for _, e := range page.Entries {
		got = append(got, e.Action+" "+e.Target+" "+e.Result)
	}
	require.Equal(t, []string{"workflow.pause s 404 not_found", "workflow.cancel s ok"}, got)
}

// The Go client covers every workflow endpoint.
func TestClient_Workflows(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		tb := setup(t, b, ingest.Config{})
		c := tb.client("")
		ctx := t.Context()
		req := ingest.WorkflowRequest{ID: "cw", Jobs: []ingest.NodeRequest{
			{ID: "a", Type: "t", Payload: json.RawMessage(`{"n":1}`), Retry: &ingest.Retry{MaxAttempts: 1}},
			{ID: "b", Type: "t", DependsOn: []string{"a"}, Rule: "all_done"},
		}}
		w, created, err := c.CreateWorkflow(ctx, req, "")
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, "running", w.State)
		_, created, err = c.CreateWorkflow(ctx, req, "")
		require.NoError(t, err)
		require.False(t, created)
		req.Jobs[1].DependsOn = []string{"zz"}
		_, _, err = c.CreateWorkflow(ctx, req, "")
		var ae *ingest.APIError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, "jobs[1].depends_on", ae.Detail.Field)
		// An Idempotency-Key names a workflow without an id.
		kw, created, err := c.CreateWorkflow(ctx, ingest.WorkflowRequest{Jobs: []ingest.NodeRequest{{ID: "a", Type: "t"}}}, "key-1")
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, ingest.IdempotencyID("key-1"), kw.ID)
		_, created, err = c.CreateWorkflow(ctx, ingest.WorkflowRequest{Jobs: []ingest.NodeRequest{{ID: "a", Type: "t"}}}, "key-1")
		require.NoError(t, err)
		require.False(t, created)

		got, err := c.Workflow(ctx, "cw")
		require.NoError(t, err)
		require.Len(t, got.Nodes, 2)
		l, err := c.ListWorkflows(ctx, ingest.WorkflowFilter{State: "running"}, 0, "")
		require.NoError(t, err)
		for l.NextCursor != "" {
			more, err := c.ListWorkflows(ctx, ingest.WorkflowFilter{State: "running"}, 0, l.NextCursor)
			require.NoError(t, err)
			l.Workflows = append(l.Workflows, more.Workflows...)
			l.NextCursor = more.NextCursor
		}
		require.Len(t, l.Workflows, 2)

		tb.runNodes(t, "cw", func(n string) bool { return n == "a" })
		got, err = c.Workflow(ctx, "cw")
		require.NoError(t, err)
		require.Equal(t, "failed", got.State)
		res, err := c.NodeResult(ctx, "cw", "b")
		require.NoError(t, err)
		require.Equal(t, `"from b"`, string(res), "all_done ran b after a failed")
		_, err = c.NodeResult(ctx, "cw", "a")
		require.True(t, ingest.IsCode(err, ingest.CodeNotFound), "%v", err)
		sr, err := c.RetryWorkflow(ctx, "cw")
		require.NoError(t, err)
		require.True(t, sr.Changed)
		sr, err = c.CancelWorkflow(ctx, "cw")
		require.NoError(t, err)
		require.Equal(t, ingest.StateReply{ID: "cw", State: "cancelled", Changed: true}, sr)

		_, _, err = c.CreateWorkflow(ctx, ingest.WorkflowRequest{ID: "cs", Jobs: []ingest.NodeRequest{{ID: "a", Type: "t"}},
			Schedule: &ingest.Schedule{Cron: "@hourly"}}, "")
		require.NoError(t, err)
		sr, err = c.PauseWorkflow(ctx, "cs")
		require.NoError(t, err)
		require.Equal(t, "paused", sr.State)
		sr, err = c.ResumeWorkflow(ctx, "cs")
		require.NoError(t, err)
		require.Equal(t, "scheduled", sr.State)
		tr, err := c.TriggerWorkflow(ctx, "cs")
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(tr.Instance, "cs@"), tr.Instance)
		sr, err = c.DeleteWorkflow(ctx, "cs")
		require.NoError(t, err)
		require.Equal(t, "deleted", sr.State)
		_, err = c.Workflow(ctx, "cs")
		require.True(t, ingest.IsCode(err, ingest.CodeNotFound), "%v", err)
		_, err = c.Workflow(ctx, "")
		require.Error(t, err)
	})
}

// workflowRecorder records WorkflowMetrics calls (and is an ingest.Metrics).
type workflowRecorder struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *workflowRecorder) HTTPRequest(string, int, time.Duration) {}

func (m *workflowRecorder) add(k string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[k]++
}

func (m *workflowRecorder) WorkflowCreated(scheduled bool) {
	m.add("created " + strconv.FormatBool(scheduled))
}
func (m *workflowRecorder) WorkflowCancelled() { m.add("cancelled") }
func (m *workflowRecorder) WorkflowRetried()   { m.add("retried") }

func (m *workflowRecorder) all() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for k, v := range m.n {
		out[k] = v
	}
	return out
}

func (m *workflowRecorder) count(k string) int { return m.all()[k] }

var _ ingest.WorkflowMetrics = (*workflowRecorder)(nil)

// The same graph sent again with its nodes, or a node's parents, in another order is the
// same definition (200), not a 409 that names no node: a client that builds the list from
// a map sends another order each time it retries.
func TestWorkflows_CreateSameGraphOtherOrder(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{})
	tb.do("POST", "/v1/workflows", []byte(`{"id":"o","jobs":[{"id":"a","type":"t"},{"id":"b","type":"u"},
		{"id":"c","type":"t","depends_on":["a","b"]}]}`)).requireStatus(t, 201)
	for _, body := range []string{
		`{"id":"o","jobs":[{"id":"a","type":"t"},{"id":"b","type":"u"},{"id":"c","type":"t","depends_on":["b","a"]}]}`,
		`{"id":"o","jobs":[{"id":"b","type":"u"},{"id":"a","type":"t"},{"id":"c","type":"t","depends_on":["a","b"]}]}`,
		`{"id":"o","jobs":[{"id":"c","type":"t","depends_on":["b","a"]},{"id":"b","type":"u"},{"id":"a","type":"t"}]}`,
	} {
		tb.do("POST", "/v1/workflows", []byte(body)).requireStatus(t, 200)
	}
	e := tb.do("POST", "/v1/workflows", []byte(`{"id":"o","jobs":[{"id":"b","type":"t"},{"id":"a","type":"t"},
		{"id":"c","type":"t","depends_on":["a","b"]}]}`)).requireError(t, 409, ingest.CodeConflict, "id")
	require.Contains(t, e.Message, `nodes "b" (its type)`)
	require.Equal(t, []string{"a", "b"}, tb.getWorkflow(t, "o").Nodes[2].DependsOn, "the stored workflow is as first sent")
}

// A scheduled workflow sent again with its nodes or a node's parents in another order
// is the same definition too (200, the stored one kept); another graph is a conflict.
func TestWorkflows_CreateSameDefinitionOtherOrder(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{})
	sched := `"schedule":{"cron":"0 3 * * *","timezone":"Europe/Paris"}`
	tb.do("POST", "/v1/workflows", []byte(`{"id":"d",`+sched+`,"jobs":[{"id":"a","type":"t"},{"id":"b","type":"u"},
		{"id":"c","type":"t","depends_on":["a","b"]}]}`)).requireStatus(t, 201)
	for _, body := range []string{
		`{"id":"d",` + sched + `,"jobs":[{"id":"a","type":"t"},{"id":"b","type":"u"},{"id":"c","type":"t","depends_on":["b","a"]}]}`,
		`{"id":"d",` + sched + `,"jobs":[{"id":"c","type":"t","depends_on":["b","a"]},{"id":"b","type":"u"},{"id":"a","type":"t"}]}`,
	} {
		tb.do("POST", "/v1/workflows", []byte(body)).requireStatus(t, 200)
	}
	tb.do("POST", "/v1/workflows", []byte(`{"id":"d",`+sched+`,"jobs":[{"id":"b","type":"t"},{"id":"a","type":"t"},
		{"id":"c","type":"t","depends_on":["a","b"]}]}`)).requireError(t, 409, ingest.CodeConflict, "id")
	tb.do("POST", "/v1/workflows", []byte(`{"id":"d","schedule":{"cron":"0 4 * * *","timezone":"Europe/Paris"},
		"jobs":[{"id":"a","type":"t"},{"id":"b","type":"u"},{"id":"c","type":"t","depends_on":["a","b"]}]}`)).requireError(t, 409, ingest.CodeConflict, "id")
}
