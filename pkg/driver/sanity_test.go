package driver

import (
	"context"
	shippediam "github.com/efs-csi/efs-csi-driver/docs/iam"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/iam"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/internal/testutil/mountefs"
	"github.com/efs-csi/efs-csi-driver/internal/testutil/mountefs/spec"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/efsutils"
)

const (
	sanityFS   = "fs-0123456789abcdef0"
	sanityS3FS = "fs-0123456789abcdef01" // S3 Files IDs have 17 to 40 hex digits
)

var unlimited = map[string]efs.RateLimit{"*": {}}

// startDriver runs a driver in all modes on a unix socket in front of a
// fresh emulator, mounting with bind mounts from the emulator's data dir.
func startDriver(t testing.TB, mut ...func(*Config)) (socket string, emu *emulator.Emulator) {
	socket, emu, _ = startDriverStop(t, mut...)
	return socket, emu
}

// startDriverStop also returns a stop function: cancel (SIGTERM) and wait for Run.
func startDriverStop(t testing.TB, mut ...func(*Config)) (socket string, emu *emulator.Emulator, stop func() error) {
	t.Helper()
	return startDriverOn(t, nil, mut...)
}

// startDriverOn starts the driver on an emulator that emuMut (if not nil)
// configures further.
func startDriverOn(t testing.TB, emuMut func(*emulator.Config), mut ...func(*Config)) (socket string, emu *emulator.Emulator, stop func() error) {
	t.Helper()
	data := t.TempDir()
	// Under the policies a user attaches (AWS's managed one, and
	// s3files.json for S3 Files), as every cluster runs.
	ecfg := emulator.Config{DataDir: data, FileSystems: []string{sanityFS}, S3FilesFileSystems: []string{sanityS3FS},
		IAMPolicies: []string{iam.ManagedPolicy, shippediam.S3Files}}
	if emuMut != nil {
		emuMut(&ecfg)
	}
	url, emu := emulatortest.Start(t, ecfg)
	socket = filepath.Join(t.TempDir(), "csi.sock")
	cfg := Config{
		Endpoint: "unix://" + socket, Mode: ModeAll, NodeID: "node-1", LocalRoot: data,
		DeleteRootDir: true, TempDir: t.TempDir(), VolMetricsOptIn: true,
		EFS: efs.Config{Region: "us-east-1", Endpoint: url, RateLimits: unlimited},
	}
	for _, m := range mut {
		m(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() { done <- d.run(ctx, ready) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("driver stopped: %v", err)
	}
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("driver: %v", err)
		}
		if n := d.LocksHeld(); n != 0 {
			t.Errorf("%d locks held at rest", n)
		}
	})
	return socket, emu, stop
}

// sanityClassEnv selects TestSanity's class: "s3files" runs it with an
// s3files-ap class (TestSanityS3Files sets it in a child process, since
// csi-sanity's Ginkgo suite runs once per process).
const sanityClassEnv = "EFS_CSI_SANITY_CLASS"

// TestSanity runs the whole csi-sanity suite (Identity, Controller, Node)
// against the driver on a unix socket, the emulator over HTTP and real bind
// mounts.
func TestSanity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("csi-sanity's node tests need root for bind mounts")
	}
	// With a zone, the plugin advertises VOLUME_ACCESSIBILITY_CONSTRAINTS and
	// csi-sanity checks that NodeGetInfo reports topology.
	socket, emu := startDriver(t, func(c *Config) { c.Zone = "us-east-1a" })
	cfg := sanity.NewTestConfig()
	cfg.Address = socket
	base := t.TempDir()
	cfg.TargetPath = filepath.Join(base, "target")
	cfg.StagingPath = filepath.Join(base, "staging")
	cfg.TestVolumeParameters = map[string]string{
		"provisioningMode": "efs-ap", "fileSystemId": sanityFS, "directoryPerms": "700",
	}
	s3 := os.Getenv(sanityClassEnv) == "s3files"
	if s3 {
		cfg.TestVolumeParameters["provisioningMode"], cfg.TestVolumeParameters["fileSystemId"] = "s3files-ap", sanityS3FS
	}
	dir := os.Getenv(sanityClassEnv) == "efs-dir"
	if dir {
		cfg.TestVolumeParameters["provisioningMode"] = "efs-dir"
	}
	cfg.IdempotentCount = 2
	sanity.Test(t, cfg)
	if dir {
		if n := emu.Counts()[emulator.OpCreateAccessPoint]; n != 0 {
			t.Errorf("%d CreateAccessPoint calls for an efs-dir class", n)
		}
		return
	}
	if !s3 {
		return
	}
	if n := emu.Counts()[emulator.OpS3CreateAccessPoint]; n == 0 {
		t.Errorf("no S3 Files CreateAccessPoint reached the emulator")
	}
	if n := emu.Counts()[emulator.OpCreateAccessPoint]; n != 0 {
		t.Errorf("%d EFS CreateAccessPoint calls for an s3files-ap class", n)
	}
}

