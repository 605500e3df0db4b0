package controller

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
)

// These tests run with GID verification off and past any start-up window,
// so that verification cannot hide an allocator defect: each one would hand
// one GID (or UID) to two access points without the fix. The allocator reads
// no tag: each runs for tagged and untagged (enableTagging "false") classes.

// oneGID is a class whose range holds a single free GID once fill has put
// an access point on the other one (EFS wants end > start): a second volume
// can only get it if the allocator wrongly believes it free.
func oneGID(extra ...string) map[string]string {
	return params(append([]string{"gidRangeStart", "50000", "gidRangeEnd", "50001"}, extra...)...)
}

// fill creates, behind the controller's back, an access point with uid and
// gid 50001.
func (b *bed) fill() {
	b.t.Helper()
	_, err := b.client.CreateAccessPoint(b.ctx(), efs.CreateAccessPointInput{FileSystemID: testFS, ClientToken: "filler",
		Path: "/filler", PosixUser: &efs.PosixUser{UID: 50001, GID: 50001}})
	if err != nil {
		b.t.Fatal(err)
	}
}

func unverified(clk *clock) func(*Config) {
	return func(c *Config) { c.GIDVerify = VerifyNever; c.Now = clk.Now }
}

// loseFirstAnswer makes the first CreateAccessPoint applied but unanswered.
func loseFirstAnswer(b *bed) {
	var n atomic.Int32
	b.hook.set("CreateAccessPoint", nil, func(_ any, err error) error {
		if n.Add(1) == 1 && err == nil {
			return fmt.Errorf("answer lost: %w", efs.ErrUnavailable)
		}
		return err
	})
}

// secondVolumeMustNotGetTheGID creates another volume of the one-GID class:
// the GID is on an access point, so the range is exhausted.
func secondVolumeMustNotGetTheGID(t *testing.T, b *bed, p map[string]string) {
	t.Helper()
	b.hook.set("CreateAccessPoint", nil, nil)
	b.hook.set("DescribeAccessPoint", nil, nil)
	if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-other", 1<<30, p)); !errors.Is(err, gid.ErrExhausted) {
		t.Errorf("second volume: err = %v, want the range exhausted (its only GID is taken)", err)
	}
	b.wantUniqueIDs(false)
}

func TestLaterAttemptsErrorKeepsTheInDoubtGID(t *testing.T) {
	tests := []struct {
		name   string
		second func(b *bed) // how the retry after the lost answer fails
	}{
		{"retry answered a definitive error", func(b *bed) {
			b.hook.set("CreateAccessPoint", nil, func(any, error) error {
				return fmt.Errorf("answer: %w", efs.ErrAccessDenied)
			})
		}},
		{"retry's access point not yet visible", func(b *bed) {
			b.hook.set("DescribeAccessPoint", nil, func(any, error) error {
				return fmt.Errorf("lagging: %w", efs.ErrAccessPointNotFound)
			})
		}},
		{"retry's describe failed", func(b *bed) {
			b.hook.set("DescribeAccessPoint", nil, func(any, error) error {
				return fmt.Errorf("describe: %w", efs.ErrAccessDenied)
			})
		}},
	}
	for _, tagging := range []string{"true", "false"} {
		for _, tt := range tests {
			t.Run("enableTagging="+tagging+"/"+tt.name, func(t *testing.T) {
				clk := newClock()
				b := newBed(t, unverified(clk))
				clk.Advance(time.Hour)
				b.fill()
				p := oneGID("enableTagging", tagging)
				loseFirstAnswer(b)
				if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-1", 1<<30, p)); !errors.Is(err, efs.ErrUnavailable) {
					t.Fatalf("first attempt: %v, want unavailable", err)
				}
				tt.second(b)
				if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-1", 1<<30, p)); err == nil {
					t.Fatal("second attempt succeeded; the test wants it to fail")
				}
				b.wantAccessPoints(2)
				secondVolumeMustNotGetTheGID(t, b, p)
			})
		}
	}
}

// A listing that does not show an access point this process created (EFS
// listing lags a create) must not free its GID.
func TestLaggingListingKeepsCreatedGID(t *testing.T) {
	for _, tagging := range []string{"true", "false"} {
		t.Run("enableTagging="+tagging, func(t *testing.T) { laggingListingKeepsCreatedGID(t, oneGID("enableTagging", tagging)) })
	}
}

func laggingListingKeepsCreatedGID(t *testing.T, p map[string]string) {
	clk := newClock()
	b := newBed(t, unverified(clk))
	b.fill()
	if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-1", 1<<30, p)); err != nil {
		t.Fatal(err)
	}
	// The listing lags behind the create: it shows only the older filler.
	b.hook.setListFilter(func(aps []efs.AccessPoint) []efs.AccessPoint {
		return slices.DeleteFunc(aps, func(ap efs.AccessPoint) bool { return ap.ClientToken != "filler" })
	})
	clk.Advance(time.Hour) // the view is stale: re-listed
	if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-other", 1<<30, p)); !errors.Is(err, gid.ErrExhausted) {
		t.Errorf("second volume: err = %v, want exhausted", err)
	}
	b.hook.setListFilter(nil)
	b.wantUniqueIDs(false)
}

