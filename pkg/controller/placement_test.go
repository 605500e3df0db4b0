package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// A create of a class over several file systems that is refused after the
// choice (here: subPathPattern names the claim, and the request has no
// claim name) records no place entry, so a later valid create of the same
// name is placed afresh: on the emptier file system, not on the refused
// create's choice.
func TestPlacementRefusedCreateLeavesNoPlaceEntry(t *testing.T) {
	url, emu := emulatortest.Start(t, emulator.Config{DataDir: t.TempDir(), FileSystems: []string{testFS, testFS2}})
	store := journal.NewMemory()
	b := newBedOn(t, url, emu, func(c *Config) { c.Journal = store })
	const name = "pvc-refused"
	// Both empty: the refused create's choice is the tie's, by the hash.
	first, other := testFS, testFS2
	if spread(name, testFS2) < spread(name, testFS) {
		first, other = testFS2, testFS
	}
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"claim name missing from subPathPattern", []string{volume.ParamSubPathPattern, "${.PVC.name}"}},
		{"subPathPattern too deep", []string{volume.ParamSubPathPattern, strings.Repeat("a/", 200) + "a"}},
		{"tags refused with enableTagging false", []string{volume.ParamSubPathPattern, "x", "enableTagging", "false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class := params(append([]string{volume.ParamFileSystemID, testFS + "," + testFS2}, tc.extra...)...)
			cfg := func(c *Config) { c.Journal = store }
			if tc.extra[len(tc.extra)-1] == "false" {
				cfg = func(c *Config) { c.Journal, c.Tags = store, map[string]string{"team": "a"} }
			}
			svc := newBedOn(t, url, emu, cfg).svc
			if _, err := svc.CreateVolume(b.ctx(), createReq(name, 1<<30, class)); err == nil {
				t.Fatal("create succeeded, want it refused")
			}
			if fs, err := journal.New(store).Placement(b.ctx(), volume.NameToken(name)); err == nil {
				t.Errorf("refused create left a place entry naming %s", fs)
			}
			if n := store.Len(); n != 0 {
				t.Errorf("refused create left %d record entries", n)
			}
		})
	}
	// The refused creates' choice is now the fuller one: a valid create of
	// the name goes to the other.
	if _, err := b.client.CreateAccessPoint(b.ctx(), efs.CreateAccessPointInput{FileSystemID: first, ClientToken: "hand",
		Path: "/hand", PosixUser: &efs.PosixUser{UID: 1, GID: 1}}); err != nil {
		t.Fatal(err)
	}
	class := params(volume.ParamFileSystemID, testFS+","+testFS2, volume.ParamSubPathPattern, "${.PVC.name}", volume.ParamPVCName, "claim")
	resp, err := b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, class))
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := volume.ParseID(resp.GetVolume().GetVolumeId()); id.FileSystemID != other {
		t.Errorf("valid create after refused ones placed on %s, want the emptier %s", id.FileSystemID, other)
	}
}

// listCounter counts listings per file system.
type listCounter struct {
	EFS
	mu sync.Mutex
	n  map[string]int
}

func (c *listCounter) ListAccessPoints(ctx context.Context, fsID string, fn func([]efs.AccessPoint) error) error {
	c.mu.Lock()
	c.n[fsID]++
	c.mu.Unlock()
	return c.EFS.ListAccessPoints(ctx, fsID, fn)
}

// listed is the number of listings of each of ids since the last call.
func (c *listCounter) listed(ids []string) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, id := range ids {
		out[id] = c.n[id]
	}
	clear(c.n)
	return out
}

// A class over one reachable file system and several that cannot be
// listed: the first create lists each once; creates within
// unreachableSkip of that send them nothing, later ones list them again;
// and when every file system of a class is skipped, the error names each
// and why, and nothing is sent.
func TestPlacementSkipsUnreachableFileSystemsForAWhile(t *testing.T) {
	const unreachable = 5
	url, emu := emulatortest.Start(t, emulator.Config{DataDir: t.TempDir(), FileSystems: []string{testFS}})
	clk := newClock()
	counter := &listCounter{n: map[string]int{}}
	b := newBedOn(t, url, emu, steadyState(clk), func(c *Config) { counter.EFS, c.EFS = c.EFS, counter })
	ids := []string{testFS}
	for i := range unreachable {
		ids = append(ids, fmt.Sprintf("fs-0123456789abcde%02x", 0xa0+i)) // not in the emulator
	}
	down := ids[1:]
	class := params(volume.ParamFileSystemID, strings.Join(ids, ","))
	for _, tc := range []struct {
		name, volume string
		after        time.Duration
		class        map[string]string
		want         int // listings of each unreachable file system
		wantErr      bool
	}{
		{"the first create lists each", "pvc-1", 0, class, 1, false},
		{"within the window, none is listed", "pvc-2", unreachableSkip / 2, class, 0, false},
		{"after the window, each is listed again", "pvc-3", unreachableSkip/2 + time.Second, class, 1, false},
		{"every one skipped: refused with no request", "pvc-none", 0, params(volume.ParamFileSystemID, strings.Join(down, ",")), 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk.Advance(tc.after)
			counter.listed(nil)
			_, err := b.svc.CreateVolume(b.ctx(), createReq(tc.volume, 1<<30, tc.class))
			switch {
			case tc.wantErr && !errors.Is(err, ErrNoFileSystem):
				t.Fatalf("create: %v, want ErrNoFileSystem", err)
			case !tc.wantErr && err != nil:
				t.Fatal(err)
			}
			for fs, n := range counter.listed(down) {
				if n != tc.want {
					t.Errorf("%s listed %d times, want %d", fs, n, tc.want)
				}
			}
			if !tc.wantErr {
				return
			}
			for _, fs := range down {
				if !strings.Contains(err.Error(), fs+": skipped") {
					t.Errorf("error does not say %s was skipped: %v", fs, err)
				}
			}
		})
	}
}

// Another create of the volume (another replica) that records its choice
// between this create's choice and its own record of it wins: the volume
// is made on the other's choice, and its delete leaves nothing.
func TestPlacementRecordedFirstByAnotherWins(t *testing.T) {
	url, emu := emulatortest.Start(t, emulator.Config{DataDir: t.TempDir(), FileSystems: []string{testFS, testFS2}})
	store := journal.NewMemory()
	b := newBedOn(t, url, emu, func(c *Config) { c.Journal = store })
	const name = "pvc-raced"
	other := testFS
	if spread(name, testFS) < spread(name, testFS2) { // this create's choice: both are empty
		other = testFS2
	}
	var raced atomic.Bool
	store.SetHook(func(op string, k journal.Key) error {
		if op == "create" && k.Kind == journal.KindPlace && raced.CompareAndSwap(false, true) {
			if _, err := journal.New(store).Place(b.ctx(), k.Name, other); err != nil {
				t.Error(err)
			}
		}
		return nil
	})
	resp, err := b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, params(volume.ParamFileSystemID, testFS+","+testFS2)))
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := volume.ParseID(resp.GetVolume().GetVolumeId()); id.FileSystemID != other {
		t.Errorf("volume made on %s, want %s, recorded first by another", id.FileSystemID, other)
	}
	if err := b.delete(resp.GetVolume().GetVolumeId()); err != nil {
		t.Fatal(err)
	}
	if n := store.Len(); n != 0 {
		t.Errorf("%d record entries left after the delete", n)
	}
}
