package ingest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
)

// Every management action through the API is in the audit log, with who (a hash prefix
// of the token, never the token), what, its result, when and from where; the log is
// read with a write token, in pages, and keeps only its newest AuditMax entries.
func TestServer_AuditLog(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		const readSecret, writeSecret = "audit-reader-secret", "audit-writer-secret"
		tb := setup(t, b, ingest.Config{AuditMax: 12,
			Tokens: []ingest.Token{{Secret: readSecret, Scope: ingest.ScopeRead}, {Secret: writeSecret, Scope: ingest.ScopeWrite}}})
		w, r := "Authorization", "Bearer "+writeSecret
		start := time.Now()
		for _, id := range []string{"a", "b", "c"} {
			tb.do("POST", "/v1/jobs", []byte(`{"id":"`+id+`","queue":"mail","type":"t","schedule":{"delay":"1h"}}`), w, r).requireStatus(t, 201)
		}
		tb.do("POST", "/v1/jobs/a:pause", nil, w, r).requireStatus(t, 200)
		tb.do("POST", "/v1/jobs/a:resume", nil, w, r).requireStatus(t, 200)
		tb.do("POST", "/v1/jobs/a:trigger", nil, w, r).requireStatus(t, 200)
		tb.do("PATCH", "/v1/jobs/b", []byte(`{"priority":7}`), w, r).requireStatus(t, 200)
		tb.do("DELETE", "/v1/jobs/b", nil, w, r).requireStatus(t, 200)
		tb.do("POST", "/v1/jobs/c:delete", nil, w, r).requireStatus(t, 200)
		tb.do("POST", "/v1/dead/nope:1:requeue", nil, w, r).requireError(t, 404, ingest.CodeNotFound, "")
		tb.do("DELETE", "/v1/dead/nope:1", nil, w, r).requireError(t, 404, ingest.CodeNotFound, "")
		tb.do("POST", "/v1/queues/mail:pause", nil, w, r).requireStatus(t, 200)
		tb.do("POST", "/v1/queues/mail:resume", nil, w, r).requireStatus(t, 200)
		tb.do("POST", "/v1/jobs:bulk", []byte(`{"action":"pause","ids":["a","zz"]}`), w, r).requireStatus(t, 200)
		tb.do("POST", "/v1/dead:bulk", []byte(`{"action":"delete","filter":{"queue":"mail"}}`), w, r).requireStatus(t, 200)
		// A refused action is recorded too, with who tried.
		tb.do("POST", "/v1/jobs/a:pause", nil, w, "Bearer "+readSecret).requireError(t, 403, ingest.CodeForbidden, "")

		// Read with a write token only: it names the operators and their addresses.
		tb.do("GET", "/v1/audit", nil, w, "Bearer "+readSecret).requireError(t, 403, ingest.CodeForbidden, "")
		tb.do("GET", "/v1/audit", nil).requireError(t, 401, ingest.CodeUnauthenticated, "")
		tb.do("GET", "/v1/audit?limit=0", nil, w, r).requireError(t, 400, ingest.CodeInvalid, "limit")
		tb.do("GET", "/v1/audit?cursor=x", nil, w, r).requireError(t, 400, ingest.CodeInvalid, "cursor")

		c := tb.client(writeSecret)
		var all []ingest.AuditEntry
		cursor := ""
		for {
			p, err := c.Audit(t.Context(), 5, cursor)
			require.NoError(t, err)
			require.LessOrEqual(t, len(p.Entries), 5)
			all = append(all, p.Entries...)
			if cursor = p.NextCursor; cursor == "" {
				break
			}
		}
		// 12 actions made with the write token: the log holds them all (AuditMax 12), not
		// the older ones; the read token's refused pause is not recorded (refused before
		// it was served: authorization is not an action).
		require.Len(t, all, 12, "bounded to AuditMax")
		n, err := tb.store.AuditLen(t.Context())
		require.NoError(t, err)
		require.Equal(t, int64(12), n)
		var got []string
		for _, e := range all {
			got = append(got, e.Action+" "+e.Target+" → "+e.Result)
			require.Equal(t, ingest.TokenWho(writeSecret), e.Who)
			require.Equal(t, "api", e.Via)
			require.NotEmpty(t, e.Remote)
			require.WithinDuration(t, start, e.Time, time.Minute)
		}
		require.Equal(t, []string{
			"dead.bulk delete filter: queue=mail → ok: 0 matched, 0 changed, 0 failed",
			"jobs.bulk pause ids: a, zz → ok: 2 matched, 1 changed, 1 failed",
			"queue.resume mail → ok",
			"queue.pause mail → ok",
			"dead.delete nope:1 → 404 not_found",
			"dead.requeue nope:1 → 404 not_found",
			"job.delete c → ok",
			"job.cancel b → ok",
			"job.update b → ok",
			"job.trigger a → ok",
			"job.resume a → ok",
			"job.pause a → ok",
		}, got, "newest first; creates are not recorded")
		require.True(t, strings.HasPrefix(all[0].Who, "token:"))
		for i := 1; i < len(all); i++ {
			require.False(t, all[i].Time.After(all[i-1].Time), "newest first")
		}

		// No secret reaches Redis' copy of the log.
		raw, err := tb.rc.Do(t.Context(), tb.rc.B().Xrange().Key(tb.store.Keys().Audit()).Start("-").End("+").Build()).ToAny()
		require.NoError(t, err)
		dump := strings.ToLower(fmt.Sprint(raw))
		require.NotContains(t, dump, "secret")
		require.Contains(t, dump, "job.pause")
	})
}

// Without tokens, actions are recorded as anonymous.
func TestServer_AuditLogAnonymous(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{})
	tb.do("POST", "/v1/jobs", []byte(`{"id":"a","type":"t","schedule":{"delay":"1h"}}`)).requireStatus(t, 201)
	tb.do("POST", "/v1/jobs/a:pause", nil).requireStatus(t, 200)
	p, err := tb.client("").Audit(t.Context(), 0, "")
	require.NoError(t, err)
	require.Len(t, p.Entries, 1)
	require.Equal(t, ingest.Anonymous, p.Entries[0].Who)
	require.Equal(t, "job.pause", p.Entries[0].Action)
	require.Empty(t, p.NextCursor)
}

// A malformed request is not an action: nothing is recorded.
func TestServer_AuditLogSkipsMalformed(t *testing.T) {
	t.Parallel()
	tb := setupMini(t, ingest.Config{})
	tb.do("PATCH", "/v1/jobs/x", []byte(`{}`), "Content-Type", "application/xml").requireError(t, 415, ingest.CodeUnsupported, "")
	tb.do("PATCH", "/v1/jobs/x", []byte(`{"priority":"high"}`)).requireError(t, 400, ingest.CodeInvalid, "priority")
	tb.do("POST", "/v1/jobs:bulk", []byte(`{"action":"explode","ids":["x"]}`)).requireStatus(t, 400)
	n, err := tb.store.AuditLen(t.Context())
	require.NoError(t, err)
	require.Zero(t, n)
}
