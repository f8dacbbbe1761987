package ingest_test

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
)

// TestServer_RefusesControlAndBidiCharacters: a job's type and queue are printed by the
// CLI; control characters (C0, DEL, C1 such as U+009B, a terminal's CSI) and bidi
// formatting characters would rewrite what the terminal shows.
func TestServer_RefusesControlAndBidiCharacters(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		tb := setup(t, b, ingest.Config{})
		bad := []string{
			"\x1b[31mred", "a\tb", "a\nb", "\x7f", "\u0080", "\u0085", "a\u009b31m", "\u009f",
			"\u061c", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "evil\u202etxt.exe",
			"\u2066", "\u2067", "\u2068", "\u2069", "\u2028", "\u2029",
		}
		for _, s := range bad {
			t.Run(strconv.QuoteToASCII(s), func(t *testing.T) {
				q, err := json.Marshal(s)
				require.NoError(t, err)
				tb.do("POST", "/v1/jobs", []byte(`{"type":`+string(q)+`,"schedule":{"now":true}}`)).
					requireError(t, 400, ingest.CodeInvalid, "type")
				tb.do("POST", "/v1/jobs", []byte(`{"type":"t","queue":`+string(q)+`,"schedule":{"now":true}}`)).
					requireError(t, 400, ingest.CodeInvalid, "queue")
				var br ingest.BatchReply
				tb.doJSON("POST", "/v1/jobs:batch", []any{
					map[string]any{"type": s, "schedule": map[string]any{"now": true}},
					map[string]any{"type": "t", "queue": s, "schedule": map[string]any{"now": true}},
				}, &br).requireStatus(t, 200)
				require.Equal(t, 2, br.Failed)
				require.Equal(t, "type", br.Results[0].Error.Field)
				require.Equal(t, "queue", br.Results[1].Error.Field)
			})
		}
		// Printable text of any script is a type.
		for i, s := range []string{"email.welcome", "Rechnung versenden", "日本語のジョブ", "émoji 🎉", "a/b:c"} {
			q, err := json.Marshal(s)
			require.NoError(t, err)
			id := "ok-" + strconv.Itoa(i)
			tb.do("POST", "/v1/jobs", []byte(`{"id":"`+id+`","type":`+string(q)+`,"schedule":{"delay":"1h"}}`)).requireStatus(t, 201)
			var j ingest.Job
			tb.doJSON("GET", "/v1/jobs/"+id, nil, &j).requireStatus(t, 200)
			require.Equal(t, s, j.Type)
		}
	})
}
