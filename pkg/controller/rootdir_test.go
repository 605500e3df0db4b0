package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/mount"
	"github.com/efs-csi/efs-csi-driver/pkg/rmtree/rmtreetest"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// hookMounter wraps the real bind-mount back end so a test can fail or
// cancel at a chosen step, and records the mount points it was given.
type hookMounter struct {
	FileSystemMounter
	afterMount    func(target string) error
	beforeUnmount func(target string) error // a fault: an error fails the unmount
	mu            sync.Mutex
	targets       []string
}

func (h *hookMounter) Unmount(ctx context.Context, target string) error {
	if h.beforeUnmount != nil {
		if err := h.beforeUnmount(target); err != nil {
			return err
		}
	}
	return h.FileSystemMounter.Unmount(ctx, target)
}

func (h *hookMounter) MountFileSystem(ctx context.Context, fsID, target string) error {
	h.mu.Lock()
	h.targets = append(h.targets, target)
	h.mu.Unlock()
	if err := h.FileSystemMounter.MountFileSystem(ctx, fsID, target); err != nil {
		return err
	}
	if h.afterMount != nil {
		return h.afterMount(target)
	}
	return nil
}

type rootBed struct {
	*bed
	data    string // emulator data dir: DATA/<fs-id>/<path>
	mounter *hookMounter
	lists   *listHook
	tmp     string
	skew    atomic.Int64 // added to the controller's clock: pastWindow
}

// listHook counts the controller's listings and can hold one.
type listHook struct {
	EFS
	calls  atomic.Int32
	before func(any)
}

func (l *listHook) ListAccessPoints(ctx context.Context, fsID string, fn func([]efs.AccessPoint) error) error {
	l.calls.Add(1)
	if l.before != nil {
		l.before(fsID)
	}
	return l.EFS.ListAccessPoints(ctx, fsID, fn)
}

func newRootBed(t *testing.T, mut ...func(*Config)) *rootBed {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("root-directory removal needs bind mounts (root)")
	}
	data := rmtreetest.FastDir(t) // tmpfs: the huge trees take minutes on this disk
	url, emu := emulatortest.Start(t, emulator.Config{DataDir: data, FileSystems: []string{testFS}})
	client, err := efs.New(context.Background(), efs.Config{Region: "us-east-1", Endpoint: url, RateLimits: unlimited})
	if err != nil {
		t.Fatal(err)
	}
	local, err := mount.NewLocal(data, client)
	if err != nil {
		t.Fatal(err)
	}
	r := &rootBed{data: data, mounter: &hookMounter{FileSystemMounter: local}, tmp: t.TempDir()}
	r.bed = newBedOn(t, url, emu, func(c *Config) {
		c.DeleteRootDir, c.Mounter, c.TempDir = true, r.mounter, r.tmp
		c.Now = func() time.Time { return time.Now().Add(time.Duration(r.skew.Load())) }
		r.lists = &listHook{EFS: c.EFS}
		c.EFS = r.lists
		for _, m := range mut {
			m(c)
		}
	})
	t.Cleanup(r.assertNoMountLeft)
	return r
}

// assertNoMountLeft: every per-call mount point is unmounted and removed.
func (r *rootBed) assertNoMountLeft() {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		r.t.Fatal(err)
	}
	for _, line := range strings.Split(string(info), "\n") {
		if strings.Contains(line, r.tmp) {
			r.t.Errorf("mount left behind: %s", line)
		}
	}
	left, _ := filepath.Glob(filepath.Join(r.tmp, "efs-csi-delete-*"))
	if len(left) > 0 {
		r.t.Errorf("mount points left behind: %v", left)
	}
}

