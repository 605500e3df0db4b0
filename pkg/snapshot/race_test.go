//go:build race

package snapshot

// raceEnabled: the race detector slows the model checker about tenfold.
const raceEnabled = true
