package ingest

import "encoding/json"

// Fast paths for the batch ack's request (server) and reply (Go client), as for the
// claim reply (claim_json.go): encoding/json spends about 2 µs a run on each. Each
// decodes only the plain encoding clients send (compact, strings without escapes,
// known fields) and leaves anything else to encoding/json; FuzzDecodeAckRuns and
// FuzzDecodeRunsReply hold them to encoding/json's results.

// decodeAckRuns decodes body as decodeJSON would into an AckRunsRequest when it is in
// the plain encoding; ok is false otherwise.
func decodeAckRuns(body []byte) (req AckRunsRequest, ok bool) {
	d := fastDecoder{b: body}
	if !d.lit(`{"runs":[`) || d.lit("]") {
		return req, false // none: decodeJSON's message
	}
	req.Runs = make([]RunAck, 0, 64)
	for {
		var r RunAck
		if !d.lit("{") {
			return req, false
		}
		if !d.lit("}") && !d.ackFields(&r) {
			return req, false
		}
		req.Runs = append(req.Runs, r)
		if d.lit("]") {
			break
		}
		if !d.lit(",") {
			return req, false
		}
	}
	if !d.lit("}") || !d.rest() {
		return req, false
	}
	return req, true
}

// ackFields consumes the fields of a RunAck after its '{', and the '}'.
func (d *fastDecoder) ackFields(r *RunAck) bool {
	for {
		key, ok := d.str()
		if !ok || !d.lit(":") {
			return false
		}
		switch string(key[1 : len(key)-1]) {
		case "run":
			ok = d.strTo(&r.Run)
		case "token":
			ok = d.strTo(&r.Token)
		case "result_base64":
			ok = d.strTo(&r.ResultBase64)
		case "result":
			start := d.i
			if ok = d.skipValue() && json.Valid(d.b[start:d.i]); ok {
				r.Result = append(json.RawMessage(nil), d.b[start:d.i]...)
			}
		default:
			ok = false
		}
		if !ok {
			return false
		}
		if d.lit("}") {
			return true
		}
		if !d.lit(",") {
			return false
		}
	}
}

// decodeReply decodes a batch report's reply: the server's own encoding of its runs'
// successes without encoding/json, anything else (refused runs, with their errors) by
// it.
func (r *RunsReply) decodeReply(b []byte) error {
	if rr, ok := decodeRunsReply(b); ok {
		*r = rr
		return nil
	}
	return json.Unmarshal(b, r)
}

// decodeRunsReply decodes b as encoding/json would when it is a RunsReply in the
// server's encoding whose runs have no error; ok is false otherwise.
func decodeRunsReply(b []byte) (rr RunsReply, ok bool) {
	d := fastDecoder{b: b}
	if !d.lit(`{"runs":[`) {
		return rr, false
	}
	rr.Runs = []RunResult{}
	if !d.lit("]") {
		for {
			var r RunResult
			if !d.lit(`{"run":`) || !d.strTo(&r.Run) || !d.lit(`,"status":`) {
				return rr, false
			}
			if r.Status, ok = d.int(); !ok {
				return rr, false
			}
			if d.lit(`,"outcome":`) && !d.strTo(&r.Outcome) || !d.lit("}") {
				return rr, false
			}
			rr.Runs = append(rr.Runs, r)
			if d.lit("]") {
				break
			}
			if !d.lit(",") {
				return rr, false
			}
		}
	}
	if !d.lit(`,"done":`) {
		return rr, false
	}
	if rr.Done, ok = d.int(); !ok || !d.lit(`,"refused":`) {
		return rr, false
	}
	if rr.Refused, ok = d.int(); !ok || !d.lit("}") || !d.rest() {
		return rr, false
	}
	return rr, true
}

// strTo consumes a plain string (see str) into dst.
func (d *fastDecoder) strTo(dst *string) bool {
	s, ok := d.str()
	if ok {
		*dst = string(s[1 : len(s)-1])
	}
	return ok
}

// rest reports whether only white space is left.
func (d *fastDecoder) rest() bool {
	for _, c := range d.b[d.i:] {
		if c != ' ' && c != '\n' && c != '\r' && c != '\t' {
			return false
		}
	}
	return true
}
