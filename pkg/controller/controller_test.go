package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
)

func TestCreateVolumeTwiceReturnsOneAccessPoint(t *testing.T) {
	b := newBed(t)
	first := b.mustCreate("pvc-1")
	second := b.mustCreate("pvc-1")
	if first != second {
		t.Fatalf("retry returned %s, first call %s", second, first)
	}
	b.wantAccessPoints(1)
}

func TestCreateSameNameOtherCapacityIsIncompatible(t *testing.T) {
	b := newBed(t)
	b.mustCreate("pvc-1")
	_, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-1", 2<<30, params()))
	if !errors.Is(err, ErrIncompatible) {
		t.Fatalf("got %v, want ErrIncompatible", err)
	}
	b.wantAccessPoints(1)
}

// Point 1: a second call on a locked volume is ABORTED at once, and the lock
// table is empty at rest, also after a caller gave up while holding it.
func TestCallOnBusyVolumeIsAbortedAtOnce(t *testing.T) {
	b := newBed(t)
	g := newGate()
	b.hook.set("CreateAccessPoint", g.hold, nil)
	first := async(func() error { _, err := b.create("pvc-1"); return err })
	<-g.arrived

	if _, err := b.create("pvc-1"); !errors.Is(err, keylock.ErrBusy) {
		t.Fatalf("concurrent create: %v, want ErrBusy", err)
	}
	if b.svc.LocksHeld() != 1 {
		t.Fatalf("locks held while one create runs: %d", b.svc.LocksHeld())
	}
	g.open()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	b.wantAccessPoints(1)
}

func TestCallerTimeoutReleasesLock(t *testing.T) {
	b := newBed(t)
	ctx, cancel := context.WithCancel(context.Background())
	b.hook.set("CreateAccessPoint", func(any) { cancel() }, nil)
	if _, err := b.svc.CreateVolume(ctx, createReq("pvc-1", 1<<30, params())); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if n := b.svc.LocksHeld(); n != 0 {
		t.Fatalf("%d locks held after the caller gave up", n)
	}
	b.hook.set("CreateAccessPoint", nil, nil)
	b.mustCreate("pvc-1")
	b.wantAccessPoints(1)
}

// Point 2: a Delete of a volume whose Create retry is in flight is ABORTED,
// and a Create retried while its volume is being deleted is ABORTED: a
// Create never returns an access point a Delete removed.
func TestDeleteWhileCreateRetryInFlightIsAborted(t *testing.T) {
	clk := newClock()
	b := newBed(t, func(c *Config) { c.Now = clk.Now })
	vol := b.mustCreate("pvc-1")
	clk.Advance(core.RepeatFresh) // past answering from memory
	g := newGate()
	b.hook.set("DescribeAccessPoint", g.hold, nil) // the retry of an answered volume is one Describe
	retry := async(func() error { _, err := b.create("pvc-1"); return err })
	<-g.arrived
	if err := b.delete(vol); !errors.Is(err, keylock.ErrBusy) {
		t.Fatalf("delete during create: %v, want ErrBusy", err)
	}
	g.open()
	if err := <-retry; err != nil {
		t.Fatal(err)
	}
	b.wantAccessPoints(1)
}

func TestCreateRetryWhileDeleteInFlightIsAborted(t *testing.T) {
	b := newBed(t)
	vol := b.mustCreate("pvc-1")
	g := newGate()
	b.hook.set("DeleteAccessPoint", g.hold, nil)
	del := async(func() error { return b.delete(vol) })
	<-g.arrived
	if _, err := b.create("pvc-1"); !errors.Is(err, keylock.ErrBusy) {
		t.Fatalf("create during delete: %v, want ErrBusy", err)
	}
	g.open()
	if err := <-del; err != nil {
		t.Fatal(err)
	}
	b.wantAccessPoints(0)
	// The retry after the delete gets a fresh access point that exists.
	again := b.mustCreate("pvc-1")
	if again == vol {
		t.Fatalf("create returned the deleted access point %s", vol)
	}
	aps := b.wantAccessPoints(1)
	if aps[0].ID != apOf(t, again) {
		t.Fatalf("returned %s, EFS holds %s", again, aps[0].ID)
	}
}

// Point 3 and 6: an answer lost after EFS applied the create; the retry sends
// identical parameters and adopts what the first attempt made.
func TestLostCreateAnswerRetrySendsIdenticalInputAndAdopts(t *testing.T) {
	b := newBed(t)
	lose := func(_ any, err error) error {
		if err != nil {
			return err
		}
		return fmt.Errorf("connection reset: %w", efs.ErrUnavailable)
	}
	b.hook.set("CreateAccessPoint", nil, lose)
	if _, err := b.create("pvc-1"); !errors.Is(err, efs.ErrUnavailable) {
		t.Fatalf("first attempt: %v, want ErrUnavailable", err)
	}
	b.hook.set("CreateAccessPoint", nil, nil)
	vol := b.mustCreate("pvc-1")
	aps := b.wantAccessPoints(1)
	if aps[0].ID != apOf(t, vol) {
		t.Fatalf("retry returned %s, EFS holds %s", vol, aps[0].ID)
	}
	if len(b.hook.inputs) != 2 || !reflect.DeepEqual(b.hook.inputs[0], b.hook.inputs[1]) {
		t.Fatalf("attempts sent different inputs:\n%+v", b.hook.inputs)
	}
}

