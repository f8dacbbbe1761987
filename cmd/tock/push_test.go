package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/worker"
)

// tock server with --push-secret runs the push role too: a job with a target created
// through the API is delivered, signed, to the sink; a private target is refused at
// create unless --push-allow allows it.
func TestServer_PushRole(t *testing.T) {
	t.Parallel()
	for _, b := range realBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			got := make(chan string, 1)
			sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				got <- r.Header.Get("Tock-Signature") + " " + string(body)
			}))
			defer sink.Close()
			ns := redistest.Namespace(t, b)
			env := map[string]string{"TOCK_REDIS": strings.Join(b.Addrs, ","), "TOCK_PUSH_SECRET": "first-secret-0123456789,second-secret-0123456789"}
			s := startRole(t, cmdServer, env, "--http", "127.0.0.1:0", "--namespace", ns, "--shards", "4",
				"--push-allow", "127.0.0.0/8")
			post := func(body string) int {
				resp, err := http.Post(s.url+"/v1/jobs", "application/json", bytes.NewReader([]byte(body)))
				require.NoError(t, err)
				resp.Body.Close()
				return resp.StatusCode
			}
			require.Equal(t, 201, post(`{"target":{"url":"`+sink.URL+`/hook"},"payload":{"a":1},"schedule":{"now":true}}`))
			require.Equal(t, 400, post(`{"target":{"url":"http://10.0.0.1/hook"},"schedule":{"now":true}}`))
			var v string
			select {
			case v = <-got:
			case <-time.After(20 * time.Second):
				t.Fatal("no delivery")
			}
			sig, body, _ := strings.Cut(v, " ")
			require.Equal(t, `{"a":1}`, body)
			require.NoError(t, worker.VerifySignature(sig, []byte(body), []string{"first-secret-0123456789"}, 0, time.Now()))
			require.NotContains(t, s.logs.String(), "first-secret", "secrets are never logged")
			require.Equal(t, []string{"ingest", "dispatcher", "workers", "redis"}, s.stop(t))
		})
	}
}
