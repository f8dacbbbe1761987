package ingest_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

func TestServer_Auth(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{
		Tokens:         []ingest.Token{{Secret: "reader-secret", Scope: ingest.ScopeRead}, {Secret: "writer-secret", Scope: ingest.ScopeWrite}},
		MetricsHandler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("# metrics\n") },
	})
	create := []byte(`{"id":"a1","type":"t","schedule":{"delay":"1h"}}`)
	const reader, writer = "Bearer reader-secret", "Bearer writer-secret"

	r := tb.do("POST", "/v1/jobs", create)
	r.requireError(t, 401, ingest.CodeUnauthenticated, "")
	require.Equal(t, `Bearer realm="tock"`, r.header["Www-Authenticate"])
	r = tb.do("POST", "/v1/jobs", create, "Authorization", "Bearer nope")
	r.requireError(t, 401, ingest.CodeUnauthenticated, "")
	require.Contains(t, r.header["Www-Authenticate"], `error="invalid_token"`)
	tb.do("GET", "/v1/jobs/a1", nil, "Authorization", "Basic d3JpdGVyLXNlY3JldA==").requireError(t, 401, ingest.CodeUnauthenticated, "")
	tb.do("GET", "/v1/jobs/a1", nil, "Authorization", "Bearer").requireError(t, 401, ingest.CodeUnauthenticated, "")
	tb.do("GET", "/v1/jobs/a1", nil, "Authorization", "Bearer reader-secret-and-more").requireError(t, 401, ingest.CodeUnauthenticated, "")

	// A read token may not write.
	tb.do("POST", "/v1/jobs", create, "Authorization", reader).requireError(t, 403, ingest.CodeForbidden, "")
	tb.do("DELETE", "/v1/jobs/a1", nil, "Authorization", reader).requireError(t, 403, ingest.CodeForbidden, "")
	tb.do("POST", "/v1/jobs:batch", []byte(`[]`), "Authorization", reader).requireError(t, 403, ingest.CodeForbidden, "")
	tb.do("POST", "/v1/queues/default:pause", nil, "Authorization", reader).requireError(t, 403, ingest.CodeForbidden, "")
	_, err := tb.store.Get(t.Context(), "a1")
	require.ErrorIs(t, err, errNotFound)

	tb.do("POST", "/v1/jobs", create, "Authorization", writer).requireStatus(t, 201)
	tb.do("POST", "/v1/jobs", create, "Authorization", "bearer  writer-secret ").requireStatus(t, 200) // scheme case-insensitive
	tb.do("GET", "/v1/jobs/a1", nil, "Authorization", reader).requireStatus(t, 200)
	tb.do("GET", "/v1/jobs/a1", nil, "Authorization", writer).requireStatus(t, 200)
	tb.do("GET", "/v1/jobs/a1", nil).requireError(t, 401, ingest.CodeUnauthenticated, "")

	// Health needs no token; metrics and the OpenAPI document need read.
	tb.do("GET", "/healthz", nil).requireStatus(t, 200)
	tb.do("GET", "/readyz", nil).requireStatus(t, 200)
	tb.do("GET", "/metrics", nil).requireError(t, 401, ingest.CodeUnauthenticated, "")
	r = tb.do("GET", "/metrics", nil, "Authorization", reader)
	r.requireStatus(t, 200)
	require.Equal(t, "# metrics\n", string(r.body))
	tb.do("GET", "/v1/openapi.json", nil).requireError(t, 401, ingest.CodeUnauthenticated, "")
	tb.do("GET", "/v1/openapi.json", nil, "Authorization", reader).requireStatus(t, 200)
}

