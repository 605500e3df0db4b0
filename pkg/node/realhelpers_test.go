package node_test

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/efs-csi/efs-csi-driver/internal/testutil/realefs"
	"github.com/efs-csi/efs-csi-driver/internal/testutil/realefs/spec"
	"github.com/efs-csi/efs-csi-driver/pkg/driver"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/efsutils"
	"github.com/efs-csi/efs-csi-driver/pkg/mount/mounttest"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// The instance the fake metadata service describes, and what efs-utils derives from it.
const (
	realRegion   = "us-east-1"
	realZone     = "us-east-1a"
	realZoneID   = "use1-az1"
	realInstance = "i-0123456789abcdef0"
	realRole     = "efs-csi-node-role"
	realFS       = "fs-0123456789abcdef0"
	realS3FS     = "fs-0123456789abcdef1"
	realAP       = "fsap-0123456789abcdef0" // efs-utils wants exactly 17 hex digits
	realS3AP     = "fsap-0123456789abcdef1"
	// Mount targets: loopback addresses of the test's network namespace.
	realMountTargetA = "127.1.0.1" // realZone's
	realMountTargetB = "127.1.0.2"
	realDNS          = realFS + ".efs." + realRegion + ".amazonaws.com"
	realCrossDNS     = realZoneID + "." + realFS + ".efs." + realRegion + ".amazonaws.com"
	realS3DNS        = realZoneID + "." + realS3FS + ".s3files." + realRegion + ".on.aws"
)

// realCase is one NodePublishVolume and what the real helper must have done for it.
type realCase struct {
	name  string
	volID string
	vctx  map[string]string
	flags []string // the capability's mount flags (a StorageClass's mountOptions)
	ro    bool
	// reader: a ReadOnlyMany claim's volume (a reader-only access mode), the request
	// not read-only; mounted read-only all the same (ro).
	reader bool
	// Success: the tunnel ("efs-proxy", "stunnel" or "" for none), TLS, what mount.nfs4
	// mounts, whereto the tunnel connects, the [efs] keys of efs-proxy's configuration.
	tunnel      string
	tls, s3     bool
	accessPoint string
	source      string
	connect     string
	proxyConf   map[string]string
	iam         bool
	imds        []string // metadata paths the helper must have read (with a token)
	// Failure: the gRPC code and a text of the error; the mount.nfs4 stub fails (fail) or
	// hangs until the call is given up (hang).
	code       codes.Code
	err        string
	fail, hang bool
}

