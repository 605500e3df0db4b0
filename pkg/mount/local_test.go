package mount

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/mount/mounttest"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// fixture is a local root holding file system fsID, and a Mounter on it.
// Tests that use it make real mounts: they need root.
type fixture struct {
	root, fsDir string
	aps         mounttest.AccessPoints
	m           *Mounter
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	mounttest.RequireRoot(t)
	root := t.TempDir()
	f := &fixture{root: root, fsDir: filepath.Join(root, fsID), aps: mounttest.AccessPoints{}}
	must(t, os.Mkdir(f.fsDir, 0o755))
	m, err := NewLocal(root, f.aps)
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

// dir creates a directory of the file system holding a file named marker
// whose content is the directory's own path, to tell sources apart.
func (f *fixture) dir(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(f.fsDir, rel)
	mounttest.WriteMarker(t, p, rel)
	return p
}

// newTarget returns an empty directory to mount on, unmounted at cleanup.
func newTarget(t testing.TB) string {
	t.Helper()
	target := mounttest.Target(t)
	must(t, os.Mkdir(target, 0o750))
	return target
}

// layers counts the mounts stacked on path, from /proc/self/mountinfo.
func layers(t testing.TB, path string) int {
	t.Helper()
	n, err := Layers(path)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// mountFails checks that mounting vol fails with want and leaves nothing
// mounted.
func (f *fixture) mountFails(t *testing.T, vol Volume, want error) {
	t.Helper()
	target := newTarget(t)
	if err := f.m.MountVolume(context.Background(), vol, target); !errors.Is(err, want) {
		t.Errorf("MountVolume: %v, want %v", err, want)
	}
	if n := layers(t, target); n != 0 {
		t.Errorf("%d mounts on the target after a failure", n)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestLocalMountsTheDirectoryTheVolumeNames(t *testing.T) {
	f := newFixture(t)
	f.dir(t, ".")
	f.dir(t, "static/data")
	f.dir(t, "ap-root")
	f.dir(t, "ap-root/sub")
	f.aps[apID] = efs.AccessPoint{ID: apID, FileSystemID: fsID, Path: "/ap-root"}
	tests := []struct {
		name   string
		vol    Volume
		marker string
	}{
		{"whole file system", Volume{FileSystemID: fsID}, "."},
		{"static sub path", Volume{FileSystemID: fsID, Path: "/static/data"}, "static/data"},
		{"access point root", Volume{FileSystemID: fsID, AccessPointID: apID}, "ap-root"},
		{"path below the access point root", Volume{FileSystemID: fsID, AccessPointID: apID, Path: "/sub"}, "ap-root/sub"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := newTarget(t)
			must(t, f.m.MountVolume(context.Background(), tt.vol, target))
			if got := mounttest.Marker(t, target); got != tt.marker {
				t.Errorf("target shows %q, want %q", got, tt.marker)
			}
			if n := layers(t, target); n != 1 {
				t.Errorf("%d mounts on the target, want 1", n)
			}
			state, err := f.m.Inspect(context.Background(), tt.vol, target)
			if err != nil || state != Mounted {
				t.Errorf("Inspect = %v, %v; want mounted", state, err)
			}
			must(t, f.m.Unmount(context.Background(), target))
			if n := layers(t, target); n != 0 {
				t.Errorf("%d mounts left after Unmount", n)
			}
		})
	}
}

func TestLocalWritesReachTheFileSystem(t *testing.T) {
	f := newFixture(t)
	src := f.dir(t, "data")
	target := newTarget(t)
	must(t, f.m.MountVolume(context.Background(), Volume{FileSystemID: fsID, Path: "/data"}, target))
	must(t, os.WriteFile(filepath.Join(target, "written"), []byte("hello"), 0o644))
	b, err := os.ReadFile(filepath.Join(src, "written"))
	if err != nil || string(b) != "hello" {
		t.Errorf("file system holds %q, %v; want hello", b, err)
	}
}

func TestLocalReadOnlyMountRefusesWrites(t *testing.T) {
	f := newFixture(t)
	f.dir(t, "data")
	target := newTarget(t)
	vol := Volume{FileSystemID: fsID, Path: "/data", ReadOnly: true}
	must(t, f.m.MountVolume(context.Background(), vol, target))
	err := os.WriteFile(filepath.Join(target, "x"), nil, 0o644)
	if !errors.Is(err, unix.EROFS) {
		t.Errorf("write on a read-only mount: %v, want EROFS", err)
	}
	if state, err := f.m.Inspect(context.Background(), vol, target); err != nil || state != Mounted {
		t.Errorf("Inspect = %v, %v; want mounted", state, err)
	}
}

// TestInspect covers every state a target can be found in, each set up
// with real mounts the way it arises.
func TestInspect(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.dir(t, "a")
	f.dir(t, "b")
	volA := Volume{FileSystemID: fsID, Path: "/a"}
	bind := func(t *testing.T, src, target string) {
		must(t, unix.Mount(src, target, "", unix.MS_BIND, ""))
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, target string)
		vol   Volume
		want  State
	}{
		{"empty directory", func(*testing.T, string) {}, volA, NotMounted},
		{"missing target", func(t *testing.T, target string) { must(t, os.Remove(target)) }, volA, NotMounted},
		{"the volume", func(t *testing.T, target string) { must(t, f.m.MountVolume(ctx, volA, target)) }, volA, Mounted},
		{"another directory of the file system", func(t *testing.T, target string) {
			must(t, f.m.MountVolume(ctx, Volume{FileSystemID: fsID, Path: "/b"}, target))
		}, volA, Conflict},
		{"a foreign mount", func(t *testing.T, target string) {
			must(t, unix.Mount("tmpfs", target, "tmpfs", 0, "size=1m"))
		}, volA, Conflict},
		{"read-only found, read-write wanted", func(t *testing.T, target string) {
			must(t, f.m.MountVolume(ctx, Volume{FileSystemID: fsID, Path: "/a", ReadOnly: true}, target))
		}, volA, Conflict},
		{"half-made read-only mount: bound, not remounted", func(t *testing.T, target string) {
			bind(t, filepath.Join(f.fsDir, "a"), target)
		}, Volume{FileSystemID: fsID, Path: "/a", ReadOnly: true}, Stale},
		{"stacked mounts", func(t *testing.T, target string) {
			bind(t, filepath.Join(f.fsDir, "a"), target)
			bind(t, filepath.Join(f.fsDir, "a"), target)
		}, volA, Stale},
		{"source directory deleted and made again", func(t *testing.T, target string) {
			gone := f.dir(t, "gone")
			bind(t, gone, target)
			must(t, os.RemoveAll(gone))
			f.dir(t, "gone")
		}, Volume{FileSystemID: fsID, Path: "/gone"}, Stale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := newTarget(t)
			tt.setup(t, target)
			got, err := f.m.Inspect(ctx, tt.vol, target)
			if err != nil || got != tt.want {
				t.Errorf("Inspect = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestMountVolumeNeverStacks(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.dir(t, "a")
	target := newTarget(t)
	vol := Volume{FileSystemID: fsID, Path: "/a"}
	must(t, f.m.MountVolume(ctx, vol, target))
	if err := f.m.MountVolume(ctx, vol, target); !errors.Is(err, ErrTargetMounted) {
		t.Errorf("second MountVolume: %v, want ErrTargetMounted", err)
	}
	if n := layers(t, target); n != 1 {
		t.Errorf("%d mounts on the target, want 1", n)
	}
}

func TestUnmountRemovesEveryLayer(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	src := f.dir(t, "a")
	tests := []struct {
		name   string
		layers int
	}{{"not mounted", 0}, {"one mount", 1}, {"three stacked mounts", 3}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := newTarget(t)
			for range tt.layers {
				must(t, unix.Mount(src, target, "", unix.MS_BIND, ""))
			}
			must(t, f.m.Unmount(ctx, target))
			if n := layers(t, target); n != 0 {
				t.Errorf("%d mounts left", n)
			}
		})
	}
	t.Run("missing target", func(t *testing.T) {
		must(t, f.m.Unmount(ctx, filepath.Join(t.TempDir(), "nothing", "here")))
	})
	t.Run("forced", func(t *testing.T) {
		target := newTarget(t)
		must(t, unix.Mount(src, target, "", unix.MS_BIND, ""))
		must(t, f.m.ForceUnmount(ctx, target))
		if n := layers(t, target); n != 0 {
			t.Errorf("%d mounts left", n)
		}
	})
}

// TestLocalRefusesPathsLeavingTheVolume: symlinks inside the file system
// (which any client of it can create) never lead a mount outside the file
// system's directory, nor outside an access point's root.
func TestLocalRefusesPathsLeavingTheVolume(t *testing.T) {
	f := newFixture(t)
	f.dir(t, "ap-root")
	f.dir(t, "other")
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "marker"), []byte("outside"), 0o644))
	must(t, os.Symlink("/", filepath.Join(f.fsDir, "to-host-root")))
	must(t, os.Symlink(outside, filepath.Join(f.fsDir, "to-outside")))
	must(t, os.Symlink("../..", filepath.Join(f.fsDir, "ap-root", "up")))
	must(t, os.Symlink("../other", filepath.Join(f.fsDir, "ap-root", "sibling")))
	must(t, os.Symlink(filepath.Join(f.fsDir, "other"), filepath.Join(f.fsDir, "ap-root", "abs-sibling")))
	f.aps[apID] = efs.AccessPoint{ID: apID, FileSystemID: fsID, Path: "/ap-root"}
	const evilAP = "fsap-00000000000000bad"
	f.aps[evilAP] = efs.AccessPoint{ID: evilAP, FileSystemID: fsID, Path: "/to-outside"}
	tests := []struct {
		name string
		vol  Volume
	}{
		{"static path through a link to /", Volume{FileSystemID: fsID, Path: "/to-host-root/etc"}},
		{"static path through a link outside", Volume{FileSystemID: fsID, Path: "/to-outside"}},
		{"access point root that is a link outside", Volume{FileSystemID: fsID, AccessPointID: evilAP}},
		{"sub path climbing above the access point root", Volume{FileSystemID: fsID, AccessPointID: apID, Path: "/up"}},
		{"sub path to a sibling of the access point root", Volume{FileSystemID: fsID, AccessPointID: apID, Path: "/sibling"}},
		{"absolute link to a sibling of the access point root", Volume{FileSystemID: fsID, AccessPointID: apID, Path: "/abs-sibling"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { f.mountFails(t, tt.vol, volume.ErrUnsafePath) })
	}
}

func TestLocalMissingSources(t *testing.T) {
	f := newFixture(t)
	f.dir(t, "ap-root")
	must(t, os.WriteFile(filepath.Join(f.fsDir, "file"), nil, 0o644))
	const noRootAP, otherFSAP = "fsap-000000000000000a1", "fsap-000000000000000a2"
	f.aps[noRootAP] = efs.AccessPoint{ID: noRootAP, FileSystemID: fsID, Path: "/deleted-root"}
	f.aps[otherFSAP] = efs.AccessPoint{ID: otherFSAP, FileSystemID: "fs-11111111", Path: "/ap-root"}
	tests := []struct {
		name string
		vol  Volume
		want error
	}{
		{"unknown file system", Volume{FileSystemID: "fs-99999999"}, ErrNotFound},
		{"missing sub path", Volume{FileSystemID: fsID, Path: "/nope"}, ErrNotFound},
		{"sub path is a file", Volume{FileSystemID: fsID, Path: "/file"}, ErrNotFound},
		{"unknown access point", Volume{FileSystemID: fsID, AccessPointID: "fsap-0000000000000dead"}, efs.ErrAccessPointNotFound},
		{"access point root removed", Volume{FileSystemID: fsID, AccessPointID: noRootAP}, ErrNotFound},
		{"access point of another file system", Volume{FileSystemID: fsID, AccessPointID: otherFSAP}, volume.ErrInvalidID},
		{"invalid file system ID", Volume{FileSystemID: "../x"}, volume.ErrInvalidID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { f.mountFails(t, tt.vol, tt.want) })
	}
}

func TestMountVolumeRefusesBadTargets(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.dir(t, "a")
	vol := Volume{FileSystemID: fsID, Path: "/a"}
	dir := t.TempDir()
	elsewhere := t.TempDir()
	link := filepath.Join(dir, "link")
	must(t, os.Symlink(elsewhere, link))
	file := filepath.Join(dir, "file")
	must(t, os.WriteFile(file, nil, 0o644))
	tests := []struct {
		name, target string
		want         error
	}{
		{"symlink", link, volume.ErrUnsafePath},
		{"regular file", file, volume.ErrInvalidParameter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := f.m.MountVolume(ctx, vol, tt.target); !errors.Is(err, tt.want) {
				t.Errorf("MountVolume: %v, want %v", err, tt.want)
			}
			if n := layers(t, elsewhere); n != 0 {
				t.Errorf("the link's target was mounted on")
				_ = unix.Unmount(elsewhere, unix.MNT_DETACH)
			}
		})
	}
}

func TestMountFileSystemMountsTheRoot(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.dir(t, ".")
	target := newTarget(t)
	must(t, f.m.MountFileSystem(ctx, fsID, target))
	if got := mounttest.Marker(t, target); got != "." {
		t.Errorf("target shows %q, want the file system root", got)
	}
	must(t, f.m.Unmount(ctx, target))
}

func TestUsage(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.dir(t, "a")
	target := newTarget(t)
	if _, err := f.m.Usage(ctx, target); !errors.Is(err, ErrNotMounted) {
		t.Errorf("Usage of a plain directory: %v, want ErrNotMounted", err)
	}
	must(t, unix.Mount("tmpfs", target, "tmpfs", 0, "size=4m,nr_inodes=1000"))
	must(t, os.WriteFile(filepath.Join(target, "f"), make([]byte, 1<<20), 0o644))
	u, err := f.m.Usage(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if u.TotalBytes != 4<<20 || u.UsedBytes < 1<<20 || u.AvailableBytes > u.TotalBytes-u.UsedBytes {
		t.Errorf("bytes: %+v, want 4 MiB total, at least 1 MiB used", u)
	}
	if u.TotalInodes != 1000 || u.UsedInodes < 2 || u.FreeInodes != u.TotalInodes-u.UsedInodes {
		t.Errorf("inodes: %+v, want 1000 total, at least 2 used", u)
	}
}

func TestProductSaturates(t *testing.T) {
	tests := []struct {
		a, b uint64
		want int64
	}{
		{0, 4096, 0},
		{3, 4096, 12288},
		{1 << 51, 4096, math.MaxInt64}, // 8 EiB
		{math.MaxUint64, 1, math.MaxInt64},
		{math.MaxUint64, 0, 0},
	}
	for _, tt := range tests {
		if got := product(tt.a, tt.b); got != tt.want {
			t.Errorf("product(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// FuzzLocalSourceStaysInside: whatever access point root and sub path a
// volume names, in a tree full of hostile symlinks, the directory the
// local back end would mount is inside the file system's directory, and
// inside the access point's root when there is one. No mounts: it runs
// without root.
func FuzzLocalSourceStaysInside(f *testing.F) {
	for _, s := range [][2]string{
		{"", ""}, {"/ap", "/in"}, {"/ap", "/up"}, {"/ap", "/abs-out"}, {"/ap", "/abs-in/../.."},
		{"/lnk-parent", ""}, {"/ap/../..", ""}, {"/esc", "/x"}, {"/ap/lnk-fsroot", "/ap/up"}, {"/ap", "/loop"},
	} {
		f.Add(s[0], s[1], true)
		f.Add(s[0], s[1], false)
	}
	root := f.TempDir()
	fsDir := filepath.Join(root, fsID)
	for _, d := range []string{"ap/in", "other"} {
		must(f, os.MkdirAll(filepath.Join(fsDir, d), 0o755))
	}
	for link, to := range map[string]string{
		"ap/up": "..", "ap/abs-out": "/", "ap/abs-in": filepath.Join(fsDir, "ap", "in"),
		"ap/lnk-fsroot": "../..", "lnk-parent": "..", "esc": filepath.Dir(root), "ap/loop": "loop",
		"ap/sibling": "../other",
	} {
		must(f, os.Symlink(to, filepath.Join(fsDir, link)))
	}
	aps := mounttest.AccessPoints{}
	m, err := NewLocal(root, aps)
	if err != nil {
		f.Fatal(err)
	}
	b := m.b.(*localBackend)
	f.Fuzz(func(t *testing.T, apPath, subPath string, useAP bool) {
		vol := Volume{FileSystemID: fsID, Path: subPath}
		base := fsDir
		if useAP {
			vol.AccessPointID = apID
			aps[apID] = efs.AccessPoint{ID: apID, FileSystemID: fsID, Path: apPath}
			if r, err := volume.ResolveInside(fsDir, apPath); err == nil {
				base = r
			}
		}
		fd, err := b.openSource(context.Background(), vol)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		opened, err := os.Readlink(procFD(fd))
		if err != nil {
			t.Fatal(err)
		}
		if !inside(fsDir, opened) || !inside(base, opened) {
			t.Fatalf("ap %q sub %q opened %s, outside %s", apPath, subPath, opened, base)
		}
	})
}
