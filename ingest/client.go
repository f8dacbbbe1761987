package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client is a Go client of API v1. Its methods map one to one onto the endpoints; every
// reply that is not a success status is returned as an *APIError. A Client is safe for
// concurrent use; it keeps connections alive between calls.
type Client struct {
	base  string // scheme://host[:port][/prefix], without a trailing slash
	token string
	hc    *http.Client
	ua    string
}

// ClientOption configures NewClient.
type ClientOption func(*Client)

// WithHTTPClient makes the Client send its requests through hc instead of its own
// (keep-alive transport with up to 64 idle connections per host, no overall timeout:
// calls are bounded by their ctx).
func WithHTTPClient(hc *http.Client) ClientOption {
	return func(c *Client) { c.hc = hc }
}

// WithUserAgent sets the User-Agent header of every request. Default "tock-go-client".
func WithUserAgent(ua string) ClientOption {
	return func(c *Client) { c.ua = ua }
}

// NewClient returns a client of the API at baseURL (such as "http://127.0.0.1:8080";
// a path prefix is kept). token is sent as a bearer token when not empty. It fails when
// baseURL is not an absolute http or https URL.
func NewClient(baseURL, token string, opts ...ClientOption) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("ingest: client base URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("ingest: client base URL %q: want http://host:port or https://host:port", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("ingest: client base URL %q: no query or fragment allowed", baseURL)
	}
	c := &Client{base: strings.TrimRight(u.String(), "/"), token: token, ua: "tock-go-client"}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: newTransport(64)}
	}
	return c, nil
}

// CloseIdleConnections closes the keep-alive connections that are not in use (see
// http.Client.CloseIdleConnections). The Client stays usable.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// newTransport is a keep-alive transport for one API host.
func newTransport(conns int) *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          conns,
		MaxIdleConnsPerHost:   conns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// APIError is an error reply of the API: its HTTP status and the body's error object.
// Use errors.As to read it; Detail.Code is one of the Code constants and Detail.Field
// names the request field at fault, when there is one.
type APIError struct {
	Status int
	Detail Error
	// RetryAfter is the server's Retry-After (429 and 503 replies), 0 when absent.
	RetryAfter time.Duration
}

// Error returns "<status> <code>: <field>: <message>", such as "400 invalid_argument:
// schedule.cron: ...", the field left out when the reply names none.
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(e.Status))
	if e.Detail.Code != "" {
		b.WriteString(" ")
		b.WriteString(e.Detail.Code)
	} else if t := http.StatusText(e.Status); t != "" {
		b.WriteString(" ")
		b.WriteString(t)
	}
	if e.Detail.Field != "" && !strings.HasPrefix(e.Detail.Message, e.Detail.Field) {
		b.WriteString(": ")
		b.WriteString(e.Detail.Field)
	}
	if e.Detail.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail.Message)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

// IsCode reports whether err is an *APIError with the given code (such as CodeNotFound).
func IsCode(err error, code string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Detail.Code == code
}

// CreateJob creates a job (POST /v1/jobs). created is true for a new job (201) and false
// when a job with the same id and the same definition exists (200); a different one is a
// 409 APIError with CodeConflict. idempotencyKey, when not empty, is sent as the
// Idempotency-Key header (a job without an id then gets one derived from it).
func (c *Client) CreateJob(ctx context.Context, req JobRequest, idempotencyKey string) (j Job, created bool, err error) {
	var h http.Header
	if idempotencyKey != "" {
		h = http.Header{"Idempotency-Key": {idempotencyKey}}
	}
	status, err := c.do(ctx, http.MethodPost, "/v1/jobs", nil, h, req, &j)
	return j, status == http.StatusCreated, err
}

// CreateBatch creates many jobs in one request (POST /v1/jobs:batch). Each item succeeds
// or fails on its own: see BatchReply.Results. The error is for the request as a whole
// (a body the server refuses, an overloaded server, a transport error).
func (c *Client) CreateBatch(ctx context.Context, reqs []JobRequest) (BatchReply, error) {
	if reqs == nil {
		reqs = []JobRequest{}
	}
	var r BatchReply
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs:batch", nil, nil, reqs, &r)
	return r, err
}