func TestNew_Validates(t *testing.T) {
	t.Parallel()
	_, err := ingest.New(ingest.Config{})
	require.ErrorContains(t, err, "Store")
	tb := setupMini(t, ingest.Config{})
	for _, cfg := range []ingest.Config{
		{Store: tb.store, Tokens: []ingest.Token{{Secret: "", Scope: ingest.ScopeRead}}},
		{Store: tb.store, Tokens: []ingest.Token{{Secret: "x", Scope: "admin"}}},
		{Store: tb.store, Tokens: []ingest.Token{{Secret: "x", Scope: ingest.ScopeRead}, {Secret: "x", Scope: ingest.ScopeWrite}}},
		{Store: tb.store, MaxBatch: -1},
		{Store: tb.store, MaxBody: -1},
		{Store: tb.store, MaxBody: 100, MaxBodyMemory: 99},
		{Store: tb.store, MaxBacklog: -1},
		{Store: tb.store, RedisTimeout: -time.Second},
		{Store: tb.store, WriteTimeout: -time.Second},
	} {
		_, err := ingest.New(cfg)
		require.Error(t, err, "%+v", cfg)
	}
}

func TestServer_Backlog(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{MaxBacklog: 2})
	var jobs []*job.Job
	for i := range 3 {
		jobs = append(jobs, &job.Job{ID: "ready-" + strconv.Itoa(i), Type: "t", Schedule: job.Schedule{Now: true}})
	}
	_, err := tb.store.Create(t.Context(), jobs)
	require.NoError(t, err)
	n, err := tb.store.Backlog(t.Context())
	skipIfStub(t, err)
	require.NoError(t, err)
	require.Equal(t, int64(3), n)

	r := tb.do("POST", "/v1/jobs", []byte(`{"id":"one-more","type":"t","schedule":{"now":true}}`))
	r.requireError(t, 429, ingest.CodeOverloaded, "")
	require.Equal(t, "1", r.header["Retry-After"])
	r = tb.do("POST", "/v1/jobs:batch", []byte(`[{"id":"one-more","type":"t","schedule":{"now":true}}]`))
	r.requireError(t, 429, ingest.CodeOverloaded, "")
	require.Equal(t, "1", r.header["Retry-After"])
	_, err = tb.store.Get(t.Context(), "one-more")
	require.ErrorIs(t, err, errNotFound)
	// Reads go on.
	tb.do("GET", "/v1/jobs/ready-0", nil).requireStatus(t, 200)
}

func TestServer_BacklogUnderLimit(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{MaxBacklog: 100})
	// Whether Backlog works or not (a failed measure lets creates through), this passes.
	tb.do("POST", "/v1/jobs", []byte(`{"type":"t","schedule":{"now":true}}`)).requireStatus(t, 201)
	tb.do("POST", "/v1/jobs", []byte(`{"type":"t","schedule":{"now":true}}`)).requireStatus(t, 201)
}

