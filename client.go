// Package tock is the Go producer API of tock, a Redis-native sharded job scheduler:
// a Client creates, inspects and manages jobs directly against Redis. Jobs are fired by
// dispatchers (package dispatcher) and run by workers (package worker).
//
//	c, err := tock.Connect(ctx, tock.Options{Addrs: []string{"127.0.0.1:6379"}})
//	res, err := c.Create(ctx, &job.Job{Type: "email", Payload: body,
//		Schedule: job.Schedule{Cron: "0 9 * * MON-FRI", TimeZone: "Europe/London"}})
package tock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// Re-exported errors of the store, for errors.Is.
var (
	ErrNotFound         = shard.ErrNotFound
	ErrWorkflowNotFound = shard.ErrWorkflowNotFound
)

// Options configures Connect.
type Options struct {
	// Addrs are Redis addresses: one server, or seed nodes of a Cluster (the topology is
	// discovered from any of them). Required.
	Addrs []string
	// Password for Redis AUTH, if any.
	Password string
	// Store configures the namespace (shard count, history, retention...).
	Store shard.Config
}

// Connect opens a Redis client for opts.Addrs and a Client on it. Close releases both.
func Connect(ctx context.Context, opts Options) (*Client, error) {
	if len(opts.Addrs) == 0 {
		return nil, errors.New("tock: Options.Addrs: at least one Redis address is required")
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  opts.Addrs,
		Password:     opts.Password,
		DisableCache: true,
	})
	if err != nil {
		return nil, fmt.Errorf("tock: connect to redis %v: %w", opts.Addrs, err)
	}
	c, err := New(ctx, rc, opts.Store)
	if err != nil {
		rc.Close()
		return nil, err
	}
	c.owned = true
	return c, nil
}

// Client creates and manages jobs. It is safe for concurrent use. Every method that
// talks to Redis takes a ctx that bounds it.
type Client struct {
	store *shard.Store
	owned bool
}

// New returns a Client on an existing Redis client (which stays the caller's to close).
// It initialises the namespace if needed and fails when the namespace was initialised
// with another shard count (*shard.ConfigMismatchError).
func New(ctx context.Context, rc rueidis.Client, cfg shard.Config) (*Client, error) {
	s, err := shard.Open(ctx, rc, cfg)
	if err != nil {
		return nil, err
	}
	return &Client{store: s}, nil
}

// Store returns the underlying store, to build dispatchers and workers on. The Client's
// methods cover creating and managing jobs; the store has the rest.
func (c *Client) Store() *shard.Store { return c.store }

// Close closes the Redis client if Connect opened it.
func (c *Client) Close() {
	if c.owned {
		c.store.Client().Close()
	}
}

// Create stores a job and files its first run. j is not modified: defaults and a
// generated id are applied to a copy, so a create retried with the same *job.Job (after
// a timeout, say) returns the existing job. A job whose id exists is not stored again:
// the result describes the existing job with Created false (and Conflict true if its
// definition differs). A job without an id gets a new one each time; the result's ID
// names it. An invalid job returns a *job.FieldError naming the field. The error is the
// Redis error, if any, else the job's own; ctx bounds the round trips.
func (c *Client) Create(ctx context.Context, j *job.Job) (shard.CreateResult, error) {
	res, err := c.store.Create(ctx, []*job.Job{cloneJob(j)})
	if err != nil {
		return res[0], err
	}
	return res[0], res[0].Err
}

// CreateMany stores many jobs in one pipeline (grouped by shard). Results are in the
// order of jobs, each with its own Err; the error is the first Redis error. The jobs are
// not modified (see Create).
func (c *Client) CreateMany(ctx context.Context, jobs []*job.Job) ([]shard.CreateResult, error) {
	copies := make([]*job.Job, len(jobs))
	for i, j := range jobs {
		copies[i] = cloneJob(j)
	}
	return c.store.Create(ctx, copies)
}

// cloneJob returns a copy of j that normalising cannot change j through: the priority is
// copied, not shared. The payload is shared: nothing writes to it.
func cloneJob(j *job.Job) *job.Job {
	if j == nil {
		return nil
	}
	cp := *j
	if j.Priority != nil {
		p := *j.Priority
		cp.Priority = &p
	}
	return &cp
}

// Get returns a job and its state (its next run, active runs, definition), or
// ErrNotFound.
func (c *Client) Get(ctx context.Context, id string) (*shard.Info, error) {
	return c.store.Get(ctx, id)
}

// Runs returns the job's recent runs, newest first (at most shard.Config.History), or
// ErrNotFound.
func (c *Client) Runs(ctx context.Context, id string) ([]job.Run, error) {
	return c.store.Runs(ctx, id)
}

// Cancel cancels a job; a running run's handler context is cancelled. Cancelling a job
// that already ended changes nothing (changed false).
func (c *Client) Cancel(ctx context.Context, id string) (state job.State, changed bool, err error) {
	return c.store.Cancel(ctx, id)
}

