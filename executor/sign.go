package executor

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
)

// Sign returns the Tock-Signature header value of body signed with secret at time t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">". worker.VerifySignature
// checks it. (The clients branch may add a shared signature package; this is the same
// format.)
func Sign(secret string, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}
