package worker_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/worker"
)

func TestVerifySignature(t *testing.T) {
	t.Parallel()
	body := []byte(`{"a":1}`)
	m := hmac.New(sha256.New, []byte("s1"))
	m.Write([]byte("1700000000." + string(body)))
	sig := hex.EncodeToString(m.Sum(nil))
	at := time.Unix(1700000000, 0)
	h := "t=1700000000,v1=" + sig
	require.NoError(t, worker.VerifySignature(h, body, []string{"s1"}, 0, at.Add(time.Minute)))
	require.NoError(t, worker.VerifySignature(h, body, []string{"s0", "s1"}, 0, at), "rotation: any secret")
	require.NoError(t, worker.VerifySignature("t=1700000000,v1="+hex.EncodeToString(make([]byte, 32))+",v1="+sig, body, []string{"s1"}, 0, at))
	require.ErrorIs(t, worker.VerifySignature(h, body, []string{"s0"}, 0, at), worker.ErrSignatureMismatch)
	require.ErrorIs(t, worker.VerifySignature(h, []byte(`{"a":2}`), []string{"s1"}, 0, at), worker.ErrSignatureMismatch)
	require.ErrorIs(t, worker.VerifySignature(h, body, []string{"s1"}, time.Minute, at.Add(2*time.Minute)), worker.ErrSignatureExpired)
	require.ErrorIs(t, worker.VerifySignature(h, body, []string{"s1"}, time.Minute, at.Add(-2*time.Minute)), worker.ErrSignatureExpired)
	for _, bad := range []string{"", "t=1700000000", "v1=" + sig, "t=x,v1=" + sig, "t=1700000000,v1=zz", "t=1700000000,v1=ab", "garbage"} {
		require.ErrorIs(t, worker.VerifySignature(bad, body, []string{"s1"}, 0, at), worker.ErrSignatureMalformed, bad)
	}
}