func (r *rootBed) rootOf(volID string) string {
	r.t.Helper()
	ap, err := r.client.DescribeAccessPoint(r.ctx(), apOf(r.t, volID))
	if err != nil {
		r.t.Fatal(err)
	}
	return filepath.Join(r.data, testFS, ap.Path)
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDeleteRemovesOnlyItsOwnRootDirectory(t *testing.T) {
	r := newRootBed(t)
	gone, kept := r.mustCreate("pvc-gone"), r.mustCreate("pvc-kept")
	write(t, filepath.Join(r.rootOf(gone), "a/b/data"), "x")
	write(t, filepath.Join(r.rootOf(kept), "data"), "keep me")
	goneRoot, keptRoot := r.rootOf(gone), r.rootOf(kept)
	if err := r.delete(gone); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(goneRoot); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("deleted volume's root still there: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(keptRoot, "data")); err != nil || string(b) != "keep me" {
		t.Errorf("other volume's data: %q, %v", b, err)
	}
	r.wantAccessPoints(1)
}

// A failed removal keeps the access point so the retry can finish, and the
// mount point is cleaned up all the same.
func TestFailedRemovalKeepsAccessPoint(t *testing.T) {
	r := newRootBed(t)
	vol := r.mustCreate("pvc-1")
	r.mounter.afterMount = func(target string) error {
		// Make the file system read-only under the driver: removal fails.
		return remountReadOnly(target)
	}
	err := r.delete(vol)
	if !errors.Is(err, ErrRootDirRemoval) {
		t.Fatalf("got %v, want ErrRootDirRemoval", err)
	}
	r.wantAccessPoints(1)
	r.mounter.afterMount = nil
	if err := r.delete(vol); err != nil {
		t.Fatalf("retry: %v", err)
	}
	r.wantAccessPoints(0)
}

func TestCancelledDeleteStillUnmounts(t *testing.T) {
	r := newRootBed(t)
	vol := r.mustCreate("pvc-1")
	ctx, cancel := context.WithCancel(context.Background())
	r.mounter.afterMount = func(string) error { cancel(); return nil }
	_, err := r.svc.DeleteVolume(ctx, deleteReq(vol))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	r.wantAccessPoints(1)
}

// An access point whose root is "/" or the class's base path is never
// emptied: the whole file system or every volume would go.
func TestUnsafeRootsAreRefused(t *testing.T) {
	r := newRootBed(t)
	write(t, filepath.Join(r.data, testFS, "base", "other-volume", "data"), "x")
	for _, tc := range []struct{ path, base string }{{"/", ""}, {"/base", "/base"}} {
		tags := map[string]string{TagCluster: "true", TagVolumeName: "pvc-x" + tc.path}
		if tc.base != "" {
			tags[TagBasePath] = tc.base
		}
		ap, err := r.client.CreateAccessPoint(r.ctx(), efs.CreateAccessPointInput{
			FileSystemID: testFS, ClientToken: "unsafe" + tc.path, Path: tc.path, Tags: tags,
			PosixUser: &efs.PosixUser{UID: 1, GID: 1},
		})
		if err != nil {
			t.Fatal(err)
		}
		err = r.delete("efs:" + testFS + "::" + ap.ID)
		if !errors.Is(err, ErrUnsafeRootDir) {
			t.Errorf("root %q: got %v, want ErrUnsafeRootDir", tc.path, err)
		}
	}
	if _, err := os.Stat(filepath.Join(r.data, testFS, "base", "other-volume", "data")); err != nil {
		t.Fatalf("data under the file system root lost: %v", err)
	}
	r.wantAccessPoints(2)
}

func deleteReq(id string) *csi.DeleteVolumeRequest { return &csi.DeleteVolumeRequest{VolumeId: id} }

func remountReadOnly(target string) error {
	return unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, "")
}

