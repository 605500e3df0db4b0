package stress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/internal/stress/workload"
)

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progress shows the run moving: a redrawn bar on a terminal, otherwise a
// plain line every few seconds (logs stay readable).
type progress struct {
	stop chan struct{}
	done chan struct{}
}

func startProgress(w io.Writer, mode Toggle, eng *workload.Engine, kills *atomic.Int64, deleteTotal func() int64) *progress {
	p := &progress{stop: make(chan struct{}), done: make(chan struct{})}
	if mode == Off {
		close(p.done)
		return p
	}
	bar := mode == On || isTerminal(w)
	every := 5 * time.Second
	if bar {
		every = 200 * time.Millisecond
	}
	start := time.Now()
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				if bar {
					fmt.Fprint(w, "\r\033[K")
				}
				return
			case <-t.C:
			}
			line := progressLine(eng.Progress(), kills.Load(), deleteTotal(), time.Since(start), bar)
			if bar {
				fmt.Fprintf(w, "\r\033[K%s", line)
			} else {
				fmt.Fprintln(w, line)
			}
		}
	}()
	return p
}

func (p *progress) close() {
	select {
	case <-p.done:
		return
	default:
	}
	close(p.stop)
	<-p.done
}

// progressLine renders one state of the run.
func progressLine(pr workload.Progress, kills, deleteTotal int64, elapsed time.Duration, bar bool) string {
	done, total := pr.Created+pr.Failed, pr.Volumes
	if pr.Phase == "delete" {
		done, total = pr.Deleted+pr.Undelete, deleteTotal
	}
	frac := 0.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	head := ""
	if bar {
		const width = 30
		n := min(int(frac*width), width)
		head = "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "] "
	}
	return fmt.Sprintf("%s%-6s %d/%d (%3.0f%%)  in flight %d  calls %d  retries %d  failed %d  kills %d  %s",
		head, pr.Phase, done, total, frac*100, pr.InFlight, pr.Calls, pr.Retries, pr.Failed, kills,
		elapsed.Truncate(100*time.Millisecond))
}
