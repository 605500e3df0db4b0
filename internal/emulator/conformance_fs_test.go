package emulator_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/efs/types"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
)

func TestCreateFileSystemIsIdempotentByCreationToken(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	ctx := context.Background()
	tok := token()
	out, err := v.efs.CreateFileSystem(ctx, &efs.CreateFileSystemInput{CreationToken: aws.String(tok),
		Tags: []types.Tag{{Key: aws.String("Name"), Value: aws.String("data")}}})
	if err != nil {
		t.Fatalf("CreateFileSystem: %v", err)
	}
	if out.LifeCycleState != types.LifeCycleStateAvailable || aws.ToString(out.Name) != "data" || aws.ToString(out.CreationToken) != tok {
		t.Errorf("CreateFileSystem answered state %s name %q token %q, want available, data, %s",
			out.LifeCycleState, aws.ToString(out.Name), aws.ToString(out.CreationToken), tok)
	}
	_, err = v.efs.CreateFileSystem(ctx, &efs.CreateFileSystemInput{CreationToken: aws.String(tok)})
	ae := asError[*types.FileSystemAlreadyExists](t, err)
	if aws.ToString(ae.FileSystemId) != *out.FileSystemId {
		t.Fatalf("FileSystemAlreadyExists carries %q, want %s", aws.ToString(ae.FileSystemId), *out.FileSystemId)
	}

	byToken, err := v.efs.DescribeFileSystems(ctx, &efs.DescribeFileSystemsInput{CreationToken: aws.String(tok)})
	if err != nil || len(byToken.FileSystems) != 1 || *byToken.FileSystems[0].FileSystemId != *out.FileSystemId {
		t.Fatalf("DescribeFileSystems by token: %v %+v, want just %s", err, byToken, *out.FileSystemId)
	}
	none, err := v.efs.DescribeFileSystems(ctx, &efs.DescribeFileSystemsInput{CreationToken: aws.String(token())})
	if err != nil || len(none.FileSystems) != 0 {
		t.Fatalf("DescribeFileSystems by an unused token: %v, %d file systems, want none", err, len(none.FileSystems))
	}
	byID, err := v.efs.DescribeFileSystems(ctx, &efs.DescribeFileSystemsInput{FileSystemId: out.FileSystemId})
	if err != nil || len(byID.FileSystems) != 1 || aws.ToString(byID.FileSystems[0].Name) != "data" {
		t.Fatalf("DescribeFileSystems by ID: %v %+v", err, byID)
	}
}

func TestDeleteFileSystemIsFileSystemInUseWhileAccessPointsOrMountTargetsExist(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	ctx := context.Background()
	fsID := v.fileSystem()
	ap := v.mustCreateAP(fsID)
	del := func() error {
		_, err := v.efs.DeleteFileSystem(ctx, &efs.DeleteFileSystemInput{FileSystemId: aws.String(fsID)})
		return err
	}
	asError[*types.FileSystemInUse](t, del())
	if _, err := v.efs.DeleteAccessPoint(ctx, &efs.DeleteAccessPointInput{AccessPointId: ap.AccessPointId}); err != nil {
		t.Fatalf("DeleteAccessPoint: %v", err)
	}
	mt, err := v.efs.CreateMountTarget(ctx, &efs.CreateMountTargetInput{FileSystemId: aws.String(fsID), SubnetId: aws.String("subnet-0a")})
	if err != nil {
		t.Fatalf("CreateMountTarget: %v", err)
	}
	asError[*types.FileSystemInUse](t, del())
	if _, err := v.efs.DeleteMountTarget(ctx, &efs.DeleteMountTargetInput{MountTargetId: mt.MountTargetId}); err != nil {
		t.Fatalf("DeleteMountTarget: %v", err)
	}
	if err := del(); err != nil {
		t.Fatalf("DeleteFileSystem of an empty file system: %v", err)
	}
	_, err = v.efs.DescribeFileSystems(ctx, &efs.DescribeFileSystemsInput{FileSystemId: aws.String(fsID)})
	asError[*types.FileSystemNotFound](t, err)
}

func TestFileSystemGivenAtStartHasALoopbackMountTarget(t *testing.T) {
	emulatorOnly(t)
	const fsID = "fs-0123456789abcdef0"
	v := newEnv(t, emulator.Config{FileSystems: []string{fsID}})
	out, err := v.efs.DescribeMountTargets(context.Background(), &efs.DescribeMountTargetsInput{FileSystemId: aws.String(fsID)})
	if err != nil {
		t.Fatalf("DescribeMountTargets: %v", err)
	}
	if len(out.MountTargets) != 1 {
		t.Fatalf("%d mount targets, want 1", len(out.MountTargets))
	}
	mt := out.MountTargets[0]
	if aws.ToString(mt.IpAddress) != "127.0.0.1" || aws.ToString(mt.AvailabilityZoneName) != "us-east-1a" ||
		mt.LifeCycleState != types.LifeCycleStateAvailable || !mountTargetIDRE.MatchString(aws.ToString(mt.MountTargetId)) {
		t.Fatalf("mount target %+v, want fsmt- ID, 127.0.0.1 in us-east-1a, available", mt)
	}
	if fi, err := os.Stat(v.emu.FileSystemDir(fsID)); err != nil || !fi.IsDir() {
		t.Fatalf("file system directory: %v", err)
	}
}

