package emulator_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/efs/types"
	"github.com/aws/aws-sdk-go-v2/service/s3files"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3files/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/iam"
	"github.com/efs-csi/efs-csi-driver/internal/testutil"
)

// IAM policies (docs/emulator.md, "IAM policies"): the emulator run under
// the policies users attach to the driver's role, through the real SDK.

const (
	iamFS      = "fs-0123456789abcdef0"
	iamS3FS    = "fs-0123456789abcdef0123"
	clusterTag = "efs.csi.aws.com/cluster"
	rootARN    = "arn:aws:iam::123456789012:root"
	iamFSARN   = "arn:aws:elasticfilesystem:us-east-1:123456789012:file-system/" + iamFS
)

// iamEnv serves an emulator under policies, on a data directory seed
// prepared first through an emulator without any (what policies would deny).
func iamEnv(t *testing.T, seed func(c *efs.Client), policies ...string) (*efs.Client, *s3files.Client, *testutil.Buffer) {
	t.Helper()
	emulatorOnly(t)
	cfg := emulator.Config{DataDir: t.TempDir(), FileSystems: []string{iamFS}, S3FilesFileSystems: []string{iamS3FS}}
	if seed != nil {
		url, emu := emulatortest.Start(t, cfg)
		seed(newClient(url, 1))
		if err := emu.Close(); err != nil {
			t.Fatal(err)
		}
	}
	log := &testutil.Buffer{}
	cfg.IAMPolicies, cfg.Logger = policies, slog.New(slog.NewTextHandler(log, nil))
	url, _ := emulatortest.Start(t, cfg)
	return newClient(url, 1), newS3Client(url), log
}

func efsTags(kv ...string) []types.Tag {
	var out []types.Tag
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, types.Tag{Key: aws.String(kv[i]), Value: aws.String(kv[i+1])})
	}
	return out
}

func createTagged(c *efs.Client, kv ...string) (*efs.CreateAccessPointOutput, error) {
	return c.CreateAccessPoint(context.Background(), &efs.CreateAccessPointInput{
		FileSystemId: aws.String(iamFS), ClientToken: aws.String(token()), Tags: efsTags(kv...)})
}

// wantDenied: AccessDeniedException 403, worded as AWS's.
func wantDenied(t *testing.T, err error, code, action, resource string, explicit bool) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != code || httpStatus(err) != 403 {
		t.Fatalf("error %v (status %d), want %s 403", err, httpStatus(err), code)
	}
	why := "because no identity-based policy allows the " + action + " action"
	if explicit {
		why = "with an explicit deny in an identity-based policy"
	}
	want := fmt.Sprintf("User: %s is not authorized to perform: %s on resource: %s %s", rootARN, action, resource, why)
	if ae.ErrorMessage() != want {
		t.Fatalf("message %q\nwant    %q", ae.ErrorMessage(), want)
	}
}

func TestIAMManagedPolicyCreatesOnlyWithTheClusterTag(t *testing.T) {
	c, _, log := iamEnv(t, nil, iam.ManagedPolicy)
	ctx := context.Background()
	if _, err := createTagged(c, clusterTag, "true"); err != nil {
		t.Fatalf("create with only the cluster tag: %v", err)
	}
	_, err := createTagged(c, clusterTag, "true", "team", "a")
	wantDenied(t, err, "AccessDeniedException", "elasticfilesystem:CreateAccessPoint", iamFSARN, false)
	_, err = createTagged(c)
	wantDenied(t, err, "AccessDeniedException", "elasticfilesystem:CreateAccessPoint", iamFSARN, false)

	aps, err := c.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{FileSystemId: aws.String(iamFS)})
	if err != nil || len(aps.AccessPoints) != 1 {
		t.Fatalf("DescribeAccessPoints: %v %+v, want the one allowed create only (denied ones not applied)", err, aps)
	}
	if !strings.Contains(log.String(), "deniedAction=elasticfilesystem:CreateAccessPoint") {
		t.Errorf("no request log line names the denied action:\n%s", log)
	}
}

