package ingest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// apiError is an error reply: a status with the ErrorReply body. It is deliberately not
// an error (no nil-interface traps); handlers write it with writeError.
type apiError struct {
	status int
	code   string
	field  string
	msg    string
}

func invalid(field, msg string) *apiError {
	return &apiError{status: 400, code: CodeInvalid, field: field, msg: msg}
}

// decodeJSON decodes one JSON value from body into v, refusing unknown fields and
// trailing data. The error names the field at fault in JSON-path form.
func decodeJSON(body []byte, v any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return invalid("", "the request body is empty: a JSON object is expected")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, body, reflect.TypeOf(v))
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("", "unexpected data after the JSON value")
	}
	return nil
}

// DecodeRequest decodes body, a request's JSON, into v (a *WorkflowRequest, a
// *JobRequest...) as the server does: unknown fields and trailing data are refused, and
// the error names the field at fault with its array indexes, "jobs[2].priority: must be
// an integer, got string". It lets a client check a request before sending it.
func DecodeRequest(body []byte, v any) error {
	if aerr := decodeJSON(body, v); aerr != nil {
		if aerr.field == "" {
			return errors.New(aerr.msg)
		}
		return errors.New(aerr.field + ": " + aerr.msg)
	}
	return nil
}

// jsonError converts an encoding/json error into a 400 naming the field.
func jsonError(err error, body []byte, t reflect.Type) *apiError {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return invalid("", "malformed JSON at byte "+strconv.FormatInt(se.Offset, 10)+": "+se.Error())
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return invalid("", "malformed JSON: unexpected end of input")
	case errors.As(err, &te):
		field := valuePath(body, te.Offset, te.Field)
		want := jsonTypeName(te.Type)
		msg := "must be " + want + ", got " + te.Value
		if field == "" {
			msg = "the body must be " + want + ", got " + te.Value
		}
		return invalid(field, msg)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if n, uerr := strconv.Unquote(name); uerr == nil {
			name = n
		}
		field := unknownFieldPath(body, t, name)
		return invalid(field, "unknown field")
	}
	return invalid("", "malformed JSON: "+err.Error())
}

// valuePath returns the JSON path, array indexes included ("jobs[2].priority"), of the
// value of body that ends at, or opened just before, byte offset off, where
// encoding/json reports a value of the wrong type; field is the path it names, without
// indexes ("jobs.priority"), returned as it is when the value found is not under it.
// It only runs on the error path.
func valuePath(body []byte, off int64, field string) string {
	type open struct {
		path, plain string // the container's path, with and without array indexes
		start       int64
		array       bool
		n           int    // an array's elements so far
		key         string // an object's key of the value that follows, when keyed
		keyed       bool
	}
	join := func(base, key string) string {
		if base == "" {
			return key
		}
		return base + "." + key
	}
	var stack []open
	next := func() (path, plain string) { // the paths of the value that follows
		if len(stack) == 0 {
			return "", ""
		}
		o := &stack[len(stack)-1]
		if o.array {
			return o.path + "[" + strconv.Itoa(o.n) + "]", o.plain
		}
		return join(o.path, o.key), join(o.plain, o.key)
	}
	ended := func() { // a value of the innermost container ended
		if len(stack) == 0 {
			return
		}
		if o := &stack[len(stack)-1]; o.array {
			o.n++
		} else {
			o.keyed = false
		}
	}
	// under reports whether a path without indexes is field's or below it.
	under := func(plain string) bool {
		return len(plain) >= len(field) && strings.EqualFold(plain[:len(field)], field) &&
			(len(plain) == len(field) || plain[len(field)] == '.')
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return field
		}
		if o := len(stack) - 1; o >= 0 && !stack[o].array && !stack[o].keyed {
			if k, ok := tok.(string); ok {
				stack[o].key, stack[o].keyed = k, true
				continue
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			path, plain := next()
			stack = append(stack, open{path: path, plain: plain, start: start, array: tok == json.Delim('[')})
			continue
		case json.Delim('}'), json.Delim(']'):
			o := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if o.start < off && off <= dec.InputOffset() && under(o.plain) {
				return o.path
			}
		default:
			if path, plain := next(); start < off && off <= dec.InputOffset() && under(plain) {
				return path
			}
		}
		ended()
	}
}

func jsonTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.String()
}

var jobRequestType = reflect.TypeFor[*JobRequest]()

// unknownFieldPath finds where the unknown field name sits in body (decoded as the
// struct type t) and returns its JSON path ("schedule.foo"); name alone when it cannot
// tell. It only runs on the error path.
func unknownFieldPath(body []byte, t reflect.Type, name string) string {
	if t == nil {
		return name
	}
	var v any
	if json.Unmarshal(body, &v) != nil {
		return name
	}
	if p := findUnknown(v, t, ""); p != "" {
		return p
	}
	return name
}

// findUnknown returns the JSON path of the first field of v that struct type t does not
// have, such as "schedule.foo" or "jobs[2].foo"; prefix is the path of v followed by a
// dot ("" at the top).
func findUnknown(v any, t reflect.Type, prefix string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if arr, ok := v.([]any); ok && t.Elem().Kind() != reflect.Uint8 {
			at := strings.TrimSuffix(prefix, ".")
			for i, e := range arr {
				if p := findUnknown(e, t.Elem(), at+"["+strconv.Itoa(i)+"]."); p != "" {
					return p
				}
			}
		}
		return ""
	case reflect.Struct:
	default:
		return ""
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	fields := jsonFields(t)
	for k, val := range obj {
		ft, ok := fields[k]
		if !ok {
			// encoding/json matches field names case-insensitively.
			for name, f := range fields {
				if strings.EqualFold(name, k) {
					ft, ok = f, true
					break
				}
			}
		}
		if !ok {
			return prefix + k
		}
		if p := findUnknown(val, ft, prefix+k+"."); p != "" {
			return p
		}
	}
	return ""
}

// jsonFields maps the JSON names of struct t's fields to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	m := map[string]reflect.Type{}
	if t == reflect.TypeFor[json.RawMessage]() {
		return m
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	return m
}

// idEncoding is the alphabet of job.NewID (lower-case Crockford base32).
var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// IdempotencyID returns the job id derived from an Idempotency-Key header: "k-" and the
// first 26 characters of the base32 SHA-256 of the key. The same key always gives the
// same id, so repeating a create with it returns the job created first.
func IdempotencyID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "k-" + idEncoding.EncodeToString(sum[:])[:26]
}

// BatchIdempotencyID returns the job id of item i (from 0) of a batch sent with the
// Idempotency-Key header key, when the item has no id: "kb-" and the first 26 characters
// of the base32 SHA-256 of i, a colon and the key. Its prefix keeps it apart from the ids
// of IdempotencyID ("k-"), so that a single create never finds a batch item's job by its
// key, nor a batch item a single create's.
func BatchIdempotencyID(key string, i int) string {
	sum := sha256.Sum256([]byte(strconv.Itoa(i) + ":" + key))
	return "kb-" + idEncoding.EncodeToString(sum[:])[:26]
}

// maxIdempotencyKey bounds the Idempotency-Key header.
const maxIdempotencyKey = 256

// decodeJob turns a JobRequest into a validated, normalised job, against maxPayload
// bytes (0 means job.DefaultMaxPayload). The error names the field at fault; a payload
// over maxPayload is a 413.
func decodeJob(r *JobRequest, maxPayload int) (*job.Job, *apiError) {
	if maxPayload <= 0 {
		maxPayload = job.DefaultMaxPayload
	}
	j, aerr := buildJob(r, maxPayload)
	if aerr != nil {
		return nil, aerr
	}
	if e := j.Normalize(maxPayload); e != nil {
		return nil, normalizeError(e)
	}
	fixJitter(&j.Retry)
	return j, nil
}

