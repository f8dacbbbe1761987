package ingest

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/shard"
)

// encodingJSON is what writeJSON sends for v.
func encodingJSON(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(v))
	return buf.Bytes()
}

func requireSameClaimReply(t testing.TB, runs []pulledRun) {
	t.Helper()
	wire := ClaimReply{Runs: make([]ClaimedRun, len(runs))}
	for i := range runs {
		wire.Runs[i] = runs[i].wire()
	}
	require.Equal(t, string(encodingJSON(t, &wire)), string(appendClaimReply(nil, runs)))
}

// appendClaimReply writes what encoding/json writes for the same runs.
func TestAppendClaimReply(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 27, 3, 4, 5, 123456789, time.FixedZone("x", 3600))
	base := shard.Claimed{
		Shard: 3, Member: "job-1:1764000000000", JobID: "job-1", Due: time.UnixMilli(1764000000000), Token: "1-9f2c6a0b1d3e4f50",
		Attempt: 1, MaxAttempts: 25, Type: "mail", Payload: []byte(`{"to":"a@example.com"}`), Timeout: 30 * time.Minute,
		Visibility: 30 * time.Second, ClaimedAt: at,
	}
	requireSameClaimReply(t, nil)
	requireSameClaimReply(t, []pulledRun{})
	var runs []pulledRun
	for _, mod := range []func(c *shard.Claimed){
		func(*shard.Claimed) {},
		func(c *shard.Claimed) { c.Payload = nil },
		func(c *shard.Claimed) { c.Payload = []byte("abcdefghij") },
		func(c *shard.Claimed) { c.Payload = []byte{0, 1, 2, 0xff} },
		func(c *shard.Claimed) { c.Payload = []byte(`{"a": 1}`) }, // not compact: base64
		func(c *shard.Claimed) { c.Payload = []byte(`"<&>"`) },
		func(c *shard.Claimed) { c.Payload = []byte(`[1,2,{"x":"\u2028"}]`) },
		func(c *shard.Claimed) { c.Timeout, c.Visibility = 0, 0 },
		func(c *shard.Claimed) { c.Timeout, c.Visibility = 1500*time.Millisecond, 36*time.Hour+time.Nanosecond },
		func(c *shard.Claimed) { c.Type = "a\"b\\c\x00\x1f\x7f\b\f\n\r\t<>&é\u2028\u2029\xff\xfe€" },
		func(c *shard.Claimed) { c.Token, c.Attempt, c.MaxAttempts = "", 0, -1 },
		func(c *shard.Claimed) { c.Due, c.ClaimedAt = time.UnixMilli(0), time.Time{}.Add(time.Hour) },
	} {
		c := base
		mod(&c)
		runs = append(runs, pulledRun{c: c, queue: "q-\u00e9"})
		requireSameClaimReply(t, runs[len(runs)-1:])
	}
	// Workflow nodes: with and without parents' results and omitted ones.
	for _, mod := range []func(r *pulledRun){
		func(r *pulledRun) {},
		func(r *pulledRun) {
			r.parents = []parentResult{{node: "a", result: []byte(`{"n":1}`)}, {node: "b\\", result: []byte{0, 0xff}}, {node: "c"}}
		},
		func(r *pulledRun) { r.omitted = []string{"big", "é "} },
		func(r *pulledRun) {
			r.parents, r.omitted = []parentResult{{node: "x", result: []byte(`"s"`)}}, []string{"y"}
		},
		func(r *pulledRun) { r.parentsErr = "not \"read\"" },
	} {
		r := pulledRun{c: base, queue: "q", workflow: "wf@1764000000000", node: "join"}
		mod(&r)
		runs = append(runs, r)
		requireSameClaimReply(t, runs[len(runs)-1:])
	}
	requireSameClaimReply(t, runs)
}

func FuzzAppendClaimReply(f *testing.F) {
	f.Add("job-1:1764000000000", "mail", "default", "tok", []byte(`{"a":1}`), int64(1764000000000), int64(30000))
	f.Add("a\"b:1", "t\x00\u2028", "q\xff", "", []byte{0xff}, int64(-1), int64(0))
	f.Add("x:2", "<&>", "é", "\\", []byte(`[1, 2]`), int64(253402300799000), int64(1))
	f.Fuzz(func(t *testing.T, member, typ, queue, token string, payload []byte, dueMs, visMs int64) {
		due := time.UnixMilli(dueMs)
		if due.Year() < 0 || due.Year() > 9999 || due.Add(time.Hour).Year() > 9999 {
			return // encoding/json refuses such times; due times are never near them
		}
		c := shard.Claimed{Member: member, JobID: member, Type: typ, Token: token, Payload: payload, Due: due,
			ClaimedAt: due, Visibility: time.Duration(visMs%3600000) * time.Millisecond, Timeout: time.Duration(visMs)}
		requireSameClaimReply(t, []pulledRun{{c: c, queue: queue}})
	})
}

