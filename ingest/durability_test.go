package ingest_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/shard"
)

// Miniredis answers WAIT with 0, as a primary whose replicas do not answer: every change
// is made but not confirmed, and the API says so with 503 not_replicated.
func TestServer_NotReplicated(t *testing.T) {
	t.Parallel()
	tb := setupMiniStore(t, shard.Config{Durability: shard.Durability{Replicas: 1, Timeout: 10 * time.Millisecond}}, ingest.Config{})
	body := []byte(`{"id":"j1","type":"t","schedule":{"delay":"1h"}}`)
	e := tb.do("POST", "/v1/jobs", body).requireError(t, 503, ingest.CodeNotReplicated, "")
	require.Equal(t, `job "j1": the change was made on the Redis primary, but only 0 of the 1 replicas asked for `+
		`confirmed it within 10ms; it may be lost if the primary fails now. Retrying is safe (a create with the same job id)`, e.Message)
	// It was made: the job is there, and a retry is not confirmed either.
	tb.do("GET", "/v1/jobs/j1", nil).requireStatus(t, 200)
	tb.do("POST", "/v1/jobs", body).requireError(t, 503, ingest.CodeNotReplicated, "")
	tb.do("POST", "/v1/jobs/j1:pause", nil).requireError(t, 503, ingest.CodeNotReplicated, "")
	tb.do("DELETE", "/v1/jobs/j1", nil).requireError(t, 503, ingest.CodeNotReplicated, "")
	tb.do("POST", "/v1/queues/mail:pause", nil).requireError(t, 503, ingest.CodeNotReplicated, "")

	// A batch answers per item, and names generated ids.
	var br ingest.BatchReply
	r := tb.doJSON("POST", "/v1/jobs:batch", []map[string]any{
		{"id": "b1", "type": "t", "schedule": map[string]any{"now": true}},
		{"type": "t", "schedule": map[string]any{"now": true}},
		{"type": "", "schedule": map[string]any{"now": true}},
	}, &br)
	require.Equal(t, 200, r.status, "body: %s", r.body)
	require.Equal(t, 3, br.Failed)
	for i, res := range br.Results[:2] {
		require.Equal(t, 503, res.Status, i)
		require.Equal(t, ingest.CodeNotReplicated, res.Error.Code, i)
		require.Contains(t, res.Error.Message, `job "`, i)
	}
	require.Contains(t, br.Results[0].Error.Message, `job "b1"`)
	require.Equal(t, 400, br.Results[2].Status)
}

func TestServer_Replicas(t *testing.T) {
	t.Parallel()
	rs := redistest.StartReplicaSet(t, 1)
	b := rs.Backend()
	serveWith := func(d shard.Durability) *bundle {
		rc := b.Client(t)
		st, ns := openStore(t, b, rc, shard.Config{Durability: d})
		return serve(t, b, rc, ns, ingest.Config{Store: st})
	}
	one := serveWith(shard.Durability{Replicas: 1, Timeout: time.Minute})
	one.do("POST", "/v1/jobs", []byte(`{"id":"j1","type":"t","schedule":{"delay":"1h"}}`)).requireStatus(t, 201)
	one.do("POST", "/v1/jobs/j1:pause", nil).requireStatus(t, 200)
	var br ingest.BatchReply
	one.doJSON("POST", "/v1/jobs:batch", []map[string]any{
		{"id": "b1", "type": "t", "schedule": map[string]any{"now": true}},
		{"id": "b2", "type": "t", "schedule": map[string]any{"delay": "1h"}},
	}, &br).requireStatus(t, 200)
	require.Equal(t, 2, br.Created, "%+v", br)

	two := serveWith(shard.Durability{Replicas: 2, Timeout: time.Second})
	e := two.do("POST", "/v1/jobs", []byte(`{"id":"j2","type":"t","schedule":{"delay":"1h"}}`)).
		requireError(t, 503, ingest.CodeNotReplicated, "")
	require.Contains(t, e.Message, "only 1 of the 2 replicas")
	r := two.do("GET", "/v1/jobs/j2", nil)
	r.requireStatus(t, 200)
	var j ingest.Job
	require.NoError(t, json.Unmarshal(r.body, &j))
	require.Equal(t, "j2", j.ID)
}