// A controller killed between mount and unmount leaves its mount point; the
// next process removes it, but never one of a live process.
func TestRestartCleansMountPointsOfDeadProcessesOnly(t *testing.T) {
	r := newRootBed(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(r.tmp, fmt.Sprintf("%s%d-x", mountPointPrefix, dead.Process.Pid))
	live := filepath.Join(r.tmp, fmt.Sprintf("%s%d-y", mountPointPrefix, os.Getppid()))
	for _, dir := range []string{stale, live} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := r.mounter.MountFileSystem(r.ctx(), testFS, dir); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.svc.CleanStaleMountPoints(r.ctx()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale mount point of a dead process still there: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("mount point of a live process removed: %v", err)
	}
	if err := r.mounter.Unmount(r.ctx(), live); err != nil {
		t.Fatal(err)
	}
	os.Remove(live)
}

// createWith provisions a volume with extra StorageClass parameters.
func (r *rootBed) createWith(name string, extra ...string) string {
	r.t.Helper()
	resp, err := r.svc.CreateVolume(r.ctx(), createReq(name, 1<<30, params(extra...)))
	if err != nil {
		r.t.Fatalf("CreateVolume(%s): %v", name, err)
	}
	return resp.GetVolume().GetVolumeId()
}

// handMade creates an access point as the upstream driver or an operator
// would: none of this driver's tags.
func (r *rootBed) handMade(path string) {
	r.t.Helper()
	if _, err := r.client.CreateAccessPoint(r.ctx(), efs.CreateAccessPointInput{
		FileSystemID: testFS, ClientToken: "by-hand" + path, Path: path,
		PosixUser: &efs.PosixUser{UID: 1, GID: 1},
	}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rootBed) inFS(p string) string { return filepath.Join(r.data, testFS, p) }

// sharedData: subPathPattern ${.PVC.name} without the unique suffix gives
// every claim named "data" the directory /data, whatever its namespace.
func sharedData(ns string) []string {
	return []string{"subPathPattern", "${.PVC.name}", "ensureUniqueDirectory", "false",
		volume.ParamPVCName, "data", volume.ParamPVCNamespace, ns}
}

// A root directory that another live access point also reaches (the same
// directory, one above it or one below it, tagged by this driver or not) is
// someone else's data too: the delete succeeds and leaves it.
func TestDeleteKeepsADirectoryAnotherAccessPointReaches(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(r *rootBed) (vol string)
		kept  bool
	}{
		{"the same directory, through a subPathPattern without the unique suffix", func(r *rootBed) string {
			r.createWith("pvc-b", sharedData("b")...)
			return r.createWith("pvc-a", sharedData("a")...)
		}, true},
		{"the same directory, made by hand", func(r *rootBed) string {
			r.handMade("/pvc-a")
			return r.mustCreate("pvc-a")
		}, true},
		{"a directory above it, made by hand", func(r *rootBed) string {
			r.handMade("/team")
			return r.createWith("pvc-a", "basePath", "/team")
		}, true},
		{"the whole file system, made by hand", func(r *rootBed) string {
			r.handMade("/")
			return r.mustCreate("pvc-a")
		}, true},
		{"a directory below it, made by hand", func(r *rootBed) string {
			r.handMade("/pvc-a/sub")
			return r.mustCreate("pvc-a")
		}, true},
		{"a sibling whose name it prefixes is unrelated", func(r *rootBed) string {
			r.handMade("/a/bc")
			return r.createWith("pvc-a", "basePath", "/a", "subPathPattern", "${.PVC.name}",
				"ensureUniqueDirectory", "false", volume.ParamPVCName, "b", volume.ParamPVCNamespace, "ns")
		}, false},
		{"a directory it prefixes is unrelated", func(r *rootBed) string {
			r.handMade("/pvc-ab")
			return r.mustCreate("pvc-a")
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRootBed(t)
			vol := tc.setup(r)
			root := r.rootOf(vol)
			write(t, filepath.Join(root, "data"), "shared")
			if err := r.delete(vol); err != nil {
				t.Fatalf("delete: %v", err)
			}
			r.wantAccessPoints(1)
			_, err := os.Stat(filepath.Join(root, "data"))
			if tc.kept && err != nil {
				t.Fatalf("data another access point reaches was removed: %v", err)
			}
			if !tc.kept && !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("root directory of an unrelated volume kept: %v", err)
			}
			if want := map[bool]int64{true: 1}[tc.kept]; r.svc.RootDirsKept() != want {
				t.Fatalf("RootDirsKept() = %d, want %d", r.svc.RootDirsKept(), want)
			}
		})
	}
}

