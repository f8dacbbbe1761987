package ingest_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
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
		logged bool // a read error, logged; false: a request refused or served
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
		{"BodyTooLarge", 413, false, "POST /v1/jobs?token=" + query + " HTTP/1.1\r\nHost: x\r\n" + auth + key + "Content-Length: 99999\r\n\r\n" + strings.Repeat(" ", 2000)},
		{"ChunkedBodyTooLarge", 413, false, "POST /v1/jobs?token=" + query + " HTTP/1.1\r\nHost: x\r\n" + auth + key + "Transfer-Encoding: chunked\r\n\r\n800\r\n" + strings.Repeat(" ", 2048) + "\r\n0\r\n\r\n"},
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

// upload opens a connection and sends the headers of a POST /v1/jobs with Content-Length
// cl and the first part of its body: a job padded with spaces to cl bytes.
func upload(t *testing.T, addr, auth string, cl, part int, extra ...string) (net.Conn, []byte) {
	t.Helper()
	body := uploadBody(cl)
	return uploadHead(t, addr, auth, cl, part, extra...), body[part:]
}

// uploadBody is the first n bytes of a job padded with spaces (to the Content-Length).
func uploadBody(n int) []byte {
	body := []byte(`{"type":"t","schedule":{"delay":"1h"}}`)
	if n <= len(body) {
		return body[:n]
	}
	return append(body, bytes.Repeat([]byte{' '}, n-len(body))...)
}

// uploadHead is upload for a request whose body is never sent past its first part: the
// rest is not made (a 60 MB body took seconds to make under -race).
func uploadHead(t *testing.T, addr, auth string, cl, part int, extra ...string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	h := "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(cl) + "\r\n"
	if auth != "" {
		h += "Authorization: Bearer " + auth + "\r\n"
	}
	for _, e := range extra {
		h += e + "\r\n"
	}
	_, err = io.WriteString(c, h+"\r\n")
	require.NoError(t, err)
	if part > 0 {
		_, err = c.Write(uploadBody(part))
		require.NoError(t, err)
	}
	return c
}

// readReply reads one reply from c within d; ok is false when none came in time.
func readReply(t *testing.T, c net.Conn, d time.Duration) (resp *fasthttp.Response, ok bool) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(d)))
	resp = &fasthttp.Response{}
	if err := resp.Read(bufio.NewReader(c)); err != nil {
		var ne net.Error
		if errors.Is(err, fasthttp.ErrTimeout) || errors.As(err, &ne) && ne.Timeout() {
			return nil, false
		}
		require.NoError(t, err)
	}
	return resp, true
}

// TestServer_UnauthenticatedBodyNotRead checks that a request without a valid token is
// refused once its headers are read: the server answers while the client has sent 8 KiB
// of a 60 MB body, and closes the connection.
func TestServer_UnauthenticatedBodyNotRead(t *testing.T) {
	t.Parallel()
	const writer, reader = "writer-secret-0123456789", "reader-secret-0123456789"
	ts := startTCP(t, ingest.Config{Tokens: []ingest.Token{{Secret: writer, Scope: ingest.ScopeWrite}, {Secret: reader, Scope: ingest.ScopeRead}}})
	const huge = 60_000_000
	for _, tc := range []struct {
		name   string
		auth   string
		status int
	}{
		{"NoToken", "", 401},
		{"UnknownToken", "not-a-token-at-all-000", 401},
		{"ReadToken", reader, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := uploadHead(t, ts.addr, tc.auth, huge, 8<<10)
			resp, ok := readReply(t, c, 5*time.Second)
			require.True(t, ok, "no reply before the body was sent")
			require.Equal(t, tc.status, resp.StatusCode(), "%s", resp.Body())
			require.True(t, resp.ConnectionClose())

			// With Expect: 100-continue, not a byte of the body is sent.
			c = uploadHead(t, ts.addr, tc.auth, huge, 0, "Expect: 100-continue")
			resp, ok = readReply(t, c, 5*time.Second)
			require.True(t, ok, "no reply to the headers")
			require.Equal(t, tc.status, resp.StatusCode(), "%s", resp.Body())
		})
	}
	// With the token, the same request is read and served.
	c, rest := upload(t, ts.addr, writer, 1<<20, 0, "Expect: 100-continue")
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	var interim []byte
	for !bytes.HasSuffix(interim, []byte("\r\n\r\n")) {
		var b [1]byte
		_, err := c.Read(b[:])
		require.NoError(t, err)
		interim = append(interim, b[0])
	}
	require.True(t, bytes.HasPrefix(interim, []byte("HTTP/1.1 100 ")), "%q", interim)
	_, err := c.Write(rest)
	require.NoError(t, err)
	resp, ok := readReply(t, c, 10*time.Second)
	require.True(t, ok)
	require.Equal(t, 201, resp.StatusCode(), "%s", resp.Body())
}

