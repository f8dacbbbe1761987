package ingest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

const fuzzMaxPayload = 256

// FuzzDecodeJob feeds the create body decoder arbitrary bodies and Idempotency-Keys. It
// must never panic; a job it accepts must validate (and normalise to itself), and must
// come back unchanged through its wire form (encodeJob, JSON, decode).
func FuzzDecodeJob(f *testing.F) {
	for _, s := range []string{
		`{"type":"t","schedule":{"now":true}}`,
		`{"id":"a","queue":"q","type":"t","payload":{"a":[1,2,{"b":null}]},"schedule":{"at":"2030-01-02T03:04:05.123+02:00"},"priority":0}`,
		`{"type":"t","payload_base64":"AAECAw==","schedule":{"delay":"1h30m"},"retry":{"max_attempts":3,"initial_backoff":"10ms","max_backoff":"1m","multiplier":1.5,"jitter":0}}`,
		`{"type":"t","schedule":{"cron":"*/5 * * * *","timezone":"Europe/Paris"},"overlap":"buffer_one","misfire":"run_all","misfire_after":"5m"}`,
		`{"type":"t","schedule":{"cron":"@hourly"},"timeout":"1s","visibility":"2s"}`,
		`{"type":"t","schedule":{"delay":"0s"},"payload":" 1 "}`,
		`{"type":"t","schedule":{"now":true},"bogus":1}`,
		`{"type":"t","schedule":{"now":true}} trailing`,
		`[`, `null`, ``,
	} {
		f.Add([]byte(s), "")
	}
	f.Add([]byte(`{"type":"t","schedule":{"now":true}}`), "order-1")
	f.Fuzz(func(t *testing.T, body []byte, key string) {
		j, aerr := decodeCreate(body, key, fuzzMaxPayload)
		if aerr != nil {
			require.Nil(t, j)
			require.NotEmpty(t, aerr.msg)
			require.Contains(t, []int{400, 413}, aerr.status)
			require.Contains(t, []string{CodeInvalid, CodeTooLarge}, aerr.code)
			return
		}
		require.NotNil(t, j)
		if key != "" && !strings.Contains(string(body), `"id"`) {
			require.Equal(t, IdempotencyID(key), j.ID)
		}
		// It validates, and normalising again changes nothing that matters (the store
		// normalises too).
		again := cloneJob(j)
		require.NoError(t, again.Normalize(fuzzMaxPayload))
		requireSameJob(t, j, again)

		// The wire form creates the same job.
		req := encodeJob(j)
		b, err := json.Marshal(req)
		require.NoError(t, err)
		back, aerr := decodeCreate(b, "", fuzzMaxPayload)
		require.Nil(t, aerr, "%s", b)
		requireSameJob(t, j, back)

		// And so does the form the API returns it in.
		w := wireJob(j)
		b, err = json.Marshal(jobRequestOf(w))
		require.NoError(t, err)
		back, aerr = decodeCreate(b, "", fuzzMaxPayload)
		require.Nil(t, aerr, "%s", b)
		requireSameJob(t, j, back)
	})
}

func jobRequestOf(j Job) JobRequest {
	return JobRequest{
		ID: j.ID, Queue: j.Queue, Type: j.Type, Payload: j.Payload, PayloadBase64: j.PayloadBase64,
		Schedule: j.Schedule, Priority: &j.Priority, Retry: &j.Retry, Timeout: j.Timeout,
		Visibility: j.Visibility, Overlap: j.Overlap, Misfire: j.Misfire, MisfireAfter: j.MisfireAfter,
	}
}

func cloneJob(j *job.Job) *job.Job {
	c := *j
	if j.Priority != nil {
		p := *j.Priority
		c.Priority = &p
	}
	c.Payload = append([]byte(nil), j.Payload...)
	return &c
}

// requireSameJob compares normalised jobs: times by instant, payloads by bytes (nil and
// empty alike), the policies of recurring jobs only (they do not apply to others), and
// "no jitter" whether spelt 0 or negative (a normalised policy has 0, decodeJob's -1).
func requireSameJob(t *testing.T, want, got *job.Job) {
	t.Helper()
	require.True(t, want.Schedule.At.Equal(got.Schedule.At), "at: %v vs %v", want.Schedule.At, got.Schedule.At)
	require.Equal(t, string(want.Payload), string(got.Payload))
	w, g := cloneJob(want), cloneJob(got)
	w.Schedule.At, g.Schedule.At = time.Time{}, time.Time{}
	w.Payload, g.Payload = nil, nil
	w.Retry.Jitter, g.Retry.Jitter = max(w.Retry.Jitter, 0), max(g.Retry.Jitter, 0)
	if !w.Schedule.IsRecurring() {
		w.Overlap, w.Misfire, w.MisfireAfter = "", "", 0
		g.Overlap, g.Misfire, g.MisfireAfter = "", "", 0
	}
	require.Equal(t, w, g)
}

