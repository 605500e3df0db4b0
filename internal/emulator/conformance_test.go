package emulator_test

// The conformance suite: what the emulator promises about the EFS API, checked
// through the real AWS SDK for Go v2 over loopback HTTP. With -efs-endpoint
// (or EFS_CONFORMANCE_ENDPOINT) it runs against another implementation, such
// as moto, instead; cases that need the emulator's own configuration or
// internals (limits, faults, hooks, the data directory, restarts) are then
// skipped. docs/emulator.md lists what moto fails.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/efs/types"
	"github.com/aws/smithy-go"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
)

var externalEndpoint = flag.String("efs-endpoint", os.Getenv("EFS_CONFORMANCE_ENDPOINT"),
	"run the conformance suite against this EFS API endpoint (e.g. moto) instead of an in-process emulator")

func TestMain(m *testing.M) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		runChildEmulator(dir) // the crash test's emulator process; never returns
	}
	flag.Parse()
	os.Exit(m.Run())
}

// env is one test's EFS endpoint and client.
type env struct {
	t   testing.TB
	url string
	emu *emulator.Emulator // nil when the endpoint is external
	efs *efs.Client        // no retries: tests see the first answer
}

// newEnv starts an emulator with cfg for the test, or uses the external
// endpoint; a test that needs cfg's settings calls emulatorOnly first.
func newEnv(t testing.TB, cfg emulator.Config) *env {
	t.Helper()
	v := &env{t: t, url: *externalEndpoint}
	if v.url == "" {
		v.url, v.emu = emulatortest.Start(t, cfg)
	}
	v.efs = newClient(v.url, 1)
	return v
}

var testCredentials = aws.Credentials{AccessKeyID: "AKIDTEST", SecretAccessKey: "secret"}

func newClient(url string, attempts int) *efs.Client {
	return efs.New(efs.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(url),
		RetryMaxAttempts: attempts,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return testCredentials, nil
		}),
	})
}

// emulatorOnly skips a case that depends on the emulator itself.
func emulatorOnly(t testing.TB) {
	t.Helper()
	if *externalEndpoint != "" {
		t.Skip("needs the emulator's configuration or internals")
	}
}

var (
	accessPointIDRE = regexp.MustCompile(`^fsap-[0-9a-f]{17}$`)
	mountTargetIDRE = regexp.MustCompile(`^fsmt-[0-9a-f]{17}$`)
)

func token() string { return fmt.Sprintf("tok-%016x", rand.Uint64()) }

// fileSystem creates a fresh file system through the API.
func (v *env) fileSystem() string {
	v.t.Helper()
	out, err := v.efs.CreateFileSystem(context.Background(), &efs.CreateFileSystemInput{CreationToken: aws.String(token())})
	if err != nil {
		v.t.Fatalf("CreateFileSystem: %v", err)
	}
	return *out.FileSystemId
}

type apOpt func(*efs.CreateAccessPointInput)

func withPath(p string) apOpt {
	return func(in *efs.CreateAccessPointInput) {
		if in.RootDirectory == nil {
			in.RootDirectory = &types.RootDirectory{}
		}
		in.RootDirectory.Path = aws.String(p)
	}
}

func withCreationInfo(uid, gid int64, perm string) apOpt {
	return func(in *efs.CreateAccessPointInput) {
		if in.RootDirectory == nil {
			in.RootDirectory = &types.RootDirectory{Path: aws.String("/")}
		}
		in.RootDirectory.CreationInfo = &types.CreationInfo{OwnerUid: aws.Int64(uid), OwnerGid: aws.Int64(gid), Permissions: aws.String(perm)}
	}
}

func withTags(kv ...string) apOpt {
	return func(in *efs.CreateAccessPointInput) {
		for i := 0; i+1 < len(kv); i += 2 {
			in.Tags = append(in.Tags, types.Tag{Key: aws.String(kv[i]), Value: aws.String(kv[i+1])})
		}
	}
}

func withToken(tok string) apOpt {
	return func(in *efs.CreateAccessPointInput) { in.ClientToken = aws.String(tok) }
}

