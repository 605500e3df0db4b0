package controller

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/gid"

	"github.com/efs-csi/efs-csi-driver/internal/testutil"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// otherCluster is a controller of a cluster of its own (its ID, its own
// record), past its start-up window, whose allocator lists at every create.
func otherCluster(id string, clk *clock, logs *testutil.Buffer) func(*Config) {
	return func(c *Config) {
		c.ClusterID, c.Journal, c.Now = id, journal.NewMemory(), clk.Now
		c.GIDOptions.MaxAge = time.Nanosecond
		if logs != nil {
			c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
	}
}

// hideOnce makes b's next listing leave out the access point apID (EFS
// lists with a lag), and no later one.
func hideOnce(b *bed, apID string) {
	var done atomic.Bool
	b.hook.setListFilter(func(aps []efs.AccessPoint) []efs.AccessPoint {
		if done.Swap(true) {
			return aps
		}
		var out []efs.AccessPoint
		for _, ap := range aps {
			if ap.ID != apID {
				out = append(out, ap)
			}
		}
		return out
	})
}

// Two clusters on one file system and one GID range, each with its own
// record: the later of two creates that picked one GID (its listing lagged
// behind the other cluster's create) is answered AccessPointAlreadyExists
// by EFS for the GID token, so never makes a second access point with it,
// however long the controller has run; the other cluster's answered access
// point stays, and the administrator is told once that the ranges overlap.
// Here the range is then full: the later create ends RESOURCE_EXHAUSTED.
func TestTwoClustersNeverAnswerOneGID(t *testing.T) {
	clk := newClock()
	var logsB testutil.Buffer
	// The warning names the other cluster by its cluster-ID tag.
	a := newBed(t, descriptive, otherCluster("cluster-a", clk, nil))
	b := newBedOn(t, a.url, a.emu, descriptive, otherCluster("cluster-b", clk, &logsB))
	clk.Advance((10 * time.Minute) + time.Minute)
	three := params("gidRangeStart", "50000", "gidRangeEnd", "50002")
	create := func(on *bed, name string) (string, error) {
		r, err := on.svc.CreateVolume(on.ctx(), createReq(name, 1<<30, three))
		return r.GetVolume().GetVolumeId(), err
	}

	if _, err := create(a, "pvc-a0"); err != nil {
		t.Fatal(err)
	}
	if _, err := create(b, "pvc-b0"); err != nil { // b lists a's: the check is on for b
		t.Fatal(err)
	}
	a1, err := create(a, "pvc-a1") // the range's last free GID
	if err != nil {
		t.Fatal(err)
	}
	hideOnce(b, apOf(t, a1))
	_, err = create(b, "pvc-b1")
	if !errors.Is(err, gid.ErrExhausted) {
		t.Errorf("b's create of the GID a: err = %v, want %v (the range's only free GID is a's)", err, gid.ErrExhausted)
	}
	b.wantUniqueIDs(false)
	if _, err := a.client.DescribeAccessPoint(a.ctx(), apOf(t, a1)); err != nil {
		t.Errorf("a's answered access point: %v, want it kept", err)
	}
	b.wantAccessPoints(3)

	for range 2 {
		_, _ = create(b, "pvc-b2")
	}
	if n := strings.Count(logsB.String(), "another cluster's access points carry GIDs in this class's range"); n != 1 {
		t.Errorf("%d warnings about the shared range, want 1:\n%s", n, logsB.String())
	}
	if !strings.Contains(logsB.String(), "otherCluster=cluster-a") {
		t.Errorf("the warning does not name the other cluster:\n%s", logsB.String())
	}
}

// A file system that only this cluster writes (its access points carry its
// own cluster ID, or none) costs no listing per create once the start-up
// window has passed: the allocator's, at most once a minute.
func TestOneClusterAloneListsOnlyForTheAllocator(t *testing.T) {
	clk := newClock()
	var logs testutil.Buffer
	b := newBed(t, func(c *Config) {
		c.ClusterID, c.Now = "cluster-a", clk.Now
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	clk.Advance((10 * time.Minute) + time.Minute)
	var lists atomic.Int32
	b.hook.setListFilter(func(aps []efs.AccessPoint) []efs.AccessPoint {
		lists.Add(1)
		return aps
	})
	for _, name := range []string{"pvc-1", "pvc-2", "pvc-3", "pvc-4"} {
		b.mustCreate(name)
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("%d listings for 4 creates, want 1 (the allocator's)", n)
	}
	if logs.String() != "" {
		t.Errorf("warnings on a file system no other cluster writes:\n%s", logs.String())
	}
}

// The red team's finding: a cluster that never saw another cluster's
// access points in a listing (its listing lagged behind the other's first
// create) had the check off, and both answered the GID. GID tokens need
// no listing: b's create of a's GID is answered AccessPointAlreadyExists.
func TestTwoClustersNeverAnswerOneGIDUnseenInAnyListing(t *testing.T) {
	clk := newClock()
	a := newBed(t, otherCluster("cluster-a", clk, nil))
	b := newBedOn(t, a.url, a.emu, otherCluster("cluster-b", clk, nil))
	clk.Advance((10 * time.Minute) + time.Minute)
	two := params("gidRangeStart", "50000", "gidRangeEnd", "50001")
	hidden := map[string]bool{}
	for _, name := range []string{"pvc-a0", "pvc-a1"} {
		r, err := a.svc.CreateVolume(a.ctx(), createReq(name, 1<<30, two))
		if err != nil {
			t.Fatal(err)
		}
		hidden[apOf(t, r.Volume.VolumeId)] = true
	}
	var once atomic.Bool
	b.hook.setListFilter(func(aps []efs.AccessPoint) []efs.AccessPoint {
		if once.Swap(true) {
			return aps
		}
		return slices.DeleteFunc(aps, func(ap efs.AccessPoint) bool { return hidden[ap.ID] })
	})
	if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-b0", 1<<30, two)); err == nil {
		t.Error("b answered a GID a holds")
	}
	b.wantUniqueIDs(false)
	b.wantAccessPoints(2)
}
