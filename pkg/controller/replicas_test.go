package controller

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"
)

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// Two controller processes active at once on one file system (leader-election
// overlap) share no memory: only EFS. Creates of the same names converge on
// one access point each (client token), and GIDs stay unique (verification
// after create, the later of two colliding creates yields).
func TestTwoActiveControllersNeitherLeakNorShareGIDs(t *testing.T) {
	clk := newClock()
	logs := func(c *Config) {
		c.Now = clk.Now
		if testing.Verbose() {
			c.Logger = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
	}
	a := newBed(t, logs)
	b := newBedOn(t, a.url, a.emu, logs)
	keepTokens(a, b) // yields must not count on EFS freeing a deleted access point's token
	// A narrow range makes collisions between two blind allocators near certain.
	p := params("gidRangeStart", "50000", "gidRangeEnd", "50300")
	const n = 60
	var wg sync.WaitGroup
	vols := sync.Map{}
	for i := range n {
		for _, c := range []*bed{a, b} {
			// Every name is created by both processes, half of them at once.
			name := fmt.Sprintf("pvc-%d", i)
			if c == b && i%2 == 0 {
				name = fmt.Sprintf("pvc-b-%d", i)
			}
			wg.Go(func() {
				for {
					r, err := c.svc.CreateVolume(c.ctx(), createReq(name, 1<<30, p))
					if err == nil {
						if prev, loaded := vols.LoadOrStore(name, r.Volume.VolumeId); loaded && prev != r.Volume.VolumeId {
							t.Errorf("%s: %s and %s", name, prev, r.Volume.VolumeId)
						}
						return
					}
					if !retryable(err) {
						t.Errorf("create %s: %v", name, err)
						return
					}
					if testing.Verbose() {
						t.Logf("%s retry: %v", name, err)
					}
					// The provisioner's back-off: time passes between retries,
					// so access points found by their token settle.
					clk.Advance(time.Second)
				}
			})
		}
	}
	wg.Wait()
	aps := a.accessPoints()
	names := 0
	vols.Range(func(any, any) bool { names++; return true })
	if len(aps) != names {
		t.Errorf("%d access points for %d volumes", len(aps), names)
	}
	seen := map[int64]string{}
	for _, ap := range aps {
		if other, dup := seen[ap.PosixUser.GID]; dup {
			t.Errorf("GID %d on %s and %s", ap.PosixUser.GID, ap.ID, other)
		}
		seen[ap.PosixUser.GID] = ap.ID
	}
}
