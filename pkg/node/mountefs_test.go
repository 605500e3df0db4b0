package node_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/internal/testutil/mountefs"
	"github.com/efs-csi/efs-csi-driver/internal/testutil/mountefs/spec"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/efsutils"
	"github.com/efs-csi/efs-csi-driver/pkg/mount"
	"github.com/efs-csi/efs-csi-driver/pkg/mount/mounttest"
	"github.com/efs-csi/efs-csi-driver/pkg/node"
	"github.com/efs-csi/efs-csi-driver/pkg/reaper"
)

// Ports of the TLS tunnels in these tests: not efs-utils' default, to see
// that the helper reads the range from the efs-utils.conf written here.
const tunnelPortLow, tunnelPortHigh = 31049, 31449

// helperNode is a node Service mounting through the real `mount -t efs`
// and the test mount.efs helper over an emulator, with efs-utils.conf
// written by pkg/efsutils, the helper's watchdog supervised and the reaper
// running, as the driver runs them.
type helperNode struct {
	svc                 *node.Service
	data, state, invLog string
	apID                string
}

func newHelperNode(t *testing.T, h *mountefs.Helper) *helperNode {
	t.Helper()
	ctx := context.Background()
	base := t.TempDir()
	n := &helperNode{data: filepath.Join(base, "data"), state: filepath.Join(base, "run-efs"), invLog: filepath.Join(base, "invocations")}
	must(t, os.MkdirAll(n.state, 0o750))
	url, _ := emulatortest.Start(t, emulator.Config{DataDir: n.data, FileSystems: []string{e2eFS}})
	client, err := efs.New(ctx, efs.Config{Region: "us-east-1", Endpoint: url, RateLimits: map[string]efs.RateLimit{"*": {}}})
	must(t, err)
	ap, err := client.CreateAccessPoint(ctx, efs.CreateAccessPointInput{FileSystemID: e2eFS, ClientToken: "helper-test",
		Path: "/vol1", CreationInfo: &efs.CreationInfo{OwnerUID: 0, OwnerGID: 0, Permissions: "755"}})
	must(t, err)
	n.apID = ap.ID
	mounttest.WriteMarker(t, filepath.Join(n.data, e2eFS, "vol1"), "vol1")
	mounttest.WriteMarker(t, filepath.Join(n.data, e2eFS), "root")

	conf, err := efsutils.Render(efsutils.Settings{Region: "us-east-1", PortRangeLower: tunnelPortLow, PortRangeUpper: tunnelPortHigh,
		Overrides: []efsutils.Override{{Section: "mount-watchdog", Key: "unmount_grace_period_sec", Value: "0"}}})
	must(t, err)
	confDir, err := efsutils.Setup(efsutils.Dirs{ConfigDir: filepath.Join(base, "var-amazon-efs")}, conf, nil)
	must(t, err)
	h.Configure(t, spec.Config{DataDir: n.data, Endpoint: url, Region: "us-east-1", ConfigDir: confDir,
		StateDir: n.state, InvocationLog: n.invLog, WatchdogPoll: 20 * time.Millisecond, UnmountDiffTime: 20 * time.Millisecond})

	// Before the reaper runs: it would reap findmnt before exec's wait does
	// ("waitid: no child processes").
	types := fsType(t, n.data)
	must(t, reaper.Enable())
	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { reaper.Loop(bg, 0, nil, nil) })
	w := &efsutils.Watchdog{Path: h.Bin, Args: mountefs.WatchdogArgs}
	wg.Go(func() { w.Run(bg) })
	t.Cleanup(func() { stop(); wg.Wait() })

	m, err := mount.NewEFS(mount.WithMountTypes(types))
	must(t, err)
	n.svc, err = node.New(node.Config{NodeID: "node-1", Mounter: m})
	must(t, err)
	return n
}

// fsType is the file system type of dir's mount: what the helper's bind
// mounts show in mountinfo.
func fsType(t *testing.T, dir string) string {
	out, err := exec.Command("findmnt", "-n", "-o", "FSTYPE", "-T", dir).Output()
	must(t, err)
	return strings.TrimSpace(string(out))
}

func (n *helperNode) publish(t *testing.T, volID string, vctx map[string]string, target string, ro bool) error {
	_, err := n.svc.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: volID, TargetPath: target, VolumeCapability: e2eCapability, VolumeContext: vctx, Readonly: ro})
	return err
}

