package ingest

import (
	"encoding/base64"
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
}

// wire returns the ClaimedRun of r (the reply's value for r, as encoding/json would
// encode it).
func (r *pulledRun) wire() ClaimedRun { return wireClaimed(&r.c, r.queue) }

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
	if len(c.Payload) > 0 {
		if isCompactJSON(c.Payload) {
			b = append(b, `,"payload":`...)
			b = append(b, c.Payload...)
		} else {
			b = append(b, `,"payload_base64":"`...)
			b = base64.StdEncoding.AppendEncode(b, c.Payload)
			b = append(b, '"')
		}
	}
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
