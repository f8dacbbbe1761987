package job

import (
	"net/textproto"
	"net/url"
	"sort"
	"strings"
	"time"
)

// PushType is the type of a job with a Target. A job has either a type (a handler of a
// worker runs it) or a target (tock's push executor delivers it as an HTTP request);
// Normalize sets the type of a job with a target to PushType, and refuses PushType on a
// job without one. The push executor claims runs of PushType from its queues.
const PushType = "@push"

// DefaultPushQueue is the queue of a job with a target that names none: the push
// executor's default queue. Keep push jobs out of the queues that SDK or HTTP workers
// serve: a worker without a handler for PushType fails their runs.
const DefaultPushQueue = "push"

// Limits and defaults of a target.
const (
	MaxTargetURLLen      = 2048
	MaxTargetHeaders     = 32
	MaxTargetHeaderBytes = 8 << 10 // names and values together
	DefaultTargetMethod  = "POST"
	DefaultTargetTimeout = 30 * time.Second
	MinTargetTimeout     = 100 * time.Millisecond
	MaxTargetTimeout     = time.Hour
)

// Target is where the push executor delivers a job's runs: an HTTP request to URL with
// the payload as its body.
type Target struct {
	// URL is an absolute http or https URL without user information, at most 2,048
	// bytes. Whether its host may be reached is the executor's egress policy (the API
	// checks it at create, the executor again when it dials).
	URL string `json:"url"`
	// Method is GET, POST, PUT, PATCH or DELETE. Default POST.
	Method string `json:"method,omitempty"`
	// Headers are sent with every delivery. Hop-by-hop headers (Connection, Keep-Alive,
	// Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade), Host, Content-Length and the
	// Tock-* headers the executor sets are refused. At most 32, 8 KiB in all.
	Headers map[string]string `json:"headers,omitempty"`
	// Timeout bounds one delivery attempt, from dial to the end of the response's body:
	// 100ms to 1h. Default 30s.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// forbiddenHeaders are refused in Target.Headers (canonical form).
var forbiddenHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Host": true, "Content-Length": true, "Expect": true,
}

// normalize fills the target's defaults and validates it. Header names are put in
// canonical form.
func (t *Target) normalize() error {
	if t.Method == "" {
		t.Method = DefaultTargetMethod
	}
	if t.Timeout == 0 {
		t.Timeout = DefaultTargetTimeout
	}
	if t.URL == "" {
		return fieldErr("target.url", "is required")
	}
	if len(t.URL) > MaxTargetURLLen {
		return fieldErr("target.url", "longer than %d bytes", MaxTargetURLLen)
	}
	u, err := url.Parse(t.URL)
	if err != nil {
		return fieldErr("target.url", "not a URL: %v", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fieldErr("target.url", "the scheme must be http or https, got %q", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return fieldErr("target.url", "has no host")
	case u.User != nil:
		return fieldErr("target.url", "must not hold user information: put credentials in target.headers")
	case u.Fragment != "":
		return fieldErr("target.url", "must not have a fragment")
	}
	if err := ValidateText("target.url", t.URL); err != nil {
		return err
	}
	switch t.Method {
	case "GET", "POST", "PUT", "PATCH", "DELETE":
	default:
		return fieldErr("target.method", "must be GET, POST, PUT, PATCH or DELETE, got %q", t.Method)
	}
	if t.Timeout < MinTargetTimeout || t.Timeout > MaxTargetTimeout {
		return fieldErr("target.timeout", "must be %s to %s, got %s", MinTargetTimeout, MaxTargetTimeout, t.Timeout)
	}
	if len(t.Headers) > MaxTargetHeaders {
		return fieldErr("target.headers", "more than %d headers", MaxTargetHeaders)
	}
	names := make([]string, 0, len(t.Headers))
	for k := range t.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	canon := make(map[string]string, len(names))
	size := 0
	for _, k := range names {
		v := t.Headers[k]
		field := "target.headers." + k
		if !validHeaderName(k) {
			return fieldErr(field, "not a valid header name")
		}
		c := textproto.CanonicalMIMEHeaderKey(k)
		if forbiddenHeaders[c] || strings.HasPrefix(c, "Proxy-") {
			return fieldErr(field, "a hop-by-hop or connection header may not be set")
		}
		if strings.HasPrefix(c, "Tock-") {
			return fieldErr(field, "the Tock-* headers are set by the executor")
		}
		if !validHeaderValue(v) {
			return fieldErr(field, "the value holds a control character")
		}
		if _, dup := canon[c]; dup {
			return fieldErr(field, "given twice (header names are case-insensitive)")
		}
		canon[c] = v
		size += len(k) + len(v)
	}
	if size > MaxTargetHeaderBytes {
		return fieldErr("target.headers", "%d bytes is over the limit of %d bytes", size, MaxTargetHeaderBytes)
	}
	if len(canon) == 0 {
		canon = nil
	}
	t.Headers = canon
	return nil
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether s has no control characters but tab.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
