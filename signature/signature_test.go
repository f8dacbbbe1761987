package signature_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/signature"
)

type vectors struct {
	Sign []struct {
		Name    string   `json:"name"`
		Secrets []string `json:"secrets"`
		T       int64    `json:"t"`
		Body    string   `json:"body"`
		Header  string   `json:"header"`
	} `json:"sign"`
	Verify []struct {
		Name      string   `json:"name"`
		Header    string   `json:"header"`
		Body      string   `json:"body"`
		Secrets   []string `json:"secrets"`
		Now       int64    `json:"now"`
		Tolerance int64    `json:"tolerance_seconds"`
		Error     *string  `json:"error"`
	} `json:"verify"`
}

func load(t *testing.T) vectors {
	t.Helper()
	b, err := os.ReadFile("../clients/testdata/signatures.json")
	require.NoError(t, err)
	var v vectors
	require.NoError(t, json.Unmarshal(b, &v))
	require.NotEmpty(t, v.Sign)
	require.NotEmpty(t, v.Verify)
	return v
}

func secrets(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// The vectors shared with the Python and Node clients.
func TestVectors(t *testing.T) {
	v := load(t)
	for _, c := range v.Sign {
		t.Run("sign "+c.Name, func(t *testing.T) {
			s := secrets(c.Secrets)
			require.Equal(t, c.Header, signature.Sign(s[0], time.Unix(c.T, 0), []byte(c.Body), s[1:]...))
			require.NoError(t, signature.Verify(c.Header, []byte(c.Body), s[len(s)-1:], time.Unix(c.T, 0), 0))
		})
	}
	kinds := map[string]error{"malformed": signature.ErrMalformed, "stale": signature.ErrStale, "mismatch": signature.ErrMismatch}
	for _, c := range v.Verify {
		t.Run("verify "+c.Name, func(t *testing.T) {
			err := signature.Verify(c.Header, []byte(c.Body), secrets(c.Secrets), time.Unix(c.Now, 0), time.Duration(c.Tolerance)*time.Second)
			if c.Error == nil {
				require.NoError(t, err)
				return
			}
			want, ok := kinds[*c.Error]
			require.True(t, ok, "unknown kind %q", *c.Error)
			require.ErrorIs(t, err, want)
		})
	}
}

func TestVerify_Edges(t *testing.T) {
	now := time.Unix(1764000000, 0)
	body := []byte(`{"a":1}`)
	h := signature.Sign([]byte("k1"), now, body)
	require.ErrorIs(t, signature.Verify(h, body, nil, now, 0), signature.ErrNoSecret)
	// The default tolerance is 5 minutes.
	require.NoError(t, signature.Verify(h, body, [][]byte{[]byte("k1")}, now.Add(5*time.Minute), 0))
	require.ErrorIs(t, signature.Verify(h, body, [][]byte{[]byte("k1")}, now.Add(5*time.Minute+time.Second), 0), signature.ErrStale)
	require.ErrorIs(t, signature.Verify(h, body, [][]byte{[]byte("k1")}, now.Add(2*time.Second), time.Second), signature.ErrStale)
	// An oversized header is refused before parsing.
	long := h + strings.Repeat(",x=y", signature.MaxHeader)
	require.ErrorIs(t, signature.Verify(long, body, [][]byte{[]byte("k1")}, now, 0), signature.ErrMalformed)
	require.True(t, errors.Is(signature.Verify("t=1", body, [][]byte{[]byte("k1")}, now, 0), signature.ErrMalformed))
}

func ExampleVerify() {
	secret := []byte("whsec_0123456789abcdef")
	body := []byte(`{"job_id":"welcome-42"}`)
	now := time.Unix(1764000000, 0)
	header := signature.Sign(secret, now, body) // what tock sends in Tock-Signature
	err := signature.Verify(header, body, [][]byte{secret}, now.Add(2*time.Second), 0)
	fmt.Println(err == nil)
	// Output: true
}
