package efs_test

import (
	"errors"
	"testing"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/iam"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// Under AWS's managed policy, which allows DeleteAccessPoint only on access
// points tagged efs.csi.aws.com/cluster, EFS answers a delete of one
// already gone AccessDenied (no tag to match): the client tells it from a
// real denial by one Describe, so a retried delete ends, and an access
// point the policy does not let it delete stays a denial.
func TestDeleteOfAGoneAccessPointUnderTheManagedPolicyIsNotFound(t *testing.T) {
	c, _, _ := startEmulator(t, emulator.Config{DataDir: t.TempDir(), IAMPolicies: []string{iam.ManagedPolicy}})
	ctx := t.Context()
	ap, err := c.CreateAccessPoint(ctx, emuInput("pvc-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteAccessPoint(ctx, ap.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteAccessPoint(ctx, ap.ID); !errors.Is(err, efs.ErrAccessPointNotFound) {
		t.Fatalf("delete of a gone access point: %v, want ErrAccessPointNotFound", err)
	}
	extra := emuInput("pvc-2")
	extra.Tags = map[string]string{"efs.csi.aws.com/cluster": "true", "team": "a"}
	if _, err := c.CreateAccessPoint(ctx, extra); !errors.Is(err, efs.ErrAccessDenied) {
		t.Fatalf("create with a second tag key: %v, want ErrAccessDenied", err)
	}
}
