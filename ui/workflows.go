package ui

import (
	"context"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// The workflow pages: /ui/workflows (the list, and the scheduled definitions) and
// /ui/workflows/<id> (a workflow, an instance "<def>@<due ms>", or a definition), read
// through GET /v1/workflows and GET /v1/workflows/{id} and acted on through their
// :cancel, :retry, :pause, :resume, :trigger and :delete.

// workflowsPage is how many workflows a list page asks for; defsShown how many
// definitions the unfiltered list shows above it (the rest: state=scheduled).
const (
	workflowsPage = 50
	defsShown     = 20
)

// workflowStates are the list's state filter: the API's (GET /v1/workflows).
var workflowStates = []job.WorkflowState{job.WorkflowRunning, job.WorkflowSucceeded, job.WorkflowFailed,
	job.WorkflowCancelled, job.WorkflowScheduled}

// nodeStates are the node states in the order the counts are shown.
var nodeStates = []job.NodeState{job.NodeWaiting, job.NodeReady, job.NodeRunning, job.NodeRetrying, job.NodeSucceeded,
	job.NodeFailed, job.NodeCancelled, job.NodeUpstreamFailed, job.NodeSkipped}

type workflowsData struct {
	State  string
	Prefix string // of the ids listed
	States []job.WorkflowState
	// Defs are the scheduled definitions: the first ones above the unfiltered list (with
	// MoreDefs when there are more), or the page of state=scheduled.
	Defs     []ingest.WorkflowSummary
	MoreDefs bool
	// Workflows is a page of workflows and instances (none for state=scheduled).
	Workflows []ingest.WorkflowSummary
	Next      string
	Cursor    string
}

func (u *UI) loadWorkflows(rc context.Context, c *ingest.Client, q url.Values, _ string) (any, error) {
	d := &workflowsData{State: q.Get("state"), Prefix: q.Get("prefix"), States: workflowStates, Cursor: q.Get("cursor")}
	if d.State == string(job.WorkflowScheduled) {
		l, err := c.ListWorkflows(rc, ingest.WorkflowFilter{State: d.State, Prefix: d.Prefix}, workflowsPage, d.Cursor)
		if err != nil {
			return nil, err
		}
		d.Defs, d.Next = l.Workflows, l.NextCursor
		return d, nil
	}
	if d.State == "" && d.Cursor == "" {
		l, err := c.ListWorkflows(rc, ingest.WorkflowFilter{State: string(job.WorkflowScheduled), Prefix: d.Prefix}, defsShown, "")
		if err != nil {
			return nil, err
		}
		d.Defs, d.MoreDefs = l.Workflows, l.NextCursor != ""
	}
	l, err := c.ListWorkflows(rc, ingest.WorkflowFilter{State: d.State, Prefix: d.Prefix}, workflowsPage, d.Cursor)
	if err != nil {
		return nil, err
	}
	d.Workflows, d.Next = l.Workflows, l.NextCursor
	return d, nil
}

// Scheduled reports whether the page lists the definitions only.
func (d *workflowsData) Scheduled() bool { return d.State == string(job.WorkflowScheduled) }

// DefsURL is the URL of the list of the definitions (with the page's prefix).
func (d *workflowsData) DefsURL() string {
	v := url.Values{"state": {string(job.WorkflowScheduled)}}
	if d.Prefix != "" {
		v.Set("prefix", d.Prefix)
	}
	return Prefix + "/workflows?" + v.Encode()
}

// NextURL is the URL of the next page.
func (d *workflowsData) NextURL() string {
	v := url.Values{"cursor": {d.Next}}
	if d.State != "" {
		v.Set("state", d.State)
	}
	if d.Prefix != "" {
		v.Set("prefix", d.Prefix)
	}
	return Prefix + "/workflows?" + v.Encode()
}

// stateCount is how many nodes are in a state.
type stateCount struct {
	State string
	N     int
}

// instanceRow is an instance of a scheduled workflow, `<def>@<due ms>`.
type instanceRow struct {
	ingest.WorkflowSummary
	Due time.Time
}

type workflowData struct {
	W      ingest.Workflow
	Counts []stateCount
	// Graph is the drawing; nil when there are more than maxDrawn nodes.
	Graph    *graph
	MaxDrawn int
	// A scheduled workflow's definition: its newest instances, the newest first, of
	// InstancesFound; InstancesPartial when the search stopped before the end of the
	// listing (the newest of those found, then).
	Definition       bool
	Instances        []instanceRow
	InstancesFound   int
	InstancesPartial bool
}

// instancesShown is how many instances a definition's page shows, and instancePages how
// many pages of GET /v1/workflows?prefix=<def>@ (each a bounded scan) it reads to find
// them, at most: the listing has no order, so the newest are those of every page read.
const (
	instancesShown = 10
	instancePages  = 4
)

func (u *UI) loadWorkflow(rc context.Context, c *ingest.Client, _ url.Values, id string) (any, error) {
	w, err := c.Workflow(rc, id)
	if err != nil {
		return nil, err
	}
	d := &workflowData{W: w, MaxDrawn: maxDrawn, Definition: w.State == string(job.WorkflowScheduled)}
	var gn []graphNode
	if d.Definition {
		if w.Definition != nil {
			for _, n := range w.Definition.Jobs {
				gn = append(gn, graphNode{ID: n.ID, DependsOn: n.DependsOn, Note: nodeKind(n)})
			}
		}
		if err := d.loadInstances(rc, c, id); err != nil {
			return nil, err
		}
	} else {
		for _, n := range w.Nodes {
			gn = append(gn, graphNode{ID: n.ID, JobID: n.JobID, State: n.State, DependsOn: n.DependsOn})
		}
		for _, s := range nodeStates {
			if n := w.Counts[string(s)]; n > 0 {
				d.Counts = append(d.Counts, stateCount{State: string(s), N: n})
			}
		}
	}
	d.Graph = layout(gn)
	return d, nil
}

// loadInstances finds definition def's instances with the listing of the ids that start
// with `<def>@` (running, held and ended alike, whether or not the run of the
// definition's job that started one has ended) and keeps the newest instancesShown.
func (d *workflowData) loadInstances(rc context.Context, c *ingest.Client, def string) error {
	var all []instanceRow
	f, cursor := ingest.WorkflowFilter{Prefix: def + string(job.NodeSep)}, ""
	for page := 0; ; page++ {
		if page == instancePages {
			d.InstancesPartial = true
			break
		}
		l, err := c.ListWorkflows(rc, f, shard.MaxListLimit, cursor)
		if err != nil {
			return err
		}
		for _, w := range l.Workflows {
			row := instanceRow{WorkflowSummary: w}
			if ms, err := strconv.ParseInt(strings.TrimPrefix(w.ID, f.Prefix), 10, 64); err == nil {
				row.Due = time.UnixMilli(ms)
			}
			all = append(all, row)
		}
		if cursor = l.NextCursor; cursor == "" {
			break
		}
	}
	sort.Slice(all, func(a, b int) bool {
		if !all[a].Due.Equal(all[b].Due) {
			return all[a].Due.After(all[b].Due)
		}
		return all[a].ID > all[b].ID
	})
	d.InstancesFound = len(all)
	d.Instances = all[:min(len(all), instancesShown)]
	return nil
}

// InstancesURL is the list of every instance of the definition.
func (d *workflowData) InstancesURL() string {
	return Prefix + "/workflows?" + url.Values{"prefix": {d.W.ID + string(job.NodeSep)}}.Encode()
}

// nodeKind is what a definition's node runs: its type, or its push target's URL host.
func nodeKind(n ingest.NodeRequest) string {
	if n.Type != "" {
		return n.Type
	}
	if n.Target != nil {
		if t, err := url.Parse(n.Target.URL); err == nil && t.Host != "" {
			return "→ " + t.Host
		}
	}
	return ""
}

// Ended reports whether the workflow ended (and may be retried).
func (d *workflowData) Ended() bool {
	switch job.WorkflowState(d.W.State) {
	case job.WorkflowFailed, job.WorkflowCancelled, job.WorkflowSucceeded:
		return true
	}
	return false
}

// A scheduled workflow's page offers the actions that do something in its definition's
// job's state, as a job's page does (jobData): Pause while it may start instances,
// Resume when paused, Start an instance now unless it is paused (the API refuses: 409)
// or ended, Cancel until it has ended (cancelled), and Delete always.

// defEnded reports whether the definition's job is in a final state (cancelled, or
// completed or dead).
func (d *workflowData) defEnded() bool {
	switch job.State(d.W.JobState) {
	case job.StateCompleted, job.StateDead, job.StateCancelled:
		return true
	}
	return false
}

// DefCanPause reports whether Pause does something: the definition may start instances.
func (d *workflowData) DefCanPause() bool {
	return !d.defEnded() && d.W.JobState != string(job.StatePaused)
}

// DefCanResume reports whether the definition is paused.
func (d *workflowData) DefCanResume() bool { return d.W.JobState == string(job.StatePaused) }

// DefCanTrigger reports whether an instance can be started now: the definition is
// neither paused nor ended.
func (d *workflowData) DefCanTrigger() bool { return d.DefCanPause() }

// DefCanCancel reports whether the definition has not ended.
func (d *workflowData) DefCanCancel() bool { return !d.defEnded() }

// Retryable reports whether the workflow failed or was cancelled.
func (d *workflowData) Retryable() bool {
	return d.W.State == string(job.WorkflowFailed) || d.W.State == string(job.WorkflowCancelled)
}

// DefinitionID is the id of the definition an instance was started by ("" for others).
func (d *workflowData) DefinitionID() string {
	i := strings.LastIndexByte(d.W.ID, job.NodeSep)
	if i < 0 {
		return ""
	}
	if _, err := strconv.ParseInt(d.W.ID[i+1:], 10, 64); err != nil {
		return ""
	}
	return d.W.ID[:i]
}

func (u *UI) workflows(ctx *fasthttp.RequestCtx, v *viewer) { u.show(ctx, v, "workflows", "") }
func (u *UI) workflowDetail(ctx *fasthttp.RequestCtx, v *viewer, id string) {
	u.show(ctx, v, "workflow", id)
}

// workflowAction serves POST /ui/actions/workflow: id, action (cancel, retry; pause,
// resume, trigger and delete for a scheduled workflow's definition). After a delete it
// goes back to the definitions: the definition is gone.
func (u *UI) workflowAction(ctx *fasthttp.RequestCtx, v *viewer) {
	args := ctx.PostArgs()
	id, action := string(args.Peek("id")), string(args.Peek("action"))
	c := u.client(v)
	rc, cancel := u.rctx(ctx)
	defer cancel()
	var err error
	switch action {
	case "cancel":
		_, err = c.CancelWorkflow(rc, id)
	case "retry":
		_, err = c.RetryWorkflow(rc, id)
	case "pause":
		_, err = c.PauseWorkflow(rc, id)
	case "resume":
		_, err = c.ResumeWorkflow(rc, id)
	case "trigger":
		_, err = c.TriggerWorkflow(rc, id)
	case "delete":
		if _, err = c.DeleteWorkflow(rc, id); err == nil {
			redirect(ctx, Prefix+"/workflows?state=scheduled")
			return
		}
	default:
		u.fail(ctx, fasthttp.StatusBadRequest, "unknown workflow action "+jsonString(action))
		return
	}
	if err != nil {
		u.apiFail(ctx, err)
		return
	}
	redirect(ctx, workflowURL(id))
}

// nodeRef names a workflow's node.
type nodeRef struct{ WF, Node string }

// workflowOf returns the workflow and node of a node's job id; nil for another job.
func workflowOf(jobID string) *nodeRef {
	wf, node, ok := job.SplitNodeJobID(jobID)
	if !ok {
		return nil
	}
	return &nodeRef{WF: wf, Node: node}
}

// workflowURL is the page of workflow id.
func workflowURL(id string) string { return Prefix + "/workflows/" + url.PathEscape(id) }

// sameNodes reports whether a live update of a page that shows shown may patch the nodes
// that changed in d (renderUpdate): both are workflows (not definitions) of the same
// nodes, in the same order, with the same rules and parents, both drawn or neither.
func (d *workflowData) sameNodes(shown *workflowData) bool {
	if d.Definition || shown.Definition || len(d.W.Nodes) != len(shown.W.Nodes) || (d.Graph == nil) != (shown.Graph == nil) {
		return false
	}
	for i, n := range d.W.Nodes {
		o := shown.W.Nodes[i]
		if n.ID != o.ID || n.JobID != o.JobID || n.Rule != o.Rule || !slices.Equal(n.DependsOn, o.DependsOn) {
			return false
		}
	}
	return true
}

// sameNode reports whether a node's row and drawing show the same for a and b (a
// node of the same id, rule and parents).
func sameNode(a, b ingest.Node) bool {
	return a.State == b.State && a.Attempts == b.Attempts && a.ResultSize == b.ResultSize &&
		sameTime(a.ReleasedAt, b.ReleasedAt) && sameTime(a.EndedAt, b.EndedAt)
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