func (n *helperNode) unpublish(t *testing.T, volID, target string) error {
	_, err := n.svc.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: volID, TargetPath: target})
	return err
}

// tunnelOf returns the state file efs-utils keeps for the mount at target.
func (n *helperNode) tunnelOf(t *testing.T, target string) (string, spec.State, bool) {
	for name, st := range mountefs.States(t, n.state) {
		if st.Mountpoint == target {
			return name, st, true
		}
	}
	return "", spec.State{}, false
}

// eventually polls cond, which the watchdog makes true asynchronously.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPublishThroughMountEFSHelper publishes volumes through pkg/mount's
// efs back end, util-linux's mount and the test mount.efs: the options
// reach the helper, the right directory is mounted, a TLS mount has a
// tunnel and a state file named as efs-utils names it, a retry is OK, and
// after the unpublish the watchdog kills the tunnel, the driver reaps it
// and no mount, state file or zombie is left.
func TestPublishThroughMountEFSHelper(t *testing.T) {
	h := mountefs.Setup(t)
	if h == nil {
		return
	}
	n := newHelperNode(t, h)
	tests := []struct {
		name    string
		volID   string
		vctx    map[string]string
		ro      bool
		marker  string
		options map[string]string // wanted in the helper's -o
		absent  []string          // not in -o
		tunnel  bool
	}{
		{"access point", e2eFS + "::" + n.apID, nil, false, "vol1",
			map[string]string{"tls": "", "accesspoint": n.apID}, []string{"ro"}, true},
		{"access point read-only", e2eFS + "::" + n.apID, nil, true, "vol1",
			map[string]string{"tls": "", "accesspoint": n.apID, "ro": ""}, nil, true},
		{"whole file system", e2eFS, nil, false, "root", map[string]string{"tls": ""}, []string{"accesspoint"}, true},
		{"static sub path with mount target IP", "efs:" + e2eFS + ":/vol1", map[string]string{"mounttargetip": "10.0.1.7"}, false, "vol1",
			map[string]string{"tls": "", "mounttargetip": "10.0.1.7"}, nil, true},
		{"cross account", e2eFS + "::" + n.apID, map[string]string{"crossaccount": "true"}, false, "vol1",
			map[string]string{"tls": "", "crossaccount": ""}, nil, true},
		// efs-utils' efs-proxy mode tunnels a mount without TLS too.
		{"no encryption in transit", e2eFS, map[string]string{"encryptInTransit": "false"}, false, "root",
			nil, []string{"tls"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := mounttest.Target(t)
			before := len(mountefs.Invocations(t, n.invLog))
			must(t, n.publish(t, tt.volID, tt.vctx, target, tt.ro))
			if got := mounttest.Marker(t, target); got != tt.marker {
				t.Errorf("mounted %q, want %q", got, tt.marker)
			}
			invs := mountefs.Invocations(t, n.invLog)
			if len(invs) != before+1 {
				t.Fatalf("%d helper runs, want 1", len(invs)-before)
			}
			inv := invs[len(invs)-1]
			if inv.Target != target {
				t.Errorf("helper target %q, want %q", inv.Target, target)
			}
			for k, v := range tt.options {
				if got, ok := inv.Options[k]; !ok || got != v {
					t.Errorf("option %s: %q (given: %v), want %q", k, got, ok, v)
				}
			}
			for _, k := range tt.absent {
				if _, ok := inv.Options[k]; ok {
					t.Errorf("option %s given", k)
				}
			}
			name, st, ok := n.tunnelOf(t, target)
			if ok != tt.tunnel {
				t.Fatalf("state file: %v, want %v", ok, tt.tunnel)
			}
			if tt.tunnel {
				port, _ := spec.StatePort(name)
				if want := spec.StateName(e2eFS, target, port); name != want {
					t.Errorf("state file %s, want %s", name, want)
				}
				if port < tunnelPortLow || port >= tunnelPortHigh {
					t.Errorf("tunnel port %d outside efs-utils.conf's range [%d, %d)", port, tunnelPortLow, tunnelPortHigh)
				}
				if st.ServiceType != "elasticfilesystem" || st.Mountpoint != target || len(st.Files) != 1 {
					t.Errorf("state file %s: %+v", name, st)
				}
				if !spec.IsTunnel(st.PID) {
					t.Fatalf("tunnel %d not running", st.PID)
				}
				if pp := parentOf(st.PID); pp != os.Getpid() {
					t.Errorf("tunnel's parent is %d, want the driver %d (its subreaper)", pp, os.Getpid())
				}
			}
			// A retry of a publish that succeeded finds the mount.
			must(t, n.publish(t, tt.volID, tt.vctx, target, tt.ro))
			if got := len(mountefs.Invocations(t, n.invLog)); got != before+1 {
				t.Errorf("the retry ran the helper again")
			}

			must(t, n.unpublish(t, tt.volID, target))
			if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("target left: %v", err)
			}
			if tt.tunnel {
				eventually(t, "the watchdog removes the state file", func() bool { _, _, ok := n.tunnelOf(t, target); return !ok })
				eventually(t, "the tunnel is gone and reaped", func() bool { return !exists(st.PID) })
			}
			if z, _ := reaper.Zombies(); z != 0 {
				t.Errorf("%d zombie children", z)
			}
		})
	}
}