func TestServer_JobActions(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{})
	tb.do("POST", "/v1/jobs", []byte(`{"id":"cron-1","type":"t","schedule":{"cron":"*/5 * * * *"}}`)).requireStatus(t, 201)
	tb.do("POST", "/v1/jobs", []byte(`{"id":"once-1","type":"t","schedule":{"delay":"1h"}}`)).requireStatus(t, 201)

	var sr ingest.StateReply
	tb.doJSON("POST", "/v1/jobs/cron-1:pause", nil, &sr).requireStatus(t, 200)
	require.Equal(t, ingest.StateReply{ID: "cron-1", State: "paused", Changed: true}, sr)
	tb.doJSON("POST", "/v1/jobs/cron-1:pause", nil, &sr).requireStatus(t, 200)
	require.False(t, sr.Changed)
	tb.do("POST", "/v1/jobs/cron-1:trigger", nil).requireError(t, 409, ingest.CodeState, "")
	tb.doJSON("POST", "/v1/jobs/cron-1:resume", nil, &sr).requireStatus(t, 200)
	require.Equal(t, ingest.StateReply{ID: "cron-1", State: "scheduled", Changed: true}, sr)

	var tr ingest.TriggerReply
	tb.doJSON("POST", "/v1/jobs/once-1:trigger", nil, &tr).requireStatus(t, 200)
	require.Equal(t, "once-1", tr.ID)
	require.True(t, strings.HasPrefix(tr.Run, "once-1:"), tr.Run)
	var got ingest.Job
	tb.doJSON("GET", "/v1/jobs/once-1", nil, &got).requireStatus(t, 200)
	require.Equal(t, "ready", got.State)
	require.Equal(t, 1, got.ActiveRuns)

	var runs ingest.RunList
	tb.doJSON("GET", "/v1/jobs/once-1/runs", nil, &runs).requireStatus(t, 200)
	require.NotNil(t, runs.Runs)

	tb.doJSON("DELETE", "/v1/jobs/once-1", nil, &sr).requireStatus(t, 200)
	require.Equal(t, ingest.StateReply{ID: "once-1", State: "cancelled", Changed: true}, sr)
	tb.doJSON("DELETE", "/v1/jobs/once-1", nil, &sr).requireStatus(t, 200)
	require.False(t, sr.Changed)
	tb.doJSON("GET", "/v1/jobs/once-1/runs", nil, &runs).requireStatus(t, 200)
	require.NotEmpty(t, runs.Runs)
	require.Equal(t, "cancelled", runs.Runs[0].Outcome)

	for _, p := range []string{"/v1/jobs/nope:pause", "/v1/jobs/nope:resume", "/v1/jobs/nope:trigger"} {
		tb.do("POST", p, nil).requireError(t, 404, ingest.CodeNotFound, "")
	}
	tb.do("DELETE", "/v1/jobs/nope", nil).requireError(t, 404, ingest.CodeNotFound, "")
	tb.do("GET", "/v1/jobs/nope/runs", nil).requireError(t, 404, ingest.CodeNotFound, "")
	tb.do("GET", "/v1/jobs/bad%20id", nil).requireError(t, 400, ingest.CodeInvalid, "id")
}

func TestServer_List(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{})
	_, err := tb.store.List(t.Context(), shard.ListFilter{})
	skipIfStub(t, err)
	require.NoError(t, err)

	want := map[string]bool{}
	for i := range 25 {
		q := "q1"
		if i%2 == 1 {
			q = "q2"
		}
		id := "l-" + strconv.Itoa(i)
		tb.do("POST", "/v1/jobs", []byte(`{"id":"`+id+`","queue":"`+q+`","type":"t","schedule":{"delay":"1h"}}`)).requireStatus(t, 201)
		if q == "q1" {
			want[id] = true
		}
	}
	got := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 100)
		var l ingest.JobList
		tb.doJSON("GET", "/v1/jobs?queue=q1&limit=5&cursor="+cursor, nil, &l).requireStatus(t, 200)
		require.LessOrEqual(t, len(l.Jobs), 1000, "a whole SCAN batch at most (a filtered listing scans 1,000 keys a batch)")
		for _, j := range l.Jobs {
			require.Equal(t, "q1", j.Queue)
			got[j.ID] = true
		}
		if l.NextCursor == "" {
			break
		}
		cursor = l.NextCursor
	}
	require.Equal(t, want, got)

	var l ingest.JobList
	tb.doJSON("GET", "/v1/jobs?state=scheduled&limit=1000", nil, &l).requireStatus(t, 200)
	tb.do("GET", "/v1/jobs?limit=0", nil).requireError(t, 400, ingest.CodeInvalid, "limit")
	tb.do("GET", "/v1/jobs?limit=1001", nil).requireError(t, 400, ingest.CodeInvalid, "limit")
	tb.do("GET", "/v1/jobs?limit=ten", nil).requireError(t, 400, ingest.CodeInvalid, "limit")
	tb.do("GET", "/v1/jobs?state=sleeping", nil).requireError(t, 400, ingest.CodeInvalid, "state")
	tb.do("GET", "/v1/jobs?queue=a%2Fb", nil).requireError(t, 400, ingest.CodeInvalid, "queue")
	tb.do("GET", "/v1/jobs?cursor=%21%21garbage", nil).requireError(t, 400, ingest.CodeInvalid, "cursor")
}