func TestIAMManagedPolicyDeletesOnlyTaggedAccessPoints(t *testing.T) {
	var tagged, untagged string
	c, _, _ := iamEnv(t, func(c *efs.Client) {
		a, err := createTagged(c, clusterTag, "true")
		b, err2 := createTagged(c)
		if err = errors.Join(err, err2); err != nil {
			t.Fatal(err)
		}
		tagged, untagged = *a.AccessPointId, *b.AccessPointId
	}, iam.ManagedPolicy)
	ctx := context.Background()
	_, err := c.DeleteAccessPoint(ctx, &efs.DeleteAccessPointInput{AccessPointId: aws.String(untagged)})
	wantDenied(t, err, "AccessDeniedException", "elasticfilesystem:DeleteAccessPoint",
		"arn:aws:elasticfilesystem:us-east-1:123456789012:access-point/"+untagged, false)
	if _, err := c.DeleteAccessPoint(ctx, &efs.DeleteAccessPointInput{AccessPointId: aws.String(tagged)}); err != nil {
		t.Fatalf("delete of a tagged access point: %v", err)
	}
	// Later tagging is not tag-on-create: denied, so an untagged access
	// point cannot be made deletable.
	_, err = c.TagResource(ctx, &efs.TagResourceInput{ResourceId: aws.String(untagged), Tags: efsTags(clusterTag, "true")})
	wantDenied(t, err, "AccessDeniedException", "elasticfilesystem:TagResource",
		"arn:aws:elasticfilesystem:us-east-1:123456789012:access-point/"+untagged, false)
}

