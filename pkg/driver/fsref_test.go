package driver

import (
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

// A class may name its file system by a ConfigMap or Secret key instead of
// fileSystemId, as upstream's classes do: the controller reads it through the
// Kubernetes API at CreateVolume. Exactly one source; a reference that
// resolves to nothing usable is a clear error, made before any EFS call, and
// never repeats a Secret's value.
func TestFileSystemReferencesResolveThroughTheKubernetesAPI(t *testing.T) {
	k := kubetest.Start(t)
	k.SetObject("configmaps", "storage", "efs", map[string]string{"fs": sanityFS + "\n", "bad": "not-an-fs"})
	k.SetObject("secrets", "storage", "efs", map[string]string{"fs": sanityFS, "bad": "s3cr3t-value"})
	socket, emu := startDriver(t, func(c *Config) {
		c.Mode = ModeController
		c.ClusterID = "cluster-1"
		c.Kube = kube.Config{URL: k.URL, TokenFile: k.TokenFile("controller"), CAFile: k.CAFile}
	})
	ctl := csi.NewControllerClient(dial(t, socket))
	capability := []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}}
	cases := []struct {
		name   string
		params map[string]string
		code   codes.Code
		forbid string // resource the controller may not read
	}{
		{"ConfigMap reference (value with a trailing newline)", map[string]string{"fileSystemIdConfigRef": "storage/efs/fs"}, codes.OK, ""},
		{"Secret reference", map[string]string{"fileSystemIdSecretRef": "storage/efs/fs"}, codes.OK, ""},
		{"fileSystemId and a reference", map[string]string{"fileSystemId": sanityFS, "fileSystemIdConfigRef": "storage/efs/fs"}, codes.InvalidArgument, ""},
		{"both references", map[string]string{"fileSystemIdSecretRef": "storage/efs/fs", "fileSystemIdConfigRef": "storage/efs/fs"}, codes.InvalidArgument, ""},
		{"no source", map[string]string{}, codes.InvalidArgument, ""},
		{"not namespace/name/key", map[string]string{"fileSystemIdConfigRef": "storage/efs"}, codes.InvalidArgument, ""},
		{"path traversal in the name", map[string]string{"fileSystemIdConfigRef": "storage/../fs"}, codes.InvalidArgument, ""},
		{"missing ConfigMap", map[string]string{"fileSystemIdConfigRef": "storage/other/fs"}, codes.FailedPrecondition, ""},
		{"missing key", map[string]string{"fileSystemIdSecretRef": "storage/efs/nokey"}, codes.FailedPrecondition, ""},
		{"ConfigMap value that is no file system ID", map[string]string{"fileSystemIdConfigRef": "storage/efs/bad"}, codes.FailedPrecondition, ""},
		{"Secret value that is no file system ID", map[string]string{"fileSystemIdSecretRef": "storage/efs/bad"}, codes.FailedPrecondition, ""},
		{"Secrets not granted by RBAC", map[string]string{"fileSystemIdSecretRef": "storage/efs/fs"}, codes.FailedPrecondition, "secrets"},
	}
	created := 0
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.forbid != "" {
				k.Forbid(tc.forbid)
			}
			params := map[string]string{"provisioningMode": "efs-ap"}
			for k, v := range tc.params {
				params[k] = v
			}
			resp, err := ctl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
				Name: "pvc-ref-" + string(rune('a'+i)), Parameters: params, VolumeCapabilities: capability})
			if got := status.Code(err); got != tc.code {
				t.Fatalf("CreateVolume: %v, want %v", err, tc.code)
			}
			if err != nil {
				if strings.Contains(err.Error(), "s3cr3t") {
					t.Errorf("the error repeats the Secret's value: %v", err)
				}
				return
			}
			created++
			if id := resp.GetVolume().GetVolumeId(); !strings.Contains(id, sanityFS+"::fsap-") {
				t.Errorf("volume ID %q is not on the referenced file system %s", id, sanityFS)
			}
		})
	}
	if n := emu.Counts()[emulator.OpCreateAccessPoint]; n != int64(created) {
		t.Errorf("%d CreateAccessPoint requests for %d successful creates: a failed reference reached EFS", n, created)
	}
}
