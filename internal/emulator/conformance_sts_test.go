package emulator_test

// STS AssumeRole and accounts, through the real SDK (service/sts and
// service/efs): the emulator's own, so every case is emulator-only.

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
)

const (
	otherAccount = "111122223333"
	otherRole    = "arn:aws:iam::" + otherAccount + ":role/efs-csi"
	guardedRole  = "arn:aws:iam::" + otherAccount + ":role/path/guarded"
	fsDefault    = "fs-00000000000000000"
	fsOther      = "fs-11111111111111111"
)

// epoch is the emulator's fixed clock in these tests.
var epoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// accountsEnv is an emulator with two accounts: the default one owning
// fsDefault, otherAccount owning fsOther, with two roles of otherAccount.
func accountsEnv(t *testing.T) (url string, emu *emulator.Emulator) {
	t.Helper()
	emulatorOnly(t)
	return emulatortest.Start(t, emulator.Config{
		FileSystems:      []string{fsDefault},
		FileSystemOwners: map[string]string{fsOther: otherAccount},
		Roles:            []emulator.Role{{ARN: otherRole}, {ARN: guardedRole, ExternalID: "ext-123"}},
		Now:              func() time.Time { return epoch },
	})
}

func stsClient(url string, creds aws.Credentials) *sts.Client {
	return sts.New(sts.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(url),
		RetryMaxAttempts: 1,
		Credentials:      credentials(creds),
	})
}

func credentials(c aws.Credentials) aws.CredentialsProviderFunc {
	return func(context.Context) (aws.Credentials, error) { return c, nil }
}

// efsAs is an EFS client signing with creds.
func efsAs(url string, creds aws.Credentials) *efs.Client {
	return efs.New(efs.Options{Region: "us-east-1", BaseEndpoint: aws.String(url), RetryMaxAttempts: 1, Credentials: credentials(creds)})
}

func assume(t *testing.T, url, role, externalID string) aws.Credentials {
	t.Helper()
	in := &sts.AssumeRoleInput{RoleArn: aws.String(role), RoleSessionName: aws.String("efs-csi-driver")}
	if externalID != "" {
		in.ExternalId = aws.String(externalID)
	}
	out, err := stsClient(url, testCredentials).AssumeRole(t.Context(), in)
	if err != nil {
		t.Fatalf("AssumeRole %s: %v", role, err)
	}
	c := out.Credentials
	return aws.Credentials{AccessKeyID: *c.AccessKeyId, SecretAccessKey: *c.SecretAccessKey, SessionToken: *c.SessionToken}
}

func httpStatus(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func TestAssumeRoleIssuesTemporaryCredentialsOfTheRolesAccount(t *testing.T) {
	url, _ := accountsEnv(t)
	for _, tt := range []struct {
		name     string
		duration *int32
		want     time.Duration
	}{
		{"default duration is an hour", nil, time.Hour},
		{"the minimum, 15 minutes", aws.Int32(900), 15 * time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := stsClient(url, testCredentials).AssumeRole(t.Context(), &sts.AssumeRoleInput{
				RoleArn: aws.String(otherRole), RoleSessionName: aws.String("efs-csi-driver"), DurationSeconds: tt.duration,
			})
			if err != nil {
				t.Fatal(err)
			}
			c := out.Credentials
			if !strings.HasPrefix(aws.ToString(c.AccessKeyId), "ASIA") || aws.ToString(c.SecretAccessKey) == "" || aws.ToString(c.SessionToken) == "" {
				t.Errorf("credentials %+v: want an ASIA key, a secret and a session token", c)
			}
			if got := aws.ToTime(c.Expiration); !got.Equal(epoch.Add(tt.want)) {
				t.Errorf("Expiration %v, want %v", got, epoch.Add(tt.want))
			}
			if got, want := aws.ToString(out.AssumedRoleUser.Arn), "arn:aws:sts::"+otherAccount+":assumed-role/efs-csi/efs-csi-driver"; got != want {
				t.Errorf("AssumedRoleUser.Arn %s, want %s", got, want)
			}
		})
	}
}

