package job

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Limits and defaults of a workflow.
const (
	// MaxWorkflowIDLen bounds a workflow's id: its nodes' job ids are the workflow id,
	// '@' and the node id (NodeJobID), at most MaxIDLen.
	MaxWorkflowIDLen = 64
	// MaxScheduledWorkflowIDLen bounds a scheduled workflow's id: its instances' ids
	// add '@' and the due time in ms (14 bytes).
	MaxScheduledWorkflowIDLen = MaxWorkflowIDLen - 14
	// MaxNodeIDLen bounds a node's id.
	MaxNodeIDLen = MaxIDLen - MaxWorkflowIDLen - 1
	// DefaultMaxNodes is the default most nodes of one workflow.
	DefaultMaxNodes = 10000
	// WorkflowType is the type of a scheduled workflow's definition job, whose runs
	// create the workflow's instances.
	WorkflowType = "@workflow"
	// WorkflowQueue is the queue of a scheduled workflow's definition job.
	WorkflowQueue = "workflows"
)

// Rule says when a workflow node runs, from how its parents ended.
type Rule string

// Rules. A node whose rule can no longer be met ends upstream_failed (skipped for
// one_failed, whose parents all succeeded, and for a node that waits on a skipped one),
// and so on down the graph: nothing waits for ever.
const (
	// RuleAllSuccess runs the node when every parent succeeded. The default.
	RuleAllSuccess Rule = "all_success"
	// RuleAllDone runs the node when every parent ended, however.
	RuleAllDone Rule = "all_done"
	// RuleOneSuccess runs the node as soon as one parent succeeded.
	RuleOneSuccess Rule = "one_success"
	// RuleOneFailed runs the node as soon as one parent failed (or was cancelled or
	// upstream_failed): an error handler.
	RuleOneFailed Rule = "one_failed"
	// RuleNoneFailed runs the node when every parent ended and none failed (succeeded or
	// skipped).
	RuleNoneFailed Rule = "none_failed"
)

// Valid reports whether r is one of the rules.
func (r Rule) Valid() bool {
	switch r {
	case RuleAllSuccess, RuleAllDone, RuleOneSuccess, RuleOneFailed, RuleNoneFailed:
		return true
	}
	return false
}

// WorkflowState is the state of a workflow.
type WorkflowState string

// Workflow states.
const (
	WorkflowRunning   WorkflowState = "running"
	WorkflowSucceeded WorkflowState = "succeeded" // every node succeeded or was skipped
	WorkflowFailed    WorkflowState = "failed"    // a node failed, was cancelled or upstream_failed
	WorkflowCancelled WorkflowState = "cancelled"
	// WorkflowScheduled is a scheduled workflow's definition: it makes instances.
	WorkflowScheduled WorkflowState = "scheduled"
)

// NodeState is the state of a workflow node.
type NodeState string

// Node states. A node waits until its rule is decided, then runs as its job does (the
// job's states ready, running and retrying), or ends at once.
const (
	NodeWaiting        NodeState = "waiting"
	NodeReady          NodeState = "ready"
	NodeRunning        NodeState = "running"
	NodeRetrying       NodeState = "retrying"
	NodeSucceeded      NodeState = "succeeded"
	NodeFailed         NodeState = "failed"
	NodeCancelled      NodeState = "cancelled"
	NodeUpstreamFailed NodeState = "upstream_failed"
	NodeSkipped        NodeState = "skipped"
)

// Ended reports whether a node state is final.
func (s NodeState) Ended() bool {
	switch s {
	case NodeSucceeded, NodeFailed, NodeCancelled, NodeUpstreamFailed, NodeSkipped:
		return true
	}
	return false
}

// Node is one job of a workflow: any job definition (queue, type or target, payload,
// priority, retries, timeout; its ID is the node's id, unique in the workflow), the
// nodes it depends on and its rule. It has no schedule: it runs when its rule is met.
type Node struct {
	Job
	DependsOn []string `json:"depends_on,omitempty"`
	Rule      Rule     `json:"rule,omitempty"`
}

// Workflow is a set of jobs with dependencies between them, a directed acyclic graph,
// submitted at once. Its ID is an idempotency key, as a job's is.
type Workflow struct {
	ID   string `json:"id,omitempty"`
	Jobs []Node `json:"jobs"`
	// Schedule, when set, makes the workflow a definition that creates one instance of
	// the whole graph per occurrence of a cron schedule (only Cron and TimeZone may be
	// set). Overlap, Misfire and MisfireAfter apply to whole instances, as they do to a
	// recurring job's runs.
	Schedule     *Schedule     `json:"schedule,omitempty"`
	Overlap      Overlap       `json:"overlap,omitempty"`
	Misfire      Misfire       `json:"misfire,omitempty"`
	MisfireAfter time.Duration `json:"misfire_after,omitempty"`
}