func BenchmarkClaimReply(b *testing.B) {
	runs := make([]pulledRun, 200)
	for i := range runs {
		runs[i] = pulledRun{queue: "default", c: shard.Claimed{Member: "t123456:1764000000000", JobID: "t123456", Type: "noop",
			Payload: bytes.Repeat([]byte("abcdefghij"), 10), Token: "1-9f2c6a0b1d3e4f50", Attempt: 1, MaxAttempts: 25,
			Due: time.UnixMilli(1764000000000), ClaimedAt: time.Now(), Timeout: 30 * time.Minute, Visibility: 30 * time.Second}}
	}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = appendClaimReply(buf[:0], runs)
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			wire := ClaimReply{Runs: make([]ClaimedRun, len(runs))}
			for i := range runs {
				wire.Runs[i] = runs[i].wire()
			}
			encodingJSON(b, &wire)
		}
	})
}

// decodeClaimReply decodes what appendClaimReply writes, as encoding/json does.
func TestDecodeClaimReply(t *testing.T) {
	t.Parallel()
	c := shard.Claimed{Member: "job-1:1764000000000", JobID: "job-1", Type: "mail", Token: "1-9f", Attempt: 2, MaxAttempts: 25,
		Due: time.UnixMilli(1764000000000), ClaimedAt: time.UnixMilli(1764000000123), Visibility: 30 * time.Second, Timeout: time.Minute}
	var runs []pulledRun
	for _, p := range []string{`{"to":"a@example.com","n":[1,2.5e3,null,true,false,"x\"y\\u00e9"]}`, "", "abc", `"s"`, `12`, `null`, `[]`, `{}`, `"é"`} {
		c.Payload = []byte(p)
		runs = append(runs, pulledRun{c: c, queue: "q"})
	}
	c.Type = "é€"
	runs = append(runs, pulledRun{c: c, queue: "q"})
	for _, rs := range [][]pulledRun{nil, runs[:1], runs} {
		b := appendClaimReply(nil, rs)
		got, ok := decodeClaimReply(b)
		require.True(t, ok, "%s", b)
		var want ClaimReply
		require.NoError(t, json.Unmarshal(b, &want))
		require.Equal(t, want.Runs, got)
	}
	// Escapes, spaces and unknown fields are left to encoding/json.
	for _, b := range []string{
		`{"runs":[{"run":"a\"b:1"}]}`,
		`{"runs": []}`,
		`{"runs":[{"extra":1}]}`,
		`{"runs":[{"run":"\u00e9"}]}`,
		`{"runs":[{"run":"a` + "\xff" + `"}]}`,
	} {
		_, ok := decodeClaimReply([]byte(b))
		require.False(t, ok, b)
		var r ClaimReply
		require.NoError(t, r.decodeReply([]byte(b)), b)
	}
	var r ClaimReply
	_, ok := decodeClaimReply([]byte(`{"runs":[{"attempt":1.0}]}`))
	require.False(t, ok)
	require.Error(t, r.decodeReply([]byte(`{"runs":[{"attempt":1.0}]}`)), "as encoding/json")
}

