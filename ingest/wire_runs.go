package ingest

import (
	"encoding/json"
	"time"
)

// The JSON shapes of the run endpoints (POST /v1/runs:claim and friends), through which
// workers in any language claim, heartbeat and finish runs. docs/executors.md is the
// protocol reference.

// ClaimRequest is the body of POST /v1/runs:claim.
type ClaimRequest struct {
	// Queues to claim from, at least one (each a queue name).
	Queues []string `json:"queues"`
	// Types, when not empty, are the job types the worker handles: a claimed run of
	// another type is handed back at once, without using an attempt.
	Types []string `json:"types,omitempty"`
	// Max is the most runs to return, 1 to MaxClaimRuns; 0 means 1.
	Max int `json:"max,omitempty"`
	// Wait is how long to wait for a run when none is ready (a Go duration, at most
	// MaxClaimWait); "" or "0s" answers at once.
	Wait string `json:"wait,omitempty"`
	// Worker names the worker in the runs' history.
	Worker string `json:"worker"`
}

// ClaimedRun is one run handed to a worker by POST /v1/runs:claim. Its payload comes in
// Payload when its bytes are valid JSON, in PayloadBase64 otherwise.
type ClaimedRun struct {
	Run           string          `json:"run"` // "<job id>:<due ms>": the run id, stable across attempts
	JobID         string          `json:"job_id"`
	Queue         string          `json:"queue"`
	Type          string          `json:"type"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 string          `json:"payload_base64,omitempty"`
	Attempt       int             `json:"attempt"` // 1-based
	MaxAttempts   int             `json:"max_attempts"`
	Due           time.Time       `json:"due"`
	// Deadline is when the run is redelivered unless the worker finishes it or
	// heartbeats before (its visibility deadline).
	Deadline time.Time `json:"deadline"`
	// Timeout is the job's timeout: the handler should give up after it.
	Timeout string `json:"timeout"`
	// Visibility is how far a heartbeat pushes Deadline.
	Visibility string `json:"visibility"`
	// Token is the lease token: every call on the run carries it.
	Token string `json:"token"`
	// Workflow and Node name the workflow node a run belongs to (its job id is
	// "<workflow>@<node>"); empty for other jobs.
	Workflow string `json:"workflow,omitempty"`
	Node     string `json:"node,omitempty"`
	// Parents are the results of a node's parents that succeeded with one, at most
	// MaxParentResults bytes in all; ParentsOmitted names those left out for size (GET
	// /v1/workflows/{id}/nodes/{node}/result reads them).
	Parents        []ParentResult `json:"parents,omitempty"`
	ParentsOmitted []string       `json:"parents_omitted,omitempty"`
	// ParentsError says that the parents' results could not be read with the claim
	// (Parents is then empty): read them by the result endpoint.
	ParentsError string `json:"parents_error,omitempty"`
}

// MaxParentResults bounds the bytes of parents' results one claimed run carries.
const MaxParentResults = 64 << 10

// ParentResult is the result of one parent of a workflow node: Result when its bytes
// are JSON, ResultBase64 otherwise.
type ParentResult struct {
	Node         string          `json:"node"`
	Result       json.RawMessage `json:"result,omitempty"`
	ResultBase64 string          `json:"result_base64,omitempty"`
}

// ClaimReply is the reply of POST /v1/runs:claim; Runs is empty when none came within
// the wait.
type ClaimReply struct {
	Runs []ClaimedRun `json:"runs"`
}

// HeldRun names a run a worker holds, with its token.
type HeldRun struct {
	Run   string `json:"run"`
	Token string `json:"token"`
}

// HeartbeatRequest is the body of POST /v1/runs:heartbeat.
type HeartbeatRequest struct {
	Runs   []HeldRun `json:"runs"`
	Worker string    `json:"worker,omitempty"`
}

// Heartbeat states of a run.
const (
	HeartbeatExtended  = "extended"  // the deadline was pushed by the job's visibility timeout
	HeartbeatCancelled = "cancelled" // the job was cancelled: stop the handler and report :cancel
	HeartbeatLost      = "lost"      // not held with this token any more: stop, do not report
)

// HeartbeatRun is the state of one run in a HeartbeatReply.
type HeartbeatRun struct {
	Run   string `json:"run"`
	State string `json:"state"` // HeartbeatExtended, HeartbeatCancelled or HeartbeatLost
}

// HeartbeatReply is the reply of POST /v1/runs:heartbeat, in request order.
type HeartbeatReply struct {
	Runs []HeartbeatRun `json:"runs"`
}

// AckRequest is the body of POST /v1/runs/{run}:ack. Result holds any JSON value,
// stored as its bytes; ResultBase64 holds arbitrary bytes; at most one may be set.
type AckRequest struct {
	Token        string          `json:"token"`
	Result       json.RawMessage `json:"result,omitempty"`
	ResultBase64 string          `json:"result_base64,omitempty"`
}

// FailRequest is the body of POST /v1/runs/{run}:fail. RetryAfter (a Go duration), when
// set, replaces the job's backoff for this retry; the attempt is used either way.
type FailRequest struct {
	Token      string `json:"token"`
	Error      string `json:"error"`
	RetryAfter string `json:"retry_after,omitempty"`
}

// SnoozeRequest is the body of POST /v1/runs/{run}:snooze: try again after Delay (a Go
// duration) without using an attempt.
type SnoozeRequest struct {
	Token string `json:"token"`
	Delay string `json:"delay"`
}

// CancelRunRequest is the body of POST /v1/runs/{run}:cancel: the run ends cancelled
// and is not retried.
type CancelRunRequest struct {
	Token string `json:"token"`
	Error string `json:"error,omitempty"`
}

// RunReply is the reply of the run actions (:ack, :fail, :snooze, :cancel).
type RunReply struct {
	Run     string `json:"run"`
	Outcome string `json:"outcome"` // "ok", "error", "snooze" or "cancel", as reported
}

// CodeTokenMismatch is the code of a 409 reply to a call on a run not held with its
// token (redelivered to another worker after its deadline, or finished).
const CodeTokenMismatch = "token_mismatch"

// AckRunsRequest is the body of POST /v1/runs:ack: the successes of several runs in one
// call (at most MaxReportRuns).
type AckRunsRequest struct {
	Runs []RunAck `json:"runs"`
}

// RunAck is one run of an AckRunsRequest: as the body of POST /v1/runs/{run}:ack, with
// the run.
type RunAck struct {
	Run          string          `json:"run"`
	Token        string          `json:"token"`
	Result       json.RawMessage `json:"result,omitempty"`
	ResultBase64 string          `json:"result_base64,omitempty"`
}

// FailRunsRequest is the body of POST /v1/runs:fail: the failures of several runs in
// one call (at most MaxReportRuns).
type FailRunsRequest struct {
	Runs []RunFail `json:"runs"`
}

// RunFail is one run of a FailRunsRequest: as the body of POST /v1/runs/{run}:fail, with
// the run.
type RunFail struct {
	Run        string `json:"run"`
	Token      string `json:"token"`
	Error      string `json:"error,omitempty"`
	RetryAfter string `json:"retry_after,omitempty"`
}

// RunResult is what became of one run of a batch report, in request order. Status is
// the HTTP status the run's own call (POST /v1/runs/{run}:ack or :fail) would have had:
// 200 with Outcome, else Error: 409 CodeTokenMismatch (not held with this token: it was
// redelivered after its deadline, or it ended already), 404 (no such run or job), 400 or
// 413 (this run's fields; the others are reported), 500 or 503 (Redis, for the runs of
// one shard).
type RunResult struct {
	Run     string `json:"run"`
	Status  int    `json:"status"`
	Outcome string `json:"outcome,omitempty"` // "ok" or "error", with status 200
	Error   *Error `json:"error,omitempty"`
}

// RunsReply is the reply of POST /v1/runs:ack and /v1/runs:fail.
type RunsReply struct {
	Runs    []RunResult `json:"runs"`    // in request order
	Done    int         `json:"done"`    // runs with status 200
	Refused int         `json:"refused"` // runs with another status
}
