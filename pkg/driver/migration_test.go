package driver

import (
	"context"
	"errors"
	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/iam"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdk "github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/internal/upstreamtest"
)

// Migration from the upstream driver: access points provisioned as its
// controller makes them (its tokens, paths, tags and volume IDs) are
// published, unpublished and deleted by this driver, root-directory removal
// on; each delete removes its own volume's data and nothing else.
func TestVolumesUpstreamProvisionedArePublishedAndDeleted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("publishing needs bind mounts (root)")
	}
	var url string
	// Under upstream's example policy, which its users attached: upstream
	// tagged with --tags too.
	socket, emu, _ := startDriverOn(t, func(e *emulator.Config) { e.IAMPolicies = []string{iam.UpstreamExamplePolicy} },
		func(c *Config) { url = c.EFS.Endpoint })
	conn := dial(t, socket)
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	ctx := context.Background()
	fsDir := emu.FileSystemDir(sanityFS)
	// Released data beside the volumes: no delete may touch it.
	keep := filepath.Join(fsDir, "dynamic_provisioning", "team-a", "released", "data")
	mustWrite(t, keep, "kept")
	c := upstreamtest.Client(url)
	vols := upstreamtest.Volumes()
	ids := map[string]string{}
	for name, v := range vols {
		ids[name] = sanityFS + "::" + upstreamtest.Create(t, c, sanityFS, v)
		mustWrite(t, filepath.Join(fsDir, v.Path, "before"), name)
	}
	capability := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}
	for name, v := range vols {
		t.Run(name, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "mount")
			_, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: ids[name], TargetPath: target,
				VolumeCapability: capability,
				// What upstream's provisioner wrote into the PV.
				VolumeContext: map[string]string{"storage.kubernetes.io/csiProvisionerIdentity": "1700000000000-8081-efs.csi.aws.com"}})
			if err != nil {
				t.Fatalf("NodePublishVolume(%s): %v", ids[name], err)
			}
			if b, err := os.ReadFile(filepath.Join(target, "before")); err != nil || string(b) != name {
				t.Errorf("the volume's data through the mount: %q, %v", b, err)
			}
			mustWrite(t, filepath.Join(target, "after"), "written by a pod")
			if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: ids[name], TargetPath: target}); err != nil {
				t.Fatalf("NodeUnpublishVolume: %v", err)
			}
			// Upstream's PVs carry both ID forms; a retry finds it gone.
			for _, id := range []string{ids[name], "efs:" + ids[name]} {
				if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
					t.Fatalf("DeleteVolume(%s): %v", id, err)
				}
			}
			if _, err := os.Stat(filepath.Join(fsDir, v.Path)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("root directory %s after DeleteVolume: %v", v.Path, err)
			}
		})
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "kept" {
		t.Errorf("released data beside the volumes: %q, %v", b, err)
	}
	out, err := c.DescribeAccessPoints(ctx, &sdk.DescribeAccessPointsInput{FileSystemId: aws.String(sanityFS)})
	if err != nil || len(out.AccessPoints) != 0 {
		t.Errorf("access points left after deleting every volume: %d, %v", len(out.AccessPoints), err)
	}
}

func mustWrite(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
