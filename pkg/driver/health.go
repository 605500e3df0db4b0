package driver

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Pinger reports whether the EFS API can be reached.
type Pinger interface {
	Ping(ctx context.Context) error
}

// efsHealth pings the EFS API in the background and reports the answer as a
// gauge and a log line whenever it changes; it never touches Probe, and it
// never stops a call from being sent: it only says what it saw.
//
// One failed check is not an outage: a single 500 or a dropped connection
// is what EFS answers now and then, and the calls themselves retry it. The
// API counts as unreachable only after unreachableAfter checks in a row
// failed; a failed check is repeated after recheckEvery rather than every,
// so that an outage is still reported within seconds.
type efsHealth struct {
	ping         Pinger
	every        time.Duration // between checks while they succeed
	recheckEvery time.Duration // after a failed check
	log          *slog.Logger
	reachable    atomic.Int32 // -1 not yet known, 0 no, 1 yes
	failed       int          // checks failed in a row (run's goroutine only)
}

// pingTimeout bounds one check: a hung API is an unreachable one.
const pingTimeout = 5 * time.Second

// unreachableAfter is how many checks in a row must fail before the API is
// reported unreachable.
const unreachableAfter = 3

func newEFSHealth(p Pinger, log *slog.Logger) *efsHealth {
	h := &efsHealth{ping: p, every: 30 * time.Second, recheckEvery: 3 * time.Second, log: log}
	h.reachable.Store(-1)
	return h
}

// run checks at once, then every h.every (h.recheckEvery after a failure),
// until ctx ends.
func (h *efsHealth) run(ctx context.Context) {
	for {
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err := h.ping.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		h.observe(err)
		wait := h.every
		if err != nil {
			wait = h.recheckEvery
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// observe takes one check's answer: the gauge and the log change only when
// the API's state does (reachable, or unreachableAfter failures in a row).
// What the log says is what the driver does: calls are sent all along, and
// each answers UNAVAILABLE only if EFS does not answer it.
func (h *efsHealth) observe(err error) {
	if err == nil {
		h.failed = 0
		if was := h.reachable.Swap(1); was == 0 {
			h.log.Info("EFS API reachable again")
		}
		return
	}
	h.failed++
	if h.failed < unreachableAfter {
		h.log.Info("EFS API check failed; calls are still sent",
			slog.Int("failedInARow", h.failed), slog.Int("reportedUnreachableAfter", unreachableAfter), slog.String("error", err.Error()))
		return
	}
	if was := h.reachable.Swap(0); was != 0 {
		h.log.Warn("EFS API unreachable: checks keep failing; calls are still sent, and each that EFS does not answer ends UNAVAILABLE",
			slog.Int("failedInARow", h.failed), slog.String("error", err.Error()))
	}
}

// value is the gauge: 1 reachable, 0 not (unreachableAfter checks in a row
// failed), -1 not known yet.
func (h *efsHealth) value() float64 { return float64(h.reachable.Load()) }