// Whatever decodeClaimReply accepts, encoding/json decodes to the same.
func FuzzDecodeClaimReply(f *testing.F) {
	c := shard.Claimed{Member: "job-1:1764000000000", JobID: "job-1", Type: "mail", Token: "1-9f", Attempt: 2, MaxAttempts: 25,
		Due: time.UnixMilli(1764000000000), ClaimedAt: time.UnixMilli(1764000000123), Visibility: 30 * time.Second, Timeout: time.Minute,
		Payload: []byte(`{"a":[1,"b"]}`)}
	f.Add(appendClaimReply(nil, []pulledRun{{c: c, queue: "q"}, {c: c, queue: "r"}}))
	c.Payload = []byte("xyz")
	f.Add(appendClaimReply(nil, []pulledRun{{c: c, queue: "q"}}))
	f.Add([]byte(`{"runs":[{"payload":1,"attempt":-3},{}]}`))
	f.Add([]byte(`{"runs":[{"payload":"a,b}","due":"2026-01-01T00:00:00Z"}]}`))
	f.Add([]byte(`{"runs":[]}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := decodeClaimReply(b)
		if !ok {
			return
		}
		var want ClaimReply
		require.NoError(t, json.Unmarshal(b, &want), "%q", b)
		require.Equal(t, want.Runs, got, "%q", b)
	})
}

func BenchmarkDecodeClaimReply(b *testing.B) {
	runs := make([]pulledRun, 200)
	for i := range runs {
		runs[i] = pulledRun{queue: "default", c: shard.Claimed{Member: "t123456:1764000000000", JobID: "t123456", Type: "noop",
			Payload: bytes.Repeat([]byte("abcdefghij"), 10), Token: "1-9f2c6a0b1d3e4f50", Attempt: 1, MaxAttempts: 25,
			Due: time.UnixMilli(1764000000000), ClaimedAt: time.Now(), Timeout: 30 * time.Minute, Visibility: 30 * time.Second}}
	}
	body := appendClaimReply(nil, runs)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r ClaimReply
			if err := r.decodeReply(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r ClaimReply
			if err := json.Unmarshal(body, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// decodeAckRuns decodes what the clients send as decodeJSON does, and leaves the rest
// to it.
func TestDecodeAckRuns(t *testing.T) {
	t.Parallel()
	for _, b := range []string{
		`{"runs":[{"run":"a:1","token":"t"}]}`,
		`{"runs":[{"token":"t","run":"a:1","result":{"x":[1,"y\"z"]}},{"run":"b:2","token":"u","result_base64":"AA=="},{}]}` + "\n",
		`{"runs":[{"run":"é:1","token":"t","result":null}]}`,
		`{"runs":[{"run":"a:1","token":"t","result":"s"},{"run":"a:1","token":"t","result":-1.5e3}]}`,
	} {
		got, ok := decodeAckRuns([]byte(b))
		require.True(t, ok, b)
		var want AckRunsRequest
		require.Nil(t, decodeJSON([]byte(b), &want), b)
		require.Equal(t, want, got, b)
	}
	for _, b := range []string{
		`{"runs":[]}`, `{"runs":null}`, `{"runs": [{"run":"a:1"}]}`, `{"runs":[{"RUN":"a:1"}]}`, `{"runs":[{"run":"a\u00e9:1"}]}`,
		`{"runs":[{"run":"a:1","extra":1}]}`, `{"runs":[{"run":1}]}`, `{"runs":[{"run":"a:1"}]}x`, `{"runs":[{"result":{"a":1 }}]}`,
		`{"runs":[{"run":"a:1"}],"runs":[]}`,
	} {
		_, ok := decodeAckRuns([]byte(b))
		require.False(t, ok, b)
	}
}

func FuzzDecodeAckRuns(f *testing.F) {
	f.Add([]byte(`{"runs":[{"run":"a:1","token":"t"}]}`))
	f.Add([]byte(`{"runs":[{"token":"t","run":"a:1","result":{"x":[1,"y\"z"]}},{"run":"b:2","token":"u","result_base64":"AA=="},{}]}`))
	f.Add([]byte(`{"runs":[{"run":"a:1","result":[1,{"b":null}],"result":true}]}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := decodeAckRuns(b)
		if !ok {
			return
		}
		var want AckRunsRequest
		require.Nil(t, decodeJSON(b, &want), "%q", b)
		require.Equal(t, want, got, "%q", b)
	})
}

// decodeRunsReply decodes what the server writes for runs without errors, as
// encoding/json does.
func TestDecodeRunsReply(t *testing.T) {
	t.Parallel()
	for _, rr := range []RunsReply{
		{Runs: []RunResult{}},
		{Runs: []RunResult{{Run: "a:1", Status: 200, Outcome: "ok"}, {Run: "b<&>é:2", Status: 200, Outcome: "error"}}, Done: 2},
		{Runs: []RunResult{{Run: "a:1", Status: 404}}, Refused: 1},
	} {
		b := encodingJSON(t, &rr)
		got, ok := decodeRunsReply(b)
		require.True(t, ok, "%s", b)
		require.Equal(t, rr, got)
	}
	rr := RunsReply{Runs: []RunResult{{Run: "a:1", Status: 409, Error: &Error{Code: CodeTokenMismatch, Message: "m", Field: "runs[0].token"}}}, Refused: 1}
	b := encodingJSON(t, &rr)
	_, ok := decodeRunsReply(b)
	require.False(t, ok, "errors go to encoding/json")
	var got RunsReply
	require.NoError(t, got.decodeReply(b))
	require.Equal(t, rr, got)
}

func FuzzDecodeRunsReply(f *testing.F) {
	f.Add([]byte(`{"runs":[{"run":"a:1","status":200,"outcome":"ok"},{"run":"b:1","status":404}],"done":1,"refused":1}` + "\n"))
	f.Add([]byte(`{"runs":[],"done":0,"refused":0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := decodeRunsReply(b)
		if !ok {
			return
		}
		var want RunsReply
		require.NoError(t, json.Unmarshal(b, &want), "%q", b)
		require.Equal(t, want, got, "%q", b)
	})
}
