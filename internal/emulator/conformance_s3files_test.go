package emulator_test

// The S3 Files half of the conformance suite, and the cases both APIs share,
// table-driven over the two: each runs once through the EFS SDK and once
// through the S3 Files SDK (service/s3files), against one emulator.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	efstypes "github.com/aws/aws-sdk-go-v2/service/efs/types"
	"github.com/aws/aws-sdk-go-v2/service/s3files"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3files/types"
	"github.com/aws/smithy-go"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
)

// apSpec is an access point to create, in API-neutral terms.
type apSpec struct {
	token    string
	path     string
	ci       *[3]any // uid, gid, permissions
	uid, gid int64
	sgids    []int64
	posix    bool
	tags     [][2]string
}

// apView is what an API answers about an access point.
type apView struct {
	ID, FS, Token, Path, Perm string
	OwnerUID, OwnerGID        int64
	UID, GID                  int64
	Tags                      map[string]string
}

// apiDriver is one API through its own SDK, with the codes it answers.
type apiDriver struct {
	name string
	// op names the operations as the emulator counts them.
	opCreate, opDelete emulator.Op
	// codes: bad input, access point not found, file system not found,
	// over the limit, throttled, internal.
	badRequest, notFound, fsNotFound, limit, throttled, internal string
	fileSystem                                                   func(t *testing.T) string
	create                                                       func(fsID string, s apSpec) (string, error)
	get                                                          func(id string) (apView, error)
	list                                                         func(fsID string, pageSize int32) ([]string, error)
	del                                                          func(id string) error
	tag                                                          func(id, k, v string) error
}

func efsDriver(url string) apiDriver {
	c := newClient(url, 1)
	ctx := context.Background()
	return apiDriver{
		name: "EFS", opCreate: emulator.OpCreateAccessPoint, opDelete: emulator.OpDeleteAccessPoint,
		badRequest: "BadRequest", notFound: "AccessPointNotFound", fsNotFound: "FileSystemNotFound", limit: "AccessPointLimitExceeded",
		throttled: "ThrottlingException", internal: "InternalServerError",
		fileSystem: func(t *testing.T) string {
			out, err := c.CreateFileSystem(ctx, &efs.CreateFileSystemInput{CreationToken: aws.String(token())})
			if err != nil {
				t.Fatalf("CreateFileSystem: %v", err)
			}
			return *out.FileSystemId
		},
		create: func(fsID string, s apSpec) (string, error) {
			in := &efs.CreateAccessPointInput{FileSystemId: aws.String(fsID), ClientToken: aws.String(s.token)}
			if s.path != "" || s.ci != nil {
				in.RootDirectory = &efstypes.RootDirectory{Path: aws.String(cmpOr(s.path, "/"))}
				if s.ci != nil {
					in.RootDirectory.CreationInfo = &efstypes.CreationInfo{OwnerUid: aws.Int64(s.ci[0].(int64)),
						OwnerGid: aws.Int64(s.ci[1].(int64)), Permissions: aws.String(s.ci[2].(string))}
				}
			}
			if s.posix {
				in.PosixUser = &efstypes.PosixUser{Uid: aws.Int64(s.uid), Gid: aws.Int64(s.gid), SecondaryGids: s.sgids}
			}
			for _, kv := range s.tags {
				in.Tags = append(in.Tags, efstypes.Tag{Key: aws.String(kv[0]), Value: aws.String(kv[1])})
			}
			out, err := c.CreateAccessPoint(ctx, in)
			if err != nil {
				return "", err
			}
			return *out.AccessPointId, nil
		},
		get: func(id string) (apView, error) {
			out, err := c.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{AccessPointId: aws.String(id)})
			if err != nil {
				return apView{}, err
			}
			d := out.AccessPoints[0]
			v := apView{ID: *d.AccessPointId, FS: *d.FileSystemId, Token: aws.ToString(d.ClientToken), Path: aws.ToString(d.RootDirectory.Path), Tags: map[string]string{}}
			if ci := d.RootDirectory.CreationInfo; ci != nil {
				v.OwnerUID, v.OwnerGID, v.Perm = *ci.OwnerUid, *ci.OwnerGid, *ci.Permissions
			}
			if pu := d.PosixUser; pu != nil {
				v.UID, v.GID = *pu.Uid, *pu.Gid
			}
			for _, t := range d.Tags {
				v.Tags[*t.Key] = *t.Value
			}
			return v, nil
		},
		list: func(fsID string, pageSize int32) ([]string, error) {
			var all []string
			p := efs.NewDescribeAccessPointsPaginator(c, &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsID), MaxResults: aws.Int32(pageSize)})
			for p.HasMorePages() {
				out, err := p.NextPage(ctx)
				if err != nil {
					return nil, err
				}
				all = append(all, ids(out.AccessPoints)...)
			}
			return all, nil
		},
		del: func(id string) error {
			_, err := c.DeleteAccessPoint(ctx, &efs.DeleteAccessPointInput{AccessPointId: aws.String(id)})
			return err
		},
		tag: func(id, k, v string) error {
			_, err := c.TagResource(ctx, &efs.TagResourceInput{ResourceId: aws.String(id), Tags: []efstypes.Tag{{Key: aws.String(k), Value: aws.String(v)}}})
			return err
		},
	}
}

