package controller

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

func dirParams(extra ...string) map[string]string {
	return params(append([]string{"provisioningMode", "efs-dir", "directoryPerms", "770"}, extra...)...)
}

func (r *rootBed) createDir(name string, extra ...string) (*csi.CreateVolumeResponse, error) {
	return r.svc.CreateVolume(r.ctx(), createReq(name, 1<<30, dirParams(extra...)))
}

func (r *rootBed) mustCreateDir(name string, extra ...string) string {
	r.t.Helper()
	resp, err := r.createDir(name, extra...)
	if err != nil {
		r.t.Fatalf("CreateVolume(%s): %v", name, err)
	}
	return resp.GetVolume().GetVolumeId()
}

// dirOf is the directory of a directory volume in the emulator's data.
func (r *rootBed) dirOf(volID string) string {
	r.t.Helper()
	id, err := volume.ParseID(volID)
	if err != nil || !id.Dir {
		r.t.Fatalf("%q is not a directory volume's ID: %v", volID, err)
	}
	return filepath.Join(r.data, id.FileSystemID, id.Path)
}

func ownerOf(t *testing.T, p string) (uid, gid uint32, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid, fi.Mode()
}

func (r *rootBed) records() []*journal.Record {
	r.t.Helper()
	var all []*journal.Record
	if err := r.svc.journal.Volumes(r.ctx(), "", func(recs []*journal.Record) error {
		all = append(all, recs...)
		return nil
	}); err != nil {
		r.t.Fatal(err)
	}
	return all
}

// An efs-dir volume is a directory of the file system owned by its
// allocated id, with the class's mode, made without any EFS request but
// the allocator's listing, and an ID DeleteVolume tells from a static one.
func TestDirVolumeIsADirectoryWithItsIDsAndMode(t *testing.T) {
	r := newRootBed(t)
	before := r.emu.Counts()
	vol := r.mustCreateDir("pvc-1", "basePath", "/dyn")
	if !strings.HasPrefix(vol, volume.DirPrefix+testFS+":/dyn/") {
		t.Fatalf("volume ID %q", vol)
	}
	uid, gid, mode := ownerOf(t, r.dirOf(vol))
	if uid != gid || gid < volume.DefaultGIDRangeStart || gid > volume.DefaultGIDRangeEnd {
		t.Errorf("owner %d:%d, want the allocated id in the default range", uid, gid)
	}
	if mode.Perm() != 0o770 || !mode.IsDir() {
		t.Errorf("mode %v, want drwxrwx---", mode)
	}
	after := r.emu.Counts()
	for op, n := range after {
		if n-before[op] != 0 && op != emulator.OpDescribeAccessPoints { // the allocator's listing
			t.Errorf("%d %s requests on the create path", n-before[op], op)
		}
	}
	r.wantAccessPoints(0)
	// A repeat answers the same volume.
	if again := r.mustCreateDir("pvc-1", "basePath", "/dyn"); again != vol {
		t.Errorf("repeat answered %q, first %q", again, vol)
	}
	if got := len(r.records()); got != 1 {
		t.Errorf("%d records, want 1", got)
	}
}

func TestDirVolumeFixedIDs(t *testing.T) {
	r := newRootBed(t)
	vol := r.mustCreateDir("pvc-1", "uid", "1001", "gid", "2002", "directoryPerms", "2750")
	uid, gid, mode := ownerOf(t, r.dirOf(vol))
	if uid != 1001 || gid != 2002 {
		t.Errorf("owner %d:%d, want 1001:2002", uid, gid)
	}
	if mode&os.ModeSetgid == 0 || mode.Perm() != 0o750 {
		t.Errorf("mode %v, want setgid 0750", mode)
	}
}