// buildJob converts a JobRequest's fields, checking what the conversion needs (times,
// durations, the payload against maxPayload, a 413 when over); the job is not
// normalised.
func buildJob(r *JobRequest, maxPayload int) (*job.Job, *apiError) {
	j := &job.Job{
		ID:      r.ID,
		Queue:   r.Queue,
		Type:    r.Type,
		Overlap: job.Overlap(r.Overlap),
		Misfire: job.Misfire(r.Misfire),
	}
	p, aerr := decodePayload(r.Payload, r.PayloadBase64 != "", r.PayloadBase64, maxPayload)
	if aerr != nil {
		return nil, aerr
	}
	j.Payload = p
	sch, aerr := decodeSchedule(&r.Schedule)
	if aerr != nil {
		return nil, aerr
	}
	j.Schedule = sch
	if r.Priority != nil {
		pr := *r.Priority
		if pr < 0 || pr > job.MaxPriority {
			return nil, invalid("priority", "must be 0 to "+strconv.Itoa(job.MaxPriority)+", got "+strconv.Itoa(pr))
		}
		j.Priority = &pr
	}
	if r.Retry != nil {
		rp, aerr := decodeRetry(r.Retry)
		if aerr != nil {
			return nil, aerr
		}
		j.Retry = rp
	}
	var err *apiError
	if r.Target != nil {
		j.Target = &job.Target{URL: r.Target.URL, Method: r.Target.Method, Headers: r.Target.Headers}
		if j.Target.Timeout, err = parseDuration("target.timeout", r.Target.Timeout); err != nil {
			return nil, err
		}
	}
	if j.Timeout, err = parseDuration("timeout", r.Timeout); err != nil {
		return nil, err
	}
	if j.Visibility, err = parseDuration("visibility", r.Visibility); err != nil {
		return nil, err
	}
	if j.MisfireAfter, err = parseDuration("misfire_after", r.MisfireAfter); err != nil {
		return nil, err
	}
	return j, nil
}

// fixJitter keeps a normalised "no jitter" policy normalising to no jitter again:
// RetryPolicy's defaults turn a negative jitter into 0, and 0 into the default 0.2.
func fixJitter(p *job.RetryPolicy) {
	if p.Jitter == 0 {
		p.Jitter = -1
	}
}

func normalizeError(err error) *apiError {
	var fe *job.FieldError
	if errors.As(err, &fe) {
		return invalid(fe.Field, fe.Msg)
	}
	return invalid("", err.Error())
}

// decodePayload returns the payload bytes of raw (a JSON value) or b64 (base64), at most
// one of which may be set. A JSON null is no payload.
func decodePayload(raw json.RawMessage, hasB64 bool, b64 string, maxPayload int) ([]byte, *apiError) {
	if string(raw) == "null" {
		raw = nil
	}
	if len(raw) > 0 && hasB64 {
		return nil, invalid("payload", "only one of payload and payload_base64 may be set")
	}
	var p []byte
	if hasB64 {
		n := base64.StdEncoding.DecodedLen(len(b64))
		if n > maxPayload+3 {
			return nil, tooLarge("payload", n, maxPayload)
		}
		var err error
		p, err = decodeBase64(b64)
		if err != nil {
			return nil, invalid("payload_base64", "not valid base64: "+err.Error())
		}
		if p == nil {
			p = []byte{}
		}
	} else if len(raw) > 0 {
		// Compacted: the handler gets the same bytes whatever the client's layout, and a
		// repeated create differing only in whitespace is the same definition.
		var buf bytes.Buffer
		buf.Grow(len(raw))
		if err := json.Compact(&buf, raw); err != nil {
			return nil, invalid("payload", "malformed JSON: "+err.Error())
		}
		p = buf.Bytes()
	}
	if len(p) > maxPayload {
		return nil, tooLarge("payload", len(p), maxPayload)
	}
	return p, nil
}

// decodeBase64 accepts the standard alphabet with or without padding, and the URL-safe
// one.
func decodeBase64(s string) ([]byte, error) {
	enc := base64.StdEncoding
	if strings.ContainsAny(s, "-_") {
		enc = base64.URLEncoding
	}
	if len(s)%4 != 0 {
		enc = enc.WithPadding(base64.NoPadding)
	}
	return enc.DecodeString(s)
}

