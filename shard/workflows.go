package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/rueidis"

	"github.com/tockhq/tock/job"
)

// A workflow lives on the shard of its id (Of maps a node's job id, the workflow id, '@'
// and the node id, to the same shard), in one hash (Keys.Workflow; lua/include/workflow.lua
// describes it) next to its nodes' jobs, so that the script that ends a node's run also
// releases or ends its children: finish_runs, cancel_job, create_workflow,
// cancel_workflow and retry_workflow. No loop scans workflows.
//
// A scheduled workflow is a recurring job (job.WorkflowType, queue job.WorkflowQueue)
// whose payload is the workflow: each of its runs creates an instance of the graph,
// `<id>@<due ms>` (StartInstance), on the same shard, whose script applies the
// overlap policy to the definition's running instances.

// ErrWorkflowNotFound is returned for a workflow id that names no workflow.
var ErrWorkflowNotFound = errors.New("workflow not found")

// maxDefinitionPayload bounds a scheduled workflow's definition (its job's payload).
const maxDefinitionPayload = 32 << 20

// WorkflowResult is the outcome of creating a workflow.
type WorkflowResult struct {
	ID    string
	Shard ID
	State job.WorkflowState
	// Created is false when the id existed; State is then the existing workflow's.
	Created bool
	// Conflict is set with Created false when the existing workflow's definition differs.
	Conflict bool
	// Skipped is set when a scheduled instance was not created: its definition's overlap
	// policy (skip, or buffer_one with one buffered already) refused it.
	Skipped bool
	// Held is set when a scheduled instance waits for its definition's running instance
	// (overlap buffer_one).
	Held bool
}

// CreateWorkflow stores a workflow and its nodes' jobs and releases its roots, in one
// script call, or with a Schedule stores its definition, a recurring job whose runs
// create its instances. w is normalised in place (job.Workflow.Normalize); an invalid
// workflow is a *job.FieldError naming the node at fault. An id that exists is left as it
// is (Created false; Conflict when its definition differs); one that the other kind has
// (a scheduled definition for a workflow without a schedule, or the other way round) is
// ErrWorkflowIDTaken, checked in the script that would store it.
func (s *Store) CreateWorkflow(ctx context.Context, w *job.Workflow) (WorkflowResult, error) {
	if w == nil {
		return WorkflowResult{}, errors.New("create workflow: no workflow (nil)")
	}
	if err := w.Normalize(s.cfg.MaxNodes, s.cfg.MaxPayload); err != nil {
		return WorkflowResult{ID: w.ID}, err
	}
	if w.Schedule != nil {
		return s.createDefinition(ctx, w)
	}
	return s.createInstance(ctx, w, "", job.OverlapAllow)
}

// createDefinition stores a scheduled workflow as its recurring job.
func (s *Store) createDefinition(ctx context.Context, w *job.Workflow) (WorkflowResult, error) {
	payload, err := json.Marshal(w)
	if err != nil {
		return WorkflowResult{ID: w.ID}, err
	}
	if len(payload) > maxDefinitionPayload {
		return WorkflowResult{ID: w.ID}, &job.FieldError{Field: "jobs", Msg: fmt.Sprintf("the definition's %d bytes are over the limit of %d bytes", len(payload), maxDefinitionPayload)}
	}
	def := &job.Job{
		ID: w.ID, Queue: job.WorkflowQueue, Type: job.WorkflowType, Payload: payload,
		Schedule: *w.Schedule, Overlap: job.OverlapAllow, Misfire: w.Misfire, MisfireAfter: w.MisfireAfter,
		Retry: job.RetryPolicy{MaxAttempts: 10},
	}
	if err := def.Normalize(maxDefinitionPayload); err != nil {
		return WorkflowResult{ID: w.ID}, err
	}
	// Its payload is bounded by the definition's limit, not the job limit (a definition
	// holds every node's payload, base64-encoded).
	rs, err := s.createJobs(ctx, []*job.Job{def}, maxDefinitionPayload, true)
	r := rs[0]
	if err == nil {
		err = r.Err
	}
	res := WorkflowResult{ID: w.ID, Shard: r.Shard, State: job.WorkflowScheduled, Created: r.Created, Conflict: r.Conflict}
	if err == nil && r.Conflict && s.sameDefinition(ctx, w) {
		// The same graph sent in another order: the stored definition stands.
		res.Conflict = false
	}
	return res, err
}