func apInput(fsID string, opts ...apOpt) *efs.CreateAccessPointInput {
	in := &efs.CreateAccessPointInput{FileSystemId: aws.String(fsID), ClientToken: aws.String(token())}
	for _, o := range opts {
		o(in)
	}
	return in
}

func (v *env) createAP(in *efs.CreateAccessPointInput) (*efs.CreateAccessPointOutput, error) {
	return v.efs.CreateAccessPoint(context.Background(), in)
}

func (v *env) mustCreateAP(fsID string, opts ...apOpt) *efs.CreateAccessPointOutput {
	v.t.Helper()
	out, err := v.createAP(apInput(fsID, opts...))
	if err != nil {
		v.t.Fatalf("CreateAccessPoint: %v", err)
	}
	return out
}

// listAll walks every page of a file system's access points.
func (v *env) listAll(fsID string, pageSize int32) []types.AccessPointDescription {
	v.t.Helper()
	in := &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsID)}
	if pageSize > 0 {
		in.MaxResults = aws.Int32(pageSize)
	}
	var all []types.AccessPointDescription
	p := efs.NewDescribeAccessPointsPaginator(v.efs, in)
	for p.HasMorePages() {
		out, err := p.NextPage(context.Background())
		if err != nil {
			v.t.Fatalf("DescribeAccessPoints: %v", err)
		}
		if pageSize > 0 && len(out.AccessPoints) > int(pageSize) {
			v.t.Fatalf("page of %d items, asked for at most %d", len(out.AccessPoints), pageSize)
		}
		all = append(all, out.AccessPoints...)
	}
	return all
}

func ids(aps []types.AccessPointDescription) []string {
	out := make([]string, len(aps))
	for i, ap := range aps {
		out[i] = *ap.AccessPointId
	}
	return out
}

// asError asserts that err is (or wraps) a T and returns it.
func asError[T error](t testing.TB, err error) T {
	t.Helper()
	var target T
	if !errors.As(err, &target) {
		t.Fatalf("error %v (%T), want %T", err, err, target)
	}
	return target
}

// wantCode asserts that err is an API error with code.
func wantCode(t testing.TB, err error, code string) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T), want API error %s", err, err, code)
	}
	if ae.ErrorCode() != code {
		t.Fatalf("error code %s (%v), want %s", ae.ErrorCode(), err, code)
	}
}

