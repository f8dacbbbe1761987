package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/ui"
)

// wfNode is a node of a test workflow: type t, one attempt.
func wfNode(id string, rule job.Rule, deps ...string) job.Node {
	return job.Node{Job: job.Job{ID: id, Type: "etl." + id, Retry: job.RetryPolicy{MaxAttempts: 1}}, DependsOn: deps, Rule: rule}
}

// etlWorkflow is the workflow of docs/workflows.md: extract, transform, then load and
// report side by side, and alert if anything failed.
func etlWorkflow(id string) *job.Workflow {
	return &job.Workflow{ID: id, Jobs: []job.Node{
		wfNode("extract", ""), wfNode("transform", "", "extract"), wfNode("load", "", "transform"),
		wfNode("report", "", "transform"), wfNode("alert", job.RuleOneFailed, "load", "report"),
	}}
}

// createWorkflows creates etl (running), the scheduled definition nightly, and its
// instance nightly@<due ms>, whose id it returns.
func createWorkflows(t *testing.T, store *shard.Store) (instance string) {
	t.Helper()
	ctx := context.Background()
	_, err := store.CreateWorkflow(ctx, etlWorkflow("etl"))
	require.NoError(t, err)
	def := &job.Workflow{ID: "nightly", Schedule: &job.Schedule{Cron: "0 3 * * *", TimeZone: "Europe/Berlin"}, Overlap: job.OverlapAllow,
		Jobs: []job.Node{wfNode("extract", ""), wfNode("load", "", "extract")}}
	_, err = store.CreateWorkflow(ctx, def)
	require.NoError(t, err)
	info, err := store.Get(ctx, "nightly")
	require.NoError(t, err)
	due := time.UnixMilli(1893466800000)
	res, err := store.StartInstance(ctx, "nightly", due, info.Payload)
	require.NoError(t, err)
	require.Equal(t, "nightly@1893466800000", res.ID)
	return res.ID
}

var svgNode = regexp.MustCompile(`<a class="node ([a-z_]+)" href="([^"]+)" data-node="([^"]+)">`)

// drawn returns the drawn nodes of a workflow page: node id → state class, and their links.
func drawn(body string) (states, links map[string]string) {
	states, links = map[string]string{}, map[string]string{}
	for _, m := range svgNode.FindAllStringSubmatch(body, -1) {
		states[m[3]], links[m[3]] = m[1], m[2]
	}
	return states, links
}

func TestUI_WorkflowList(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, testTokens, ui.Config{})
	instance := createWorkflows(t, tb.store)
	br := tb.browser()
	br.login(readToken)

	p := br.get("/ui/workflows")
	require.Equal(t, 200, p.status, p.body)
	require.Contains(t, p.body, `<a href="/ui/workflows" class="on">Workflows</a>`)
	// The definitions first, with their schedule and next run.
	require.Contains(t, p.body, `<table id="wf-defs">`)
	require.Contains(t, p.body, `<a href="/ui/workflows/nightly">nightly</a>`)
	require.Contains(t, p.body, `<code>0 3 * * *</code> Europe/Berlin`)
	// Then the workflows and instances, with state and counts.
	require.Contains(t, p.body, `<tr data-wf="etl"><td><a href="/ui/workflows/etl">etl</a></td><td><span class="badge running">running</span></td>`+"\n"+`<td class="n">5</td><td class="n">5</td>`)
	require.Contains(t, p.body, `<a href="/ui/workflows/`+instance+`">`+instance+`</a>`)
	require.Contains(t, p.body, `data-live="/ui/events?page=%2Fui%2Fworkflows&amp;as=`)

	p = br.get("/ui/workflows?state=scheduled")
	require.Equal(t, 200, p.status)
	require.Contains(t, p.body, `href="/ui/workflows/nightly"`)
	require.NotContains(t, p.body, `href="/ui/workflows/etl"`)
	require.NotContains(t, p.body, `id="workflows"`)

	p = br.get("/ui/workflows?state=failed")
	require.Equal(t, 200, p.status)
	require.NotContains(t, p.body, `href="/ui/workflows/etl"`)
	require.NotContains(t, p.body, `id="wf-defs"`)
	require.Contains(t, p.body, "No workflows failed.")

	// An id prefix: nightly's instances.
	p = br.get("/ui/workflows?prefix=nightly%40")
	require.Equal(t, 200, p.status, p.body)
	require.Contains(t, p.body, `<input name="prefix" id="wf-prefix" value="nightly@"`)
	require.Contains(t, p.body, `<a href="/ui/workflows/`+instance+`">`+instance+`</a>`)
	require.NotContains(t, p.body, `href="/ui/workflows/etl"`)
	require.NotContains(t, p.body, `id="wf-defs"`, "no definition's id has '@'")
	p = br.get("/ui/workflows?prefix=e")
	require.Equal(t, 200, p.status, p.body)
	require.Contains(t, p.body, `href="/ui/workflows/etl"`)
	require.NotContains(t, p.body, `href="/ui/workflows/nightly"`)
	p = br.get("/ui/workflows?prefix=nigh")
	require.Contains(t, p.body, `<a href="/ui/workflows/nightly">nightly</a>`, "the definitions, with the prefix")
	require.Contains(t, p.body, `<a href="/ui/workflows/`+instance+`">`)
	p = br.get("/ui/workflows?prefix=zz")
	require.Contains(t, p.body, "No workflows whose id starts with zz.")
	p = br.get("/ui/workflows?prefix=nightly%40x")
	require.Equal(t, http.StatusBadRequest, p.status)
	require.Contains(t, p.body, "after &#39;@&#39; an instance&#39;s id has only digits")

	p = br.get("/ui/workflows?state=sleepy")
	require.Equal(t, http.StatusBadRequest, p.status)
	require.Contains(t, p.body, "must be running, succeeded, failed, cancelled or scheduled")

	// The live fragment of the list.
	p = br.get("/ui/events?once=1&page=%2Fui%2Fworkflows")
	require.Equal(t, 200, p.status, p.body)
	frags := fragmentsOf(t, p.body)
	require.Contains(t, frags["workflows"], `href="/ui/workflows/etl"`)
}