// Delete removes a job and every run of it now, whatever its state: unlike Cancel, nothing
// is kept for the retention period. Running handlers' contexts are cancelled, and their
// reports are refused. shard.ErrNotFound when there is no such job.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.store.Delete(ctx, id)
}

// Pause stops a job from starting runs until Resume. changed is false when it was
// paused already.
func (c *Client) Pause(ctx context.Context, id string) (state job.State, changed bool, err error) {
	return c.store.Pause(ctx, id)
}

// Resume undoes Pause. changed is false when the job was not paused.
func (c *Client) Resume(ctx context.Context, id string) (state job.State, changed bool, err error) {
	return c.store.Resume(ctx, id)
}

// Trigger fires a job now, outside its schedule, and returns the new run's id.
func (c *Client) Trigger(ctx context.Context, id string) (runID string, err error) {
	return c.store.Trigger(ctx, id)
}

// List pages through the namespace's jobs, filtered by queue and state (empty fields
// of f match every job). Follow Page.Next until it is empty: a page may hold a few more
// jobs than f.Limit, or fewer, even none, while Next is not empty. A job that exists
// throughout the listing is returned at least once. A bad filter or cursor is a
// *job.FieldError naming it.
func (c *Client) List(ctx context.Context, f shard.ListFilter) (shard.Page, error) {
	return c.store.List(ctx, f)
}

// Update changes the parts of job id's definition that u sets (schedule, payload,
// priority, retry policy) and returns the job as stored afterwards; u is not modified.
// A changed schedule moves the job's next run; a run already ready, running or waiting
// for a retry keeps its time. A one-time job cannot become recurring or the other way
// round. Errors: ErrNotFound, a *job.FieldError naming the field at fault, a
// *shard.StateError when the job's state does not allow the change.
func (c *Client) Update(ctx context.Context, id string, u shard.Update) (*shard.Info, error) {
	return c.store.Update(ctx, id, u)
}

// Dead pages through the dead-letter set: the runs that failed their last attempt,
// oldest death first within a shard; queue "" means every queue. limit is the page size
// (0: 100, at most 1000); pass next back as cursor until it is empty. DeadRun.Member
// names the run for RequeueDead and DeleteDead.
func (c *Client) Dead(ctx context.Context, queue string, limit int, cursor string) (runs []shard.DeadRun, next string, err error) {
	return c.store.Dead(ctx, queue, limit, cursor)
}

// RequeueDead gives the dead run member ("<job id>:<due ms>", DeadRun.Member) a fresh
// set of attempts and makes it ready again. ErrNotFound when it is not in the
// dead-letter set; a *shard.StateError when its job was cancelled or completed since.
func (c *Client) RequeueDead(ctx context.Context, member string) error {
	return c.store.RequeueDead(ctx, member)
}

// DeleteDead removes the dead run member from the dead-letter set for good. ErrNotFound
// when it is not there.
func (c *Client) DeleteDead(ctx context.Context, member string) error {
	return c.store.DeleteDead(ctx, member)
}

// Queues returns the figures of every queue that ever held a run, and of paused queues,
// sorted by name: runs scheduled, ready, in flight and dead, and runs fired so far.
func (c *Client) Queues(ctx context.Context) ([]shard.QueueStats, error) {
	return c.store.Queues(ctx)
}

// PauseQueue stops workers from claiming from queue until ResumeQueue; its runs still
// fire into its ready sets. changed is false when it was paused already. A bad queue
// name is a *job.FieldError.
func (c *Client) PauseQueue(ctx context.Context, queue string) (changed bool, err error) {
	return c.store.PauseQueue(ctx, queue)
}

// ResumeQueue undoes PauseQueue. changed is false when the queue was not paused.
func (c *Client) ResumeQueue(ctx context.Context, queue string) (changed bool, err error) {
	return c.store.ResumeQueue(ctx, queue)
}

// CreateWorkflow stores a workflow, a graph of jobs (job.Workflow; docs/workflows.md),
// and makes its roots ready, or with a Schedule stores its definition, whose occurrences
// start instances of the graph ("<id>@<due ms>"). w is not modified: defaults and a
// generated id are applied to a copy (the result's ID names it). A workflow whose id
// exists is not stored again: the result describes it with Created false (and Conflict
// true if its definition differs). An invalid workflow is a *job.FieldError naming the
// node's field ("jobs[2].depends_on"). ctx bounds the round trip.
func (c *Client) CreateWorkflow(ctx context.Context, w *job.Workflow) (shard.WorkflowResult, error) {
	return c.store.CreateWorkflow(ctx, cloneWorkflow(w))
}