// sameDefinition reports whether the scheduled workflow stored under w's id is w (both
// normalised), whatever the order of its nodes and of each node's parents: the job that
// stores it holds them in the order first sent, and compares its payload as bytes.
func (s *Store) sameDefinition(ctx context.Context, w *job.Workflow) bool {
	info, err := s.Get(ctx, w.ID)
	if err != nil || info.Type != job.WorkflowType {
		return false
	}
	var stored job.Workflow
	if json.Unmarshal(info.Payload, &stored) != nil {
		return false
	}
	a, errA := json.Marshal(canonicalWorkflow(w))
	b, errB := json.Marshal(canonicalWorkflow(&stored))
	return errA == nil && errB == nil && string(a) == string(b)
}

// canonicalWorkflow returns a copy of w with its nodes sorted by id and each node's
// parents sorted.
func canonicalWorkflow(w *job.Workflow) *job.Workflow {
	c := *w
	c.Jobs = slices.Clone(w.Jobs)
	for i := range c.Jobs {
		c.Jobs[i].DependsOn = slices.Sorted(slices.Values(c.Jobs[i].DependsOn))
	}
	slices.SortFunc(c.Jobs, func(a, b job.Node) int { return strings.Compare(a.ID, b.ID) })
	return &c
}

// StartInstance creates the instance of scheduled workflow def (its definition job's
// payload, as CreateWorkflow stored it) for the occurrence due: id `<def>@<due ms>`, so
// that a second start of the same occurrence finds it. The definition's overlap policy
// applies to its running instances.
func (s *Store) StartInstance(ctx context.Context, def string, due time.Time, payload []byte) (WorkflowResult, error) {
	// A definition's id makes instance ids that fit a workflow's (and their nodes' job
	// ids a job's): a job of the definitions' type with another id (one stored before
	// Create refused that type to other jobs) starts none.
	if err := job.ValidateID("id", def, job.MaxScheduledWorkflowIDLen); err != nil {
		return WorkflowResult{}, fmt.Errorf("workflow definition %q: %w", def, err)
	}
	var w job.Workflow
	if err := json.Unmarshal(payload, &w); err != nil {
		return WorkflowResult{}, fmt.Errorf("workflow definition %q: %w", def, err)
	}
	overlap := w.Overlap
	w.ID, w.Schedule, w.Overlap, w.Misfire, w.MisfireAfter = def, nil, "", "", 0
	for i := range w.Jobs {
		// The definition was stored normalised, where a jitter of 0 means none; normalised
		// again, 0 would be the default 0.2. RetryPolicy spells "none" negative.
		if r := &w.Jobs[i].Retry; r.Jitter == 0 {
			r.Jitter = -1
		}
	}
	if err := w.Normalize(s.cfg.MaxNodes, s.cfg.MaxPayload); err != nil {
		return WorkflowResult{}, fmt.Errorf("workflow definition %q: %w", def, err)
	}
	w.ID = InstanceID(def, due)
	return s.createInstance(ctx, &w, def, overlap)
}

// InstanceID returns the id of scheduled workflow def's instance for the occurrence due.
func InstanceID(def string, due time.Time) string {
	return def + string(job.NodeSep) + strconv.FormatInt(due.UnixMilli(), 10)
}