func exists(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	pp, _ := strconv.Atoi(f[1])
	return pp
}

// TestSoakThroughMountEFSHelper runs NodePublishVolume/NodeUnpublishVolume
// cycles through the helper (1,000 by default) and checks that nothing
// accumulates: zombies, mounts, threads, file descriptors. Slow; run it
// with
//
//	EFS_SOAK=1 go test -run TestSoakThroughMountEFSHelper -v ./pkg/node
//
// (EFS_SOAK_CYCLES=N for another count).
func TestSoakThroughMountEFSHelper(t *testing.T) {
	if os.Getenv("EFS_SOAK") == "" || testing.Short() {
		t.Skip("soak test: set EFS_SOAK=1")
	}
	h := mountefs.Setup(t)
	if h == nil {
		return
	}
	cycles := 1000
	if v, err := strconv.Atoi(os.Getenv("EFS_SOAK_CYCLES")); err == nil && v > 0 {
		cycles = v
	}
	n := newHelperNode(t, h)
	volID := e2eFS + "::" + n.apID
	target := filepath.Join(t.TempDir(), "target")
	cycle := func() {
		must(t, n.publish(t, volID, nil, target, false))
		must(t, n.unpublish(t, volID, target))
	}
	settle := func() {
		eventually(t, "every state file removed", func() bool { return len(mountefs.States(t, n.state)) == 0 })
		eventually(t, "every tunnel gone and reaped", func() bool {
			kids, _ := reaper.Children()
			return slicesCount(kids, spec.IsTunnel) == 0 && zombies() == 0
		})
	}
	for range 10 { // warm up: pools, goroutines of the gRPC-free path
		cycle()
	}
	settle()
	before := sample(t)
	start := time.Now()
	for range cycles {
		cycle()
	}
	elapsed := time.Since(start)
	settle()
	after := sample(t)
	t.Logf("%d cycles in %v (%v each)", cycles, elapsed.Round(time.Millisecond), (elapsed / time.Duration(cycles)).Round(time.Microsecond))
	t.Logf("before: %+v", before)
	t.Logf("after:  %+v", after)
	if after.zombies != 0 || after.mounts != before.mounts || after.fds > before.fds+2 || after.threads > before.threads+4 {
		t.Errorf("resources grew over %d cycles: before %+v, after %+v", cycles, before, after)
	}
	if got := len(mountefs.Invocations(t, n.invLog)); got != cycles+10 {
		t.Errorf("%d helper runs, want %d", got, cycles+10)
	}
}

type resources struct{ zombies, children, mounts, threads, fds int }

func sample(t *testing.T) resources {
	kids, err := reaper.Children()
	must(t, err)
	mi, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	fds, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	st, err := os.ReadFile("/proc/self/status")
	must(t, err)
	r := resources{zombies: zombies(), children: len(kids), mounts: strings.Count(string(mi), "\n"), fds: len(fds)}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			r.threads, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return r
}

func zombies() int { z, _ := reaper.Zombies(); return z }

func slicesCount(s []int, f func(int) bool) int {
	n := 0
	for _, v := range s {
		if f(v) {
			n++
		}
	}
	return n
}
