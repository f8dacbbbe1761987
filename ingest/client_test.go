package ingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
)

// clientCall is a request as the stub server saw it.
type clientCall struct {
	Method, Path, RawPath, Query, Auth, ContentType, IdempotencyKey string
	Body                                                            string
}

// clientStub is an httptest server that records requests and answers with the reply
// its reply func gives (status, body, headers).
type clientStub struct {
	mu    sync.Mutex
	calls []clientCall
	reply func(r *http.Request) (int, string, http.Header)
}

func newClientStub(t *testing.T, token string, reply func(r *http.Request) (int, string, http.Header)) (*ingest.Client, *clientStub) {
	t.Helper()
	st := &clientStub{reply: reply}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		st.mu.Lock()
		st.calls = append(st.calls, clientCall{Method: r.Method, Path: r.URL.Path, RawPath: r.URL.EscapedPath(), Query: r.URL.RawQuery,
			Auth: r.Header.Get("Authorization"), ContentType: r.Header.Get("Content-Type"),
			IdempotencyKey: r.Header.Get("Idempotency-Key"), Body: string(b)})
		st.mu.Unlock()
		status, body, h := 200, "{}", http.Header(nil)
		if st.reply != nil {
			status, body, h = st.reply(r)
		}
		for k, v := range h {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	c, err := ingest.NewClient(srv.URL+"/", token, ingest.WithHTTPClient(srv.Client()))
	require.NoError(t, err)
	return c, st
}

func (st *clientStub) last(t *testing.T) clientCall {
	t.Helper()
	st.mu.Lock()
	defer st.mu.Unlock()
	require.NotEmpty(t, st.calls)
	return st.calls[len(st.calls)-1]
}

func TestNewClient_RejectsBadBaseURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://host", "http://", "http://h/?x=1", "://"} {
		_, err := ingest.NewClient(u, "")
		require.Error(t, err, u)
	}
	_, err := ingest.NewClient("https://tock.example.com/prefix", "")
	require.NoError(t, err)
}