func (s *Store) createInstance(ctx context.Context, w *job.Workflow, def string, overlap job.Overlap) (WorkflowResult, error) {
	id := s.ShardOf(w.ID)
	res := WorkflowResult{ID: w.ID, Shard: id}
	children := w.Children()
	// The definition hash is the graph's, whatever order its nodes and each node's
	// parents were given in: each node's line (its id first) with its parents sorted,
	// the lines sorted. A workflow stored by an earlier version has the hash of its
	// nodes' lines in their normalised order, parents as listed (legacy): sent again as
	// it was then, it is the same definition too.
	lines := make([]string, len(w.Jobs))
	legacy := xxhash.New()
	args := []string{s.keys.Prefix(id), w.ID, "", def, string(overlap), s.cfg.packArg(), strconv.Itoa(len(w.Jobs))}
	for i := range w.Jobs {
		n := &w.Jobs[i]
		e, err := encode(&n.Job)
		if err != nil {
			return res, err
		}
		parents := strings.Join(n.DependsOn, ",")
		args = append(args, n.ID, string(n.Rule), parents, strings.Join(children[n.ID], ","), e.dh, strconv.Itoa(len(e.def)/2))
		args = append(args, e.def...)
		sorted := slices.Sorted(slices.Values(n.DependsOn))
		lines[i] = n.ID + "\x00" + string(n.Rule) + "\x00" + strings.Join(sorted, ",") + "\x00" + e.dh + "\x00"
		_, _ = legacy.WriteString(n.ID + "\x00" + string(n.Rule) + "\x00" + parents + "\x00" + e.dh + "\x00")
	}
	slices.Sort(lines)
	h := xxhash.New()
	for _, l := range lines {
		_, _ = h.WriteString(l)
	}
	dh := strconv.FormatUint(h.Sum64(), 36)
	args[2] = dh
	r, replErr := s.exec1Replicated(ctx, call{s.scripts.CreateWorkflow, []string{s.keys.Workflow(id, w.ID)}, args})
	reply, err := r.ToArray()
	if err == nil && len(reply) != 4 {
		err = fmt.Errorf("reply of %d values, want 4", len(reply))
	}
	if err != nil {
		return res, fmt.Errorf("create workflow %q: %w", w.ID, err)
	}
	status := i64(reply[0])
	if status == 3 {
		return res, fmt.Errorf("create workflow %q: %w", w.ID, ErrWorkflowIDTaken)
	}
	res.State = job.WorkflowState(str(reply[1]))
	res.Created = status == 1
	res.Skipped = status == 2
	res.Conflict = status == 0 && str(reply[2]) != dh && str(reply[2]) != strconv.FormatUint(legacy.Sum64(), 36)
	res.Held = res.Created && def != "" && overlap == job.OverlapBufferOne && s.heldInstance(ctx, id, w.ID)
	s.publish(ctx, s.readySignals(nil, id, strs(reply[3])))
	if replErr != nil {
		return res, fmt.Errorf("create workflow %q: %w", w.ID, replErr)
	}
	return res, nil
}

func (s *Store) heldInstance(ctx context.Context, id ID, wf string) bool {
	v, err := s.c.Do(ctx, s.c.B().Hget().Key(s.keys.Workflow(id, wf)).Field("hold").Build()).ToString()
	return err == nil && v == "1"
}

// CancelWorkflow cancels a running workflow at once: its waiting nodes end cancelled,
// its ready and retrying nodes' runs are removed, and its running nodes' handlers are
// told (their contexts end; HTTP workers learn it from their heartbeat). Cancelling a
// workflow that ended changes nothing (changed false). ErrWorkflowNotFound when there is
// none.
func (s *Store) CancelWorkflow(ctx context.Context, wf string) (state job.WorkflowState, changed bool, err error) {
	if err := job.ValidateRef("id", wf, job.MaxWorkflowIDLen); err != nil {
		return "", false, err
	}
	id := s.ShardOf(wf)
	args := []string{s.keys.Prefix(id), strconv.FormatInt(s.bucketMs, 10), wf, strconv.Itoa(s.cfg.History),
		strconv.FormatInt(s.cfg.Retention.Milliseconds(), 10)}
	r, replErr := s.exec1Replicated(ctx, call{s.scripts.CancelWorkflow, []string{s.keys.Buckets(id), s.keys.Dead(id)}, args})
	reply, err := r.ToArray()
	if err == nil && len(reply) != 4 {
		err = fmt.Errorf("reply of %d values, want 4", len(reply))
	}
	if err != nil {
		return "", false, fmt.Errorf("cancel workflow %q: %w", wf, err)
	}
	if i64(reply[0]) == -1 {
		return "", false, ErrWorkflowNotFound
	}
	// A scheduled instance's buffered successor may have started.
	s.publish(ctx, s.readySignals(s.cancelSignals(nil, id, strs(reply[2])), id, strs(reply[3])))
	if replErr != nil {
		return "", false, fmt.Errorf("cancel workflow %q: %w", wf, replErr)
	}
	return job.WorkflowState(str(reply[1])), i64(reply[0]) == 1, nil
}

