package driver

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
)

// Upstream features this driver does not have yet are refused with
// FAILED_PRECONDITION, never ignored: a cross-account class acted on in this
// account would create in the wrong one, and a delete answered OK for a
// volume this driver cannot reach (another account's, an S3 Files one) drops
// the PV and leaks its access point.
func TestUnsupportedUpstreamFeaturesAreRefusedNotIgnored(t *testing.T) {
	socket, emu := startDriver(t, func(c *Config) { c.Mode = ModeController })
	ctl := csi.NewControllerClient(dial(t, socket))
	ctx := context.Background()
	capability := []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}}
	role := map[string]string{"awsRoleArn": "arn:aws:iam::123456789012:role/efs", "externalId": "ext-x"}
	calls := []struct {
		name string
		call func() error
	}{
		{"CreateVolume with a role in the provisioner secret", func() error {
			_, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-x", VolumeCapabilities: capability, Secrets: role,
				Parameters: map[string]string{"provisioningMode": "efs-ap", "fileSystemId": sanityFS}})
			return err
		}},
		{"DeleteVolume with a role in the provisioner secret", func() error {
			_, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: sanityFS + "::fsap-0123456789abcdef0", Secrets: role})
			return err
		}},
		{"DeleteVolume of an S3 Files volume", func() error {
			_, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "s3files:fs-0123456789abcdef0::fsap-0123456789abcdef0"})
			return err
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); status.Code(err) != codes.FailedPrecondition {
				t.Errorf("%v, want FAILED_PRECONDITION", err)
			}
		})
	}
	for op, n := range emu.Counts() {
		if n != 0 && op != emulator.OpDescribeFileSystems {
			t.Errorf("%d %s requests reached EFS", n, op)
		}
	}
}
