package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// faultStore is a journal store whose next write matching fail does not
// reach the store (before) or is applied with its answer lost (after),
// as a Kubernetes API that answers 500, or drops the connection, does.
type faultStore struct {
	journal.Store
	mu     sync.Mutex
	fail   func(journal.Entry) bool
	after  bool
	failed int
}

func (f *faultStore) failNext(after bool, match func(journal.Entry) bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail, f.after = match, after
}

func (f *faultStore) take(e journal.Entry) (bool, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == nil || !f.fail(e) {
		return false, false
	}
	f.fail = nil
	f.failed++
	return true, f.after
}

func (f *faultStore) Update(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	hit, after := f.take(e)
	if hit && !after {
		return journal.Entry{}, fmt.Errorf("%w: injected 500 before apply", journal.ErrUnavailable)
	}
	got, err := f.Store.Update(ctx, e)
	if hit && err == nil {
		return journal.Entry{}, fmt.Errorf("%w: injected: answer lost after apply", journal.ErrUnavailable)
	}
	return got, err
}

// recordsAccessPoint matches the write that names an access point.
func recordsAccessPoint(e journal.Entry) bool {
	return e.Key.Kind == journal.KindVolume && bytes.Contains(e.Value, []byte(`"accessPoint"`))
}

// The red team's finding: the write recording the access point ID fails
// once, in a range the volume's own access point fills; every retry then
// ended RESOURCE_EXHAUSTED (the allocator ran before the record was
// found), for good. The retry finds the record, and EFS the access point
// by its token.
func TestRetryFinishesAfterTheRecordingWriteFailedInAFullRange(t *testing.T) {
	for _, after := range []bool{false, true} {
		t.Run(fmt.Sprintf("applied=%v", after), func(t *testing.T) {
			fs := &faultStore{Store: journal.NewMemory()}
			b := newBed(t, func(c *Config) { c.Journal = fs })
			two := params("gidRangeStart", "50000", "gidRangeEnd", "50001")
			if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-x", 1<<30, two)); err != nil {
				t.Fatal(err)
			}
			fs.failNext(after, recordsAccessPoint)
			if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-a", 1<<30, two)); !errors.Is(err, journal.ErrUnavailable) {
				t.Fatalf("first create: %v, want the injected failure", err)
			}
			for i := range 3 {
				if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-a", 1<<30, two)); err != nil {
					t.Fatalf("retry %d: %v", i, err)
				}
			}
			b.wantAccessPoints(2)
			b.wantUniqueIDs(false)
		})
	}
}

// outsideGID makes, as a writer outside the protocol would (upstream's
// driver, an earlier release: the volume name as token), an access point
// carrying gid, after the allocator's last listing (it lists once a
// minute), so that the allocator picks gid.
func outsideGID(t *testing.T, b *bed, gid int64) string {
	t.Helper()
	ap, err := b.client.CreateAccessPoint(b.ctx(), efs.CreateAccessPointInput{FileSystemID: testFS,
		ClientToken: "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f", Path: "/pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f",
		PosixUser:    &efs.PosixUser{UID: gid, GID: gid},
		CreationInfo: &efs.CreationInfo{OwnerUID: gid, OwnerGID: gid, Permissions: "700"},
		Tags:         map[string]string{TagCluster: "true"}})
	must(t, err)
	return ap.ID
}

// twoOwnRecords starts two controllers on one EFS, each with a record of
// its own, past their first minutes or not, with lost answers and 500s on
// creates and listings until stop.
func twoOwnRecords(t *testing.T, past bool) (a, b *bed, clk *clock, stop func()) {
	clk = newClock()
	own := func(c *Config) { c.Journal, c.Now = journal.NewMemory(), clk.Now }
	a = newBed(t, own)
	b = newBedOn(t, a.url, a.emu, own)
	if past {
		clk.Advance((10 * time.Minute) + time.Minute)
	}
	ops := []emulator.Op{emulator.OpCreateAccessPoint, "DescribeAccessPoints"}
	for _, op := range ops {
		a.emu.SetFault(op, emulator.Fault{LostAnswerRate: 0.2, ErrorRate: 0.1})
	}
	return a, b, clk, func() {
		for _, op := range ops {
			a.emu.SetFault(op, emulator.Fault{})
		}
	}
}

// The red team's finding: two controllers keeping records of their own
// (replicas whose record is a file per pod, two hosts) answered GIDs twice
// with lost answers and errors, in their first minutes and after. GID
// tokens make EFS the compare-and-swap of each id, whatever record each
// keeps.
func TestTwoControllersWithRecordsOfTheirOwnNeverShareAGID(t *testing.T) {
	for _, past := range []bool{false, true} {
		t.Run(fmt.Sprintf("past the first minutes=%v", past), func(t *testing.T) {
			a, b, clk, stop := twoOwnRecords(t, past)
			p := params("gidRangeStart", "50000", "gidRangeEnd", "50100")
			var wg sync.WaitGroup
			for i := range 40 {
				for _, c := range []*bed{a, b} {
					name := fmt.Sprintf("pvc-%p-%d", c, i)
					wg.Go(func() {
						for tries := 0; ; tries++ {
							_, err := c.svc.CreateVolume(c.ctx(), createReq(name, 1<<30, p))
							if err == nil {
								return
							}
							if !retryable(err) || tries > 200 {
								t.Errorf("create %s: %v", name, err)
								return
							}
							clk.Advance(time.Second)
						}
					})
				}
			}
			wg.Wait()
			stop()
			if aps := a.accessPoints(); len(aps) != 80 {
				t.Errorf("%d access points for 80 volumes", len(aps))
			}
			a.wantUniqueIDs(false)
		})
	}
}

