package ingest

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// SearchJobs returns one page of the jobs matching f (GET /v1/jobs with queue, state,
// type and prefix). A filtered page may hold no jobs while NextCursor is not empty:
// JobList.Progress says how much has been searched.
func (c *Client) SearchJobs(ctx context.Context, f JobFilter, limit int, cursor string) (JobList, error) {
	q := pageQuery(f.Queue, f.State, limit, cursor)
	if f.Type != "" {
		q.Set("type", f.Type)
	}
	if f.Prefix != "" {
		q.Set("prefix", f.Prefix)
	}
	var l JobList
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs", q, nil, nil, &l)
	return l, err
}

// PreviewSchedule returns the next count fire times (0: the server's default, 10) of a
// cron expression in timezone ("" is UTC) after `after` (zero: now), with daylight-saving
// notes (GET /v1/schedules:preview).
func (c *Client) PreviewSchedule(ctx context.Context, cron, timezone string, count int, after time.Time) (SchedulePreview, error) {
	q := url.Values{"cron": {cron}}
	if timezone != "" {
		q.Set("timezone", timezone)
	}
	if count > 0 {
		q.Set("count", strconv.Itoa(count))
	}
	if !after.IsZero() {
		q.Set("after", after.Format(time.RFC3339Nano))
	}
	var p SchedulePreview
	_, err := c.do(ctx, http.MethodGet, "/v1/schedules:preview", q, nil, nil, &p)
	return p, err
}

// Cluster returns the cluster view (GET /v1/cluster).
func (c *Client) Cluster(ctx context.Context) (Cluster, error) {
	var v Cluster
	_, err := c.do(ctx, http.MethodGet, "/v1/cluster", nil, nil, nil, &v)
	return v, err
}

// Figures returns the per-minute figures of the last minutes (0: the server's default,
// 60) of queue ("" every queue) (GET /v1/figures).
func (c *Client) Figures(ctx context.Context, queue string, minutes int) (FigureList, error) {
	q := url.Values{}
	if queue != "" {
		q.Set("queue", queue)
	}
	if minutes > 0 {
		q.Set("minutes", strconv.Itoa(minutes))
	}
	var l FigureList
	_, err := c.do(ctx, http.MethodGet, "/v1/figures", q, nil, nil, &l)
	return l, err
}

// BulkJobs applies an action to jobs by ids or to one page of a filter (POST
// /v1/jobs:bulk); see BulkRequest.
func (c *Client) BulkJobs(ctx context.Context, req BulkRequest) (BulkReply, error) {
	var r BulkReply
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs:bulk", nil, nil, req, &r)
	return r, err
}

// BulkDead requeues or deletes dead runs by ids or one page of a queue filter (POST
// /v1/dead:bulk).
func (c *Client) BulkDead(ctx context.Context, req BulkRequest) (BulkReply, error) {
	var r BulkReply
	_, err := c.do(ctx, http.MethodPost, "/v1/dead:bulk", nil, nil, req, &r)
	return r, err
}

// BulkAll runs a filtered bulk action to the end: it calls do (BulkJobs or BulkDead)
// page after page, passing each reply to progress (may be nil), and returns the sums.
func (c *Client) BulkAll(ctx context.Context, do func(context.Context, BulkRequest) (BulkReply, error),
	req BulkRequest, progress func(BulkReply)) (BulkReply, error) {
	var sum BulkReply
	for {
		r, err := do(ctx, req)
		if err != nil {
			return sum, err
		}
		sum.Matched += r.Matched
		sum.Changed += r.Changed
		sum.Failed += r.Failed
		sum.Errors = append(sum.Errors, r.Errors...)
		sum.Progress = r.Progress
		if progress != nil {
			progress(r)
		}
		if r.NextCursor == "" || req.Filter == nil {
			return sum, nil
		}
		req.Cursor = r.NextCursor
	}
}
