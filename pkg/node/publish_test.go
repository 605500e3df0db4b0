package node

import (
	"context"
	"errors"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/mount/mounttest"
)

var (
	errAPNotFound = efs.ErrAccessPointNotFound

	vol1 = "efs:" + fsID + "::" + apID  // the access point on /vol1
	vol2 = "efs:" + fsID + "::" + apID2 // the access point on /vol2
)

func TestPublishCreatesTheTargetAndUnpublishRemovesIt(t *testing.T) {
	f := newNodeFixture(t)
	target := newTarget(t)
	must(t, publish(f.svc, vol1, target))
	if got := mounttest.Marker(t, target); got != "vol1" {
		t.Errorf("target shows %q, want vol1", got)
	}
	if n := layers(t, target); n != 1 {
		t.Errorf("%d mounts on the target, want 1", n)
	}
	must(t, unpublish(f.svc, vol1, target))
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target still there after unpublish: %v", err)
	}
	if got := mounttest.Marker(t, filepath.Join(f.fsDir, "vol1")); got != "vol1" {
		t.Errorf("the volume's data changed: %q", got)
	}
	// Unpublishing what is gone is OK.
	must(t, unpublish(f.svc, vol1, target))
	if n := f.svc.LocksHeld(); n != 0 {
		t.Errorf("%d locks held at rest", n)
	}
}

func TestPublishIsIdempotent(t *testing.T) {
	f := newNodeFixture(t)
	target := newTarget(t)
	for i := range 3 {
		if err := publish(f.svc, vol1, target); err != nil {
			t.Fatalf("publish #%d: %v", i+1, err)
		}
	}
	if n := layers(t, target); n != 1 {
		t.Errorf("%d mounts on the target after 3 publishes, want 1", n)
	}
}

func TestPublishAnotherVolumeOnAnOccupiedTargetConflicts(t *testing.T) {
	f := newNodeFixture(t)
	target := newTarget(t)
	must(t, publish(f.svc, vol1, target))
	expectIs(t, "publish another volume", publish(f.svc, vol2, target), ErrTargetConflict)
	req := publishReq(vol1, target)
	req.Readonly = true
	_, err := f.svc.NodePublishVolume(context.Background(), req)
	if err != nil {
		// A read-write mount where read-only is wanted is what a killed
		// read-only publish leaves: it is repaired, not refused.
		t.Errorf("read-only publish over the read-write mount: %v", err)
	}
	req.Readonly = false
	_, err = f.svc.NodePublishVolume(context.Background(), req)
	expectIs(t, "read-write publish over the read-only mount", err, ErrTargetConflict)
	if n := layers(t, target); n != 1 {
		t.Errorf("%d mounts on the target, want 1", n)
	}
	if got := mounttest.Marker(t, target); got != "vol1" {
		t.Errorf("target shows %q, want vol1", got)
	}
}

