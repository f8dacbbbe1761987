package ingest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/shard"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// bundle is a server on an in-memory listener with a client for it.
type bundle struct {
	t     *testing.T
	b     redistest.Backend
	rc    rueidis.Client
	store *shard.Store
	srv   *ingest.Server
	hc    *fasthttp.HostClient
	ln    *fasthttputil.InmemoryListener
	ns    string
}

// openStore opens a store with its own namespace on b.
func openStore(t *testing.T, b redistest.Backend, rc rueidis.Client, cfg shard.Config) (*shard.Store, string) {
	t.Helper()
	cfg.Namespace = redistest.Namespace(t, b)
	if cfg.Shards == 0 {
		cfg.Shards = 8
	}
	st, err := shard.Open(context.Background(), rc, cfg)
	require.NoError(t, err)
	return st, cfg.Namespace
}

// setup starts a server on a new namespace of backend b. cfg.Store is filled in.
func setup(t *testing.T, b redistest.Backend, cfg ingest.Config) *bundle {
	t.Helper()
	rc := b.Client(t)
	st, ns := openStore(t, b, rc, shard.Config{})
	cfg.Store = st
	return serve(t, b, rc, ns, cfg)
}

// setupMini starts a server on a miniredis of its own.
func setupMini(t *testing.T, cfg ingest.Config) *bundle {
	t.Helper()
	return setupMiniStore(t, shard.Config{}, cfg)
}

// setupMiniStore starts a server on a miniredis of its own with a store configured by sc.
func setupMiniStore(t *testing.T, sc shard.Config, cfg ingest.Config) *bundle {
	t.Helper()
	m, rc := redistest.Mini(t)
	b := redistest.Backend{Name: redistest.Miniredis, Addrs: []string{m.Addr()}, Mini: m}
	st, ns := openStore(t, b, rc, sc)
	cfg.Store = st
	return serve(t, b, rc, ns, cfg)
}

func serve(t *testing.T, b redistest.Backend, rc rueidis.Client, ns string, cfg ingest.Config) *bundle {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	srv, err := ingest.New(cfg)
	require.NoError(t, err)
	ln := fasthttputil.NewInmemoryListener()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	hc := &fasthttp.HostClient{
		Addr:                "tock.test",
		Dial:                func(string) (net.Conn, error) { return ln.Dial() },
		MaxIdleConnDuration: 50 * time.Millisecond, // its cleaner goroutine ends soon after the last connection
		ReadTimeout:         30 * time.Second,
		// Paths go as written: fasthttp's client would otherwise decode %2F and resolve
		// dot segments itself.
		DisablePathNormalizing: true,
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, srv.Stop(ctx))
		err := <-served
		if !errors.Is(err, ingest.ErrServerClosed) {
			require.NoError(t, err)
		}
		hc.CloseIdleConnections()
	})
	return &bundle{t: t, b: b, rc: rc, store: cfg.Store, srv: srv, hc: hc, ln: ln, ns: ns}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// client returns a Go client of the server (on its in-memory listener), sending token
// when not empty.
func (tb *bundle) client(token string) *ingest.Client {
	tb.t.Helper()
	tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return tb.ln.Dial() }}
	tb.t.Cleanup(tr.CloseIdleConnections)
	c, err := ingest.NewClient("http://tock.test", token, ingest.WithHTTPClient(&http.Client{Transport: tr}))
	require.NoError(tb.t, err)
	return c
}

// reply is a response as a test sees it.
type reply struct {
	status int
	body   []byte
	header map[string]string
}

// do sends a request; headers are name/value pairs.
func (tb *bundle) do(method, path string, body []byte, headers ...string) reply {
	tb.t.Helper()
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(method)
	req.SetRequestURI("http://tock.test" + path)
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBody(body)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	require.NoError(tb.t, tb.hc.DoTimeout(req, resp, 30*time.Second))
	r := reply{status: resp.StatusCode(), body: append([]byte(nil), resp.Body()...), header: map[string]string{}}
	for k, v := range resp.Header.All() {
		r.header[string(k)] = string(v)
	}
	return r
}

// doRaw sends a request on a connection of its own while reading the reply: for replies
// the server sends before it has read the whole request (and then closes).
func (tb *bundle) doRaw(req *fasthttp.Request) reply {
	tb.t.Helper()
	c, err := tb.ln.Dial()
	require.NoError(tb.t, err)
	defer c.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = req.WriteTo(c) // fails once the server closes
	}()
	defer wg.Wait()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	require.NoError(tb.t, resp.Read(bufio.NewReader(c)))
	r := reply{status: resp.StatusCode(), body: append([]byte(nil), resp.Body()...), header: map[string]string{}}
	for k, v := range resp.Header.All() {
		r.header[string(k)] = string(v)
	}
	return r
}

// doJSON sends v as JSON and decodes the reply into out (when not nil).
func (tb *bundle) doJSON(method, path string, v any, out any, headers ...string) reply {
	tb.t.Helper()
	var body []byte
	if v != nil {
		var err error
		body, err = json.Marshal(v)
		require.NoError(tb.t, err)
	}
	r := tb.do(method, path, body, headers...)
	if out != nil {
		require.NoError(tb.t, json.Unmarshal(r.body, out), "body: %s", r.body)
	}
	return r
}

// apiErr decodes an error reply and checks its status, code and field.
func (r reply) requireError(t *testing.T, status int, code, field string) ingest.Error {
	t.Helper()
	require.Equal(t, status, r.status, "body: %s", r.body)
	var e ingest.ErrorReply
	require.NoError(t, json.Unmarshal(r.body, &e), "body: %s", r.body)
	require.Equal(t, code, e.Error.Code, "body: %s", r.body)
	require.Equal(t, field, e.Error.Field, "body: %s", r.body)
	require.NotEmpty(t, e.Error.Message)
	return e.Error
}

// skipIfStub skips a test whose store method is still a stub.
func skipIfStub(t *testing.T, err error) {
	t.Helper()
	if err != nil && err.Error() == "not implemented yet" {
		t.Skip("store stub")
	}
}

// metricsRecorder records Metrics calls.
type metricsRecorder struct {
	mu    sync.Mutex
	calls []metricCall
}

type metricCall struct {
	route  string
	status int
}

func (m *metricsRecorder) HTTPRequest(route string, status int, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, metricCall{route, status})
}

func (m *metricsRecorder) all() []metricCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]metricCall(nil), m.calls...)
}

var errNotFound = shard.ErrNotFound
