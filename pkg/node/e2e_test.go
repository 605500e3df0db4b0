package node_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/driver"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/mount"
	"github.com/efs-csi/efs-csi-driver/pkg/mount/mounttest"
)

const e2eFS = "fs-0123456789abcdef0"

// TestEndToEnd drives the whole driver the way Kubernetes does, over its
// unix socket, in front of the emulator, with real bind mounts: create a
// volume, publish it on two targets, write a file through one and read it
// through the other, unpublish both, delete the volume with root-directory
// removal, then check that the data, the targets and every mount are gone.
func TestEndToEnd(t *testing.T) {
	mounttest.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := e2eConfig(t)
	data, tmp := cfg.LocalRoot, cfg.TempDir
	conn, d, _ := startDriver(t, cfg)
	ctrl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	vol := createVolume(ctx, t, ctrl, "pvc-0b3c9f1e-e2e")

	targets := []string{mounttest.Target(t), mounttest.Target(t)}
	for _, target := range targets {
		must(t, publishVolume(ctx, node, vol, target))
	}
	must(t, os.WriteFile(filepath.Join(targets[0], "hello.txt"), []byte("written through one target"), 0o644))
	got, err := os.ReadFile(filepath.Join(targets[1], "hello.txt"))
	if err != nil || string(got) != "written through one target" {
		t.Fatalf("read through the other target: %q, %v", got, err)
	}
	// The file lives in the access point's root directory on the file
	// system: find it, to check that the delete removes it.
	rootDir := findFile(t, filepath.Join(data, e2eFS), "hello.txt")

	for _, target := range targets {
		_, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol.GetVolumeId(), TargetPath: target})
		must(t, err)
		if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("target %s still there after unpublish: %v", target, err)
		}
	}
	_, err = ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()})
	must(t, err)

	if _, err := os.Lstat(rootDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the volume's root directory %s survived DeleteVolume: %v", rootDir, err)
	}
	if _, err := os.Lstat(filepath.Join(data, e2eFS)); err != nil {
		t.Errorf("the file system's own directory is gone: %v", err)
	}
	// The record (a local file outside Kubernetes) is the only thing that
	// stays, by design; no temporary mount point does.
	if left, _ := os.ReadDir(tmp); len(left) != 1 || left[0].Name() != "efs-csi-journal" {
		t.Errorf("the controller left temporary mount points: %v (want only efs-csi-journal)", left)
	}
	if lines := mountsUnder(t, data, tmp, filepath.Dir(targets[0]), filepath.Dir(targets[1])); len(lines) != 0 {
		t.Errorf("mounts left:\n%s", strings.Join(lines, "\n"))
	}
	if n := d.LocksHeld(); n != 0 {
		t.Errorf("%d locks held at rest", n)
	}
}

// TestRetryAfterDriverRestart: the driver mounts, then stops before the
// kubelet sees the answer; the kubelet retries against the restarted
// driver, which finds the mount, answers OK and mounts nothing more.
func TestRetryAfterDriverRestart(t *testing.T) {
	mounttest.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := e2eConfig(t)
	conn, _, stop := startDriver(t, cfg)
	vol := createVolume(ctx, t, csi.NewControllerClient(conn), "pvc-restart")
	target := mounttest.Target(t)
	must(t, publishVolume(ctx, csi.NewNodeClient(conn), vol, target))
	stop() // the answer above is lost with the process

	conn, d, _ := startDriver(t, cfg)
	node := csi.NewNodeClient(conn)
	must(t, publishVolume(ctx, node, vol, target))
	if n, err := mount.Layers(target); err != nil || n != 1 {
		t.Errorf("%d mounts on the target after the retry (%v), want 1", n, err)
	}
	_, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol.GetVolumeId(), TargetPath: target})
	must(t, err)
	if n, err := mount.Layers(target); err != nil || n != 0 {
		t.Errorf("%d mounts on the target after unpublish (%v)", n, err)
	}
	if n := d.LocksHeld(); n != 0 {
		t.Errorf("%d locks held at rest", n)
	}
}

// e2eConfig starts an emulator holding e2eFS and returns a driver
// configuration in front of it, in all modes, with root-directory removal.
func e2eConfig(t *testing.T) driver.Config {
	t.Helper()
	data := t.TempDir()
	url, _ := emulatortest.Start(t, emulator.Config{DataDir: data, FileSystems: []string{e2eFS}})
	return driver.Config{
		Endpoint: "unix://" + filepath.Join(t.TempDir(), "csi.sock"), Mode: driver.ModeAll, NodeID: "node-1",
		LocalRoot: data, DeleteRootDir: true, TempDir: t.TempDir(),
		EFS: efs.Config{Region: "us-east-1", Endpoint: url},
	}
}

var e2eCapability = &csi.VolumeCapability{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
}

func createVolume(ctx context.Context, t *testing.T, ctrl csi.ControllerClient, name string) *csi.Volume {
	t.Helper()
	created, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name:               name,
		VolumeCapabilities: []*csi.VolumeCapability{e2eCapability},
		Parameters:         map[string]string{"provisioningMode": "efs-ap", "fileSystemId": e2eFS, "directoryPerms": "700"},
	})
	must(t, err)
	return created.GetVolume()
}

func publishVolume(ctx context.Context, node csi.NodeClient, vol *csi.Volume, target string) error {
	_, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{
		VolumeId: vol.GetVolumeId(), TargetPath: target, VolumeCapability: e2eCapability,
		VolumeContext: vol.GetVolumeContext(),
	})
	return err
}

// startDriver runs the driver and returns a client connection that is ready
// (the first call waits for the socket) and a stop function, which the
// test's cleanup calls too.
func startDriver(t *testing.T, cfg driver.Config) (*grpc.ClientConn, *driver.Driver, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d, err := driver.New(ctx, cfg)
	must(t, err)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	conn, err := grpc.NewClient(cfg.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			conn.Close()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("driver: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	if _, err := csi.NewIdentityClient(conn).Probe(pctx, &csi.ProbeRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("driver not ready: %v", err)
	}
	return conn, d, stop
}

// findFile returns the directory below root holding a file named name.
func findFile(t *testing.T, root, name string) string {
	t.Helper()
	var dir string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Name() == name && !e.IsDir() {
			dir = filepath.Dir(p)
			return filepath.SkipAll
		}
		return err
	})
	if err != nil || dir == "" || dir == root {
		t.Fatalf("no %s in an access point directory below %s (found %q, %v)", name, root, dir, err)
	}
	return dir
}

// mountsUnder lists the lines of /proc/self/mountinfo whose mount point or
// mounted directory lies below one of dirs.
func mountsUnder(t *testing.T, dirs ...string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	var hits []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, " ")
		if len(f) < 5 {
			continue
		}
		for _, d := range dirs {
			if strings.HasPrefix(f[3], d) || strings.HasPrefix(f[4], d) {
				hits = append(hits, line)
				break
			}
		}
	}
	for _, d := range dirs {
		if n, err := mount.Layers(d); err != nil || n != 0 {
			t.Errorf("%s: %d mounts, %v", d, n, err)
		}
	}
	return hits
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
