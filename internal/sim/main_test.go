package sim

import (
	"os"
	"runtime"
	"testing"
)

// TestMain runs the simulator on one P. Goroutines that one step wakes
// together (the callers sharing one listing, say) run in the runtime's
// order, which on one P is the order they were woken: on two they race for
// the controller's locks, and about one seed in a thousand then differs
// between two runs (TestDeterminism -sim.detseeds=3000 under GOMAXPROCS=2).
func TestMain(m *testing.M) {
	runtime.GOMAXPROCS(1)
	os.Exit(m.Run())
}
