// Package limit rate-limits events such as repeated error logs of a loop.
package limit

import (
	"sync"
	"time"
)

// Every lets one event through per interval. The zero value is not usable; use NewEvery.
// It is safe for concurrent use.
type Every struct {
	mu         sync.Mutex
	every      time.Duration
	last       time.Time
	suppressed int // events refused since the last allowed one
}

// NewEvery returns a limiter that allows one event per d.
func NewEvery(d time.Duration) *Every { return &Every{every: d} }

// Allow reports whether an event may happen now, and if so records it.
func (l *Every) Allow() bool {
	ok, _ := l.Take()
	return ok
}

// Take is Allow that also returns, when the event may happen, how many were refused
// since the last one that was allowed: a rate-limited log line says how many it stands
// for ("suppressed").
func (l *Every) Take() (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && time.Since(l.last) < l.every {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = time.Now(), 0
	return true, n
}
