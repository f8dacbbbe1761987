package ingest

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/shard"
)

// The claim reply is the largest part of the API's work per run pulled: encoding/json
// spends about 2.5 µs per run on it (reflection, the payload validated again, the
// intermediate ClaimedRun with its strings). appendClaimReply writes the same bytes
// straight from the claimed runs; TestAppendClaimReply and FuzzAppendClaimReply hold it
// to encoding/json's output.

// pulledRun is a run claimed for a claim request, with its queue.
type pulledRun struct {
	c     shard.Claimed
	queue string
	// A workflow node's (Server.addParents).
	workflow, node string
	parents        []parentResult
	omitted        []string
	parentsErr     string
}

type parentResult struct {
	node   string
	result []byte
}

// wire returns the ClaimedRun of r (the reply's value for r, as encoding/json would
// encode it).
func (r *pulledRun) wire() ClaimedRun {
	w := wireClaimed(&r.c, r.queue)
	r.wireWorkflow(&w)
	return w
}

var replyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// writeClaimReply sends the reply of a claim, as writeJSON(ctx, 200, &ClaimReply{...})
// would.
func writeClaimReply(ctx *fasthttp.RequestCtx, runs []pulledRun) {
	bp := replyBufs.Get().(*[]byte)
	b := appendClaimReply((*bp)[:0], runs)
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBody(b) // copies
	if cap(b) <= 4<<20 {
		*bp = b
		replyBufs.Put(bp)
	}
}

// appendClaimReply appends the JSON of ClaimReply{Runs: the wire() of each of runs} and
// a newline, byte for byte as writeJSON encodes it (encoding/json, HTML not escaped).
func appendClaimReply(b []byte, runs []pulledRun) []byte {
	b = append(b, `{"runs":[`...)
	var durs durStrings
	for i := range runs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendClaimed(b, &runs[i].c, runs[i].queue, &durs)
		if runs[i].workflow != "" {
			b = appendWorkflow(b[:len(b)-1], &runs[i])
		}
	}
	return append(b, "]}\n"...)
}

// durStrings keeps the last timeout and visibility written with their strings: the
// runs of a reply mostly share them.
type durStrings struct {
	timeout, visibility       time.Duration
	timeoutStr, visibilityStr string
}

func (d *durStrings) of(v time.Duration, last *time.Duration, str *string) string {
	if v != *last || *str == "" {
		*last, *str = v, v.String()
	}
	return *str
}

// appendClaimed appends the JSON of wireClaimed(c, queue).
func appendClaimed(b []byte, c *shard.Claimed, queue string, durs *durStrings) []byte {
	b = append(b, `{"run":`...)
	b = appendJSONString(b, c.Member)
	b = append(b, `,"job_id":`...)
	b = appendJSONString(b, c.JobID)
	b = append(b, `,"queue":`...)
	b = appendJSONString(b, queue)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, c.Type)
	b = appendBytesField(b, "payload", c.Payload)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(c.Attempt), 10)
	b = append(b, `,"max_attempts":`...)
	b = strconv.AppendInt(b, int64(c.MaxAttempts), 10)
	b = append(b, `,"due":"`...)
	b = c.Due.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","deadline":"`...)
	b = c.ClaimedAt.Add(c.Visibility).UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","timeout":"`...)
	if c.Timeout != 0 {
		b = append(b, durs.of(c.Timeout, &durs.timeout, &durs.timeoutStr)...)
	}
	b = append(b, `","visibility":"`...)
	if c.Visibility != 0 {
		b = append(b, durs.of(c.Visibility, &durs.visibility, &durs.visibilityStr)...)
	}
	b = append(b, `","token":`...)
	b = appendJSONString(b, c.Token)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string, as encoding/json does with HTML escaping
// off: '"', '\\' and control characters escaped (\b \f \n \r \t, else \u00XX), invalid
// UTF-8 replaced by \ufffd, and U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// decodeReply decodes a claim reply: the server's own encoding by decodeClaimReply,
// anything else (another server's spacing, fields this client does not know, escapes)
// by encoding/json, which decodes the claim reply at about 10 µs a run.
func (r *ClaimReply) decodeReply(b []byte) error {
	if runs, ok := decodeClaimReply(b); ok {
		r.Runs = runs
		return nil
	}
	return json.Unmarshal(b, r)
}

// decodeClaimReply decodes b when it is a claim reply as appendClaimReply writes it
// (no spaces, known fields, strings without escapes), with the result encoding/json
// would give; ok is false for anything else, which is left to encoding/json
// (FuzzDecodeClaimReply holds it to that).
func decodeClaimReply(b []byte) (runs []ClaimedRun, ok bool) {
	d := fastDecoder{b: b}
	if !d.lit(`{"runs":[`) {
		return nil, false
	}
	runs = []ClaimedRun{}
	if !d.lit("]") {
		for {
			var r ClaimedRun
			if !d.run(&r) {
				return nil, false
			}
			runs = append(runs, r)
			if d.lit("]") {
				break
			}
			if !d.lit(",") {
				return nil, false
			}
		}
	}
	if !d.lit("}") {
		return nil, false
	}
	for _, c := range d.b[d.i:] {
		if c != ' ' && c != '\n' && c != '\r' && c != '\t' {
			return nil, false
		}
	}
	return runs, true
}

