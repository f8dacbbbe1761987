package ingest

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// CreateWorkflow creates a workflow, or a scheduled workflow's definition when req has a
// Schedule (POST /v1/workflows). created is true for a new one (201) and false when one
// with the same id and definition exists (200); another definition is a 409 APIError with
// CodeConflict, and an invalid graph a 400 whose Detail.Field names the node
// ("jobs[2].depends_on"). idempotencyKey, when not empty, is sent as the Idempotency-Key
// header (a workflow without an id then gets one derived from it).
func (c *Client) CreateWorkflow(ctx context.Context, req WorkflowRequest, idempotencyKey string) (w WorkflowCreated, created bool, err error) {
	var h http.Header
	if idempotencyKey != "" {
		h = http.Header{"Idempotency-Key": {idempotencyKey}}
	}
	if req.Jobs == nil {
		req.Jobs = []NodeRequest{}
	}
	status, err := c.do(ctx, http.MethodPost, "/v1/workflows", nil, h, req, &w)
	return w, status == http.StatusCreated, err
}

// Workflow returns a workflow with every node, or a scheduled workflow's definition
// (State "scheduled") (GET /v1/workflows/{id}); a 404 APIError when there is none.
func (c *Client) Workflow(ctx context.Context, id string) (Workflow, error) {
	var w Workflow
	err := c.doRes(ctx, http.MethodGet, "/v1/workflows/", id, "", nil, &w)
	return w, err
}

// ListWorkflows returns one page of workflows (GET /v1/workflows), those f selects:
// f.State (running, succeeded, failed, cancelled; scheduled lists the scheduled
// definitions) and f.Prefix of the id (`<def>@`: the instances of definition def) filter
// when not empty. limit 0 takes the server's default, cursor "" starts. The listing is
// complete when WorkflowList.NextCursor is empty; a page may hold fewer than limit
// workflows, even none, before that. A prefix no workflow id could start with is a 400
// APIError whose Detail.Field is "prefix".
func (c *Client) ListWorkflows(ctx context.Context, f WorkflowFilter, limit int, cursor string) (WorkflowList, error) {
	var l WorkflowList
	q := pageQuery("", f.State, limit, cursor)
	if f.Prefix != "" {
		q.Set("prefix", f.Prefix)
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/workflows", q, nil, nil, &l)
	return l, err
}

// CancelWorkflow cancels a running workflow (POST /v1/workflows/{id}:cancel): its nodes
// that did not end are cancelled, running handlers told. Cancelling one that ended
// changes nothing (StateReply.Changed false). For a scheduled workflow's definition, it
// cancels the definition: no instance starts any more.
func (c *Client) CancelWorkflow(ctx context.Context, id string) (StateReply, error) {
	var r StateReply
	err := c.doRes(ctx, http.MethodPost, "/v1/workflows/", id, ":cancel", nil, &r)
	return r, err
}

// RetryWorkflow runs a failed or cancelled workflow again from the nodes that did not
// succeed (POST /v1/workflows/{id}:retry); a running or succeeded one is left as it is
// (StateReply.Changed false).
func (c *Client) RetryWorkflow(ctx context.Context, id string) (StateReply, error) {
	var r StateReply
	err := c.doRes(ctx, http.MethodPost, "/v1/workflows/", id, ":retry", nil, &r)
	return r, err
}

// PauseWorkflow stops a scheduled workflow from starting instances until
// ResumeWorkflow (POST /v1/workflows/{id}:pause); 404 for a workflow that is not a
// scheduled definition.
func (c *Client) PauseWorkflow(ctx context.Context, id string) (StateReply, error) {
	var r StateReply
	err := c.doRes(ctx, http.MethodPost, "/v1/workflows/", id, ":pause", nil, &r)
	return r, err
}

// ResumeWorkflow undoes PauseWorkflow (POST /v1/workflows/{id}:resume).
func (c *Client) ResumeWorkflow(ctx context.Context, id string) (StateReply, error) {
	var r StateReply
	err := c.doRes(ctx, http.MethodPost, "/v1/workflows/", id, ":resume", nil, &r)
	return r, err
}

// TriggerWorkflow starts an instance of a scheduled workflow now, outside its schedule
// (POST /v1/workflows/{id}:trigger); the reply names the instance.
func (c *Client) TriggerWorkflow(ctx context.Context, id string) (WorkflowTriggerReply, error) {
	var r WorkflowTriggerReply
	err := c.doRes(ctx, http.MethodPost, "/v1/workflows/", id, ":trigger", nil, &r)
	return r, err
}

// DeleteWorkflow deletes a scheduled workflow's definition now (POST
// /v1/workflows/{id}:delete); its instances are left to run and expire.
func (c *Client) DeleteWorkflow(ctx context.Context, id string) (StateReply, error) {
	var r StateReply
	err := c.doRes(ctx, http.MethodPost, "/v1/workflows/", id, ":delete", nil, &r)
	return r, err
}

// NodeResult returns the result a succeeded node's handler returned, as its bytes
// (GET /v1/workflows/{id}/nodes/{node}/result); a 404 APIError when the node has none.
func (c *Client) NodeResult(ctx context.Context, id, node string) ([]byte, error) {
	if id == "" || node == "" {
		return nil, fmt.Errorf("ingest: GET /v1/workflows/{id}/nodes/{node}/result: empty id or node")
	}
	var b rawBody
	_, err := c.do(ctx, http.MethodGet, "/v1/workflows/"+url.PathEscape(id)+"/nodes/"+url.PathEscape(node)+"/result", nil, nil, nil, &b)
	return b, err
}

// rawBody receives a reply's bytes as they are.
type rawBody []byte