// RetryWorkflow runs a failed or cancelled workflow again from the nodes that did not
// succeed; the succeeded ones keep their results. A reset node starts afresh: its job
// keeps the history of its runs (Runs) but not their results, and the node has no
// result (NodeResult, ParentResults) until its new run succeeds. A running or succeeded
// workflow is left as it is (changed false). A node whose job has expired
// (Config.Retention) makes it an error.
func (s *Store) RetryWorkflow(ctx context.Context, wf string) (state job.WorkflowState, changed bool, err error) {
	if err := job.ValidateRef("id", wf, job.MaxWorkflowIDLen); err != nil {
		return "", false, err
	}
	id := s.ShardOf(wf)
	args := []string{s.keys.Prefix(id), wf, strconv.Itoa(s.cfg.History), strconv.FormatInt(s.cfg.Retention.Milliseconds(), 10)}
	r, replErr := s.exec1Replicated(ctx, call{s.scripts.RetryWorkflow, []string{s.keys.Dead(id), s.keys.Inflight(id)}, args})
	reply, err := r.ToArray()
	if err == nil && len(reply) != 3 {
		err = fmt.Errorf("reply of %d values, want 3", len(reply))
	}
	if err != nil {
		return "", false, fmt.Errorf("retry workflow %q: %w", wf, err)
	}
	switch i64(reply[0]) {
	case -1:
		return "", false, ErrWorkflowNotFound
	case -5:
		return "", false, &WorkflowError{Op: "retry", Workflow: wf,
			Reason: fmt.Sprintf("the job of node %q has expired (kept for %s after it ended)", str(reply[1]), s.cfg.Retention)}
	case -6:
		others := strings.Trim(str(reply[1]), ",")
		return "", false, &WorkflowError{Op: "retry", Workflow: wf,
			Reason: fmt.Sprintf("its definition's overlap policy allows no second instance while %s runs or waits; retry it when that one ends", strings.ReplaceAll(others, ",", ", "))}
	}
	s.publish(ctx, s.readySignals(nil, id, strs(reply[2])))
	if replErr != nil {
		return "", false, fmt.Errorf("retry workflow %q: %w", wf, replErr)
	}
	return job.WorkflowState(str(reply[1])), i64(reply[0]) == 1, nil
}

// WorkflowInfo is a workflow as stored: its state and every node's.
type WorkflowInfo struct {
	ID        string
	Shard     ID
	State     job.WorkflowState
	CreatedAt time.Time
	EndedAt   time.Time // zero while running
	// Held is set for a scheduled instance that waits for its definition's running one.
	Held  bool
	Nodes []NodeInfo // in an order where every node follows its parents
	// Expires is when an ended workflow will be removed (zero while it runs).
	Expires time.Time
}

// NodeInfo is one node of a workflow.
type NodeInfo struct {
	ID        string
	JobID     string // the node's job (job.NodeJobID)
	State     job.NodeState
	Rule      job.Rule
	DependsOn []string
	Attempts  int
	// ReleasedAt is when its rule was met and its run made ready; EndedAt when it ended.
	ReleasedAt time.Time
	EndedAt    time.Time
	ResultSize int // bytes of a succeeded node's result
}

// Counts returns how many nodes are in each state.
func (w *WorkflowInfo) Counts() map[job.NodeState]int {
	out := map[job.NodeState]int{}
	for _, n := range w.Nodes {
		out[n.State]++
	}
	return out
}

// Workflow returns a workflow with its nodes' states, or ErrWorkflowNotFound. A node
// whose run is under way shows its job's state (ready, running, retrying) and attempts.
func (s *Store) Workflow(ctx context.Context, wf string) (*WorkflowInfo, error) {
	if err := job.ValidateRef("id", wf, job.MaxWorkflowIDLen); err != nil {
		return nil, err
	}
	id := s.ShardOf(wf)
	key := s.keys.Workflow(id, wf)
	res := s.c.DoMulti(ctx, s.c.B().Hgetall().Key(key).Build(), s.c.B().Pexpiretime().Key(key).Build())
	m, err := res[0].AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("read workflow %q: %w", wf, err)
	}
	if len(m) == 0 {
		return nil, ErrWorkflowNotFound
	}
	info := &WorkflowInfo{ID: wf, Shard: id, State: job.WorkflowState(m["st"]), CreatedAt: msField(m["cr"]),
		EndedAt: msField(m["en"]), Held: m["hold"] == "1"}
	if exp, err := res[1].AsInt64(); err == nil && exp > 0 {
		info.Expires = time.UnixMilli(exp)
	}
	var released []int
	for node := range strings.SplitSeq(m["nodes"], ",") {
		if node == "" {
			continue
		}
		n := parseNode(node, m["s:"+node])
		n.JobID = job.NodeJobID(wf, node)
		if p := m["p:"+node]; p != "" {
			n.DependsOn = strings.Split(p, ",")
		}
		n.ResultSize = len(m["x:"+node])
		if n.State == "released" {
			released = append(released, len(info.Nodes))
		}
		info.Nodes = append(info.Nodes, n)
	}
	if len(released) > 0 {
		if err := s.nodeRuns(ctx, id, info.Nodes, released); err != nil {
			return nil, fmt.Errorf("read workflow %q: %w", wf, err)
		}
	}
	return info, nil
}