// An access point another writer made on a volume's directory just before
// its DeleteVolume, which EFS does not list yet (the emulator's visibility
// delay, on since the start), keeps the directory: removal waits for a
// listing that begins --listing-lag after the call. Without the wait the
// directory goes (the red team's finding: a live access point's data
// deleted).
func TestDeleteKeepsADirectoryAnAccessPointMadeWithinTheListingLagReaches(t *testing.T) {
	const delay = 300 * time.Millisecond
	for _, tc := range []struct {
		lag  time.Duration
		kept bool
	}{{delay + 100*time.Millisecond, true}, {0, false}} {
		t.Run(fmt.Sprintf("lag=%v", tc.lag), func(t *testing.T) {
			r := newRootBed(t, func(c *Config) { c.ListingLag = tc.lag })
			r.emu.SetFault(emulator.OpCreateAccessPoint, emulator.Fault{VisibilityDelay: delay})
			vol := r.mustCreate("pvc-a")
			for { // until EFS shows it: the delete then finds it as usual
				if _, err := r.client.DescribeAccessPoint(r.ctx(), apOf(t, vol)); err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			root := r.rootOf(vol)
			write(t, filepath.Join(root, "data"), "live")
			r.handMade("/pvc-a")
			if err := r.delete(vol); err != nil {
				t.Fatalf("delete: %v", err)
			}
			_, err := os.Stat(filepath.Join(root, "data"))
			if tc.kept && err != nil {
				t.Fatalf("the data of an access point made before the delete was removed: %v", err)
			}
			if !tc.kept && !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("without the wait the hidden access point is not seen, yet the directory was kept (%v): the test no longer hides it", err)
			}
		})
	}
}

// An access point another writer made on a volume's directory 300 ms
// before its DeleteVolume, which EFS does not list yet, keeps the
// directory although this process never saw EFS lag (its own access
// point was listed at once): a lag shows only as an access point missing
// from a listing, and another writer's is not known to be missing, so
// every removal waits for a listing that begins --listing-lag after the
// delete began. Before, the wait applied only once this process had seen
// a lag, and the live access point's data was removed (the red team's
// finding).
func TestDeleteWaitsForTheListingLagUnseenByThisProcess(t *testing.T) {
	r := newRootBed(t, func(c *Config) { c.ListingLag = 400 * time.Millisecond })
	vol := r.mustCreate("pvc-a") // listed at once: no lag to see
	root := r.rootOf(vol)
	write(t, filepath.Join(root, "data"), "live")
	r.emu.SetFault(emulator.OpCreateAccessPoint, emulator.Fault{VisibilityDelay: 300 * time.Millisecond})
	r.handMade("/pvc-a")
	if err := r.delete(vol); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "data")); err != nil {
		t.Fatalf("the data of an access point made 300 ms before the delete was removed: %v", err)
	}
}

// The shared directory goes with the last access point that reaches it.
func TestSharedDirectoryIsRemovedWithItsLastAccessPoint(t *testing.T) {
	r := newRootBed(t)
	a, b := r.createWith("pvc-a", sharedData("a")...), r.createWith("pvc-b", sharedData("b")...)
	root := r.rootOf(a)
	write(t, filepath.Join(root, "data"), "shared")
	if err := r.delete(a); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "data")); err != nil {
		t.Fatalf("namespace b's data removed with namespace a's volume: %v", err)
	}
	if err := r.delete(b); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("shared directory kept after its last access point: %v", err)
	}
	r.wantAccessPoints(0)
}

