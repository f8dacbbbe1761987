package ui

import (
	"context"
	"encoding/binary"
	"hash/maphash"
	"net/url"
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
func (d *workflowData) defEnded() bool { return job.State(d.W.JobState).Ended() }

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

// nodePrint is what a live stream keeps of the nodes of the workflow's page it updates,
// to patch its next update from (renderUpdate): a hash of the node set (each node's id,
// job, rule and parents, in order, and whether the graph is drawn) and a hash of what
// each node's row and drawn box show (its state, attempts, result size, released and
// ended times). 8 bytes a node, where the page's data is about 300 and its HTML 250:
// every open tab of a 10,000-node workflow's page has a stream.
type nodePrint struct {
	set   uint64
	nodes []uint64
}

// printOf returns the print of a workflow's page's nodes; nil for another page, or a
// definition's (whose nodes are not patched).
func (u *UI) printOf(data any) *nodePrint {
	d, ok := data.(*workflowData)
	if !ok || d.Definition {
		return nil
	}
	var set, node maphash.Hash
	set.SetSeed(u.seed)
	node.SetSeed(u.seed)
	p := &nodePrint{nodes: make([]uint64, len(d.W.Nodes))}
	hashInt(&set, int64(len(d.W.Nodes)))
	if d.Graph != nil {
		_ = set.WriteByte(1)
	}
	for i, n := range d.W.Nodes {
		hashString(&set, n.ID)
		hashString(&set, n.JobID)
		hashString(&set, n.Rule)
		hashInt(&set, int64(len(n.DependsOn)))
		for _, p := range n.DependsOn {
			hashString(&set, p)
		}
		node.Reset()
		hashString(&node, n.State)
		hashInt(&node, int64(n.Attempts))
		hashInt(&node, int64(n.ResultSize))
		hashTime(&node, n.ReleasedAt)
		hashTime(&node, n.EndedAt)
		p.nodes[i] = node.Sum64()
	}
	p.set = set.Sum64()
	return p
}

// samePrint reports whether a live update of a page whose nodes' print is shown may
// patch the nodes that changed in p: both are workflows' (not definitions) of the same
// nodes, in the same order, with the same rules and parents, both drawn or neither.
func (p *nodePrint) sameNodes(shown *nodePrint) bool {
	return p != nil && shown != nil && p.set == shown.set && len(p.nodes) == len(shown.nodes)
}

func hashString(h *maphash.Hash, s string) {
	hashInt(h, int64(len(s)))
	_, _ = h.WriteString(s)
}

func hashInt(h *maphash.Hash, n int64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(n))
	_, _ = h.Write(b[:])
}

// hashTime hashes an instant (nil apart from every instant).
func hashTime(h *maphash.Hash, t *time.Time) {
	if t == nil {
		_ = h.WriteByte(0)
		return
	}
	_ = h.WriteByte(1)
	hashInt(h, t.UnixNano())
}
