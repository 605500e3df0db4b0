package driver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	shippediam "github.com/efs-csi/efs-csi-driver/docs/iam"
	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/iam"
)

// policyFeatures drives the controller's every provisioning call through
// gRPC, the real SDK and the emulator enforcing policies: a volume made,
// made again (the provisioner's retry), listed, deleted and deleted again
// (its retry, once the access point is gone). It returns the first
// refusal, named by the feature it broke.
func policyFeatures(t *testing.T, policies []string, class map[string]string, mut func(*Config)) (feature string, err error) {
	t.Helper()
	socket, _, _ := startDriverOn(t, func(e *emulator.Config) { e.IAMPolicies = policies }, func(c *Config) {
		c.Mode = ModeController
		if mut != nil {
			mut(c)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctl := csi.NewControllerClient(dial(t, socket))
	req := &csi.CreateVolumeRequest{Name: "pvc-7c6b1e0a-2f3d-4c5b-8a9e-0d1c2b3a4f5e", Parameters: class,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		}}}
	resp, err := ctl.CreateVolume(ctx, req)
	if err != nil {
		return "create", err
	}
	if _, err := ctl.CreateVolume(ctx, req); err != nil {
		return "create again", err
	}
	list, err := ctl.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil {
		return "list", err
	}
	if len(list.Entries) != 1 {
		t.Errorf("ListVolumes: %d volumes, want the one made", len(list.Entries))
	}
	del := &csi.DeleteVolumeRequest{VolumeId: resp.Volume.VolumeId}
	if _, err := ctl.DeleteVolume(ctx, del); err != nil {
		return "delete", err
	}
	if _, err := ctl.DeleteVolume(ctx, del); err != nil {
		return "delete again", err
	}
	return "", nil
}

func efsClass() map[string]string {
	return map[string]string{"provisioningMode": "efs-ap", "fileSystemId": sanityFS, "directoryPerms": "700", "basePath": "/dynamic"}
}

// Every call the driver makes is allowed by the policy shipped for its
// flags: AWS's managed AmazonEFSCSIDriverPolicy with the default flags,
// upstream's example policy with --tags, docs/iam/controller.json alone
// with --descriptive-tags (for access points and S3 Files), and the managed
// policy with docs/iam/s3files.json for an S3 Files class.
func TestEveryCallIsAllowedUnderItsShippedPolicy(t *testing.T) {
	s3 := map[string]string{"provisioningMode": "s3files-ap", "fileSystemId": sanityS3FS, "directoryPerms": "700"}
	for _, tc := range []struct {
		name     string
		policies []string
		class    map[string]string
		mut      func(*Config)
	}{
		{"managed policy, default flags", []string{iam.ManagedPolicy}, efsClass(), nil},
		{"upstream's example policy, --tags", []string{iam.UpstreamExamplePolicy}, efsClass(), func(c *Config) { c.Tags = map[string]string{"team": "a"} }},
		{"controller.json, --descriptive-tags", []string{shippediam.Controller}, efsClass(), func(c *Config) { c.DescriptiveTags = true }},
		{"controller.json, an S3 Files class with --descriptive-tags", []string{shippediam.Controller}, s3, func(c *Config) { c.DescriptiveTags = true }},
		{"managed and s3files.json, an S3 Files class", []string{iam.ManagedPolicy, shippediam.S3Files}, s3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if feature, err := policyFeatures(t, tc.policies, tc.class, tc.mut); err != nil {
				t.Fatalf("%s: %v", feature, err)
			}
		})
	}
	// And what is not allowed is denied: the managed policy allows one tag key.
	for _, mut := range []func(*Config){
		func(c *Config) { c.DescriptiveTags = true },
		func(c *Config) { c.Tags = map[string]string{"team": "a"} },
	} {
		if feature, err := policyFeatures(t, []string{iam.ManagedPolicy}, efsClass(), mut); feature != "create" || status.Code(err) != codes.Unauthenticated {
			t.Errorf("extra tags under the managed policy: %s: %v, want create refused UNAUTHENTICATED", feature, err)
		}
	}
}

// Removing any one statement of the managed policy denies the feature it
// serves, with upstream's code and a message naming the statement.
func TestEachManagedStatementIsNeededAndNamed(t *testing.T) {
	var doc struct {
		Version   string
		Statement []map[string]any
	}
	if err := json.Unmarshal([]byte(iam.ManagedPolicy), &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{ // Sid: the feature it is first needed for
		"AllowDescribe":           "create",
		"AllowCreateAccessPoint":  "create",
		"AllowTagNewAccessPoints": "create",
		"AllowDeleteAccessPoint":  "delete",
	}
	for i, st := range doc.Statement {
		sid, _ := st["Sid"].(string)
		t.Run(sid, func(t *testing.T) {
			less := doc
			less.Statement = append(append([]map[string]any{}, doc.Statement[:i]...), doc.Statement[i+1:]...)
			b, err := json.Marshal(less)
			if err != nil {
				t.Fatal(err)
			}
			feature, err := policyFeatures(t, []string{string(b)}, efsClass(), nil)
			msg := status.Convert(err).Message()
			if feature != want[sid] || status.Code(err) != codes.Unauthenticated ||
				!strings.HasPrefix(msg, "Access Denied. Please ensure you have the right AWS permissions: ") || !strings.Contains(msg, sid) {
				t.Errorf("without %s: %s: %v; want %s refused UNAUTHENTICATED, naming %s", sid, feature, err, want[sid], sid)
			}
		})
	}
}