// TestServer_BodyMemoryBound checks that the bodies being read and served at once take
// at most the bound (by default twice MaxBody): a request beyond it is answered 503 with
// Retry-After before its body is read, and a body's room is given back when its request
// ends, also when the client goes away in the middle of it.
func TestServer_BodyMemoryBound(t *testing.T) {
	t.Parallel()
	const tok = "writer-secret-0123456789"
	const mib = 1 << 20
	ts := startTCP(t, ingest.Config{MaxBody: mib, Tokens: []ingest.Token{{Secret: tok, Scope: ingest.ScopeWrite}}})

	// full sends a whole upload and returns the status.
	full := func() int {
		c, rest := upload(t, ts.addr, tok, mib, 0)
		_, _ = c.Write(rest) // fails when the server answered early and closed
		resp, ok := readReply(t, c, 10*time.Second)
		require.True(t, ok)
		return resp.StatusCode()
	}
	// busy reports whether an upload is refused for want of room (503, Retry-After).
	busy := func() bool {
		c, _ := upload(t, ts.addr, tok, mib, 8<<10)
		defer c.Close()
		resp, ok := readReply(t, c, 300*time.Millisecond)
		if !ok {
			return false // being read: there was room
		}
		require.Equal(t, 503, resp.StatusCode(), "%s", resp.Body())
		require.Equal(t, "1", string(resp.Header.Peek("Retry-After")))
		return true
	}

	a, aRest := upload(t, ts.addr, tok, mib, 64<<10)
	b, _ := upload(t, ts.addr, tok, mib, 64<<10)
	require.Eventually(t, busy, 10*time.Second, time.Millisecond, "two stalled uploads do not fill the bound")
	// A request without a token is refused as such, not for want of room.
	c, _ := upload(t, ts.addr, "", mib, 8<<10)
	resp, ok := readReply(t, c, 5*time.Second)
	require.True(t, ok)
	require.Equal(t, 401, resp.StatusCode())

	// The first upload ends: its room is free again.
	_, err := a.Write(aRest)
	require.NoError(t, err)
	resp, ok = readReply(t, a, 10*time.Second)
	require.True(t, ok)
	require.Equal(t, 201, resp.StatusCode(), "%s", resp.Body())
	require.Equal(t, 201, full())

	// The second goes away: its room is free again too.
	h, _ := upload(t, ts.addr, tok, mib, 64<<10)
	defer h.Close()
	require.NoError(t, b.Close())
	require.Eventually(t, func() bool { return full() == 201 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, h.Close())
	require.Eventually(t, func() bool { return ingest.BodyMemoryHeld(ts.srv) == 0 }, 10*time.Second, 5*time.Millisecond)
}

// TestServer_ChunkedBody checks bodies of unknown length: read chunk by chunk within
// MaxBody and MaxBodyMemory.
func TestServer_ChunkedBody(t *testing.T) {
	t.Parallel()
	ts := startTCP(t, ingest.Config{MaxBody: 4096, MaxBodyMemory: 6000})
	chunked := func(chunks ...string) string {
		var b strings.Builder
		for _, c := range chunks {
			b.WriteString(strconv.FormatInt(int64(len(c)), 16) + "\r\n" + c + "\r\n")
		}
		return b.String() + "0\r\n\r\n"
	}
	head := "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
	out := rawExchange(t, ts.addr, head+chunked(`{"id":"ch-1",`, `"type":"t",`, `"schedule":{"delay":"1h"}}`, strings.Repeat(" ", 3000)))
	require.True(t, strings.HasPrefix(out, "HTTP/1.1 201 "), "%q", out)
	_, err := ts.store.Get(t.Context(), "ch-1")
	require.NoError(t, err)
	out = rawExchange(t, ts.addr, head+chunked(`{"id":"ch-2",`, strings.Repeat(" ", 4096), `"type":"t","schedule":{"now":true}}`))
	require.True(t, strings.HasPrefix(out, "HTTP/1.1 413 "), "%q", out)
	out = rawExchange(t, ts.addr, head+"5\r\n{\"id\"\r\nzz\r\n")
	require.True(t, strings.HasPrefix(out, "HTTP/1.1 400 "), "%q", out)
	require.Equal(t, int64(0), ingest.BodyMemoryHeld(ts.srv))
}
