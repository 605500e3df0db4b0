package node

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/mount"
	"github.com/efs-csi/efs-csi-driver/pkg/mount/mounttest"
)

// TestHungServerDoesNotExhaustTheNode: the server behind a published volume
// stops answering. kubelet's first NodeUnpublishVolume blocks in the unmount
// until kubelet gives up; every retry after that, and every publish of the
// same target, is answered at once with mount.ErrNotResponding (UNAVAILABLE)
// without blocking another thread, so the node plugin's thread count stays
// flat. With --force-unmount-after-timeout, the retry that comes after
// UnmountTimeout forces the unmount, and the unpublish succeeds although the
// blocked call has not returned.
func TestHungServerDoesNotExhaustTheNode(t *testing.T) {
	f := newNodeFixture(t)
	target := newTarget(t)
	must(t, publish(f.svc, vol1, target))
	hang := mounttest.NewHang(t, func(op, path string) bool { return path == target && op != mount.OpForceUnmount })
	m, err := mount.NewLocal(f.root, mounttest.AccessPoints{apID: {ID: apID, FileSystemID: fsID, Path: "/vol1"}},
		mount.WithBeforeSyscall(hang.Block))
	must(t, err)
	s := newService(t, Config{Mounter: m})

	// call runs one kubelet call that gives up as soon as it has blocked.
	call := func(rpc func(ctx context.Context) error) (blocked bool, err error) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- rpc(ctx) }()
		select {
		case err := <-done:
			return false, err
		case <-hang.Entered:
			cancel()
			return true, <-done
		}
	}
	unpub := func(ctx context.Context) error {
		_, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol1, TargetPath: target})
		return err
	}
	pub := func(ctx context.Context) error {
		_, err := s.NodePublishVolume(ctx, publishReq(vol1, target))
		return err
	}

	blocked, err := call(unpub)
	if !blocked || !errors.Is(err, context.Canceled) {
		t.Fatalf("first unpublish: blocked %v, %v; want it blocked until kubelet gave up", blocked, err)
	}
	blockedBy := time.Now() // the blocked unmount started before this
	before := mounttest.Threads(t)
	const retries = 100
	for i := range retries {
		rpc := unpub
		if i%2 == 1 {
			rpc = pub
		}
		blocked, err := call(rpc)
		if blocked || !errors.Is(err, mount.ErrNotResponding) {
			t.Fatalf("retry %d: blocked %v, %v; want mount.ErrNotResponding at once", i, blocked, err)
		}
	}
	runtime.GC()
	if after := mounttest.Threads(t); after-before > 8 {
		t.Errorf("%d retries on a hung volume grew the node plugin from %d to %d threads", retries, before, after)
	}
	if n := m.SyscallsInFlight(); n != 1 {
		t.Errorf("%d system calls in flight, want the one blocked", n)
	}
	if n := layers(t, target); n != 1 {
		t.Errorf("%d layers on the target, want the hung mount still there", n)
	}
	if n := s.LocksHeld(); n != 0 {
		t.Errorf("%d locks held between retries", n)
	}

	// With the force opt-in, a retry once UnmountTimeout has passed since
	// the blocked unmount started forces it, although the retry itself was
	// refused at once, long before a timeout of its own. (The timeout is
	// the time the retries above took: the refused unmount returns in
	// microseconds, well within it.)
	forcing := newService(t, Config{Mounter: m, UnmountTimeout: time.Since(blockedBy)})
	if _, err := forcing.NodeUnpublishVolume(context.Background(),
		&csi.NodeUnpublishVolumeRequest{VolumeId: vol1, TargetPath: target}); err != nil {
		t.Fatalf("unpublish with forcing: %v", err)
	}
	if n := layers(t, target); n != 0 {
		t.Errorf("%d layers on the target after the forced unmount", n)
	}
}