func TestClient_EndpointsShape(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, st := newClientStub(t, "s3cret", func(r *http.Request) (int, string, http.Header) {
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/jobs":
			return 201, `{"id":"j1","queue":"default","type":"t","schedule":{"delay":"1h"},"state":"scheduled","shard":3}`, nil
		case r.URL.Path == "/v1/jobs:batch":
			return 200, `{"results":[{"status":201,"job":{"id":"a"}},{"status":400,"error":{"code":"invalid_argument","message":"type is required","field":"type"}}],"created":1,"failed":1}`, nil
		case r.Method == "GET" && r.URL.Path == "/v1/jobs":
			return 200, `{"jobs":[{"id":"a"},{"id":"b"}],"next_cursor":"c2"}`, nil
		case strings.HasSuffix(r.URL.Path, ":trigger"):
			return 200, `{"id":"j1","run":"j1:1700000000000"}`, nil
		case strings.HasSuffix(r.URL.Path, "/runs"):
			return 200, `{"runs":[{"due":"2026-11-21T10:00:00Z","attempt":1,"outcome":"succeeded"}]}`, nil
		case r.Method == "GET" && r.URL.Path == "/v1/dead":
			return 200, `{"dead":[{"run":"j1:1700000000000","job_id":"j1","attempts":3,"due":"2026-11-21T10:00:00Z","died_at":"2026-11-21T10:01:00Z"}]}`, nil
		case r.Method == "GET" && r.URL.Path == "/v1/queues":
			return 200, `{"queues":[{"name":"default","scheduled":5,"fire_rate":1.5}]}`, nil
		case r.Method == "GET" || r.Method == "PATCH":
			return 200, `{"id":"j1","state":"scheduled"}`, nil
		}
		return 200, `{"id":"j1","state":"paused","changed":true}`, nil
	})

	prio := 7
	j, created, err := c.CreateJob(ctx, ingest.JobRequest{ID: "j1", Type: "t", Payload: json.RawMessage(`{"a":1}`),
		Schedule: ingest.Schedule{Delay: "1h"}, Priority: &prio}, "key-1")
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "j1", j.ID)
	require.Equal(t, 3, j.Shard)
	call := st.last(t)
	require.Equal(t, "POST", call.Method)
	require.Equal(t, "/v1/jobs", call.Path)
	require.Equal(t, "Bearer s3cret", call.Auth)
	require.Equal(t, "application/json", call.ContentType)
	require.Equal(t, "key-1", call.IdempotencyKey)
	require.JSONEq(t, `{"id":"j1","type":"t","payload":{"a":1},"schedule":{"delay":"1h"},"priority":7}`, call.Body)

	br, err := c.CreateBatch(ctx, []ingest.JobRequest{{Type: "t", Schedule: ingest.Schedule{Now: true}}, {Schedule: ingest.Schedule{Now: true}}})
	require.NoError(t, err)
	require.Equal(t, 1, br.Created)
	require.Equal(t, 1, br.Failed)
	require.Equal(t, "type", br.Results[1].Error.Field)
	call = st.last(t)
	require.Equal(t, "/v1/jobs:batch", call.Path)
	require.True(t, strings.HasPrefix(call.Body, "["), "a batch is a JSON array: %s", call.Body)

	_, err = c.CreateBatch(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, "[]", st.last(t).Body)

	l, err := c.ListJobs(ctx, "mail", "dead", 50, "c1")
	require.NoError(t, err)
	require.Len(t, l.Jobs, 2)
	require.Equal(t, "c2", l.NextCursor)
	require.Equal(t, "cursor=c1&limit=50&queue=mail&state=dead", st.last(t).Query)
	_, err = c.ListJobs(ctx, "", "", 0, "")
	require.NoError(t, err)
	require.Equal(t, "", st.last(t).Query)

	tr, err := c.TriggerJob(ctx, "j1")
	require.NoError(t, err)
	require.Equal(t, "j1:1700000000000", tr.Run)

	runs, err := c.Runs(ctx, "j1")
	require.NoError(t, err)
	require.Len(t, runs.Runs, 1)
	require.Equal(t, "/v1/jobs/j1/runs", st.last(t).Path)

	dl, err := c.ListDead(ctx, "q", 10, "")
	require.NoError(t, err)
	require.Equal(t, 3, dl.Dead[0].Attempts)
	require.Equal(t, "limit=10&queue=q", st.last(t).Query)

	ql, err := c.Queues(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(5), ql.Queues[0].Scheduled)
	require.Equal(t, 1.5, ql.Queues[0].FireRate)

	_, err = c.PatchJob(ctx, "j1", ingest.JobPatch{Priority: &prio})
	require.NoError(t, err)
	call = st.last(t)
	require.Equal(t, "PATCH", call.Method)
	require.JSONEq(t, `{"priority":7}`, call.Body)

	// Every action: method and escaped path.
	for _, tc := range []struct {
		name, method, path string
		call               func() error
	}{
		{"Get", "GET", "/v1/jobs/j1", func() error { _, err := c.GetJob(ctx, "j1"); return err }},
		{"GetEscaped", "GET", "/v1/jobs/a%2Fb%20c", func() error { _, err := c.GetJob(ctx, "a/b c"); return err }},
		{"Cancel", "DELETE", "/v1/jobs/j1", func() error { _, err := c.CancelJob(ctx, "j1"); return err }},
		{"Pause", "POST", "/v1/jobs/j1:pause", func() error { _, err := c.PauseJob(ctx, "j1"); return err }},
		{"Resume", "POST", "/v1/jobs/j1:resume", func() error { _, err := c.ResumeJob(ctx, "j1"); return err }},
		{"Trigger", "POST", "/v1/jobs/j1:trigger", func() error { _, err := c.TriggerJob(ctx, "j1"); return err }},
		{"Requeue", "POST", "/v1/dead/j1:1700000000000:requeue", func() error { _, err := c.RequeueDead(ctx, "j1:1700000000000"); return err }},
		{"DeleteDead", "DELETE", "/v1/dead/j1:1700000000000", func() error { _, err := c.DeleteDead(ctx, "j1:1700000000000"); return err }},
		{"PauseQueue", "POST", "/v1/queues/mail:pause", func() error { _, err := c.PauseQueue(ctx, "mail"); return err }},
		{"ResumeQueue", "POST", "/v1/queues/mail:resume", func() error { _, err := c.ResumeQueue(ctx, "mail"); return err }},
	} {
		require.NoError(t, tc.call(), tc.name)
		call := st.last(t)
		require.Equal(t, tc.method, call.Method, tc.name)
		require.Equal(t, tc.path, call.RawPath, tc.name)
		require.Empty(t, call.Body, tc.name)
	}

	_, err = c.GetJob(ctx, "")
	require.ErrorContains(t, err, "empty id")
	_, err = c.RequeueDead(ctx, "")
	require.ErrorContains(t, err, "empty run")
}

