package driver

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
)

// DeleteVolume of an s3files: ID deletes its access point through the S3
// Files API (never EFS's); one on a file system the S3 Files API does not
// show is FAILED_PRECONDITION, the PV kept rather than its access point leaked.
func TestS3FilesVolumesAreDeletedThroughTheS3FilesAPI(t *testing.T) {
	socket, emu := startDriver(t, func(c *Config) { c.Mode = ModeController })
	ctl := csi.NewControllerClient(dial(t, socket))
	ctx := context.Background()
	capability := []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}}
	vol, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-s3", VolumeCapabilities: capability,
		Parameters: map[string]string{"provisioningMode": "s3files-ap", "fileSystemId": sanityS3FS, "directoryPerms": "700"}})
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	id := vol.GetVolume().GetVolumeId()
	if want := "s3files:" + sanityS3FS + "::fsap-"; len(id) <= len(want) || id[:len(want)] != want {
		t.Fatalf("volume ID %q, want %s...", id, want)
	}
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatalf("DeleteVolume: %v", err)
	}
	counts := emu.Counts()
	if counts[emulator.OpS3DeleteAccessPoint] != 1 || counts[emulator.OpDeleteAccessPoint] != 0 || counts[emulator.OpCreateAccessPoint] != 0 {
		t.Errorf("S3 Files deletes %d, EFS deletes %d, EFS creates %d; want 1, 0, 0",
			counts[emulator.OpS3DeleteAccessPoint], counts[emulator.OpDeleteAccessPoint], counts[emulator.OpCreateAccessPoint])
	}
	_, err = ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "s3files:" + sanityFS + "::fsap-0123456789abcdef0"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("delete on a file system S3 Files does not show: %v, want FAILED_PRECONDITION", err)
	}
}
