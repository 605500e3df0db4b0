package mount

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/mount/mounttest"
)

// TestAHungMountPointPinsOneThread: once a stat, statfs or unmount of a mount
// point is blocked (the server stopped answering) and its caller has given
// up, every later call on that mount point answers at once with
// ErrNotResponding instead of blocking one more OS thread; the process's
// thread count stays flat however many calls come. Another mount point is
// not affected, and a forced unmount, the remedy, still runs.
func TestAHungMountPointPinsOneThread(t *testing.T) {
	f := newFixture(t)
	f.dir(t, "a")
	f.dir(t, "b")
	hung, healthy := newTarget(t), newTarget(t)
	hang := mounttest.NewHang(t, func(op, path string) bool { return path == hung && op != OpForceUnmount })
	m, err := NewLocal(f.root, f.aps, WithBeforeSyscall(hang.Block))
	must(t, err)
	ctx := context.Background()
	must(t, m.MountVolume(ctx, Volume{FileSystemID: fsID, Path: "/a"}, hung))
	must(t, m.MountVolume(ctx, Volume{FileSystemID: fsID, Path: "/b"}, healthy))

	// The first call blocks; its caller gives up.
	first, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := m.Usage(first, hung); done <- err }()
	<-hang.Entered
	cancel()
	expectErr(t, "the call that blocked", <-done, context.Canceled)

	before := mounttest.Threads(t)
	const calls = 300
	calls3 := []func(ctx context.Context) error{
		func(ctx context.Context) error { _, err := m.Usage(ctx, hung); return err },
		func(ctx context.Context) error {
			_, err := m.Inspect(ctx, Volume{FileSystemID: fsID, Path: "/a"}, hung)
			return err
		},
		func(ctx context.Context) error { return m.Unmount(ctx, hung) },
	}
	// The calls come from a fixed number of callers, as kubelet's retries
	// do: each blocked call pins a thread for good, so before the gate the
	// count grew by one per call (5 -> 306); with it, the only threads the
	// runtime may add are for the callers' own short system calls (the
	// mountinfo read), at most one per caller at a time. 300 concurrent
	// callers made that 16 on a loaded CI machine: noise, not a leak.
	const callers = 8
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for c := range callers {
		wg.Go(func() {
			for i := c; i < calls; i += callers {
				// The deadline bounds the test if calls do block (as
				// they did before the gate); it orders nothing.
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				errs <- calls3[i%len(calls3)](cctx)
				cancel()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, ErrNotResponding) {
			t.Fatalf("a call on the hung mount point: %v, want ErrNotResponding at once", err)
		}
		if since, ok := BlockedSince(err); !ok || since.IsZero() {
			t.Fatalf("%v does not say since when the mount point is blocked", err)
		}
	}
	runtime.GC()
	after := mounttest.Threads(t)
	t.Logf("%d calls on a hung mount point: %d threads before, %d after", calls, before, after)
	// One per caller, and a few for the runtime's own (GC workers, sysmon).
	if after-before > callers+8 {
		t.Errorf("%d calls on a hung mount point grew the process from %d to %d threads", calls, before, after)
	}
	if n := m.SyscallsInFlight(); n != 1 {
		t.Errorf("%d system calls in flight, want the one blocked", n)
	}
	if len(hang.Entered) != 0 {
		t.Errorf("%d more system calls reached the hung server", len(hang.Entered))
	}

	if _, err := m.Usage(ctx, healthy); err != nil {
		t.Errorf("Usage of another mount point: %v", err)
	}
	must(t, m.ForceUnmount(ctx, hung))
	if n := layers(t, hung); n != 0 {
		t.Errorf("%d layers left after the forced unmount", n)
	}

	// The server answers again: the blocked call returns, its key frees,
	// and calls go through.
	hang.Release()
	for m.SyscallsInFlight() != 0 {
		runtime.Gosched()
	}
	if _, err := m.Usage(ctx, healthy); err != nil {
		t.Errorf("Usage after the server answered: %v", err)
	}
	must(t, m.Unmount(ctx, hung))
}

// TestCallsOnALiveMountPointWaitTheirTurn: a call that finds another one in
// flight whose caller still waits does not fail: it waits for it and then
// makes its own; a caller that gives up while waiting gets its context's
// error, and the key is free once the first call returns.
func TestCallsOnALiveMountPointWaitTheirTurn(t *testing.T) {
	g := newGate()
	started, release := make(chan struct{}), make(chan struct{})
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := gated(ctx, g, "k", OpStat, "/p", func() (int, error) {
			close(started)
			<-release
			return 1, nil
		})
		first <- err
	}()
	<-started
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := gated(cctx, g, "k", OpStat, "/p", func() (int, error) { return 2, nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("waiter that gave up: %v", err)
	}
	second := make(chan int, 1)
	go func() {
		v, err := gated(ctx, g, "k", OpStatfs, "/p", func() (int, error) { return 2, nil })
		if err != nil {
			t.Error(err)
		}
		second <- v
	}()
	close(release)
	must(t, <-first)
	if v := <-second; v != 2 {
		t.Errorf("the waiter got %d, want the result of its own call", v)
	}
	if n := g.inFlight(); n != 0 {
		t.Errorf("%d calls in flight at rest", n)
	}
}

func expectErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

// A call whose caller gave up on a live mount point (NodeUnpublishVolume
// cancels the volume's usage walk, then unmounts at once) does not make the
// next call on it fail: the next waits for the call to return, for up to
// abandonGrace after its start. Before, the unmount was refused at once
// ("mount point not responding"), as csi-sanity saw on a loaded machine.
func TestACallCancelledOnALiveMountPointDoesNotRefuseTheNext(t *testing.T) {
	f := newFixture(t)
	f.dir(t, "a")
	target := newTarget(t)
	hang := mounttest.NewHang(t, func(op, path string) bool { return path == target && op == OpStatfs })
	m, err := NewLocal(f.root, f.aps, WithBeforeSyscall(hang.Block))
	must(t, err)
	ctx := context.Background()
	must(t, m.MountVolume(ctx, Volume{FileSystemID: fsID, Path: "/a"}, target))

	first, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := m.Usage(first, target); done <- err }()
	<-hang.Entered
	cancel()
	expectErr(t, "the cancelled call", <-done, context.Canceled)

	waiting := make(chan struct{})
	m.gate.waitingAbandoned = func() { close(waiting) }
	unmounted := make(chan error, 1)
	go func() { unmounted <- m.Unmount(ctx, target) }()
	select {
	case <-waiting:
	case err := <-unmounted:
		t.Fatalf("the unmount did not wait for the cancelled statfs: %v", err)
	}
	hang.Release() // the statfs returns, as on a live mount point
	if err := <-unmounted; err != nil {
		t.Fatalf("unmount after a cancelled statfs: %v", err)
	}
}
