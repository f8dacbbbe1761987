package ingest_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/shard"
)

func TestServer_CreateErrors(t *testing.T) {
	t.Parallel()
	tb := setupMiniStore(t, shard.Config{MaxPayload: 100}, ingest.Config{MaxBody: 4096})
	keysBefore := tb.b.Mini.Keys()

	const ok = `"type":"t","schedule":{"now":true}`
	for _, tc := range []struct {
		name   string
		body   string
		status int
		code   string
		field  string
	}{
		{"Empty", ``, 400, ingest.CodeInvalid, ""},
		{"Malformed", `{"type":`, 400, ingest.CodeInvalid, ""},
		{"MalformedInside", `{"type":"t",}`, 400, ingest.CodeInvalid, ""},
		{"Trailing", `{` + ok + `} {}`, 400, ingest.CodeInvalid, ""},
		{"NotAnObject", `[1]`, 400, ingest.CodeInvalid, ""},
		{"UnknownField", `{` + ok + `,"bogus":1}`, 400, ingest.CodeInvalid, "bogus"},
		{"UnknownNested", `{"type":"t","schedule":{"now":true,"later":1}}`, 400, ingest.CodeInvalid, "schedule.later"},
		{"UnknownInRetry", `{` + ok + `,"retry":{"max_attempt":1}}`, 400, ingest.CodeInvalid, "retry.max_attempt"},
		{"WrongType", `{"type":5,"schedule":{"now":true}}`, 400, ingest.CodeInvalid, "type"},
		{"WrongTypeNested", `{"type":"t","schedule":{"now":"yes"}}`, 400, ingest.CodeInvalid, "schedule.now"},
		{"WrongTypeRetry", `{` + ok + `,"retry":{"max_attempts":"3"}}`, 400, ingest.CodeInvalid, "retry.max_attempts"},
		{"WrongTypeTarget", `{"target":{"url":"https://example.com","headers":{"X-A":"1","X-B":2}},"schedule":{"now":true}}`, 400, ingest.CodeInvalid, "target.headers.X-B"},
		{"BadCron", `{"type":"t","schedule":{"cron":"61 * * * *"}}`, 400, ingest.CodeInvalid, "schedule.cron"},
		{"BadZone", `{"type":"t","schedule":{"cron":"0 9 * * *","timezone":"Mars/Olympus"}}`, 400, ingest.CodeInvalid, "schedule.timezone"},
		{"ZoneWithoutCron", `{"type":"t","schedule":{"now":true,"timezone":"UTC"}}`, 400, ingest.CodeInvalid, "schedule.timezone"},
		{"AtNotRFC3339", `{"type":"t","schedule":{"at":"2030-01-02 15:04:05"}}`, 400, ingest.CodeInvalid, "schedule.at"},
		{"AtWords", `{"type":"t","schedule":{"at":"tomorrow"}}`, 400, ingest.CodeInvalid, "schedule.at"},
		{"BadDelay", `{"type":"t","schedule":{"delay":"5 minutes"}}`, 400, ingest.CodeInvalid, "schedule.delay"},
		{"NegativeDelay", `{"type":"t","schedule":{"delay":"-5s"}}`, 400, ingest.CodeInvalid, "schedule.delay"},
		{"NoSchedule", `{"type":"t","schedule":{}}`, 400, ingest.CodeInvalid, "schedule"},
		{"MissingSchedule", `{"type":"t"}`, 400, ingest.CodeInvalid, "schedule"},
		{"TwoSchedules", `{"type":"t","schedule":{"now":true,"delay":"1s"}}`, 400, ingest.CodeInvalid, "schedule"},
		{"BadInitialBackoff", `{` + ok + `,"retry":{"initial_backoff":"soon"}}`, 400, ingest.CodeInvalid, "retry.initial_backoff"},
		{"BadMaxBackoff", `{` + ok + `,"retry":{"max_backoff":"1x"}}`, 400, ingest.CodeInvalid, "retry.max_backoff"},
		{"MaxBackoffBelowInitial", `{` + ok + `,"retry":{"initial_backoff":"1m","max_backoff":"1s"}}`, 400, ingest.CodeInvalid, "retry.max_backoff"},
		{"NegativeAttempts", `{` + ok + `,"retry":{"max_attempts":-1}}`, 400, ingest.CodeInvalid, "retry.max_attempts"},
		{"ZeroMultiplier", `{` + ok + `,"retry":{"multiplier":0}}`, 400, ingest.CodeInvalid, "retry.multiplier"},
		{"BigJitter", `{` + ok + `,"retry":{"jitter":2}}`, 400, ingest.CodeInvalid, "retry.jitter"},
		{"BadTimeout", `{` + ok + `,"timeout":"forever"}`, 400, ingest.CodeInvalid, "timeout"},
		{"TinyTimeout", `{` + ok + `,"timeout":"500us"}`, 400, ingest.CodeInvalid, "timeout"},
		{"TinyVisibility", `{` + ok + `,"visibility":"100ms"}`, 400, ingest.CodeInvalid, "visibility"},
		{"BadMisfireAfter", `{` + ok + `,"misfire_after":"x"}`, 400, ingest.CodeInvalid, "misfire_after"},
		{"BadOverlap", `{` + ok + `,"overlap":"sometimes"}`, 400, ingest.CodeInvalid, "overlap"},
		{"BadMisfire", `{` + ok + `,"misfire":"maybe"}`, 400, ingest.CodeInvalid, "misfire"},
		{"PriorityHigh", `{` + ok + `,"priority":10}`, 400, ingest.CodeInvalid, "priority"},
		{"PriorityNegative", `{` + ok + `,"priority":-1}`, 400, ingest.CodeInvalid, "priority"},
		{"PriorityFraction", `{` + ok + `,"priority":1.5}`, 400, ingest.CodeInvalid, "priority"},
		{"BadID", `{` + ok + `,"id":"has space"}`, 400, ingest.CodeInvalid, "id"},
		{"LongID", `{` + ok + `,"id":"` + strings.Repeat("a", 129) + `"}`, 400, ingest.CodeInvalid, "id"},
		{"BadQueue", `{` + ok + `,"queue":"a/b"}`, 400, ingest.CodeInvalid, "queue"},
		{"NoType", `{"schedule":{"now":true}}`, 400, ingest.CodeInvalid, "type"},
		{"BothPayloads", `{` + ok + `,"payload":{},"payload_base64":"AA=="}`, 400, ingest.CodeInvalid, "payload"},
		{"BadBase64", `{` + ok + `,"payload_base64":"!!!"}`, 400, ingest.CodeInvalid, "payload_base64"},
		{"PayloadTooLarge", `{` + ok + `,"payload":"` + strings.Repeat("x", 100) + `"}`, 413, ingest.CodeTooLarge, "payload"},
		{"Base64PayloadTooLarge", `{` + ok + `,"payload_base64":"` + strings.Repeat("AAAA", 34) + `"}`, 413, ingest.CodeTooLarge, "payload"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb.do("POST", "/v1/jobs", []byte(tc.body)).requireError(t, tc.status, tc.code, tc.field)
		})
	}

	t.Run("BodyTooLarge", func(t *testing.T) {
		// The server answers once it has read the headers, and closes the connection.
		req := fasthttp.AcquireRequest()
		defer fasthttp.ReleaseRequest(req)
		req.Header.SetMethod("POST")
		req.SetRequestURI("http://tock.test/v1/jobs")
		req.SetBodyString(`{` + ok + `,"queue":"` + strings.Repeat(" ", 4096) + `"}`)
		e := tb.doRaw(req).requireError(t, 413, ingest.CodeTooLarge, "")
		require.Contains(t, e.Message, "4096")
	})
	t.Run("ContentType", func(t *testing.T) {
		tb.do("POST", "/v1/jobs", []byte(`{`+ok+`}`), "Content-Type", "text/plain").requireError(t, 415, ingest.CodeUnsupported, "")
		tb.do("PATCH", "/v1/jobs/x", []byte(`{}`), "Content-Type", "application/xml").requireError(t, 415, ingest.CodeUnsupported, "")
	})
	t.Run("LongIdempotencyKey", func(t *testing.T) {
		tb.do("POST", "/v1/jobs", []byte(`{`+ok+`}`), "Idempotency-Key", strings.Repeat("k", 257)).requireError(t, 400, ingest.CodeInvalid, "")
	})

	// Nothing was written for the rejected creates.
	require.Equal(t, keysBefore, tb.b.Mini.Keys())

	tb.do("POST", "/v1/jobs", []byte(`{`+ok+`,"id":"at-limit","payload":"`+strings.Repeat("x", 98)+`"}`)).requireStatus(t, 201)
	tb.do("POST", "/v1/jobs", []byte(`{`+ok+`,"id":"json-type","payload":1}`), "Content-Type", "application/merge-patch+json; charset=utf-8").requireStatus(t, 201)
}

