package driver

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
)

func dial(t testing.TB, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func createReq(name string) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{
		Name:       name,
		Parameters: map[string]string{"provisioningMode": "efs-ap", "fileSystemId": sanityFS, "directoryPerms": "700"},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		}},
	}
}

// On SIGTERM the driver stops taking calls, lets the call in flight finish,
// and only then returns.
func TestShutdownLetsCallsInFlightFinish(t *testing.T) {
	socket, emu, stop := startDriverStop(t)
	arrived, release := make(chan struct{}), make(chan struct{})
	emu.SetHook(func(op emulator.Op, phase emulator.Phase, _ any) {
		if op == "CreateAccessPoint" && phase == emulator.BeforeApply {
			close(arrived)
			<-release
		}
	})
	ctl := csi.NewControllerClient(dial(t, socket))
	inflight := make(chan error, 1)
	go func() {
		_, err := ctl.CreateVolume(context.Background(), createReq("pvc-inflight"))
		inflight <- err
	}()
	<-arrived
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()

	// New connections are refused once the listener is closed.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", socket)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the socket still accepts connections after SIGTERM")
		}
		time.Sleep(10 * time.Millisecond) // polling an external state change, not ordering our own events
	}
	select {
	case err := <-stopped:
		t.Fatalf("driver stopped with a call in flight: %v", err)
	default:
	}
	emu.SetHook(nil)
	close(release)
	if err := <-inflight; err != nil {
		t.Fatalf("call in flight: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// The metrics endpoint counts RPCs by method and code, shows the gauges the
// stress audit reads back at zero at rest, and the upstream driver's API
// metrics under their names.
func TestMetricsCountRPCsAndRestAtZero(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	socket, _ := startDriver(t, func(c *Config) { c.MetricsAddress = addr })
	ctl := csi.NewControllerClient(dial(t, socket))
	for range 2 {
		if _, err := ctl.CreateVolume(context.Background(), createReq("pvc-m")); err != nil {
			t.Fatal(err)
		}
	}
	// An answered error, for the upstream driver's errors counter.
	if _, err := ctl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: sanityFS + "::fsap-0123456789abcdef0"}); err != nil {
		t.Fatal(err)
	}
	// An S3 Files volume: its requests are service="s3files", under the S3
	// Files API's own operation names.
	s3req := createReq("pvc-m-s3")
	s3req.Parameters = map[string]string{"provisioningMode": "s3files-ap", "fileSystemId": sanityS3FS, "directoryPerms": "700"}
	if _, err := ctl.CreateVolume(context.Background(), s3req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", addr))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`efs_csi_rpc_total{code="OK",method="CreateVolume"} 3`,
		`efs_csi_operations_in_flight 0`,
		`efs_csi_locks_held 0`,
		`efs_csi_api_calls_total{operation="CreateAccessPoint",outcome="ok"} 1`,
		`efs_csi_gid_allocator{file_system="` + sanityFS + `",state="used"} 1`,
		`efs_csi_root_dirs_kept_total{reason="shared"} 0`,
		`efs_csi_pending_unmounts 0`,
		// The upstream driver's names and labels: its dashboards and alerts.
		`aws_efs_csi_api_request_duration_seconds_count{request="CreateAccessPoint",service="efs"} 1`,
		`aws_efs_csi_api_request_duration_seconds_count{request="CreateAccessPoint",service="s3files"} 1`,
		`aws_efs_csi_api_request_duration_seconds_count{request="ListFileSystems",service="s3files"} 0`,
		`aws_efs_csi_api_request_errors_total{code="AccessPointNotFound",request="DescribeAccessPoints",service="efs"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(string(body), `request="S3Files.`) {
		t.Errorf("an S3 Files request is labelled with efs's operation prefix")
	}
}
