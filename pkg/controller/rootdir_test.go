package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/mount"
)

// hookMounter wraps the real bind-mount back end so a test can fail or
// cancel at a chosen step, and records the mount points it was given.
type hookMounter struct {
	FileSystemMounter
	afterMount func(target string) error
	targets    []string
}

func (h *hookMounter) MountFileSystem(ctx context.Context, fsID, target string) error {
	h.targets = append(h.targets, target)
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
	tmp     string
}

func newRootBed(t *testing.T) *rootBed {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("root-directory removal needs bind mounts (root)")
	}
	data := t.TempDir()
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

// A root that is a symlink to another volume's directory: removing it must
// remove the link, never what it points at.
func TestDeleteNeverFollowsRootSymlink(t *testing.T) {
	r := newRootBed(t)
	victim, attacker := r.mustCreate("pvc-victim"), r.mustCreate("pvc-attacker")
	write(t, filepath.Join(r.rootOf(victim), "data"), "precious")
	root := r.rootOf(attacker)
	if err := os.Remove(root); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(r.rootOf(victim), root); err != nil {
		t.Fatal(err)
	}
	_ = r.delete(attacker)
	if b, err := os.ReadFile(filepath.Join(r.rootOf(victim), "data")); err != nil || string(b) != "precious" {
		t.Fatalf("victim's data: %q, %v", b, err)
	}
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
