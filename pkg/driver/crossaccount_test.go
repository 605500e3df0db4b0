package driver

import (
	"context"
	"encoding/json"
	shippediam "github.com/efs-csi/efs-csi-driver/docs/iam"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

const (
	otherAccount = "210987654321"
	otherFS      = "fs-0aaaaaaaaaaaaaaa1"
	otherRole    = "arn:aws:iam::" + otherAccount + ":role/efs-csi"
)

// A class whose provisioner secret names another account's role, through
// gRPC, the real SDK and the emulator's STS and accounts: the volume is made
// and deleted as the role, in that account; without the secret, or with a
// wrong external ID, the other account's file system is refused and nothing
// is created or deleted. The emulator proves which credentials each call
// carried (another account's file system is AccessDenied to the
// controller's own).
func TestCrossAccountVolumeIsMadeAndDeletedAsTheRole(t *testing.T) {
	var url string
	socket, emu, _ := startDriverOn(t, func(e *emulator.Config) {
		e.FileSystemOwners = map[string]string{otherFS: otherAccount}
		e.Roles = []emulator.Role{{ARN: otherRole, ExternalID: "ext-1"}}
		e.IAMPolicies = append(e.IAMPolicies, shippediam.CrossAccount)
	}, func(c *Config) {
		c.Mode = ModeController
		url = c.EFS.Endpoint
		c.EFS.STSEndpoint = url
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	own, err := efs.New(ctx, efs.Config{Region: "us-east-1", Endpoint: url, STSEndpoint: url, RateLimits: unlimited})
	if err != nil {
		t.Fatal(err)
	}
	asRole, err := own.AsRole(otherRole, "ext-1")
	if err != nil {
		t.Fatal(err)
	}
	accessPoints := func() int {
		t.Helper()
		aps, err := efs.Collect(ctx, asRole.ListAccessPoints, otherFS)
		if err != nil {
			t.Fatal(err)
		}
		return len(aps)
	}
	ctl := csi.NewControllerClient(dial(t, socket))
	secret := map[string]string{"awsRoleArn": otherRole, "externalId": "ext-1"}
	req := func(name string, secrets map[string]string) *csi.CreateVolumeRequest {
		return &csi.CreateVolumeRequest{Name: name, Secrets: secrets, VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		}}, Parameters: map[string]string{"provisioningMode": "efs-ap", "fileSystemId": otherFS, "directoryPerms": "700"}}
	}

	for _, c := range []struct {
		name    string
		secrets map[string]string
		want    codes.Code
	}{
		{"no secret: the controller's own account may not", nil, codes.Unauthenticated},
		{"a wrong external ID: STS refuses", map[string]string{"awsRoleArn": otherRole, "externalId": "ext-2"}, codes.Unauthenticated},
		{"a role of no account's", map[string]string{"awsRoleArn": "arn:aws:iam::210987654321:role/nope"}, codes.Unauthenticated},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := ctl.CreateVolume(ctx, req("pvc-refused", c.secrets)); status.Code(err) != c.want {
				t.Errorf("CreateVolume: %v, want %v", err, c.want)
			}
		})
	}
	if n := accessPoints(); n != 0 {
		t.Fatalf("%d access points after refused creates", n)
	}

	roles := emu.Counts()[emulator.OpAssumeRole]
	var volID string
	for range 3 { // the provisioner's retries: one volume, one AssumeRole
		resp, err := ctl.CreateVolume(ctx, req("pvc-cross", secret))
		if err != nil {
			t.Fatalf("CreateVolume as the role: %v", err)
		}
		volID = resp.GetVolume().GetVolumeId()
		var m map[string]string
		if err := json.Unmarshal([]byte(resp.GetVolume().GetVolumeContext()["mounttargetipmap"]), &m); err != nil || len(m) != 1 || m["us-east-1a"] == "" {
			t.Errorf("volume context %v: want mounttargetipmap with the seeded mount target's zone", resp.GetVolume().GetVolumeContext())
		}
	}
	if n := accessPoints(); n != 1 {
		t.Fatalf("%d access points in the role's account, want 1", n)
	}
	if n := emu.Counts()[emulator.OpAssumeRole] - roles; n != 1 {
		t.Errorf("%d AssumeRole calls for one role's creates, want 1 (credentials cached)", n)
	}
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: volID}); status.Code(err) == codes.OK {
		t.Error("DeleteVolume without the secret answered OK")
	}
	if n := accessPoints(); n != 1 {
		t.Fatalf("a delete without the secret left %d access points, want 1", n)
	}
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: volID, Secrets: secret}); err != nil {
		t.Fatalf("DeleteVolume as the role: %v", err)
	}
	if n := accessPoints(); n != 0 {
		t.Fatalf("%d access points after the delete", n)
	}
}
