package bench_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tockhq/tock/bench"
	"github.com/tockhq/tock/internal/redistest"
)

// The ui scenario loads the jobs and measures every page, each answering 200 with its
// content (checked by the scenario); no speed is asserted.
func TestUI_MeasuresEveryPage(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b redistest.Backend) {
		c := common(b)
		c.Dispatchers = 0
		res, err := bench.UI(context.Background(), bench.UIConfig{Common: c, Jobs: 300, Samples: 2, Payload: 10})
		require.NoError(t, err)
		require.Equal(t, 300, res.Jobs)
		require.Len(t, res.Pages, 12)
		for _, p := range res.Pages {
			require.Equal(t, 2, p.Samples, p.Name)
			require.True(t, 0 < p.P50 && p.P50 <= p.P99 && p.P99 <= p.Max, "%+v", p)
		}
		require.Equal(t, "ui overview", res.Pages[0].Name)
		require.Positive(t, res.MaxPageMs)
	})
}