func TestServer_Patch(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{})
	tb.do("POST", "/v1/jobs", []byte(`{"id":"p1","type":"t","schedule":{"delay":"1h"},"payload":{"v":1}}`)).requireStatus(t, 201)
	_, err := tb.store.Update(t.Context(), "p1", shard.Update{})
	skipIfStub(t, err)
	require.NoError(t, err)

	at := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	var j ingest.Job
	r := tb.doJSON("PATCH", "/v1/jobs/p1", json.RawMessage(`{"schedule":{"at":"`+at.Format(time.RFC3339)+`"},
		"payload":{"v":2},"priority":8,"retry":{"max_attempts":4}}`), &j)
	r.requireStatus(t, 200)
	require.Equal(t, at.Format(time.RFC3339), j.Schedule.At)
	require.JSONEq(t, `{"v":2}`, string(j.Payload))
	require.Equal(t, 8, j.Priority)
	require.Equal(t, 4, j.Retry.MaxAttempts)
	require.NotNil(t, j.NextRunAt)
	require.True(t, at.Equal(*j.NextRunAt))

	j = ingest.Job{}
	tb.doJSON("PATCH", "/v1/jobs/p1", json.RawMessage(`{"payload_base64":"AAE="}`), &j).requireStatus(t, 200)
	require.Equal(t, "AAE=", j.PayloadBase64)
	require.Empty(t, j.Payload)
	require.Equal(t, 8, j.Priority) // unchanged
	j = ingest.Job{}
	tb.doJSON("PATCH", "/v1/jobs/p1", json.RawMessage(`{"payload":null}`), &j).requireStatus(t, 200)
	require.Empty(t, j.Payload)
	require.Empty(t, j.PayloadBase64)

	tb.do("PATCH", "/v1/jobs/p1", []byte(`{"priority":12}`)).requireError(t, 400, ingest.CodeInvalid, "priority")
	tb.do("PATCH", "/v1/jobs/p1", []byte(`{"schedule":{"cron":"nope"}}`)).requireError(t, 400, ingest.CodeInvalid, "schedule.cron")
	tb.do("PATCH", "/v1/jobs/p1", []byte(`{"retry":{"initial_backoff":"x"}}`)).requireError(t, 400, ingest.CodeInvalid, "retry.initial_backoff")
	tb.do("PATCH", "/v1/jobs/p1", []byte(`{"type":"other"}`)).requireError(t, 400, ingest.CodeInvalid, "type")
	tb.do("PATCH", "/v1/jobs/nope", []byte(`{"priority":1}`)).requireError(t, 404, ingest.CodeNotFound, "")

	tb.do("DELETE", "/v1/jobs/p1", nil).requireStatus(t, 200)
	tb.do("PATCH", "/v1/jobs/p1", []byte(`{"priority":1}`)).requireError(t, 409, ingest.CodeState, "")
}