func newS3Client(url string) *s3files.Client {
	return s3files.New(s3files.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(url), RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) { return testCredentials, nil }),
	})
}

func s3Driver(url string) apiDriver {
	c := newS3Client(url)
	ctx := context.Background()
	return apiDriver{
		name: "S3Files", opCreate: emulator.OpS3CreateAccessPoint, opDelete: emulator.OpS3DeleteAccessPoint,
		badRequest: "ValidationException", notFound: "ResourceNotFoundException", fsNotFound: "ResourceNotFoundException", limit: "ServiceQuotaExceededException",
		throttled: "ThrottlingException", internal: "InternalServerException",
		fileSystem: func(t *testing.T) string {
			out, err := c.CreateFileSystem(ctx, &s3files.CreateFileSystemInput{Bucket: aws.String("arn:aws:s3:::bucket-" + token()[4:12]),
				RoleArn: aws.String("arn:aws:iam::123456789012:role/s3files")})
			if err != nil {
				t.Fatalf("S3 Files CreateFileSystem: %v", err)
			}
			return *out.FileSystemId
		},
		create: func(fsID string, s apSpec) (string, error) {
			in := &s3files.CreateAccessPointInput{FileSystemId: aws.String(fsID), ClientToken: aws.String(s.token)}
			if s.path != "" || s.ci != nil {
				in.RootDirectory = &s3types.RootDirectory{Path: aws.String(cmpOr(s.path, "/"))}
				if s.ci != nil {
					in.RootDirectory.CreationPermissions = &s3types.CreationPermissions{OwnerUid: aws.Int64(s.ci[0].(int64)),
						OwnerGid: aws.Int64(s.ci[1].(int64)), Permissions: aws.String(s.ci[2].(string))}
				}
			}
			if s.posix {
				in.PosixUser = &s3types.PosixUser{Uid: aws.Int64(s.uid), Gid: aws.Int64(s.gid), SecondaryGids: s.sgids}
			}
			for _, kv := range s.tags {
				in.Tags = append(in.Tags, s3types.Tag{Key: aws.String(kv[0]), Value: aws.String(kv[1])})
			}
			out, err := c.CreateAccessPoint(ctx, in)
			if err != nil {
				return "", err
			}
			return *out.AccessPointId, nil
		},
		get: func(id string) (apView, error) {
			d, err := c.GetAccessPoint(ctx, &s3files.GetAccessPointInput{AccessPointId: aws.String(id)})
			if err != nil {
				return apView{}, err
			}
			v := apView{ID: *d.AccessPointId, FS: *d.FileSystemId, Token: aws.ToString(d.ClientToken), Path: aws.ToString(d.RootDirectory.Path), Tags: map[string]string{}}
			if ci := d.RootDirectory.CreationPermissions; ci != nil {
				v.OwnerUID, v.OwnerGID, v.Perm = *ci.OwnerUid, *ci.OwnerGid, *ci.Permissions
			}
			if pu := d.PosixUser; pu != nil {
				v.UID, v.GID = *pu.Uid, *pu.Gid
			}
			for _, t := range d.Tags {
				v.Tags[*t.Key] = *t.Value
			}
			return v, nil
		},
		list: func(fsID string, pageSize int32) ([]string, error) {
			var all []string
			p := s3files.NewListAccessPointsPaginator(c, &s3files.ListAccessPointsInput{FileSystemId: aws.String(fsID), MaxResults: aws.Int32(pageSize)})
			for p.HasMorePages() {
				out, err := p.NextPage(ctx)
				if err != nil {
					return nil, err
				}
				if len(out.AccessPoints) > int(pageSize) {
					return nil, fmt.Errorf("page of %d, asked for %d", len(out.AccessPoints), pageSize)
				}
				for _, ap := range out.AccessPoints {
					all = append(all, *ap.AccessPointId)
				}
			}
			return all, nil
		},
		del: func(id string) error {
			_, err := c.DeleteAccessPoint(ctx, &s3files.DeleteAccessPointInput{AccessPointId: aws.String(id)})
			return err
		},
		tag: func(id, k, v string) error {
			_, err := c.TagResource(ctx, &s3files.TagResourceInput{ResourceId: aws.String(id), Tags: []s3types.Tag{{Key: aws.String(k), Value: aws.String(v)}}})
			return err
		},
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// bothAPIs runs f once per API against its own emulator started with cfg.
func bothAPIs(t *testing.T, cfg emulator.Config, f func(t *testing.T, d apiDriver, emu *emulator.Emulator)) {
	t.Helper()
	emulatorOnly(t)
	for _, mk := range []func(string) apiDriver{efsDriver, s3Driver} {
		url, emu := emulatortest.Start(t, cfg)
		d := mk(url)
		t.Run(d.name, func(t *testing.T) { f(t, d, emu) })
	}
}

func wantAPICode(t *testing.T, err error, code string) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != code {
		t.Fatalf("error %v, want %s", err, code)
	}
}

func TestBothAPIsCreateAccessPointAnswersWhatWasAsked(t *testing.T) {
	bothAPIs(t, emulator.Config{}, func(t *testing.T, d apiDriver, _ *emulator.Emulator) {
		fsID := d.fileSystem(t)
		tok := token()
		id, err := d.create(fsID, apSpec{token: tok, path: "/volumes/pvc-1", ci: &[3]any{int64(1000), int64(2000), "750"},
			posix: true, uid: 1001, gid: 2001, tags: [][2]string{{"Name", "vol"}, {"team", "a"}}})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		if !accessPointIDRE.MatchString(id) {
			t.Errorf("access point ID %q is not fsap- and 17 hex digits", id)
		}
		got, err := d.get(id)
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		want := apView{ID: id, FS: fsID, Token: tok, Path: "/volumes/pvc-1", Perm: "750", OwnerUID: 1000, OwnerGID: 2000,
			UID: 1001, GID: 2001, Tags: map[string]string{"Name": "vol", "team": "a"}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	})
}

func TestBothAPIsValidateAccessPoints(t *testing.T) {
	cases := []struct {
		name string
		spec apSpec
		ok   bool
	}{
		{"path of 100 characters", apSpec{path: "/" + strings.Repeat("p", 99)}, true},
		{"path of 101 characters", apSpec{path: "/" + strings.Repeat("p", 100)}, false},
		{"path of 5 components", apSpec{path: "/a/b/c/d/e"}, false},
		{"dot-dot component", apSpec{path: "/a/../b"}, false},
		{"relative path", apSpec{path: "a/b"}, false},
		{"forbidden character", apSpec{path: "/a;b"}, false},
		{"uid 4294967296", apSpec{ci: &[3]any{int64(4294967296), int64(0), "700"}}, false},
		{"permissions with an 8", apSpec{ci: &[3]any{int64(0), int64(0), "780"}}, false},
		{"posix gid -1", apSpec{posix: true, uid: 1, gid: -1}, false},
		{"17 secondary gids", apSpec{posix: true, uid: 1, gid: 1, sgids: make([]int64, 17)}, false},
		{"16 secondary gids", apSpec{posix: true, uid: 1, gid: 1, sgids: make([]int64, 16)}, true},
		{"aws: tag key", apSpec{tags: [][2]string{{"aws:x", "v"}}}, false},
		{"token of 65 characters", apSpec{token: strings.Repeat("t", 65)}, false},
	}
	bothAPIs(t, emulator.Config{}, func(t *testing.T, d apiDriver, _ *emulator.Emulator) {
		fsID := d.fileSystem(t)
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				if c.spec.token == "" {
					c.spec.token = token()
				}
				_, err := d.create(fsID, c.spec)
				if c.ok {
					if err != nil {
						t.Fatalf("want success, got %v", err)
					}
					return
				}
				wantAPICode(t, err, d.badRequest)
			})
		}
	})
}

