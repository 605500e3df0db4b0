package node

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
)

// TestConcurrentCallsOnOneTargetAreAborted: while a publish of a target is
// in flight, every other call on that target is refused at once (ABORTED),
// calls on other targets go ahead, and no lock is left afterwards.
func TestConcurrentCallsOnOneTargetAreAborted(t *testing.T) {
	f := newNodeFixture(t)
	busy, other := newTarget(t), newTarget(t)
	entered, release := make(chan struct{}), make(chan struct{})
	// Hold the first mount (the publish of busy) inside the mounter.
	var first atomic.Bool
	h := &hookMounter{Mounter: f.mounter}
	h.beforeMount = func(context.Context) error {
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-release
		}
		return nil
	}
	s := newService(t, Config{Mounter: h})
	done := make(chan error)
	go func() { done <- publish(s, vol1, busy) }()
	<-entered

	expectIs(t, "second publish of the busy target", publish(s, vol1, busy), keylock.ErrBusy)
	expectIs(t, "unpublish of the busy target", unpublish(s, vol1, busy), keylock.ErrBusy)
	if err := publish(s, vol2, other); err != nil {
		t.Errorf("publish of another target while one is busy: %v", err)
	}
	close(release)
	must(t, <-done)
	if n := layers(t, busy); n != 1 {
		t.Errorf("%d mounts on the target, want 1", n)
	}
	must(t, unpublish(s, vol1, busy))
	must(t, unpublish(s, vol2, other))
	if n := s.LocksHeld(); n != 0 {
		t.Errorf("%d locks held at rest", n)
	}
}

// TestMountsAreBounded: no more than MaxConcurrentMounts mounts run at
// once; a publish that finds every slot taken waits within its deadline and
// gives up with the context's error when it ends.
func TestMountsAreBounded(t *testing.T) {
	f := newNodeFixture(t)
	const limit, calls = 2, 8
	var running, peak atomic.Int32
	entered := make(chan struct{}, calls)
	release := make(chan struct{})
	h := &hookMounter{Mounter: f.mounter}
	h.beforeMount = func(context.Context) error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		entered <- struct{}{}
		<-release
		running.Add(-1)
		return nil
	}
	s := newService(t, Config{Mounter: h, MaxConcurrentMounts: limit})

	targets := make([]string, calls)
	errs := make(chan error, calls)
	for i := range targets {
		targets[i] = newTarget(t)
		id := vol1
		if i%2 == 1 {
			id = vol2
		}
		go func() { errs <- publish(s, id, targets[i]) }()
	}
	for range limit {
		<-entered
	}
	// Every slot is taken: a publish whose deadline has passed cannot get
	// one. (With a free slot, the select in acquire could pick either.)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.NodePublishVolume(ctx, publishReq(vol1, newTarget(t)))
	expectIs(t, "publish with every slot taken", err, context.Canceled)

	close(release)
	for range calls {
		must(t, <-errs)
	}
	if p := peak.Load(); p > limit {
		t.Errorf("%d mounts ran at once, limit %d", p, limit)
	}
	for i, target := range targets {
		if n := layers(t, target); n != 1 {
			t.Errorf("target %d: %d mounts", i, n)
		}
	}
}

// TestUnmountTimeoutForcesTheUnmount: an unmount that does not finish
// within UnmountTimeout (a dead NFS server) is forced, and the unpublish
// succeeds.
func TestUnmountTimeoutForcesTheUnmount(t *testing.T) {
	f := newNodeFixture(t)
	target := newTarget(t)
	must(t, publish(f.svc, vol1, target))
	h := &hookMounter{Mounter: f.mounter, forced: make(chan string, 1)}
	h.beforeUnmount = func(ctx context.Context) error {
		<-ctx.Done() // hangs until the timeout ends it
		return fmt.Errorf("unmount: %w", ctx.Err())
	}
	s := newService(t, Config{Mounter: h, UnmountTimeout: time.Millisecond})
	must(t, unpublish(s, vol1, target))
	select {
	case got := <-h.forced:
		if got != target {
			t.Errorf("forced unmount of %s, want %s", got, target)
		}
	default:
		t.Error("no forced unmount")
	}
	if n := layers(t, target); n != 0 {
		t.Errorf("%d mounts left", n)
	}
}

// TestOnlyATimedOutUnmountIsForced: an unmount that fails (say, EBUSY),
// or whose caller gives up before UnmountTimeout, is reported, not forced.
func TestOnlyATimedOutUnmountIsForced(t *testing.T) {
	f := newNodeFixture(t)
	tests := []struct {
		name    string
		hook    func(ctx context.Context) error
		callCtx func() (context.Context, context.CancelFunc)
		want    error
	}{
		{"unmount fails", func(context.Context) error { return errors.New("device or resource busy") },
			func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, ErrMountFailed},
		{"caller's deadline before the unmount timeout", func(ctx context.Context) error {
			<-ctx.Done()
			return fmt.Errorf("unmount: %w", ctx.Err())
		}, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Millisecond)
		}, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := newTarget(t)
			must(t, publish(f.svc, vol1, target))
			h := &hookMounter{Mounter: f.mounter, forced: make(chan string, 1), beforeUnmount: tt.hook}
			s := newService(t, Config{Mounter: h, UnmountTimeout: time.Hour})
			ctx, cancel := tt.callCtx()
			defer cancel()
			_, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol1, TargetPath: target})
			expectIs(t, "unpublish", err, tt.want)
			if len(h.forced) != 0 {
				t.Error("the unmount was forced")
			}
			if n := layers(t, target); n != 1 {
				t.Errorf("%d mounts, want the one that was not unmounted", n)
			}
		})
	}
}
