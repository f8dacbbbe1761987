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
	fill := strings.NewReplacer("{id}", "job-1.a_b~c", "{run}", "job-1:1700000000000", "{queue}", "mail", "{node}", "extract")
	for path := range doc.Paths {
		r, p, bad := match(fill.Replace(path))
		require.False(t, bad)
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
		bad     bool
	}{
		{"/v1/jobs", "/v1/jobs", "", false},
		{"/v1/jobs:batch", "/v1/jobs:batch", "", false},
		{"/v1/jobs/abc", "/v1/jobs/{id}", "abc", false},
		{"/v1/jobs/abc:pause", "/v1/jobs/{id}:pause", "abc", false},
		{"/v1/jobs/abc:resume", "/v1/jobs/{id}:resume", "abc", false},
		{"/v1/jobs/abc:trigger", "/v1/jobs/{id}:trigger", "abc", false},
		{"/v1/jobs/abc:other", "/v1/jobs/{id}", "abc:other", false},
		{"/v1/jobs/runs", "/v1/jobs/{id}", "runs", false},
		{"/v1/jobs/abc/runs", "/v1/jobs/{id}/runs", "abc", false},
		{"/v1/dead/j:123", "/v1/dead/{run}", "j:123", false},
		{"/v1/dead/j:123:requeue", "/v1/dead/{run}:requeue", "j:123", false},
		{"/v1/dead/requeue", "/v1/dead/{run}", "requeue", false},
		{"/v1/queues/q:pause", "/v1/queues/{queue}:pause", "q", false},
		{"/v1/queues/q:resume", "/v1/queues/{queue}:resume", "q", false},
		{"/v1/queues/q", "", "", false},
		{"/v1/jobs/", "", "", false},
		{"/v1/jobs/:pause", "", "", false},
		{"/v1/jobs//runs", "", "", false},
		{"/v1/jobs/a/b", "", "", false},
		{"/v1/dead/", "", "", false},
		{"/v1/dead/:requeue", "", "", false},
		{"/v1/queues/:pause", "", "", false},
		{"/v1", "", "", false},
		{"", "", "", false},
		// Split as sent, then each parameter decoded on its own.
		{"/v1/jobs/a%2Fb", "/v1/jobs/{id}", "a/b", false},
		{"/v1/jobs/..%2F..%2Fmetrics", "/v1/jobs/{id}", "../../metrics", false},
		{"/v1/jobs/..%2Fqueues%2Fdefault:pause", "/v1/jobs/{id}:pause", "../queues/default", false},
		{"/v1/jobs/../queues/default:pause", "", "", false},
		{"/v1/jobs/..", "/v1/jobs/{id}", "..", false},
		{"/v1/jobs/%2E%2E/runs", "/v1/jobs/{id}/runs", "..", false},
		{"/v1/jobs/x%3Apause", "/v1/jobs/{id}:pause", "x", false},
		{"/v1/jobs/abc:delete", "/v1/jobs/{id}:delete", "abc", false},
		{"/v1/jobs/x%3Adelete", "/v1/jobs/{id}:delete", "x", false},
		{"/v1/jobs/%3Apause", "", "", false},
		{"/v1/jobs/a%2Db", "/v1/jobs/{id}", "a-b", false},
		{"/v1/jobs/a+b", "/v1/jobs/{id}", "a+b", false},
		{"/v1/dead/j%3A1:requeue", "/v1/dead/{run}:requeue", "j:1", false},
		{"/v1/queues/q%2F..:pause", "/v1/queues/{queue}:pause", "q/..", false},
		{"/v1/jobs%3Abatch", "", "", false},
		{"/v1/%6Aobs", "", "", false},
		{"/v1/jobs/%zz", "/v1/jobs/{id}", "%zz", true},
		{"/v1/jobs/%zz:pause", "/v1/jobs/{id}:pause", "%zz", true},
		{"/v1/queues/%zz", "", "", false},
		// Workflows: ids with '@' (instances) are ids like any other.
		{"/v1/workflows", "/v1/workflows", "", false},
		{"/v1/workflows/etl", "/v1/workflows/{id}", "etl", false},
		{"/v1/workflows/nightly@1893466800000", "/v1/workflows/{id}", "nightly@1893466800000", false},
		{"/v1/workflows/nightly%401893466800000:retry", "/v1/workflows/{id}:retry", "nightly@1893466800000", false},
		{"/v1/workflows/etl:cancel", "/v1/workflows/{id}:cancel", "etl", false},
		{"/v1/workflows/etl:pause", "/v1/workflows/{id}:pause", "etl", false},
		{"/v1/workflows/etl:resume", "/v1/workflows/{id}:resume", "etl", false},
		{"/v1/workflows/etl:trigger", "/v1/workflows/{id}:trigger", "etl", false},
		{"/v1/workflows/etl:delete", "/v1/workflows/{id}:delete", "etl", false},
		{"/v1/workflows/etl:requeue", "/v1/workflows/{id}", "etl:requeue", false},
		{"/v1/workflows/etl/nodes/a/result", "/v1/workflows/{id}/nodes/{node}/result", "etl/a", false},
		{"/v1/workflows/n@1/nodes/a%2Fb/result", "/v1/workflows/{id}/nodes/{node}/result", "n@1/a%2Fb", false},
		{"/v1/workflows/a%2Fb/nodes/c/result", "/v1/workflows/{id}/nodes/{node}/result", "a%2Fb/c", false},
		{"/v1/workflows/x/nodes/%zz/result", "/v1/workflows/{id}/nodes/{node}/result", "x/%25zz", true},
		{"/v1/workflows/x/nodes//result", "", "", false},
		{"/v1/workflows/x/nodes/a", "", "", false},
		{"/v1/workflows/x/nodes/a/b/result", "", "", false},
		{"/v1/workflows//nodes/a/result", "", "", false},
		{"/v1/workflows/x/runs", "", "", false},
		{"/v1/workflows/", "", "", false},
		{"/v1/workflows/:cancel", "", "", false},
	} {
		r, p, bad := match(tc.path)
		if tc.pattern == "" {
			require.Equal(t, -1, r, tc.path)
			continue
		}
		require.GreaterOrEqual(t, r, 0, tc.path)
		require.Equal(t, tc.pattern, patterns[r], tc.path)
		require.Equal(t, tc.param, p, tc.path)
		require.Equal(t, tc.bad, bad, tc.path)
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

// FuzzMatch checks that a parameter that passes its validation is one plain segment: no
// slash, no dot segment, and the path built back from it reaches the same route.
func FuzzMatch(f *testing.F) {
	for _, p := range []string{"/v1/jobs/a", "/v1/jobs/..%2Fmetrics", "/v1/jobs/a:pause", "/v1/jobs/%2E%2E/runs",
		"/v1/dead/j:1:requeue", "/v1/queues/q%3Apause", "/v1/jobs/%zz", "/v1/jobs/a%2Fb:trigger", "/v1/jobs:batch"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		r, p, bad := match(path)
		if r < 0 || checkParam(r, p, bad) != nil || paramField[r] == "" {
			return
		}
		require.False(t, bad)
		require.NotContains(t, p, "/")
		require.NotEqual(t, ".", p)
		require.NotEqual(t, "..", p)
		built := strings.Replace(patterns[r], "{"+paramField[r]+"}", p, 1)
		r2, p2, bad2 := match(built)
		require.Equal(t, r, r2, built)
		require.Equal(t, p, p2, built)
		require.False(t, bad2)
	})
}
