package controller

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// A user who fills a class's range gets every id of it, one create each,
// as upstream's lowest-free-GID does: no create of a range with a free id
// fails for "contention" with volumes that are done. A volume walks its
// own sequence of ids (probe.go), and before it skipped only ids carried
// under other tokens: at 90% full 0.9^8 = 43% of creates gave up after
// MaxIDAttempts held ids (642 failed calls over 9,000 volumes of the
// default range, one caller).
func TestFillingARangeOneCreateEach(t *testing.T) {
	for _, size := range []int{2, 64, 500} {
		t.Run(fmt.Sprint("ids=", size), func(t *testing.T) {
			b := newBed(t)
			p := params("gidRangeStart", "50000", "gidRangeEnd", fmt.Sprint(50000+size-1))
			for i := range size {
				if _, err := b.svc.CreateVolume(b.ctx(), createReq(fmt.Sprint("pvc-", i), 1<<30, p)); err != nil {
					t.Fatalf("create %d of a range of %d: %v", i+1, size, err)
				}
			}
			if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-full", 1<<30, p)); !errors.Is(err, gid.ErrExhausted) {
				t.Fatalf("create past a full range: %v, want ErrExhausted", err)
			}
			b.wantAccessPoints(size)
			b.wantUniqueIDs(false)
		})
	}
}

// The skip passes over ids only for another volume: a writer keeping a
// record of its own that has listed the access point another writer made
// for the same volume under its GID token sends that token again, and EFS
// answers the access point, which it adopts. Skipping it would make the
// volume twice.
func TestSequenceNeverSkipsTheVolumesOwnAccessPoint(t *testing.T) {
	clk := newClock()
	own := func(c *Config) { c.Journal, c.Now = journal.NewMemory(), clk.Now }
	a := newBed(t, own)
	b := newBedOn(t, a.url, a.emu, own)
	clk.Advance((10 * time.Minute) + time.Minute)
	p := params("gidRangeStart", "50000", "gidRangeEnd", "50009")
	first, err := a.svc.CreateVolume(a.ctx(), createReq("pvc-1", 1<<30, p))
	if err != nil {
		t.Fatal(err)
	}
	// b lists the file system (its first create), then creates pvc-1.
	if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-2", 1<<30, p)); err != nil {
		t.Fatal(err)
	}
	ap, err := a.client.DescribeAccessPoint(a.ctx(), apOf(t, first.Volume.VolumeId))
	if err != nil {
		t.Fatal(err)
	}
	st := b.svc.fs(testFS)
	st.mu.Lock()
	_, taken := st.mem.Skips(core.PosixGID(ap), "pvc-2", "/pvc-2")
	st.mu.Unlock()
	if !taken {
		t.Fatalf("b's state does not skip pvc-1's id for another volume")
	}
	again, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-1", 1<<30, p))
	if err != nil {
		t.Fatal(err)
	}
	if again.Volume.VolumeId != first.Volume.VolumeId {
		t.Fatalf("the other writer answered %s for pvc-1, the first %s", again.Volume.VolumeId, first.Volume.VolumeId)
	}
	b.wantAccessPoints(2)
}

// What the skip knows of GID tokens is a hint: another process may have
// deleted the access point since this one listed or saw it. A stale hint
// costs a request, never a create: with nothing else left, the id is
// tried and EFS's answer decides (sim seed 392: another cluster deleted
// the access point this process saw in an AlreadyExists answer, and every
// later create of a 2-id range came round to "no free GID").
func TestStaleTakenHintNeverFillsARange(t *testing.T) {
	b := newBed(t)
	p := params("gidRangeStart", "50000", "gidRangeEnd", "50001")
	first, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-1", 1<<30, p))
	if err != nil {
		t.Fatal(err)
	}
	ap, err := b.client.DescribeAccessPoint(b.ctx(), apOf(t, first.Volume.VolumeId))
	if err != nil {
		t.Fatal(err)
	}
	free := 50000 + 50001 - core.PosixGID(ap)
	gone := efs.AccessPoint{ID: "fsap-0000000000000dead", FileSystemID: testFS,
		ClientToken: volume.GIDToken(testFS, free), PosixUser: &efs.PosixUser{UID: free, GID: free},
		Tags: map[string]string{ownership.TagVolumeName: "pvc-deleted-elsewhere"}}
	st := b.svc.fs(testFS)
	st.mu.Lock()
	st.mem.SawToken(&gone, "")
	st.mu.Unlock()
	if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-2", 1<<30, p)); err != nil {
		t.Fatalf("create of a range with a free id: %v", err)
	}
	b.wantAccessPoints(2)
	b.wantUniqueIDs(false)
}

// Replicas of one record: a volume made on one and deleted on the other
// leaves the first with nothing but its own memory of the access point,
// which no listing shows any more. That memory must not keep the id: the
// range here has one, and before, every later create on the first replica
// answered "no free GID" for good (the simulator's wide worlds).
func TestIDDeletedOnAnotherReplicaIsFreeHere(t *testing.T) {
	a := newBed(t)
	b := newBedOn(t, a.url, a.emu)
	p := params("gidRangeStart", "50000", "gidRangeEnd", "50001")
	var made []string
	for _, name := range []string{"pvc-1", "pvc-2"} {
		r, err := a.svc.CreateVolume(a.ctx(), createReq(name, 1<<30, p))
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, r.Volume.VolumeId)
	}
	if err := b.delete(made[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := a.svc.CreateVolume(a.ctx(), createReq("pvc-3", 1<<30, p)); err != nil {
		t.Fatalf("create on the replica that made the deleted volume: %v", err)
	}
	a.wantAccessPoints(2)
}
