package ingest

import "time"

// QuietForLeakCheck adjusts fasthttp for the goroutine leak check of redistest.Main:
//   - its worker pool's janitor sleeps MaxIdleWorkerDuration (10s by default) between
//     rounds and notices a stopped server only after one, so it is shortened;
//   - the Date header is written by a process-wide goroutine that never ends
//     (fasthttp.updateServerDate), so it is left out.
func QuietForLeakCheck(s *Server) {
	s.srv.MaxIdleWorkerDuration = 10 * time.Millisecond
	s.srv.NoDefaultDate = true
}
