package ingest_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/ingest"
	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/shard"
)

// logBuffer is an io.Writer safe for concurrent use that keeps everything written.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tcpServer is a server listening on a loopback TCP port.
type tcpServer struct {
	srv   *ingest.Server
	addr  string
	store *shard.Store
	logs  *logBuffer
}

// startTCP starts a server on a free loopback port with a miniredis store; its logs, at
// every level, go to the returned buffer (and to t.Log).
func startTCP(t *testing.T, cfg ingest.Config) *tcpServer {
	t.Helper()
	if cfg.Store == nil {
		_, rc := redistest.Mini(t)
		st, err := shard.Open(t.Context(), rc, shard.Config{Shards: 4})
		require.NoError(t, err)
		cfg.Store = st
	}
	logs := &logBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(logs, tWriter{t}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Addr = "127.0.0.1:0"
	srv, err := ingest.New(cfg)
	require.NoError(t, err)
	ingest.SetLogEvery(srv, 0) // every line, not one a second
	require.NoError(t, srv.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, srv.Stop(ctx))
	})
	return &tcpServer{srv: srv, addr: srv.Addr(), store: cfg.Store, logs: logs}
}

// rawExchange writes raw to a new connection, half-closes it, and returns what the
// server answered until it closed the connection (or 5s passed).
func rawExchange(t *testing.T, addr string, raw string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = io.WriteString(c, raw)
	require.NoError(t, err)
	_ = c.(*net.TCPConn).CloseWrite()
	out, _ := io.ReadAll(c)
	return string(out)
}

