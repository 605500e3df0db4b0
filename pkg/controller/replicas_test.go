package controller

import (
	"context"
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
	names := createFromBoth(t, a, b, clk, 60, p, 0)
	aps := a.accessPoints()
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

// createFromBoth has a and b create volumes pvc-0..pvc-<n-1> with params, at
// once: every name by both, except that b makes the even ones under names of
// its own (pvc-b-<i>). Each create retries what is retryable, as the
// provisioner does, at most maxTries times when maxTries > 0, advancing clk a
// second per retry (the provisioner's back-off, shared by every goroutine: in
// aggregate, access points found by their token settle; no single call
// outlives a yield deadline). Two answers for one name are an error. It
// returns how many names were answered.
func createFromBoth(t *testing.T, a, b *bed, clk *clock, n int, params map[string]string, maxTries int) int {
	t.Helper()
	var wg sync.WaitGroup
	var vols sync.Map
	for i := range n {
		for _, c := range []*bed{a, b} {
			name := fmt.Sprintf("pvc-%d", i)
			if c == b && i%2 == 0 {
				name = fmt.Sprintf("pvc-b-%d", i)
			}
			wg.Go(func() {
				for tries := 1; ; tries++ {
					r, err := c.svc.CreateVolume(c.ctx(), createReq(name, 1<<30, params))
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
					if maxTries > 0 && tries > maxTries {
						t.Errorf("create %s: still %v after %d retries", name, err, tries)
						return
					}
					if testing.Verbose() {
						t.Logf("%s retry: %v", name, err)
					}
					clk.Advance(time.Second)
				}
			})
		}
	}
	wg.Wait()
	names := 0
	vols.Range(func(any, any) bool { names++; return true })
	return names
}

// A repeated CreateVolume answered from one replica's memory must find its
// access point named by the record, not merely agreeing with it: after
// another replica deleted the volume, the volume's next life (a create of
// it in flight there, its record written, its CreateAccessPoint not yet
// sent) has a record of the same token and path that names no access
// point. Before, the repeat answered the deleted access point (found by
// TestCreateEveryOutcome in pkg/controller/core).
func TestRepeatFromMemoryDoesNotAnswerTheVolumesPreviousLife(t *testing.T) {
	clk := newClock()
	now := func(c *Config) { c.Now = clk.Now }
	a := newBed(t, now)
	b := newBedOn(t, a.url, a.emu, now)
	first := a.mustCreate("pvc-1") // a answers it, and remembers
	if err := b.delete(first); err != nil {
		t.Fatal(err)
	}
	// b's next create of the volume writes its record and holds its id,
	// then waits before its send.
	sending, release := make(chan struct{}), make(chan struct{})
	b.hook.set("CreateAccessPoint", func(any) {
		close(sending)
		<-release
	}, nil)
	done := make(chan error, 1)
	go func() {
		_, err := b.create("pvc-1")
		done <- err
	}()
	<-sending
	r, err := a.create("pvc-1") // a repeat, within a minute of a's answer
	close(release)
	berr := <-done
	if err == nil {
		id := r.GetVolume().GetVolumeId()
		if id == first {
			t.Errorf("the repeat answered %s, which the other replica deleted", first)
		} else if _, derr := a.client.DescribeAccessPoint(context.Background(), apOf(t, id)); derr != nil {
			t.Errorf("the repeat answered %s: %v", id, derr)
		}
	}
	if err := berr; err != nil && !retryable(err) {
		t.Fatalf("the other replica's create: %v", err)
	}
}