func TestBothAPIsLimitAccessPointsPerFileSystem(t *testing.T) {
	bothAPIs(t, emulator.Config{AccessPointLimit: 2}, func(t *testing.T, d apiDriver, _ *emulator.Emulator) {
		fsID := d.fileSystem(t)
		var last string
		for range 2 {
			id, err := d.create(fsID, apSpec{token: token()})
			if err != nil {
				t.Fatal(err)
			}
			last = id
		}
		_, err := d.create(fsID, apSpec{token: token()})
		wantAPICode(t, err, d.limit)
		if err := d.del(last); err != nil {
			t.Fatal(err)
		}
		if _, err := d.create(fsID, apSpec{token: token()}); err != nil {
			t.Fatalf("after a delete freed a slot: %v", err)
		}
	})
}

func TestBothAPIsDeleteOnceThenNotFound(t *testing.T) {
	bothAPIs(t, emulator.Config{}, func(t *testing.T, d apiDriver, _ *emulator.Emulator) {
		fsID := d.fileSystem(t)
		keep, _ := d.create(fsID, apSpec{token: token()})
		gone, err := d.create(fsID, apSpec{token: token()})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.del(gone); err != nil {
			t.Fatalf("delete: %v", err)
		}
		wantAPICode(t, d.del(gone), d.notFound)
		_, err = d.get(gone)
		wantAPICode(t, err, d.notFound)
		if got, err := d.list(fsID, 100); err != nil || !slices.Equal(got, []string{keep}) {
			t.Fatalf("list after delete: %v %v, want [%s]", got, err, keep)
		}
		_, err = d.create("fs-0000000000000000000a", apSpec{token: token()})
		wantAPICode(t, err, d.fsNotFound)
	})
}

