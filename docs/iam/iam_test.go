package iam_test

import (
	"testing"

	shipped "github.com/efs-csi/efs-csi-driver/docs/iam"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/iam"
)

const fsARN = "arn:aws:elasticfilesystem:us-east-1:111122223333:file-system/fs-0123456789abcdef0"

func parse(t *testing.T, name, text string) *iam.Policy {
	t.Helper()
	p, err := iam.Parse([]byte(text))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}

// Every shipped policy is one IAM accepts as written (the emulator's parser
// refuses what IAM refuses: unknown elements, bad condition operators).
func TestEveryShippedPolicyParses(t *testing.T) {
	for name, text := range map[string]string{
		"controller.json": shipped.Controller, "s3files.json": shipped.S3Files,
		"cross-account.json": shipped.CrossAccount, "node.json": shipped.Node,
	} {
		parse(t, name, text)
	}
}

// The node role mounts, writes and acts as root only through a mount
// target (what efs-utils' iam mount option presents), and looks mount
// targets up; the controller's own policy grants no NFS client access.
// The emulator serves no NFS, so this evaluates the policy text alone; in
// AWS the file system's policy must also allow these actions.
func TestNodePolicyAllowsClientAccessOnlyThroughMountTargets(t *testing.T) {
	node := []*iam.Policy{parse(t, "node.json", shipped.Node)}
	controller := []*iam.Policy{parse(t, "controller.json", shipped.Controller)}
	viaMT := map[string][]string{"elasticfilesystem:AccessedViaMountTarget": {"true"}}
	for _, tc := range []struct {
		name     string
		policies []*iam.Policy
		req      iam.Request
		allowed  bool
	}{
		{"node mounts", node, iam.Request{Action: "elasticfilesystem:ClientMount", Resource: fsARN, Context: viaMT}, true},
		{"node writes", node, iam.Request{Action: "elasticfilesystem:ClientWrite", Resource: fsARN, Context: viaMT}, true},
		{"node as root", node, iam.Request{Action: "elasticfilesystem:ClientRootAccess", Resource: fsARN, Context: viaMT}, true},
		{"node looks up mount targets", node, iam.Request{Action: "elasticfilesystem:DescribeMountTargets", Resource: fsARN}, true},
		{"node looks up zones", node, iam.Request{Action: "ec2:DescribeAvailabilityZones", Resource: "*"}, true},
		{"node mounts not through a mount target", node, iam.Request{Action: "elasticfilesystem:ClientMount", Resource: fsARN}, false},
		{"node creates an access point", node, iam.Request{Action: "elasticfilesystem:CreateAccessPoint", Resource: fsARN}, false},
		{"controller mounts", controller, iam.Request{Action: "elasticfilesystem:ClientMount", Resource: fsARN, Context: viaMT}, false},
	} {
		if got := iam.Evaluate(tc.policies, tc.req).Allowed; got != tc.allowed {
			t.Errorf("%s: allowed %v, want %v", tc.name, got, tc.allowed)
		}
	}
}