// Each refusal STS would give, as the SDK reads it: the code and status.
func TestAssumeRoleRefusals(t *testing.T) {
	url, emu := accountsEnv(t)
	issued := assume(t, url, otherRole, "")
	emu.SetClockOffset(-2 * time.Hour) // issue one that is already past its hour
	expired := assume(t, url, otherRole, "")
	emu.SetClockOffset(0)
	for _, tt := range []struct {
		name       string
		caller     aws.Credentials
		role, ext  string
		duration   int32
		code       string
		wantStatus int
	}{
		{"unknown role", testCredentials, "arn:aws:iam::" + otherAccount + ":role/nope", "", 0, "AccessDenied", 403},
		{"required external ID missing", testCredentials, guardedRole, "", 0, "AccessDenied", 403},
		{"wrong external ID", testCredentials, guardedRole, "ext-999", 0, "AccessDenied", 403},
		{"malformed role ARN", testCredentials, "arn:aws:iam::12:role/x", "", 0, "ValidationError", 400},
		{"duration below 15 minutes", testCredentials, otherRole, "", 899, "ValidationError", 400},
		{"duration above the role's maximum", testCredentials, otherRole, "", 3601, "ValidationError", 400},
		{"unknown temporary key", aws.Credentials{AccessKeyID: "ASIAUNKNOWN", SecretAccessKey: "s", SessionToken: "t"}, otherRole, "", 0, "InvalidClientTokenId", 403},
		{"issued key with another session token", aws.Credentials{AccessKeyID: issued.AccessKeyID, SecretAccessKey: issued.SecretAccessKey, SessionToken: "forged"}, otherRole, "", 0, "InvalidClientTokenId", 403},
		{"expired caller", expired, otherRole, "", 0, "ExpiredToken", 403},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := &sts.AssumeRoleInput{RoleArn: aws.String(tt.role), RoleSessionName: aws.String("s1")}
			if tt.ext != "" {
				in.ExternalId = aws.String(tt.ext)
			}
			if tt.duration != 0 {
				in.DurationSeconds = aws.Int32(tt.duration)
			}
			_, err := stsClient(url, tt.caller).AssumeRole(t.Context(), in)
			wantCode(t, err, tt.code)
			if got := httpStatus(err); got != tt.wantStatus {
				t.Errorf("status %d, want %d", got, tt.wantStatus)
			}
		})
	}
	t.Run("right external ID", func(t *testing.T) { assume(t, url, guardedRole, "ext-123") })
	t.Run("an issued session may assume another role", func(t *testing.T) {
		if _, err := stsClient(url, issued).AssumeRole(t.Context(), &sts.AssumeRoleInput{
			RoleArn: aws.String(guardedRole), RoleSessionName: aws.String("s2"), ExternalId: aws.String("ext-123"),
		}); err != nil {
			t.Fatal(err)
		}
	})
}

// With accounts on, every EFS operation on a resource of another account is
// AccessDeniedException 403, the code pkg/efs classifies as access denied.
func TestEFSCallsOnAnotherAccountsFileSystemAreDenied(t *testing.T) {
	url, emu := accountsEnv(t)
	role := efsAs(url, assume(t, url, otherRole, ""))
	def := efsAs(url, testCredentials)
	ctx := t.Context()

	own, err := role.CreateAccessPoint(ctx, apInput(fsOther))
	if err != nil {
		t.Fatalf("the role's own file system: %v", err)
	}
	if got := aws.ToString(own.OwnerId); got != otherAccount {
		t.Errorf("OwnerId %s, want %s", got, otherAccount)
	}
	theirs, err := def.CreateAccessPoint(ctx, apInput(fsDefault))
	if err != nil {
		t.Fatalf("the default account's own file system: %v", err)
	}
	denied := map[string]func(c *efs.Client) error{
		"CreateAccessPoint": func(c *efs.Client) error { _, err := c.CreateAccessPoint(ctx, apInput(fsDefault)); return err },
		"DescribeAccessPoints by file system": func(c *efs.Client) error {
			_, err := c.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsDefault)})
			return err
		},
		"DescribeAccessPoints by ID": func(c *efs.Client) error {
			_, err := c.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{AccessPointId: theirs.AccessPointId})
			return err
		},
		"DeleteAccessPoint": func(c *efs.Client) error {
			_, err := c.DeleteAccessPoint(ctx, &efs.DeleteAccessPointInput{AccessPointId: theirs.AccessPointId})
			return err
		},
		"DescribeFileSystems by ID": func(c *efs.Client) error {
			_, err := c.DescribeFileSystems(ctx, &efs.DescribeFileSystemsInput{FileSystemId: aws.String(fsDefault)})
			return err
		},
		"DescribeMountTargets": func(c *efs.Client) error {
			_, err := c.DescribeMountTargets(ctx, &efs.DescribeMountTargetsInput{FileSystemId: aws.String(fsDefault)})
			return err
		},
		"ListTagsForResource": func(c *efs.Client) error {
			_, err := c.ListTagsForResource(ctx, &efs.ListTagsForResourceInput{ResourceId: theirs.AccessPointId})
			return err
		},
	}
	for name, call := range denied {
		t.Run(name, func(t *testing.T) {
			err := call(role)
			wantCode(t, err, "AccessDeniedException")
			if got := httpStatus(err); got != http.StatusForbidden {
				t.Errorf("status %d, want 403", got)
			}
		})
	}
	t.Run("the default account on the other's access point", func(t *testing.T) {
		_, err := def.DeleteAccessPoint(ctx, &efs.DeleteAccessPointInput{AccessPointId: own.AccessPointId})
		wantCode(t, err, "AccessDeniedException")
	})
	t.Run("listings show the caller's file systems only", func(t *testing.T) {
		for c, want := range map[*efs.Client]string{role: fsOther, def: fsDefault} {
			out, err := c.DescribeFileSystems(ctx, &efs.DescribeFileSystemsInput{})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.FileSystems) != 1 || aws.ToString(out.FileSystems[0].FileSystemId) != want {
				t.Errorf("listed %d file systems, want only %s", len(out.FileSystems), want)
			}
		}
	})
	t.Run("a file system the role creates is its account's", func(t *testing.T) {
		out, err := role.CreateFileSystem(ctx, &efs.CreateFileSystemInput{CreationToken: aws.String(token())})
		if err != nil {
			t.Fatal(err)
		}
		if aws.ToString(out.OwnerId) != otherAccount {
			t.Errorf("OwnerId %s, want %s", aws.ToString(out.OwnerId), otherAccount)
		}
		if _, err := def.DeleteFileSystem(ctx, &efs.DeleteFileSystemInput{FileSystemId: out.FileSystemId}); err == nil {
			t.Error("the default account deleted the role's file system")
		}
	})
	t.Run("an expired session is ExpiredTokenException", func(t *testing.T) {
		emu.SetClockOffset(time.Hour)
		defer emu.SetClockOffset(0)
		_, err := role.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsOther)})
		wantCode(t, err, "ExpiredTokenException")
	})
	t.Run("a temporary key without its session token is UnrecognizedClientException", func(t *testing.T) {
		c := assume(t, url, otherRole, "")
		c.SessionToken = ""
		_, err := efsAs(url, c).DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsOther)})
		wantCode(t, err, "UnrecognizedClientException")
	})
}

