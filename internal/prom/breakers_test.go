package prom

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestBreakers(t *testing.T) {
	t.Parallel()
	m, err := New(Config{})
	require.NoError(t, err)
	b, err := m.NewBreakers()
	require.NoError(t, err)
	b.BreakerState("h:443", "open")
	b.BreakerTransition("h:443", "open")
	require.NoError(t, testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP tock_breaker_state State of the circuit breaker of a push target host as this process last saw it: 0 closed, 1 half-open, 2 open.
# TYPE tock_breaker_state gauge
tock_breaker_state{host="h:443"} 2
# HELP tock_breaker_transitions_total Transitions of push target hosts' circuit breakers made by this process, by host and the state entered.
# TYPE tock_breaker_transitions_total counter
tock_breaker_transitions_total{host="h:443",state="open"} 1
`), "tock_breaker_state", "tock_breaker_transitions_total"))
}