func TestDecodeJob_Defaults(t *testing.T) {
	t.Parallel()
	j, err := DecodeJob(&JobRequest{Type: "t", Schedule: Schedule{Now: true}}, 0)
	require.NoError(t, err)
	require.NoError(t, job.ValidateID("id", j.ID, job.MaxIDLen))
	require.Equal(t, job.DefaultQueue, j.Queue)
	require.Equal(t, job.DefaultPriority, *j.Priority)
	require.Equal(t, job.DefaultMaxAttempts, j.Retry.MaxAttempts)
	require.Equal(t, 0.2, j.Retry.Jitter)
	require.Equal(t, job.DefaultTimeout, j.Timeout)
	require.Nil(t, j.Payload)

	zero := 0.0
	j, err = DecodeJob(&JobRequest{Type: "t", Schedule: Schedule{Now: true}, Retry: &Retry{Jitter: &zero}}, 0)
	require.NoError(t, err)
	require.Equal(t, -1.0, j.Retry.Jitter) // none, and it stays none when normalised again
	require.NoError(t, j.Normalize(0))
	require.Equal(t, 0.0, j.Retry.Jitter)

	_, err = DecodeJob(&JobRequest{Type: "t", Schedule: Schedule{Cron: "* * * * *", Timezone: "Nowhere/Town"}}, 0)
	var fe *job.FieldError
	require.True(t, errors.As(err, &fe))
	require.Equal(t, "schedule.timezone", fe.Field)
}

func TestEncodeJob(t *testing.T) {
	t.Parallel()
	pr := 0
	at := time.Date(2031, 5, 6, 7, 8, 9, 1e6, time.FixedZone("", 3600))
	for _, j := range []*job.Job{
		{ID: "a", Type: "t", Schedule: job.Schedule{Now: true}},
		{ID: "b", Queue: "q", Type: "t", Payload: []byte(`{"x":1}`), Schedule: job.Schedule{At: at}, Priority: &pr},
		{ID: "c", Type: "t", Payload: []byte{0, 0xff}, Schedule: job.Schedule{Delay: 90 * time.Second},
			Retry: job.RetryPolicy{MaxAttempts: 2, Jitter: -1, Multiplier: 3}, Timeout: time.Minute},
		{ID: "d", Type: "t", Schedule: job.Schedule{Cron: "0 9 * * *", TimeZone: "Asia/Tokyo"},
			Overlap: job.OverlapAllow, Misfire: job.MisfireSkip, MisfireAfter: time.Hour},
	} {
		want := cloneJob(j)
		require.NoError(t, want.Normalize(0))
		req := encodeJob(j)
		got, err := DecodeJob(&req, 0)
		require.NoError(t, err, j.ID)
		fixJitter(&want.Retry)
		requireSameJob(t, want, got)
	}
	require.Equal(t, Schedule{At: "2031-05-06T07:08:09.001+01:00"}, encodeJob(&job.Job{Schedule: job.Schedule{At: at}}).Schedule)
}

func TestIdempotencyID(t *testing.T) {
	t.Parallel()
	a := IdempotencyID("order-1")
	require.Equal(t, a, IdempotencyID("order-1"))
	require.NotEqual(t, a, IdempotencyID("order-2"))
	require.Len(t, a, 28)
	require.NoError(t, job.ValidateID("id", a, job.MaxIDLen))
	require.NoError(t, job.ValidateID("id", IdempotencyID(""), job.MaxIDLen))
}

func TestWireInfo(t *testing.T) {
	t.Parallel()
	pr := 3
	info := &shard.Info{
		Job: job.Job{ID: "x", Queue: "q", Type: "t", Payload: []byte("not json"), Priority: &pr,
			Schedule: job.Schedule{Delay: time.Minute},
			Retry:    job.RetryPolicy{MaxAttempts: 5, InitialBackoff: time.Second, MaxBackoff: time.Hour, Multiplier: 2, Jitter: -1},
			Timeout:  time.Minute, Visibility: 30 * time.Second},
		Shard: 7, State: job.StateScheduled, CreatedAt: time.UnixMilli(1_700_000_000_000), ActiveRuns: 1,
	}
	w := wireInfo(info)
	require.Equal(t, "bm90IGpzb24=", w.PayloadBase64)
	require.Nil(t, w.Payload)
	require.Equal(t, Schedule{Delay: "1m0s"}, w.Schedule)
	require.Equal(t, 0.0, *w.Retry.Jitter)
	require.Equal(t, "1s", w.Retry.InitialBackoff)
	require.Equal(t, 7, w.Shard)
	require.Nil(t, w.NextRunAt)
	require.Nil(t, w.ExpiresAt)
	require.Equal(t, time.UTC, w.CreatedAt.Location())
	b, err := json.Marshal(w)
	require.NoError(t, err)
	require.NotContains(t, string(b), "next_run_at")
	require.Contains(t, string(b), `"created_at":"2023-11-14T22:13:20Z"`)
}