func TestBothAPIsPageInCreationOrder(t *testing.T) {
	bothAPIs(t, emulator.Config{NoFsync: true}, func(t *testing.T, d apiDriver, _ *emulator.Emulator) {
		fsID := d.fileSystem(t)
		var made []string
		for range 23 {
			id, err := d.create(fsID, apSpec{token: token()})
			if err != nil {
				t.Fatal(err)
			}
			made = append(made, id)
		}
		got, err := d.list(fsID, 5)
		if err != nil || !slices.Equal(got, made) {
			t.Fatalf("pages of 5: %v %v, want %v", got, err, made)
		}
	})
}

func TestBothAPIsMakeTheRootDirectoryOnDisk(t *testing.T) {
	bothAPIs(t, emulator.Config{}, func(t *testing.T, d apiDriver, emu *emulator.Emulator) {
		fsID := d.fileSystem(t)
		if _, err := d.create(fsID, apSpec{token: token(), path: "/base/pvc-1", ci: &[3]any{int64(1234), int64(5678), "750"}}); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(emu.FileSystemDir(fsID), "base", "pvc-1"))
		if err != nil {
			t.Fatalf("root directory: %v", err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != 0o750 || os.Geteuid() == 0 && (st.Uid != 1234 || st.Gid != 5678) {
			t.Fatalf("root directory mode %v owner %d:%d, want 0750 1234:5678", fi.Mode(), st.Uid, st.Gid)
		}
	})
}

func TestBothAPIsInjectFaultsByTheirOperationNames(t *testing.T) {
	bothAPIs(t, emulator.Config{}, func(t *testing.T, d apiDriver, emu *emulator.Emulator) {
		fsID := d.fileSystem(t)
		emu.ResetCounts()
		emu.SetFault(d.opCreate, emulator.Fault{ErrorRate: 1})
		_, err := d.create(fsID, apSpec{token: token()})
		wantAPICode(t, err, d.internal)
		emu.SetFault(d.opCreate, emulator.Fault{ThrottleRate: 0.001, ThrottleBurst: 1})
		if _, err := d.create(fsID, apSpec{token: token()}); err != nil {
			t.Fatalf("first call within the bucket: %v", err)
		}
		_, err = d.create(fsID, apSpec{token: token()})
		wantAPICode(t, err, d.throttled)
		// A lost answer: applied, then a 500; the access point exists.
		emu.SetFault(d.opCreate, emulator.Fault{LostAnswerRate: 1, LostAnswerMode: emulator.Lost500})
		_, err = d.create(fsID, apSpec{token: token()})
		wantAPICode(t, err, d.internal)
		emu.ResetFaults()
		if got, _ := d.list(fsID, 100); len(got) != 2 {
			t.Fatalf("%d access points, want 2 (the throttle's first and the lost answer's)", len(got))
		}
		if n := emu.Counts()[d.opCreate]; n != 4 {
			t.Fatalf("%s counted %d, want 4", d.opCreate, n)
		}
	})
}

// The two APIs share one listener and one data directory, not resources:
// neither sees the other's file systems, access points or tokens.
func TestAPIsDoNotSeeEachOthersResources(t *testing.T) {
	emulatorOnly(t)
	url, _ := emulatortest.Start(t, emulator.Config{})
	e, s := efsDriver(url), s3Driver(url)
	efsFS, s3FS := e.fileSystem(t), s.fileSystem(t)
	tok := token()
	efsAP, err := e.create(efsFS, apSpec{token: tok})
	if err != nil {
		t.Fatal(err)
	}
	s3AP, err := s.create(s3FS, apSpec{token: tok}) // the same token: another namespace
	if err != nil || s3AP == efsAP {
		t.Fatalf("S3 Files create with EFS's token: %s, %v", s3AP, err)
	}
	_, err = s.get(efsAP)
	wantAPICode(t, err, s.notFound)
	_, err = e.get(s3AP)
	wantAPICode(t, err, e.notFound)
	_, err = s.create(efsFS, apSpec{token: token()})
	wantAPICode(t, err, s.fsNotFound)
	wantAPICode(t, e.del(s3AP), e.notFound)
	wantAPICode(t, e.tag(s3AP, "k", "v"), e.notFound)
	if _, err := s.get(s3AP); err != nil {
		t.Fatalf("the S3 Files access point after EFS calls on it: %v", err)
	}
}

func TestS3FilesRepeatedClientTokenAnswersTheExistingAccessPoint(t *testing.T) {
	emulatorOnly(t)
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprint("strict=", strict), func(t *testing.T) {
			url, _ := emulatortest.Start(t, emulator.Config{S3FilesStrictClientToken: strict})
			d := s3Driver(url)
			fsID := d.fileSystem(t)
			tok := token()
			first, err := d.create(fsID, apSpec{token: tok, path: "/a"})
			if err != nil {
				t.Fatal(err)
			}
			again, err := d.create(fsID, apSpec{token: tok, path: "/a"})
			if err != nil || again != first {
				t.Fatalf("identical repeat: %s, %v; want %s", again, err, first)
			}
			other, err := d.create(fsID, apSpec{token: tok, path: "/b"})
			if strict {
				wantAPICode(t, err, "ConflictException")
				var ce *s3types.ConflictException
				if !errors.As(err, &ce) || aws.ToString(ce.ResourceId) != first {
					t.Fatalf("ConflictException %v names %q, want %s", err, aws.ToString(ce.ResourceId), first)
				}
			} else if err != nil || other != first {
				t.Fatalf("repeat with another path: %s, %v; want the existing %s (the request is ignored)", other, err, first)
			}
			if got, _ := d.list(fsID, 100); len(got) != 1 {
				t.Fatalf("%d access points, want 1", len(got))
			}
		})
	}
}