// deadRun makes a run of a new job go to the dead-letter set: one attempt, failed.
func (tb *bundle) deadRun(id, queue string) string {
	t := tb.t
	t.Helper()
	one := 1
	_, err := tb.store.Create(t.Context(), []*job.Job{{ID: id, Queue: queue, Type: "t", Schedule: job.Schedule{Now: true},
		Retry: job.RetryPolicy{MaxAttempts: one}}})
	require.NoError(t, err)
	sh := tb.store.ShardOf(id)
	runs, err := tb.store.Claim(t.Context(), sh, queue, 10, "w1", "nonce1")
	require.NoError(t, err)
	require.Len(t, runs, 1)
	errs, err := tb.store.FinishRuns(t.Context(), sh, []shard.Finish{{Member: runs[0].Member, Token: runs[0].Token, Outcome: shard.Failed, Error: "boom"}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	return runs[0].Member
}

func TestServer_Dead(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{})
	_, _, err := tb.store.Dead(t.Context(), "", 0, "")
	skipIfStub(t, err)
	require.NoError(t, err)

	run1 := tb.deadRun("d1", "dq")
	run2 := tb.deadRun("d2", "dq")
	tb.deadRun("d3", "other")

	var dl ingest.DeadList
	tb.doJSON("GET", "/v1/dead?queue=dq", nil, &dl).requireStatus(t, 200)
	byRun := map[string]ingest.DeadRun{}
	for _, d := range dl.Dead {
		byRun[d.Run] = d
	}
	require.Len(t, byRun, 2)
	require.Equal(t, "d1", byRun[run1].JobID)
	require.Equal(t, "dq", byRun[run1].Queue)
	require.Equal(t, "boom", byRun[run1].Error)
	require.Equal(t, 1, byRun[run1].Attempts)
	require.Equal(t, int(tb.store.ShardOf("d1")), byRun[run1].Shard)

	var sr ingest.StateReply
	tb.doJSON("POST", "/v1/dead/"+run1+":requeue", nil, &sr).requireStatus(t, 200)
	require.Equal(t, run1, sr.ID)
	tb.doJSON("DELETE", "/v1/dead/"+run2, nil, &sr).requireStatus(t, 200)
	tb.do("DELETE", "/v1/dead/"+run2, nil).requireError(t, 404, ingest.CodeNotFound, "")
	tb.do("POST", "/v1/dead/"+run2+":requeue", nil).requireError(t, 404, ingest.CodeNotFound, "")
	tb.doJSON("GET", "/v1/dead?queue=dq", nil, &dl).requireStatus(t, 200)
	require.Empty(t, dl.Dead)
	var j ingest.Job
	tb.doJSON("GET", "/v1/jobs/d1", nil, &j).requireStatus(t, 200)
	require.Equal(t, "ready", j.State)

	tb.do("DELETE", "/v1/dead/no-colon", nil).requireError(t, 400, ingest.CodeInvalid, "run")
	tb.do("DELETE", "/v1/dead/job:notanumber", nil).requireError(t, 400, ingest.CodeInvalid, "run")
	tb.do("GET", "/v1/dead?limit=-1", nil).requireError(t, 400, ingest.CodeInvalid, "limit")
}

func TestServer_Queues(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{})
	_, err := tb.store.Queues(t.Context())
	skipIfStub(t, err)
	require.NoError(t, err)

	tb.do("POST", "/v1/jobs", []byte(`{"queue":"qa","type":"t","schedule":{"now":true}}`)).requireStatus(t, 201)
	tb.do("POST", "/v1/jobs", []byte(`{"queue":"qb","type":"t","schedule":{"delay":"1h"}}`)).requireStatus(t, 201)

	var sr ingest.StateReply
	tb.doJSON("POST", "/v1/queues/qa:pause", nil, &sr).requireStatus(t, 200)
	require.Equal(t, ingest.StateReply{ID: "qa", State: "paused", Changed: true}, sr)
	tb.doJSON("POST", "/v1/queues/qa:pause", nil, &sr).requireStatus(t, 200)
	require.False(t, sr.Changed)

	var ql ingest.QueueList
	tb.doJSON("GET", "/v1/queues", nil, &ql).requireStatus(t, 200)
	byName := map[string]ingest.Queue{}
	for _, q := range ql.Queues {
		byName[q.Name] = q
	}
	require.True(t, byName["qa"].Paused)
	require.Equal(t, int64(1), byName["qa"].Ready)
	require.False(t, byName["qb"].Paused)
	require.Equal(t, int64(1), byName["qb"].Scheduled)
	require.Zero(t, byName["qa"].FireRate) // the first sample

	tb.doJSON("POST", "/v1/queues/qa:resume", nil, &sr).requireStatus(t, 200)
	require.Equal(t, ingest.StateReply{ID: "qa", State: "active", Changed: true}, sr)
	tb.do("POST", "/v1/queues/bad%2Fname:pause", nil).requireError(t, 400, ingest.CodeInvalid, "queue") // one segment, decoded
	tb.do("POST", "/v1/queues/bad%20name:pause", nil).requireError(t, 400, ingest.CodeInvalid, "queue")
}