// TestRealEFSUtilsThroughNodePublish publishes and unpublishes volumes through the node
// plugin's gRPC server, with every option combination the driver produces, against the
// real efs-utils of the image (hack/install-efs-utils.sh from the pinned tarball; see
// internal/testutil/realefs): `mount -t efs` and `mount -t s3files` run the real mount.efs
// and mount.s3files, with the efs-utils.conf (and s3files-utils.conf) the driver wrote,
// the real stunnel and the real watchdog the driver supervises; only mount.nfs4 (the
// kernel has no NFS client) and efs-proxy (not built here) are stubs, which record what
// they were given. For each volume it checks what the helper did: the arguments of
// mount.nfs4, the state file, the tunnel (stunnel running, efs-proxy started with its
// configuration), the instance metadata it read. A failing and a hung mount.nfs4 are
// reported as errors and leave nothing mounted. In the end the watchdog has killed every
// tunnel and removed every state file, and no process is left, zombies included.
//
// The watchdog looks for live mounts in /proc/mounts as nfs4 mounts from 127.0.0.1 with
// the tunnel's port=, which only the kernel's NFS client makes: the stub's mounts are not
// such, so to the watchdog every mount here is gone from the start, and after its fixed
// 30 s (and more than unmount_count_for_consistency reads) it cleans each one up. What is
// tested is that clean-up, once the volume is unpublished; not that it spares a live
// mount or restarts the tunnel of one (pkg/efsutils's watchdog tests and the fake helper
// cover the driver's side of those).
func TestRealEFSUtilsThroughNodePublish(t *testing.T) {
	env := realefs.Setup(t)
	if env == nil {
		return
	}
	defer func() {
		if t.Failed() {
			realefs.DumpLogs(t)
		}
	}()
	imds := env.ServeIMDS(t, realefs.Instance{Region: realRegion, AZ: realZone, AZID: realZoneID, InstanceID: realInstance,
		AccountID: "111122223333", Role: realRole, Credentials: realefs.Credentials{
			AccessKeyID: "ASIAEXAMPLEEXAMPLE00", SecretAccessKey: "c2VjcmV0LWtleS1vZi10aGUtdGVzdC1yb2xlLS0tLQ", Token: "dGVzdC1zZXNzaW9uLXRva2Vu"}})
	env.ServeNFS(t, realMountTargetA)
	env.ServeNFS(t, realMountTargetB)
	env.AddHosts(t, map[string]string{realDNS: realMountTargetA, realCrossDNS: realMountTargetA, realS3DNS: realMountTargetA})

	var (
		mu        sync.Mutex
		watchdogs []int
	)
	// The driver's log (the watchdog's output goes there too), shown if the test fails.
	logFile, err := os.Create(filepath.Join(t.TempDir(), "driver.log"))
	must(t, err)
	defer func() {
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("==== the driver's log\n%s", b)
		}
	}()
	cfg := driver.Config{
		Endpoint: "unix://" + filepath.Join(t.TempDir(), "csi.sock"), Mode: driver.ModeNode,
		Logger: slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug})),
		EFS:    efs.Config{Region: realRegion},
		// What the mount.nfs4 stub mounts: a tmpfs whose source is the NFS server's.
		MountTypes: []string{"tmpfs"},
		EFSUtils: driver.EFSUtilsConfig{
			// The chart's layout: a host configuration directory, the image's static
			// files, /etc/amazon/efs linked to it.
			Dirs: efsutils.Dirs{ConfigDir: filepath.Join(t.TempDir(), "var-amazon-efs"),
				StaticFilesDir: "/etc/amazon/efs-static-files/", EtcDir: "/etc/amazon/efs"},
			Settings: efsutils.Settings{PortRangeLower: tunnelPortLow, PortRangeUpper: tunnelPortHigh,
				// The watchdog's own poll (1 s, an integer as it wants) and its fixed 30 s
				// stay; the consistent reads it wants and the grace period after it marks
				// a mount gone are cut.
				Overrides: []efsutils.Override{
					{Section: "mount-watchdog", Key: "unmount_count_for_consistency", Value: "1"},
					{Section: "mount-watchdog", Key: "unmount_grace_period_sec", Value: "0"},
				}},
			Watchdog: efsutils.Watchdog{Path: efsutils.DefaultWatchdogPath, Started: func(pid int) {
				mu.Lock()
				watchdogs = append(watchdogs, pid)
				mu.Unlock()
			}},
		},
	}
	conn, _, _ := startDriver(t, cfg)
	node := csi.NewNodeClient(conn)

	// The node's identity and zone came from the instance metadata too.
	info, err := node.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	must(t, err)
	if info.GetNodeId() != realInstance || info.GetAccessibleTopology().GetSegments()[volume.TopologyZoneKey] != realZone {
		t.Errorf("NodeGetInfo %v, want node %s in %s from the instance metadata", info, realInstance, realZone)
	}

	ipMap := `{"` + realZone + `":"` + realMountTargetA + `","us-east-1b":"` + realMountTargetB + `"}`
	credsPath := "/latest/meta-data/iam/security-credentials/" + realRole
	azIDPath := "/latest/meta-data/placement/availability-zone-id"
	efsProxyTLS := map[string]string{"checkHost": realDNS, "CAfile": "/etc/amazon/efs/efs-utils.crt", "fs_id": realFS, "region": realRegion}
	cases := []realCase{
		{name: "whole file system", volID: realFS, tunnel: "efs-proxy", tls: true, source: "127.0.0.1:/",
			connect: realDNS + ":2049", proxyConf: efsProxyTLS},
		{name: "access point", volID: realFS + "::" + realAP, tunnel: "efs-proxy", tls: true, accessPoint: realAP,
			source: "127.0.0.1:/", connect: realDNS + ":2049", proxyConf: efsProxyTLS},
		{name: "access point read-only", volID: realFS + "::" + realAP, ro: true, tunnel: "efs-proxy", tls: true,
			accessPoint: realAP, source: "127.0.0.1:/", connect: realDNS + ":2049"},
		{name: "sub path", volID: "efs:" + realFS + ":/data/shared", tunnel: "efs-proxy", tls: true,
			source: "127.0.0.1:/data/shared", connect: realDNS + ":2049"},
		{name: "sub path under an access point", volID: realFS + ":/sub:" + realAP, tunnel: "efs-proxy", tls: true,
			accessPoint: realAP, source: "127.0.0.1:/sub", connect: realDNS + ":2049"},
		{name: "ReadOnlyMany volume of a snapshot: its copy, read-only",
			volID:  volume.ReaderID(realFS, "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"),
			reader: true, ro: true, tunnel: "efs-proxy", tls: true,
			source: "127.0.0.1:/.efs-csi-snapshots/0123456789abcdef0123456789abcdef/data", connect: realDNS + ":2049"},
		{name: "deprecated path key", volID: realFS, vctx: map[string]string{"path": "/legacy"}, tunnel: "efs-proxy", tls: true,
			source: "127.0.0.1:/legacy", connect: realDNS + ":2049"},
		{name: "iam with an access point", volID: realFS + "::" + realAP, flags: []string{"iam"}, tunnel: "efs-proxy", tls: true,
			accessPoint: realAP, iam: true, source: "127.0.0.1:/", connect: realDNS + ":2049", imds: []string{credsPath}},
		{name: "mounttargetip", volID: realFS + "::" + realAP, vctx: map[string]string{"mounttargetip": realMountTargetB},
			tunnel: "efs-proxy", tls: true, accessPoint: realAP, source: "127.0.0.1:/", connect: realMountTargetB + ":2049"},
		{name: "mounttargetipmap picks the node's zone", volID: realFS + "::" + realAP, vctx: map[string]string{"mounttargetipmap": ipMap},
			tunnel: "efs-proxy", tls: true, accessPoint: realAP, source: "127.0.0.1:/", connect: realMountTargetA + ":2049"},
		{name: "crossaccount with iam, read-only", volID: realFS + "::" + realAP, vctx: map[string]string{"crossaccount": "true"},
			flags: []string{"iam"}, ro: true, tunnel: "efs-proxy", tls: true, accessPoint: realAP, iam: true, source: "127.0.0.1:/",
			connect: realCrossDNS + ":2049", proxyConf: map[string]string{"checkHost": realDNS}, imds: []string{azIDPath, credsPath}},
		{name: "no encryption in transit", volID: realFS, vctx: map[string]string{"encryptInTransit": "false"},
			tunnel: "efs-proxy", source: "127.0.0.1:/", connect: realDNS + ":2049"},
		{name: "no encryption in transit by mounttargetip, sub path", volID: realFS + ":/data",
			vctx:   map[string]string{"encryptInTransit": "false", "mounttargetip": realMountTargetB},
			tunnel: "efs-proxy", source: "127.0.0.1:/data", connect: realMountTargetB + ":2049"},
		{name: "stunnel with an access point", volID: realFS + "::" + realAP, flags: []string{"stunnel"}, tunnel: "stunnel",
			tls: true, accessPoint: realAP, source: "127.0.0.1:/", connect: realDNS + ":2049"},
		{name: "stunnel, iam, read-only, mounttargetipmap", volID: realFS + "::" + realAP, flags: []string{"stunnel", "iam"}, ro: true,
			vctx: map[string]string{"mounttargetipmap": ipMap}, tunnel: "stunnel", tls: true, accessPoint: realAP, iam: true,
			source: "127.0.0.1:/", connect: realMountTargetA + ":2049", imds: []string{credsPath}},
		{name: "stunnel without encryption in transit", volID: realFS, flags: []string{"stunnel"},
			vctx: map[string]string{"encryptInTransit": "false"}, source: realDNS + ":/"},
		{name: "stunnel without encryption in transit by mounttargetip", volID: realFS + ":/data", flags: []string{"stunnel"},
			vctx: map[string]string{"encryptInTransit": "false", "mounttargetip": realMountTargetB}, source: realMountTargetB + ":/data"},
		{name: "S3 Files access point", volID: "s3files:" + realS3FS + "::" + realS3AP, s3: true, tunnel: "efs-proxy", tls: true,
			accessPoint: realS3AP, iam: true, source: "127.0.0.1:/", connect: realS3DNS + ":2049",
			proxyConf: map[string]string{"checkHost": realS3FS + ".s3files." + realRegion + ".on.aws", "fs_id": realS3FS},
			imds:      []string{azIDPath, credsPath}},
		{name: "S3 Files read-only without the read cache", volID: "s3files:" + realS3FS, ro: true, flags: []string{"nos3readcache"},
			s3: true, tunnel: "efs-proxy", tls: true, iam: true, source: "127.0.0.1:/", connect: realS3DNS + ":2049",
			proxyConf: map[string]string{"readahead_cache_enabled": "no"}},
		{name: "S3 Files sub path by mounttargetip", volID: "s3files:" + realS3FS + ":/data:" + realS3AP,
			vctx: map[string]string{"mounttargetip": realMountTargetB}, s3: true, tunnel: "efs-proxy", tls: true,
			accessPoint: realS3AP, iam: true, source: "127.0.0.1:/data", connect: realMountTargetB + ":2049"},

		{name: "mount.nfs4 fails", volID: realFS + "::" + realAP, fail: true, tunnel: "efs-proxy", tls: true, accessPoint: realAP,
			code: codes.Internal, err: "Protocol not supported"},
		{name: "mount.nfs4 hangs", volID: realFS + "::" + realAP, hang: true, tunnel: "efs-proxy", tls: true, accessPoint: realAP,
			code: codes.Canceled},
		{name: "the helper refuses iam without tls", volID: realFS, flags: []string{"iam"}, vctx: map[string]string{"encryptInTransit": "false"},
			code: codes.Internal, err: `The "tls" option is required when mounting via "iam"`},
		{name: "the helper refuses mounttargetip with crossaccount", volID: realFS + "::" + realAP,
			vctx: map[string]string{"crossaccount": "true", "mounttargetip": realMountTargetB},
			code: codes.Internal, err: "mounttargetip option is incompatible with crossaccount option"},
	}

	var tunnels sync.Map // PID -> case name: every tunnel started, for the end
	start := time.Now()
	t.Run("volumes", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				for _, pid := range checkRealCase(t, env, imds, node, tc) {
					tunnels.Store(pid, tc.name)
				}
			})
		}
	})
	t.Logf("%d volumes published and unpublished in %v", len(cases), time.Since(start).Round(time.Millisecond))
	if t.Failed() {
		return
	}

	// The watchdog cleans every mount up: 30 s after its mount, then more than
	// unmount_count_for_consistency polls of 1 s and one more.
	// Nothing of a mount is left: state file, tunnel configuration, mount state directory
	// (client certificate, pid file), tunnel process. The private key and its CA files
	// stay.
	leftovers := func() []string {
		ents, err := os.ReadDir(realefs.StateDir)
		must(t, err)
		var left []string
		for _, e := range ents {
			if n := e.Name(); strings.HasPrefix(n, "fs-") || strings.HasPrefix(n, "stunnel-config.") || strings.HasPrefix(n, "~") {
				left = append(left, n)
			}
		}
		tunnels.Range(func(pid, name any) bool {
			if _, alive := realefs.ProcessOf(pid.(int)); alive {
				left = append(left, "the tunnel of "+name.(string))
			}
			return true
		})
		return left
	}
	for deadline := time.Now().Add(90 * time.Second); len(leftovers()) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the watchdog did not clean up within 90 s: %q left", leftovers())
		}
	}
	t.Logf("the watchdog cleaned up %v after the first mount", time.Since(start).Round(time.Millisecond))
	realefs.Eventually(t, 20*time.Second, "no helper process and no zombie", func() bool {
		for _, p := range realefs.Processes(t) {
			if p.State == 'Z' || slices.ContainsFunc(p.Cmdline, func(a string) bool {
				return strings.HasSuffix(a, "mount.efs") || strings.HasSuffix(a, "mount.s3files") || strings.HasSuffix(a, "mount.nfs4") ||
					strings.HasSuffix(a, "/efs-proxy") || strings.HasSuffix(a, "/stunnel")
			}) {
				return false
			}
		}
		return true
	})
	// The watchdog read the driver's efs-utils.conf (it cleaned up) and runs. It may
	// have been restarted: efs-utils 3.2.0's watchdog checks that a tunnel's pid file
	// exists, then opens it, and efs-proxy removes it when the SIGTERM the watchdog just
	// sent arrives in between (FileNotFoundError: the watchdog exits, and the driver
	// starts it again). A crash loop is more than that.
	mu.Lock()
	defer mu.Unlock()
	if len(watchdogs) == 0 || len(watchdogs) > 3 {
		t.Errorf("the watchdog was started %d times", len(watchdogs))
	} else if p, ok := realefs.ProcessOf(watchdogs[len(watchdogs)-1]); !ok || p.State == 'Z' {
		t.Errorf("the watchdog %d is not running", watchdogs[len(watchdogs)-1])
	}
	if len(watchdogs) > 1 {
		t.Logf("the watchdog was restarted %d times", len(watchdogs)-1)
	}
}

