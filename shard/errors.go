package shard

import (
	"context"
	"errors"
	"fmt"

	"github.com/tockhq/tock/job"
)

// Errors returned by Store methods. Callers compare with errors.Is.
var (
	ErrNotFound      = errors.New("job not found")
	ErrTokenMismatch = errors.New("run is not held with this token (redelivered after its visibility deadline, or finished)")
	ErrLeaseLost     = errors.New("shard lease lost")
	ErrClockSkew     = errors.New("no occurrence after the Redis server's time: local clock estimate is off")
	ErrLeaseHeld     = errors.New("shard lease held by another dispatcher")
	// ErrWorkflowIDTaken refuses a workflow whose id the other kind has: a scheduled
	// workflow's definition for a workflow without a schedule, or the other way round.
	// One id names one workflow.
	ErrWorkflowIDTaken = errors.New("the id is taken by the other kind of workflow (scheduled or not)")
)

// Script reply codes (negative integers) and the sentinel each maps to.
var codeErrors = map[int64]error{
	-1: ErrNotFound,
	-2: ErrTokenMismatch,
	-3: ErrLeaseLost,
	-4: ErrClockSkew,
	-6: ErrWorkflowIDTaken,
}

func codeError(code int64) error {
	if err, ok := codeErrors[code]; ok {
		return err
	}
	return fmt.Errorf("unknown script reply code %d", code)
}

// StateError reports an operation that the job's state does not allow, such as
// triggering a paused job.
type StateError struct {
	Op    string
	JobID string
	State string
}

func (e *StateError) Error() string {
	return fmt.Sprintf("%s job %q: not possible in state %s", e.Op, e.JobID, e.State)
}

// ConfigMismatchError is returned by Open when the namespace was initialised with other
// settings than the caller's.
type ConfigMismatchError struct {
	Namespace string
	Setting   string
	Stored    string
	Given     string
}

func (e *ConfigMismatchError) Error() string {
	return fmt.Sprintf("namespace %q was initialised with %s=%s, this process is configured with %s=%s",
		e.Namespace, e.Setting, e.Stored, e.Setting, e.Given)
}

// WorkflowError refuses an operation that a workflow's state does not allow, saying why.
type WorkflowError struct {
	Op       string
	Workflow string
	Reason   string
}

func (e *WorkflowError) Error() string {
	return fmt.Sprintf("%s workflow %q: %s", e.Op, e.Workflow, e.Reason)
}

// NodeError refuses an operation on a workflow node's job that only its workflow may do
// (pause, resume, trigger, update, delete): the workflow decides when a node runs.
type NodeError struct {
	Op       string
	JobID    string
	Workflow string
	Node     string
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("%s job %q: it is node %q of workflow %q, which decides when it runs: cancel or retry the workflow instead",
		e.Op, e.JobID, e.Node, e.Workflow)
}

// refuseNode returns a *NodeError when jobID is a workflow node's job (an id with '@').
func refuseNode(op, jobID string) error {
	if wf, node, ok := job.SplitNodeJobID(jobID); ok {
		return &NodeError{Op: op, JobID: jobID, Workflow: wf, Node: node}
	}
	return nil
}

// refuseNodeJob is refuseNode for an operation on a job that must exist: an id with '@'
// that names no job (an instance's id, a node a workflow does not have) is ErrNotFound,
// as any id that names none, not a node of a workflow that may not exist. The job is
// read only for an id with '@'; a read that fails refuses it as a node's.
func (s *Store) refuseNodeJob(ctx context.Context, op, jobID string) error {
	err := refuseNode(op, jobID)
	if err != nil && job.ValidateRef("id", jobID, job.MaxIDLen) == nil {
		if _, _, rerr := s.readJob(ctx, s.ShardOf(jobID), jobID); errors.Is(rerr, ErrNotFound) {
			return ErrNotFound
		}
	}
	return err
}