func tooLarge(field string, n, limit int) *apiError {
	return &apiError{status: 413, code: CodeTooLarge, field: field,
		msg: strconv.Itoa(n) + " bytes is over the limit of " + strconv.Itoa(limit) + " bytes"}
}

// decodeSchedule converts the wire schedule. It checks what job.Schedule.Validate
// cannot tell apart (the time zone apart from the expression, malformed times and
// durations); Normalize does the rest.
func decodeSchedule(s *Schedule) (job.Schedule, *apiError) {
	var out job.Schedule
	n := 0
	if s.At != "" {
		n++
	}
	if s.Delay != "" {
		n++
	}
	if s.Now {
		n++
	}
	if s.Cron != "" {
		n++
	}
	if n > 1 {
		return out, invalid("schedule", "only one of at, delay, now or cron may be set")
	}
	if s.At != "" {
		t, err := time.Parse(time.RFC3339Nano, s.At)
		if err != nil {
			return out, invalid("schedule.at", "not an RFC 3339 time (such as 2030-01-02T15:04:05Z): "+strconv.Quote(s.At))
		}
		if t.IsZero() {
			// The zero time means "unset" to job.Schedule.
			return out, invalid("schedule.at", "must be after year 1")
		}
		out.At = t
	}
	if s.Delay != "" {
		d, err := parseDuration("schedule.delay", s.Delay)
		if err != nil {
			return out, err
		}
		if d == 0 {
			out.Now = true
		}
		out.Delay = d
	}
	if s.Now {
		out.Now = true
	}
	out.Cron, out.TimeZone = s.Cron, s.Timezone
	if s.Cron != "" && s.Timezone != "" {
		if _, err := job.ParseCron("0 0 * * *", s.Timezone); err != nil {
			return out, invalid("schedule.timezone", err.Error())
		}
	}
	return out, nil
}

// parseDuration parses a Go duration string; "" is zero (the default).
func parseDuration(field, s string) (time.Duration, *apiError) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, invalid(field, "not a duration (such as \"90s\" or \"1h30m\"): "+strconv.Quote(s))
	}
	return d, nil
}

func decodeRetry(r *Retry) (job.RetryPolicy, *apiError) {
	p := job.RetryPolicy{MaxAttempts: r.MaxAttempts}
	var err *apiError
	if p.InitialBackoff, err = parseDuration("retry.initial_backoff", r.InitialBackoff); err != nil {
		return p, err
	}
	if p.MaxBackoff, err = parseDuration("retry.max_backoff", r.MaxBackoff); err != nil {
		return p, err
	}
	if r.Multiplier != nil {
		if *r.Multiplier == 0 {
			return p, invalid("retry.multiplier", "must be 1 to 100, got 0")
		}
		p.Multiplier = *r.Multiplier
	}
	if r.Jitter != nil {
		p.Jitter = *r.Jitter
		if p.Jitter == 0 {
			p.Jitter = -1 // an explicit 0 is no jitter; RetryPolicy spells that negative
		}
	}
	return p, nil
}

// DecodeJob converts a JobRequest into a validated, normalised job, against maxPayload
// bytes (0 means job.DefaultMaxPayload). The error is a *job.FieldError naming the field
// in JSON-path form ("schedule.cron", "retry.initial_backoff"). A job it returns passes
// job.Job.Normalize again unchanged. A JSON payload is stored compacted. It is safe for
// concurrent use.
func DecodeJob(r *JobRequest, maxPayload int) (*job.Job, error) {
	j, err := decodeJob(r, maxPayload)
	if err != nil {
		return nil, &job.FieldError{Field: err.field, Msg: err.msg}
	}
	return j, nil
}

// decodeCreate decodes and validates the body of POST /v1/jobs; idemKey is the
// Idempotency-Key header ("" for none), which names the job when the body has no id.
func decodeCreate(body []byte, idemKey string, maxPayload int) (*job.Job, *apiError) {
	var r JobRequest
	if err := decodeJSON(body, &r); err != nil {
		return nil, err
	}
	if r.ID == "" && idemKey != "" {
		r.ID = IdempotencyID(idemKey)
	}
	return decodeJob(&r, maxPayload)
}

