package controller

import (
	"fmt"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

const testFS2 = "fs-0123456789abcdef2"

// A class over two file systems whose first is at its access point limit
// keeps provisioning on the second; a retry and a restarted controller
// answer each volume on the file system it was placed on, even once the
// other is emptier; deletes of volumes of either work and leave nothing
// of the record.
func TestClassOverTwoFileSystemsProvisionsPastTheFirstOnesLimit(t *testing.T) {
	const limit = 4
	url, emu := emulatortest.Start(t, emulator.Config{DataDir: t.TempDir(), FileSystems: []string{testFS, testFS2}, AccessPointLimit: limit})
	store := journal.NewMemory()
	cfg := func(c *Config) { c.AccessPointLimit, c.Journal = limit, store }
	b := newBedOn(t, url, emu, cfg)
	class := params("fileSystemId", testFS+","+testFS2)
	// The first file system is full: made by hand, outside the class.
	var byHand []string
	for i := range limit {
		ap, err := b.client.CreateAccessPoint(b.ctx(), efs.CreateAccessPointInput{FileSystemID: testFS, ClientToken: fmt.Sprintf("hand-%d", i),
			Path: fmt.Sprintf("/hand-%d", i), PosixUser: &efs.PosixUser{UID: 1, GID: 1}})
		if err != nil {
			t.Fatal(err)
		}
		byHand = append(byHand, ap.ID)
	}
	var vols []string
	for i := range limit {
		resp, err := b.svc.CreateVolume(b.ctx(), createReq(fmt.Sprintf("pvc-%d", i), 1<<30, class))
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		id, _ := volume.ParseID(resp.GetVolume().GetVolumeId())
		if id.FileSystemID != testFS2 {
			t.Errorf("volume %d placed on %s, whose limit is reached", i, id.FileSystemID)
		}
		vols = append(vols, resp.GetVolume().GetVolumeId())
	}
	// Both full now: a new volume has nowhere to go.
	if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-none", 1<<30, class)); err == nil || !strings.Contains(err.Error(), "at the limit") {
		t.Errorf("create with both file systems full: %v, want ErrNoFileSystem naming the limit", err)
	}
	// The first empties; a restarted controller answers the placed
	// volumes where they are, and places new ones on the emptier.
	for _, id := range byHand {
		if err := b.client.DeleteAccessPoint(b.ctx(), id); err != nil {
			t.Fatal(err)
		}
	}
	again := newBedOn(t, url, emu, cfg)
	for i, want := range vols {
		resp, err := again.svc.CreateVolume(again.ctx(), createReq(fmt.Sprintf("pvc-%d", i), 1<<30, class))
		if err != nil || resp.GetVolume().GetVolumeId() != want {
			t.Errorf("retry of volume %d after a restart: %v, %v; want %s", i, resp.GetVolume().GetVolumeId(), err, want)
		}
	}
	resp, err := again.svc.CreateVolume(again.ctx(), createReq("pvc-new", 1<<30, class))
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := volume.ParseID(resp.GetVolume().GetVolumeId()); id.FileSystemID != testFS {
		t.Errorf("new volume on %s, want the emptier %s", id.FileSystemID, testFS)
	}
	for _, v := range append(vols, resp.GetVolume().GetVolumeId()) {
		if err := again.delete(v); err != nil {
			t.Fatalf("delete %s: %v", v, err)
		}
	}
	if n := store.Len(); n != 0 {
		t.Errorf("%d record entries left (place entries too) after every volume was deleted", n)
	}
}

// A class over a regional and a One Zone file system: a volume required
// in another zone than the One Zone one's goes to the regional one, even
// when the One Zone one is emptier; one required in its zone may go to
// either (the emptier).
func TestPlacementSkipsAOneZoneFileSystemOutsideTheRequiredZones(t *testing.T) {
	b := newZoneBed(t)
	class := params(volume.ParamFileSystemID, testFS+","+oneZoneFS)
	b.mustCreate("pvc-filler") // on testFS (the class of params() names it alone)
	for _, tc := range []struct {
		name, zone, want string
	}{
		{"required in another zone", "us-east-1a", testFS},
		{"required in its zone", oneZone, oneZoneFS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := createReq("pvc-"+tc.zone, 1<<30, class)
			req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: zones(tc.zone), Preferred: zones(tc.zone)}
			resp, err := b.svc.CreateVolume(b.ctx(), req)
			if err != nil {
				t.Fatal(err)
			}
			if id, _ := volume.ParseID(resp.GetVolume().GetVolumeId()); id.FileSystemID != tc.want {
				t.Errorf("placed on %s, want %s", id.FileSystemID, tc.want)
			}
		})
	}
}
