package worker

import (
	"time"

	"github.com/tockhq/tock/signature"
)

// SignatureHeader is the header that carries the signature of a push delivery.
const SignatureHeader = signature.Header

// DefaultSignatureTolerance is how far a signature's timestamp may be from now by default.
const DefaultSignatureTolerance = signature.DefaultTolerance

// Errors of VerifySignature (those of package signature: errors.Is matches either name).
var (
	ErrSignatureMalformed = signature.ErrMalformed
	ErrSignatureExpired   = signature.ErrStale
	ErrSignatureMismatch  = signature.ErrMismatch
)

// VerifySignature checks the Tock-Signature header of a push delivery,
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">", against body and any of
// secrets (give two during a rotation: the executor signs with its first --push-secret,
// so a receiver accepts the new and the old one until every executor signs with the new).
// The timestamp must be within tolerance of now (0 means DefaultSignatureTolerance), so
// a captured request cannot be replayed later. Comparisons are constant-time. Several v1
// entries are accepted; any one that matches suffices. It is package signature's Verify
// for string secrets, and is safe for concurrent use.
func VerifySignature(header string, body []byte, secrets []string, tolerance time.Duration, now time.Time) error {
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		keys[i] = []byte(s)
	}
	return signature.Verify(header, body, keys, now, tolerance)
}
