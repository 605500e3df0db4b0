package stress

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/progress"
	"github.com/efs-csi/efs-csi-driver/internal/stress/workload"
)

// startProgress shows the run moving: a redrawn bar on a terminal (or
// with --progress=true), otherwise a plain line every few seconds.
func startProgress(w io.Writer, mode Toggle, eng *workload.Engine, kills *atomic.Int64, deleteTotal func() int64) *progress.Display {
	start := time.Now()
	return progress.Start(w, mode != Off, mode == On || progress.IsTerminal(w), func(bar bool) string {
		return progressLine(eng.Progress(), kills.Load(), deleteTotal(), time.Since(start), bar)
	})
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
		head = progress.Bar(frac, 30)
	}
	return fmt.Sprintf("%s%-6s %d/%d (%3.0f%%)  in flight %d  calls %d  retries %d  failed %d  kills %d  %s",
		head, pr.Phase, done, total, frac*100, pr.InFlight, pr.Calls, pr.Retries, pr.Failed, kills,
		elapsed.Truncate(100*time.Millisecond))
}
