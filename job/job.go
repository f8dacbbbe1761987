// Package job holds tock's job model: the definition of a job, its schedule, its retry
// policy, its recurring-job policies and their validation. It knows nothing about Redis.
//
// A job is one-time (at a time, after a delay, or now) or recurring (a cron expression in
// an IANA time zone). Each firing of a job is a run; a run is identified by the job id and
// its due time and carries an attempt counter.
package job

import (
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Limits and defaults of a job definition.
const (
	MaxIDLen            = 128
	MaxQueueLen         = 64
	MaxTypeLen          = 128
	DefaultMaxPayload   = 1 << 20 // 1 MiB
	DefaultQueue        = "default"
	DefaultPriority     = 5
	MaxPriority         = 9
	DefaultMaxAttempts  = 25
	MaxMaxAttempts      = 1000
	DefaultTimeout      = 30 * time.Minute
	DefaultVisibility   = 30 * time.Second
	MinVisibility       = time.Second
	DefaultMisfireAfter = 60 * time.Second
	DefaultHistory      = 20
	DefaultRetention    = 24 * time.Hour
	// MaxRunAll bounds how many missed occurrences one misfire=run_all catch-up fires;
	// older ones are recorded as missed.
	MaxRunAll = 100
	// MaxDelay bounds a one-time job's delay and a retry policy's backoffs, so that the
	// times they give stay below MaxAt until 2099 and below the store's hard limit
	// (see MinAt and MaxAt) until 2186.
	MaxDelay = 100 * 365 * 24 * time.Hour
)

// The range of times a schedule may name: MinAt ≤ at < MaxAt.
//
// The store keeps a due time as integral milliseconds since 1970 and its scripts read it
// as a string of digits (they compare times by length, then bytewise, and match them
// with %d patterns), so a time before 1970, negative, is misread; 0 means "none" in
// several of its fields. A ready run's score is (9-priority)*1e13 + due ms, so a due time
// must stay below 1e13 ms (2286-11-20) for priorities not to mix. MinAt (2000-01-01)
// keeps every due time clear of 0 and catches a client's unset or zero time, at no cost:
// any time in the past fires at once. MaxAt (2200-01-01) leaves room for the retries and
// delays added to a due time. Every time in the range is exact as a float64, as Redis
// and Lua's %.14g print it.
var (
	MinAt = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxAt = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// State is the state of a job.
type State string

// Job states. A one-time job goes scheduled → ready → running → completed (or retrying
// between attempts, dead after its last attempt, cancelled when cancelled). A recurring
// job stays scheduled between its runs. Waiting is reserved for jobs that wait for
// dependencies (not used yet).
const (
	StateWaiting   State = "waiting"
	StateScheduled State = "scheduled"
	StateReady     State = "ready"
	StateRunning   State = "running"
	StateRetrying  State = "retrying"
	StatePaused    State = "paused"
	StateCompleted State = "completed"
	StateDead      State = "dead"
	StateCancelled State = "cancelled"
)

// ValidState reports whether s is one of the job states.
func ValidState(s State) bool {
	switch s {
	case StateWaiting, StateScheduled, StateReady, StateRunning, StateRetrying, StatePaused,
		StateCompleted, StateDead, StateCancelled:
		return true
	}
	return false
}

// Ended reports whether s is a final state: completed, dead or cancelled (nothing the job
// does changes it; lua common's final).
func (s State) Ended() bool {
	return s == StateCompleted || s == StateDead || s == StateCancelled
}

// Overlap says what a recurring job does when an occurrence comes while a previous run of
// the same job is still ready, running or waiting for a retry.
type Overlap string

// Overlap policies.
const (
	// OverlapSkip does not start the occurrence; it is recorded as skipped. The default.
	OverlapSkip Overlap = "skip"
	// OverlapAllow starts the occurrence anyway.
	OverlapAllow Overlap = "allow"
	// OverlapBufferOne keeps at most one occurrence waiting; it starts when the
	// previous run finishes. Further occurrences are skipped.
	OverlapBufferOne Overlap = "buffer_one"
)

// Misfire says what a recurring job does with an occurrence that fires later than the
// job's misfire threshold (after an outage, say).
type Misfire string

// Misfire policies.
const (
	// MisfireRunOnce fires one run now that stands for all missed occurrences. The default.
	MisfireRunOnce Misfire = "run_once"
	// MisfireSkip records the missed occurrences and schedules the next future one.
	MisfireSkip Misfire = "skip"
	// MisfireRunAll fires every missed occurrence, at most MaxRunAll of them.
	MisfireRunAll Misfire = "run_all"
)

// FieldError is a validation error that names the field at fault.
type FieldError struct {
	Field string // JSON-style path, e.g. "retry.max_attempts"
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Schedule says when a job fires. Exactly one of At, Delay, Now or Cron is set.
type Schedule struct {
	// At fires the job once at this time, from MinAt (2000) to before MaxAt (2200). A
	// time in the past fires at once; its lateness counts from At.
	At time.Time `json:"at,omitzero"`
	// Delay fires the job once this long after Redis accepted it, at most MaxDelay.
	Delay time.Duration `json:"delay,omitempty"`
	// Now fires the job once, at once.
	Now bool `json:"now,omitempty"`
	// Cron fires the job at every occurrence of a cron expression: 5 fields, 6 fields
	// with leading seconds, or an @hourly-style macro.
	Cron string `json:"cron,omitempty"`
	// TimeZone is the IANA zone of Cron ("" means UTC).
	TimeZone string `json:"timezone,omitempty"`
}

// IsRecurring reports whether the schedule is a cron schedule.
func (s Schedule) IsRecurring() bool { return s.Cron != "" }

// Validate checks that exactly one form is set, that a time or delay is in range (MinAt,
// MaxAt, MaxDelay) and that a cron expression and zone parse.
func (s Schedule) Validate() error {
	n := 0
	if !s.At.IsZero() {
		n++
		if s.At.Before(MinAt) || !s.At.Before(MaxAt) {
			return fieldErr("schedule.at", "must be from %s to before %s, got %s",
				MinAt.Format(time.RFC3339), MaxAt.Format(time.RFC3339), s.At.Format(time.RFC3339Nano))
		}
	}
	if s.Delay != 0 {
		n++
		if s.Delay < 0 {
			return fieldErr("schedule.delay", "must not be negative, got %s", s.Delay)
		}
		if s.Delay > MaxDelay {
			return fieldErr("schedule.delay", "must be at most %s (100 years), got %s", MaxDelay, s.Delay)
		}
	}
	if s.Now {
		n++
	}
	if s.Cron != "" {
		n++
		if _, err := cronLocation(s.TimeZone); err != nil {
			return fieldErr("schedule.timezone", "%v", err)
		}
		if _, err := ParseCron(s.Cron, s.TimeZone); err != nil {
			return fieldErr("schedule.cron", "%v", err)
		}
	} else if s.TimeZone != "" {
		return fieldErr("schedule.timezone", "only valid with a cron schedule")
	}
	switch {
	case n == 0:
		return fieldErr("schedule", "one of at, delay, now or cron is required")
	case n > 1:
		return fieldErr("schedule", "only one of at, delay, now or cron may be set")
	}
	return nil
}

// RetryPolicy says how often and how soon a failed run is retried.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts before the run goes to the dead-letter set
	// (1 means no retry). Default 25.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// InitialBackoff is the delay before the second attempt. Default 1s.
	InitialBackoff time.Duration `json:"initial_backoff,omitempty"`
	// MaxBackoff caps the delay. Default 1h.
	MaxBackoff time.Duration `json:"max_backoff,omitempty"`
	// Multiplier grows the delay after each attempt. Default 2.
	Multiplier float64 `json:"multiplier,omitempty"`
	// Jitter spreads each delay by ±Jitter of itself, 0 to 1. Default 0.2; a negative
	// value means none.
	Jitter float64 `json:"jitter,omitempty"`
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.InitialBackoff == 0 {
		p.InitialBackoff = time.Second
	}
	if p.MaxBackoff == 0 {
		p.MaxBackoff = time.Hour
	}
	if p.Multiplier == 0 {
		p.Multiplier = 2
	}
	if p.Jitter == 0 {
		p.Jitter = 0.2
	} else if p.Jitter < 0 {
		p.Jitter = 0
	}
	return p
}

func (p RetryPolicy) validate() error {
	switch {
	case p.MaxAttempts < 1 || p.MaxAttempts > MaxMaxAttempts:
		return fieldErr("retry.max_attempts", "must be 1 to %d, got %d", MaxMaxAttempts, p.MaxAttempts)
	case p.InitialBackoff < time.Millisecond || p.InitialBackoff > MaxDelay:
		return fieldErr("retry.initial_backoff", "must be 1ms to %s (100 years), got %s", MaxDelay, p.InitialBackoff)
	case p.MaxBackoff < p.InitialBackoff:
		return fieldErr("retry.max_backoff", "must be at least initial_backoff (%s), got %s", p.InitialBackoff, p.MaxBackoff)
	case p.MaxBackoff > MaxDelay:
		return fieldErr("retry.max_backoff", "must be at most %s (100 years), got %s", MaxDelay, p.MaxBackoff)
	case p.Multiplier < 1 || p.Multiplier > 100 || math.IsNaN(p.Multiplier):
		return fieldErr("retry.multiplier", "must be 1 to 100, got %v", p.Multiplier)
	case p.Jitter > 1 || math.IsNaN(p.Jitter):
		return fieldErr("retry.jitter", "must be 0 to 1, got %v", p.Jitter)
	}
	return nil
}

// Backoff returns the delay before attempt+1 after attempt (1-based) failed, with r in
// [0,1) choosing the jitter. The Lua fail path applies the same formula.
func (p RetryPolicy) Backoff(attempt int, r float64) time.Duration {
	d := float64(p.InitialBackoff) * math.Pow(p.Multiplier, float64(attempt-1))
	if d > float64(p.MaxBackoff) {
		d = float64(p.MaxBackoff)
	}
	d *= 1 + p.Jitter*(2*r-1)
	return time.Duration(d)
}

// Job is a job definition.
type Job struct {
	// ID identifies the job and is its idempotency key: creating a job whose id exists
	// returns the existing job. Empty means generate one. 1 to 128 of [A-Za-z0-9._~-].
	ID string `json:"id,omitempty"`
	// Queue is what workers subscribe to. Default "default", and DefaultPushQueue for a
	// job with a Target. 1 to 64 of [A-Za-z0-9._~-].
	Queue string `json:"queue,omitempty"`
	// Type names the handler inside the worker. Required unless Target is set, 1 to 128
	// bytes of text (see ValidateText). PushType is reserved for jobs with a Target.
	Type string `json:"type"`
	// Target, when set, makes the job a push job: tock's executor delivers its runs as
	// HTTP requests to it, and Type is PushType.
	Target *Target `json:"target,omitempty"`
	// Payload is handed to the handler unchanged (opaque bytes, may be empty).
	Payload []byte `json:"payload,omitempty"`
	// Schedule says when the job fires.
	Schedule Schedule `json:"schedule"`
	// Priority orders ready runs of a queue: 9 is most urgent, 0 least. Nil means 5.
	Priority *int `json:"priority,omitempty"`
	// Retry is the retry policy.
	Retry RetryPolicy `json:"retry,omitzero"`
	// Timeout bounds one attempt; the handler's context ends then. Default 30m.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Visibility is how long a claimed run stays invisible without a heartbeat before it
	// is handed to another worker. Default 30s, at least 1s. Workers heartbeat at a third of it.
	Visibility time.Duration `json:"visibility,omitempty"`
	// Overlap is the overlap policy of a recurring job. Default skip.
	Overlap Overlap `json:"overlap,omitempty"`
	// Misfire is the misfire policy of a recurring job. Default run_once.
	Misfire Misfire `json:"misfire,omitempty"`
	// MisfireAfter is the lateness beyond which an occurrence counts as misfired.
	// Default 60s.
	MisfireAfter time.Duration `json:"misfire_after,omitempty"`
}

// PriorityOrDefault returns the job's priority, or DefaultPriority when unset.
func (j *Job) PriorityOrDefault() int {
	if j.Priority == nil {
		return DefaultPriority
	}
	return *j.Priority
}

// Normalize fills defaults in place (generating an ID if empty) and validates the job
// against maxPayload bytes (0 means DefaultMaxPayload). The error is a *FieldError.
func (j *Job) Normalize(maxPayload int) error {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	if j.ID == "" {
		j.ID = NewID()
	}
	if j.Queue == "" {
		j.Queue = DefaultQueue
		if j.Target != nil {
			j.Queue = DefaultPushQueue
		}
	}
	if j.Priority == nil {
		p := DefaultPriority
		j.Priority = &p
	}
	j.Retry = j.Retry.withDefaults()
	if j.Timeout == 0 {
		j.Timeout = DefaultTimeout
	}
	if j.Visibility == 0 {
		j.Visibility = DefaultVisibility
	}
	defaultRecurring(&j.Overlap, &j.Misfire, &j.MisfireAfter)
	if err := ValidateID("id", j.ID, MaxIDLen); err != nil {
		return err
	}
	if err := ValidateID("queue", j.Queue, MaxQueueLen); err != nil {
		return err
	}
	if j.Target != nil {
		if j.Type != "" && j.Type != PushType {
			return fieldErr("type", "only one of type and target may be set")
		}
		j.Type = PushType
		if err := j.Target.normalize(); err != nil {
			return err
		}
	} else if j.Type == PushType {
		return fieldErr("type", "%q is reserved for jobs with a target", PushType)
	}
	if j.Type == "" {
		return fieldErr("type", "is required (or a target)")
	}
	if len(j.Type) > MaxTypeLen {
		return fieldErr("type", "longer than %d bytes", MaxTypeLen)
	}
	if err := ValidateText("type", j.Type); err != nil {
		return err
	}
	if len(j.Payload) > maxPayload {
		return &FieldError{Field: "payload", Msg: fmt.Sprintf("%d bytes is over the limit of %d bytes", len(j.Payload), maxPayload)}
	}
	if err := j.Schedule.Validate(); err != nil {
		return err
	}
	if p := *j.Priority; p < 0 || p > MaxPriority {
		return fieldErr("priority", "must be 0 to %d, got %d", MaxPriority, p)
	}
	if err := j.Retry.validate(); err != nil {
		return err
	}
	if j.Timeout < time.Millisecond {
		return fieldErr("timeout", "must be at least 1ms, got %s", j.Timeout)
	}
	if j.Visibility < MinVisibility {
		return fieldErr("visibility", "must be at least %s, got %s", MinVisibility, j.Visibility)
	}
	return validateRecurring(j.Overlap, j.Misfire, j.MisfireAfter)
}

// defaultRecurring fills the defaults of a recurring job's policies (a job's, or a
// scheduled workflow's for its instances).
func defaultRecurring(o *Overlap, m *Misfire, after *time.Duration) {
	if *o == "" {
		*o = OverlapSkip
	}
	if *m == "" {
		*m = MisfireRunOnce
	}
	if *after == 0 {
		*after = DefaultMisfireAfter
	}
}

// validateRecurring checks a recurring job's policies.
func validateRecurring(o Overlap, m Misfire, after time.Duration) error {
	switch o {
	case OverlapSkip, OverlapAllow, OverlapBufferOne:
	default:
		return fieldErr("overlap", "must be skip, allow or buffer_one, got %q", o)
	}
	switch m {
	case MisfireRunOnce, MisfireSkip, MisfireRunAll:
	default:
		return fieldErr("misfire", "must be run_once, skip or run_all, got %q", m)
	}
	if after < time.Millisecond {
		return fieldErr("misfire_after", "must be at least 1ms, got %s", after)
	}
	return nil
}

// ValidateID checks an identifier: 1 to max bytes of [A-Za-z0-9._~-], not "." or "..".
func ValidateID(field, id string, max int) error {
	if id == "" {
		return fieldErr(field, "must not be empty")
	}
	if len(id) > max {
		return fieldErr(field, "longer than %d bytes", max)
	}
	if isDotSegment(id) {
		return fieldErr(field, "%q is not allowed: a URL path cannot address it", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '~' || c == '-') {
			return fieldErr(field, "%q: character %q at %d is not one of A-Z a-z 0-9 . _ ~ -", id, c, i)
		}
	}
	return nil
}

var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// NewID returns a new random job id: 16 random bytes as 26 lower-case Crockford base32
// characters.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return idEncoding.EncodeToString(b[:])
}

// ErrNotRecurring is returned for operations that need a cron schedule.
var ErrNotRecurring = errors.New("job is not recurring")

// Run is one firing of a job as recorded in its history.
type Run struct {
	Due     time.Time `json:"due"`
	Start   time.Time `json:"start,omitzero"`
	End     time.Time `json:"end,omitzero"`
	Worker  string    `json:"worker,omitempty"`
	Attempt int       `json:"attempt"`
	Outcome Outcome   `json:"outcome"`
	Error   string    `json:"error,omitempty"`
	Missed  int       `json:"missed,omitempty"` // occurrences this entry stands for, when skipped or missed
	// Result is what the handler returned with a succeeded run (nil when none), kept
	// with the job for its retention.
	Result []byte `json:"result,omitempty"`
}

// Outcome is how a run attempt ended.
type Outcome string

// Outcomes recorded in a job's history.
const (
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"    // an attempt failed; a retry is scheduled
	OutcomeDead      Outcome = "dead"      // the last attempt failed; moved to the dead-letter set
	OutcomeCancelled Outcome = "cancelled" // the job was cancelled, or the handler returned worker.Cancel
	OutcomeSnoozed   Outcome = "snoozed"   // the handler asked to run later
	OutcomeLost      Outcome = "lost"      // the visibility deadline passed without a heartbeat
	OutcomeSkipped   Outcome = "skipped"   // overlap policy: a previous run was still active
	OutcomeMissed    Outcome = "missed"    // misfire policy: the occurrence was too late
)

// NodeSep joins a workflow id and a node id into the id of the node's job
// (NodeJobID). Ordinary job ids never contain it (ValidateID); the ids of workflows and
// of their nodes' jobs do (ValidateRef).
const NodeSep = '@'

// ValidateRef checks the id of an existing job, which may be a workflow node's
// (NodeJobID): 1 to max bytes of segments separated by '@', each as ValidateID wants it.
func ValidateRef(field, id string, max int) error {
	if len(id) > max {
		return fieldErr(field, "longer than %d bytes", max)
	}
	if strings.IndexByte(id, NodeSep) < 0 {
		return ValidateID(field, id, max)
	}
	for seg := range strings.SplitSeq(id, string(NodeSep)) {
		if seg == "" {
			return fieldErr(field, "%q: an empty part between '@'s", id)
		}
		if err := ValidateID(field, seg, max); err != nil {
			return fieldErr(field, "%q: %s", id, err.(*FieldError).Msg)
		}
	}
	return nil
}

// NodeJobID returns the id of the job of node `node` of workflow wf.
func NodeJobID(wf, node string) string { return wf + string(NodeSep) + node }

// SplitNodeJobID returns the workflow and node ids of a node's job id; ok is false for
// an ordinary job id.
func SplitNodeJobID(id string) (wf, node string, ok bool) {
	i := strings.LastIndexByte(id, NodeSep)
	if i < 0 {
		return "", "", false
	}
	return id[:i], id[i+1:], true
}