// encodeJob is the inverse of DecodeJob: the request that creates j. Fields left at
// their zero value are omitted (the server fills the defaults). A payload that is
// compact, valid UTF-8 JSON goes in Payload, any other bytes in PayloadBase64.
func encodeJob(j *job.Job) JobRequest {
	r := JobRequest{
		ID: j.ID, Queue: j.Queue, Type: j.Type, Priority: j.Priority,
		Overlap: string(j.Overlap), Misfire: string(j.Misfire),
	}
	r.Payload, r.PayloadBase64 = encodePayload(j.Payload)
	r.Target = wireTarget(j.Target)
	r.Schedule = encodeSchedule(j.Schedule)
	if j.Retry != (job.RetryPolicy{}) {
		r.Retry = encodeRetry(j.Retry, true)
	}
	r.Timeout = durString(j.Timeout)
	r.Visibility = durString(j.Visibility)
	r.MisfireAfter = durString(j.MisfireAfter)
	return r
}

func durString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func encodeSchedule(s job.Schedule) Schedule {
	switch {
	case s.Cron != "":
		return Schedule{Cron: s.Cron, Timezone: s.TimeZone}
	case !s.At.IsZero():
		return Schedule{At: s.At.Format(time.RFC3339Nano)}
	case s.Delay != 0:
		return Schedule{Delay: s.Delay.String()}
	}
	return Schedule{Now: true}
}

// encodeRetry converts a retry policy; sparse leaves zero fields out (defaults).
func encodeRetry(p job.RetryPolicy, sparse bool) *Retry {
	r := &Retry{MaxAttempts: p.MaxAttempts}
	if !sparse || p.InitialBackoff != 0 {
		r.InitialBackoff = p.InitialBackoff.String()
	}
	if !sparse || p.MaxBackoff != 0 {
		r.MaxBackoff = p.MaxBackoff.String()
	}
	if !sparse || p.Multiplier != 0 {
		mu := p.Multiplier
		r.Multiplier = &mu
	}
	if !sparse || p.Jitter != 0 {
		ji := max(p.Jitter, 0) // the wire spells "none" 0
		r.Jitter = &ji
	}
	return r
}

// encodePayload puts compact, valid UTF-8 JSON in a RawMessage and other bytes in
// base64, so that the bytes come back unchanged (encoding/json compacts RawMessages).
func encodePayload(p []byte) (json.RawMessage, string) {
	if len(p) == 0 {
		return nil, ""
	}
	if isCompactJSON(p) {
		return p, ""
	}
	return nil, base64.StdEncoding.EncodeToString(p)
}

func isCompactJSON(p []byte) bool {
	if len(p) == 0 {
		return false
	}
	// Most payloads that are not JSON fail on their first byte, which a compact JSON
	// value starts with; json.Valid builds an error for them (allocations and a quoted
	// excerpt), which is most of the time of a claim reply of such runs.
	switch c := p[0]; {
	case c == '{' || c == '[' || c == '"' || c == '-' || c == 't' || c == 'f' || c == 'n' || c >= '0' && c <= '9':
	default:
		return false
	}
	if !utf8.Valid(p) || !json.Valid(p) {
		return false
	}
	var buf bytes.Buffer
	if json.Compact(&buf, p) != nil {
		return false
	}
	return bytes.Equal(buf.Bytes(), p)
}

