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
// gauge and a log line whenever it changes; it never touches Probe.
type efsHealth struct {
	ping      Pinger
	every     time.Duration
	log       *slog.Logger
	reachable atomic.Int32 // -1 not yet known, 0 no, 1 yes
}

// pingTimeout bounds one check: a hung API is an unreachable one.
const pingTimeout = 5 * time.Second

func newEFSHealth(p Pinger, log *slog.Logger) *efsHealth {
	h := &efsHealth{ping: p, every: 30 * time.Second, log: log}
	h.reachable.Store(-1)
	return h
}

// run checks at once, then every h.every, until ctx ends.
func (h *efsHealth) run(ctx context.Context) {
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err := h.ping.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		now := int32(1)
		if err != nil {
			now = 0
		}
		switch was := h.reachable.Swap(now); {
		case now == 0 && was != 0:
			h.log.Warn("EFS API unreachable; calls that need it answer UNAVAILABLE until it is back", slog.String("error", err.Error()))
		case now == 1 && was == 0:
			h.log.Info("EFS API reachable again")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// value is the gauge: 1 reachable, 0 not, -1 not checked yet.
func (h *efsHealth) value() float64 { return float64(h.reachable.Load()) }
