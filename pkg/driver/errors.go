package driver

import (
	"context"
	"errors"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/mount"
	"github.com/efs-csi/efs-csi-driver/pkg/node"
	"github.com/efs-csi/efs-csi-driver/pkg/snapshot"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// codeTable is the one place where errors become gRPC codes. Order matters:
// the first sentinel an error wraps decides, so the specific ones come first.
// What the provisioner does with each code is in upstream-parity.md: it
// retries ABORTED, UNAVAILABLE, DEADLINE_EXCEEDED and CANCELLED in the
// background and treats the rest as final for that attempt.
var codeTable = []struct {
	err  error
	code codes.Code
}{
	// EFS throttling, client-side pacing, 5xx and timeouts, also when the call's deadline ended
	// the retries: UNAVAILABLE, which the provisioner retries.
	{efs.ErrThrottled, codes.Unavailable},
	{efs.ErrPaced, codes.Unavailable},
	{efs.ErrUnavailable, codes.Unavailable},
	// A mount point whose server does not answer (an earlier call is still
	// blocked on it): retry later.
	{mount.ErrNotResponding, codes.Unavailable},
	// A create that waited for the handover fence past its deadline: retry.
	{controller.ErrHandover, codes.Unavailable},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
	{keylock.ErrBusy, codes.Aborted},
	// Snapshots, restores and clones (pkg/snapshot): a copy that goes on
	// past the call's wait, or a snapshot not whole yet, is retried.
	{snapshot.ErrPending, codes.Aborted},
	{snapshot.ErrNotReady, codes.Aborted},
	{snapshot.ErrNotFound, codes.NotFound},
	{snapshot.ErrNameTaken, codes.AlreadyExists},
	{snapshot.ErrInUse, codes.FailedPrecondition},
	{snapshot.ErrNotEmpty, codes.FailedPrecondition},
	{snapshot.ErrOtherFileSystem, codes.InvalidArgument},
	{node.ErrTooManyMounts, codes.Aborted},
	{controller.ErrInvalidRequest, codes.InvalidArgument},
	{volume.ErrInvalidID, codes.InvalidArgument},
	{volume.ErrInvalidParameter, codes.InvalidArgument},
	{volume.ErrUnsafePath, codes.InvalidArgument},
	{controller.ErrIncompatible, codes.AlreadyExists},
	{controller.ErrInvalidStartingToken, codes.Aborted},
	{controller.ErrVolumeNotFound, codes.NotFound},
	{controller.ErrNotYetVisible, codes.Unavailable},
	{controller.ErrGIDContention, codes.Unavailable},
	{controller.ErrForeign, codes.FailedPrecondition},
	{journal.ErrUnavailable, codes.Unavailable},
	{journal.ErrDeleting, codes.Aborted},
	{journal.ErrPlacedElsewhere, codes.Aborted},
	{controller.ErrUnresolvedRef, codes.FailedPrecondition},
	{controller.ErrNotSupported, codes.FailedPrecondition},
	{controller.ErrUnimplemented, codes.Unimplemented},
	{controller.ErrNotReachable, codes.FailedPrecondition},
	{controller.ErrRefUnavailable, codes.Unavailable},
	{controller.ErrUnsafeRootDir, codes.FailedPrecondition},
	{controller.ErrRootDirRemoval, codes.Internal},
	{controller.ErrDirCreation, codes.Internal},
	{controller.ErrNoFileSystem, codes.ResourceExhausted},
	// The CSI spec's code for "unable to provision in accessible_topology".
	{controller.ErrTopologyConflict, codes.ResourceExhausted},
	{gid.ErrExhausted, codes.ResourceExhausted},
	{efs.ErrLimitExceeded, codes.ResourceExhausted},
	{efs.ErrAccessDenied, codes.Unauthenticated}, // as upstream: "Access Denied. ..."
	{efs.ErrFileSystemNotFound, codes.NotFound},
	{efs.ErrAccessPointNotFound, codes.NotFound},
	{efs.ErrBadRequest, codes.InvalidArgument},
	{efs.ErrIncorrectState, codes.FailedPrecondition},
	{node.ErrTargetConflict, codes.AlreadyExists},
	{node.ErrVolumeNotFound, codes.NotFound},
	{node.ErrMountFailed, codes.Internal},
}

// toStatus turns a service error into a gRPC status error. Errors that already
// carry a status keep it.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	msg := err.Error()
	if errors.Is(err, efs.ErrAccessDenied) {
		msg = deniedMessage(msg)
	}
	return status.Error(codeOf(err), redact(msg))
}