// GetJob returns a job (GET /v1/jobs/{id}); a 404 APIError when there is none.
func (c *Client) GetJob(ctx context.Context, id string) (Job, error) {
	var j Job
	err := c.doRes(ctx, http.MethodGet, "/v1/jobs/", id, "", nil, &j)
	return j, err
}

// ListJobs returns one page of jobs (GET /v1/jobs). queue and state filter when not
// empty, limit 0 takes the server's default, cursor "" starts. The listing is complete
// when JobList.NextCursor is empty; a page may hold fewer than limit jobs before that.
func (c *Client) ListJobs(ctx context.Context, queue, state string, limit int, cursor string) (JobList, error) {
	var l JobList
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs", pageQuery(queue, state, limit, cursor), nil, nil, &l)
	return l, err
}

// PatchJob changes the fields of a job that p sets (PATCH /v1/jobs/{id}) and returns the
// job as stored afterwards.
func (c *Client) PatchJob(ctx context.Context, id string, p JobPatch) (Job, error) {
	var j Job
	err := c.doRes(ctx, http.MethodPatch, "/v1/jobs/", id, "", p, &j)
	return j, err
}

// CancelJob cancels a job (DELETE /v1/jobs/{id}). Cancelling a job that already ended
// changes nothing (StateReply.Changed false).
func (c *Client) CancelJob(ctx context.Context, id string) (StateReply, error) {
	var r StateReply
	err := c.doRes(ctx, http.MethodDelete, "/v1/jobs/", id, "", nil, &r)
	return r, err
}

// DeleteJob removes a job and every run of it now, in whatever state (POST
// /v1/jobs/{id}:delete): unlike CancelJob, nothing of it is left to read. A job that does
// not exist is an *APIError with Status 404 (IsCode(err, CodeNotFound)).
func (c *Client) DeleteJob(ctx context.Context, id string) (StateReply, error) {
	var r StateReply
	err := c.doRes(ctx, http.MethodPost, "/v1/jobs/", id, ":delete", nil, &r)
	return r, err
}

// PauseJob stops a job from starting runs until ResumeJob (POST /v1/jobs/{id}:pause).
func (c *Client) PauseJob(ctx context.Context, id string) (StateReply, error) {
	var r StateReply
	err := c.doRes(ctx, http.MethodPost, "/v1/jobs/", id, ":pause", nil, &r)
	return r, err
}

// ResumeJob undoes PauseJob (POST /v1/jobs/{id}:resume).
func (c *Client) ResumeJob(ctx context.Context, id string) (StateReply, error) {
	var r StateReply
	err := c.doRes(ctx, http.MethodPost, "/v1/jobs/", id, ":resume", nil, &r)
	return r, err
}

// TriggerJob fires a job now, outside its schedule (POST /v1/jobs/{id}:trigger).
func (c *Client) TriggerJob(ctx context.Context, id string) (TriggerReply, error) {
	var r TriggerReply
	err := c.doRes(ctx, http.MethodPost, "/v1/jobs/", id, ":trigger", nil, &r)
	return r, err
}

// Runs returns a job's recent runs, newest first (GET /v1/jobs/{id}/runs).
func (c *Client) Runs(ctx context.Context, id string) (RunList, error) {
	var r RunList
	err := c.doRes(ctx, http.MethodGet, "/v1/jobs/", id, "/runs", nil, &r)
	return r, err
}

// ListDead returns one page of the dead-letter set (GET /v1/dead); queue "" means every
// queue, limit 0 the server's default, cursor "" starts.
func (c *Client) ListDead(ctx context.Context, queue string, limit int, cursor string) (DeadList, error) {
	var l DeadList
	_, err := c.do(ctx, http.MethodGet, "/v1/dead", pageQuery(queue, "", limit, cursor), nil, nil, &l)
	return l, err
}

// RequeueDead makes a dead run ready again with a fresh set of attempts
// (POST /v1/dead/{run}:requeue); run is DeadRun.Run, "<job id>:<due ms>".
func (c *Client) RequeueDead(ctx context.Context, run string) (StateReply, error) {
	var r StateReply
	err := c.doRes(ctx, http.MethodPost, "/v1/dead/", run, ":requeue", nil, &r)
	return r, err
}

