//go:build race

package core

// raceEnabled: the race detector slows the model checker about tenfold and
// finds nothing in it (one goroutine); make test runs it without as well.
const raceEnabled = true
