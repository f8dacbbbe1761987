// Package clients holds the reference clients of tock's HTTP API in other languages
// (python/: standard library only, Python 3.9+; node/: no dependencies, Node 18+) and
// clients_test.go, which runs them against a real tock server on a real redis-server:
// their unit tests, jobs created in one language and run by workers of another (Go
// included), the redelivery of a killed Python worker's run, and the push signature
// check (testdata/signatures.json holds the vectors shared with the signature package).
package clients