// DeleteDead removes a run from the dead-letter set for good (DELETE /v1/dead/{run}).
func (c *Client) DeleteDead(ctx context.Context, run string) (StateReply, error) {
	var r StateReply
	err := c.doRes(ctx, http.MethodDelete, "/v1/dead/", run, "", nil, &r)
	return r, err
}

// Queues returns every queue's figures (GET /v1/queues).
func (c *Client) Queues(ctx context.Context) (QueueList, error) {
	var l QueueList
	_, err := c.do(ctx, http.MethodGet, "/v1/queues", nil, nil, nil, &l)
	return l, err
}

// PauseQueue stops workers from claiming from a queue (POST /v1/queues/{q}:pause); runs
// still fire into it.
func (c *Client) PauseQueue(ctx context.Context, queue string) (StateReply, error) {
	var r StateReply
	err := c.doRes(ctx, http.MethodPost, "/v1/queues/", queue, ":pause", nil, &r)
	return r, err
}

// ResumeQueue undoes PauseQueue (POST /v1/queues/{q}:resume).
func (c *Client) ResumeQueue(ctx context.Context, queue string) (StateReply, error) {
	var r StateReply
	err := c.doRes(ctx, http.MethodPost, "/v1/queues/", queue, ":resume", nil, &r)
	return r, err
}

// doRes calls the endpoint prefix+{name}+suffix, such as "/v1/jobs/" + id + ":pause".
// The name is path-escaped, but its colons stay as they are: a dead run's name
// ("<job id>:<due ms>") keeps them, and the server splits an action off at the last one.
func (c *Client) doRes(ctx context.Context, method, prefix, name, suffix string, in, out any) error {
	if name == "" {
		return fmt.Errorf("ingest: %s %s{%s}%s: empty %s", method, prefix, resName(prefix), suffix, resName(prefix))
	}
	_, err := c.do(ctx, method, prefix+url.PathEscape(name)+suffix, nil, nil, in, out)
	return err
}

func resName(prefix string) string {
	switch prefix {
	case "/v1/dead/":
		return "run"
	case "/v1/queues/":
		return "queue"
	case "/v1/runs/":
		return "run"
	}
	return "id"
}

func pageQuery(queue, state string, limit int, cursor string) url.Values {
	q := url.Values{}
	if queue != "" {
		q.Set("queue", queue)
	}
	if state != "" {
		q.Set("state", state)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	return q
}

// maxReply bounds the body of a reply the client reads.
const maxReply = 256 << 20

// do sends one request with in (when not nil) as its JSON body and decodes a 2xx reply
// into out. It returns the status, and an *APIError for any other status.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, h http.Header, in, out any) (int, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("ingest: %s %s: encode request: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return 0, fmt.Errorf("ingest: %s %s: %w", method, path, err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.ua != "" {
		req.Header.Set("User-Agent", c.ua)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("ingest: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("ingest: %s %s: read reply: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, replyError(resp, b)
	}
	if raw, ok := out.(*rawBody); ok {
		*raw = b
		return resp.StatusCode, nil
	}
	if out != nil {
		unmarshal := json.Unmarshal
		if d, ok := out.(replyDecoder); ok {
			unmarshal = func(b []byte, _ any) error { return d.decodeReply(b) }
		}
		if err := unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("ingest: %s %s: decode %d reply: %w", method, path, resp.StatusCode, err)
		}
	}
	return resp.StatusCode, nil
}

// replyDecoder is a reply with a decoder of its own, faster than encoding/json.
type replyDecoder interface{ decodeReply(b []byte) error }

// replyError builds the *APIError of a non-2xx reply. A body that is not the API's error
// shape (a proxy's HTML page, say) becomes the message, shortened.
func replyError(resp *http.Response, body []byte) *APIError {
	e := &APIError{Status: resp.StatusCode}
	var r ErrorReply
	if err := json.Unmarshal(body, &r); err == nil && (r.Error.Code != "" || r.Error.Message != "") {
		e.Detail = r.Error
	} else {
		msg := strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		e.Detail.Message = msg
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if s, err := strconv.Atoi(ra); err == nil && s >= 0 {
			e.RetryAfter = time.Duration(s) * time.Second
		} else if t, err := http.ParseTime(ra); err == nil {
			e.RetryAfter = max(time.Until(t), 0)
		}
	}
	return e
}