// checkRealCase publishes tc's volume, checks what the helper did, unpublishes it, and
// returns the PIDs of the tunnels it started.
func checkRealCase(t *testing.T, env *realefs.Env, imds *realefs.IMDS, node csi.NodeClient, tc realCase) []int {
	target := mounttest.Target(t)
	mode := csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	if tc.reader {
		mode = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	}
	req := &csi.NodePublishVolumeRequest{VolumeId: tc.volID, TargetPath: target, Readonly: tc.ro && !tc.reader, VolumeContext: tc.vctx,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: tc.flags}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		}}
	switch {
	case tc.fail:
		env.FailMount(t, target)
	case tc.hang:
		env.HangMount(t, target)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	if tc.hang {
		// kubelet gives up once mount.nfs4 hangs; then the server answers, a refusal.
		done := make(chan error, 1)
		go func() { _, err := node.NodePublishVolume(ctx, req); done <- err }()
		realefs.Eventually(t, 30*time.Second, "mount.nfs4 hangs", func() bool {
			return slices.ContainsFunc(nfsCalls(t, env, target), func(c spec.Call) bool { return c.Hung })
		})
		cancel()
		select {
		case err = <-done:
		case <-time.After(15 * time.Second):
			t.Fatal("NodePublishVolume did not return when its caller gave up on the hung mount")
		}
		if _, mounted := realefs.MountAt(t, target); mounted {
			t.Error("the hung mount left a mount")
		}
		env.ReleaseMount(t, target, "fail")
	} else {
		_, err = node.NodePublishVolume(ctx, req)
	}

	if tc.code != codes.OK {
		if got := status.Code(err); got != tc.code || !strings.Contains(err.Error(), tc.err) {
			t.Fatalf("NodePublishVolume: %v, want %v with %q", err, tc.code, tc.err)
		}
		if _, mounted := realefs.MountAt(t, target); mounted {
			t.Error("a failed publish left a mount")
		}
		if tc.tunnel == "" {
			if n := len(nfsCalls(t, env, target)); n != 0 {
				t.Errorf("the helper refused, yet ran mount.nfs4 %d times", n)
			}
			if _, _, ok := stateOf(t, target); ok {
				t.Error("the helper refused, yet wrote a state file")
			}
			return nil
		}
		// mount.efs exits, leaving its tunnel and state file to the watchdog.
		var name string
		var st spec.State
		realefs.Eventually(t, 30*time.Second, "the failed mount's state file", func() bool {
			var ok bool
			name, st, ok = stateOf(t, target)
			return ok
		})
		checkTunnel(t, env, tc, name, st)
		return []int{st.PID}
	}
	if err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}

	m, mounted := realefs.MountAt(t, target)
	if !mounted || m.FSType != "tmpfs" || m.ReadOnly != tc.ro {
		t.Errorf("mount on the target %+v (mounted %v), want the stub's, read-only %v", m, mounted, tc.ro)
	}
	calls := nfsCalls(t, env, target)
	if len(calls) != 1 {
		t.Fatalf("mount.nfs4 ran %d times for the target, want once: %+v", len(calls), calls)
	}
	args := calls[0].Args
	if args[0] != tc.source || m.Source != tc.source {
		t.Errorf("mount.nfs4 mounted %s (mountinfo: %s), want %s", args[0], m.Source, tc.source)
	}
	opts := strings.Split(args[3], ",")
	nfsvers := "nfsvers=4.1"
	if tc.s3 {
		nfsvers = "nfsvers=4.2"
	}
	for _, o := range []string{nfsvers, "rsize=1048576", "wsize=1048576", "hard", "timeo=600", "retrans=2", "noresvport"} {
		if !slices.Contains(opts, o) {
			t.Errorf("mount.nfs4 -o %s: no %s", args[3], o)
		}
	}
	if slices.Contains(opts, "ro") != tc.ro {
		t.Errorf("mount.nfs4 -o %s: ro %v, want %v", args[3], !tc.ro, tc.ro)
	}
	for _, o := range opts { // efs-utils' own options are not NFS options
		if k, _, _ := strings.Cut(o, "="); slices.Contains([]string{"tls", "accesspoint", "iam", "mounttargetip", "crossaccount", "stunnel", "nos3readcache", "tlsport"}, k) {
			t.Errorf("mount.nfs4 -o %s: has efs-utils' %s", args[3], o)
		}
	}
	for _, p := range tc.imds {
		if !imds.Asked(p) {
			t.Errorf("the helper did not read %s from the instance metadata (with an IMDSv2 token)", p)
		}
	}

	var pids []int
	name, st, hasState := stateOf(t, target)
	if hasState != (tc.tunnel != "") {
		t.Fatalf("state file: %v (%s), want one: %v", hasState, name, tc.tunnel != "")
	}
	if hasState {
		pids = append(pids, st.PID)
		port := checkTunnel(t, env, tc, name, st)
		if !slices.Contains(opts, "port="+strconv.Itoa(port)) {
			t.Errorf("mount.nfs4 -o %s: not the tunnel's port=%d", args[3], port)
		}
	} else if slices.ContainsFunc(opts, func(o string) bool { return strings.HasPrefix(o, "port=") }) {
		t.Errorf("mount.nfs4 -o %s: a port without a tunnel", args[3])
	}

	// kubelet's retry finds the mount: the helper does not run again.
	_, err = node.NodePublishVolume(ctx, req)
	must(t, err)
	if n := len(nfsCalls(t, env, target)); n != 1 {
		t.Errorf("the retry ran mount.nfs4 again (%d runs)", n)
	}
	_, err = node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: tc.volID, TargetPath: target})
	must(t, err)
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("target left after unpublish: %v", err)
	}
	return pids
}