// TestServer_MalformedRequestsLogNoSecrets sends every kind of malformed request fasthttp
// reports, each with secrets in the Authorization header, in another header and in the
// query, and checks that no secret reaches a log line (the server's own, and fasthttp's
// routed through it) or a reply.
func TestServer_MalformedRequestsLogNoSecrets(t *testing.T) {
	t.Parallel()
	const (
		token  = "tok-Secret-0123456789abcdef"
		other  = "key-Secret-fedcba9876543210"
		query  = "qry-Secret-00112233445566778899"
		secret = "Secret-" // in each of the three
	)
	ts := startTCP(t, ingest.Config{
		Tokens:  []ingest.Token{{Secret: token, Scope: ingest.ScopeWrite}},
		MaxBody: 1 << 10,
	})
	auth := "Authorization: Bearer " + token + "\r\n"
	key := "X-Api-Key: " + other + "\r\n"
	for _, tc := range []struct {
		name   string
		status int  // what the server answers
		logged bool // a read error, logged; false: fasthttp took the request
		raw    string
	}{
		{"SpaceInPath", 400, true, "GET /v1/jobs/a b?token=" + query + " HTTP/1.1\r\nHost: x\r\n" + auth + key + "\r\n"},
		{"SpacesInPath", 400, true, "POST /v1/jobs/a b c d HTTP/1.1\r\nHost: x\r\n" + auth + key + "\r\n"},
		{"HeaderWithoutColon", 400, true, "GET /v1/jobs?token=" + query + " HTTP/1.1\r\nHost: x\r\n" + auth + key + "NoColonHere " + other + "\r\n\r\n"},
		{"HeaderWithoutColonFirst", 400, true, "GET /v1/jobs HTTP/1.1\r\nBroken " + other + "\r\nHost: x\r\n" + auth + "\r\n"},
		{"BadContentLength", 400, true, "POST /v1/jobs?token=" + query + " HTTP/1.1\r\nHost: x\r\n" + auth + key + "Content-Length: 12x\r\n\r\n{}"},
		{"NegativeContentLength", 400, true, "POST /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth + key + "Content-Length: -5\r\n\r\n{}"},
		{"DuplicateContentLength", 400, true, "POST /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth + key + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}"},
		{"ContentLengthAndChunked", 400, false, "POST /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth + key + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"},
		{"UnsupportedTransferEncoding", 400, true, "POST /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth + key + "Transfer-Encoding: gzip-" + other + "\r\n\r\n"},
		{"BrokenChunk", 400, true, "POST /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth + key + "Transfer-Encoding: chunked\r\n\r\nzz" + other + "\r\n"},
		{"ShortBody", 400, true, "POST /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth + key + "Content-Length: 100\r\n\r\n{\"type\":"},
		{"BodyTooLarge", 413, true, "POST /v1/jobs?token=" + query + " HTTP/1.1\r\nHost: x\r\n" + auth + key + "Content-Length: 99999\r\n\r\n{}"},
		{"ControlInHeaderValue", 400, true, "GET /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth + "X-Api-Key: " + other + "\x01\r\n\r\n"},
		{"ControlInToken", 400, true, "GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + "\x7f\r\n" + key + "\r\n"},
		{"BadHeaderName", 200, false, "GET /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth + "X Api Key: " + other + "\r\n\r\n"},
		{"NoHost", 400, true, "GET /v1/jobs?token=" + query + " HTTP/1.1\r\n" + auth + key + "\r\n"},
		{"BadMethod", 400, true, "G\x01T /v1/jobs?token=" + query + " HTTP/1.1\r\nHost: x\r\n" + auth + key + "\r\n"},
		{"NoMethod", 400, true, " /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth + key + "\r\n"},
		{"BadVersion", 200, false, "GET /v1/jobs?token=" + query + " HTTP/7.3\r\nHost: x\r\n" + auth + key + "\r\n"},
		{"NoVersion", 400, true, "GET /v1/jobs?token=" + query + "\r\nHost: x\r\n" + auth + key + "\r\n"},
		{"EmptyURI", 400, true, "GET  HTTP/1.1\r\nHost: x\r\n" + auth + key + "\r\n"},
		{"BadURI", 400, true, "GET http://[::1" + query + "/v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth + key + "\r\n"},
		{"HeadersOnlyNoRequestLine", 400, true, auth + key + "\r\n"},
		{"HeaderTooLarge", 431, true, "GET /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth + key + "X-Pad: " + strings.Repeat("p", 9000) + other + "\r\n\r\n"},
		{"TruncatedHeaders", 400, true, "GET /v1/jobs HTTP/1.1\r\nHost: x\r\n" + auth + "X-Api-Key: " + other},
		{"BareLF", 400, true, "GET /v1/jobs HTTP/1.1\nHost: x\n" + auth + key + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := strings.Count(ts.logs.String(), "\n")
			out := rawExchange(t, ts.addr, tc.raw)
			require.True(t, strings.HasPrefix(out, "HTTP/1.1 "+strconv.Itoa(tc.status)+" "), "%q", out)
			require.NotContains(t, out, secret, "the reply shows a secret")
			if tc.logged {
				require.Greater(t, strings.Count(ts.logs.String(), "\n"), before, "nothing logged")
			}
		})
	}
	// The log has lines about the requests above, and no secret.
	logs := ts.logs.String()
	require.NotEmpty(t, logs)
	require.NotContains(t, logs, secret)
	require.NotContains(t, logs, strings.ToLower(secret))
}

// TestServer_FasthttpLoggerRedacts checks the adapter that carries fasthttp's own log
// messages: their arguments (errors quoting the request) never reach the log.
func TestServer_FasthttpLoggerRedacts(t *testing.T) {
	t.Parallel()
	ts := startTCP(t, ingest.Config{})
	c, err := net.Dial("tcp", ts.addr)
	require.NoError(t, err)
	defer c.Close()
	// fasthttp logs "error when serving connection" for a request whose headers it
	// cannot parse; the error quotes the request.
	_, err = io.WriteString(c, "GET /x HTTP/1.1\r\nHost: x\r\nX-Token: Secret-abc\x01\r\n\r\n")
	require.NoError(t, err)
	r := bufio.NewReader(c)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	require.NoError(t, resp.Read(r))
	require.Equal(t, 400, resp.StatusCode())
	require.Eventually(t, func() bool { return strings.Contains(ts.logs.String(), "fasthttp") }, 5*time.Second, 5*time.Millisecond)
	require.NotContains(t, ts.logs.String(), "Secret-")
}
