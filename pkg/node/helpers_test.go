package node

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/mount"
	"github.com/efs-csi/efs-csi-driver/pkg/mount/mounttest"
)

const (
	fsID  = "fs-0123456789abcdef0"
	apID  = "fsap-0123456789abcdef0"
	apID2 = "fsap-0123456789abcdef1"
)

// nodeFixture is a local root with file system fsID and two access points
// (apID on /vol1, apID2 on /vol2), a real local Mounter, and a Service.
type nodeFixture struct {
	root, fsDir string
	mounter     *mount.Mounter
	svc         *Service
}

func newNodeFixture(t testing.TB) *nodeFixture {
	t.Helper()
	mounttest.RequireRoot(t)
	root := t.TempDir()
	f := &nodeFixture{root: root, fsDir: filepath.Join(root, fsID)}
	for _, d := range []string{"vol1", "vol2"} {
		mounttest.WriteMarker(t, filepath.Join(f.fsDir, d), d)
	}
	aps := mounttest.AccessPoints{
		apID:  {ID: apID, FileSystemID: fsID, Path: "/vol1"},
		apID2: {ID: apID2, FileSystemID: fsID, Path: "/vol2"},
	}
	m, err := mount.NewLocal(root, aps)
	must(t, err)
	f.mounter = m
	f.svc = newService(t, Config{Mounter: m})
	return f
}

// newService builds a Service with a node ID and test defaults.
func newService(t testing.TB, cfg Config) *Service {
	t.Helper()
	if cfg.NodeID == "" {
		cfg.NodeID = "node-1"
	}
	s, err := New(cfg)
	must(t, err)
	return s
}

// newTarget returns a path whose parent exists (the CO's contract) and
// that the driver is to create; it is unmounted at cleanup.
func newTarget(t testing.TB) string { return mounttest.Target(t) }

func layers(t testing.TB, target string) int {
	t.Helper()
	n, err := mount.Layers(target)
	must(t, err)
	return n
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mountCap(flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: flags}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}
}

func publishReq(volumeID, target string) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{VolumeId: volumeID, TargetPath: target, VolumeCapability: mountCap()}
}

func publish(s *Service, volumeID, target string) error {
	_, err := s.NodePublishVolume(context.Background(), publishReq(volumeID, target))
	return err
}

func unpublish(s *Service, volumeID, target string) error {
	_, err := s.NodeUnpublishVolume(context.Background(),
		&csi.NodeUnpublishVolumeRequest{VolumeId: volumeID, TargetPath: target})
	return err
}

// expectIs fails unless err wraps want (nil want: no error).
func expectIs(t testing.TB, what string, err, want error) {
	t.Helper()
	if want == nil && err != nil || want != nil && !errors.Is(err, want) {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

// hookMounter wraps a Mounter and calls hooks before delegating, to hold a
// call at a chosen step or make a step fail.
type hookMounter struct {
	Mounter
	beforeInspect func(ctx context.Context) error
	beforeMount   func(ctx context.Context) error
	beforeUnmount func(ctx context.Context) error
	forced        chan string
}

func (h *hookMounter) Inspect(ctx context.Context, vol mount.Volume, target string) (mount.State, error) {
	if h.beforeInspect != nil {
		if err := h.beforeInspect(ctx); err != nil {
			return mount.NotMounted, err
		}
	}
	return h.Mounter.Inspect(ctx, vol, target)
}

func (h *hookMounter) MountVolume(ctx context.Context, vol mount.Volume, target string) error {
	if h.beforeMount != nil {
		if err := h.beforeMount(ctx); err != nil {
			return err
		}
	}
	return h.Mounter.MountVolume(ctx, vol, target)
}

func (h *hookMounter) Unmount(ctx context.Context, target string) error {
	if h.beforeUnmount != nil {
		if err := h.beforeUnmount(ctx); err != nil {
			return err
		}
	}
	return h.Mounter.Unmount(ctx, target)
}

func (h *hookMounter) ForceUnmount(ctx context.Context, target string) error {
	if h.forced != nil {
		h.forced <- target
	}
	return h.Mounter.ForceUnmount(ctx, target)
}

// recordingMounter records the volume it is asked to mount and mounts
// nothing: for tests of request parsing.
type recordingMounter struct {
	got    *mount.Volume
	called bool
}

func (r *recordingMounter) Inspect(context.Context, mount.Volume, string) (mount.State, error) {
	r.called = true
	return mount.NotMounted, nil
}

func (r *recordingMounter) MountVolume(_ context.Context, vol mount.Volume, _ string) error {
	r.called = true
	r.got = &vol
	return nil
}

func (r *recordingMounter) Unmount(context.Context, string) error      { r.called = true; return nil }
func (r *recordingMounter) ForceUnmount(context.Context, string) error { r.called = true; return nil }
func (r *recordingMounter) Usage(context.Context, string) (mount.Usage, error) {
	r.called = true
	return mount.Usage{}, mount.ErrNotMounted
}