func TestUI_WorkflowPage(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, testTokens, ui.Config{})
	ctx := context.Background()
	instance := createWorkflows(t, tb.store)
	br := tb.browser()
	br.login(writeToken)

	p := br.get("/ui/workflows/etl")
	require.Equal(t, 200, p.status, p.body)
	require.Contains(t, p.body, `<title>Workflow etl · tock</title>`)
	require.Contains(t, p.body, `<span class="badge running" id="wf-state">running</span>`)
	require.Contains(t, p.body, `<svg id="wf-graph"`)
	states, links := drawn(p.body)
	require.Equal(t, map[string]string{"extract": "ready", "transform": "waiting", "load": "waiting", "report": "waiting", "alert": "waiting"}, states)
	require.Equal(t, "/ui/jobs/etl@extract", links["extract"])
	require.Equal(t, 5, strings.Count(p.body, `marker-end="url(#arrow)"`), "one edge per dependency")
	require.Contains(t, p.body, `<tr data-node="alert"><td><a href="/ui/jobs/etl@alert">alert</a></td><td><span class="badge waiting">waiting</span></td><td>one_failed</td>`+"\n"+`<td>load, report</td>`)
	require.Contains(t, p.body, `<span class="badge ready">1 ready</span>`)
	require.Contains(t, p.body, `<span class="badge waiting">4 waiting</span>`)
	require.Contains(t, p.body, `id="act-cancel"`)
	require.NotContains(t, p.body, `id="act-retry"`)
	require.Contains(t, p.body, `data-live="/ui/events?page=%2Fui%2Fworkflows%2Fetl&amp;as=`)
	// A node's job page.
	p = br.get("/ui/jobs/etl@extract")
	require.Equal(t, 200, p.status, p.body)
	require.Contains(t, p.body, `node <b>extract</b> of <a href="/ui/workflows/etl" id="job-workflow">etl</a>`)

	// An instance: its id holds an '@', as sent or encoded; it links to its definition.
	for _, path := range []string{"/ui/workflows/" + instance, "/ui/workflows/" + strings.ReplaceAll(instance, "@", "%40")} {
		p = br.get(path)
		require.Equal(t, 200, p.status, path)
		require.Contains(t, p.body, `<code id="wf-id">`+instance+`</code>`)
		require.Contains(t, p.body, `<tr><th>Started by</th><td><a href="/ui/workflows/nightly">nightly</a></td></tr>`)
		states, links = drawn(p.body)
		require.Equal(t, map[string]string{"extract": "ready", "load": "waiting"}, states)
		require.Equal(t, "/ui/jobs/"+instance+"@load", links["load"])
	}

	// The definition: schedule, its graph (types, no states), actions of a definition.
	p = br.get("/ui/workflows/nightly")
	require.Equal(t, 200, p.status, p.body)
	require.Contains(t, p.body, `Scheduled workflow <code id="wf-id">nightly</code>`)
	require.Contains(t, p.body, `cron <code>0 3 * * *</code> in Europe/Berlin`)
	require.Contains(t, p.body, `<g class="node def" data-node="load">`)
	require.Contains(t, p.body, `>etl.load</text>`)
	for _, id := range []string{"act-pause", "act-trigger", "act-cancel", "act-delete"} {
		require.Contains(t, p.body, `id="`+id+`"`)
	}
	// Its instances, found by the listing of the ids that start with "nightly@": the
	// one started, running, whose starting run never ended (StartInstance without a
	// run of the definition's job).
	require.Contains(t, p.body, `<table id="wf-instances">`)
	require.Contains(t, p.body, `<tr data-wf="`+instance+`"><td><a href="/ui/workflows/`+instance+`">`+instance+`</a></td><td>2030-01-01 03:00:00Z</td>`+"\n"+
		`<td><span class="badge running">running</span></td>`+"\n"+`<td class="n">2 of 2</td>`)
	require.Contains(t, p.body, `1 instance: <a href="/ui/workflows?prefix=nightly%40" id="all-instances">all instances</a>.`)

	// Ids that are no workflow's: 400, never another page; an unknown one: 404.
	for _, path := range []string{"/ui/workflows/..", "/ui/workflows/%2E%2E", "/ui/workflows/x%2F..%2Fx", "/ui/workflows/x%3Acancel",
		"/ui/workflows/a@@b", "/ui/workflows/@a", "/ui/workflows/etl/nodes", "/ui/workflows/" + strings.Repeat("x", job.MaxWorkflowIDLen+1),
		"/ui/events?page=%2Fui%2Fworkflows%2F..%2Fx"} {
		require.Equal(t, http.StatusBadRequest, br.get(path).status, path)
	}
	p = br.get("/ui/workflows/nope")
	require.Equal(t, http.StatusNotFound, p.status)
	require.Contains(t, p.body, `workflow &#34;nope&#34; not found`)

	// Live fragments: the state, the drawing, the nodes.
	p = br.get("/ui/events?once=1&page=" + url.QueryEscape("/ui/workflows/"+instance))
	require.Equal(t, 200, p.status, p.body)
	frags := fragmentsOf(t, p.body)
	require.Contains(t, frags["graph"], `data-node="load"`)
	require.Contains(t, frags["workflow"], `id="wf-state"`)
	require.Contains(t, frags["nodes"], `id="wf-nodes"`)

	// Cancel, then retry.
	p = br.post("/ui/actions/workflow", url.Values{"id": {"etl"}, "action": {"cancel"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Equal(t, "/ui/workflows/etl", p.header.Get("Location"))
	w, err := tb.store.Workflow(ctx, "etl")
	require.NoError(t, err)
	require.Equal(t, job.WorkflowCancelled, w.State)
	p = br.get("/ui/workflows/etl")
	require.Contains(t, p.body, `id="act-retry"`)
	require.NotContains(t, p.body, `id="act-cancel"`)
	states, _ = drawn(p.body)
	require.Equal(t, "cancelled", states["alert"])
	p = br.post("/ui/actions/workflow", url.Values{"id": {"etl"}, "action": {"retry"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	w, err = tb.store.Workflow(ctx, "etl")
	require.NoError(t, err)
	require.Equal(t, job.WorkflowRunning, w.State)

	// A definition: pause, resume, trigger (an instance's run), delete.
	for _, a := range []string{"pause", "resume", "trigger"} {
		p = br.post("/ui/actions/workflow", url.Values{"id": {"nightly"}, "action": {a}})
		require.Equal(t, http.StatusSeeOther, p.status, a+": "+p.body)
		require.Equal(t, "/ui/workflows/nightly", p.header.Get("Location"))
	}
	// The workflow starter (worker.Worker.HandleWorkflows) runs the triggered run: the
	// instance it starts is listed, with its state.
	sh := tb.store.ShardOf("nightly")
	claimed, err := tb.store.Claim(ctx, sh, job.WorkflowQueue, 10, "w1", "n1")
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	started, err := tb.store.StartInstance(ctx, "nightly", claimed[0].Due, claimed[0].Payload)
	require.NoError(t, err)
	errs, err := tb.store.FinishRuns(ctx, sh, []shard.Finish{{Member: claimed[0].Member, Token: claimed[0].Token, Outcome: shard.Succeeded}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	p = br.get("/ui/workflows/nightly")
	require.Contains(t, p.body, `id="act-pause"`)
	require.Contains(t, p.body, `<tr data-wf="`+started.ID+`"><td><a href="/ui/workflows/`+started.ID+`">`+started.ID+`</a></td>`)
	// The newest first: the instance of 2030, then the one started now.
	require.Less(t, strings.Index(p.body, `<tr data-wf="`+instance+`">`), strings.Index(p.body, `<tr data-wf="`+started.ID+`">`))
	require.Contains(t, p.body, `2 instances, the newest first`)
	// A buffer_one definition's held instance is listed, marked held.
	buf := &job.Workflow{ID: "buf", Schedule: &job.Schedule{Cron: "0 3 * * *"}, Overlap: job.OverlapBufferOne,
		Jobs: []job.Node{wfNode("a", "")}}
	_, err = tb.store.CreateWorkflow(ctx, buf)
	require.NoError(t, err)
	bufInfo, err := tb.store.Get(ctx, "buf")
	require.NoError(t, err)
	var bufIDs []string
	for k := range 2 {
		r, err := tb.store.StartInstance(ctx, "buf", time.UnixMilli(1893466800000).Add(time.Duration(k)*time.Hour), bufInfo.Payload)
		require.NoError(t, err)
		bufIDs = append(bufIDs, r.ID)
	}
	p = br.get("/ui/workflows/buf")
	require.Equal(t, 200, p.status, p.body)
	require.Contains(t, p.body, `<tr data-wf="`+bufIDs[1]+`">`)
	require.Contains(t, p.body, `<td><span class="badge running">running</span> <span class="badge retrying" title="waiting for the running instance to end">held</span></td>`)
	require.Contains(t, p.body, `<tr data-wf="`+bufIDs[0]+`">`)
	require.Equal(t, 1, strings.Count(p.body, `>held</span>`))
	require.NotContains(t, p.body, "nightly@", "only its own instances")
	// Its instances in the live fragment too.
	p = br.get("/ui/events?once=1&page=%2Fui%2Fworkflows%2Fbuf")
	require.Equal(t, 200, p.status, p.body)
	frags = fragmentsOf(t, p.body)
	require.Contains(t, frags["nodes"], `<tr data-wf="`+bufIDs[1]+`">`)

	p = br.post("/ui/actions/workflow", url.Values{"id": {"etl"}, "action": {"pause"}})
	require.Equal(t, http.StatusNotFound, p.status, "pause is a definition's")
	p = br.post("/ui/actions/workflow", url.Values{"id": {"etl"}, "action": {"explode"}})
	require.Equal(t, http.StatusBadRequest, p.status)
	p = br.post("/ui/actions/workflow", url.Values{"id": {"nightly"}, "action": {"delete"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Equal(t, "/ui/workflows?state=scheduled", p.header.Get("Location"))
	require.Equal(t, http.StatusNotFound, br.get("/ui/workflows/nightly").status)
}

// A read session sees the pages without their buttons, and its actions are refused by
// the API (403), the workflow unchanged.
func TestUI_WorkflowReadOnly(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, testTokens, ui.Config{})
	ctx := context.Background()
	createWorkflows(t, tb.store)
	br := tb.browser()
	br.login(readToken)
	for _, path := range []string{"/ui/workflows/etl", "/ui/workflows/nightly"} {
		p := br.get(path)
		require.Equal(t, 200, p.status, path)
		require.NotContains(t, p.body, `id="wf-actions"`, path)
		require.NotContains(t, p.body, `name="action"`, path)
	}
	for _, f := range []url.Values{{"id": {"etl"}, "action": {"cancel"}}, {"id": {"nightly"}, "action": {"pause"}}} {
		p := br.post("/ui/actions/workflow", f)
		require.Equal(t, http.StatusForbidden, p.status, p.body)
	}
	w, err := tb.store.Workflow(ctx, "etl")
	require.NoError(t, err)
	require.Equal(t, job.WorkflowRunning, w.State)
	info, err := tb.store.Get(ctx, "nightly")
	require.NoError(t, err)
	require.Equal(t, job.StateScheduled, info.State)
}

// More nodes than are drawn: no drawing, the counts per state instead.
func TestUI_WorkflowTooLargeToDraw(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, nil, ui.Config{})
	wf := &job.Workflow{ID: "wide"}
	for i := range 401 {
		wf.Jobs = append(wf.Jobs, wfNode("n"+strconv.Itoa(i), ""))
	}
	wf.Jobs = append(wf.Jobs, wfNode("join", job.RuleAllDone, "n0", "n1"))
	_, err := tb.store.CreateWorkflow(context.Background(), wf)
	require.NoError(t, err)
	p := tb.browser().get("/ui/workflows/wide")
	require.Equal(t, 200, p.status)
	require.NotContains(t, p.body, "<svg")
	require.Contains(t, p.body, `402 nodes: not drawn (more than 400). By state: <span class="badge waiting">1 waiting</span> <span class="badge ready">401 ready</span>`)
	require.Contains(t, p.body, `<tr data-node="n400">`)
}

// A node's job page offers what the API allows on it: Cancel (the node cancelled), not
// Pause, Trigger or Delete, which the API always refuses (409: its workflow decides when
// it runs), and points to the workflow's own actions instead.
func TestUI_NodeJobActions(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, testTokens, ui.Config{})
	createWorkflows(t, tb.store)
	br := tb.browser()
	br.login(writeToken)
	for _, a := range []string{"pause", "trigger", "delete"} {
		p := br.post("/ui/actions/job", url.Values{"id": {"etl@load"}, "action": {a}})
		require.Equal(t, http.StatusConflict, p.status, a+": the API refuses it on a node's job")
	}
	p := br.get("/ui/jobs/etl@load")
	require.Equal(t, 200, p.status, p.body)
	require.Contains(t, p.body, `id="act-cancel"`)
	for _, id := range []string{"act-pause", "act-resume", "act-trigger", "act-delete"} {
		require.NotContains(t, p.body, `id="`+id+`"`, "a button the API always refuses on a node's job")
	}
	// An ordinary job keeps them all.
	p = br.get("/ui/jobs/nightly")
	require.Equal(t, 200, p.status, p.body)
	for _, id := range []string{"act-pause", "act-trigger", "act-cancel", "act-delete"} {
		require.Contains(t, p.body, `id="`+id+`"`)
	}
}

// A job's page offers the actions that do something in the job's state, in every state:
// a dead job's Cancel, which changed nothing, is gone.
func TestUI_JobActionsByState(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, testTokens, ui.Config{})
	ctx := context.Background()
	store := tb.store
	createWorkflows(t, store) // etl: extract ready, the others waiting
	once := func(id string, attempts int, now bool) {
		t.Helper()
		j := &job.Job{ID: id, Queue: id, Type: "t", Retry: job.RetryPolicy{MaxAttempts: attempts}, Schedule: job.Schedule{Delay: time.Hour}}
		if now {
			j.Schedule = job.Schedule{Now: true}
		}
		_, err := store.Create(ctx, []*job.Job{j})
		require.NoError(t, err)
	}
	// run claims the ready run of queue q and ends it with outcome o (none: it runs on).
	run := func(q string, o shard.Outcome) {
		t.Helper()
		sh := store.ShardOf(q)
		claimed, err := store.Claim(ctx, sh, q, 1, "w1", "n1")
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		if o == "" {
			return
		}
		errs, err := store.FinishRuns(ctx, sh, []shard.Finish{{Member: claimed[0].Member, Token: claimed[0].Token, Outcome: o}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
	}
	once("scheduled", 1, false)
	once("ready", 1, true)
	once("running", 1, true)
	run("running", "")
	once("retrying", 3, true)
	run("retrying", shard.Failed)
	once("paused", 1, false)
	_, _, err := store.Pause(ctx, "paused")
	require.NoError(t, err)
	once("completed", 1, true)
	run("completed", shard.Succeeded)
	once("dead", 1, true)
	run("dead", shard.Failed)
	once("cancelled", 1, false)
	_, _, err = store.Cancel(ctx, "cancelled")
	require.NoError(t, err)
	_, err = store.Create(ctx, []*job.Job{{ID: "cron", Type: "t", Schedule: job.Schedule{Cron: "0 3 * * *"}}})
	require.NoError(t, err)
	// etl@extract's run fails (one attempt): dead; its children are released or end.
	sh := store.ShardOf("etl")
	claimed, err := store.Claim(ctx, sh, "default", 10, "w1", "n1")
	require.NoError(t, err)
	for _, c := range claimed {
		if c.JobID == "etl@extract" {
			errs, err := store.FinishRuns(ctx, sh, []shard.Finish{{Member: c.Member, Token: c.Token, Outcome: shard.Failed}})
			require.NoError(t, err)
			require.NoError(t, errs[0])
		}
	}

	br := tb.browser()
	br.login(writeToken)
	all := []string{"resume", "pause", "trigger", "cancel", "delete"}
	for _, c := range []struct {
		id, state string
		actions   []string
	}{
		{"scheduled", "scheduled", []string{"pause", "trigger", "cancel", "delete"}},
		{"cron", "scheduled", []string{"pause", "trigger", "cancel", "delete"}},
		{"ready", "ready", []string{"pause", "cancel", "delete"}},
		{"running", "running", []string{"pause", "cancel", "delete"}},
		{"retrying", "retrying", []string{"pause", "cancel", "delete"}},
		{"paused", "paused", []string{"resume", "cancel", "delete"}},
		{"completed", "completed", []string{"delete"}},
		{"dead", "dead", []string{"delete"}},
		{"cancelled", "cancelled", []string{"delete"}},
		{"nightly@1893466800000@extract", "", []string{"cancel"}}, // ready (running if claimed with etl's)
		{"nightly@1893466800000@load", "waiting", []string{"cancel"}},
		{"etl@extract", "dead", nil},
		{"etl@load", "cancelled", nil}, // upstream failed
	} {
		if c.state == "" {
			info, err := store.Get(ctx, c.id)
			require.NoError(t, err)
			c.state = string(info.State)
			require.Contains(t, []string{"ready", "running"}, c.state)
		}
		p := br.get("/ui/jobs/" + c.id)
		require.Equal(t, 200, p.status, c.id)
		require.Contains(t, p.body, `<span class="badge `+c.state+`" id="job-state">`, c.id)
		for _, a := range all {
			if slices.Contains(c.actions, a) {
				require.Contains(t, p.body, `id="act-`+a+`"`, "%s (%s) offers %s", c.id, c.state, a)
			} else {
				require.NotContains(t, p.body, `id="act-`+a+`"`, "%s (%s) offers %s, which does nothing", c.id, c.state, a)
			}
		}
	}
	// What the page no longer offers did nothing: a dead job's cancel.
	p := br.post("/ui/actions/job", url.Values{"id": {"dead"}, "action": {"cancel"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	info, err := store.Get(ctx, "dead")
	require.NoError(t, err)
	require.Equal(t, job.StateDead, info.State)
	dead, _, err := store.Dead(ctx, "dead", 10, "")
	require.NoError(t, err)
	require.Len(t, dead, 1, "its run is still a dead letter")
}

// A scheduled workflow's page offers the actions that do something in its definition's
// state, as a job's page does: a paused one Resume (not Start an instance now, which the
// API refuses: 409), a cancelled one Delete only.
func TestUI_DefinitionActionsByState(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, testTokens, ui.Config{})
	ctx := context.Background()
	store := tb.store
	for _, id := range []string{"def-on", "def-paused", "def-cancelled"} {
		_, err := store.CreateWorkflow(ctx, &job.Workflow{ID: id, Schedule: &job.Schedule{Cron: "0 3 * * *"}, Jobs: []job.Node{wfNode("a", "")}})
		require.NoError(t, err)
	}
	_, _, err := store.Pause(ctx, "def-paused")
	require.NoError(t, err)
	br := tb.browser()
	br.login(writeToken)
	p := br.post("/ui/actions/workflow", url.Values{"id": {"def-cancelled"}, "action": {"cancel"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)

	all := []string{"resume", "pause", "trigger", "cancel", "delete"}
	for _, c := range []struct {
		id, state string
		actions   []string
	}{
		{"def-on", "scheduled", []string{"pause", "trigger", "cancel", "delete"}},
		{"def-paused", "paused", []string{"resume", "cancel", "delete"}},
		{"def-cancelled", "cancelled", []string{"delete"}},
	} {
		p := br.get("/ui/workflows/" + c.id)
		require.Equal(t, 200, p.status, c.id)
		require.Contains(t, p.body, `id="wf-state">`+c.state+`</span>`, c.id)
		for _, a := range all {
			if slices.Contains(c.actions, a) {
				require.Contains(t, p.body, `id="act-`+a+`"`, "%s (%s) offers %s", c.id, c.state, a)
			} else {
				require.NotContains(t, p.body, `id="act-`+a+`"`, "%s (%s) offers %s, which does nothing", c.id, c.state, a)
			}
		}
	}
	// What the page no longer offers: the API refuses to start an instance of a paused
	// definition.
	p = br.post("/ui/actions/workflow", url.Values{"id": {"def-paused"}, "action": {"trigger"}})
	require.Equal(t, http.StatusConflict, p.status, p.body)
}