// nodeRuns fills the state and attempts of released nodes from their jobs' runs: a job
// hash's, or a packed job's run state (lua/include/packed.lua: none while it is ready,
// "R|…" while its first attempt runs).
func (s *Store) nodeRuns(ctx context.Context, id ID, nodes []NodeInfo, released []int) error {
	cmds := make(rueidis.Commands, 0, 2*len(released))
	for _, i := range released {
		n := &nodes[i]
		cmds = append(cmds,
			s.c.B().Hmget().Key(s.keys.Job(id, n.JobID)).Field("st", "r"+strconv.FormatInt(n.ReleasedAt.UnixMilli(), 10)).Build(),
			s.c.B().Hget().Key(s.keys.PackedRuns(id)).Field(n.JobID).Build())
	}
	replies := s.c.DoMulti(ctx, cmds...)
	for k := range released {
		v, err := replies[2*k].ToArray()
		if err != nil {
			return err
		}
		packed, err := replies[2*k+1].ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			return err
		}
		n := &nodes[released[k]]
		st, _ := v[0].ToString()
		run, _ := v[1].ToString()
		if st == "" && strings.HasPrefix(packed, "R|") {
			n.State, n.Attempts = job.NodeRunning, 1
			continue
		}
		switch st {
		case "running", "retrying":
			n.State = job.NodeState(st)
		default:
			n.State = job.NodeReady
		}
		parts := strings.SplitN(run, "|", 3)
		if len(parts) >= 2 {
			n.Attempts, _ = strconv.Atoi(parts[1])
			if parts[0] == "running" {
				n.State = job.NodeRunning
			}
		}
	}
	return nil
}

// parseNode decodes a node's state field, "state|rule|np|ok|bad|skip|rel|end|att".
func parseNode(node, v string) NodeInfo {
	f := strings.Split(v, "|")
	for len(f) < 9 {
		f = append(f, "")
	}
	n := NodeInfo{ID: node, State: job.NodeState(f[0]), Rule: job.Rule(f[1]), ReleasedAt: msField(f[6]), EndedAt: msField(f[7])}
	n.Attempts, _ = strconv.Atoi(f[8])
	return n
}

