package ingest_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
)

// flood sends n requests from workers goroutines at once; body(i) is the i-th body. It
// returns how many got each status, and the jobs created.
func (tb *bundle) flood(t *testing.T, path string, workers, n int, body func(i int) string) (statuses map[int]int, created int) {
	t.Helper()
	var mu sync.Mutex
	statuses = map[int]int{}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				r := tb.do("POST", path, []byte(body(i)))
				k := 0
				switch {
				case r.status == 201:
					k = 1
				case r.status == 200 && path == "/v1/jobs:batch":
					var br ingest.BatchReply
					if json.Unmarshal(r.body, &br) == nil {
						k = br.Created
					}
				}
				mu.Lock()
				statuses[r.status]++
				created += k
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return statuses, created
}

// TestServer_BacklogBound floods creates at a server whose measured backlog is never
// refreshed: the runs it makes ready count on top of it, so the backlog goes past
// MaxBacklog by less than one request's jobs (never with single creates).
func TestServer_BacklogBound(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		const limit = 10
		cfg := ingest.Config{MaxBacklog: limit, BacklogRefresh: time.Hour}

		t.Run("Single", func(t *testing.T) {
			tb := setup(t, b, cfg)
			statuses, created := tb.flood(t, "/v1/jobs", 16, 320, func(i int) string {
				return `{"id":"s-` + strconv.Itoa(i) + `","type":"t","schedule":{"now":true}}`
			})
			require.Equal(t, limit, created, "%v", statuses)
			require.Equal(t, 320-limit, statuses[429], "%v", statuses)
			n, err := tb.store.Backlog(t.Context())
			require.NoError(t, err)
			require.LessOrEqual(t, n, int64(limit))
		})
		t.Run("Batch", func(t *testing.T) {
			tb := setup(t, b, cfg)
			const size = 4
			_, created := tb.flood(t, "/v1/jobs:batch", 8, 40, func(i int) string {
				s := "["
				for k := range size {
					if k > 0 {
						s += ","
					}
					s += `{"id":"b-` + strconv.Itoa(i) + `-` + strconv.Itoa(k) + `","type":"t","schedule":{"now":true}}`
				}
				return s + "]"
			})
			require.GreaterOrEqual(t, created, limit)
			require.Less(t, created, limit+size, "more than one request's jobs over the limit")
			n, err := tb.store.Backlog(t.Context())
			require.NoError(t, err)
			require.Less(t, n, int64(limit+size))
		})
		t.Run("LaterJobsDoNotCount", func(t *testing.T) {
			tb := setup(t, b, cfg)
			statuses, created := tb.flood(t, "/v1/jobs", 8, 50, func(i int) string {
				return `{"id":"l-` + strconv.Itoa(i) + `","type":"t","schedule":{"delay":"1h"}}`
			})
			require.Equal(t, 50, created, "%v", statuses)
			for i := range limit {
				tb.do("POST", "/v1/jobs", []byte(fmt.Sprintf(`{"id":"n-%d","type":"t","schedule":{"now":true}}`, i))).requireStatus(t, 201)
			}
			r := tb.do("POST", "/v1/jobs", []byte(`{"id":"n-x","type":"t","schedule":{"now":true}}`))
			r.requireError(t, 429, ingest.CodeOverloaded, "")
			require.NotEmpty(t, r.header["Retry-After"])
		})
	})
}
