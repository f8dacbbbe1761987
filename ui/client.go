package ui

import (
	"bytes"
	"context"
	"hash/maphash"
	"io"
	"net"
	"net/http"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/ingest"
)

// inProcess is an http.RoundTripper that hands requests to the API's handler in this
// process, with the scope of the dashboard's session: the pages read the same endpoints
// as a script, without a network round trip and without holding the token.
type inProcess struct {
	api         *ingest.Server
	scope       ingest.Scope
	who, remote string // for the audit log
}

var loopback = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}

func (t inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	var req fasthttp.Request
	req.Header.SetMethod(r.Method)
	// The path as the client encoded it: the API routes on the raw path.
	req.SetRequestURI(r.URL.RequestURI())
	req.Header.SetHost("tock.internal")
	for k, vs := range r.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		req.SetBody(b)
	}
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, loopback, nil)
	t.api.ServeFor(&ctx, t.scope, t.who, "ui", t.remote)
	if h, ok := r.Context().Value(digestKey{}).(*maphash.Hash); ok {
		_, _ = h.WriteString(r.URL.Path)
		_ = h.WriteByte(byte(ctx.Response.StatusCode() % 256))
		_, _ = h.Write(ctx.Response.Body())
		_ = h.WriteByte(0)
	}
	res := &http.Response{
		StatusCode: ctx.Response.StatusCode(), Header: http.Header{}, Request: r,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		// Copied: fasthttp reuses the response's buffer.
		Body: io.NopCloser(bytes.NewReader(bytes.Clone(ctx.Response.Body()))),
	}
	for k, v := range ctx.Response.Header.All() {
		res.Header.Add(string(k), string(v))
	}
	return res, nil
}

// client returns an API client acting for v: with its scope, named in the audit log as v.
func (u *UI) client(v *viewer) *ingest.Client {
	t := inProcess{api: u.api, scope: v.scope, who: v.who, remote: v.remote}
	c, err := ingest.NewClient("http://tock.internal", "", ingest.WithHTTPClient(&http.Client{Transport: t}),
		ingest.WithUserAgent("tock-ui"))
	if err != nil {
		panic("ui: in-process client: " + err.Error()) // a constant URL: cannot fail
	}
	return c
}

// digestKey is the context key of the hash that an in-process request's reply is added
// to (withDigest).
type digestKey struct{}

// withDigest returns a context whose API requests through the in-process client add
// their path, status and reply to h, in the order they are made: what a page was made
// of, to tell whether it changed without rendering it.
func withDigest(ctx context.Context, h *maphash.Hash) context.Context {
	return context.WithValue(ctx, digestKey{}, h)
}
