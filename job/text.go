package job

// isDotSegment reports whether id is "." or "..": a URL path cannot address such a
// segment (clients and proxies resolve it away), so no identifier may be one.
func isDotSegment(id string) bool { return id == "." || id == ".." }
