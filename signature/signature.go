// Package signature signs and verifies the Tock-Signature header of push deliveries:
//
//	Tock-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>[,v1=<hex>...]
//
// Each v1 entry is the lowercase hex HMAC-SHA256, under one of the target's secrets, of
// the decimal timestamp, a dot, and the raw body bytes ("1764000000.{...}"). While a
// secret is rotated, two are active and the header carries one v1 entry per secret: a
// receiver accepts the request when any entry matches any secret it knows. Entries under
// other keys (a later scheme, v2=...) are ignored.
//
// A receiver should refuse a request whose timestamp is further than a tolerance
// (DefaultTolerance, 5 minutes) from its clock, in the past (a replay) or the future, and
// compare in constant time; Verify does both. The reference clients in clients/python
// and clients/node implement the same check, against the same test vectors
// (clients/testdata/signatures.json).
package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Header is the name of the HTTP header that carries the signature.
const Header = "Tock-Signature"

// DefaultTolerance is how far a signature's timestamp may be from the receiver's clock
// when Verify is given no tolerance.
const DefaultTolerance = 5 * time.Minute

// MaxHeader is the longest header Verify parses; a longer one is malformed.
const MaxHeader = 4096

// The errors of Verify, to test with errors.Is.
var (
	ErrMalformed = errors.New("malformed signature header")
	ErrStale     = errors.New("signature timestamp outside the tolerance")
	ErrMismatch  = errors.New("no signature matches")
	ErrNoSecret  = errors.New("no secret to verify with")
)

// Sign returns the header value for body sent at t, with one v1 entry per secret (two
// while a secret is rotated).
func Sign(secret []byte, t time.Time, body []byte, more ...[]byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(ts)
	for _, s := range append([][]byte{secret}, more...) {
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(mac(s, ts, body)))
	}
	return b.String()
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks header against body: it returns nil when a v1 entry is the signature of
// body under one of secrets and the timestamp is within tolerance of now (0: the
// DefaultTolerance), else an error wrapping ErrMalformed (the header does not parse: no
// or several t, no v1 entry, an entry that is not key=value, a v1 that is not 64 hex
// digits), ErrStale (checked before the signatures) or ErrMismatch.
func Verify(header string, body []byte, secrets [][]byte, now time.Time, tolerance time.Duration) error {
	ts, sigs, err := parse(header)
	if err != nil {
		return err
	}
	if len(secrets) == 0 {
		return ErrNoSecret
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: t=%q", ErrMalformed, ts)
	}
	tol := int64(tolerance / time.Second)
	if d := now.Unix() - sec; d > tol || d < -tol {
		return fmt.Errorf("%w: t=%d is %ds from now (tolerance %s)", ErrStale, sec, d, tolerance)
	}
	ok := 0
	for _, s := range secrets {
		want := mac(s, ts, body)
		for _, got := range sigs {
			ok |= subtle.ConstantTimeCompare(want, got) // no early exit
		}
	}
	if ok == 0 {
		return ErrMismatch
	}
	return nil
}

// parse splits a header into its timestamp (decimal digits) and its v1 signatures.
func parse(header string) (ts string, sigs [][]byte, err error) {
	if len(header) > MaxHeader {
		return "", nil, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxHeader)
	}
	seenT := false
	for item := range strings.SplitSeq(header, ",") {
		k, v, found := strings.Cut(strings.TrimSpace(item), "=")
		if !found || k == "" {
			return "", nil, fmt.Errorf("%w: entry %q is not key=value", ErrMalformed, item)
		}
		switch k {
		case "t":
			if seenT {
				return "", nil, fmt.Errorf("%w: several t entries", ErrMalformed)
			}
			seenT = true
			if v == "" || len(v) > 12 || strings.TrimLeft(v, "0123456789") != "" {
				return "", nil, fmt.Errorf("%w: t=%q is not unix seconds", ErrMalformed, v)
			}
			ts = v
		case "v1":
			b, derr := hex.DecodeString(v)
			if derr != nil || len(b) != sha256.Size {
				return "", nil, fmt.Errorf("%w: v1=%q is not 64 hex digits", ErrMalformed, v)
			}
			sigs = append(sigs, b)
		}
	}
	if !seenT {
		return "", nil, fmt.Errorf("%w: no t entry", ErrMalformed)
	}
	if len(sigs) == 0 {
		return "", nil, fmt.Errorf("%w: no v1 entry", ErrMalformed)
	}
	return ts, sigs, nil
}
