package prom

import (
	"github.com/prometheus/client_golang/prometheus"
)

// breakerStates are the states of a push target's breaker, in the order of the
// tock_breaker_state gauge's values (0 closed, 1 half_open, 2 open).
var breakerStates = []string{"closed", "half_open", "open"}

// Breakers exports the push executor's breakers (it implements executor.Metrics):
// tock_breaker_state{host} (0 closed, 1 half-open, 2 open, as this process last saw it)
// and tock_breaker_transitions_total{host,state} (the transitions this process made).
// Hosts are labels: their number is bounded by the egress allow list's targets. Safe for
// concurrent use.
type Breakers struct {
	state       *prometheus.GaugeVec
	transitions *prometheus.CounterVec
}

// NewBreakers registers the breaker metrics in m's registry.
func (m *Metrics) NewBreakers() (*Breakers, error) {
	b := &Breakers{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tock_breaker_state", Help: "State of the circuit breaker of a push target host as this process last saw it: 0 closed, 1 half-open, 2 open.",
		}, []string{"host"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tock_breaker_transitions_total", Help: "Transitions of push target hosts' circuit breakers made by this process, by host and the state entered.",
		}, []string{"host", "state"}),
	}
	for _, c := range []prometheus.Collector{b.state, b.transitions} {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// BreakerState records the state of host's breaker.
func (b *Breakers) BreakerState(host, state string) {
	for i, s := range breakerStates {
		if s == state {
			b.state.WithLabelValues(host).Set(float64(i))
			return
		}
	}
}

// BreakerTransition counts a transition of host's breaker into state.
func (b *Breakers) BreakerTransition(host, state string) {
	b.transitions.WithLabelValues(host, state).Inc()
}
