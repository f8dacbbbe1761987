package ingest_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
)

// queuePaused reads whether queue is paused through the API.
func (tb *bundle) queuePaused(t *testing.T, queue string) bool {
	t.Helper()
	var ql ingest.QueueList
	tb.doJSON("GET", "/v1/queues", nil, &ql).requireStatus(t, 200)
	for _, q := range ql.Queues {
		if q.Name == queue {
			return q.Paused
		}
	}
	t.Fatalf("no queue %q in %+v", queue, ql)
	return false
}

// TestServer_PathTraversal checks that a job id in a path only ever addresses that job:
// neither a percent-encoded slash nor a dot segment reaches another route.
func TestServer_PathTraversal(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		tb := setup(t, b, ingest.Config{MetricsHandler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("# metrics\n") }})
		tb.do("POST", "/v1/jobs", []byte(`{"id":"victim","type":"t","schedule":{"delay":"1h"}}`)).requireStatus(t, 201)

		for _, p := range []string{
			"/v1/jobs/..%2F..%2Fmetrics",
			"/v1/jobs/..%2f..%2fmetrics",
			"/v1/jobs/%2E%2E%2F%2E%2E%2Fmetrics",
			"/v1/jobs/..%2F..%2Fhealthz",
		} {
			r := tb.do("GET", p, nil)
			r.requireError(t, 400, ingest.CodeInvalid, "id")
			require.NotContains(t, string(r.body), "# metrics", p)
		}
		// Dot segments as sent (curl --path-as-is) are segments like any other.
		for _, p := range []string{"/v1/jobs/../../metrics", "/v1/jobs/./../metrics", "/v1/../metrics"} {
			r := tb.do("GET", p, nil)
			r.requireError(t, 404, ingest.CodeNotFound, "")
			require.NotContains(t, string(r.body), "# metrics", p)
		}

		// A job action never acts on a queue.
		for _, p := range []string{
			"/v1/jobs/..%2Fqueues%2Fdefault:pause",
			"/v1/jobs/%2E%2E%2Fqueues%2Fdefault:pause",
		} {
			tb.do("POST", p, nil).requireError(t, 400, ingest.CodeInvalid, "id")
		}
		tb.do("POST", "/v1/jobs/../queues/default:pause", nil).requireError(t, 404, ingest.CodeNotFound, "")
		require.False(t, tb.queuePaused(t, "default"))

		// The Go client (and so the CLI) escapes the id: the server refuses it.
		c := tb.client("")
		_, err := c.PauseJob(t.Context(), "../queues/default")
		require.True(t, ingest.IsCode(err, ingest.CodeInvalid), "%v", err)
		var ae *ingest.APIError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, "id", ae.Detail.Field)
		require.False(t, tb.queuePaused(t, "default"))
		_, err = c.GetJob(t.Context(), "../../metrics")
		require.True(t, ingest.IsCode(err, ingest.CodeInvalid), "%v", err)
		_, err = c.CancelJob(t.Context(), "..")
		require.True(t, ingest.IsCode(err, ingest.CodeInvalid), "%v", err)

		// The job is untouched.
		var j ingest.Job
		tb.doJSON("GET", "/v1/jobs/victim", nil, &j).requireStatus(t, 200)
		require.Equal(t, "scheduled", j.State)
	})
}

