package node

import (
	"context"
	"sync/atomic"
	"testing"
)

// TestMountLimitOptInAbortsAtOnce: with AbortOverLimit (upstream's
// --max-inflight-mount-calls-opt-in), a NodePublishVolume that finds every
// slot taken is refused at once with ErrTooManyMounts (ABORTED), even with
// no deadline at all, instead of waiting; once a slot frees, publishing
// works again. Without the opt-in the same call waits (TestMountsAreBounded).
func TestMountLimitOptInAbortsAtOnce(t *testing.T) {
	f := newNodeFixture(t)
	const limit = 2
	entered, release := make(chan struct{}, limit), make(chan struct{})
	var held atomic.Int32
	h := &hookMounter{Mounter: f.mounter}
	h.beforeMount = func(context.Context) error {
		if held.Add(1) <= limit { // hold the first two mounts
			entered <- struct{}{}
			<-release
		}
		return nil
	}
	s := newService(t, Config{Mounter: h, MaxConcurrentMounts: limit, AbortOverLimit: true})
	errs := make(chan error, limit)
	for i := range limit {
		id := []string{vol1, vol2}[i]
		target := newTarget(t)
		go func() { errs <- publish(s, id, target) }()
	}
	for range limit {
		<-entered
	}
	// context.Background(): a call that waited for a slot would never
	// return, and the test would time out rather than pass.
	over := newTarget(t)
	expectIs(t, "publish over the limit", publish(s, vol1, over), ErrTooManyMounts)
	if n := layers(t, over); n != 0 {
		t.Errorf("the refused publish mounted %d layers", n)
	}
	close(release)
	for range limit {
		must(t, <-errs)
	}
	if err := publish(s, vol1, over); err != nil {
		t.Errorf("publish once the slots are free: %v", err)
	}
	if n := s.LocksHeld(); n != 0 {
		t.Errorf("%d locks held at rest", n)
	}
}