// Normalize fills defaults in place (an id, each node's job defaults and rule) and
// validates the workflow: ids, at most maxNodes nodes (0 means DefaultMaxNodes), each
// node's job against maxPayload, dependencies that name nodes of the workflow, and no
// cycle. It orders Jobs so that every node comes after its parents (keeping the given
// order where it may). Errors are *FieldErrors that name the node at fault.
func (w *Workflow) Normalize(maxNodes, maxPayload int) error {
	if maxNodes <= 0 {
		maxNodes = DefaultMaxNodes
	}
	if w.ID == "" {
		w.ID = NewID()
	}
	maxID := MaxWorkflowIDLen
	if w.Schedule != nil {
		maxID = MaxScheduledWorkflowIDLen
	}
	if err := ValidateID("id", w.ID, maxID); err != nil {
		return err
	}
	switch {
	case len(w.Jobs) == 0:
		return fieldErr("jobs", "a workflow needs at least one job")
	case len(w.Jobs) > maxNodes:
		return fieldErr("jobs", "%d jobs is over the limit of %d", len(w.Jobs), maxNodes)
	}
	if err := w.normalizeSchedule(); err != nil {
		return err
	}
	index := make(map[string]int, len(w.Jobs))
	for i := range w.Jobs {
		n := &w.Jobs[i]
		at := "jobs[" + strconv.Itoa(i) + "]"
		if n.ID == "" {
			return fieldErr(at+".id", "is required: a node is named by its id")
		}
		if len(n.ID) > MaxNodeIDLen {
			// ValidateID's message would not name it.
			return fieldErr(at+".id", "node %q: longer than %d bytes (its job's id is the workflow's, '@' and the node's, at most %d)",
				n.ID, MaxNodeIDLen, MaxIDLen)
		}
		if err := ValidateID(at+".id", n.ID, MaxNodeIDLen); err != nil {
			return err
		}
		if j, dup := index[n.ID]; dup {
			return fieldErr(at+".id", "duplicate node id %q (also jobs[%d])", n.ID, j)
		}
		index[n.ID] = i
	}
	for i := range w.Jobs {
		n := &w.Jobs[i]
		at := "jobs[" + strconv.Itoa(i) + "]"
		if err := n.normalize(maxPayload); err != nil {
			fe := err.(*FieldError)
			return fieldErr(at+"."+fe.Field, "node %q: %s", n.ID, fe.Msg)
		}
		seen := make(map[string]bool, len(n.DependsOn))
		for _, p := range n.DependsOn {
			if _, ok := index[p]; !ok {
				return fieldErr(at+".depends_on", "node %q depends on %q, which is no node of the workflow", n.ID, p)
			}
			if seen[p] {
				return fieldErr(at+".depends_on", "node %q names %q twice", n.ID, p)
			}
			seen[p] = true
		}
	}
	order, cycle := topoOrder(w.Jobs, index)
	if cycle != nil {
		return fieldErr("jobs", "dependency cycle: %s", strings.Join(cycle, " → "))
	}
	sorted := make([]Node, len(order))
	for k, i := range order {
		sorted[k] = w.Jobs[i]
	}
	w.Jobs = sorted
	return nil
}

func (w *Workflow) normalizeSchedule() error {
	if w.Schedule == nil {
		if w.Overlap != "" || w.Misfire != "" || w.MisfireAfter != 0 {
			return fieldErr("schedule", "overlap and misfire apply to a scheduled workflow only: a cron schedule is required")
		}
		return nil
	}
	s := *w.Schedule
	if s.Cron == "" || !s.At.IsZero() || s.Delay != 0 || s.Now {
		return fieldErr("schedule", "a workflow's schedule is a cron expression (with an optional timezone)")
	}
	if err := s.Validate(); err != nil {
		return err
	}
	defaultRecurring(&w.Overlap, &w.Misfire, &w.MisfireAfter)
	return validateRecurring(w.Overlap, w.Misfire, w.MisfireAfter)
}

// normalize fills the node's job defaults and checks it: a node has no schedule.
func (n *Node) normalize(maxPayload int) error {
	if n.Rule == "" {
		n.Rule = RuleAllSuccess
	}
	if !n.Rule.Valid() {
		return fieldErr("rule", "must be all_success, all_done, one_success, one_failed or none_failed, got %q", n.Rule)
	}
	s := n.Schedule
	if !s.At.IsZero() || s.Delay != 0 || s.Cron != "" || s.TimeZone != "" {
		return fieldErr("schedule", "a node has no schedule: it starts when its rule is met")
	}
	n.Schedule = Schedule{Now: true}
	if n.Overlap != "" || n.Misfire != "" || n.MisfireAfter != 0 {
		return fieldErr("overlap", "overlap and misfire apply to recurring jobs, not to nodes")
	}
	id := n.ID
	err := n.Job.Normalize(maxPayload)
	// The recurring job's defaults Normalize filled mean nothing for a node; cleared, a
	// normalised node normalises again (a scheduled workflow's instances do).
	n.ID, n.Overlap, n.Misfire, n.MisfireAfter = id, "", "", 0
	if err == nil && n.Type == WorkflowType {
		// Its runs would start workflow instances (a definition's do).
		return fieldErr("type", "%q is reserved for scheduled workflows' definitions", WorkflowType)
	}
	return err
}