// raw sends a request the SDK would refuse to build and returns the status
// and the error code header.
func (v *env) raw(method, path, body string) (int, string, []byte) {
	v.t.Helper()
	req, err := http.NewRequest(method, v.url+path, bytes.NewReader([]byte(body)))
	if err != nil {
		v.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	// Signed as the SDK would: some implementations (moto) route by the
	// credential scope of the Authorization header.
	sum := sha256.Sum256([]byte(body))
	if err := v4.NewSigner().SignHTTP(context.Background(), testCredentials, req, hex.EncodeToString(sum[:]),
		"elasticfilesystem", "us-east-1", time.Now()); err != nil {
		v.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		v.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("x-amzn-ErrorType"), b
}

func TestCreateAccessPointAnswersWhatWasAsked(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	fsID := v.fileSystem()
	in := apInput(fsID, withPath("/volumes/pvc-1"), withCreationInfo(1000, 2000, "750"), withTags("Name", "vol", "team", "a"))
	in.PosixUser = &types.PosixUser{Uid: aws.Int64(1001), Gid: aws.Int64(2001), SecondaryGids: []int64{3000}}
	out, err := v.createAP(in)
	if err != nil {
		t.Fatalf("CreateAccessPoint: %v", err)
	}
	if !accessPointIDRE.MatchString(*out.AccessPointId) {
		t.Errorf("AccessPointId %q is not fsap- and 17 hex digits", *out.AccessPointId)
	}
	check := func(what string, ap types.AccessPointDescription) {
		t.Helper()
		got := fmt.Sprintf("%s %s %s %s %s %d/%d/%v %d/%d/%s %d",
			*ap.AccessPointId, *ap.FileSystemId, *ap.ClientToken, ap.LifeCycleState, aws.ToString(ap.Name),
			*ap.PosixUser.Uid, *ap.PosixUser.Gid, ap.PosixUser.SecondaryGids,
			*ap.RootDirectory.CreationInfo.OwnerUid, *ap.RootDirectory.CreationInfo.OwnerGid, *ap.RootDirectory.CreationInfo.Permissions,
			len(ap.Tags))
		want := fmt.Sprintf("%s %s %s available vol 1001/2001/[3000] 1000/2000/750 2", *out.AccessPointId, fsID, *in.ClientToken)
		if got != want || *ap.RootDirectory.Path != "/volumes/pvc-1" {
			t.Errorf("%s: got %s path %s, want %s path /volumes/pvc-1", what, got, *ap.RootDirectory.Path, want)
		}
	}
	check("CreateAccessPoint", types.AccessPointDescription{
		AccessPointId: out.AccessPointId, FileSystemId: out.FileSystemId, ClientToken: out.ClientToken,
		LifeCycleState: out.LifeCycleState, Name: out.Name, PosixUser: out.PosixUser, RootDirectory: out.RootDirectory, Tags: out.Tags,
	})
	d, err := v.efs.DescribeAccessPoints(context.Background(), &efs.DescribeAccessPointsInput{AccessPointId: out.AccessPointId})
	if err != nil {
		t.Fatalf("DescribeAccessPoints: %v", err)
	}
	if len(d.AccessPoints) != 1 {
		t.Fatalf("DescribeAccessPoints by ID returned %d access points", len(d.AccessPoints))
	}
	check("DescribeAccessPoints", d.AccessPoints[0])
}

func TestCreateAccessPointWithoutRootDirectoryUsesFileSystemRoot(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	out := v.mustCreateAP(v.fileSystem())
	if out.RootDirectory == nil || aws.ToString(out.RootDirectory.Path) != "/" {
		t.Fatalf("RootDirectory %+v, want Path /", out.RootDirectory)
	}
}

func TestRepeatedClientTokenIsAccessPointAlreadyExistsWithTheExistingID(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	fsID, otherFS := v.fileSystem(), v.fileSystem()
	tok := token()
	first := v.mustCreateAP(fsID, withToken(tok), withPath("/a"))
	// The documented behaviour: whatever the other parameters, and across
	// file systems (the token is unique per account and region).
	for name, in := range map[string]*efs.CreateAccessPointInput{
		"same parameters":     apInput(fsID, withToken(tok), withPath("/a")),
		"other path":          apInput(fsID, withToken(tok), withPath("/b")),
		"other file system":   apInput(otherFS, withToken(tok), withPath("/a")),
		"added creation info": apInput(fsID, withToken(tok), withPath("/a"), withCreationInfo(1, 1, "700")),
		"added tags":          apInput(fsID, withToken(tok), withPath("/a"), withTags("k", "v")),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := v.createAP(in)
			ae := asError[*types.AccessPointAlreadyExists](t, err)
			if aws.ToString(ae.AccessPointId) != *first.AccessPointId {
				t.Fatalf("AccessPointId %q, want the existing %s", aws.ToString(ae.AccessPointId), *first.AccessPointId)
			}
		})
	}
	if n := len(v.listAll(fsID, 0)) + len(v.listAll(otherFS, 0)); n != 1 {
		t.Fatalf("%d access points exist, want 1", n)
	}
}

