package ingest

// SetPullWaiting sets a function called whenever a claim of POST /v1/runs:claim starts
// to wait (it found nothing ready).
func SetPullWaiting(s *Server, f func()) { s.runsPull.waiting.Store(&f) }
