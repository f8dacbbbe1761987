// Package limit rate-limits events such as repeated error logs of a loop.
package limit

import (
	"sync"
	"time"
)

// Every lets one event through per interval. The zero value is not usable; use NewEvery.
// It is safe for concurrent use.
type Every struct {
	mu    sync.Mutex
	every time.Duration
	last  time.Time
}

// NewEvery returns a limiter that allows one event per d.
func NewEvery(d time.Duration) *Every { return &Every{every: d} }

// Allow reports whether an event may happen now, and if so records it.
func (l *Every) Allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && time.Since(l.last) < l.every {
		return false
	}
	l.last = time.Now()
	return true
}