// checkTunnel checks the state file name/st of tc's mount and its tunnel, and returns the
// tunnel's port.
func checkTunnel(t *testing.T, env *realefs.Env, tc realCase, name string, st spec.State) int {
	t.Helper()
	port, _ := spec.StatePort(name)
	if port < tunnelPortLow || port >= tunnelPortHigh {
		conf := "efs-utils.conf"
		if tc.s3 {
			conf = "s3files-utils.conf (the node plugin must write it with its TLS port range, as efs-utils.conf)"
		}
		t.Errorf("tunnel port %d (%s) outside [%d, %d), the range of %s", port, name, tunnelPortLow, tunnelPortHigh, conf)
	}
	service := "elasticfilesystem"
	if tc.s3 {
		service = "s3files"
	}
	if st.ServiceType != service || st.Mountpoint == "" || st.MountTime == 0 {
		t.Errorf("state file %s: %+v, want service %s", name, st, service)
	}
	configFile := filepath.Join(realefs.StateDir, "stunnel-config."+name)
	if !slices.Equal(st.Files, []string{configFile}) {
		t.Errorf("state file %s: files %q, want the tunnel's configuration %s", name, st.Files, configFile)
	}
	b, err := os.ReadFile(configFile)
	must(t, err)
	conf := spec.ParseTunnelConfig(string(b))
	if got := conf.EFS["accept"]; got != "127.0.0.1:"+strconv.Itoa(port) {
		t.Errorf("tunnel accepts on %s, want 127.0.0.1:%d", got, port)
	}
	if tc.connect != "" && conf.EFS["connect"] != tc.connect {
		t.Errorf("tunnel connects to %s, want %s", conf.EFS["connect"], tc.connect)
	}
	pidFile := filepath.Join(realefs.StateDir, name+"+", "stunnel.pid")
	if conf.Global["pid"] != pidFile {
		t.Errorf("tunnel pid file %s, want %s", conf.Global["pid"], pidFile)
	}
	if tc.tls {
		if st.AccessPoint != tc.accessPoint || st.MountStateDir != name+"+" || st.Region != realRegion || st.FSID == "" {
			t.Errorf("state file %s: %+v, want access point %q, TLS details", name, st, tc.accessPoint)
		}
		if _, err := os.Stat(st.Certificate); err != nil || st.Certificate != filepath.Join(realefs.StateDir, name+"+", "certificate.pem") {
			t.Errorf("state file %s: client certificate %s: %v", name, st.Certificate, err)
		}
		if (st.AWSCredentialsMethod != "") != tc.iam {
			t.Errorf("state file %s: credentials %q, want some: %v", name, st.AWSCredentialsMethod, tc.iam)
		}
		if conf.EFS["cert"] != st.Certificate || conf.EFS["verify"] != "2" {
			t.Errorf("tunnel certificate %q, verify %q", conf.EFS["cert"], conf.EFS["verify"])
		}
	} else if st.Certificate != "" || conf.EFS["cert"] != "" {
		t.Errorf("a mount without TLS has a client certificate: %+v", st)
	}

	p, alive := realefs.ProcessOf(st.PID)
	if !alive || p.State == 'Z' || len(p.Cmdline) == 0 {
		t.Fatalf("tunnel %d of %s is not running: %+v", st.PID, name, p)
	}
	// mount.efs has exited (a failed one may still be on its way out): the tunnel is
	// the driver's, PID 1 as in its container.
	realefs.Eventually(t, 10*time.Second, "the tunnel re-parented to PID 1, the driver", func() bool {
		p, _ := realefs.ProcessOf(st.PID)
		return p.PPID == 1
	})
	if !slices.Equal(st.Cmd, p.Cmdline) {
		t.Errorf("state file's command %q, the tunnel's %q", st.Cmd, p.Cmdline)
	}
	switch tc.tunnel {
	case "efs-proxy":
		want := []string{"/usr/bin/efs-proxy", configFile}
		if tc.tls {
			want = append(want, "--tls")
		}
		if !tc.s3 {
			want = append(want, "--no-direct-s3-read")
		}
		if !slices.Equal(p.Cmdline, want) {
			t.Errorf("efs-proxy %q, want %q", p.Cmdline, want)
		}
		for k, v := range tc.proxyConf {
			if conf.EFS[k] != v {
				t.Errorf("efs-proxy configuration [efs] %s = %q, want %q", k, conf.EFS[k], v)
			}
		}
		if tc.tls && conf.EFS["checkHost"] == "" {
			t.Error("efs-proxy configuration: no checkHost")
		}
	case "stunnel":
		if len(p.Cmdline) != 2 || filepath.Base(p.Cmdline[0]) != "stunnel" || p.Cmdline[1] != configFile {
			t.Errorf("stunnel %q, want stunnel %s", p.Cmdline, configFile)
		}
		if conf.EFS["checkHost"] == "" || conf.EFS["CAfile"] == "" || conf.Global["foreground"] == "" {
			t.Errorf("stunnel configuration: %q", conf.Lines)
		}
		if slices.ContainsFunc(env.Calls(t), func(c spec.Call) bool {
			return c.Prog == spec.EFSProxy && strings.Contains(c.Config, name)
		}) {
			t.Error("the stunnel mount started efs-proxy")
		}
	}
	// The tunnel wrote its PID file, as the watchdog checks; without TLS its directory
	// (the client certificate's) does not exist, efs-proxy cannot write it, and the
	// watchdog goes by the state file's PID alone.
	if tc.tls {
		realefs.Eventually(t, 10*time.Second, "the tunnel's pid file", func() bool {
			b, err := os.ReadFile(pidFile)
			return err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(st.PID)
		})
	} else if _, err := os.Stat(filepath.Dir(pidFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a mount without TLS has a mount state directory %s: %v", filepath.Dir(pidFile), err)
	}
	if !realefs.Listening(t, port) {
		t.Errorf("nothing listens on the tunnel's port %d", port)
	}
	return port
}

// nfsCalls are the mount.nfs4 runs for target.
func nfsCalls(t *testing.T, env *realefs.Env, target string) []spec.Call {
	var out []spec.Call
	for _, c := range env.Calls(t) {
		if c.Prog == "mount.nfs4" && len(c.Args) > 1 && c.Args[1] == target {
			out = append(out, c)
		}
	}
	return out
}

// stateOf finds the state file of the mount on target.
func stateOf(t *testing.T, target string) (string, spec.State, bool) {
	for name, st := range realefs.States(t) {
		if st.Mountpoint == target {
			return name, st, true
		}
	}
	return "", spec.State{}, false
}
