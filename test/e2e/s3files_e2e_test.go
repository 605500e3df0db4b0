//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3files"
)

// s3FileSystem is the emulator's S3 Files file system of the S3 Files scenario (S3
// Files IDs have 17 to 40 hex digits).
const s3FileSystem = "fs-0bbbbbbbbbbbbbbbb1"

// A claim of a class with provisioningMode s3files-ap: the controller provisions an S3
// Files access point through the S3 Files API (the emulator serves it beside EFS's), the
// PV's handle is s3files:fs-X::fsap-Y, and deleting the claim deletes the access point
// through the same API.
func TestS3FilesClaimIsProvisionedAndDeleted(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st := newControllerStack(ctx, t, s, "--s3files-file-system="+s3FileSystem, s.policy(s3FilesPolicy))
	st.addReplica(ctx, replicaSpec{bins: s.bins, deployment: st.deployment, leaderElection: true})
	accessPoints := s3FilesAccessPoints(ctx, st.endpoint)
	class := "efs-sc-s3files"
	newClass(ctx, t, s, class, map[string]string{"provisioningMode": "s3files-ap", "fileSystemId": s3FileSystem, "directoryPerms": "700"}, nil)
	ns := newNamespace(ctx, t, s, "e2e-s3files")
	pv := ns.boundClaim(ctx, t, "s3files", class, nil)
	if h := pv.Spec.CSI.VolumeHandle; !strings.HasPrefix(h, "s3files:"+s3FileSystem+"::fsap-") {
		t.Errorf("volume handle %s, want s3files:%s::fsap-...", h, s3FileSystem)
	}
	if n, err := accessPoints(); err != nil || n != 1 {
		t.Fatalf("S3 Files holds %d access points (%v), want 1", n, err)
	}
	ns.deleteAll(ctx, t)
	waitFor(ctx, t, "the S3 Files access point deleted", func() (bool, error) {
		n, err := accessPoints()
		return n == 0, err
	})
	waitNoLeaks(ctx, t, s, efsClient(st.endpoint))
	st.checkAlive()
}

// s3FilesAccessPoints counts, when called, the access points of the emulator's S3 Files
// file system (the read is under the emulator's policies, as the driver's are).
func s3FilesAccessPoints(ctx context.Context, endpoint string) func() (int, error) {
	s3 := s3files.New(s3files.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), Credentials: aws.AnonymousCredentials{}})
	return func() (int, error) {
		out, err := s3.ListAccessPoints(ctx, &s3files.ListAccessPointsInput{FileSystemId: aws.String(s3FileSystem)})
		if err != nil {
			return 0, err
		}
		return len(out.AccessPoints), nil
	}
}
