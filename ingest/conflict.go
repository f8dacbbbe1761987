package ingest

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/tockhq/tock/job"
)

// maxConflictLookups bounds the stored jobs one request reads to name what differs in
// its conflicts; the others get the general message.
const maxConflictLookups = 100

// conflictError is the 409 of a create whose id is taken by another definition. It
// reads the stored job (lookups counts the reads of the request) and names the fields
// that differ, in the order of JobRequest: `job "x" exists with a different payload and
// schedule`. j is the job as the store normalised it.
func (s *Server) conflictError(ctx context.Context, j *job.Job, lookups *int) *apiError {
	what := "definition"
	if *lookups < maxConflictLookups {
		*lookups++
		rc, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RedisTimeout)
		info, err := s.store.Get(rc, j.ID)
		cancel()
		if err == nil {
			if fs := differingFields(j, &info.Job); len(fs) > 0 {
				what = joinAnd(fs)
			}
		}
	}
	return &apiError{status: 409, code: CodeConflict, field: "id",
		msg: jobWhat(j.ID) + " exists with a different " + what}
}

// differingFields names the fields of the definitions a and b (both normalised) that
// differ, by their JSON names. Times and durations count to the millisecond, as stored.
func differingFields(a, b *job.Job) []string {
	var out []string
	add := func(field string, same bool) {
		if !same {
			out = append(out, field)
		}
	}
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	ra, rb := a.Retry, b.Retry
	add("queue", a.Queue == b.Queue)
	add("type", a.Type == b.Type)
	add("payload", bytes.Equal(a.Payload, b.Payload))
	add("schedule", scheduleKey(a.Schedule) == scheduleKey(b.Schedule))
	add("priority", a.PriorityOrDefault() == b.PriorityOrDefault())
	add("retry", ra.MaxAttempts == rb.MaxAttempts && ms(ra.InitialBackoff) == ms(rb.InitialBackoff) &&
		ms(ra.MaxBackoff) == ms(rb.MaxBackoff) && ra.Multiplier == rb.Multiplier &&
		max(ra.Jitter, 0) == max(rb.Jitter, 0)) // a negative jitter and 0 both mean none
	add("timeout", ms(a.Timeout) == ms(b.Timeout))
	add("visibility", ms(a.Visibility) == ms(b.Visibility))
	if a.Schedule.IsRecurring() && b.Schedule.IsRecurring() {
		add("overlap", a.Overlap == b.Overlap)
		add("misfire", a.Misfire == b.Misfire)
		add("misfire_after", ms(a.MisfireAfter) == ms(b.MisfireAfter))
	}
	return out
}

// scheduleKey is a schedule as the store compares it.
func scheduleKey(s job.Schedule) string {
	switch {
	case s.IsRecurring():
		return "cron " + s.Cron + " " + s.TimeZone
	case !s.At.IsZero():
		return "at " + strconv.FormatInt(s.At.UnixMilli(), 10)
	case s.Delay > 0:
		return "delay " + strconv.FormatInt(s.Delay.Milliseconds(), 10)
	}
	return "now"
}

// joinAnd joins words as "a", "a and b", "a, b and c".
func joinAnd(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}
