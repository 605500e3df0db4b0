package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/testutil"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
)

// The command line is a contract: the upstream chart's arguments must start
// and serve. These run the real command (this test binary, re-executed as
// main).

const beMainEnv = "EFS_CSI_DRIVER_TEST_BE_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(beMainEnv) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// start runs the driver with args in front of an emulator and returns a
// connection to its socket once it serves, and the efs-utils configuration
// directory it was given (a temporary one: the host's is left alone).
func start(t *testing.T, args func(sock string) []string) (*grpc.ClientConn, *testutil.Buffer, string) {
	t.Helper()
	return startEnv(t, nil, args)
}

// startEnv is start with more environment.
func startEnv(t *testing.T, env []string, args func(sock string) []string) (*grpc.ClientConn, *testutil.Buffer, string) {
	t.Helper()
	url, _ := emulatortest.Start(t, emulator.Config{DataDir: t.TempDir(), FileSystems: []string{"fs-0123456789abcdef0"}})
	sock := filepath.Join(t.TempDir(), "csi.sock")
	eu := t.TempDir()
	euDir := filepath.Join(eu, "var/amazon/efs")
	cmd := exec.Command(os.Args[0], append(args(sock), "--efs-utils-config-dir-path="+euDir,
		"--efs-utils-config-legacy-dir-path="+filepath.Join(eu, "etc/amazon/efs-legacy"),
		"--efs-utils-static-files-path="+filepath.Join(eu, "static"), "--efs-utils-etc-dir="+filepath.Join(eu, "etc/amazon/efs"),
		"--efs-utils-watchdog-path="+filepath.Join(eu, "no-watchdog"))...)
	cmd.Env = append(os.Environ(), beMainEnv+"=1",
		"AWS_ENDPOINT_URL_EFS="+url, "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=x",
		"AWS_EC2_METADATA_DISABLED=true", "CSI_NODE_NAME=node-from-env", "NODE_NAME=")
	cmd.Env = append(cmd.Env, env...)
	out := &testutil.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("driver did not stop on SIGTERM\n%s", out)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("driver exited: %v\n%s", err, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket after 20s\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, out, euDir
}

// upstreamController and upstreamNode are the arguments the upstream chart
// (aws-efs-csi-driver 4.4.1) renders, with the endpoint of the test.
func upstreamController(sock string) []string {
	return []string{"--endpoint=unix:" + sock, "--logtostderr", "--tags=team:storage env:prod", "--v=2",
		"--delete-access-point-root-dir=false", "--debug-logs=false", "--http-endpoint=127.0.0.1:0"}
}

func upstreamNode(sock string) []string {
	return []string{"--endpoint=unix:" + sock, "--logtostderr", "--v=2", "--vol-metrics-opt-in=false",
		"--vol-metrics-refresh-period=240", "--vol-metrics-fs-rate-limit=5", "--max-inflight-mount-calls-opt-in=false",
		"--max-inflight-mount-calls=10", "--volume-attach-limit-opt-in=true", "--volume-attach-limit=20",
		"--force-unmount-after-timeout=false", "--unmount-timeout=30s", "--debug-logs=false",
		"--efs-cloudwatch-log-enabled=false", "--s3files-cloudwatch-log-enabled=true",
		"--s3files-cloudwatch-metrics-enabled=true", "--efs-utils-conf-overrides=mount:stunnel_debug_enabled=true",
		"--s3files-utils-conf-overrides="}
}

func TestUpstreamChartArgumentsStartAndServe(t *testing.T) {
	for _, tt := range []struct {
		name string
		args func(string) []string
	}{
		{"controller", upstreamController},
		{"node", upstreamNode},
		{"upstream default endpoint form unix:///", func(sock string) []string { return []string{"--endpoint=unix://" + sock, "-v=5"} }},
		{"plain path endpoint, json logs", func(sock string) []string { return []string{"--endpoint=" + sock, "--logging-format=json"} }},
		// Upstream's adaptive retry flag, which this binary once rejected.
		{"adaptive retry mode off", func(sock string) []string {
			return []string{"--endpoint=unix:" + sock, "--adaptive-retry-mode=false", "--stderrthreshold=INFO", "--vmodule=driver=3"}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn, out, euDir := start(t, tt.args)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
			if err != nil || info.Name != "efs.csi.aws.com" {
				t.Fatalf("GetPluginInfo: %v, %v\n%s", info, err, out)
			}
			if _, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{}); err != nil {
				t.Fatalf("Probe: %v", err)
			}
			if _, err := csi.NewControllerClient(conn).ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{}); err != nil {
				t.Fatalf("ControllerGetCapabilities: %v", err)
			}
			ni, err := csi.NewNodeClient(conn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
			if err != nil || ni.NodeId != "node-from-env" {
				t.Fatalf("NodeGetInfo: %v, %v", ni, err)
			}
			if tt.name == "node" && ni.MaxVolumesPerNode != 20 {
				t.Errorf("MaxVolumesPerNode = %d, want --volume-attach-limit 20", ni.MaxVolumesPerNode)
			}
			// The node's efs-utils.conf is written before the socket
			// serves, with upstream's override applied.
			conf, err := os.ReadFile(filepath.Join(euDir, "efs-utils.conf"))
			if err != nil {
				t.Fatalf("efs-utils.conf: %v\n%s", err, out)
			}
			if tt.name == "node" && !strings.Contains(string(conf), "\nstunnel_debug_enabled = true\n") {
				t.Errorf("--efs-utils-conf-overrides not applied:\n%s", conf)
			}
			// mount.s3files' file, beside it, from upstream's S3 Files flags.
			s3, err := os.ReadFile(filepath.Join(euDir, "s3files-utils.conf"))
			if err != nil {
				t.Fatalf("s3files-utils.conf: %v\n%s", err, out)
			}
			if tt.name == "node" && !strings.Contains(string(s3), "\nmetrics_enabled = true\n") {
				t.Errorf("--s3files-cloudwatch-metrics-enabled not applied:\n%s", s3)
			}
		})
	}
}