// Point 6: the process dies after EFS applied the create; a new process (no
// memory) retries and finds the access point by its client token.
func TestRestartedControllerAdoptsAccessPointOfKilledOne(t *testing.T) {
	a := newBed(t)
	a.hook.set("CreateAccessPoint", nil, func(_ any, err error) error {
		return errors.Join(err, efs.ErrUnavailable) // the answer never arrives
	})
	if _, err := a.create("pvc-1"); err == nil {
		t.Fatal("first attempt succeeded")
	}
	a.kill()
	b := newBedOn(t, a.url, a.emu)
	vol := b.mustCreate("pvc-1")
	aps := b.wantAccessPoints(1)
	if aps[0].ID != apOf(t, vol) {
		t.Fatalf("restarted controller returned %s, EFS holds %s", vol, aps[0].ID)
	}
	// A third process deleting after a lost delete answer still finishes.
	c := newBedOn(t, a.url, a.emu)
	c.hook.set("DeleteAccessPoint", nil, func(_ any, err error) error { return errors.Join(err, efs.ErrUnavailable) })
	if err := c.delete(vol); err == nil {
		t.Fatal("delete with a lost answer succeeded")
	}
	c.hook.set("DeleteAccessPoint", nil, nil)
	if err := c.delete(vol); err != nil {
		t.Fatalf("retried delete: %v", err)
	}
	c.wantAccessPoints(0)
}

// Point 4: GIDs stay unique under 150 concurrent creates, and the allocator
// lists the file system once instead of once per create.
func TestConcurrentCreatesGetDistinctGIDs(t *testing.T) {
	clk := newClock()
	b := newBed(t, steadyState(clk))
	clk.Advance(2 * (10 * time.Minute))
	const n = 150
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if _, err := b.create(fmt.Sprintf("pvc-%03d", i)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	seen := map[int64]string{}
	for _, ap := range b.wantAccessPoints(n) {
		g := ap.PosixUser.GID
		if other, dup := seen[g]; dup {
			t.Errorf("GID %d on %s and %s", g, ap.ID, other)
		}
		seen[g] = ap.ID
	}
	if lists := b.emu.Counts()["DescribeAccessPoints"]; lists > 3 {
		t.Errorf("%d DescribeAccessPoints calls for %d creates", lists, n)
	}
}

func TestExhaustedGIDRangeIsResourceExhausted(t *testing.T) {
	b := newBed(t)
	p := params("gidRangeStart", "7000", "gidRangeEnd", "7001")
	for i := range 2 {
		if _, err := b.svc.CreateVolume(b.ctx(), createReq(fmt.Sprint("pvc-", i), 1<<30, p)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-2", 1<<30, p))
	if !errors.Is(err, gid.ErrExhausted) {
		t.Fatalf("got %v, want ErrExhausted", err)
	}
	b.wantAccessPoints(2)
}

func TestDeleteOfDeletedOrForeignVolumeIsOK(t *testing.T) {
	b := newBed(t)
	vol := b.mustCreate("pvc-1")
	for _, id := range []string{vol, vol, "not-a-volume", "fs-0123456789abcdef0", "efs:" + testFS + "::fsap-0000000000000000f"} {
		if err := b.delete(id); err != nil {
			t.Errorf("DeleteVolume(%q): %v", id, err)
		}
	}
	b.wantAccessPoints(0)
}

// A repeat of a create this process answered costs no request (issue 10:
// duplicate callers spent a CreateAccessPoint each to hear "already
// exists"), and a delete ends that: the create after it makes a new access
// point instead of answering the deleted one from memory.
func TestRepeatOfAnsweredCreateSendsNoRequestUntilDeleted(t *testing.T) {
	b := newBed(t)
	first := b.mustCreate("pvc-1")
	var calls sync.Map
	count := func(op string) func(any) {
		return func(any) { n, _ := calls.LoadOrStore(op, new(int)); *n.(*int)++ }
	}
	b.hook.set("CreateAccessPoint", count("CreateAccessPoint"), nil)
	b.hook.set("DescribeAccessPoint", count("DescribeAccessPoint"), nil)
	for range 3 {
		if got := b.mustCreate("pvc-1"); got != first {
			t.Fatalf("repeat answered %s, first %s", got, first)
		}
	}
	calls.Range(func(op, n any) bool {
		t.Errorf("%d %s for three repeats of an answered create, want none", *n.(*int), op)
		return true
	})
	if err := b.delete(first); err != nil {
		t.Fatal(err)
	}
	second := b.mustCreate("pvc-1")
	if second == first {
		t.Fatalf("create after delete answered the deleted %s", first)
	}
	b.wantAccessPoints(1)
}