// TestSanityS3Files runs csi-sanity with an s3files-ap class: volumes are
// S3 Files access points (s3files: IDs) made, listed, published (bind mounts
// of their roots) and deleted through the S3 Files API of the emulator. It
// runs TestSanity in a child process of this test binary.
// Snapshots and clones of S3 Files volumes are UNIMPLEMENTED (the
// controller advertises them for EFS volumes): those specs are skipped.
func TestSanityS3Files(t *testing.T) {
	sanityInChild(t, "s3files", "an s3files-ap class", "-ginkgo.skip=Snapshot|source snapshot|source volume")
}

// TestSanityDir runs csi-sanity with an efs-dir class: volumes are
// directories the controller makes through its own (bind) mount of the
// emulator's file system, efsdir: IDs, listed from the record, published
// as sub-paths of the file system and removed on delete. It runs
// TestSanity in a child process of this test binary.
func TestSanityDir(t *testing.T) { sanityInChild(t, "efs-dir", "an efs-dir class") }

// sanityInChild runs TestSanity in a child process with sanityClassEnv
// set to class (csi-sanity's Ginkgo suite runs once per process).
func sanityInChild(t *testing.T, class, what string, args ...string) {
	if os.Geteuid() != 0 {
		t.Skip("csi-sanity's node tests need root for bind mounts")
	}
	if os.Getenv(sanityClassEnv) != "" {
		t.Skip("the child runs TestSanity only")
	}
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestSanity$", "-test.count=1"}, args...)...)
	cmd.Env = append(os.Environ(), sanityClassEnv+"="+class)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("csi-sanity with %s: %v\n%s", what, err, out)
	}
	if !strings.Contains(string(out), "SUCCESS!") {
		t.Fatalf("csi-sanity did not report success:\n%s", out)
	}
}

// TestSanityThroughMountEFSHelper runs csi-sanity again with the node
// mounting through the efs back end: the real `mount -t efs`, the test
// mount.efs helper over the emulator's data (see internal/testutil/mountefs)
// with its TLS tunnels and state files, the efs-utils.conf the driver
// writes, its watchdog supervised and the reaper collecting the tunnels.
func TestSanityThroughMountEFSHelper(t *testing.T) {
	h := mountefs.Setup(t)
	if h == nil {
		return
	}
	state, invLog := t.TempDir(), filepath.Join(t.TempDir(), "invocations")
	confDir := filepath.Join(t.TempDir(), "efs")
	socket, _ := startDriver(t, func(c *Config) {
		c.NodeBackend = "efs"
		c.MountTypes = []string{fsTypeOf(t, c.LocalRoot)}
		c.EFSUtils.Dirs = efsutils.Dirs{ConfigDir: confDir}
		c.EFSUtils.Settings.Overrides = []efsutils.Override{
			{Section: "mount-watchdog", Key: "unmount_grace_period_sec", Value: "0"},
		}
		c.EFSUtils.Watchdog = efsutils.Watchdog{Path: h.Bin, Args: mountefs.WatchdogArgs}
		h.Configure(t, spec.Config{DataDir: c.LocalRoot, Endpoint: c.EFS.Endpoint, Region: "us-east-1",
			ConfigDir: confDir, StateDir: state, InvocationLog: invLog})
	})
	cfg := sanity.NewTestConfig()
	cfg.Address = socket
	base := t.TempDir()
	cfg.TargetPath = filepath.Join(base, "target")
	cfg.StagingPath = filepath.Join(base, "staging")
	cfg.TestVolumeParameters = map[string]string{
		"provisioningMode": "efs-ap", "fileSystemId": sanityFS, "directoryPerms": "700",
	}
	cfg.IdempotentCount = 2
	sanity.Test(t, cfg)
	if n := len(mountefs.Invocations(t, invLog)); n == 0 {
		t.Error("csi-sanity's node tests never ran the mount.efs helper")
	} else {
		t.Logf("mount.efs ran %d times", n)
	}
	if _, err := os.Stat(filepath.Join(confDir, efsutils.ConfFileName)); err != nil {
		t.Errorf("the driver wrote no efs-utils.conf: %v", err)
	}
}

func fsTypeOf(t *testing.T, dir string) string {
	out, err := exec.Command("findmnt", "-n", "-o", "FSTYPE", "-T", dir).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
