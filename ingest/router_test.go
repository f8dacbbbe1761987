package ingest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/shard"
)

// TestOpenAPI_MatchesRouter checks the OpenAPI document against the router, both ways:
// every path and method of the document is served, and every route is documented.
func TestOpenAPI_MatchesRouter(t *testing.T) {
	t.Parallel()
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(openAPIDoc, &doc))
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."), doc.OpenAPI)

	documented := map[string][]string{}
	for path, item := range doc.Paths {
		for k := range item {
			switch k {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				documented[path] = append(documented[path], strings.ToUpper(k))
			}
		}
		slices.Sort(documented[path])
	}
	s := &Server{}
	s.routes = s.buildRoutes()
	served := s.routeTable()
	for _, ms := range served {
		slices.Sort(ms)
	}
	require.Equal(t, served, documented)

	// The documented paths, with their parameters filled in, reach those routes.
	fill := strings.NewReplacer("{id}", "job-1.a_b~c", "{run}", "job-1:1700000000000", "{queue}", "mail")
	for path := range doc.Paths {
		r, p := match(fill.Replace(path))
		require.GreaterOrEqual(t, r, 0, path)
		require.Equal(t, path, patterns[r])
		if strings.Contains(path, "{") {
			require.NotEmpty(t, p, path)
		}
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path    string
		pattern string
		param   string
	}{
		{"/v1/jobs", "/v1/jobs", ""},
		{"/v1/jobs:batch", "/v1/jobs:batch", ""},
		{"/v1/jobs/abc", "/v1/jobs/{id}", "abc"},
		{"/v1/jobs/abc:pause", "/v1/jobs/{id}:pause", "abc"},
		{"/v1/jobs/abc:resume", "/v1/jobs/{id}:resume", "abc"},
		{"/v1/jobs/abc:trigger", "/v1/jobs/{id}:trigger", "abc"},
		{"/v1/jobs/abc:other", "/v1/jobs/{id}", "abc:other"},
		{"/v1/jobs/runs", "/v1/jobs/{id}", "runs"},
		{"/v1/jobs/abc/runs", "/v1/jobs/{id}/runs", "abc"},
		{"/v1/dead/j:123", "/v1/dead/{run}", "j:123"},
		{"/v1/dead/j:123:requeue", "/v1/dead/{run}:requeue", "j:123"},
		{"/v1/dead/requeue", "/v1/dead/{run}", "requeue"},
		{"/v1/queues/q:pause", "/v1/queues/{queue}:pause", "q"},
		{"/v1/queues/q:resume", "/v1/queues/{queue}:resume", "q"},
		{"/v1/queues/q", "", ""},
		{"/v1/jobs/", "", ""},
		{"/v1/jobs/:pause", "", ""},
		{"/v1/jobs//runs", "", ""},
		{"/v1/jobs/a/b", "", ""},
		{"/v1/dead/", "", ""},
		{"/v1/dead/:requeue", "", ""},
		{"/v1/queues/:pause", "", ""},
		{"/v1", "", ""},
		{"", "", ""},
	} {
		r, p := match(tc.path)
		if tc.pattern == "" {
			require.Equal(t, -1, r, tc.path)
			continue
		}
		require.GreaterOrEqual(t, r, 0, tc.path)
		require.Equal(t, tc.pattern, patterns[r], tc.path)
		require.Equal(t, tc.param, p, tc.path)
	}
}

func TestRateTracker(t *testing.T) {
	t.Parallel()
	var rt rateTracker
	t0 := time.Unix(1_700_000_000, 0)
	qs := func(fired ...int64) []shard.QueueStats {
		out := make([]shard.QueueStats, len(fired))
		for i, f := range fired {
			out[i] = shard.QueueStats{Queue: string(rune('a' + i)), Fired: f}
		}
		return out
	}
	require.Equal(t, []float64{0, 0}, rt.update(t0, qs(100, 5)))
	require.Equal(t, []float64{50, 1}, rt.update(t0.Add(2*time.Second), qs(200, 7)))
	// Too soon after the last sample: the previous rate, and the sample stays.
	require.Equal(t, []float64{50, 1}, rt.update(t0.Add(2500*time.Millisecond), qs(1000, 7)))
	require.Equal(t, []float64{100, 0}, rt.update(t0.Add(4*time.Second), qs(400, 7)))
	// A counter going back (namespace recreated) is no negative rate.
	require.Equal(t, []float64{0}, rt.update(t0.Add(6*time.Second), qs(10)))
	// Queue b left: its sample is dropped.
	require.Len(t, rt.samples, 1)
}