func TestMountTargetsOnePerZoneFoundByEveryID(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	ctx := context.Background()
	fsID := v.fileSystem()
	var made []string
	for _, subnet := range []string{"subnet-0a", "subnet-0b"} {
		mt, err := v.efs.CreateMountTarget(ctx, &efs.CreateMountTargetInput{FileSystemId: aws.String(fsID), SubnetId: aws.String(subnet)})
		if err != nil {
			t.Fatalf("CreateMountTarget: %v", err)
		}
		made = append(made, *mt.MountTargetId)
	}
	_, err := v.efs.CreateMountTarget(ctx, &efs.CreateMountTargetInput{FileSystemId: aws.String(fsID), SubnetId: aws.String("subnet-0a")})
	wantCode(t, err, "MountTargetConflict")

	list := func(in *efs.DescribeMountTargetsInput) []string {
		t.Helper()
		out, err := v.efs.DescribeMountTargets(ctx, in)
		if err != nil {
			t.Fatalf("DescribeMountTargets(%+v): %v", in, err)
		}
		var got []string
		zones := map[string]bool{}
		for _, mt := range out.MountTargets {
			got = append(got, *mt.MountTargetId)
			zones[aws.ToString(mt.AvailabilityZoneName)] = true
		}
		if len(zones) != len(got) {
			t.Fatalf("two mount targets share a zone: %+v", out.MountTargets)
		}
		return got
	}
	if got := list(&efs.DescribeMountTargetsInput{FileSystemId: aws.String(fsID)}); !slices.Equal(got, made) {
		t.Errorf("by file system: %v, want %v", got, made)
	}
	if got := list(&efs.DescribeMountTargetsInput{MountTargetId: aws.String(made[1])}); !slices.Equal(got, made[1:]) {
		t.Errorf("by mount target: %v, want %v", got, made[1:])
	}
	ap := v.mustCreateAP(fsID)
	if got := list(&efs.DescribeMountTargetsInput{AccessPointId: ap.AccessPointId}); !slices.Equal(got, made) {
		t.Errorf("by access point: %v, want %v", got, made)
	}
}

func TestTagsOnFileSystemsAndAccessPoints(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	ctx := context.Background()
	fsID := v.fileSystem()
	ap := v.mustCreateAP(fsID, withTags("Name", "old", "keep", "1"))
	tagsOf := func(id string, page int32) map[string]string {
		t.Helper()
		got := map[string]string{}
		p := efs.NewListTagsForResourcePaginator(v.efs, &efs.ListTagsForResourceInput{ResourceId: aws.String(id), MaxResults: aws.Int32(page)})
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				t.Fatalf("ListTagsForResource: %v", err)
			}
			for _, tg := range out.Tags {
				got[*tg.Key] = *tg.Value
			}
		}
		return got
	}
	for _, id := range []string{fsID, *ap.AccessPointId} {
		_, err := v.efs.TagResource(ctx, &efs.TagResourceInput{ResourceId: aws.String(id), Tags: []types.Tag{
			{Key: aws.String("Name"), Value: aws.String("new")}, {Key: aws.String("drop"), Value: aws.String("x")}}})
		if err != nil {
			t.Fatalf("TagResource %s: %v", id, err)
		}
		if _, err := v.efs.UntagResource(ctx, &efs.UntagResourceInput{ResourceId: aws.String(id), TagKeys: []string{"drop", "absent"}}); err != nil {
			t.Fatalf("UntagResource %s: %v", id, err)
		}
	}
	if got := tagsOf(*ap.AccessPointId, 1); len(got) != 2 || got["Name"] != "new" || got["keep"] != "1" {
		t.Errorf("access point tags %v, want Name=new keep=1", got)
	}
	if got := tagsOf(fsID, 100); len(got) != 1 || got["Name"] != "new" {
		t.Errorf("file system tags %v, want Name=new", got)
	}
	d, err := v.efs.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{AccessPointId: ap.AccessPointId})
	if err != nil || aws.ToString(d.AccessPoints[0].Name) != "new" {
		t.Fatalf("DescribeAccessPoints after retagging: %v, want Name new", err)
	}
	f, err := v.efs.DescribeFileSystems(ctx, &efs.DescribeFileSystemsInput{FileSystemId: aws.String(fsID)})
	if err != nil || aws.ToString(f.FileSystems[0].Name) != "new" {
		t.Fatalf("DescribeFileSystems after tagging: %v, want Name new", err)
	}

	t.Run("aws: prefix is BadRequest", func(t *testing.T) {
		_, err := v.efs.TagResource(ctx, &efs.TagResourceInput{ResourceId: ap.AccessPointId,
			Tags: []types.Tag{{Key: aws.String("aws:x"), Value: aws.String("1")}}})
		asError[*types.BadRequest](t, err)
	})
	t.Run("more than 50 tags in all is BadRequest", func(t *testing.T) {
		var tags []types.Tag
		for i := range 49 {
			tags = append(tags, types.Tag{Key: aws.String(fmt.Sprintf("k%d", i)), Value: aws.String("v")})
		}
		_, err := v.efs.TagResource(ctx, &efs.TagResourceInput{ResourceId: ap.AccessPointId, Tags: tags})
		asError[*types.BadRequest](t, err)
	})
}

