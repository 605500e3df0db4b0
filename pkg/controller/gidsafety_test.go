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
