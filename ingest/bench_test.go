package ingest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/tockhq/tock/internal/redistest"
	"github.com/tockhq/tock/shard"
)

var benchBody = []byte(`{"queue":"mail","type":"email.welcome","payload":{"user":12345,"template":"welcome"},"schedule":{"delay":"1h"},"priority":6}`)

func BenchmarkDecodeCreate(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeCreate(benchBody, "", 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteCreated(b *testing.B) {
	j, _ := decodeCreate(benchBody, "", 0)
	res := &shard.CreateResult{ID: j.ID, Shard: 3, State: "scheduled"}
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		writeJSON(&ctx, 201, wireCreated(j, res))
	}
}

func BenchmarkMatch(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		match("/v1/jobs/some-job-id:pause")
	}
}

// benchServer is a server on the real standalone Redis (miniredis when there is none).
func benchServer(b *testing.B, cfg Config) *Server {
	bs := redistest.Backends(b)
	be := bs[0]
	if len(bs) > 1 {
		be = bs[1]
	}
	rc := be.Client(b)
	st, err := shard.Open(context.Background(), rc, shard.Config{Namespace: redistest.Namespace(b, be), Shards: 16})
	if err != nil {
		b.Fatal(err)
	}
	cfg.Store = st
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkHandler_Create calls the handler directly (no HTTP parsing), in parallel.
func BenchmarkHandler_Create(b *testing.B) {
	s := benchServer(b, Config{})
	h := s.Handler()
	b.ResetTimer()
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(32) // many clients at once, as a server sees them
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		for pb.Next() {
			ctx.Request.Reset()
			ctx.Response.Reset()
			ctx.Request.Header.SetMethod("POST")
			ctx.Request.SetRequestURI("/v1/jobs")
			ctx.Request.Header.SetContentType("application/json")
			ctx.Request.SetBody(bytes.Replace(benchBody, []byte(`{"queue"`), []byte(`{"id":"b-`+strconv.FormatInt(n.Add(1), 10)+`","queue"`), 1))
			h(&ctx)
			if ctx.Response.StatusCode() != 201 {
				panic(fmt.Sprintf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body()))
			}
		}
	})
}

// BenchmarkHandler_Batch creates batches of 1000 jobs; b.N counts jobs.
func BenchmarkHandler_Batch(b *testing.B) {
	s := benchServer(b, Config{})
	h := s.Handler()
	b.ResetTimer()
	const size = 1000
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		var body bytes.Buffer
		for {
			body.Reset()
			k := 0
			for ; k < size && pb.Next(); k++ {
				fmt.Fprintf(&body, `{"id":"bb-%d","queue":"mail","type":"email.welcome","payload":{"user":%d},"schedule":{"delay":"1h"}}`+"\n", n.Add(1), k)
			}
			if k == 0 {
				return
			}
			ctx.Request.Reset()
			ctx.Response.Reset()
			ctx.Request.Header.SetMethod("POST")
			ctx.Request.SetRequestURI("/v1/jobs:batch")
			ctx.Request.Header.SetContentType("application/x-ndjson")
			ctx.Request.SetBody(body.Bytes())
			h(&ctx)
			if ctx.Response.StatusCode() != 200 {
				panic(fmt.Sprintf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body()))
			}
			if k < size {
				return
			}
		}
	})
}

// BenchmarkServer_CreateHTTP creates jobs over loopback TCP from many connections; the
// client's cost is included (it runs on the same cores).
func BenchmarkServer_CreateHTTP(b *testing.B) {
	s := benchServer(b, Config{Addr: "127.0.0.1:0"})
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer s.Stop(context.Background())
	hc := &fasthttp.HostClient{Addr: s.Addr(), MaxConns: 256, MaxIdleConnDuration: 50 * time.Millisecond,
		Dial: func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }}
	defer hc.CloseIdleConnections()
	var n atomic.Int64
	b.ResetTimer()
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		for pb.Next() {
			req.Reset()
			req.Header.SetMethod("POST")
			req.SetRequestURI("http://" + s.Addr() + "/v1/jobs")
			req.Header.SetContentType("application/json")
			req.SetBody(bytes.Replace(benchBody, []byte(`{"queue"`), []byte(`{"id":"h-`+strconv.FormatInt(n.Add(1), 10)+`","queue"`), 1))
			if err := hc.Do(req, resp); err != nil {
				panic(err)
			}
			if resp.StatusCode() != 201 {
				panic(fmt.Sprintf("status %d: %s", resp.StatusCode(), resp.Body()))
			}
		}
	})
}
