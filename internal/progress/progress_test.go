package progress

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// openPTY opens a pseudo-terminal cols wide: the master (what a terminal
// emulator reads) and the slave (what the program writes to).
func openPTY(t *testing.T, cols uint16) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal slave: %v", err)
	}
	t.Cleanup(func() { slave.Close() })
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: cols}); err != nil {
		t.Fatal(err)
	}
	return master, slave
}

// On a terminal narrower than the line, each redraw is cut to fit: a line
// that wrapped could not be redrawn in place (each \r would go back to the
// start of its last row only, leaving the first rows behind).
func TestOnANarrowTerminalTheLineIsCutToFit(t *testing.T) {
	master, slave := openPTY(t, 40)
	if !IsTerminal(slave) || Width(slave) != 40 {
		t.Fatalf("a 40-column pseudo-terminal: IsTerminal %v, Width %d", IsTerminal(slave), Width(slave))
	}
	long := strings.Repeat("access points 5000 ", 10)
	d := Start(slave, true, true, func(bool) string { return long })
	read, drawn := make(chan string), make(chan struct{})
	go func(notify chan struct{}) {
		var all []byte
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			all = append(all, buf[:n]...)
			if notify != nil && strings.Contains(string(all), "…") {
				close(notify) // the first redraw is on the terminal
				notify = nil
			}
			if err != nil || strings.Contains(string(all), "done") {
				read <- string(all)
				return
			}
		}
	}(drawn)
	select {
	case <-drawn:
	case <-time.After(10 * time.Second):
		t.Fatal("no redraw within 10s")
	}
	d.Done("done")
	out := <-read
	draws := 0
	for _, seg := range strings.Split(out, "\r\033[K") {
		seg = strings.TrimRight(seg, "\r\n")
		if seg == "" || strings.HasPrefix(seg, "done") {
			continue
		}
		draws++
		if n := len([]rune(seg)); n >= 40 || !strings.HasSuffix(seg, "…") {
			t.Errorf("a redraw of %d columns on a 40-column terminal: %q", n, seg)
		}
	}
	if draws == 0 || !strings.Contains(out, "done") {
		t.Errorf("terminal output %q: %d redraws", out, draws)
	}
	if got := fit("short", 40); got != "short" {
		t.Errorf("fit cut a short line: %q", got)
	}
}
