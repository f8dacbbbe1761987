//go:build race

package job

// raceEnabled reports a build with the race detector, which makes the long property
// tests about ten times slower: they check fewer cases then.
const raceEnabled = true