// Without accounts, nothing is checked: any key (even one shaped like a
// temporary key) is the default account's, as before accounts existed.
func TestWithoutAccountsEveryCallerIsTheDefaultAccount(t *testing.T) {
	emulatorOnly(t)
	url, _ := emulatortest.Start(t, emulator.Config{FileSystems: []string{fsDefault}})
	c := efsAs(url, aws.Credentials{AccessKeyID: "ASIAANYTHING", SecretAccessKey: "s"})
	out, err := c.CreateAccessPoint(t.Context(), apInput(fsDefault))
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(out.OwnerId) != emulator.DefaultAccount {
		t.Errorf("OwnerId %s, want %s", aws.ToString(out.OwnerId), emulator.DefaultAccount)
	}
	_, err = stsClient(url, testCredentials).AssumeRole(t.Context(), &sts.AssumeRoleInput{RoleArn: aws.String(otherRole), RoleSessionName: aws.String("s1")})
	wantCode(t, err, "AccessDenied") // no role is configured
}

// AssumeRole goes through fault injection like the EFS operations, answered
// in STS's spelling, and is counted.
func TestAssumeRoleFaults(t *testing.T) {
	url, emu := accountsEnv(t)
	for _, tt := range []struct {
		name       string
		fault      emulator.Fault
		code       string
		wantStatus int
	}{
		{"error", emulator.Fault{ErrorRate: 1}, "InternalFailure", 500},
		{"throttle", emulator.Fault{ThrottleRate: 0.001, ThrottleBurst: 1}, "Throttling", 400},
		{"lost answer", emulator.Fault{LostAnswerRate: 1, LostAnswerMode: emulator.Lost500}, "InternalFailure", 500},
	} {
		t.Run(tt.name, func(t *testing.T) {
			emu.ResetCounts()
			emu.SetFault(emulator.OpAssumeRole, tt.fault)
			defer emu.ResetFaults()
			c := stsClient(url, testCredentials)
			in := &sts.AssumeRoleInput{RoleArn: aws.String(otherRole), RoleSessionName: aws.String("s1")}
			if tt.fault.ThrottleRate > 0 {
				if _, err := c.AssumeRole(t.Context(), in); err != nil { // the bucket's one token
					t.Fatal(err)
				}
			}
			_, err := c.AssumeRole(t.Context(), in)
			wantCode(t, err, tt.code)
			if got := httpStatus(err); got != tt.wantStatus {
				t.Errorf("status %d, want %d", got, tt.wantStatus)
			}
			if n := emu.Counts()[emulator.OpAssumeRole]; n < 1 {
				t.Errorf("AssumeRole counted %d times", n)
			}
		})
	}
}