func TestServer_Routes(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{})
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/", 404, ""},
		{"GET", "/v2/jobs", 404, ""},
		{"GET", "/v1/jobs/", 404, ""},
		{"GET", "/v1/jobs/a/b", 404, ""},
		{"GET", "/v1/queues/default", 404, ""},
		{"POST", "/v1/queues/default:explode", 404, ""},
		{"PUT", "/v1/jobs", 405, "POST, GET"},
		{"POST", "/v1/jobs/x", 405, "GET, PATCH, DELETE"},
		{"GET", "/v1/jobs/x:pause", 405, "POST"},
		{"DELETE", "/v1/queues", 405, "GET"},
		{"GET", "/v1/dead/job-1:1700000000000:requeue", 405, "POST"},
		{"POST", "/v1/dead/job-1:1700000000000", 405, "DELETE"},
	} {
		r := tb.do(tc.method, tc.path, nil)
		if tc.status == 404 {
			r.requireError(t, 404, ingest.CodeNotFound, "")
			continue
		}
		r.requireError(t, 405, ingest.CodeMethod, "")
		require.Equal(t, tc.allow, r.header["Allow"], "%s %s", tc.method, tc.path)
	}

	r := tb.do("HEAD", "/healthz", nil) // no body for HEAD
	require.Equal(t, 405, r.status)
	require.Equal(t, "GET", r.header["Allow"])

	// An unknown verb is part of the id, and ids have no colon.
	tb.do("GET", "/v1/jobs/x:explode", nil).requireError(t, 400, ingest.CodeInvalid, "id")
	// A percent-encoded colon is a colon.
	tb.do("POST", "/v1/jobs/nope%3Apause", nil).requireError(t, 404, ingest.CodeNotFound, "")
	tb.do("GET", "/v1/jobs/nope", nil).requireError(t, 404, ingest.CodeNotFound, "")
	r = tb.do("GET", "/healthz", nil)
	r.requireStatus(t, 200)
	require.JSONEq(t, `{"status":"ok"}`, string(r.body))
}