// TestNodeStartsWithUpstreamsOverrideKeys: the overrides upstream accepts,
// its chart's examples among them, start the node plugin and land in the
// file their helper reads; a port range upper bound under efs-utils' 21049
// is raised, as upstream does.
func TestNodeStartsWithUpstreamsOverrideKeys(t *testing.T) {
	_, out, euDir := startEnv(t, []string{"PORT_RANGE_UPPER_BOUND=20449"}, func(sock string) []string {
		return []string{"--endpoint=unix:" + sock, "--mode=node",
			"--efs-utils-conf-overrides=mount:retry_nfs_mount_command_count=5,mount-watchdog:stunnel_health_check_enabled=false," +
				"mount-watchdog:stunnel_health_check_interval_min=1,mount-watchdog:tls_cert_renewal_interval_min=30," +
				"mount-watchdog:unmount_count_for_consistency=3,mount.eusc-de-east-1:dns_name_suffix=amazonaws.eu," +
				"mount.eusc-de-east-1:stunnel_cafile=/etc/ssl/certs/ca-certificates.crt",
			"--s3files-utils-conf-overrides=proxy:read_bypass_denylist_size=20000"}
	})
	for file, lines := range map[string][]string{
		"efs-utils.conf": {"retry_nfs_mount_command_count = 5", "stunnel_health_check_enabled = false",
			"stunnel_health_check_interval_min = 1", "tls_cert_renewal_interval_min = 30", "unmount_count_for_consistency = 3",
			"dns_name_suffix = amazonaws.eu", "stunnel_cafile = /etc/ssl/certs/ca-certificates.crt", "port_range_upper_bound = 21049"},
		"s3files-utils.conf": {"read_bypass_denylist_size = 20000", "port_range_upper_bound = 21049"},
	} {
		b, err := os.ReadFile(filepath.Join(euDir, file))
		if err != nil {
			t.Fatalf("%s: %v\n%s", file, err, out)
		}
		for _, l := range lines {
			if !strings.Contains(string(b), "\n"+l+"\n") {
				t.Errorf("%s lacks %q:\n%s", file, l, b)
			}
		}
	}
	if !strings.Contains(out.String(), "20449 raised to efs-utils' 21049") {
		t.Errorf("the raised port bound is not said:\n%s", out)
	}
}

// TestBadEFSUtilsOverrideIsAStartupError: an override naming a key its file
// does not have, or a value efs-utils cannot read (the watchdog would
// crash-loop, every mount fail), stops the driver, naming it.
func TestBadEFSUtilsOverrideIsAStartupError(t *testing.T) {
	for _, arg := range []string{
		"--efs-utils-conf-overrides=mount:no_such_key=1",
		"--efs-utils-conf-overrides=mount-watchdog:poll_interval_sec=0.02",
		"--efs-utils-conf-overrides=mount:stunnel_logs_file=/var/log/100%.log",
		"--s3files-utils-conf-overrides=proxy:read_bypass_denylist_size=lots",
	} {
		t.Run(arg, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "--endpoint=/tmp/x.sock", arg)
			cmd.Env = append(os.Environ(), beMainEnv+"=1", "AWS_REGION=us-east-1")
			out, err := cmd.CombinedOutput()
			_, entry, _ := strings.Cut(arg, "=")
			if err == nil || !strings.Contains(string(out), entry) {
				t.Fatalf("err %v, output:\n%s", err, out)
			}
		})
	}
}

func TestMetricsAddressAliasConflictIsAnError(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--endpoint=/tmp/x.sock", "--http-endpoint=127.0.0.1:1", "--metrics-address=127.0.0.1:2")
	cmd.Env = append(os.Environ(), beMainEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "both set") {
		t.Fatalf("err %v, output:\n%s", err, out)
	}
}

func TestMinutesFlag(t *testing.T) {
	for in, want := range map[string]time.Duration{"240": 4 * time.Hour, "0.5": 30 * time.Second, "90m": 90 * time.Minute} {
		var m minutes
		if err := m.Set(in); err != nil || time.Duration(m) != want {
			t.Errorf("Set(%q) = %v, %v; want %v", in, time.Duration(m), err, want)
		}
	}
	for _, bad := range []string{"0", "-1", "soon"} {
		var m minutes
		if m.Set(bad) == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
}

// TestVolumeAttachLimitNeedsItsOptIn: --volume-attach-limit reaches
// NodeGetInfo's MaxVolumesPerNode only with --volume-attach-limit-opt-in, as
// upstream (the chart passes the limit either way); without it the node
// reports no limit (0).
func TestVolumeAttachLimitNeedsItsOptIn(t *testing.T) {
	for _, tt := range []struct {
		optIn string
		want  int64
	}{{"false", 0}, {"true", 20}} {
		t.Run("opt-in="+tt.optIn, func(t *testing.T) {
			conn, out, _ := start(t, func(sock string) []string {
				return []string{"--endpoint=unix:" + sock, "--mode=node", "--volume-attach-limit-opt-in=" + tt.optIn, "--volume-attach-limit=20"}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ni, err := csi.NewNodeClient(conn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{}, grpc.WaitForReady(true))
			if err != nil || ni.MaxVolumesPerNode != tt.want {
				t.Fatalf("NodeGetInfo: %v, %v; want MaxVolumesPerNode %d\n%s", ni, err, tt.want, out)
			}
		})
	}
}