// A create cut after its record (the mount failed: a kill there leaves
// the same) is finished by its retry: the same path and ids; a directory
// a killed attempt left with mode 0 is given its owner and mode.
func TestDirCreateCutIsFinishedByItsRetry(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(r *rootBed, dir string)
	}{
		{"mount fails after the record", func(r *rootBed, _ string) {
			r.mounter.afterMount = func(string) error { return errors.New("killed") }
		}},
		{"killed between mkdir and chown", func(r *rootBed, dir string) {
			if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(dir, 0); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRootBed(t)
			p := dirParams()
			want, _ := mustParams(t, p).RootDir("pvc-1")
			dir := filepath.Join(r.data, testFS, want)
			tc.cut(r, dir)
			first, ferr := r.createDir("pvc-1")
			r.mounter.afterMount = nil
			vol := r.mustCreateDir("pvc-1")
			if ferr == nil && first.GetVolume().GetVolumeId() != vol {
				t.Errorf("retry answered %q, first %q", vol, first.GetVolume().GetVolumeId())
			}
			uid, gid, mode := ownerOf(t, r.dirOf(vol))
			recs := r.records()
			if len(recs) != 1 {
				t.Fatalf("%d records", len(recs))
			}
			if int64(uid) != recs[0].UID || int64(gid) != recs[0].GID || mode.Perm() != 0o770 {
				t.Errorf("directory %d:%d %v, record %d:%d", uid, gid, mode, recs[0].UID, recs[0].GID)
			}
		})
	}
}

