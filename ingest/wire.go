package ingest

import (
	"encoding/json"
	"time"
)

// The JSON shapes of API version 1. Durations are Go duration strings ("90s", "1h30m");
// times are RFC 3339. They are shared by the server, the Go client (Client) and the CLI.

// Schedule is when a job fires: exactly one of At, Delay, Now or Cron.
type Schedule struct {
	At       string `json:"at,omitempty"`       // RFC 3339 time
	Delay    string `json:"delay,omitempty"`    // Go duration, from when the job is accepted
	Now      bool   `json:"now,omitempty"`      // fire at once
	Cron     string `json:"cron,omitempty"`     // 5 fields, 6 with leading seconds, or a @macro
	Timezone string `json:"timezone,omitempty"` // IANA zone of Cron; "" is UTC
}

// Retry is a job's retry policy; omitted fields take the defaults.
type Retry struct {
	MaxAttempts    int      `json:"max_attempts,omitempty"`
	InitialBackoff string   `json:"initial_backoff,omitempty"`
	MaxBackoff     string   `json:"max_backoff,omitempty"`
	Multiplier     *float64 `json:"multiplier,omitempty"`
	Jitter         *float64 `json:"jitter,omitempty"` // 0 to 1; a negative value means none
}

// Target is a push job's HTTP target: its runs are delivered by the push executor as
// requests to URL with the payload as the body. Method defaults to POST, Timeout (a Go
// duration, 100ms to 1h) to 30s.
type Target struct {
	URL     string            `json:"url"`
	Method  string            `json:"method,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Timeout string            `json:"timeout,omitempty"`
}

// JobRequest is the body of POST /v1/jobs and one item of POST /v1/jobs:batch. Payload
// holds any JSON value, stored as its bytes; PayloadBase64 holds arbitrary bytes. At most
// one of them may be set.
type JobRequest struct {
	ID            string          `json:"id,omitempty"`
	Queue         string          `json:"queue,omitempty"`
	Type          string          `json:"type,omitempty"`
	Target        *Target         `json:"target,omitempty"` // instead of Type: a push job
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 string          `json:"payload_base64,omitempty"`
	Schedule      Schedule        `json:"schedule"`
	Priority      *int            `json:"priority,omitempty"`
	Retry         *Retry          `json:"retry,omitempty"`
	Timeout       string          `json:"timeout,omitempty"`
	Visibility    string          `json:"visibility,omitempty"`
	Overlap       string          `json:"overlap,omitempty"`
	Misfire       string          `json:"misfire,omitempty"`
	MisfireAfter  string          `json:"misfire_after,omitempty"`
}

// JobPatch is the body of PATCH /v1/jobs/{id}: the fields present are changed.
type JobPatch struct {
	Schedule      *Schedule       `json:"schedule,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 *string         `json:"payload_base64,omitempty"`
	Priority      *int            `json:"priority,omitempty"`
	Retry         *Retry          `json:"retry,omitempty"`
}