// Roles, access key accounts, owners and issued sessions survive a restart:
// a driver's cached credentials stay good across the emulator's restarts.
func TestAccountsSurviveARestart(t *testing.T) {
	emulatorOnly(t)
	dir := t.TempDir()
	e1, err := emulator.New(emulator.Config{DataDir: dir, FileSystemOwners: map[string]string{fsOther: otherAccount},
		Roles: []emulator.Role{{ARN: guardedRole, ExternalID: "ext-123"}}, AccessKeyAccounts: map[string]string{"AKIDOTHER": otherAccount}})
	if err != nil {
		t.Fatal(err)
	}
	url1 := serveEmulator(t, e1)
	issued := assume(t, url1, guardedRole, "ext-123")
	if err := e1.Close(); err != nil {
		t.Fatal(err)
	}
	url, e2 := emulatortest.Start(t, emulator.Config{DataDir: dir})
	got := e2.Accounts()
	if len(got.Roles) != 1 || got.Roles[0] != (emulator.Role{ARN: guardedRole, ExternalID: "ext-123"}) ||
		got.AccessKeys["AKIDOTHER"] != otherAccount || got.FileSystems[fsOther] != otherAccount {
		t.Errorf("after restart: %+v", got)
	}
	if _, err := efsAs(url, issued).DescribeAccessPoints(t.Context(), &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsOther)}); err != nil {
		t.Errorf("the session issued before the restart: %v", err)
	}
	_, err = efsAs(url, aws.Credentials{AccessKeyID: "AKIDOTHER", SecretAccessKey: "s"}).DescribeAccessPoints(t.Context(),
		&efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsOther)})
	if err != nil {
		t.Errorf("the static key of the other account: %v", err)
	}
}

// serveEmulator serves e on a loopback port until e is closed.
func serveEmulator(t *testing.T, e *emulator.Emulator) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.Serve(l) }()
	return "http://" + l.Addr().String()
}

// The control endpoint configures accounts as Config does.
func TestControlEndpointConfiguresAccounts(t *testing.T) {
	url, _ := accountsEnv(t)
	v := &env{t: t, url: url}
	status, _, body := v.raw(http.MethodPut, "/_emulator/accounts",
		`{"roles":[{"arn":"arn:aws:iam::444455556666:role/third"}],"fileSystems":{"fs-44444444444444444":"444455556666"}}`)
	if status != http.StatusOK {
		t.Fatalf("PUT accounts: %d %s", status, body)
	}
	role := efsAs(url, assume(t, url, "arn:aws:iam::444455556666:role/third", ""))
	if _, err := role.DescribeMountTargets(t.Context(), &efs.DescribeMountTargetsInput{FileSystemId: aws.String("fs-44444444444444444")}); err != nil {
		t.Errorf("the third account's seeded file system: %v", err)
	}
	if status, _, body := v.raw(http.MethodPut, "/_emulator/accounts", `{"roles":[{"arn":"not-an-arn"}]}`); status != http.StatusBadRequest {
		t.Errorf("a malformed role: %d %s, want 400", status, body)
	}
	if status, _, body := v.raw(http.MethodPut, "/_emulator/clock", `{"offset":"2h"}`); status != http.StatusOK {
		t.Fatalf("PUT clock: %d %s", status, body)
	}
	_, err := role.DescribeMountTargets(t.Context(), &efs.DescribeMountTargetsInput{FileSystemId: aws.String("fs-44444444444444444")})
	wantCode(t, err, "ExpiredTokenException")
}

// STS is told from EFS by the credential scope: a POST to "/" signed for
// elasticfilesystem is no STS call.
func TestPostToRootSignedForEFSIsNoSTSCall(t *testing.T) {
	url, emu := accountsEnv(t)
	v := &env{t: t, url: url}
	status, code, _ := v.raw(http.MethodPost, "/", "Action=AssumeRole&Version=2011-06-15&RoleArn="+otherRole+"&RoleSessionName=s1")
	if status != http.StatusNotFound || code != "UnknownOperationException" {
		t.Errorf("answered %d %s, want 404 UnknownOperationException", status, code)
	}
	if n := emu.Counts()[emulator.OpAssumeRole]; n != 0 {
		t.Errorf("counted %d AssumeRole calls", n)
	}
}