// Where EFS keeps a deleted access point's client token (it documents
// nothing either way; keepTokens), a GID token whose access point was
// deleted names one EFS no longer describes. A create under it retries
// (the access point may be its own, too fresh to describe) until
// burnAfter, then leaves the id for another; the burned one is not picked
// again. Here the range has no other: the create ends RESOURCE_EXHAUSTED
// rather than retrying for ever.
func TestBurnedGIDTokenIsLeftForAnotherID(t *testing.T) {
	clk := newClock()
	b := newBed(t, func(c *Config) { c.Now = clk.Now })
	keepTokens(b)
	two := params("gidRangeStart", "50000", "gidRangeEnd", "50001")
	r, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-a", 1<<30, two))
	must(t, err)
	gone := b.accessPoints()[0].PosixUser.GID
	_, err = b.svc.CreateVolume(b.ctx(), createReq("pvc-x", 1<<30, two))
	must(t, err)
	must(t, b.delete(r.Volume.VolumeId))
	for try := 0; ; try++ {
		_, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-b", 1<<30, two))
		if errors.Is(err, gid.ErrExhausted) {
			break
		}
		if err == nil || !errors.Is(err, ErrNotYetVisible) || try > 5 {
			t.Fatalf("create %d: %v, want %v until the token is burned, then %v", try, err, ErrNotYetVisible, gid.ErrExhausted)
		}
		clk.Advance(time.Minute)
	}
	for _, ap := range b.accessPoints() {
		if ap.PosixUser.GID == gone {
			t.Errorf("the burned id %d is on %s", gone, ap.ID)
		}
	}
}

// Upstream's driver made an access point for the volume before the
// handover (its last leader's create in flight): after the fence, the
// volume's create finds it in the allocator's listing and adopts it, in
// one call, instead of making a second one.
func TestUpstreamsAccessPointForTheVolumeIsAdopted(t *testing.T) {
	b, clk, waiting := fencedBed(t)
	done := make(chan error, 1)
	go func() {
		_, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-x", 1<<30, params()))
		done <- err
	}()
	<-waiting
	name := "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f"
	theirs := upstreamAP(t, b, name, 50001)
	clk.Advance(16 * time.Second)
	must(t, <-done)
	r, err := b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, params()))
	must(t, err)
	if got := apOf(t, r.Volume.VolumeId); got != theirs.ID {
		t.Errorf("answered %s, want upstream's %s", got, theirs.ID)
	}
	b.wantAccessPoints(2)
	b.wantUniqueIDs(false)
}

// A volume's own earlier create attempt (its answer lost) does not keep its
// directory on delete: the deletes of this process see creates until 2
// minutes after they end, and tell the volume's own from another's (by its
// access point, or its record key, which a GID-token access point carries
// in its volume-name tag: volumeKeyOf).
func TestDeleteAfterALostCreateAnswerRemovesTheRoot(t *testing.T) {
	r := newRootBed(t)
	var lost atomic.Bool
	r.hook.set("CreateAccessPoint", nil, func(_ any, err error) error {
		if err == nil && !lost.Swap(true) {
			return fmt.Errorf("%w: injected: answer lost", efs.ErrUnavailable)
		}
		return err
	})
	if _, err := r.create("pvc-a"); err == nil {
		t.Fatal("first attempt answered")
	}
	vol := r.mustCreate("pvc-a")
	root := r.rootOf(vol)
	must(t, r.delete(vol))
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("root directory kept after its volume's delete: %v (kept %d)", err, r.svc.RootDirsKept())
	}
}

// Two controllers keeping records of their own (mid-upgrade from a file
// record per pod to the shared one; the e2e upgrade from upstream's chart
// saw 50 of 170 volumes made twice) create every volume from both, with
// lost answers and errors: each volume converges on one access point,
// since both try its ids in the same order and move past one only on
// EFS's answer (probe.go), and no GID is on two.
func TestTwoControllersWithRecordsOfTheirOwnConvergeOnOneAccessPoint(t *testing.T) {
	for _, past := range []bool{false, true} {
		t.Run(fmt.Sprintf("past the first minutes=%v", past), func(t *testing.T) {
			a, b, clk, stop := twoOwnRecords(t, past)
			names := createFromBoth(t, a, b, clk, 60, params("gidRangeStart", "50000", "gidRangeEnd", "50300"), 200)
			stop()
			if aps := a.accessPoints(); len(aps) != names {
				t.Errorf("%d access points for %d volumes", len(aps), names)
			}
			a.wantUniqueIDs(false)
		})
	}
}
