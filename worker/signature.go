package worker

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader is the header that carries the signature of a push delivery.
const SignatureHeader = "Tock-Signature"

// DefaultSignatureTolerance is how far a signature's timestamp may be from now by default.
const DefaultSignatureTolerance = 5 * time.Minute

// Errors of VerifySignature.
var (
	ErrSignatureMalformed = errors.New("tock signature: malformed header")
	ErrSignatureExpired   = errors.New("tock signature: timestamp outside the tolerance")
	ErrSignatureMismatch  = errors.New("tock signature: no signature matches")
)

// VerifySignature checks the Tock-Signature header of a push delivery,
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">", against body and any of
// secrets (give two during a rotation: the executor signs with its first --push-secret,
// so a receiver accepts the new and the old one until every executor signs with the new).
// The timestamp must be within tolerance of now (0 means DefaultSignatureTolerance), so
// a captured request cannot be replayed later. Comparisons are constant-time. Several v1
// entries are accepted; any one that matches suffices. It is safe for concurrent use.
func VerifySignature(header string, body []byte, secrets []string, tolerance time.Duration, now time.Time) error {
	if tolerance <= 0 {
		tolerance = DefaultSignatureTolerance
	}
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrSignatureMalformed
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != sha256.Size {
				return ErrSignatureMalformed
			}
			sigs = append(sigs, b)
		}
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrSignatureMalformed
	}
	if d := now.Sub(time.Unix(t, 0)); d > tolerance || d < -tolerance {
		return ErrSignatureExpired
	}
	ok := 0
	for _, secret := range secrets {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(ts))
		m.Write([]byte{'.'})
		m.Write(body)
		want := m.Sum(nil)
		for _, s := range sigs {
			ok |= subtleEq(want, s)
		}
	}
	if ok == 0 {
		return ErrSignatureMismatch
	}
	return nil
}

func subtleEq(a, b []byte) int {
	if hmac.Equal(a, b) {
		return 1
	}
	return 0
}