// A symlink anywhere on the way from the file system root to the root
// directory (the root itself included) is refused and the access point
// kept: it can only have been planted by someone with access above the
// volume, and following it would remove what it points at.
func TestSymlinkOnTheWayToTheRootIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		// plant turns part of root's path into a symlink to the directory
		// that holds precious data; root is relative to the file system.
		plant func(r *rootBed, root string) (precious string)
	}{
		{"the root itself, to another volume's directory", func(r *rootBed, root string) string {
			victim := r.rootOf(r.mustCreate("pvc-victim"))
			must(t, os.Remove(r.inFS(root)))
			must(t, os.Symlink(victim, r.inFS(root)))
			return victim
		}},
		{"a directory above the root, to another directory of the file system", func(r *rootBed, root string) string {
			// /base -> elsewhere: the root /base/pvc-a would be /elsewhere/pvc-a.
			precious := r.inFS("elsewhere/" + filepath.Base(root))
			must(t, os.MkdirAll(precious, 0o755))
			must(t, os.RemoveAll(r.inFS("base")))
			must(t, os.Symlink("elsewhere", r.inFS("base")))
			return precious
		}},
		{"a directory above the root, out of the file system", func(r *rootBed, root string) string {
			precious := t.TempDir()
			must(t, os.MkdirAll(filepath.Join(precious, filepath.Base(root)), 0o755))
			must(t, os.RemoveAll(r.inFS("base")))
			must(t, os.Symlink(precious, r.inFS("base")))
			return filepath.Join(precious, filepath.Base(root))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRootBed(t)
			vol := r.createWith("pvc-a", "basePath", "/base")
			ap, err := r.client.DescribeAccessPoint(r.ctx(), apOf(t, vol))
			must(t, err)
			precious := tc.plant(r, ap.Path)
			write(t, filepath.Join(precious, "data"), "precious")
			n := len(r.accessPoints())
			err = r.delete(vol)
			if !errors.Is(err, ErrUnsafeRootDir) {
				t.Errorf("got %v, want ErrUnsafeRootDir", err)
			}
			r.wantAccessPoints(n)
			if b, err := os.ReadFile(filepath.Join(precious, "data")); err != nil || string(b) != "precious" {
				t.Fatalf("data the symlink points at: %q, %v", b, err)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// hugeTree is the size of the deep and wide trees: the 200,000, or
// a tenth of it under -short.
func hugeTree() int {
	if testing.Short() {
		return 20_000
	}
	return 200_000
}

// pastWindow moves the controller's clock past the trash window.
func (r *rootBed) pastWindow() {
	r.skew.Add(int64(r.svc.trashWindow() + time.Second))
}

// purge runs a purge round of the trash, as the orphan collector does.
func (r *rootBed) purge(ctx context.Context) error {
	return r.svc.PurgeTrash(ctx, testFS)
}

// trash lists the file system's trash entries.
func (r *rootBed) trash() []TrashEntry {
	r.t.Helper()
	es, err := ReadTrash(filepath.Join(r.data, testFS))
	if err != nil {
		r.t.Fatal(err)
	}
	return es
}

// trashOf is where the trash entry e is in the emulator's data.
func (r *rootBed) trashOf(e TrashEntry) string {
	return r.inFS(filepath.Join(volume.TrashDir, e.Name))
}

// A root directory 200,000 levels deep is purged with a bounded number of
// descriptors: os.RemoveAll holds one per level and runs out.
func TestDeleteRemovesADeepTreeWithBoundedDescriptors(t *testing.T) {
	r := newRootBed(t)
	vol := r.mustCreate("pvc-deep")
	root := r.rootOf(vol)
	rmtreetest.Chain(t, root, hugeTree())
	rmtreetest.LimitOpenFiles(t, 256)
	if err := r.delete(vol); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("root directory still there: %v", err)
	}
	r.wantAccessPoints(0)
	r.pastWindow()
	// A collector round's budget, not a call's: 200,000 levels under the
	// race detector on a loaded machine took 40 s.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := r.purge(ctx); err != nil {
		t.Fatalf("purge: %v", err)
	}
	if left := r.trash(); len(left) != 0 {
		t.Fatalf("trash left after its window: %v", left)
	}
}

// Cancelling a purge stops the removal where it is; the entry, marked for
// purging, is finished by the next round and never restored half removed.
func TestCancelledPurgeStopsPromptlyAndTheNextFinishes(t *testing.T) {
	r := newRootBed(t)
	vol := r.mustCreate("pvc-wide")
	root := r.rootOf(vol)
	n := hugeTree()
	rmtreetest.Wide(t, root, n)
	if err := r.delete(vol); err != nil {
		t.Fatalf("delete: %v", err)
	}
	r.wantAccessPoints(0)
	es := r.trash()
	if len(es) != 1 {
		t.Fatalf("trash: %v, want the volume's directory", es)
	}
	ctx, cancel := context.WithCancel(r.ctx())
	var cancelled atomic.Int64
	rmtreetest.OnFirstRemoval(t, r.trashOf(es[0]), func() {
		cancelled.Store(time.Now().UnixNano())
		cancel()
	})
	r.pastWindow()
	err := r.purge(ctx)
	returned := time.Now()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	es = r.trash()
	if len(es) != 1 || !es[0].Purging {
		t.Fatalf("trash after a cancelled purge: %v, want one entry marked for purging", es)
	}
	left := rmtreetest.Entries(t, r.trashOf(es[0]))
	t.Logf("returned %v after the cancel; %d of %d entries left", returned.Sub(time.Unix(0, cancelled.Load())), left, n)
	if min := n / 2; testing.Short() && left == 0 || !testing.Short() && left < min {
		t.Fatalf("%d of %d entries left: the removal went on after the cancel", left, n)
	}
	r.handMade("/pvc-wide") // a purge under way is finished all the same
	if err := r.purge(r.ctx()); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if es := r.trash(); len(es) != 0 {
		t.Fatalf("trash left after the retry: %v", es)
	}
}

// mountedBelow lists the mounts under the bed's temporary directory.
func (r *rootBed) mountedBelow() []string {
	info, err := os.ReadFile("/proc/self/mountinfo")
	must(r.t, err)
	var at []string
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], r.tmp+"/") {
			at = append(at, f[4])
		}
	}
	return at
}

