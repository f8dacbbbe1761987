package shard

import "time"

// The storage forms' conformance suite (forms_test.go) needs cold jobs that thaw within
// seconds: set before any test runs, so no test races with it.
func init() { minColdAfter = time.Second }

// LoadScripts is the scripts every Store of the process shares (loadScripts): tests that
// read the library take them from there rather than paying another lua.Load.
var LoadScripts = loadScripts