func TestS3FilesListingLeavesOutTokensAndTagsAsTheSDKModels(t *testing.T) {
	emulatorOnly(t)
	url, _ := emulatortest.Start(t, emulator.Config{})
	d, c := s3Driver(url), newS3Client(url)
	fsID := d.fileSystem(t)
	id, err := d.create(fsID, apSpec{token: token(), tags: [][2]string{{"k", "v"}}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.ListAccessPoints(context.Background(), &s3files.ListAccessPointsInput{FileSystemId: aws.String(fsID)})
	if err != nil || len(out.AccessPoints) != 1 || *out.AccessPoints[0].AccessPointId != id || out.AccessPoints[0].Status != s3types.LifeCycleStateAvailable {
		t.Fatalf("ListAccessPoints: %v %+v", err, out)
	}
	want := "arn:aws:s3files:us-east-1:123456789012:file-system/" + fsID + "/access-point/" + id
	if got := aws.ToString(out.AccessPoints[0].AccessPointArn); got != want {
		t.Fatalf("ARN %s, want %s", got, want)
	}
	// The ARN names the access point too.
	if _, err := d.get(want); err != nil {
		t.Fatalf("GetAccessPoint by ARN: %v", err)
	}
}

func TestS3FilesFileSystemsSeededListedAndGot(t *testing.T) {
	emulatorOnly(t)
	const seeded = "fs-0123456789abcdef01"
	cfg := emulator.Config{DataDir: t.TempDir(), S3FilesFileSystems: []string{seeded}, FileSystems: []string{"fs-0123456789abcdef0"}}
	url, emu := emulatortest.Start(t, cfg)
	c := newS3Client(url)
	ctx := context.Background()
	fs, err := c.GetFileSystem(ctx, &s3files.GetFileSystemInput{FileSystemId: aws.String(seeded)})
	if err != nil || aws.ToString(fs.FileSystemId) != seeded || fs.Status != s3types.LifeCycleStateAvailable || aws.ToString(fs.Bucket) == "" {
		t.Fatalf("GetFileSystem: %v %+v", err, fs)
	}
	mts, err := c.ListMountTargets(ctx, &s3files.ListMountTargetsInput{FileSystemId: aws.String(seeded)})
	if err != nil || len(mts.MountTargets) != 1 || aws.ToString(mts.MountTargets[0].Ipv4Address) != "127.0.0.1" {
		t.Fatalf("ListMountTargets: %v %+v", err, mts)
	}
	list, err := c.ListFileSystems(ctx, &s3files.ListFileSystemsInput{})
	if err != nil || len(list.FileSystems) != 1 {
		t.Fatalf("ListFileSystems: %v %+v, want only the S3 Files one", err, list)
	}
	if _, err := os.Stat(emu.FileSystemDir(seeded)); err != nil {
		t.Fatalf("seeded file system directory: %v", err)
	}
	ap, err := c.CreateAccessPoint(ctx, &s3files.CreateAccessPointInput{FileSystemId: aws.String(seeded)}) // the SDK fills the token in
	if err != nil || aws.ToString(ap.ClientToken) == "" {
		t.Fatalf("CreateAccessPoint without a token: %v %+v", err, ap)
	}
	if err := emu.Close(); err != nil {
		t.Fatal(err)
	}
	url, _ = emulatortest.Start(t, cfg)
	got, err := newS3Client(url).GetAccessPoint(ctx, &s3files.GetAccessPointInput{AccessPointId: ap.AccessPointId})
	if err != nil || aws.ToString(got.FileSystemId) != seeded {
		t.Fatalf("after restart: %v %+v", err, got)
	}
	list, err = newS3Client(url).ListFileSystems(ctx, &s3files.ListFileSystemsInput{})
	if err != nil || len(list.FileSystems) != 1 {
		t.Fatalf("after restart ListFileSystems: %v %+v (the seed must not be made twice)", err, list)
	}
}

func TestS3FilesDeleteFileSystemInUseIsConflict(t *testing.T) {
	emulatorOnly(t)
	url, _ := emulatortest.Start(t, emulator.Config{})
	d, c := s3Driver(url), newS3Client(url)
	fsID := d.fileSystem(t)
	id, _ := d.create(fsID, apSpec{token: token()})
	_, err := c.DeleteFileSystem(context.Background(), &s3files.DeleteFileSystemInput{FileSystemId: aws.String(fsID)})
	wantAPICode(t, err, "ConflictException")
	if err := d.del(id); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteFileSystem(context.Background(), &s3files.DeleteFileSystemInput{FileSystemId: aws.String(fsID)}); err != nil {
		t.Fatalf("DeleteFileSystem of an unused file system: %v", err)
	}
}

// A request signed for one service that reaches the other's path is
// refused, not served as the other's operation.
func TestRequestSignedForTheOtherServiceIsRefused(t *testing.T) {
	emulatorOnly(t)
	v := newEnv(t, emulator.Config{})
	status, code, _ := v.raw("GET", "/access-points?fileSystemId=fs-0123456789abcdef01", "") // signed elasticfilesystem
	if status != http.StatusBadRequest || code != "ValidationException" {
		t.Fatalf("EFS-signed S3 Files request: %d %s, want 400 ValidationException", status, code)
	}
	if n := v.emu.Counts()[emulator.OpS3ListAccessPoints]; n != 0 {
		t.Fatalf("the refused request counted as %d S3 Files listings", n)
	}
}
