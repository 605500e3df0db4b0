// Package progress shows a long task moving: a line redrawn in place on a
// terminal, otherwise a plain line every few seconds, so that logs stay
// readable, and (Done) a final line of its own, so that even a task too
// short for a tick says what it did. The stress tool and the cluster
// audit draw theirs with it.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Width is the width in columns of the terminal w is, 0 if w is none.
func Width(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// fit cuts line to fewer than width columns (a line as wide as the
// terminal wraps, and a wrapped line cannot be redrawn in place: each
// redraw would leave its first part behind); width 0: as it is.
func fit(line string, width int) string {
	if width <= 1 {
		return line
	}
	r := []rune(line)
	if len(r) < width {
		return line
	}
	return string(r[:width-2]) + "…"
}

// Bar draws frac (0 to 1) as "[####......] ", width characters inside.
func Bar(frac float64, width int) string {
	n := min(max(int(frac*float64(width)), 0), width)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "] "
}

// Display redraws a line until Close.
type Display struct {
	w     io.Writer
	show  bool
	final sync.Once
	stop  chan struct{}
	done  chan struct{}
}

// Start calls line every 200ms and redraws it in place when bar (a
// terminal), cut to the terminal's width, else every 5s and prints it on a
// line of its own; line is told which. With show false nothing is shown.
func Start(w io.Writer, show, bar bool, line func(bar bool) string) *Display {
	d := &Display{w: w, show: show, stop: make(chan struct{}), done: make(chan struct{})}
	if !show {
		close(d.done)
		return d
	}
	every := 5 * time.Second
	if bar {
		every = 200 * time.Millisecond
	}
	go func() {
		defer close(d.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-d.stop:
				if bar {
					fmt.Fprint(w, "\r\033[K")
				}
				return
			case <-t.C:
			}
			if bar {
				fmt.Fprintf(w, "\r\033[K%s", fit(line(true), Width(w)))
			} else {
				fmt.Fprintln(w, line(false))
			}
		}
	}()
	return d
}

// Done stops the display, erases the bar and prints final on a line of its
// own (when the display is shown), so that a log, or a terminal once the
// task is over, keeps what it came to.
func (d *Display) Done(final string) {
	d.Close()
	d.final.Do(func() {
		if d.show {
			fmt.Fprintln(d.w, final)
		}
	})
}

// Close stops the display and erases the bar; it may be called again.
func (d *Display) Close() {
	select {
	case <-d.done:
		return
	default:
	}
	close(d.stop)
	<-d.done
}
