package ingest

import "time"

// SetLogEvery sets the interval of the server's rate-limited logs (0: every line), for
// tests that check every line.
func SetLogEvery(s *Server, d time.Duration) {
	s.errLog.every, s.reqLog.every, s.fhLog.every = d, d, d
}

// BodyMemoryHeld returns the bytes of Config.MaxBodyMemory held by requests.
func BodyMemoryHeld(s *Server) int64 { return s.bodyMem.Load() }