// An unmount that fails is not forgotten: the removal succeeded, so the
// delete does too, and the mount point is unmounted later, by the next
// delete or by CleanStaleMountPoints.
func TestFailedUnmountIsRetried(t *testing.T) {
	for _, tc := range []struct {
		name  string
		retry func(r *rootBed, next string) error
	}{
		{"by the next delete", func(r *rootBed, next string) error { return r.delete(next) }},
		{"by CleanStaleMountPoints", func(r *rootBed, _ string) error { return r.svc.CleanStaleMountPoints(r.ctx()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRootBed(t)
			first, next := r.mustCreate("pvc-1"), r.mustCreate("pvc-2")
			root := r.rootOf(first)
			var fails atomic.Int32
			fails.Store(1)
			r.mounter.beforeUnmount = func(string) error {
				if fails.Add(-1) >= 0 {
					return errors.New("injected: device busy")
				}
				return nil
			}
			if err := r.delete(first); err != nil {
				t.Fatalf("delete with a failing unmount: %v", err)
			}
			if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("root directory still there: %v", err)
			}
			if m, n := r.mountedBelow(), r.svc.PendingUnmounts(); len(m) != 1 || n != 1 {
				t.Fatalf("after the failed unmount: mounted %v, %d pending; want the one mount point", m, n)
			}
			if err := tc.retry(r, next); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if m, n := r.mountedBelow(), r.svc.PendingUnmounts(); len(m) != 0 || n != 0 {
				t.Fatalf("after the retry: mounted %v, %d pending", m, n)
			}
		})
	}
}