// TestServer_PathParams sends bad parameters to every route that takes one: each is
// refused with a 400 naming the parameter, and a percent-encoded good one is decoded.
func TestServer_PathParams(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		tb := setup(t, b, ingest.Config{})
		tb.do("POST", "/v1/jobs", []byte(`{"id":"a-b.c","type":"t","schedule":{"delay":"1h"}}`)).requireStatus(t, 201)

		routes := []struct {
			method, prefix, suffix, field string
			body                          []byte
		}{
			{"GET", "/v1/jobs/", "", "id", nil},
			{"PATCH", "/v1/jobs/", "", "id", []byte(`{"priority":1}`)},
			{"DELETE", "/v1/jobs/", "", "id", nil},
			{"POST", "/v1/jobs/", ":pause", "id", nil},
			{"POST", "/v1/jobs/", ":resume", "id", nil},
			{"POST", "/v1/jobs/", ":trigger", "id", nil},
			{"POST", "/v1/jobs/", ":delete", "id", nil},
			{"GET", "/v1/jobs/", "/runs", "id", nil},
			{"DELETE", "/v1/dead/", ":1700000000000", "run", nil},
			{"POST", "/v1/dead/", ":1700000000000:requeue", "run", nil},
			{"POST", "/v1/queues/", ":pause", "queue", nil},
			{"POST", "/v1/queues/", ":resume", "queue", nil},
		}
		for _, rt := range routes {
			for _, p := range []string{".", "..", "%2E", "%2e%2E", ".%2E", "..%2Fx", "a%2Fb", "%2F", "%2F..", "x%2F..%2F..", "%zz", "a%", "a%2"} {
				path := rt.prefix + p + rt.suffix
				t.Run(strings.ReplaceAll(rt.method+path, "/", "_"), func(t *testing.T) {
					tb.do(rt.method, path, rt.body).requireError(t, 400, ingest.CodeInvalid, rt.field)
				})
			}
		}
		// Each segment is decoded on its own.
		var j ingest.Job
		tb.doJSON("GET", "/v1/jobs/a%2Db%2Ec", nil, &j).requireStatus(t, 200)
		require.Equal(t, "a-b.c", j.ID)
		var runs ingest.RunList
		tb.doJSON("GET", "/v1/jobs/%61-b.c/runs", nil, &runs).requireStatus(t, 200)
		var sr ingest.StateReply
		tb.doJSON("POST", "/v1/jobs/a-b%2Ec:pause", nil, &sr).requireStatus(t, 200)
		require.Equal(t, ingest.StateReply{ID: "a-b.c", State: "paused", Changed: true}, sr)
		tb.doJSON("POST", "/v1/queues/defaul%74:pause", nil, &sr).requireStatus(t, 200)
		require.Equal(t, "default", sr.ID)
		require.True(t, tb.queuePaused(t, "default"))
		// Literal segments are matched as sent.
		tb.do("GET", "/v1/%6Aobs/a-b.c", nil).requireError(t, 404, ingest.CodeNotFound, "")
		tb.do("GET", "/v1/jobs%2Fa-b.c", nil).requireError(t, 404, ingest.CodeNotFound, "")
	})
}

// TestServer_CreateRefusesDotIDs: "." and ".." can never be addressed in a path, so no
// job, queue or batch item may be named so.
func TestServer_CreateRefusesDotIDs(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		tb := setup(t, b, ingest.Config{})
		for _, id := range []string{".", ".."} {
			q, err := json.Marshal(id)
			require.NoError(t, err)
			tb.do("POST", "/v1/jobs", []byte(`{"id":`+string(q)+`,"type":"t","schedule":{"now":true}}`)).
				requireError(t, 400, ingest.CodeInvalid, "id")
			tb.do("POST", "/v1/jobs", []byte(`{"queue":`+string(q)+`,"type":"t","schedule":{"now":true}}`)).
				requireError(t, 400, ingest.CodeInvalid, "queue")

			var br ingest.BatchReply
			tb.doJSON("POST", "/v1/jobs:batch", []any{
				map[string]any{"id": id, "type": "t", "schedule": map[string]any{"now": true}},
				map[string]any{"queue": id, "type": "t", "schedule": map[string]any{"now": true}},
			}, &br).requireStatus(t, 200)
			require.Equal(t, 2, br.Failed)
			require.Equal(t, "id", br.Results[0].Error.Field)
			require.Equal(t, 400, br.Results[0].Status)
			require.Equal(t, "queue", br.Results[1].Error.Field)
			tb.do("GET", "/v1/jobs?queue="+id, nil).requireError(t, 400, ingest.CodeInvalid, "queue")
		}
		// Dots inside an id are fine.
		tb.do("POST", "/v1/jobs", []byte(`{"id":"...","type":"t","schedule":{"delay":"1h"}}`)).requireStatus(t, 201)
		tb.do("GET", "/v1/jobs/...", nil).requireStatus(t, 200)
	})
}