func msField(v string) time.Time {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// ParentResults returns the results of node job jobID's parents that succeeded with one,
// by parent node id; nil for a job that is no workflow node.
func (s *Store) ParentResults(ctx context.Context, jobID string) (map[string][]byte, error) {
	out, errs := s.ParentResultsMany(ctx, []string{jobID})
	return out[0], errs[0]
}

// ParentResultsMany is ParentResults for many jobs in two pipelined round trips (the
// parents' names, then their results), as a claim of many nodes' runs needs: per job a
// map (nil for a job that is no workflow node, or has no parents) or an error.
func (s *Store) ParentResultsMany(ctx context.Context, jobIDs []string) ([]map[string][]byte, []error) {
	keys, parents, errs := s.parentNames(ctx, jobIDs)
	fields := make([][]string, len(jobIDs))
	for i, ps := range parents {
		if ps != nil {
			fields[i] = ps
		}
	}
	return s.readParentResults(ctx, jobIDs, keys, fields, errs), errs
}

// ParentResultsUpTo is ParentResultsMany for callers that pass on at most max bytes of a
// job's parents' results (a claim over HTTP, a push delivery's header): per job, the
// results that fit in max, taken the smaller first (by size, then node id; one that does
// not fit is passed over for the next), and the parents whose results did not fit,
// sorted. Only those that fit are read, in three pipelined round trips: the parents'
// names, their results' sizes, the results.
func (s *Store) ParentResultsUpTo(ctx context.Context, jobIDs []string, max int) ([]map[string][]byte, [][]string, []error) {
	keys, parents, errs := s.parentNames(ctx, jobIDs)
	var at []int
	var cmds rueidis.Commands
	for i, ps := range parents {
		for _, p := range ps {
			at = append(at, i)
			cmds = append(cmds, s.c.B().Hstrlen().Key(keys[i]).Field("x:"+p).Build())
		}
	}
	sizes := make([][]int64, len(jobIDs))
	for k, r := range s.c.DoMulti(ctx, cmds...) {
		i := at[k]
		n, err := r.AsInt64()
		if err != nil && errs[i] == nil {
			errs[i] = fmt.Errorf("parent results of %q: %w", jobIDs[i], err)
		}
		sizes[i] = append(sizes[i], n)
	}
	fields := make([][]string, len(jobIDs))
	omitted := make([][]string, len(jobIDs))
	for i, ps := range parents {
		if errs[i] != nil || len(ps) == 0 {
			continue
		}
		order := make([]int, len(ps))
		for k := range order {
			order[k] = k
		}
		sort.Slice(order, func(a, b int) bool {
			if sa, sb := sizes[i][order[a]], sizes[i][order[b]]; sa != sb {
				return sa < sb
			}
			return ps[order[a]] < ps[order[b]]
		})
		left := int64(max)
		for _, k := range order {
			// A size of 0 is an empty result or none (a parent that has not succeeded, or
			// succeeded without one): read, it costs nothing.
			if n := sizes[i][k]; n <= left {
				left -= n
				fields[i] = append(fields[i], ps[k])
			} else {
				omitted[i] = append(omitted[i], ps[k])
			}
		}
		sort.Strings(omitted[i])
	}
	return s.readParentResults(ctx, jobIDs, keys, fields, errs), omitted, errs
}

// parentNames reads the parents of node jobs jobIDs in one pipelined round trip: per
// job its workflow's key and its parents (nil for a job that is no workflow node, or a
// root), or an error.
func (s *Store) parentNames(ctx context.Context, jobIDs []string) (keys []string, parents [][]string, errs []error) {
	errs = make([]error, len(jobIDs))
	keys = make([]string, len(jobIDs))
	parents = make([][]string, len(jobIDs))
	var at []int
	var cmds rueidis.Commands
	for i, jobID := range jobIDs {
		wf, node, ok := job.SplitNodeJobID(jobID)
		if !ok {
			continue
		}
		keys[i] = s.keys.Workflow(s.ShardOf(jobID), wf)
		at = append(at, i)
		cmds = append(cmds, s.c.B().Hget().Key(keys[i]).Field("p:"+node).Build())
	}
	for k, r := range s.c.DoMulti(ctx, cmds...) {
		i := at[k]
		p, err := r.ToString()
		if rueidis.IsRedisNil(err) || (err == nil && p == "") {
			continue
		}
		if err != nil {
			errs[i] = fmt.Errorf("parent results of %q: %w", jobIDs[i], err)
			continue
		}
		parents[i] = strings.Split(p, ",")
	}
	return keys, parents, errs
}

// readParentResults reads, in one pipelined round trip, the results of parents fields[i]
// of each job jobIDs[i] (its workflow's key keys[i]) without an error in errs, where it records
// those it meets: per job a map of the parents that have a result (nil for a job with no
// fields).
func (s *Store) readParentResults(ctx context.Context, jobIDs, keys []string, fields [][]string, errs []error) []map[string][]byte {
	out := make([]map[string][]byte, len(keys))
	var at []int
	var cmds rueidis.Commands
	for i, ps := range fields {
		if errs[i] != nil || len(ps) == 0 {
			continue
		}
		fs := make([]string, len(ps))
		for f, q := range ps {
			fs[f] = "x:" + q
		}
		at = append(at, i)
		cmds = append(cmds, s.c.B().Hmget().Key(keys[i]).Field(fs...).Build())
	}
	for k, r := range s.c.DoMulti(ctx, cmds...) {
		i := at[k]
		vals, err := r.ToArray()
		if err != nil {
			errs[i] = fmt.Errorf("parent results of %q: %w", jobIDs[i], err)
			continue
		}
		out[i] = make(map[string][]byte, len(vals))
		for f, v := range vals {
			if b, err := v.ToString(); err == nil {
				out[i][fields[i][f]] = []byte(b)
			}
		}
	}
	return out
}

// NodeResult returns a node's result and whether it has one.
func (s *Store) NodeResult(ctx context.Context, wf, node string) ([]byte, bool, error) {
	id := s.ShardOf(wf)
	v, err := s.c.Do(ctx, s.c.B().Hget().Key(s.keys.Workflow(id, wf)).Field("x:"+node).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("result of node %q of workflow %q: %w", node, wf, err)
	}
	return []byte(v), true, nil
}

// WorkflowSummary is one workflow of a listing.
type WorkflowSummary struct {
	ID        string
	State     job.WorkflowState
	Nodes     int
	Left      int // nodes not ended
	CreatedAt time.Time
	EndedAt   time.Time
	// Held is set for a scheduled instance that waits for its definition's running one
	// (overlap buffer_one).
	Held bool
}

// WorkflowFilter selects workflows for ListWorkflows.
type WorkflowFilter struct {
	// State is "" for every state. (A scheduled workflow's definition is a job: List
	// finds it on queue job.WorkflowQueue.)
	State job.WorkflowState
	// Prefix keeps the workflows whose id starts with it ("" keeps all); it must be what
	// some workflow id could start with (job.ValidateWorkflowPrefix). A prefix with '@'
	// names instances of one definition, which live on its shard: the listing then scans
	// only the Redis primary that holds that shard.
	Prefix string
	Limit  int    // about the most workflows a page returns; default 100, at most 1000
	Cursor string // from the previous page's Next; "" starts
}

// WorkflowPage is one page of ListWorkflows.
type WorkflowPage struct {
	Workflows []WorkflowSummary // sorted by id
	Next      string            // cursor of the next page; empty at the end
}

// minScanCount is the smallest COUNT of a ListWorkflows SCAN.
const minScanCount = 16

// ListWorkflows pages through the namespace's workflows node by node with SCAN, the
// pattern matching the filter's prefix (a workflow that exists throughout is returned
// at least once; one created or removed meanwhile may or may not be), and keeps those in
// the filter's state. A page does at most scanRounds SCAN calls: it holds about Limit
// workflows, fewer (even none) when its calls found fewer, while Next is not empty; the
// listing is complete when Next is empty, never before. Each call's COUNT is sized from
// how many workflows the page still wants and how many the previous call found, but a
// call's batch is never split (SCAN from the same cursor need not return the same keys
// again), so a page may hold more than Limit (miniredis answers every SCAN with all its
// keys). An invalid prefix or limit, or a cursor that does not decode, is a
// *job.FieldError naming "prefix", "limit" or "cursor".
func (s *Store) ListWorkflows(ctx context.Context, f WorkflowFilter) (WorkflowPage, error) {
	limit, err := listLimit(f.Limit)
	if err != nil {
		return WorkflowPage{}, err
	}
	if err := job.ValidateWorkflowPrefix("prefix", f.Prefix); err != nil {
		return WorkflowPage{}, err
	}
	addrs, nodes, err := Primaries(ctx, s.c)
	if err != nil {
		return WorkflowPage{}, fmt.Errorf("list workflows: %w", err)
	}
	// The primaries scanned are addrs[node:end].
	node, end, cur := 0, len(addrs), uint64(0)
	match := globQuote(s.keys.global()) + "{*}:wf:" + globQuote(f.Prefix) + "*"
	pinned := strings.IndexByte(f.Prefix, job.NodeSep) >= 0
	if pinned {
		// Every id with this prefix is an instance of one definition, on its shard.
		id := s.ShardOf(f.Prefix)
		match = globQuote(s.keys.Prefix(id)) + "wf:" + globQuote(f.Prefix) + "*"
		if f.Cursor == "" {
			if node, err = s.primaryOf(ctx, id, addrs, nodes); err != nil {
				return WorkflowPage{}, fmt.Errorf("list workflows: %w", err)
			}
			end = node + 1
		}
	}
	if f.Cursor != "" {
		if _, node, cur, err = decodeListCursor(f.Cursor, addrs, s.cfg.Shards); err != nil {
			return WorkflowPage{}, err
		}
		if pinned {
			end = node + 1 // the primary the first page found
		}
	}
	count := int64(min(scanCount, max(minScanCount, limit)))
	var page WorkflowPage
	for round := 0; round < scanRounds && node < end && len(page.Workflows) < limit; round++ {
		n := nodes[addrs[node]]
		e, err := n.Do(ctx, n.B().Scan().Cursor(cur).Match(match).Count(count).Build()).AsScanEntry()
		if err != nil {
			return WorkflowPage{}, fmt.Errorf("list workflows: scan %s: %w", addrs[node], err)
		}
		batch, err := s.workflowSummaries(ctx, n, e.Elements, f.State)
		if err != nil {
			return WorkflowPage{}, fmt.Errorf("list workflows: %w", err)
		}
		page.Workflows = append(page.Workflows, batch...)
		if cur = e.Cursor; cur == 0 {
			node++
		}
		count = nextScanCount(count, len(batch), limit-len(page.Workflows))
	}
	sort.Slice(page.Workflows, func(a, b int) bool { return page.Workflows[a].ID < page.Workflows[b].ID })
	if node < end {
		page.Next = encodeListCursor(s.cfg.Shards, addrs[node], cur)
	}
	return page, nil
}

// nextScanCount is the COUNT of a listing's next SCAN after one of COUNT count that kept
// found workflows: the keys that should hold the want workflows still wanted at that
// rate, at most 8 times count (8 times when it kept none), from minScanCount to
// scanCount.
func nextScanCount(count int64, found, want int) int64 {
	next := 8 * count
	if found > 0 && want > 0 {
		next = min(next, count*int64(want)/int64(found))
	}
	return min(scanCount, max(minScanCount, next))
}

// workflowSummaries reads the workflows of keys (workflow hashes on node n), those in
// state when it is not empty; workflows gone meanwhile are left out.
func (s *Store) workflowSummaries(ctx context.Context, n rueidis.Client, keys []string, state job.WorkflowState) ([]WorkflowSummary, error) {
	var cmds rueidis.Commands
	var ids []string
	for _, k := range keys {
		_, wf, ok := strings.Cut(k, "}:wf:")
		if !ok {
			continue
		}
		ids = append(ids, wf)
		cmds = append(cmds, n.B().Hmget().Key(k).Field("st", "n", "left", "cr", "en", "hold").Build())
	}
	var out []WorkflowSummary
	for i, r := range n.DoMulti(ctx, cmds...) {
		v, err := r.ToArray()
		if err != nil {
			return nil, fmt.Errorf("read workflow %q: %w", ids[i], err)
		}
		if len(v) != 6 {
			return nil, fmt.Errorf("read workflow %q: %d fields, want 6", ids[i], len(v))
		}
		st, _ := v[0].ToString()
		if st == "" || (state != "" && job.WorkflowState(st) != state) {
			continue
		}
		w := WorkflowSummary{ID: ids[i], State: job.WorkflowState(st)}
		nn, _ := v[1].ToString()
		left, _ := v[2].ToString()
		cr, _ := v[3].ToString()
		en, _ := v[4].ToString()
		hold, _ := v[5].ToString()
		w.Nodes, _ = strconv.Atoi(nn)
		w.Left, _ = strconv.Atoi(left)
		w.CreatedAt, w.EndedAt = msField(cr), msField(en)
		w.Held = hold == "1"
		out = append(out, w)
	}
	return out, nil
}

// primaryOf returns the index in addrs of the primary that holds shard id's keys: the
// only one, or the Cluster master that answers for the shard's slot (the others answer
// MOVED: the clients of Primaries do not follow redirections).
func (s *Store) primaryOf(ctx context.Context, id ID, addrs []string, nodes map[string]rueidis.Client) (int, error) {
	if len(addrs) == 1 {
		return 0, nil
	}
	key := s.keys.Epoch(id)
	for i, a := range addrs {
		n := nodes[a]
		err := n.Do(ctx, n.B().Exists().Key(key).Build()).Error()
		if re, ok := rueidis.IsRedisErr(err); ok {
			if _, moved := re.IsMoved(); moved {
				continue
			}
		}
		if err != nil {
			return 0, fmt.Errorf("find the primary of shard %d: %s: %w", id, a, err)
		}
		return i, nil
	}
	return 0, fmt.Errorf("no primary of %v holds shard %d", addrs, id)
}

// WorkflowCounts are the namespace's workflows started and ended since it was created,
// summed over its shards (the fields w:created, w:retried and w:<state> of their stats
// hashes, counted by the workflow scripts). A snapshot restore does not count the
// workflows it brings back as started: Running is then at least 0.
type WorkflowCounts struct {
	Created, Retried int64
	Ended            map[job.WorkflowState]int64 // succeeded, failed, cancelled
}

// Running returns the workflows started (created or retried) and not ended.
func (c WorkflowCounts) Running() int64 {
	n := c.Created + c.Retried
	for _, e := range c.Ended {
		n -= e
	}
	return max(n, 0)
}

// WorkflowCounts reads the workflow counts of every shard, in one pipeline.
func (s *Store) WorkflowCounts(ctx context.Context) (WorkflowCounts, error) {
	states := []job.WorkflowState{job.WorkflowSucceeded, job.WorkflowFailed, job.WorkflowCancelled}
	fields := []string{"w:created", "w:retried"}
	for _, st := range states {
		fields = append(fields, "w:"+string(st))
	}
	cmds := make(rueidis.Commands, s.cfg.Shards)
	for i := range cmds {
		cmds[i] = s.c.B().Hmget().Key(s.keys.Stats(ID(i))).Field(fields...).Build()
	}
	out := WorkflowCounts{Ended: map[job.WorkflowState]int64{}}
	for sh, r := range s.c.DoMulti(ctx, cmds...) {
		vs, err := r.ToArray()
		if err != nil || len(vs) != len(fields) {
			return WorkflowCounts{}, fmt.Errorf("workflow counts of shard %d: %v", sh, err)
		}
		n := make([]int64, len(vs))
		for i, v := range vs {
			if str, err := v.ToString(); err == nil {
				n[i], _ = strconv.ParseInt(str, 10, 64)
			}
		}
		out.Created += n[0]
		out.Retried += n[1]
		for i, st := range states {
			out.Ended[st] += n[2+i]
		}
	}
	return out, nil
}
