package progress

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/testutil"
)

func TestBarRedrawsInPlaceAndIsErasedOnClose(t *testing.T) {
	if got := Bar(0.5, 10); got != "[#####.....] " {
		t.Errorf("Bar(0.5) = %q", got)
	}
	if got := Bar(2, 4); got != "[####] " {
		t.Errorf("Bar(2) = %q", got)
	}
	var w testutil.Buffer
	d := Start(&w, true, true, func(bar bool) string { return "step" })
	time.Sleep(450 * time.Millisecond)
	d.Close()
	d.Close()
	out := w.String()
	if !strings.HasPrefix(out, "\r\033[Kstep") || !strings.HasSuffix(out, "\r\033[K") || strings.Contains(out, "\n") {
		t.Errorf("bar output %q", out)
	}
	var none testutil.Buffer
	Start(&none, false, true, func(bool) string { return "x" }).Close()
	if none.String() != "" {
		t.Errorf("hidden display wrote %q", none.String())
	}
	if IsTerminal(&none) {
		t.Error("a buffer is a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) {
		t.Error("a file is a terminal")
	}
}

// A task shorter than a tick still leaves its final line, in a log and on
// a terminal (after the erased bar); a hidden display leaves nothing.
func TestDoneLeavesAFinalLineEvenForAShortTask(t *testing.T) {
	for _, bar := range []bool{false, true} {
		var w testutil.Buffer
		d := Start(&w, true, bar, func(bool) string { return "tick" })
		d.Done("done: 3 things")
		d.Done("again") // a second Done adds nothing: the display is closed
		got := w.String()
		if !strings.HasSuffix(got, "done: 3 things\n") || strings.Contains(got, "tick") {
			t.Errorf("bar %v: output %q", bar, got)
		}
	}
	var none testutil.Buffer
	Start(&none, false, false, func(bool) string { return "x" }).Done("final")
	if none.String() != "" {
		t.Errorf("a hidden display wrote %q", none.String())
	}
}