// topoOrder returns the nodes' indexes in an order where every node follows its
// parents, the given order where dependencies allow (Kahn's algorithm, taking the
// earliest ready node first), or a cycle as node ids, its first node repeated at its
// end.
func topoOrder(nodes []Node, index map[string]int) (order []int, cycle []string) {
	pending := make([]int, len(nodes))
	children := make([][]int, len(nodes))
	for i, n := range nodes {
		pending[i] = len(n.DependsOn)
		for _, p := range n.DependsOn {
			children[index[p]] = append(children[index[p]], i)
		}
	}
	// A min-heap would be tidier; the ready set is scanned for its smallest index,
	// which stays cheap because it is kept sorted.
	var ready []int
	for i := range nodes {
		if pending[i] == 0 {
			ready = append(ready, i)
		}
	}
	order = make([]int, 0, len(nodes))
	for len(ready) > 0 {
		i := ready[0]
		ready = ready[1:]
		order = append(order, i)
		for _, c := range children[i] {
			if pending[c]--; pending[c] == 0 {
				k, _ := slices.BinarySearch(ready, c)
				ready = slices.Insert(ready, k, c)
			}
		}
	}
	if len(order) == len(nodes) {
		return order, nil
	}
	return nil, findCycle(nodes, index, pending)
}

// findCycle walks parents from a node left in a cycle (pending > 0) until a node
// repeats: every node with pending parents has a parent with pending parents. The cycle
// is named in dependency order (a parent before its child), from its node submitted
// first.
func findCycle(nodes []Node, index map[string]int, pending []int) []string {
	start := slices.IndexFunc(pending, func(p int) bool { return p > 0 })
	seen := map[int]int{}
	var path []int
	for i := start; ; {
		if at, ok := seen[i]; ok {
			loop := path[at:]
			slices.Reverse(loop)
			// From the node submitted first, so that the message does not depend on
			// where the walk entered the cycle.
			first := slices.Index(loop, slices.Min(loop))
			loop = append(loop[first:], loop[:first]...)
			out := make([]string, 0, len(loop)+1)
			for _, k := range loop {
				out = append(out, nodes[k].ID)
			}
			return append(out, nodes[loop[0]].ID)
		}
		seen[i] = len(path)
		path = append(path, i)
		for _, p := range nodes[i].DependsOn {
			if k := index[p]; pending[k] > 0 {
				i = k
				break
			}
		}
	}
}

// Children returns, for the nodes of a normalised workflow, each node's children in
// the order of Jobs.
func (w *Workflow) Children() map[string][]string {
	out := make(map[string][]string, len(w.Jobs))
	for _, n := range w.Jobs {
		for _, p := range n.DependsOn {
			out[p] = append(out[p], n.ID)
		}
	}
	return out
}

// String names a workflow in messages.
func (w *Workflow) String() string { return fmt.Sprintf("workflow %q", w.ID) }

// ValidateWorkflowPrefix checks p as a prefix of workflow ids, which a listing filters
// on: it must be what some workflow's id could start with. A workflow's id is 1 to
// MaxWorkflowIDLen bytes of [A-Za-z0-9._~-]; a scheduled workflow's instance's is its
// definition's id (ValidateID, at most MaxScheduledWorkflowIDLen bytes), '@' and its due
// time in ms (digits, before MaxAt). "" is no filter. The error is a *FieldError naming field.
func ValidateWorkflowPrefix(field, p string) error {
	if len(p) > MaxWorkflowIDLen {
		return fieldErr(field, "%d bytes is longer than any workflow id (at most %d)", len(p), MaxWorkflowIDLen)
	}
	def, due, instance := strings.Cut(p, string(NodeSep))
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '~' || c == '-' || c == NodeSep) {
			return fieldErr(field, "%q: character %q at %d is in no workflow id (A-Z a-z 0-9 . _ ~ -, and '@' in an instance's)", p, c, i)
		}
	}
	if !instance {
		return nil
	}
	switch {
	case def == "":
		return fieldErr(field, "%q: no workflow id starts with '@' (an instance's is <definition id>@<due ms>)", p)
	case strings.IndexByte(due, NodeSep) >= 0:
		return fieldErr(field, "%q: no workflow id has two '@'s (an instance's is <definition id>@<due ms>)", p)
	case len(def) > MaxScheduledWorkflowIDLen:
		return fieldErr(field, "%q: a scheduled workflow's id, before an instance's '@', is at most %d bytes", p, MaxScheduledWorkflowIDLen)
	case isDotSegment(def):
		return fieldErr(field, "%q: %q is no scheduled workflow's id", p, def)
	}
	for i := 0; i < len(due); i++ {
		if due[i] < '0' || due[i] > '9' {
			return fieldErr(field, "%q: after '@' an instance's id has only digits (its due time in ms)", p)
		}
	}
	if len(due) > maxDueDigits {
		return fieldErr(field, "%q: an instance's due time in ms has at most %d digits", p, maxDueDigits)
	}
	return nil
}

// maxDueDigits is the most digits of a due time in ms: those before MaxAt.
var maxDueDigits = len(strconv.FormatInt(MaxAt.UnixMilli(), 10))
