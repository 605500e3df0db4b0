package emulator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/efs/types"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
)

// A One Zone file system (CreateFileSystem with AvailabilityZoneName) is
// described with its zone's name and ID, as EFS does, and a regional one
// with neither: the driver's enforceZoneAffinity reads exactly these fields
// through the SDK.
func TestOneZoneFileSystemIsDescribedWithItsZone(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	ctx := context.Background()
	cases := []struct {
		name         string
		zone         *string
		wantZoneName string
		wantZoneID   string
	}{
		{"One Zone", aws.String("us-east-1b"), "us-east-1b", "use1-az2"},
		{"regional", nil, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := v.efs.CreateFileSystem(ctx, &efs.CreateFileSystemInput{CreationToken: aws.String(token()), AvailabilityZoneName: c.zone})
			if err != nil {
				t.Fatalf("CreateFileSystem: %v", err)
			}
			check := func(how string, d types.FileSystemDescription) {
				t.Helper()
				if aws.ToString(d.AvailabilityZoneName) != c.wantZoneName || aws.ToString(d.AvailabilityZoneId) != c.wantZoneID {
					t.Errorf("%s: zone %q (ID %q), want %q (%q)", how, aws.ToString(d.AvailabilityZoneName), aws.ToString(d.AvailabilityZoneId), c.wantZoneName, c.wantZoneID)
				}
			}
			check("CreateFileSystem", types.FileSystemDescription{AvailabilityZoneName: out.AvailabilityZoneName, AvailabilityZoneId: out.AvailabilityZoneId})
			byID, err := v.efs.DescribeFileSystems(ctx, &efs.DescribeFileSystemsInput{FileSystemId: out.FileSystemId})
			if err != nil || len(byID.FileSystems) != 1 {
				t.Fatalf("DescribeFileSystems: %v %+v", err, byID)
			}
			check("DescribeFileSystems", byID.FileSystems[0])
		})
	}
}

// A One Zone file system has mount targets only in its zone: the first is
// made there, whatever the subnet stands for, and a second (another subnet,
// so another zone) is AvailabilityZonesMismatch, as EFS answers.
func TestOneZoneFileSystemHasMountTargetsOnlyInItsZone(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	ctx := context.Background()
	out, err := v.efs.CreateFileSystem(ctx, &efs.CreateFileSystemInput{CreationToken: aws.String(token()), AvailabilityZoneName: aws.String("us-east-1c")})
	if err != nil {
		t.Fatalf("CreateFileSystem: %v", err)
	}
	mt, err := v.efs.CreateMountTarget(ctx, &efs.CreateMountTargetInput{FileSystemId: out.FileSystemId, SubnetId: aws.String("subnet-0a")})
	if err != nil {
		t.Fatalf("CreateMountTarget: %v", err)
	}
	if aws.ToString(mt.AvailabilityZoneName) != "us-east-1c" || aws.ToString(mt.AvailabilityZoneId) != "use1-az3" {
		t.Errorf("mount target in %s (%s), want us-east-1c (use1-az3)", aws.ToString(mt.AvailabilityZoneName), aws.ToString(mt.AvailabilityZoneId))
	}
	_, err = v.efs.CreateMountTarget(ctx, &efs.CreateMountTargetInput{FileSystemId: out.FileSystemId, SubnetId: aws.String("subnet-0b")})
	asError[*types.AvailabilityZonesMismatch](t, err)
	list, err := v.efs.DescribeMountTargets(ctx, &efs.DescribeMountTargetsInput{FileSystemId: out.FileSystemId})
	if err != nil || len(list.MountTargets) != 1 {
		t.Fatalf("DescribeMountTargets: %v, %+v; want the one mount target", err, list)
	}
}

func TestCreateFileSystemRefusesAZoneOutsideTheRegion(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	for _, zone := range []string{"eu-west-1a", "us-east-1", "us-east-1z", "us-east-1aa"} {
		_, err := v.efs.CreateFileSystem(context.Background(), &efs.CreateFileSystemInput{CreationToken: aws.String(token()), AvailabilityZoneName: aws.String(zone)})
		wantCode(t, err, "BadRequest")
	}
}

// --one-zone-file-system's file systems (Config.OneZoneFileSystems) are
// created One Zone, with their loopback mount target in their zone, and
// keep that zone across restarts; naming another zone for one that exists
// is refused, since a file system's zone never changes.
func TestOneZoneFileSystemGivenAtStartKeepsItsZone(t *testing.T) {
	emulatorOnly(t)
	const fsID = "fs-0123456789abcdef1"
	dir := t.TempDir()
	cfg := emulator.Config{DataDir: dir, OneZoneFileSystems: map[string]string{fsID: "us-east-1d"}}
	for round := range 2 { // the second start finds it in the store
		v := newEnv(t, cfg)
		ctx := context.Background()
		fss, err := v.efs.DescribeFileSystems(ctx, &efs.DescribeFileSystemsInput{FileSystemId: aws.String(fsID)})
		if err != nil || len(fss.FileSystems) != 1 || aws.ToString(fss.FileSystems[0].AvailabilityZoneName) != "us-east-1d" {
			t.Fatalf("round %d: DescribeFileSystems: %v %+v, want %s in us-east-1d", round, err, fss, fsID)
		}
		mts, err := v.efs.DescribeMountTargets(ctx, &efs.DescribeMountTargetsInput{FileSystemId: aws.String(fsID)})
		if err != nil || len(mts.MountTargets) != 1 || aws.ToString(mts.MountTargets[0].AvailabilityZoneName) != "us-east-1d" {
			t.Fatalf("round %d: DescribeMountTargets: %v %+v, want one in us-east-1d", round, err, mts)
		}
		if err := v.emu.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, other := range []emulator.Config{
		{DataDir: dir, OneZoneFileSystems: map[string]string{fsID: "us-east-1a"}},
		{DataDir: dir, FileSystems: []string{fsID}},
	} {
		if emu, err := emulator.New(other); err == nil || !strings.Contains(err.Error(), "never changes") {
			if emu != nil {
				emu.Close()
			}
			t.Errorf("restart with %+v: %v, want the zone change refused", other, err)
		}
	}
}