// FuzzDecodeWorkflow: a workflow body either fails with a 400 or 413 naming what is
// wrong, or decodes into a workflow whose own validation fails only with a field error
// naming the workflow's field or a node's ("jobs[i]...."), never with a panic.
func FuzzDecodeWorkflow(f *testing.F) {
	for _, s := range []string{
		`{"id":"w","jobs":[{"id":"a","type":"t"},{"id":"b","type":"t","depends_on":["a"],"rule":"one_failed"}]}`,
		`{"jobs":[{"id":"a","type":"t","payload":{"x":1},"retry":{"max_attempts":2,"jitter":0},"timeout":"1s"}],"schedule":{"cron":"@daily","timezone":"Europe/Paris"},"overlap":"buffer_one","misfire_after":"5m"}`,
		`{"jobs":[{"id":"a","type":"t","depends_on":["b"]},{"id":"b","type":"t","depends_on":["a"]}]}`,
		`{"jobs":[{"id":"a","type":"t"},{"id":"a","type":"t"}]}`,
		`{"jobs":[{"id":"a","target":{"url":"https://example.com/h","timeout":"2s"}}]}`,
		`{"jobs":[{"id":"a","type":"t","schedule":{"now":true}}]}`,
		`{"jobs":[{"id":"a","type":"t","shedule":{}}]}`,
		`{"jobs":[{"id":"a","type":"t"},{"id":"b","type":"t","priority":"x","depends_on":["a",1]}]}`,
		`{"jobs":[{"id":"a","type":"t"},"b"]}`,
		`{"jobs":[]}`, `{"jobs":null}`, `[`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var r WorkflowRequest
		aerr := decodeJSON(body, &r)
		var w *job.Workflow
		if aerr == nil {
			w, aerr = decodeWorkflow(&r, fuzzMaxPayload, nil)
		}
		if aerr != nil {
			require.Nil(t, w)
			require.NotEmpty(t, aerr.msg)
			require.Contains(t, []int{400, 413}, aerr.status)
			return
		}
		err := w.Normalize(100, fuzzMaxPayload)
		if err == nil {
			return
		}
		var fe *job.FieldError
		require.ErrorAs(t, err, &fe)
		require.NotEmpty(t, fe.Msg)
		require.Regexp(t, `^(id|jobs|jobs\[\d+\]\..+|schedule(\..+)?|overlap|misfire|misfire_after)$`, fe.Field)
	})
}

// DecodeRequest names a field as the server does, with the index of a top-level array's
// item (tock jobs create --file with a batch).
func TestDecodeRequest_NamesTheItem(t *testing.T) {
	var reqs []JobRequest
	err := DecodeRequest([]byte(`[{"type":"t"},{"type":"t","priority":"high"}]`), &reqs)
	require.EqualError(t, err, "[1].priority: must be an integer, got string")
	var req WorkflowRequest
	err = DecodeRequest([]byte(`{"jobs":[{"id":"a"},{"id":"b","depends_on":["a",1]}]}`), &req)
	require.ErrorContains(t, err, "jobs[1].depends_on[1]: must be")
	require.EqualError(t, DecodeRequest([]byte(`{"jobs":[],"x":1}`), &req), "x: unknown field")
}

// A value of the wrong type under a key holding a '[' (a push target's header name is
// the user's) is named, not looped on for ever: valuePath skipped to the next ']' and,
// with none, stood still at the '['.
func TestJSONError_KeyWithABracket(t *testing.T) {
	done := make(chan *apiError, 1)
	go func() {
		var req JobRequest
		done <- decodeJSON([]byte(`{"id":"a","type":"t","target":{"url":"http://x","headers":{"a[":5}}}`), &req)
	}()
	select {
	case aerr := <-done:
		if aerr == nil || aerr.field != "target.headers.a[" {
			t.Fatalf("got %+v", aerr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("decodeJSON does not return")
	}
}