func mustParams(t *testing.T, m map[string]string) volume.Params {
	t.Helper()
	p, err := volume.ParseParams(m)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Directory volumes never share an id with each other nor with the file
// system's access points, created at once, across a restart too (the
// allocator learns the record's directory volumes: dirSource).
func TestDirVolumesNeverShareAGID(t *testing.T) {
	r := newRootBed(t)
	const n = 40
	for i := range n / 4 {
		r.mustCreate(fmt.Sprintf("pvc-ap-%d", i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, err := r.createDir(fmt.Sprintf("pvc-dir-%d", i), "gidRangeStart", "50000", "gidRangeEnd", "50100")
				if err == nil || !errors.Is(err, keylock.ErrBusy) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// A restarted controller (a fresh allocator) creates more.
	r2 := newBedOn(t, r.url, r.emu, func(c *Config) { c.Mounter, c.TempDir = r.mounter, r.tmp })
	for i := range n / 2 {
		if _, err := r2.svc.CreateVolume(r2.ctx(), createReq(fmt.Sprintf("pvc-later-%d", i), 1<<30, dirParams("gidRangeStart", "50000", "gidRangeEnd", "50100"))); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[int64]string{}
	for _, ap := range r.accessPoints() {
		seen[ap.PosixUser.GID] = ap.ID
	}
	for _, rec := range r.records() {
		if !rec.Dir {
			continue
		}
		if other, dup := seen[rec.GID]; dup {
			t.Errorf("gid %d on %s and %s", rec.GID, other, rec.Name)
		}
		seen[rec.GID] = rec.Name
		if uid, gid, _ := ownerOf(t, filepath.Join(r.data, testFS, rec.Path)); int64(gid) != rec.GID || int64(uid) != rec.UID {
			t.Errorf("%s: directory %d:%d, record %d:%d", rec.Name, uid, gid, rec.UID, rec.GID)
		}
	}
	if len(seen) != n/4+n+n/2 {
		t.Errorf("%d ids, want %d", len(seen), n/4+n+n/2)
	}
}

// DeleteVolume removes a directory volume's directory (with root removal
// on) but never one another volume or access point reaches, never a static
// volume's, never one no record names.
func TestDirDeleteRemovesOnlyWhatIsItsOwn(t *testing.T) {
	r := newRootBed(t)
	gone := r.mustCreateDir("pvc-gone")
	write(t, filepath.Join(r.dirOf(gone), "a/b/data"), "x")
	kept := r.mustCreateDir("pvc-kept")
	write(t, filepath.Join(r.dirOf(kept), "data"), "keep me")
	// An access point inside a directory volume keeps it.
	nested := r.mustCreateDir("pvc-nested", "subPathPattern", "shared", "ensureUniqueDirectory", "false")
	apInside := r.mustCreateAP(t, "/shared/inside")

	id, _ := volume.ParseID(gone)
	static := testFS + ":" + id.Path
	forged := volume.DirID(testFS, "/pvc-kept-not-recorded")
	for _, v := range []string{static, "efs:" + static, forged} {
		if err := r.delete(v); err != nil {
			t.Fatalf("delete %s: %v", v, err)
		}
	}
	if _, err := os.Stat(r.dirOf(gone)); err != nil {
		t.Fatalf("a static or unrecorded ID removed the directory: %v", err)
	}

	if err := r.delete(gone); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.dirOf(gone)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("deleted volume's directory still there: %v", err)
	}
	if err := r.delete(nested); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.dirOf(nested)); err != nil {
		t.Errorf("a directory an access point (%s) reaches was removed: %v", apInside, err)
	}
	if b, err := os.ReadFile(filepath.Join(r.dirOf(kept), "data")); err != nil || string(b) != "keep me" {
		t.Errorf("other volume's data: %q, %v", b, err)
	}
	if err := r.delete(gone); err != nil {
		t.Errorf("repeat: %v", err)
	}
	for _, rec := range r.records() {
		if rec.Name == "pvc-gone" || rec.Name == "pvc-nested" {
			t.Errorf("record of %s left", rec.Name)
		}
	}
}

// mustCreateAP makes an access point at root by hand (another writer).
func (r *rootBed) mustCreateAP(t *testing.T, root string) string {
	t.Helper()
	ap, err := r.client.CreateAccessPoint(r.ctx(), efs.CreateAccessPointInput{FileSystemID: testFS, ClientToken: "by-hand-" + strings.ReplaceAll(root, "/", "-"), Path: root,
		PosixUser: &efs.PosixUser{UID: 1, GID: 1}, CreationInfo: &efs.CreationInfo{OwnerUID: 1, OwnerGID: 1, Permissions: "755"}})
	if err != nil {
		t.Fatal(err)
	}
	return ap.ID
}

func TestDirDeleteKeepsTheDirectoryWithoutRootRemoval(t *testing.T) {
	r := newRootBed(t, func(c *Config) { c.DeleteRootDir = false })
	vol := r.mustCreateDir("pvc-1")
	if err := r.delete(vol); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.dirOf(vol)); err != nil {
		t.Errorf("directory removed without --delete-access-point-root-dir: %v", err)
	}
	if n := len(r.records()); n != 0 {
		t.Errorf("%d records left", n)
	}
}

func TestDirCreateRefusesAnotherVolumesDirectoryOrSize(t *testing.T) {
	r := newRootBed(t)
	r.mustCreateDir("pvc-1", "subPathPattern", "data", "ensureUniqueDirectory", "false")
	for _, tc := range []struct {
		name string
		req  *csi.CreateVolumeRequest
	}{
		{"another name at the same directory", createReq("pvc-2", 1<<30, dirParams("subPathPattern", "data", "ensureUniqueDirectory", "false"))},
		{"the same name with another capacity", createReq("pvc-1", 2<<30, dirParams("subPathPattern", "data", "ensureUniqueDirectory", "false"))},
		{"the same name with another uid", createReq("pvc-1", 1<<30, dirParams("subPathPattern", "data", "ensureUniqueDirectory", "false", "uid", "7"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.svc.CreateVolume(r.ctx(), tc.req)
			if !errors.Is(err, ErrIncompatible) {
				t.Errorf("got %v, want ErrIncompatible", err)
			}
		})
	}
}

// A delete of a directory volume by another controller while its create
// waits between the record and the mkdir: the create's compare-and-swap
// after the mkdir fails, it removes what it made and answers ABORTED;
// nothing is left, neither directory nor record.
func TestDirCreateAndDeleteAtOnceLeaveNothing(t *testing.T) {
	r := newRootBed(t)
	other := newBedOn(t, r.url, r.emu, func(c *Config) { c.Mounter, c.TempDir, c.DeleteRootDir = r.mounter, r.tmp, true })
	g := newGate()
	var held atomic.Bool
	r.mounter.afterMount = func(string) error {
		if held.CompareAndSwap(false, true) {
			g.hold(nil) // the create's mount; the delete's goes on
		}
		return nil
	}
	p := dirParams()
	root, _ := mustParams(t, p).RootDir("pvc-1")
	created := async(func() error { _, err := r.createDir("pvc-1"); return err })
	<-g.arrived
	if _, err := other.svc.DeleteVolume(other.ctx(), &csi.DeleteVolumeRequest{VolumeId: volume.DirID(testFS, root)}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	g.open()
	if err := <-created; !errors.Is(err, keylock.ErrBusy) {
		t.Fatalf("create: %v, want ErrBusy (ABORTED)", err)
	}
	if _, err := os.Stat(filepath.Join(r.data, testFS, root)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory left: %v", err)
	}
	if n := len(r.records()); n != 0 {
		t.Errorf("%d records left", n)
	}
	// And the volume is made again by the next create.
	r.mounter.afterMount = nil
	r.mustCreateDir("pvc-1")
}

// Root removal of an access point volume keeps its directory when a
// directory volume (recorded) lives inside it: the record's directory
// volumes are in the view a removal is checked against.
func TestAccessPointRootKeptForADirectoryVolumeInside(t *testing.T) {
	r := newRootBed(t)
	outer, err := r.svc.CreateVolume(r.ctx(), createReq("pvc-outer", 1<<30, params("subPathPattern", "team", "ensureUniqueDirectory", "false")))
	if err != nil {
		t.Fatal(err)
	}
	inner := r.mustCreateDir("pvc-inner", "basePath", "/team")
	write(t, filepath.Join(r.dirOf(inner), "data"), "keep me")
	if err := r.delete(outer.GetVolume().GetVolumeId()); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(r.dirOf(inner), "data")); err != nil || string(b) != "keep me" {
		t.Errorf("directory volume's data after its parent access point's delete: %q, %v", b, err)
	}
}

// The orphan collector collects a directory volume as DeleteVolume deletes
// it (its directory too, with root removal), only while the record is the
// orphan it judged: one marked bound since is left.
func TestCollectOrphanDirectoryVolume(t *testing.T) {
	r := newRootBed(t)
	p := dirParams("csi.storage.k8s.io/pvc/name", "gone", "csi.storage.k8s.io/pvc/namespace", "ns")
	if _, err := r.svc.CreateVolume(r.ctx(), createReq("pvc-orphan", 1<<30, p)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.svc.CreateVolume(r.ctx(), createReq("pvc-bound", 1<<30, p)); err != nil {
		t.Fatal(err)
	}
	orphan, bound := r.recordOf("pvc-orphan"), r.recordOf("pvc-bound")
	seenBound := *bound
	if err := r.svc.journal.MarkBound(r.ctx(), bound); err != nil {
		t.Fatal(err)
	}
	if err := r.svc.CollectOrphan(r.ctx(), &seenBound); !errors.Is(err, ErrNotOrphan) {
		t.Errorf("collecting a volume bound since: %v, want ErrNotOrphan", err)
	}
	if err := r.svc.CollectOrphan(r.ctx(), orphan); err != nil {
		t.Fatal(err)
	}
	if r.recordOf("pvc-orphan") != nil {
		t.Error("orphan's record left")
	}
	if _, err := os.Stat(filepath.Join(r.data, testFS, orphan.Path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("orphan's directory left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(r.data, testFS, bound.Path)); err != nil {
		t.Errorf("bound volume's directory: %v", err)
	}
}

// Access points made after directory volumes in the same range never take
// a directory volume's GID: their GID token sequence skips the ids the
// record's directory volumes hold (noted at once in this process, and by
// every listing: dirSource), in this process and in a restarted one.
func TestAccessPointsAfterDirectoryVolumesNeverShareAGID(t *testing.T) {
	r := newRootBed(t)
	rng := []string{"gidRangeStart", "50000", "gidRangeEnd", "50060"}
	for i := range 25 {
		r.mustCreateDir(fmt.Sprintf("pvc-dir-%d", i), rng...)
	}
	for i := range 8 {
		if _, err := r.svc.CreateVolume(r.ctx(), createReq(fmt.Sprintf("pvc-ap-%d", i), 1<<30, params(rng...))); err != nil {
			t.Fatal(err)
		}
	}
	r2 := newBedOn(t, r.url, r.emu, func(c *Config) { c.Mounter, c.TempDir = r.mounter, r.tmp })
	for i := range 8 {
		if _, err := r2.svc.CreateVolume(r2.ctx(), createReq(fmt.Sprintf("pvc-ap-later-%d", i), 1<<30, params(rng...))); err != nil {
			t.Fatal(err)
		}
	}
	dirs := map[int64]string{}
	for _, rec := range r.records() {
		if rec.Dir {
			dirs[rec.GID] = rec.Name
		}
	}
	for _, ap := range r.accessPoints() {
		if name, dup := dirs[ap.PosixUser.GID]; dup {
			t.Errorf("gid %d on access point %s (%s, token %s) and directory volume %s", ap.PosixUser.GID, ap.ID, ap.Tags[TagVolumeName], ap.ClientToken, name)
		}
	}
}