// deniedHints: for each action AWS names in a denial, the policy
// statement the controller's role needs (docs/iam.md).
var deniedHints = []struct{ action, need string }{
	{"elasticfilesystem:TagResource", "elasticfilesystem:TagResource with elasticfilesystem:CreateAction = CreateAccessPoint, for the tags sent on create (AmazonEFSCSIDriverPolicy's AllowTagNewAccessPoints allows the key efs.csi.aws.com/cluster alone; --descriptive-tags needs docs/iam/controller.json, --tags a statement allowing its keys)"},
	{"elasticfilesystem:CreateAccessPoint", "elasticfilesystem:CreateAccessPoint with the request tag efs.csi.aws.com/cluster (AmazonEFSCSIDriverPolicy's AllowCreateAccessPoint allows no other tag key; --descriptive-tags needs docs/iam/controller.json, --tags a statement allowing its keys)"},
	{"elasticfilesystem:DeleteAccessPoint", "elasticfilesystem:DeleteAccessPoint on access points tagged efs.csi.aws.com/cluster (AmazonEFSCSIDriverPolicy's AllowDeleteAccessPoint)"},
	{"elasticfilesystem:Describe", "elasticfilesystem:DescribeAccessPoints, DescribeFileSystems and DescribeMountTargets on * (AmazonEFSCSIDriverPolicy's AllowDescribe)"},
	{"s3files:", "the S3 Files statements of docs/iam/s3files.json"},
	{"sts:AssumeRole", "sts:AssumeRole on the role the StorageClass names, and that role's trust of the controller's role"},
}

// deniedMessage is upstream's message for a denial, with the statement
// the role needs for the action AWS named.
func deniedMessage(msg string) string {
	out := "Access Denied. Please ensure you have the right AWS permissions: " + msg
	for _, h := range deniedHints {
		if strings.Contains(msg, h.action) {
			return out + "; needed: " + h.need
		}
	}
	return out
}

// What a status message must not carry: the CO writes it into events that
// the claim's tenant reads. AWS errors name role ARNs and account IDs, and
// their raw bodies can be long.
var (
	arnRe       = regexp.MustCompile(`arn:aws[a-zA-Z-]*:[a-zA-Z0-9-]*:[a-z0-9-]*:[0-9]*:[^\s"',;)]*`)
	accountIDRe = regexp.MustCompile(`(?i)\b(account(?: ?id)?[ :=]+)[0-9]{12}\b`)
	requestIDRe = regexp.MustCompile(`(?i)request ?id: ?[0-9a-f-]+`)
)

// maxStatusMessage bounds a status message.
const maxStatusMessage = 1024

// redact strips role and resource ARNs, account IDs and AWS request IDs from
// a status message and bounds its length. The driver's log keeps the full
// error for the operator.
func redact(msg string) string {
	msg = arnRe.ReplaceAllString(msg, "arn:(redacted)")
	msg = accountIDRe.ReplaceAllString(msg, "${1}(redacted)")
	msg = requestIDRe.ReplaceAllString(msg, "RequestID: (redacted)")
	if len(msg) > maxStatusMessage {
		msg = strings.ToValidUTF8(msg[:maxStatusMessage], "") + "..."
	}
	return msg
}

func codeOf(err error) codes.Code {
	for _, e := range codeTable {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return codes.Internal
}
