package ingest_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
)

// TestServer_ConflictNamesFields: a create whose id is taken by another definition gets a
// 409 that says which fields differ.
func TestServer_ConflictNamesFields(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		tb := setup(t, b, ingest.Config{})
		// The README's curl create.
		const first = `{"id": "welcome-42", "type": "email.welcome", "payload": {"user": 42},
			"schedule": {"delay": "90s"}, "retry": {"max_attempts": 5}}`
		tb.do("POST", "/v1/jobs", []byte(first)).requireStatus(t, 201)
		const cron = `{"id":"daily","type":"report","schedule":{"cron":"0 9 * * *","timezone":"Europe/London"},"overlap":"skip"}`
		tb.do("POST", "/v1/jobs", []byte(cron)).requireStatus(t, 201)

		for _, tc := range []struct {
			name, from, to, body, want string
		}{
			{"Payload", `{"user": 42}`, `{"user": 43}`, first, `job "welcome-42" exists with a different payload`},
			{"PayloadAndSchedule", `{"user": 42},
			"schedule": {"delay": "90s"}`, `{"user": 43},
			"schedule": {"delay": "2m"}`, first, `job "welcome-42" exists with a different payload and schedule`},
			{"Queue", `"type"`, `"queue": "mail", "type"`, first, `a different queue`},
			{"Type", `email.welcome`, `email.bye`, first, `a different type`},
			{"ScheduleKind", `{"delay": "90s"}`, `{"now": true}`, first, `a different schedule`},
			{"Priority", `"type"`, `"priority": 9, "type"`, first, `a different priority`},
			{"Retry", `"max_attempts": 5`, `"max_attempts": 6`, first, `a different retry`},
			{"RetryDefault", `, "retry": {"max_attempts": 5}`, ``, first, `a different retry`},
			{"Timeout", `"type"`, `"timeout": "1m", "type"`, first, `a different timeout`},
			{"Visibility", `"type"`, `"visibility": "1m", "type"`, first, `a different visibility`},
			{"QueueTypePriority", `"type": "email.welcome"`, `"queue": "q", "type": "x", "priority": 1`, first, `a different queue, type and priority`},
			{"Timezone", `Europe/London`, `Europe/Paris`, cron, `job "daily" exists with a different schedule`},
			{"Overlap", `"skip"`, `"allow"`, cron, `a different overlap`},
			{"Misfire", `"overlap"`, `"misfire": "skip", "overlap"`, cron, `a different misfire`},
			{"MisfireAfter", `"overlap"`, `"misfire_after": "5m", "overlap"`, cron, `a different misfire_after`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				body := strings.Replace(tc.body, tc.from, tc.to, 1)
				require.NotEqual(t, tc.body, body)
				e := tb.do("POST", "/v1/jobs", []byte(body)).requireError(t, 409, ingest.CodeConflict, "id")
				require.Contains(t, e.Message, tc.want)

				// A batch item says the same.
				var item map[string]any
				require.NoError(t, json.Unmarshal([]byte(body), &item))
				var br ingest.BatchReply
				tb.doJSON("POST", "/v1/jobs:batch", []any{item}, &br).requireStatus(t, 200)
				require.Equal(t, 1, br.Failed)
				require.Equal(t, 409, br.Results[0].Status)
				require.Contains(t, br.Results[0].Error.Message, tc.want)
			})
		}
		// The same definition, spelled otherwise, is no conflict.
		tb.do("POST", "/v1/jobs", []byte(`{"id":"welcome-42","type":"email.welcome","payload":{"user":42},"schedule":{"delay":"1m30s"},
			"retry":{"max_attempts":5,"initial_backoff":"1s"},"priority":5,"queue":"default"}`)).requireStatus(t, 200)

		// The Go client (the CLI) shows the message.
		c := tb.client("")
		_, _, err := c.CreateJob(t.Context(), ingest.JobRequest{ID: "welcome-42", Type: "email.welcome",
			Payload: json.RawMessage(`{"user":7}`), Schedule: ingest.Schedule{Delay: "90s"}, Retry: &ingest.Retry{MaxAttempts: 5}}, "")
		require.ErrorContains(t, err, `job "welcome-42" exists with a different payload`)
	})
}
