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