// Job is a job as the API returns it. The payload comes back in Payload when its bytes
// are valid JSON, in PayloadBase64 otherwise.
type Job struct {
	ID            string          `json:"id"`
	Queue         string          `json:"queue"`
	Type          string          `json:"type"` // "@push" for a job with a target
	Target        *Target         `json:"target,omitempty"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 string          `json:"payload_base64,omitempty"`
	Schedule      Schedule        `json:"schedule"`
	Priority      int             `json:"priority"`
	Retry         Retry           `json:"retry"`
	Timeout       string          `json:"timeout"`
	Visibility    string          `json:"visibility"`
	Overlap       string          `json:"overlap,omitempty"`
	Misfire       string          `json:"misfire,omitempty"`
	MisfireAfter  string          `json:"misfire_after,omitempty"`
	Shard         int             `json:"shard"`
	State         string          `json:"state"`
	NextRunAt     *time.Time      `json:"next_run_at,omitempty"`
	RetryAt       *time.Time      `json:"retry_at,omitempty"` // when the earliest run waiting for a retry is due again
	CreatedAt     *time.Time      `json:"created_at,omitempty"`
	ActiveRuns    int             `json:"active_runs"`
	ExpiresAt     *time.Time      `json:"expires_at,omitempty"`
}

// BatchResult is one item of the reply of POST /v1/jobs:batch, in request order: Status
// is the HTTP status the item would have had alone (201, 200, 409, 400...), with Job
// or Error. Job leaves the payload out (the client sent it).
type BatchResult struct {
	Status int    `json:"status"`
	Job    *Job   `json:"job,omitempty"`
	Error  *Error `json:"error,omitempty"`
}

// BatchReply is the reply of POST /v1/jobs:batch.
type BatchReply struct {
	Results  []BatchResult `json:"results"`
	Created  int           `json:"created"`
	Existing int           `json:"existing"`
	Failed   int           `json:"failed"`
}

// JobList is the reply of GET /v1/jobs. A page holds about limit jobs: a few more when
// the last scan batch overshoots it (a batch is never split), fewer, even none, when the
// page's bounded scan found fewer; the listing is complete when NextCursor is empty.
type JobList struct {
	Jobs       []Job  `json:"jobs"`
	NextCursor string `json:"next_cursor,omitempty"`
	// Progress says how much of the namespace the listing has searched, with this page.
	Progress *Progress `json:"progress,omitempty"`
}

// Run is one entry of a job's history (GET /v1/jobs/{id}/runs), newest first.
type Run struct {
	Due     time.Time  `json:"due"`
	Start   *time.Time `json:"start,omitempty"`
	End     *time.Time `json:"end,omitempty"`
	Worker  string     `json:"worker,omitempty"`
	Attempt int        `json:"attempt"`
	Outcome string     `json:"outcome"`
	Error   string     `json:"error,omitempty"`
	Missed  int        `json:"missed,omitempty"`
	// Result is what the handler returned with a succeeded run, when its bytes are
	// JSON; ResultBase64 holds any other result.
	Result       json.RawMessage `json:"result,omitempty"`
	ResultBase64 string          `json:"result_base64,omitempty"`
}

// RunList is the reply of GET /v1/jobs/{id}/runs.
type RunList struct {
	Runs []Run `json:"runs"`
}

// DeadRun is an entry of the dead-letter set. Run ("<job id>:<due ms>") names it in
// /v1/dead/{run}.
type DeadRun struct {
	Run      string    `json:"run"`
	JobID    string    `json:"job_id"`
	Queue    string    `json:"queue"`
	Type     string    `json:"type"`
	Due      time.Time `json:"due"`
	DiedAt   time.Time `json:"died_at"`
	Attempts int       `json:"attempts"`
	Error    string    `json:"error,omitempty"`
	Shard    int       `json:"shard"`
}

// DeadList is the reply of GET /v1/dead.
type DeadList struct {
	Dead       []DeadRun `json:"dead"`
	NextCursor string    `json:"next_cursor,omitempty"`
}

// Queue is one queue's figures in GET /v1/queues.
type Queue struct {
	Name      string  `json:"name"`
	Paused    bool    `json:"paused"`
	Scheduled int64   `json:"scheduled"`
	Ready     int64   `json:"ready"`
	InFlight  int64   `json:"in_flight"`
	Dead      int64   `json:"dead"`
	Fired     int64   `json:"fired_total"`
	FireRate  float64 `json:"fire_rate"` // runs fired per second, over the last sampling interval
}

// QueueList is the reply of GET /v1/queues.
type QueueList struct {
	Queues []Queue `json:"queues"`
}

// Breaker is the circuit breaker of one push target host in GET /v1/breakers: State is
// closed, open or half_open. Failures is the run of consecutive failures, Attempts and
// WindowFailures the current ratio window's counts (closed breakers).
type Breaker struct {
	Host           string     `json:"host"`
	State          string     `json:"state"`
	Failures       int        `json:"failures"`
	Attempts       int        `json:"attempts"`
	WindowFailures int        `json:"window_failures"`
	OpenedAt       *time.Time `json:"opened_at,omitempty"`
	ChangedAt      *time.Time `json:"changed_at,omitempty"`
	Transitions    int64      `json:"transitions"`
}

// BreakerList is the reply of GET /v1/breakers: the hosts that failed a delivery in
// the last week, the most recent first.
type BreakerList struct {
	Breakers []Breaker `json:"breakers"`
}

// StateReply is the reply of the job actions (:pause, :resume, :delete, DELETE), the dead
// runs' actions and the queue actions. After :delete, State is "deleted".
type StateReply struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Changed bool   `json:"changed"`
}

// TriggerReply is the reply of POST /v1/jobs/{id}:trigger.
type TriggerReply struct {
	ID  string `json:"id"`
	Run string `json:"run"`
}

// Error is the body of every error reply: {"error": {...}}.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// ErrorReply wraps Error as the API sends it.
type ErrorReply struct {
	Error Error `json:"error"`
}

// Error codes and the statuses they go with.
const (
	CodeInvalid         = "invalid_argument"    // 400
	CodeUnauthenticated = "unauthenticated"     // 401
	CodeForbidden       = "permission_denied"   // 403
	CodeNotFound        = "not_found"           // 404
	CodeMethod          = "method_not_allowed"  // 405
	CodeConflict        = "conflict"            // 409
	CodeState           = "failed_precondition" // 409: the job's state does not allow it
	CodeTooLarge        = "payload_too_large"   // 413
	CodeUnsupported     = "unsupported_media"   // 415
	CodeOverloaded      = "resource_exhausted"  // 429
	CodeInternal        = "internal"            // 500
	CodeUnavailable     = "unavailable"         // 503
	// CodeNotReplicated: the change was made on the Redis primary, but fewer replicas than
	// --durability replicas:N asks for confirmed it in time; retrying is safe.
	CodeNotReplicated = "not_replicated" // 503
)