// Concurrent deletes share listings: the deletes that arrive while a
// listing is in flight wait for the next one, which serves them all, and
// shows each its access point, so that none describes it: the deletes'
// requests are their DeleteAccessPoints and the two listings (one page
// each here; however many pages, two listings).
func TestConcurrentDeletesShareOneFreshListing(t *testing.T) {
	r := newRootBed(t)
	vols := []string{r.mustCreate("pvc-0"), r.mustCreate("pvc-1"), r.mustCreate("pvc-2"), r.mustCreate("pvc-3")}
	r.lists.calls.Store(0)
	g := newGate()
	r.lists.before = g.hold
	joined := make(chan string, len(vols))
	r.svc.views.joined = func(k listKey) { joined <- k.fsID }
	var requests atomic.Int64
	del := func(vol string) error {
		_, err := r.svc.DeleteVolume(efs.WithRequestCounter(r.ctx(), &requests), deleteReq(vol))
		return err
	}
	var errs []<-chan error
	errs = append(errs, async(func() error { return del(vols[0]) }))
	<-g.arrived // the first listing is in flight
	for _, v := range vols[1:] {
		errs = append(errs, async(func() error { return del(v) }))
	}
	for range vols {
		<-joined
	}
	g.open()
	for _, e := range errs {
		if err := <-e; err != nil {
			t.Fatal(err)
		}
	}
	if n := r.lists.calls.Load(); n != 2 {
		t.Fatalf("%d listings for %d deletes, want 2: the one in flight and one for those that came during it", n, len(vols))
	}
	if n, want := requests.Load(), int64(2+len(vols)); n != want {
		t.Errorf("%d EFS requests for %d deletes, want %d: two listings and a DeleteAccessPoint each", n, len(vols), want)
	}
	r.wantAccessPoints(0)
}

// A create of a volume on the same directory that runs after a delete's
// listing and record were read, while the delete waits for its mount, is
// seen before the removal: the directory is kept.
func TestDeleteKeepsADirectoryACreateReachesSinceItsListing(t *testing.T) {
	r := newRootBed(t)
	a := r.createWith("pvc-a", sharedData("a")...)
	root := r.rootOf(a)
	write(t, filepath.Join(root, "data"), "shared")
	var b string
	r.mounter.afterMount = func(string) error {
		b = r.createWith("pvc-b", sharedData("b")...)
		return nil
	}
	if err := r.delete(a); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "data")); err != nil {
		t.Fatalf("the directory of volume %s, created during the delete, was removed: %v", b, err)
	}
	if n := r.svc.RootDirsKept(); n != 1 {
		t.Errorf("RootDirsKept() = %d, want 1", n)
	}
	r.wantAccessPoints(1)
}

// An access point that the delete's listing does not show yet (EFS lists
// with a lag) is described, and deleted with its root directory.
func TestDeleteOfAnAccessPointTheListingDoesNotShow(t *testing.T) {
	r := newRootBed(t)
	vol := r.mustCreate("pvc-1")
	root := r.rootOf(vol)
	hidden := apOf(t, vol)
	r.hook.setListFilter(func(aps []efs.AccessPoint) []efs.AccessPoint {
		return slices.DeleteFunc(aps, func(ap efs.AccessPoint) bool { return ap.ID == hidden })
	})
	var requests atomic.Int64
	if _, err := r.svc.DeleteVolume(efs.WithRequestCounter(r.ctx(), &requests), deleteReq(vol)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("root directory still there: %v", err)
	}
	if n := requests.Load(); n != 3 {
		t.Errorf("%d EFS requests, want 3: the listing, a Describe, the DeleteAccessPoint", n)
	}
	r.wantAccessPoints(0)
}

// Two deletes of volumes sharing a directory at once: the directory does
// not leak. The first to check may find the other not doomed yet (its
// record not marked deleting) and keep it; the other then finds the first
// doomed or gone, and removes it.
func TestConcurrentDeletesOfASharedDirectoryRemoveIt(t *testing.T) {
	r := newRootBed(t)
	a, b := r.createWith("pvc-a", sharedData("a")...), r.createWith("pvc-b", sharedData("b")...)
	root := r.rootOf(a)
	write(t, filepath.Join(root, "data"), "shared")
	g := newGate()
	r.lists.before = g.hold
	joined := make(chan string, 2)
	r.svc.views.joined = func(k listKey) { joined <- k.fsID }
	first := async(func() error { return r.delete(a) })
	<-g.arrived // a's listing is in flight and shows b
	second := async(func() error { return r.delete(b) })
	<-joined
	<-joined
	g.open()
	for _, e := range []<-chan error{first, second} {
		if err := <-e; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("shared directory left behind by two deletes at once: %v", err)
	}
	if n := r.svc.RootDirsKept(); n > 1 {
		t.Fatalf("RootDirsKept() = %d: both deletes kept it for the other", n)
	}
	r.wantAccessPoints(0)
}
