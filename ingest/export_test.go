package ingest

import (
	"time"

	"github.com/tockhq/tock/internal/limit"
)

// SetLogEvery sets the interval of the server's rate-limited logs (0: every line), for
// tests that check every line. Call it before Start.
func SetLogEvery(s *Server, d time.Duration) {
	s.errLog, s.reqLog, s.fhLog = limit.NewEvery(d), limit.NewEvery(d), limit.NewEvery(d)
}

// BodyMemoryHeld returns the bytes of Config.MaxBodyMemory held by requests.
func BodyMemoryHeld(s *Server) int64 { return s.bodyMem.Load() }