func TestLenientClientTokenReturnsTheExistingAccessPointOnlyForIdenticalParameters(t *testing.T) {
	emulatorOnly(t)
	v := newEnv(t, emulator.Config{LenientClientToken: true})
	fsID := v.fileSystem()
	tok := token()
	first := v.mustCreateAP(fsID, withToken(tok), withPath("/a"), withCreationInfo(1, 2, "700"), withTags("a", "1", "b", "2"))

	again := v.mustCreateAP(fsID, withToken(tok), withPath("/a"), withCreationInfo(1, 2, "700"), withTags("b", "2", "a", "1"))
	if *again.AccessPointId != *first.AccessPointId {
		t.Fatalf("identical repeat (tags reordered) made %s, want the existing %s", *again.AccessPointId, *first.AccessPointId)
	}
	for name, in := range map[string]*efs.CreateAccessPointInput{
		"other path":          apInput(fsID, withToken(tok), withPath("/b"), withCreationInfo(1, 2, "700"), withTags("a", "1", "b", "2")),
		"other creation info": apInput(fsID, withToken(tok), withPath("/a"), withCreationInfo(1, 2, "755"), withTags("a", "1", "b", "2")),
		"other tags":          apInput(fsID, withToken(tok), withPath("/a"), withCreationInfo(1, 2, "700"), withTags("a", "1")),
		"other file system":   apInput(v.fileSystem(), withToken(tok), withPath("/a"), withCreationInfo(1, 2, "700"), withTags("a", "1", "b", "2")),
	} {
		t.Run(name, func(t *testing.T) {
			ae := asError[*types.AccessPointAlreadyExists](t, func() error { _, err := v.createAP(in); return err }())
			if aws.ToString(ae.AccessPointId) != *first.AccessPointId {
				t.Fatalf("AccessPointId %q, want %s", aws.ToString(ae.AccessPointId), *first.AccessPointId)
			}
		})
	}
}

func TestClientTokenOfMoreThan64CharactersIsBadRequest(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	fsID := v.fileSystem()
	v.mustCreateAP(fsID, withToken(strings.Repeat("t", 64)))
	_, err := v.createAP(apInput(fsID, withToken(strings.Repeat("u", 65))))
	asError[*types.BadRequest](t, err)
}

func TestCreateAccessPointValidation(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	fsID := v.fileSystem()
	long := "/" + strings.Repeat("p", 99) // 100 characters: the most allowed
	tags := func(n int) apOpt {
		var kv []string
		for i := range n {
			kv = append(kv, fmt.Sprintf("k%d", i), "v")
		}
		return withTags(kv...)
	}
	cases := []struct {
		name string
		opts []apOpt
		ok   bool
	}{
		{"path of 100 characters", []apOpt{withPath(long)}, true},
		{"path of 101 characters", []apOpt{withPath(long + "p")}, false},
		{"path of 4 components", []apOpt{withPath("/a/b/c/d")}, true},
		{"path of 5 components", []apOpt{withPath("/a/b/c/d/e")}, false},
		{"relative path", []apOpt{withPath("a/b")}, false},
		{"empty path", []apOpt{withPath("")}, false},
		{"dot-dot component", []apOpt{withPath("/a/../b")}, false},
		{"component starting with a dot", []apOpt{withPath("/.hidden")}, false},
		{"empty component", []apOpt{withPath("/a//b")}, false},
		{"trailing slash", []apOpt{withPath("/a/")}, false},
		{"forbidden character", []apOpt{withPath("/a;b")}, false},
		{"dots inside a component", []apOpt{withPath("/a.b/c..d")}, true},
		{"uid 4294967295", []apOpt{withCreationInfo(4294967295, 0, "700")}, true},
		{"uid 4294967296", []apOpt{withCreationInfo(4294967296, 0, "700")}, false},
		{"negative gid", []apOpt{withCreationInfo(0, -1, "700")}, false},
		{"permissions of 4 digits", []apOpt{withPath("/x"), withCreationInfo(0, 0, "1777")}, true},
		{"permissions with an 8", []apOpt{withCreationInfo(0, 0, "780")}, false},
		{"permissions of 2 digits", []apOpt{withCreationInfo(0, 0, "70")}, false},
		{"permissions of 5 digits", []apOpt{withCreationInfo(0, 0, "00700")}, false},
		{"symbolic permissions", []apOpt{withCreationInfo(0, 0, "rwx")}, false},
		{"50 tags", []apOpt{tags(50)}, true},
		{"51 tags", []apOpt{tags(51)}, false},
		{"tag key of 128 characters", []apOpt{withTags(strings.Repeat("k", 128), "v")}, true},
		{"tag key of 129 characters", []apOpt{withTags(strings.Repeat("k", 129), "v")}, false},
		{"empty tag key", []apOpt{withTags("", "v")}, false},
		{"tag value of 256 characters", []apOpt{withTags("k", strings.Repeat("v", 256))}, true},
		{"tag value of 257 characters", []apOpt{withTags("k", strings.Repeat("v", 257))}, false},
		{"empty tag value", []apOpt{withTags("k", "")}, true},
		{"aws: tag key", []apOpt{withTags("aws:cluster", "v")}, false},
		{"AWS: tag key", []apOpt{withTags("AWS:cluster", "v")}, false},
		{"tag key with a slash and dots", []apOpt{withTags("efs.csi.aws.com/cluster", "true")}, true},
		{"tag key given twice", []apOpt{withTags("k", "1", "k", "2")}, false},
		{"tag value with a forbidden character", []apOpt{withTags("k", "a;b")}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := v.createAP(apInput(fsID, c.opts...))
			if c.ok {
				if err != nil {
					t.Fatalf("want success, got %v", err)
				}
				return
			}
			asError[*types.BadRequest](t, err)
		})
	}
	t.Run("secondary gids", func(t *testing.T) {
		for n, ok := range map[int]bool{16: true, 17: false} {
			in := apInput(fsID)
			in.PosixUser = &types.PosixUser{Uid: aws.Int64(1), Gid: aws.Int64(1), SecondaryGids: make([]int64, n)}
			if _, err := v.createAP(in); ok != (err == nil) {
				t.Errorf("%d secondary gids: error %v, want success %v", n, err, ok)
			} else if !ok {
				asError[*types.BadRequest](t, err)
			}
		}
	})
}

