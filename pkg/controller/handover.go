package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// ErrHandover: a create waited for the handover fence and its call ended
// first; retry.
var ErrHandover = errors.New("waiting for the previous controller's calls in flight to end")

// The handover from upstream (docs/handover.md; its steps in
// docs/design.md, "The handover from upstream"). In an in-place upgrade the
// csi-provisioner's leader election hands provisioning from upstream's
// controller to this one; the old leader's calls in flight then end within
// its call timeout (its csi-provisioner's --timeout: the driver's requests
// carry that deadline). Until they have, one of its creates may still put
// on EFS an access point under the volume name's token, with the lowest GID
// its listing saw free: a GID this driver may answer meanwhile, for another
// claim. So no create runs until that timeout, and EFS's listing lag, have
// passed since this process's first CreateVolume or DeleteVolume (none
// comes before its provisioner leads, so none before the handover); every
// listing of the allocator begun before is distrusted, and the record notes
// the fence passed: later processes of the cluster skip it. Nothing made
// outside this driver's protocol appears after the fence, so one listing
// then shows all of it: its GIDs are avoided, and a claim whose access
// point upstream made is answered with it (core.FS.Upstream).

// handover is this process's state of the fence.
type handover struct {
	fence time.Duration // Config.HandoverFence plus ListingLag; 0: none
	// waiting, if set, is called when a call begins to wait; poll, if
	// set, bounds each wait on the controller's clock, which tests move
	// by hand (Config.Now). Both for tests only.
	waiting func()
	poll    time.Duration
	mu      sync.Mutex
	first   time.Time // this process's first CreateVolume or DeleteVolume
	passed  bool
}

// noteCall notes the time of this process's first create or delete.
func (s *Service) noteCall() {
	h := &s.handover
	h.mu.Lock()
	if h.first.IsZero() {
		h.first = s.now()
	}
	h.mu.Unlock()
}

// awaitHandover returns once the fence has passed: at once if it has, or
// the record says a controller of the cluster passed it; else after
// waiting until the fence's end.
func (s *Service) awaitHandover(ctx context.Context) error {
	h := &s.handover
	if h.fence <= 0 {
		return nil
	}
	s.noteCall()
	h.mu.Lock()
	passed, end := h.passed, h.first.Add(h.fence)
	h.mu.Unlock()
	if passed {
		return nil
	}
	done, err := s.journal.HandedOver(ctx)
	if err != nil {
		return err
	}
	if !done {
		if err := s.waitUntil(ctx, end); err != nil {
			return err
		}
		// Listings begun before the fence's end may miss what the
		// previous controller made last.
		s.gids.DistrustBefore(end)
		if err := s.journal.MarkHandedOver(ctx, s.now()); err != nil {
			return err
		}
		s.log.Info("handover fence passed: access points made before this driver are listed from now on", slog.Time("end", end))
	}
	h.mu.Lock()
	h.passed = true
	h.mu.Unlock()
	return nil
}

// waitUntil returns once the controller's clock reads end, or the call's
// context ends (ErrHandover).
func (s *Service) waitUntil(ctx context.Context, end time.Time) error {
	wait := end.Sub(s.now())
	if wait <= 0 {
		return nil
	}
	if s.firstWarning("handover") {
		s.log.Info("waiting before the first create for the previous controller's calls in flight to end (handover fence)",
			slog.Duration("wait", wait), slog.Duration("fence", s.handover.fence))
	}
	if s.handover.waiting != nil {
		s.handover.waiting()
	}
	for ; wait > 0; wait = end.Sub(s.now()) {
		if p := s.handover.poll; p > 0 {
			wait = min(wait, p)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %w", ErrHandover, ctx.Err())
		}
	}
	return nil
}
