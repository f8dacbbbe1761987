package ingest

import (
	"encoding/json"
	"time"
)

// The JSON shapes of the workflow endpoints (/v1/workflows). A workflow is a set of jobs
// with dependencies between them (a directed acyclic graph); docs/workflows.md describes
// the model.

// WorkflowRequest is the body of POST /v1/workflows. ID is the idempotency key, as a
// job's is (generated when empty, or named by the Idempotency-Key header). With a
// Schedule (cron and timezone only), the workflow is a definition that starts an instance
// of the whole graph at every occurrence; Overlap, Misfire and MisfireAfter then apply to
// whole instances, as they do to a recurring job's runs.
type WorkflowRequest struct {
	ID           string        `json:"id,omitempty"`
	Jobs         []NodeRequest `json:"jobs"`
	Schedule     *Schedule     `json:"schedule,omitempty"`
	Overlap      string        `json:"overlap,omitempty"`
	Misfire      string        `json:"misfire,omitempty"`
	MisfireAfter string        `json:"misfire_after,omitempty"`
}

// NodeRequest is one job of a workflow: the fields of a JobRequest but the schedule (a
// node runs when its rule is met, and a schedule is refused), with ID required (unique
// in the workflow: it names the node), the nodes it depends on, and its rule
// (all_success, the default, all_done, one_success, one_failed or none_failed). Overlap
// and misfire do not apply to nodes.
type NodeRequest struct {
	ID            string          `json:"id"`
	Queue         string          `json:"queue,omitempty"`
	Type          string          `json:"type,omitempty"`
	Target        *Target         `json:"target,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 string          `json:"payload_base64,omitempty"`
	Schedule      *Schedule       `json:"schedule,omitempty"`
	Priority      *int            `json:"priority,omitempty"`
	Retry         *Retry          `json:"retry,omitempty"`
	Timeout       string          `json:"timeout,omitempty"`
	Visibility    string          `json:"visibility,omitempty"`
	Overlap       string          `json:"overlap,omitempty"`
	Misfire       string          `json:"misfire,omitempty"`
	MisfireAfter  string          `json:"misfire_after,omitempty"`
	DependsOn     []string        `json:"depends_on,omitempty"`
	Rule          string          `json:"rule,omitempty"`
}

// Workflow is a workflow as the API returns it. State is running, succeeded, failed or
// cancelled for a workflow (a scheduled definition's instance too, id
// "<definition id>@<due ms>"), and scheduled for a scheduled workflow's definition,
// which has Schedule, NextRunAt and Definition instead of Nodes. Counts gives how many
// nodes are in each node state.
type Workflow struct {
	ID        string         `json:"id"`
	Shard     int            `json:"shard"`
	State     string         `json:"state"`
	CreatedAt *time.Time     `json:"created_at,omitempty"`
	EndedAt   *time.Time     `json:"ended_at,omitempty"`
	ExpiresAt *time.Time     `json:"expires_at,omitempty"`
	Held      bool           `json:"held,omitempty"` // a buffered instance waiting for its definition's running one
	Nodes     []Node         `json:"nodes,omitempty"`
	Counts    map[string]int `json:"counts,omitempty"`
	// A scheduled workflow's definition: its schedule and policies, the state of its
	// definition job (scheduled, paused, cancelled...), its next occurrence, and the
	// graph each instance runs.
	Schedule     *Schedule        `json:"schedule,omitempty"`
	Overlap      string           `json:"overlap,omitempty"`
	Misfire      string           `json:"misfire,omitempty"`
	MisfireAfter string           `json:"misfire_after,omitempty"`
	JobState     string           `json:"job_state,omitempty"`
	NextRunAt    *time.Time       `json:"next_run_at,omitempty"`
	Definition   *WorkflowRequest `json:"definition,omitempty"`
}

// Node is one node of a workflow in GET /v1/workflows/{id}: its state (waiting, ready,
// running, retrying, succeeded, failed, cancelled, upstream_failed or skipped), its
// rule and parents, its job's id (GET /v1/jobs/{job_id} and its runs), the attempts made,
// when its rule released it and when it ended, and the size of a succeeded node's result
// (GET /v1/workflows/{id}/nodes/{node}/result).
type Node struct {
	ID         string     `json:"id"`
	JobID      string     `json:"job_id"`
	State      string     `json:"state"`
	Rule       string     `json:"rule"`
	DependsOn  []string   `json:"depends_on,omitempty"`
	Attempts   int        `json:"attempts"`
	ReleasedAt *time.Time `json:"released_at,omitempty"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
	ResultSize int        `json:"result_size"`
}

// WorkflowCreated is the reply of POST /v1/workflows: 201 when created, 200 when the id
// existed with the same definition (State is then the existing workflow's). Scheduled is
// set for a scheduled workflow's definition (State "scheduled"); Nodes is the number of
// jobs of the graph.
type WorkflowCreated struct {
	ID        string `json:"id"`
	Shard     int    `json:"shard"`
	State     string `json:"state"`
	Scheduled bool   `json:"scheduled,omitempty"`
	Nodes     int    `json:"nodes"`
}

// WorkflowSummary is one workflow of GET /v1/workflows: Nodes in all, Left not ended;
// Held for a scheduled instance that waits for its definition's running one (overlap
// buffer_one). A scheduled definition (state=scheduled) has Schedule and NextRunAt
// instead.
type WorkflowSummary struct {
	ID        string     `json:"id"`
	State     string     `json:"state"`
	Nodes     int        `json:"nodes"`
	Left      int        `json:"left"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	Held      bool       `json:"held,omitempty"`
	Schedule  *Schedule  `json:"schedule,omitempty"`
	JobState  string     `json:"job_state,omitempty"`
	NextRunAt *time.Time `json:"next_run_at,omitempty"`
}

// WorkflowFilter selects workflows for Client.ListWorkflows (GET /v1/workflows); empty
// fields match all.
type WorkflowFilter struct {
	// State is running, succeeded, failed or cancelled; scheduled lists the scheduled
	// definitions instead of workflows and instances.
	State string
	// Prefix keeps the workflows whose id starts with it: `<def>@` lists the instances
	// of scheduled workflow def, running, held and ended alike.
	Prefix string
}

// WorkflowList is the reply of GET /v1/workflows, a page at a time; workflows and
// instances are sorted by id within a page (the listing scans Redis: there is no order
// across pages). The listing is
// complete when NextCursor is empty, never before; a page may hold fewer than limit
// workflows, even none, before that (a page does a bounded amount of work, and a prefix
// or state filter keeps what matches), or a few more (a scan batch is never split).
// Without a state filter it holds workflows and instances; state=scheduled lists the
// scheduled definitions.
type WorkflowList struct {
	Workflows  []WorkflowSummary `json:"workflows"`
	NextCursor string            `json:"next_cursor,omitempty"`
}

// WorkflowTriggerReply is the reply of POST /v1/workflows/{id}:trigger: the run of the
// scheduled workflow's definition job made now, and the id of the instance it starts
// (GET /v1/workflows/{instance} finds it once the workflow starter has run it).
type WorkflowTriggerReply struct {
	ID       string `json:"id"`
	Run      string `json:"run"`
	Instance string `json:"instance"`
}
