package ingest_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/job"
)

// TestServer_IdempotencyKeysDisjoint: the id a single create derives from its
// Idempotency-Key and the ids a batch derives for its items never meet, whatever the
// keys: a single create with the key "K#0" is not item 0 of a batch with the key "K".
func TestServer_IdempotencyKeysDisjoint(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		tb := setup(t, b, ingest.Config{})
		const def = `{"type":"charge","payload":{"amount":5},"schedule":{"delay":"1h"}}`
		batch := func(key string, n int) []ingest.BatchResult {
			t.Helper()
			body := "["
			for i := range n {
				if i > 0 {
					body += ","
				}
				body += def
			}
			var br ingest.BatchReply
			r := tb.do("POST", "/v1/jobs:batch", []byte(body+"]"), "Idempotency-Key", key)
			r.requireStatus(t, 200)
			require.NoError(t, json.Unmarshal(r.body, &br))
			require.Zero(t, br.Failed, "%s", r.body)
			return br.Results
		}
		single := func(key string) (int, ingest.Job) {
			t.Helper()
			var j ingest.Job
			r := tb.do("POST", "/v1/jobs", []byte(def), "Idempotency-Key", key)
			require.NoError(t, json.Unmarshal(r.body, &j), "%s", r.body)
			return r.status, j
		}

		// The batch first, then a single create whose key is the batch's key and "#0".
		items := batch("order-7", 2)
		require.Equal(t, 201, items[0].Status)
		status, j := single("order-7#0")
		require.Equal(t, 201, status, "the single create returned the batch's job")
		require.NotEqual(t, items[0].Job.ID, j.ID)
		require.Equal(t, ingest.IdempotencyID("order-7#0"), j.ID)

		// The other way round.
		status, j = single("order-8#1")
		require.Equal(t, 201, status)
		items = batch("order-8", 2)
		require.Equal(t, 201, items[1].Status, "the batch item returned the single job")
		require.NotEqual(t, j.ID, items[1].Job.ID)

		// Each stays idempotent on its own.
		status, again := single("order-8#1")
		require.Equal(t, 200, status)
		require.Equal(t, j.ID, again.ID)
		retried := batch("order-8", 2)
		for i := range retried {
			require.Equal(t, 200, retried[i].Status)
			require.Equal(t, items[i].Job.ID, retried[i].Job.ID)
			require.Equal(t, ingest.BatchIdempotencyID("order-8", i), retried[i].Job.ID)
		}
	})
}

func TestBatchIdempotencyID(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, key := range []string{"", "k", "k#0", "k#1", "#", "0", "k#0#0", "a:b", "1:k"} {
		for i := range 12 {
			bid := ingest.BatchIdempotencyID(key, i)
			sid := ingest.IdempotencyID(key + "#" + strconv.Itoa(i))
			require.NotEqual(t, bid, sid)
			require.True(t, strings.HasPrefix(bid, "kb-"), bid)
			require.True(t, strings.HasPrefix(sid, "k-"), sid)
			require.NoError(t, job.ValidateID("id", bid, job.MaxIDLen))
			require.Equal(t, bid, ingest.BatchIdempotencyID(key, i))
			for _, id := range []string{bid, sid} {
				what := key + "/" + strconv.Itoa(i)
				if prev, ok := seen[id]; ok {
					require.Equal(t, prev, what, "two keys give %s", id)
				}
				seen[id] = what
			}
		}
	}
}