// decodePatch converts a JobPatch into a shard.Update, validated as far as it can be
// without the stored job.
func decodePatch(p *JobPatch, maxPayload int) (shard.Update, *apiError) {
	var u shard.Update
	probe := job.Job{ID: "x", Type: "x", Schedule: job.Schedule{Now: true}}
	if p.Schedule != nil {
		sch, err := decodeSchedule(p.Schedule)
		if err != nil {
			return u, err
		}
		u.Schedule = &sch
		probe.Schedule = sch
	}
	if p.Payload != nil || p.PayloadBase64 != nil {
		b64 := ""
		if p.PayloadBase64 != nil {
			b64 = *p.PayloadBase64
		}
		pl, err := decodePayload(p.Payload, p.PayloadBase64 != nil, b64, maxPayload)
		if err != nil {
			return u, err
		}
		if pl == nil {
			pl = []byte{}
		}
		u.Payload = &pl
	}
	if p.Priority != nil {
		pr := *p.Priority
		if pr < 0 || pr > job.MaxPriority {
			return u, invalid("priority", "must be 0 to "+strconv.Itoa(job.MaxPriority)+", got "+strconv.Itoa(pr))
		}
		u.Priority = &pr
	}
	if p.Retry != nil {
		rp, err := decodeRetry(p.Retry)
		if err != nil {
			return u, err
		}
		u.Retry = &rp
		probe.Retry = rp
	}
	if err := probe.Normalize(maxPayload); err != nil {
		return u, normalizeError(err)
	}
	return u, nil
}

// wireJob converts a job definition to its wire form.
func wireJob(j *job.Job) Job {
	w := Job{
		ID:         j.ID,
		Queue:      j.Queue,
		Type:       j.Type,
		Priority:   j.PriorityOrDefault(),
		Timeout:    j.Timeout.String(),
		Visibility: j.Visibility.String(),
	}
	w.Payload, w.PayloadBase64 = encodePayload(j.Payload)
	w.Target = wireTarget(j.Target)
	s := j.Schedule
	if !s.At.IsZero() {
		s.At = s.At.UTC()
	}
	w.Schedule = encodeSchedule(s)
	if s.Cron != "" {
		w.Overlap, w.Misfire = string(j.Overlap), string(j.Misfire)
		w.MisfireAfter = j.MisfireAfter.String()
	}
	w.Retry = *encodeRetry(j.Retry, false)
	return w
}

// wireInfo converts a stored job to its wire form.
func wireInfo(info *shard.Info) Job {
	w := wireJob(&info.Job)
	w.Shard = int(info.Shard)
	w.State = string(info.State)
	w.NextRunAt = timePtr(info.NextRunAt)
	w.RetryAt = timePtr(info.RetryAt)
	w.CreatedAt = timePtr(info.CreatedAt)
	w.ActiveRuns = info.ActiveRuns
	w.ExpiresAt = timePtr(info.Expires)
	return w
}

// wireCreated converts a created (or existing) job to its wire form.
func wireCreated(j *job.Job, res *shard.CreateResult) Job {
	w := wireJob(j)
	w.Shard = int(res.Shard)
	w.State = string(res.State)
	w.NextRunAt = timePtr(res.NextRunAt)
	return w
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func wireRuns(runs []job.Run) RunList {
	out := RunList{Runs: make([]Run, len(runs))}
	for i, r := range runs {
		out.Runs[i] = Run{
			Due: r.Due.UTC(), Start: timePtr(r.Start), End: timePtr(r.End), Worker: r.Worker,
			Attempt: r.Attempt, Outcome: string(r.Outcome), Error: r.Error, Missed: r.Missed,
		}
		out.Runs[i].Result, out.Runs[i].ResultBase64 = encodePayload(r.Result)
	}
	return out
}

func wireDead(d *shard.DeadRun) DeadRun {
	return DeadRun{
		Run: d.Member, JobID: d.JobID, Queue: d.Queue, Type: d.Type, Due: d.Due.UTC(),
		DiedAt: d.DiedAt.UTC(), Attempts: d.Attempts, Error: d.Error, Shard: int(d.Shard),
	}
}

// wireTarget converts a target to its wire form (nil for none).
func wireTarget(t *job.Target) *Target {
	if t == nil {
		return nil
	}
	w := &Target{URL: t.URL, Method: t.Method, Headers: t.Headers}
	if t.Timeout != 0 {
		w.Timeout = t.Timeout.String()
	}
	return w
}