func TestIAMManagedPolicyAllowsDescribesOnly(t *testing.T) {
	c, _, _ := iamEnv(t, nil, iam.ManagedPolicy)
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"DescribeFileSystems": func() error {
			_, err := c.DescribeFileSystems(ctx, &efs.DescribeFileSystemsInput{})
			return err
		},
		"DescribeFileSystems of one": func() error {
			_, err := c.DescribeFileSystems(ctx, &efs.DescribeFileSystemsInput{FileSystemId: aws.String(iamFS)})
			return err
		},
		"DescribeMountTargets": func() error {
			_, err := c.DescribeMountTargets(ctx, &efs.DescribeMountTargetsInput{FileSystemId: aws.String(iamFS)})
			return err
		},
		"DescribeAccessPoints": func() error {
			_, err := c.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{FileSystemId: aws.String(iamFS)})
			return err
		},
	} {
		if err := call(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	_, err := c.DeleteFileSystem(ctx, &efs.DeleteFileSystemInput{FileSystemId: aws.String(iamFS)})
	wantDenied(t, err, "AccessDeniedException", "elasticfilesystem:DeleteFileSystem", iamFSARN, false)
	_, err = c.ListTagsForResource(ctx, &efs.ListTagsForResourceInput{ResourceId: aws.String(iamFS)})
	wantDenied(t, err, "AccessDeniedException", "elasticfilesystem:ListTagsForResource", iamFSARN, false)
	_, err = c.CreateFileSystem(ctx, &efs.CreateFileSystemInput{CreationToken: aws.String(token())})
	wantDenied(t, err, "AccessDeniedException", "elasticfilesystem:CreateFileSystem",
		"arn:aws:elasticfilesystem:us-east-1:123456789012:file-system/*", false)
}

// Upstream's example policy allows any tag keys with cluster=true: its
// TagResource statement conditions on aws:ResourceTag, which during
// tag-on-create is the tags being applied.
func TestIAMUpstreamExamplePolicyAllowsExtraTagKeys(t *testing.T) {
	c, s3, _ := iamEnv(t, nil, iam.UpstreamExamplePolicy)
	ctx := context.Background()
	ap, err := createTagged(c, clusterTag, "true", "team", "a", "owner", "b")
	if err != nil {
		t.Fatalf("create with the cluster tag and extra keys: %v", err)
	}
	_, err = createTagged(c, clusterTag, "false", "team", "a")
	wantDenied(t, err, "AccessDeniedException", "elasticfilesystem:CreateAccessPoint", iamFSARN, false)
	if _, err := c.DeleteAccessPoint(ctx, &efs.DeleteAccessPointInput{AccessPointId: ap.AccessPointId}); err != nil {
		t.Fatalf("delete: %v", err)
	}

	// S3 Files: the same, as s3files:* actions, errors in its shape.
	s3ap, err := s3.CreateAccessPoint(ctx, &s3files.CreateAccessPointInput{FileSystemId: aws.String(iamS3FS),
		Tags: []s3types.Tag{{Key: aws.String(clusterTag), Value: aws.String("true")}, {Key: aws.String("team"), Value: aws.String("a")}}})
	if err != nil {
		t.Fatalf("S3 Files create: %v", err)
	}
	_, err = s3.GetAccessPoint(ctx, &s3files.GetAccessPointInput{AccessPointId: s3ap.AccessPointId})
	wantDenied(t, err, "AccessDeniedException", "s3files:GetAccessPoint",
		"arn:aws:s3files:us-east-1:123456789012:file-system/"+iamS3FS+"/access-point/"+*s3ap.AccessPointId, false)
	if _, err := s3.DeleteAccessPoint(ctx, &s3files.DeleteAccessPointInput{AccessPointId: s3ap.AccessPointId}); err != nil {
		t.Fatalf("S3 Files delete: %v", err)
	}
	_, err = s3.CreateAccessPoint(ctx, &s3files.CreateAccessPointInput{FileSystemId: aws.String(iamS3FS)})
	wantDenied(t, err, "AccessDeniedException", "s3files:CreateAccessPoint",
		"arn:aws:s3files:us-east-1:123456789012:file-system/"+iamS3FS, false)
}

// The managed policy allows no TagResource but tag-on-create: the create
// passes the first evaluation and fails the second.
func TestIAMTagOnCreateIsAuthorizedAsTagResource(t *testing.T) {
	onlyCreate := `{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"elasticfilesystem:CreateAccessPoint","Resource":"*"}}`
	c, _, _ := iamEnv(t, nil, onlyCreate)
	if _, err := createTagged(c); err != nil {
		t.Fatalf("untagged create needs no TagResource: %v", err)
	}
	_, err := createTagged(c, clusterTag, "true")
	wantDenied(t, err, "AccessDeniedException", "elasticfilesystem:TagResource", iamFSARN, false)
}

func TestIAMExplicitDenyInASecondPolicyWins(t *testing.T) {
	var tagged string
	deny := `{"Version":"2012-10-17","Statement":[{"Sid":"NoDeletes","Effect":"Deny","Action":"elasticfilesystem:Delete*","Resource":"*"}]}`
	c, _, _ := iamEnv(t, func(c *efs.Client) {
		a, err := createTagged(c, clusterTag, "true")
		if err != nil {
			t.Fatal(err)
		}
		tagged = *a.AccessPointId
	}, iam.ManagedPolicy, deny)
	_, err := c.DeleteAccessPoint(context.Background(), &efs.DeleteAccessPointInput{AccessPointId: aws.String(tagged)})
	wantDenied(t, err, "AccessDeniedException", "elasticfilesystem:DeleteAccessPoint",
		"arn:aws:elasticfilesystem:us-east-1:123456789012:access-point/"+tagged, true)
	if _, err := createTagged(c, clusterTag, "true"); err != nil {
		t.Fatalf("create, which the deny does not name: %v", err)
	}
}

func TestIAMEvaluatesAssumeRole(t *testing.T) {
	emulatorOnly(t)
	const role = "arn:aws:iam::210987654321:role/efs-csi"
	allowed := `{"Statement":{"Effect":"Allow","Action":"sts:AssumeRole","Resource":"` + role + `"}}`
	for _, tc := range []struct {
		name     string
		policies []string
		denied   bool
	}{
		{"allowed on the role", []string{allowed}, false},
		{"not allowed", []string{iam.ManagedPolicy}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, _ := emulatortest.Start(t, emulator.Config{Roles: []emulator.Role{{ARN: role}}, IAMPolicies: tc.policies})
			_, err := stsClient(url, testCredentials).AssumeRole(t.Context(),
				&sts.AssumeRoleInput{RoleArn: aws.String(role), RoleSessionName: aws.String("session")})
			if !tc.denied {
				if err != nil {
					t.Fatalf("AssumeRole: %v", err)
				}
				return
			}
			var ae smithy.APIError
			if !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied" || httpStatus(err) != 403 ||
				!strings.Contains(ae.ErrorMessage(), "sts:AssumeRole on resource: "+role+" because no identity-based policy allows") {
				t.Fatalf("AssumeRole: %v, want STS AccessDenied 403 naming sts:AssumeRole", err)
			}
		})
	}
}

func TestIAMMalformedPolicyIsAnErrorAtStart(t *testing.T) {
	_, err := emulator.New(emulator.Config{DataDir: t.TempDir(),
		IAMPolicies: []string{iam.ManagedPolicy, `{"Statement":{"Effect":"Permit","Action":"*","Resource":"*"}}`}})
	if !errors.Is(err, iam.ErrInvalidPolicy) || !strings.Contains(err.Error(), "IAM policy 2") || !strings.Contains(err.Error(), `Effect "Permit"`) {
		t.Fatalf("New: %v, want an invalid policy error naming policy 2 and its Effect", err)
	}
}