// fastDecoder reads JSON in the plain encoding of the fast paths (compact, strings
// without escapes); each method consumes what it reads and returns false, consuming
// nothing useful, on anything else, for the caller to fall back on encoding/json.
type fastDecoder struct {
	b []byte
	i int
}

// lit consumes s when it comes next.
func (d *fastDecoder) lit(s string) bool {
	if len(d.b)-d.i < len(s) || string(d.b[d.i:d.i+len(s)]) != s {
		return false
	}
	d.i += len(s)
	return true
}

// str consumes a string without escapes or control characters, in valid UTF-8, and
// returns its bytes with their quotes.
func (d *fastDecoder) str() ([]byte, bool) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, false
	}
	ascii := true
	for j := d.i + 1; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			s := d.b[d.i : j+1]
			if !ascii && !utf8.Valid(s) {
				return nil, false // encoding/json replaces invalid bytes
			}
			d.i = j + 1
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// int consumes an integer that fits an int.
func (d *fastDecoder) int() (int, bool) {
	j := d.i
	if j < len(d.b) && d.b[j] == '-' {
		j++
	}
	start := j
	for j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9' {
		j++
	}
	if j == start || j-start > 1 && d.b[start] == '0' || j-start > 18 {
		return 0, false
	}
	if j < len(d.b) && (d.b[j] == '.' || d.b[j] == 'e' || d.b[j] == 'E') {
		return 0, false
	}
	n, err := strconv.Atoi(string(d.b[d.i:j]))
	if err != nil {
		return 0, false
	}
	d.i = j
	return n, true
}

// run consumes one run's object.
func (d *fastDecoder) run(r *ClaimedRun) bool {
	if !d.lit("{") {
		return false
	}
	if d.lit("}") {
		return true
	}
	for {
		key, ok := d.str()
		if !ok || !d.lit(":") {
			return false
		}
		var dst *string
		switch string(key[1 : len(key)-1]) {
		case "run":
			dst = &r.Run
		case "job_id":
			dst = &r.JobID
		case "queue":
			dst = &r.Queue
		case "type":
			dst = &r.Type
		case "payload_base64":
			dst = &r.PayloadBase64
		case "timeout":
			dst = &r.Timeout
		case "visibility":
			dst = &r.Visibility
		case "token":
			dst = &r.Token
		case "attempt":
			if r.Attempt, ok = d.int(); !ok {
				return false
			}
		case "max_attempts":
			if r.MaxAttempts, ok = d.int(); !ok {
				return false
			}
		case "due", "deadline":
			t := &r.Due
			if key[1] == 'd' && key[2] == 'e' {
				t = &r.Deadline
			}
			s, ok := d.str()
			if !ok || t.UnmarshalJSON(s) != nil {
				return false
			}
		case "payload":
			start := d.i
			if !d.skipValue() || !json.Valid(d.b[start:d.i]) {
				return false
			}
			r.Payload = append(json.RawMessage(nil), d.b[start:d.i]...)
		default:
			return false
		}
		if dst != nil {
			s, ok := d.str()
			if !ok {
				return false
			}
			*dst = string(s[1 : len(s)-1])
		}
		if d.lit("}") {
			return true
		}
		if !d.lit(",") {
			return false
		}
	}
}

// skipValue consumes a JSON value, roughly (the caller validates it): up to the end of
// a string, object or array, or for a literal up to the ',' or '}' after it.
func (d *fastDecoder) skipValue() bool {
	depth := 0
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch c {
		case '"':
			d.i++
			for d.i < len(d.b) && d.b[d.i] != '"' {
				if d.b[d.i] == '\\' {
					d.i++
				}
				d.i++
			}
			if d.i >= len(d.b) {
				return false
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return true
			}
			depth--
		case ',':
			if depth == 0 {
				return true
			}
		case ' ', '\n', '\r', '\t':
			return false
		}
		d.i++
		if depth == 0 && (c == '"' || c == '}' || c == ']') {
			return true
		}
	}
	return false
}

// appendWorkflow appends the workflow fields of a node's run and the run's closing
// brace, as encoding/json writes them (the ClaimedRun fields after Token).
func appendWorkflow(b []byte, r *pulledRun) []byte {
	b = append(b, `,"workflow":`...)
	b = appendJSONString(b, r.workflow)
	b = append(b, `,"node":`...)
	b = appendJSONString(b, r.node)
	if len(r.parents) > 0 {
		b = append(b, `,"parents":[`...)
		for i, p := range r.parents {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"node":`...)
			b = appendJSONString(b, p.node)
			b = appendBytesField(b, "result", p.result)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(r.omitted) > 0 {
		b = append(b, `,"parents_omitted":[`...)
		for i, n := range r.omitted {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, n)
		}
		b = append(b, ']')
	}
	if r.parentsErr != "" {
		b = append(b, `,"parents_error":`...)
		b = appendJSONString(b, r.parentsErr)
	}
	return append(b, '}')
}

// appendBytesField appends bytes p as encodePayload gives them to encoding/json:
// `,"<name>":<p>` when p is compact JSON, `,"<name>_base64":"…"` otherwise, nothing when
// p is empty.
func appendBytesField(b []byte, name string, p []byte) []byte {
	if len(p) == 0 {
		return b
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	if isCompactJSON(p) {
		b = append(b, `":`...)
		return append(b, p...)
	}
	b = append(b, `_base64":"`...)
	b = base64.StdEncoding.AppendEncode(b, p)
	return append(b, '"')
}