// TestPublishOfAReaderOnlyModeIsReadOnly: a ReadOnlyMany claim's volume
// is mounted read-only even when the pod does not ask (kubelet sends
// readonly only from the pod's volume).
func TestPublishOfAReaderOnlyModeIsReadOnly(t *testing.T) {
	f := newNodeFixture(t)
	target := newTarget(t)
	req := publishReq(vol1, target)
	req.VolumeCapability.AccessMode.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	_, err := f.svc.NodePublishVolume(context.Background(), req)
	must(t, err)
	if err := os.WriteFile(filepath.Join(target, "x"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write through a reader-only publish: %v, want EROFS", err)
	}
}

func TestPublishReadOnly(t *testing.T) {
	f := newNodeFixture(t)
	target := newTarget(t)
	req := publishReq(vol1, target)
	req.Readonly = true
	_, err := f.svc.NodePublishVolume(context.Background(), req)
	must(t, err)
	if err := os.WriteFile(filepath.Join(target, "x"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write through a read-only publish: %v, want EROFS", err)
	}
	_, err = f.svc.NodePublishVolume(context.Background(), req)
	must(t, err)
	if n := layers(t, target); n != 1 {
		t.Errorf("%d mounts on the target, want 1", n)
	}
}

// TestPublishRepairsBrokenTargets: whatever a crash or an administrator
// left on the target, a publish ends with exactly one mount of the right
// directory, with the right read-only setting.
func TestPublishRepairsBrokenTargets(t *testing.T) {
	f := newNodeFixture(t)
	vol1Dir := filepath.Join(f.fsDir, "vol1")
	bind := func(t *testing.T, src, target string) {
		must(t, unix.Mount(src, target, "", unix.MS_BIND, ""))
	}
	tests := []struct {
		name     string
		setup    func(t *testing.T, target string)
		readOnly bool
	}{
		{"stacked mounts of the volume", func(t *testing.T, target string) {
			bind(t, vol1Dir, target)
			bind(t, vol1Dir, target)
		}, false},
		{"read-only publish killed between bind and remount", func(t *testing.T, target string) {
			bind(t, vol1Dir, target)
		}, true},
		{"mount of a directory deleted since (the access point root re-created)", func(t *testing.T, target string) {
			old := filepath.Join(f.fsDir, "old-vol1")
			must(t, os.Mkdir(old, 0o755))
			bind(t, old, target)
			must(t, os.Remove(old))
		}, false},
		{"empty target directory left by a killed publish", func(*testing.T, string) {}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := newTarget(t)
			must(t, os.Mkdir(target, 0o750))
			tt.setup(t, target)
			req := publishReq(vol1, target)
			req.Readonly = tt.readOnly
			_, err := f.svc.NodePublishVolume(context.Background(), req)
			must(t, err)
			if n := layers(t, target); n != 1 {
				t.Errorf("%d mounts on the target, want 1", n)
			}
			if got := mounttest.Marker(t, target); got != "vol1" {
				t.Errorf("target shows %q, want vol1", got)
			}
			err = unix.Access(target, unix.W_OK)
			if tt.readOnly != errors.Is(err, unix.EROFS) {
				t.Errorf("read-only %v, but access(W_OK) = %v", tt.readOnly, err)
			}
		})
	}
}

// TestRetryAfterKillBetweenMountAndAnswer: the driver mounted, then died
// before answering. The kubelet retries against a new process, which has no
// memory of the first: it finds the mount and answers OK without mounting
// again. The same holds for an unpublish killed after unmounting.
func TestRetryAfterKillBetweenMountAndAnswer(t *testing.T) {
	f := newNodeFixture(t)
	target := newTarget(t)
	// The first process mounts; its answer never reaches the kubelet.
	first := newService(t, Config{Mounter: f.mounter})
	must(t, publish(first, vol1, target))
	// The restarted process: a new Service with its own (empty) state.
	second := newService(t, Config{Mounter: f.mounter})
	must(t, publish(second, vol1, target))
	if n := layers(t, target); n != 1 {
		t.Errorf("%d mounts on the target after the retry, want 1", n)
	}
	// Unpublish killed after the unmount, before removing the directory.
	must(t, f.mounter.Unmount(context.Background(), target))
	must(t, unpublish(second, vol1, target))
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target still there after the retried unpublish: %v", err)
	}
}

func TestPublishOfAMissingVolumeIsNotFound(t *testing.T) {
	f := newNodeFixture(t)
	for name, id := range map[string]string{
		"unknown file system":     "fs-99999999",
		"missing directory":       fsID + ":/nope",
		"unknown access point":    fsID + "::fsap-0000000000000dead",
		"access point root gone":  fsID + ":/deleted:" + apID,
		"sub path of a vol1 file": fsID + ":/vol1/marker",
	} {
		t.Run(name, func(t *testing.T) {
			target := newTarget(t)
			err := publish(f.svc, id, target)
			if !errors.Is(err, ErrVolumeNotFound) && !errors.Is(err, errAPNotFound) {
				t.Errorf("publish: %v, want not found", err)
			}
			if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the target the failed publish created is still there: %v", err)
			}
		})
	}
}

func TestUnpublishKeepsFilesInAnUnmountedTarget(t *testing.T) {
	f := newNodeFixture(t)
	target := newTarget(t)
	must(t, os.Mkdir(target, 0o750))
	must(t, os.WriteFile(filepath.Join(target, "precious"), []byte("x"), 0o644))
	must(t, unpublish(f.svc, vol1, target))
	if _, err := os.Stat(filepath.Join(target, "precious")); err != nil {
		t.Errorf("unpublish removed a file it did not own: %v", err)
	}
}
