package ingest

import (
	"errors"
	"io"
	"log/slog"
	"strconv"

	"github.com/valyala/fasthttp"
)

// Request bodies are read by the handler, not by fasthttp (Server.StreamRequestBody):
// fasthttp reads the headers and at most the first 8 KiB of a body; dispatch then routes
// and authenticates on the headers alone, and only then reads the body, holding room for
// it in Config.MaxBodyMemory until the request ends. A request refused before its body
// is read closes its connection, since the rest of the body is still on it.

// errBodyMemory is the 503 of a request whose body does not fit in MaxBodyMemory.
var errBodyMemory = &apiError{status: 503, code: CodeUnavailable,
	msg: "the server is reading as many request bodies as it holds at once: retry later"}

// bodyRetryAfter is the Retry-After, in seconds, of errBodyMemory.
const bodyRetryAfter = "1"

// prefetched is how much of a body fasthttp reads before the handler (when MaxBody
// allows): readBodyWithStreaming's 8 KiB.
const prefetched = 8 << 10

// chunkedStart is the first room taken for a body of unknown length (chunked).
const chunkedStart = 32 << 10

// reserveBody takes n bytes of MaxBodyMemory; false when they are not free.
func (s *Server) reserveBody(n int64) bool {
	for {
		cur := s.bodyMem.Load()
		if cur+n > s.cfg.MaxBodyMemory {
			return false
		}
		if s.bodyMem.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

func (s *Server) releaseBody(n int64) {
	if n != 0 {
		s.bodyMem.Add(-n)
	}
}

// bodyFits reports whether a body of Content-Length cl would fit now (without taking
// the room): the check made when a client asks for 100 Continue.
func (s *Server) bodyFits(cl int) bool {
	return cl <= 0 || s.bodyMem.Load()+int64(cl) <= s.cfg.MaxBodyMemory
}

func (s *Server) tooLarge() *apiError {
	return &apiError{status: 413, code: CodeTooLarge,
		msg: "the request body is over the limit of " + strconv.Itoa(s.cfg.MaxBody) + " bytes"}
}

// readBody reads the body of an authenticated request into memory (the handlers find it
// in ctx.PostBody) and returns the room it holds, to give back with releaseBody once
// the request is served. On error nothing is held and the connection is to be closed.
func (s *Server) readBody(ctx *fasthttp.RequestCtx) (held int64, aerr *apiError) {
	stream := ctx.RequestBodyStream()
	if stream == nil {
		// Read already, by a server embedding Handler without StreamRequestBody.
		if len(ctx.Request.Body()) > s.cfg.MaxBody {
			return 0, s.tooLarge()
		}
		return 0, nil
	}
	cl := ctx.Request.Header.ContentLength()
	switch {
	case cl == 0:
		ctx.Request.SetBodyRaw(nil)
		return 0, nil
	case cl > s.cfg.MaxBody:
		return 0, s.tooLarge()
	case cl > 0:
		if !s.reserveBody(int64(cl)) {
			return 0, errBodyMemory
		}
		if cl <= prefetched {
			// fasthttp has read it all into its pooled buffer: no copy of our own.
			if b := ctx.Request.Body(); len(b) == cl {
				return int64(cl), nil
			}
			s.releaseBody(int64(cl))
			return 0, s.bodyReadError(ctx, io.ErrUnexpectedEOF)
		}
		buf := make([]byte, cl)
		if _, err := io.ReadFull(stream, buf); err != nil {
			s.releaseBody(int64(cl))
			return 0, s.bodyReadError(ctx, err)
		}
		ctx.Request.SetBodyRaw(buf)
		return int64(cl), nil
	}
	// Chunked: the room grows with the buffer, up to one byte over MaxBody (which tells
	// a body over the limit).
	start := min(chunkedStart, s.cfg.MaxBody+1)
	if !s.reserveBody(int64(start)) {
		return 0, errBodyMemory
	}
	held = int64(start)
	buf := make([]byte, 0, start)
	for {
		if len(buf) == cap(buf) {
			if len(buf) > s.cfg.MaxBody {
				s.releaseBody(held)
				return 0, s.tooLarge()
			}
			grow := min(2*cap(buf), s.cfg.MaxBody+1) - cap(buf)
			if !s.reserveBody(int64(grow)) {
				s.releaseBody(held)
				return 0, errBodyMemory
			}
			held += int64(grow)
			bigger := make([]byte, len(buf), cap(buf)+grow)
			copy(bigger, buf)
			buf = bigger
		}
		n, err := stream.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			s.releaseBody(held)
			return 0, s.bodyReadError(ctx, err)
		}
	}
	if len(buf) > s.cfg.MaxBody {
		s.releaseBody(held)
		return 0, s.tooLarge()
	}
	ctx.Request.SetBodyRaw(buf)
	return held, nil
}

// bodyReadError logs (rate limited, without request data) a body that could not be read
// (cut short, malformed chunks, too slow) and returns the reply to it.
func (s *Server) bodyReadError(ctx *fasthttp.RequestCtx, err error) *apiError {
	kind := errorKind(err)
	aerr := &apiError{status: 400, code: CodeInvalid, msg: "the request body could not be read (" + kind + ")"}
	if kind == "timeout" {
		aerr = &apiError{status: 408, code: CodeInvalid, msg: "the request body was not sent in time"}
	}
	s.logLimited(ctx, s.reqLog, slog.LevelInfo, "request body not read", "method", safeMethod(ctx.Method()),
		"route", s.routeName(ctx), "remote_addr", ctx.RemoteAddr().String(), "error_kind", kind, "status", aerr.status)
	return aerr
}