func TestClient_CreateJobStatuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := newClientStub(t, "", func(r *http.Request) (int, string, http.Header) {
		var req ingest.JobRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		if r.Header.Get("Authorization") != "" {
			return 500, `{"error":{"code":"internal","message":"unexpected token"}}`, nil
		}
		switch req.ID {
		case "new":
			return 201, `{"id":"new"}`, nil
		case "same":
			return 200, `{"id":"same"}`, nil
		case "busy":
			return 429, `{"error":{"code":"resource_exhausted","message":"backlog over 1000 runs"}}`, http.Header{"Retry-After": {"2"}}
		}
		return 409, `{"error":{"code":"conflict","message":"job other exists with another definition","field":"id"}}`, nil
	})

	j, created, err := c.CreateJob(ctx, ingest.JobRequest{ID: "new"}, "")
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "new", j.ID)

	j, created, err = c.CreateJob(ctx, ingest.JobRequest{ID: "same"}, "")
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, "same", j.ID)

	_, created, err = c.CreateJob(ctx, ingest.JobRequest{ID: "other"}, "")
	require.False(t, created)
	var ae *ingest.APIError
	require.True(t, errors.As(err, &ae))
	require.Equal(t, 409, ae.Status)
	require.Equal(t, ingest.CodeConflict, ae.Detail.Code)
	require.Equal(t, "id", ae.Detail.Field)
	require.True(t, ingest.IsCode(err, ingest.CodeConflict))
	require.Equal(t, "409 conflict: id: job other exists with another definition", err.Error())

	_, _, err = c.CreateJob(ctx, ingest.JobRequest{ID: "busy"}, "")
	require.True(t, errors.As(err, &ae))
	require.Equal(t, 2*time.Second, ae.RetryAfter)
	require.Equal(t, "429 resource_exhausted: backlog over 1000 runs (retry after 2s)", err.Error())
}

func TestAPIError_Error(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  ingest.APIError
		want string
	}{
		{ingest.APIError{Status: 400, Detail: ingest.Error{Code: "invalid_argument", Message: "bad cron expression", Field: "schedule.cron"}},
			"400 invalid_argument: schedule.cron: bad cron expression"},
		{ingest.APIError{Status: 400, Detail: ingest.Error{Code: "invalid_argument", Message: "schedule.cron: bad", Field: "schedule.cron"}},
			"400 invalid_argument: schedule.cron: bad"},
		{ingest.APIError{Status: 404, Detail: ingest.Error{Code: "not_found", Message: "no job x"}}, "404 not_found: no job x"},
		{ingest.APIError{Status: 502, Detail: ingest.Error{Message: "<html>bad gateway</html>"}}, "502 Bad Gateway: <html>bad gateway</html>"},
		{ingest.APIError{Status: 503}, "503 Service Unavailable"},
	} {
		require.Equal(t, tc.want, tc.err.Error())
	}
}

func TestClient_NonJSONErrorBody(t *testing.T) {
	t.Parallel()
	c, _ := newClientStub(t, "", func(r *http.Request) (int, string, http.Header) {
		return 502, "<html>" + strings.Repeat("x", 500) + "</html>", nil
	})
	_, err := c.GetJob(context.Background(), "j")
	var ae *ingest.APIError
	require.True(t, errors.As(err, &ae))
	require.Equal(t, 502, ae.Status)
	require.Empty(t, ae.Detail.Code)
	require.LessOrEqual(t, len(ae.Detail.Message), 210)
}

func TestClient_ContextCancelled(t *testing.T) {
	t.Parallel()
	c, _ := newClientStub(t, "", nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Queues(ctx)
	require.ErrorIs(t, err, context.Canceled)
}
