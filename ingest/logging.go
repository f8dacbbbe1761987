package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/tockhq/tock/internal/limit"
	"github.com/valyala/fasthttp"
)

// No log line of the server holds request data beyond the method (when it is a known
// one), the route pattern and the remote address: fasthttp's errors quote the request
// (its request line and headers, Authorization included), so they are reduced to a kind
// from a fixed list before they are logged.

// logEvery is how often a rate-limited log lets a line through.
const logEvery = time.Second

// logLimited logs at level through l; attrs must not hold request data.
func (s *Server) logLimited(ctx context.Context, l *limit.Every, level slog.Level, msg string, attrs ...any) {
	ok, n := l.Take()
	if !ok {
		return
	}
	if n > 0 {
		attrs = append(attrs, "suppressed", n)
	}
	s.log.Log(ctx, level, msg, attrs...)
}

// logError logs an internal error, at most once per second (the count of the ones left
// out goes with the next).
func (s *Server) logError(ctx context.Context, msg string, err error, attrs ...any) {
	s.logLimited(ctx, s.errLog, slog.LevelError, msg, append(attrs, "error", err)...)
}

// knownMethods are the methods a log line may name; any other is logged as "other" (a
// malformed request line can put anything there).
var knownMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"}

// safeMethod is the request's method when it is a known one, "other" when not, "" when
// none was read.
func safeMethod(m []byte) string {
	if len(m) == 0 {
		return ""
	}
	for _, k := range knownMethods {
		if string(m) == k {
			return k
		}
	}
	return "other"
}

// errorKind names the kind of a request-reading error from a fixed list, so that it can
// be logged: the error's text quotes the request.
func errorKind(err error) string {
	var small *fasthttp.ErrSmallBuffer
	var broken fasthttp.ErrBrokenChunk
	var ne net.Error
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return "body_too_large"
	case errors.As(err, &small) || errors.Is(err, fasthttp.ErrSmallReadBuffer):
		return "header_too_large"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.As(err, &broken):
		return "bad_chunked_body"
	case errors.Is(err, fasthttp.ErrDuplicateContentLength):
		return "bad_content_length"
	case errors.Is(err, fasthttp.ErrUnsupportedTransferEncoding):
		return "bad_transfer_encoding"
	case errors.Is(err, fasthttp.ErrMissingRequestMethod), errors.Is(err, fasthttp.ErrUnsupportedRequestMethod):
		return "bad_method"
	case errors.Is(err, fasthttp.ErrEmptyRequestURI):
		return "bad_uri"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "truncated"
	case errors.Is(err, net.ErrClosed):
		return "closed"
	}
	// fasthttp builds most of its parse errors with fmt.Errorf: their text decides the
	// kind, and is not kept.
	msg := strings.ToLower(err.Error())
	for _, k := range []struct{ substr, kind string }{
		{"content-length", "bad_content_length"},
		{"transfer-encoding", "bad_transfer_encoding"},
		{"chunk", "bad_chunked_body"},
		{"hex number", "bad_chunked_body"},
		{"request method", "bad_method"},
		{"http version", "bad_version"},
		{"host", "bad_host"},
		{"uri", "bad_uri"},
		{"first line", "bad_request_line"},
		{"whitespace", "bad_request_line"},
		{"trailer", "bad_trailer"},
		{"header", "bad_header"},
		{"broken pipe", "connection_reset"},
		{"reset by peer", "connection_reset"},
		{"timeout", "timeout"},
		{"eof", "truncated"},
	} {
		if strings.Contains(msg, k.substr) {
			return k.kind
		}
	}
	return "malformed"
}

// fasthttpLogger carries fasthttp's own messages to the logger, rate limited. Their
// arguments are reduced to what is safe to log: addresses, numbers, and errors as
// their kind; anything else is left out.
type fasthttpLogger struct {
	s *Server
}

func (f fasthttpLogger) Printf(format string, args ...any) {
	safe := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case net.Addr:
			safe[i] = v.String()
		case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64, bool, time.Duration:
			safe[i] = v
		case error:
			safe[i] = errorKind(v)
		default:
			safe[i] = "-"
		}
	}
	ok, n := f.s.fhLog.Take()
	if !ok {
		return
	}
	attrs := []any{"source", "fasthttp"}
	if n > 0 {
		attrs = append(attrs, "suppressed", n)
	}
	f.s.log.Warn(fmt.Sprintf(format, safe...), attrs...)
}