// A class that fixes the gid allocates the uid: a restarted process must
// read the allocated uids back from EFS, not the shared gid.
func TestFixedGIDClassGetsUniqueUIDsAcrossRestart(t *testing.T) {
	for _, tagging := range []string{"true", "false"} {
		t.Run("enableTagging="+tagging, func(t *testing.T) {
			fixedGIDClassGetsUniqueUIDsAcrossRestart(t, oneGID("gid", "1000", "enableTagging", tagging))
		})
	}
}

func fixedGIDClassGetsUniqueUIDsAcrossRestart(t *testing.T, p map[string]string) {
	clk := newClock()
	a := newBed(t, unverified(clk))
	a.fill()
	if _, err := a.svc.CreateVolume(a.ctx(), createReq("pvc-1", 1<<30, p)); err != nil {
		t.Fatal(err)
	}
	a.kill()
	b := newBedOn(t, a.url, a.emu, unverified(clk)) // a restarted controller
	if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-2", 1<<30, p)); !errors.Is(err, gid.ErrExhausted) {
		t.Errorf("second volume: err = %v, want exhausted (uid 50000 is taken)", err)
	}
	b.wantUniqueIDs(true)
}

// Two writers that see EFS list access points in different orders (EFS
// documents no order) must still not both keep one GID.
func TestVerificationDoesNotDependOnListingOrder(t *testing.T) {
	a := newBed(t, func(c *Config) { c.GIDVerify = VerifyAlways })
	b := newBedOn(t, a.url, a.emu, func(c *Config) { c.GIDVerify = VerifyAlways })
	reverse := func(aps []efs.AccessPoint) []efs.AccessPoint {
		out := make([]efs.AccessPoint, len(aps))
		for i, ap := range aps {
			out[len(aps)-1-i] = ap
		}
		return out
	}
	b.hook.setListFilter(reverse)
	a.fill()
	// Both allocators list the empty file system first, so neither knows
	// the other's GIDs; then each creates one volume while the other's create
	// is held after EFS applied it, so both exist before either verifies.
	for _, c := range []*bed{a, b} {
		if _, err := c.svc.CreateVolume(c.ctx(), createReq("pvc-warm-"+fmt.Sprint(c == b), 1<<30, params("gidRangeStart", "1", "gidRangeEnd", "2"))); err != nil {
			t.Fatal(err)
		}
	}
	ga, gb := newGate(), newGate()
	a.hook.set("CreateAccessPoint", nil, func(_ any, err error) error { ga.hold(nil); return err })
	b.hook.set("CreateAccessPoint", nil, func(_ any, err error) error { gb.hold(nil); return err })
	ea := async(func() error { _, err := a.svc.CreateVolume(a.ctx(), createReq("pvc-a", 1<<30, oneGID())); return err })
	eb := async(func() error { _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-b", 1<<30, oneGID())); return err })
	<-ga.arrived
	<-gb.arrived
	ga.open()
	gb.open()
	errA, errB := <-ea, <-eb
	if errA == nil && errB == nil {
		t.Errorf("both creates of the one-GID class succeeded")
	}
	live := map[int64]int{}
	for _, ap := range a.accessPoints() {
		live[ap.PosixUser.GID]++
	}
	if live[50000] > 1 {
		t.Errorf("GID 50000 is on %d live access points (errors: %v; %v)", live[50000], errA, errB)
	}
}

// A call that has yielded as often as one call may leaves nothing behind
// that shares a GID: what yielded is deleted before the call returns, and
// the retry goes on with the next generation. (Kept, the last loser outlived
// its yield deadline, became settled, and was answered once the auto mode's
// window closed: two volumes on one GID.)
func TestCallThatStopsYieldingLeavesNoSharedGID(t *testing.T) {
	a := newBed(t)
	b := newBedOn(t, a.url, a.emu)
	class := params("gidRangeStart", "50000", "gidRangeEnd", "50003")
	// b's allocator lists the empty file system, then a takes every GID of
	// the range: b allocates blind until its view is a minute old.
	if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-warm", 1<<30, params("gidRangeStart", "60000", "gidRangeEnd", "60001"))); err != nil {
		t.Fatal(err)
	}
	var first string
	for i := range 4 {
		r, err := a.svc.CreateVolume(a.ctx(), createReq(fmt.Sprintf("pvc-a-%d", i), 1<<30, class))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = r.Volume.VolumeId
		}
	}
	_, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-b", 1<<30, class))
	if !errors.Is(err, ErrGIDContention) {
		t.Fatalf("create in a range another writer filled: %v, want ErrGIDContention", err)
	}
	a.wantUniqueIDs(false)
	// The retry resumes with the next generation, and in the end gets a GID
	// once a frees one.
	if err := a.delete(first); err != nil {
		t.Fatal(err)
	}
	for range maxYields + 1 {
		if _, err = b.svc.CreateVolume(b.ctx(), createReq("pvc-b", 1<<30, class)); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("retries after a GID was freed: %v", err)
	}
	a.wantUniqueIDs(false)
}
