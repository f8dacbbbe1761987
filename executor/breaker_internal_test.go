package executor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Defaults apply however often: a negative Failures (no consecutive-failure rule) stays
// off after the executor's config and its breakers both applied them (it became 5).
func TestBreakerConfig_DefaultsApplyOnce(t *testing.T) {
	c := BreakerConfig{Failures: -1, Ratio: 0.5}.withDefaults().withDefaults()
	p := c.policy().WithDefaults()
	require.Zero(t, p.Failures, "no consecutive-failure rule")
	require.Equal(t, 0.5, p.Ratio)
	require.Equal(t, 20, p.MinRequests)
	require.Equal(t, 30*time.Second, p.Cooldown)
	d := BreakerConfig{}.withDefaults().withDefaults().policy().WithDefaults()
	require.Equal(t, 5, d.Failures)
	require.Equal(t, time.Minute, d.Window)
	require.Equal(t, 2*time.Minute, d.ProbeTimeout)
}
