package driver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/mount"
	"github.com/efs-csi/efs-csi-driver/pkg/node"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// The provisioner retries UNAVAILABLE, ABORTED and deadline codes in the
// background and gives up on the others for that attempt, so each class of
// failure must land on the code that makes it do the right thing.
func TestErrorsMapToTheCodesTheProvisionerExpects(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("CreateAccessPoint: %w", efs.ErrThrottled), codes.Unavailable},
		{fmt.Errorf("CreateAccessPoint: %w", efs.ErrUnavailable), codes.Unavailable},
		{fmt.Errorf("CreateAccessPoint: %w: %w", efs.ErrUnavailable, context.DeadlineExceeded), codes.Unavailable},
		{fmt.Errorf("CreateAccessPoint: %w: %w", efs.ErrThrottled, context.DeadlineExceeded), codes.Unavailable},
		{fmt.Errorf("%w: %w", controller.ErrHandover, context.DeadlineExceeded), codes.Unavailable},
		{fmt.Errorf("lock: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{fmt.Errorf("x: %w", efs.ErrLimitExceeded), codes.ResourceExhausted},
		{fmt.Errorf("x: %w", gid.ErrExhausted), codes.ResourceExhausted},
		// The CSI spec's code for a volume that cannot be made where the requisite topology allows.
		{fmt.Errorf("x: %w", controller.ErrTopologyConflict), codes.ResourceExhausted},
		{fmt.Errorf("x: %w", efs.ErrAccessDenied), codes.Unauthenticated},
		{fmt.Errorf("gidRangeEnd: %w", volume.ErrInvalidParameter), codes.InvalidArgument},
		{fmt.Errorf("x: %w", volume.ErrInvalidID), codes.InvalidArgument},
		{fmt.Errorf("x: %w", keylock.ErrBusy), codes.Aborted},
		{fmt.Errorf("x: %w", node.ErrTooManyMounts), codes.Aborted},
		{fmt.Errorf("%w: %w", node.ErrMountFailed, &mount.NotRespondingError{Op: mount.OpStat, Path: "/t"}), codes.Unavailable},
		{fmt.Errorf("x: %w", controller.ErrIncompatible), codes.AlreadyExists},
		{fmt.Errorf("x: %w", controller.ErrNotYetVisible), codes.Unavailable},
		{fmt.Errorf("x: %w", controller.ErrUnsafeRootDir), codes.FailedPrecondition},
		{fmt.Errorf("x: %w", controller.ErrRootDirRemoval), codes.Internal},
		{&efs.AlreadyExistsError{AccessPointID: "fsap-1"}, codes.Internal},
		{errors.New("anything else"), codes.Internal},
		{status.Error(codes.OutOfRange, "kept"), codes.OutOfRange},
	} {
		if got := status.Code(toStatus(tc.err)); got != tc.want {
			t.Errorf("%v: code %s, want %s", tc.err, got, tc.want)
		}
	}
}

func TestParseRateLimits(t *testing.T) {
	got, err := ParseRateLimits("CreateAccessPoint=5:10, *=0")
	if err != nil || got["CreateAccessPoint"] != (efs.RateLimit{PerSecond: 5, Burst: 10}) || got["*"].PerSecond != 0 {
		t.Fatalf("got %v, %v", got, err)
	}
	// A mistyped operation would otherwise be a ceiling that never applies.
	for _, bad := range []string{"x", "=1", "CreateAccessPoint=-1", "CreateAccessPoint=1:0", "*=a", "CreateAccesPoint=5", "Bogus=1"} {
		if _, err := ParseRateLimits(bad); err == nil {
			t.Errorf("ParseRateLimits(%q) accepted", bad)
		}
	}
}

// A denial keeps upstream's code and words, and names the statement the
// controller's role lacks for the action AWS named; the ARNs go.
func TestDenialNamesTheStatementNeeded(t *testing.T) {
	for _, tc := range []struct{ action, want string }{
		{"elasticfilesystem:CreateAccessPoint", "AllowCreateAccessPoint"},
		{"elasticfilesystem:TagResource", "elasticfilesystem:CreateAction = CreateAccessPoint"},
		{"elasticfilesystem:DeleteAccessPoint", "AllowDeleteAccessPoint"},
		{"elasticfilesystem:DescribeMountTargets", "AllowDescribe"},
		{"s3files:CreateAccessPoint", "docs/iam/s3files.json"},
	} {
		err := fmt.Errorf("create: %w: User: arn:aws:sts::111122223333:assumed-role/r/s is not authorized to perform: %s on resource: arn:aws:elasticfilesystem:us-east-1:111122223333:file-system/fs-1",
			efs.ErrAccessDenied, tc.action)
		st, _ := status.FromError(toStatus(err))
		if st.Code() != codes.Unauthenticated || !strings.HasPrefix(st.Message(), "Access Denied. Please ensure you have the right AWS permissions: ") ||
			!strings.Contains(st.Message(), tc.want) || strings.Contains(st.Message(), "111122223333") {
			t.Errorf("%s: %v %q", tc.action, st.Code(), st.Message())
		}
	}
}
