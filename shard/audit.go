package shard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/tockhq/tock/job"
)

// DefaultAuditMax is how many audit entries are kept by default: the oldest are trimmed
// as new ones are added.
const DefaultAuditMax = 10000

// MaxAuditPage bounds the entries of one ReadAudit call.
const MaxAuditPage = 1000

// AuditEntry is one management action of the audit log.
type AuditEntry struct {
	// ID is the entry's stream id ("<ms>-<seq>"): the cursor of the next older page.
	ID string
	// Time is when the action was recorded, on the Redis clock (the id's milliseconds).
	Time time.Time
	// Who acted: "token:<first 12 hex digits of the token's SHA-256>" (never the token),
	// "anonymous" when the server has no tokens.
	Who string
	// Via is "api" (a bearer token) or "ui" (a dashboard session).
	Via string
	// Action is what was done: "job.pause", "dead.requeue", "jobs.bulk", "login"...
	Action string
	// Target is what it was done to: a job id, a run, a queue, a bulk action's ids or
	// filter.
	Target string
	// Result is the outcome: "ok", or the HTTP status and error code ("404 not_found").
	Result string
	// Remote is the client's address.
	Remote string
}

// maxAuditField bounds each recorded field, in bytes.
const maxAuditField = 512

func clip(s string) string {
	if len(s) <= maxAuditField {
		return s
	}
	return strings.ToValidUTF8(s[:maxAuditField], "") + "…"
}

// Audit appends e to the audit log (its ID and Time are set by Redis) and trims the log
// to its newest max entries (max <= 0: DefaultAuditMax). One XADD with an exact MAXLEN:
// one key, so it works on Redis Cluster.
func (s *Store) Audit(ctx context.Context, e AuditEntry, max int) error {
	if max <= 0 {
		max = DefaultAuditMax
	}
	cmd := s.c.B().Xadd().Key(s.keys.Audit()).Maxlen().Threshold(strconv.Itoa(max)).Id("*").FieldValue().
		FieldValue("who", clip(e.Who)).FieldValue("via", clip(e.Via)).FieldValue("action", clip(e.Action)).
		FieldValue("target", clip(e.Target)).FieldValue("result", clip(e.Result)).FieldValue("remote", clip(e.Remote)).Build()
	if err := s.c.Do(ctx, cmd).Error(); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// ReadAudit returns up to limit entries of the audit log, newest first, older than
// cursor (an entry's ID; "" from the newest), and the cursor of the next page ("" at the
// end).
func (s *Store) ReadAudit(ctx context.Context, cursor string, limit int) ([]AuditEntry, string, error) {
	if limit <= 0 || limit > MaxAuditPage {
		return nil, "", fmt.Errorf("audit: limit %d: want 1 to %d", limit, MaxAuditPage)
	}
	end := "+"
	skip := ""
	if cursor != "" {
		if _, _, ok := parseStreamID(cursor); !ok {
			return nil, "", &job.FieldError{Field: "cursor", Msg: "not an audit cursor: " + strconv.Quote(cursor)}
		}
		end, skip = cursor, cursor // inclusive: the cursor's own entry is dropped
	}
	rs, err := s.c.Do(ctx, s.c.B().Xrevrange().Key(s.keys.Audit()).End(end).Start("-").Count(int64(limit+2)).Build()).AsXRange()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, "", fmt.Errorf("read audit: %w", err)
	}
	out := make([]AuditEntry, 0, min(len(rs), limit))
	next := ""
	for _, r := range rs {
		if r.ID == skip {
			continue
		}
		if len(out) == limit {
			next = out[len(out)-1].ID
			break
		}
		ms, _, _ := parseStreamID(r.ID)
		f := r.FieldValues
		out = append(out, AuditEntry{ID: r.ID, Time: time.UnixMilli(ms).UTC(), Who: f["who"], Via: f["via"], Action: f["action"],
			Target: f["target"], Result: f["result"], Remote: f["remote"]})
	}
	return out, next, nil
}

// AuditLen returns the number of entries in the audit log.
func (s *Store) AuditLen(ctx context.Context) (int64, error) {
	return s.c.Do(ctx, s.c.B().Xlen().Key(s.keys.Audit()).Build()).AsInt64()
}

func parseStreamID(id string) (ms, seq int64, ok bool) {
	a, b, found := strings.Cut(id, "-")
	if !found {
		return 0, 0, false
	}
	ms, err1 := strconv.ParseInt(a, 10, 64)
	seq, err2 := strconv.ParseInt(b, 10, 64)
	return ms, seq, err1 == nil && err2 == nil && ms >= 0 && seq >= 0
}