// cloneWorkflow returns a copy of w that normalising cannot change w through.
func cloneWorkflow(w *job.Workflow) *job.Workflow {
	if w == nil {
		return nil
	}
	cp := *w
	if w.Schedule != nil {
		s := *w.Schedule
		cp.Schedule = &s
	}
	cp.Jobs = make([]job.Node, len(w.Jobs))
	for i, n := range w.Jobs {
		n.Job = *cloneJob(&n.Job)
		n.DependsOn = append([]string(nil), n.DependsOn...)
		cp.Jobs[i] = n
	}
	return &cp
}

// Workflow returns a workflow (a scheduled workflow's instance too) with every node's
// state, or ErrWorkflowNotFound. A scheduled workflow's definition is a job: Get reads
// it.
func (c *Client) Workflow(ctx context.Context, id string) (*shard.WorkflowInfo, error) {
	return c.store.Workflow(ctx, id)
}

// ListWorkflows pages through the namespace's workflows, those in f.State and whose id
// starts with f.Prefix when they are not empty (`<def>@` lists the instances of
// scheduled workflow def); f.Limit is about the page size (0: 100, at most 1000). Follow
// Next until it is empty: a page may hold fewer workflows, even none, before that
// (shard.Store.ListWorkflows). Scheduled workflows' definitions are jobs of queue
// job.WorkflowQueue and type job.WorkflowType (List).
func (c *Client) ListWorkflows(ctx context.Context, f shard.WorkflowFilter) (shard.WorkflowPage, error) {
	return c.store.ListWorkflows(ctx, f)
}

// CancelWorkflow cancels a running workflow at once: its nodes that did not end are
// cancelled, and running nodes' handler contexts cancelled. Cancelling a workflow that
// ended changes nothing (changed false). ErrWorkflowNotFound when there is none.
func (c *Client) CancelWorkflow(ctx context.Context, id string) (state job.WorkflowState, changed bool, err error) {
	return c.store.CancelWorkflow(ctx, id)
}

// RetryWorkflow runs a failed or cancelled workflow again from the nodes that did not
// succeed; the succeeded ones keep their results. A running or succeeded workflow is
// left as it is (changed false). ErrWorkflowNotFound when there is none.
func (c *Client) RetryWorkflow(ctx context.Context, id string) (state job.WorkflowState, changed bool, err error) {
	return c.store.RetryWorkflow(ctx, id)
}

// NodeResult returns the result a succeeded node's handler returned, and whether it
// has one.
func (c *Client) NodeResult(ctx context.Context, id, node string) ([]byte, bool, error) {
	return c.store.NodeResult(ctx, id, node)
}

// definition checks that id names a scheduled workflow's definition job.
func (c *Client) definition(ctx context.Context, id string) error {
	info, err := c.store.Get(ctx, id)
	switch {
	case errors.Is(err, shard.ErrNotFound):
		return fmt.Errorf("scheduled workflow %q: %w", id, ErrWorkflowNotFound)
	case err != nil:
		return err
	case info.Type != job.WorkflowType || info.Queue != job.WorkflowQueue:
		return fmt.Errorf("scheduled workflow %q: %w (it is a job)", id, ErrWorkflowNotFound)
	}
	return nil
}

// PauseWorkflow stops scheduled workflow id from starting instances until
// ResumeWorkflow; running instances go on. ErrWorkflowNotFound when id names no
// scheduled workflow's definition.
func (c *Client) PauseWorkflow(ctx context.Context, id string) (state job.State, changed bool, err error) {
	if err := c.definition(ctx, id); err != nil {
		return "", false, err
	}
	return c.store.Pause(ctx, id)
}

// ResumeWorkflow undoes PauseWorkflow.
func (c *Client) ResumeWorkflow(ctx context.Context, id string) (state job.State, changed bool, err error) {
	if err := c.definition(ctx, id); err != nil {
		return "", false, err
	}
	return c.store.Resume(ctx, id)
}

// TriggerWorkflow starts an instance of scheduled workflow id now, outside its
// schedule: it returns the definition's run, "<id>:<due ms>", and the instance it
// starts, "<id>@<due ms>" (started by the workflow starter, a worker of queue
// job.WorkflowQueue: worker.Worker.HandleWorkflows).
func (c *Client) TriggerWorkflow(ctx context.Context, id string) (run, instance string, err error) {
	if err := c.definition(ctx, id); err != nil {
		return "", "", err
	}
	run, err = c.store.Trigger(ctx, id)
	if err != nil {
		return "", "", err
	}
	if _, due, ok := shard.SplitMember(run); ok {
		instance = shard.InstanceID(id, time.UnixMilli(due))
	}
	return run, instance, nil
}

// DeleteWorkflow deletes scheduled workflow id's definition now; its instances are
// left to end and expire.
func (c *Client) DeleteWorkflow(ctx context.Context, id string) error {
	if err := c.definition(ctx, id); err != nil {
		return err
	}
	return c.store.Delete(ctx, id)
}
