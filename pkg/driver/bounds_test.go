package driver

import (
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Oversized fields are INVALID_ARGUMENT before any EFS call, whatever RPC
// carries them.
func TestOversizedRequestsAreInvalidBeforeAnyAPICall(t *testing.T) {
	socket, emu := startDriver(t)
	conn := dial(t, socket)
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	long := strings.Repeat("x", 129)
	bigMap := map[string]string{}
	for i := range 70 {
		bigMap[strings.Repeat("k", 60)+string(rune('A'+i))] = strings.Repeat("v", 60)
	}
	tests := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"CreateVolume name over 128 bytes", func(ctx context.Context) error {
			_, err := ctl.CreateVolume(ctx, createReq(long))
			return err
		}},
		{"CreateVolume parameters over 4 KiB", func(ctx context.Context) error {
			r := createReq("pvc-1")
			for k, v := range bigMap {
				r.Parameters[k] = v
			}
			_, err := ctl.CreateVolume(ctx, r)
			return err
		}},
		{"CreateVolume secrets over 4 KiB", func(ctx context.Context) error {
			r := createReq("pvc-1")
			r.Secrets = bigMap
			_, err := ctl.CreateVolume(ctx, r)
			return err
		}},
		{"DeleteVolume ID over 128 bytes", func(ctx context.Context) error {
			_, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "fs-0123456789abcdef0::fsap-" + long})
			return err
		}},
		{"NodePublishVolume target path over 4 KiB", func(ctx context.Context) error {
			_, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "fs-0123456789abcdef0",
				TargetPath: "/" + strings.Repeat("d/", 2100), VolumeCapability: createReq("x").VolumeCapabilities[0]})
			return err
		}},
		{"NodePublishVolume volume context over 4 KiB", func(ctx context.Context) error {
			_, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "fs-0123456789abcdef0",
				TargetPath: t.TempDir(), VolumeContext: bigMap, VolumeCapability: createReq("x").VolumeCapabilities[0]})
			return err
		}},
		{"mount flag over 128 bytes", func(ctx context.Context) error {
			r := createReq("pvc-1")
			r.VolumeCapabilities[0].GetMount().MountFlags = []string{long}
			_, err := ctl.CreateVolume(ctx, r)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			emu.ResetCounts()
			err := tt.call(context.Background())
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("err = %v, want InvalidArgument", err)
			}
			for op, n := range emu.Counts() {
				// The controller's EFS health check pings DescribeFileSystems
				// in the background, whatever the calls.
				if n > 0 && op != "DescribeFileSystems" {
					t.Errorf("%d %s calls reached EFS", n, op)
				}
			}
		})
	}
}

func TestStatusMessagesCarryNoAccountOrRole(t *testing.T) {
	raw := "CreateAccessPoint token pvc-1: access denied by EFS API: operation error EFS: CreateAccessPoint, https response error StatusCode: 403, RequestID: 1b2c3d4e-0000-1111-2222-333344445555, api error AccessDeniedException: User: arn:aws:sts::123456789012:assumed-role/efs-csi/i-0abc is not authorized to perform: elasticfilesystem:CreateAccessPoint on resource: arn:aws:elasticfilesystem:us-east-1:123456789012:file-system/fs-0123456789abcdef0 (account id 123456789012); capacity 107374182400 bytes"
	got := redact(raw)
	for _, secret := range []string{"123456789012", "assumed-role", "1b2c3d4e"} {
		if strings.Contains(got, secret) {
			t.Errorf("status message keeps %q: %s", secret, got)
		}
	}
	for _, kept := range []string{"access denied", "pvc-1", "107374182400"} {
		if !strings.Contains(got, kept) {
			t.Errorf("status message lost %q: %s", kept, got)
		}
	}
	if n := len(redact(strings.Repeat("e", 10000))); n > maxStatusMessage+3 {
		t.Errorf("status message of %d bytes", n)
	}
}