// The root directory appears in DataDir/<fs-id> as EFS would create it on
// first mount: parents 0755, the leaf with CreationInfo's owner and mode.
func TestCreateAccessPointMakesTheRootDirectory(t *testing.T) {
	emulatorOnly(t)
	v := newEnv(t, emulator.Config{})
	fsID := v.fileSystem()
	dir := v.emu.FileSystemDir(fsID)
	stat := func(p string) (os.FileMode, uint32, uint32) {
		t.Helper()
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		return fi.Mode(), st.Uid, st.Gid
	}

	v.mustCreateAP(fsID, withPath("/base/team/pvc-1"), withCreationInfo(1234, 5678, "750"))
	for _, parent := range []string{"base", "base/team"} {
		if mode, uid, _ := stat(parent); mode.Perm() != 0o755 || uid != uint32(os.Geteuid()) {
			t.Errorf("parent %s: mode %v uid %d, want 0755 owned by the emulator's user", parent, mode, uid)
		}
	}
	if os.Geteuid() == 0 {
		if mode, uid, gid := stat("base/team/pvc-1"); mode.Perm() != 0o750 || uid != 1234 || gid != 5678 {
			t.Errorf("root directory: mode %v owner %d:%d, want 0750 1234:5678", mode, uid, gid)
		}
	}

	v.mustCreateAP(fsID, withPath("/sticky"), withCreationInfo(0, 0, "1777"))
	if mode, _, _ := stat("sticky"); mode&os.ModeSticky == 0 || mode.Perm() != 0o777 {
		t.Errorf("4-digit permissions 1777 gave mode %v", mode)
	}

	// An existing directory keeps its owner and mode, as on EFS.
	if err := os.Mkdir(filepath.Join(dir, "existing"), 0o711); err != nil {
		t.Fatal(err)
	}
	v.mustCreateAP(fsID, withPath("/existing"), withCreationInfo(1, 1, "777"))
	if mode, uid, _ := stat("existing"); mode.Perm() != 0o711 || uid != uint32(os.Geteuid()) {
		t.Errorf("existing directory changed to mode %v uid %d", mode, uid)
	}

	// Without CreationInfo nothing is created (a mount would fail on EFS).
	v.mustCreateAP(fsID, withPath("/never"))
	if _, err := os.Stat(filepath.Join(dir, "never")); !os.IsNotExist(err) {
		t.Errorf("root directory without CreationInfo: stat says %v, want not exist", err)
	}
}

func TestDeleteAccessPointLeavesItsData(t *testing.T) {
	emulatorOnly(t)
	v := newEnv(t, emulator.Config{})
	fsID := v.fileSystem()
	ap := v.mustCreateAP(fsID, withPath("/data"), withCreationInfo(0, 0, "700"))
	file := filepath.Join(v.emu.FileSystemDir(fsID), "data", "file")
	if err := os.WriteFile(file, []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := v.efs.DeleteAccessPoint(context.Background(), &efs.DeleteAccessPointInput{AccessPointId: ap.AccessPointId}); err != nil {
		t.Fatalf("DeleteAccessPoint: %v", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "kept" {
		t.Fatalf("data after delete: %q, %v", b, err)
	}
}

// A symbolic link planted inside the file system must not lead the
// emulator out of it; the access point is still created (EFS does not
// touch the directory at creation), only the directory is not.
func TestRootDirectoryNeverLeavesTheFileSystem(t *testing.T) {
	emulatorOnly(t)
	v := newEnv(t, emulator.Config{})
	fsID := v.fileSystem()
	outside := t.TempDir()
	fsDir := v.emu.FileSystemDir(fsID)
	if err := os.Symlink(outside, filepath.Join(fsDir, "abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../"+filepath.Base(outside), filepath.Join(fsDir, "rel")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/abs/x", "/rel/x", "/abs", "/rel/a/b/c"} {
		v.mustCreateAP(fsID, withPath(p), withCreationInfo(0, 0, "777"))
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("the emulator created %v outside the file system", entries)
	}
}
