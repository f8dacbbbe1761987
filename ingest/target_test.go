package ingest_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/egress"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

func TestServer_CreateTarget(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{})
	body := `{"id":"hook-1","target":{"url":"https://hooks.example.com/x","headers":{"x-key":"k"},"timeout":"5s"},
		"payload":{"a":1},"schedule":{"delay":"1h"}}`
	r := tb.do("POST", "/v1/jobs", []byte(body))
	require.Equal(t, 201, r.status, "body: %s", r.body)
	var got ingest.Job
	r = tb.doJSON("GET", "/v1/jobs/hook-1", nil, &got)
	require.Equal(t, 200, r.status)
	require.Equal(t, job.PushType, got.Type)
	require.Equal(t, &ingest.Target{URL: "https://hooks.example.com/x", Method: "POST",
		Headers: map[string]string{"X-Key": "k"}, Timeout: "5s"}, got.Target)
	// The job as returned creates the same job again (200, no conflict).
	req := ingest.JobRequest{ID: got.ID, Type: got.Type, Target: got.Target, Payload: got.Payload,
		Schedule: ingest.Schedule{Delay: "1h"}}
	b, err := json.Marshal(req)
	require.NoError(t, err)
	r = tb.do("POST", "/v1/jobs", b)
	require.Equal(t, 200, r.status, "body: %s", r.body)

	for _, tc := range []struct{ body, field string }{
		{`{"type":"mail","target":{"url":"https://e.com"},"schedule":{"now":true}}`, "type"},
		{`{"target":{"url":"ftp://e.com"},"schedule":{"now":true}}`, "target.url"},
		{`{"target":{"url":"https://e.com","timeout":"1x"},"schedule":{"now":true}}`, "target.timeout"},
		{`{"target":{"url":"https://e.com","headers":{"Connection":"x"}},"schedule":{"now":true}}`, "target.headers.Connection"},
		{`{"target":{"url":"http://127.0.0.1:8080/x"},"schedule":{"now":true}}`, "target.url"},
		{`{"target":{"url":"http://169.254.169.254/"},"schedule":{"now":true}}`, "target.url"},
		{`{"target":{"url":"http://localhost/"},"schedule":{"now":true}}`, "target.url"},
		{`{"type":"@push","schedule":{"now":true}}`, "type"},
	} {
		tb.do("POST", "/v1/jobs", []byte(tc.body)).requireError(t, 400, ingest.CodeInvalid, tc.field)
	}
	r = tb.do("POST", "/v1/jobs", []byte(`{"target":{"url":"http://10.0.0.1/"},"schedule":{"now":true}}`))
	require.Contains(t, string(r.body), "private address")

	// In a batch, the item alone is refused.
	r = tb.do("POST", "/v1/jobs:batch", []byte(`[{"target":{"url":"http://127.0.0.1/"},"schedule":{"now":true}},
		{"target":{"url":"https://e.com/"},"schedule":{"now":true}}]`))
	require.Equal(t, 200, r.status, "body: %s", r.body)
	var br ingest.BatchReply
	require.NoError(t, json.Unmarshal(r.body, &br))
	require.Equal(t, 400, br.Results[0].Status)
	require.Equal(t, "target.url", br.Results[0].Error.Field)
	require.Equal(t, 201, br.Results[1].Status)
}

func TestServer_CreateTargetAllowed(t *testing.T) {
	t.Parallel()
	p, err := egress.Parse([]string{"127.0.0.0/8"})
	require.NoError(t, err)
	tb := setupMini(t, ingest.Config{Egress: p})
	r := tb.do("POST", "/v1/jobs", []byte(`{"target":{"url":"http://127.0.0.1:8080/x"},"schedule":{"now":true}}`))
	require.Equal(t, 201, r.status, "body: %s", r.body)
	tb.do("POST", "/v1/jobs", []byte(`{"target":{"url":"https://example.com/"},"schedule":{"now":true}}`)).
		requireError(t, 400, ingest.CodeInvalid, "target.url")
}

func TestServer_Breakers(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{})
	var list ingest.BreakerList
	r := tb.doJSON("GET", "/v1/breakers", nil, &list)
	require.Equal(t, 200, r.status, "body: %s", r.body)
	require.Empty(t, list.Breakers)
	ctx := context.Background()
	p := shard.BreakerPolicy{Failures: 1, Window: time.Minute, Cooldown: time.Hour, ProbeTimeout: time.Minute}
	_, err := tb.store.BreakerStep(ctx, "hooks.example.com:443", "fail", false, p)
	require.NoError(t, err)
	r = tb.doJSON("GET", "/v1/breakers", nil, &list)
	require.Equal(t, 200, r.status, "body: %s", r.body)
	require.Len(t, list.Breakers, 1)
	b := list.Breakers[0]
	require.Equal(t, "hooks.example.com:443", b.Host)
	require.Equal(t, "open", b.State)
	require.NotNil(t, b.OpenedAt)
	require.EqualValues(t, 1, b.Transitions)
}
