package executor

import (
	"time"

	"github.com/tockhq/tock/signature"
)

// Sign returns the Tock-Signature header value of body signed with secret at time t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">" (package signature, which the
// receivers' helpers share: worker.VerifySignature and the reference clients).
func Sign(secret string, body []byte, t time.Time) string {
	return signature.Sign([]byte(secret), t, body)
}
