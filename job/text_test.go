package job

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateID_DotSegments(t *testing.T) {
	t.Parallel()
	for _, id := range []string{".", ".."} {
		err := ValidateID("id", id, MaxIDLen)
		var fe *FieldError
		require.ErrorAs(t, err, &fe, id)
		require.Equal(t, "id", fe.Field)
	}
	for _, id := range []string{"...", ".a", "a.", "a..b", "-", "~"} {
		require.NoError(t, ValidateID("id", id, MaxIDLen), id)
	}
	j := &Job{ID: "..", Type: "t", Schedule: Schedule{Now: true}}
	require.ErrorContains(t, j.Normalize(0), "id")
	j = &Job{Queue: ".", Type: "t", Schedule: Schedule{Now: true}}
	require.ErrorContains(t, j.Normalize(0), "queue")
}

func TestValidateText(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"\x00", "\x1b[2J", "a\tb", "a\r", "\x7f", "\u0080", "\u0085", "\u009b", "\u009f",
		"\u061c", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
		"\u2066", "\u2067", "\u2068", "\u2069", "\u2028", "\u2029", "a\xffb", "\xc3",
	} {
		err := ValidateText("type", "x"+s+"y")
		var fe *FieldError
		require.ErrorAs(t, err, &fe, "%q", s)
		require.Equal(t, "type", fe.Field)
		require.NotContains(t, fe.Msg, s, "the message must not carry the character itself")
	}
	for _, s := range []string{"", "email.welcome", "a b", "Rechnung versenden", "日本語", "🎉", "\ufffd", "a\u200db"} {
		require.NoError(t, ValidateText("type", s), "%q", s)
	}
	j := &Job{Type: "evil\u202etxt", Schedule: Schedule{Now: true}}
	require.ErrorContains(t, j.Normalize(0), "U+202E")
}