// Requests the SDK refuses to build reach the server from other clients; the
// answer must still be a 400 BadRequest, never a 500.
func TestMalformedRequestsAreBadRequest(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	fsID := v.fileSystem()
	ap := v.mustCreateAP(fsID)
	cases := []struct{ name, method, path, body string }{
		{"body is not JSON", "POST", "/2015-02-01/access-points", "{"},
		{"body is a list", "POST", "/2015-02-01/access-points", "[]"},
		{"no ClientToken", "POST", "/2015-02-01/access-points", `{"FileSystemId":"` + fsID + `"}`},
		{"empty ClientToken", "POST", "/2015-02-01/access-points", `{"ClientToken":"","FileSystemId":"` + fsID + `"}`},
		{"no FileSystemId", "POST", "/2015-02-01/access-points", `{"ClientToken":"x"}`},
		{"malformed FileSystemId", "POST", "/2015-02-01/access-points", `{"ClientToken":"x","FileSystemId":"../etc"}`},
		{"uid as a string", "POST", "/2015-02-01/access-points", `{"ClientToken":"x","FileSystemId":"` + fsID + `","PosixUser":{"Uid":"0","Gid":0}}`},
		{"uid as a fraction", "POST", "/2015-02-01/access-points", `{"ClientToken":"x","FileSystemId":"` + fsID + `","PosixUser":{"Uid":1.5,"Gid":0}}`},
		{"PosixUser without Gid", "POST", "/2015-02-01/access-points", `{"ClientToken":"x","FileSystemId":"` + fsID + `","PosixUser":{"Uid":1}}`},
		{"CreationInfo without Permissions", "POST", "/2015-02-01/access-points",
			`{"ClientToken":"x","FileSystemId":"` + fsID + `","RootDirectory":{"Path":"/a","CreationInfo":{"OwnerUid":1,"OwnerGid":1}}}`},
		{"tag without Value", "POST", "/2015-02-01/access-points", `{"ClientToken":"x","FileSystemId":"` + fsID + `","Tags":[{"Key":"k"}]}`},
		{"describe with neither ID", "GET", "/2015-02-01/access-points", ""},
		{"describe with both IDs", "GET", "/2015-02-01/access-points?FileSystemId=" + fsID + "&AccessPointId=" + *ap.AccessPointId, ""},
		{"MaxResults 0", "GET", "/2015-02-01/access-points?MaxResults=0&FileSystemId=" + fsID, ""},
		{"MaxResults 1001", "GET", "/2015-02-01/access-points?MaxResults=1001&FileSystemId=" + fsID, ""},
		{"MaxResults not a number", "GET", "/2015-02-01/access-points?MaxResults=ten&FileSystemId=" + fsID, ""},
		{"garbage NextToken", "GET", "/2015-02-01/access-points?NextToken=%21%21&FileSystemId=" + fsID, ""},
		{"malformed query", "GET", "/2015-02-01/access-points?FileSystemId=%zz", ""},
		{"delete a malformed ID", "DELETE", "/2015-02-01/access-points/not-an-id", ""},
		{"tag a mount target ID", "POST", "/2015-02-01/resource-tags/fsmt-0123456789abcdef0", `{"Tags":[{"Key":"k","Value":"v"}]}`},
		{"untag without keys", "DELETE", "/2015-02-01/resource-tags/" + fsID, ""},
		{"file system without CreationToken", "POST", "/2015-02-01/file-systems", `{}`},
		{"file system of unknown performance mode", "POST", "/2015-02-01/file-systems", `{"CreationToken":"x","PerformanceMode":"fast"}`},
		{"mount target without SubnetId", "POST", "/2015-02-01/mount-targets", `{"FileSystemId":"` + fsID + `"}`},
		{"mount target with a bad IP", "POST", "/2015-02-01/mount-targets", `{"FileSystemId":"` + fsID + `","SubnetId":"subnet-1","IpAddress":"999.1.1.1"}`},
		{"mount targets by two IDs", "GET", "/2015-02-01/mount-targets?FileSystemId=" + fsID + "&MountTargetId=fsmt-0123456789abcdef0", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, code, body := v.raw(c.method, c.path, c.body)
			if status != http.StatusBadRequest || code != "BadRequest" {
				t.Fatalf("%s %s: status %d code %q body %s, want 400 BadRequest", c.method, c.path, status, code, body)
			}
		})
	}
}

