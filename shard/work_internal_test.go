package shard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A packed job's value gives its type, payload and settings; a damaged one an error that
// says where.
func TestParsePacked(t *testing.T) {
	var c Claimed
	v := "1795000000000|45000|q|3|id|1795000000000|0|dh|.t=4:mailto=4:5000ma=1:3p=7:a|b=c:d"
	require.NoError(t, c.parsePacked(v))
	require.Equal(t, Claimed{Type: "mail", Payload: []byte("a|b=c:d"), Timeout: 5 * time.Second, MaxAttempts: 3}, c)

	c = Claimed{Visibility: time.Minute}
	require.NoError(t, c.parsePacked("1|45000|q|3|id|1|0|dh|.vt=5:45000t=1:x"))
	require.Equal(t, Claimed{Type: "x", Payload: []byte{}, Visibility: 45 * time.Second}, c)

	for v, msg := range map[string]string{
		"1|2|3":                        "short header",
		"1|2|q|3|id|1|0|dh|":           "short header",
		"1|2|q|3|id|1|0|dh|.t4:mail":   "bad field",
		"1|2|q|3|id|1|0|dh|.t=9:mail":  "bad field length",
		"1|2|q|3|id|1|0|dh|.to=2:xx":   `to "xx"`,
		"1|2|q|3|id|1|0|dh|.ma=1:x":    `ma "x"`,
		"1|2|q|3|id|1|0|dh|.t=-1:mail": "bad field length",
	} {
		require.ErrorContains(t, new(Claimed).parsePacked(v), msg, v)
	}
}
