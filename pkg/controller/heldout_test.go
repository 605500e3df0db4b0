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

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
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

// The red team's findings on the first minutes' check against writers
// outside the protocol: a create whose access point's GID an outside
// writer also put on one (the allocator's listing lagged behind it) was
// answered (a) when the record write withdrawing it failed with a 500 (as
// if another create had answered it), and (b) when CreateAccessPoint's
// answer was lost and the retry adopted it by its token (adopt never ran
// the check). Now no path answers it: withdrawn, or failed and retried.
func TestFirstMinutesNeverAnswerAGIDAnOutsideWriterCarries(t *testing.T) {
	for _, tc := range []struct {
		name string
		arm  func(b *bed, fs *faultStore)
	}{
		{"the withdrawing write fails before apply", func(_ *bed, fs *faultStore) {
			fs.failNext(false, func(e journal.Entry) bool { return bytes.Contains(e.Value, []byte(`"withdrawn"`)) })
		}},
		{"the withdrawing write is applied, its answer lost", func(_ *bed, fs *faultStore) {
			fs.failNext(true, func(e journal.Entry) bool { return bytes.Contains(e.Value, []byte(`"withdrawn"`)) })
		}},
		{"CreateAccessPoint's answer lost: the retry adopts", func(b *bed, _ *faultStore) {
			var lost atomic.Bool
			b.hook.set("CreateAccessPoint", nil, func(_ any, err error) error {
				if err == nil && !lost.Swap(true) {
					return fmt.Errorf("%w: injected: answer lost", efs.ErrUnavailable)
				}
				return err
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := &faultStore{Store: journal.NewMemory()}
			b := newBed(t, func(c *Config) { c.Journal = fs })
			two := params("gidRangeStart", "50000", "gidRangeEnd", "50001")
			if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-x", 1<<30, two)); err != nil {
				t.Fatal(err)
			}
			free := int64(50000) // the id pvc-x left free
			for _, ap := range b.accessPoints() {
				if ap.PosixUser.GID == 50000 {
					free = 50001
				}
			}
			outsideGID(t, b, free)
			tc.arm(b, fs)
			for range 4 {
				if r, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-a", 1<<30, two)); err == nil {
					t.Fatalf("answered %s: its GID is the outside writer's", r.Volume.VolumeId)
				}
			}
			b.wantUniqueIDs(false)
		})
	}
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
		clk.Advance(core.UnrecordedWindow + time.Minute)
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

// A writer outside the GID token protocol (an earlier release, upstream's
// driver) made an access point for the volume after this controller's
// last listing: the create makes its own, its outsider check sees the
// other and withdraws it (never answered), and the retry adopts the other
// writer's, which that writer answers too: one access point per volume.
func TestOutsideWritersAccessPointForTheVolumeIsAdopted(t *testing.T) {
	b := newBed(t)
	if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-x", 1<<30, params())); err != nil {
		t.Fatal(err)
	}
	name := "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f"
	theirs, err := b.client.CreateAccessPoint(b.ctx(), efs.CreateAccessPointInput{FileSystemID: testFS,
		ClientToken: name, Path: "/" + name, PosixUser: &efs.PosixUser{UID: 50001, GID: 50001},
		CreationInfo: &efs.CreationInfo{OwnerUID: 50001, OwnerGID: 50001, Permissions: "700"},
		Tags:         map[string]string{TagCluster: "true", TagVolumeName: name, TagCapacity: "1073741824"}})
	must(t, err)
	if _, err := b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, params())); !errors.Is(err, ErrGIDContention) {
		t.Fatalf("first attempt: %v, want %v (withdrawn)", err, ErrGIDContention)
	}
	r, err := b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, params()))
	must(t, err)
	if got := apOf(t, r.Volume.VolumeId); got != theirs.ID {
		t.Errorf("answered %s, want the other writer's %s", got, theirs.ID)
	}
	b.wantAccessPoints(2)
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