func TestAccessPointLimitExceededPastTheLimit(t *testing.T) {
	emulatorOnly(t)
	v := newEnv(t, emulator.Config{AccessPointLimit: 3})
	fsID, other := v.fileSystem(), v.fileSystem()
	var last *efs.CreateAccessPointOutput
	for range 3 {
		last = v.mustCreateAP(fsID)
	}
	_, err := v.createAP(apInput(fsID))
	asError[*types.AccessPointLimitExceeded](t, err)
	v.mustCreateAP(other) // the limit is per file system

	if _, err := v.efs.DeleteAccessPoint(context.Background(), &efs.DeleteAccessPointInput{AccessPointId: last.AccessPointId}); err != nil {
		t.Fatalf("DeleteAccessPoint: %v", err)
	}
	v.mustCreateAP(fsID) // a deleted access point frees its slot
}

func TestUnknownIDsAreNotFound(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	ctx := context.Background()
	const fsID, apID, mtID = "fs-0000000000000000a", "fsap-0000000000000000a", "fsmt-0000000000000000a"
	realFS := v.fileSystem()
	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"CreateAccessPoint on an unknown file system", func() error { _, err := v.createAP(apInput(fsID)); return err }, "FileSystemNotFound"},
		{"DescribeAccessPoints by unknown access point", func() error {
			_, err := v.efs.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{AccessPointId: aws.String(apID)})
			return err
		}, "AccessPointNotFound"},
		{"DescribeAccessPoints by unknown file system", func() error {
			_, err := v.efs.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsID)})
			return err
		}, "FileSystemNotFound"},
		{"DeleteAccessPoint of an unknown access point", func() error {
			_, err := v.efs.DeleteAccessPoint(ctx, &efs.DeleteAccessPointInput{AccessPointId: aws.String(apID)})
			return err
		}, "AccessPointNotFound"},
		{"DescribeFileSystems by unknown ID", func() error {
			_, err := v.efs.DescribeFileSystems(ctx, &efs.DescribeFileSystemsInput{FileSystemId: aws.String(fsID)})
			return err
		}, "FileSystemNotFound"},
		{"DeleteFileSystem of an unknown file system", func() error {
			_, err := v.efs.DeleteFileSystem(ctx, &efs.DeleteFileSystemInput{FileSystemId: aws.String(fsID)})
			return err
		}, "FileSystemNotFound"},
		{"DescribeMountTargets of an unknown file system", func() error {
			_, err := v.efs.DescribeMountTargets(ctx, &efs.DescribeMountTargetsInput{FileSystemId: aws.String(fsID)})
			return err
		}, "FileSystemNotFound"},
		{"DescribeMountTargets by unknown mount target", func() error {
			_, err := v.efs.DescribeMountTargets(ctx, &efs.DescribeMountTargetsInput{MountTargetId: aws.String(mtID)})
			return err
		}, "MountTargetNotFound"},
		{"DeleteMountTarget of an unknown mount target", func() error {
			_, err := v.efs.DeleteMountTarget(ctx, &efs.DeleteMountTargetInput{MountTargetId: aws.String(mtID)})
			return err
		}, "MountTargetNotFound"},
		{"CreateMountTarget on an unknown file system", func() error {
			_, err := v.efs.CreateMountTarget(ctx, &efs.CreateMountTargetInput{FileSystemId: aws.String(fsID), SubnetId: aws.String("subnet-1")})
			return err
		}, "FileSystemNotFound"},
		{"TagResource of an unknown access point", func() error {
			_, err := v.efs.TagResource(ctx, &efs.TagResourceInput{ResourceId: aws.String(apID), Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}})
			return err
		}, "AccessPointNotFound"},
		{"UntagResource of an unknown file system", func() error {
			_, err := v.efs.UntagResource(ctx, &efs.UntagResourceInput{ResourceId: aws.String(fsID), TagKeys: []string{"k"}})
			return err
		}, "FileSystemNotFound"},
		{"ListTagsForResource of an unknown access point", func() error {
			_, err := v.efs.ListTagsForResource(ctx, &efs.ListTagsForResourceInput{ResourceId: aws.String(apID)})
			return err
		}, "AccessPointNotFound"},
		// The driver reads IDs out of volume IDs; a well-prefixed ID that is
		// not hex names nothing, and that is what the answer says.
		{"DeleteAccessPoint of a non-hex ID", func() error {
			_, err := v.efs.DeleteAccessPoint(ctx, &efs.DeleteAccessPointInput{AccessPointId: aws.String("fsap-doesnotexist")})
			return err
		}, "AccessPointNotFound"},
		{"a known file system's ARN names it in tag operations", func() error {
			_, err := v.efs.ListTagsForResource(ctx, &efs.ListTagsForResourceInput{
				ResourceId: aws.String("arn:aws:elasticfilesystem:us-east-1:123456789012:file-system/" + realFS)})
			return err
		}, ""},
		{"a known file system's ARN works", func() error {
			_, err := v.efs.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{
				FileSystemId: aws.String("arn:aws:elasticfilesystem:us-east-1:123456789012:file-system/" + realFS)})
			return err
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if c.want == "" {
				if err != nil {
					t.Fatalf("want success, got %v", err)
				}
				return
			}
			wantCode(t, err, c.want)
		})
	}
}

func TestDeleteAccessPointRemovesItOnce(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	ctx := context.Background()
	fsID := v.fileSystem()
	keep := v.mustCreateAP(fsID)
	gone := v.mustCreateAP(fsID)
	del := func() error {
		_, err := v.efs.DeleteAccessPoint(ctx, &efs.DeleteAccessPointInput{AccessPointId: gone.AccessPointId})
		return err
	}
	if err := del(); err != nil {
		t.Fatalf("DeleteAccessPoint: %v", err)
	}
	asError[*types.AccessPointNotFound](t, del())
	_, err := v.efs.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{AccessPointId: gone.AccessPointId})
	asError[*types.AccessPointNotFound](t, err)
	if got := ids(v.listAll(fsID, 0)); len(got) != 1 || got[0] != *keep.AccessPointId {
		t.Fatalf("after delete the file system lists %v, want [%s]", got, *keep.AccessPointId)
	}
	// The token is free again: a later volume may reuse it.
	again := v.mustCreateAP(fsID, withToken(*gone.ClientToken))
	if *again.AccessPointId == *gone.AccessPointId {
		t.Fatalf("re-created access point reuses the deleted ID %s", *gone.AccessPointId)
	}
}
