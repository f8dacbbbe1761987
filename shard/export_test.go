package shard

import "time"

// The storage forms' conformance suite (forms_test.go) needs cold jobs that thaw within
// seconds: set before any test runs, so no test races with it.
func init() { minColdAfter = time.Second }
