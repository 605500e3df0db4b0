package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/cli/clitest"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/iam"
	"github.com/efs-csi/efs-csi-driver/internal/testutil"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/efs/types"
)

// The command line is a contract: external tests start the emulator with it.
// These run the real command (this test binary, re-executed as main).

const beMainEnv = "EFS_EMULATOR_TEST_BE_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(beMainEnv) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func command(args ...string) (*exec.Cmd, *testutil.Buffer) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), beMainEnv+"=1")
	log := &testutil.Buffer{}
	cmd.Stderr = log
	return cmd, log
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs the command and waits until it answers on addr.
func start(t *testing.T, addr string, args ...string) (*exec.Cmd, *testutil.Buffer) {
	t.Helper()
	cmd, log := command(append([]string{"--listen", addr}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/_emulator/healthz")
		if err == nil {
			resp.Body.Close()
			return cmd, log
		}
		if time.Now().After(deadline) {
			t.Fatalf("emulator not answering after 10s: %v\n%s", err, log)
		}
		time.Sleep(20 * time.Millisecond) // waiting for the process to listen
	}
}

// stop sends SIGTERM and expects a clean exit.
func stop(t *testing.T, cmd *exec.Cmd, log *testutil.Buffer) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, log)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10s after SIGTERM\n%s", log)
	}
}

func client(addr string) *efs.Client {
	return efs.New(efs.Options{
		Region: "us-west-2", BaseEndpoint: aws.String("http://" + addr), RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "any", SecretAccessKey: "any"}, nil
		}),
	})
}

func TestCommandLineServesConfiguresAndStopsCleanly(t *testing.T) {
	ctx := context.Background()
	dir, addr := t.TempDir(), freeAddr(t)
	args := []string{"--data-dir", dir, "--file-system", "fs-0123456789abcdef0", "--file-system", "fs-00000000000000002",
		"--access-point-limit", "2", "--lenient-client-token", "--latency", "DescribeFileSystems=1ms~1ms", "--throttle", "DeleteAccessPoint=0.001:1"}
	cmd, log := start(t, addr, args...)
	c := client(addr)

	fss, err := c.DescribeFileSystems(ctx, &efs.DescribeFileSystemsInput{})
	if err != nil || len(fss.FileSystems) != 2 {
		t.Fatalf("DescribeFileSystems: %v %+v, want the 2 file systems of --file-system", err, fss)
	}
	in := func(tok string) *efs.CreateAccessPointInput {
		return &efs.CreateAccessPointInput{FileSystemId: aws.String("fs-0123456789abcdef0"), ClientToken: aws.String(tok)}
	}
	first, err := c.CreateAccessPoint(ctx, in("a"))
	if err != nil {
		t.Fatalf("CreateAccessPoint: %v", err)
	}
	again, err := c.CreateAccessPoint(ctx, in("a"))
	if err != nil || *again.AccessPointId != *first.AccessPointId {
		t.Fatalf("--lenient-client-token: repeat gave %v, %v", again, err)
	}
	if _, err := c.CreateAccessPoint(ctx, in("b")); err != nil {
		t.Fatalf("CreateAccessPoint: %v", err)
	}
	var limit *types.AccessPointLimitExceeded
	if _, err := c.CreateAccessPoint(ctx, in("c")); !errors.As(err, &limit) {
		t.Fatalf("--access-point-limit 2: third create gave %v", err)
	}
	var throttled interface{ ErrorCode() string }
	for range 2 {
		_, err = c.DeleteAccessPoint(ctx, &efs.DeleteAccessPointInput{AccessPointId: first.AccessPointId})
	}
	if !errors.As(err, &throttled) || throttled.ErrorCode() != "ThrottlingException" {
		t.Fatalf("--throttle DeleteAccessPoint=0.001:1: second delete gave %v", err)
	}
	stop(t, cmd, log)
	if n := strings.Count(log.String(), "msg=request"); n < 7 {
		t.Errorf("%d request log lines for 7 requests:\n%s", n, log)
	}

	// Started again on the same data dir, it has kept everything.
	cmd, log = start(t, addr, "--data-dir", dir, "--file-system", "fs-0123456789abcdef0")
	aps, err := client(addr).DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{FileSystemId: aws.String("fs-0123456789abcdef0")})
	if err != nil || len(aps.AccessPoints) != 1 {
		t.Fatalf("after restart: %v, %+v, want the one access point left", err, aps)
	}
	stop(t, cmd, log)
}

func TestCommandLineRejectsBadFlags(t *testing.T) {
	dir := t.TempDir()
	for name, args := range map[string][]string{
		"no data dir":         {"--listen", "127.0.0.1:0"},
		"malformed fs ID":     {"--data-dir", dir, "--file-system", "fs-nothex"},
		"bad fault flag":      {"--data-dir", dir, "--error-rate", "CreateAccessPoint=2"},
		"unknown flag":        {"--data-dir", dir, "--region", "us-east-1"},
		"positional argument": {"--data-dir", dir, "extra"},
	} {
		t.Run(name, func(t *testing.T) {
			cmd, log := command(args...)
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("exit %v, want a failure\n%s", err, log)
			}
		})
	}
}

func TestCommandLineIAMPolicyFlagRefusesMissingAndMalformedFiles(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"Statement":{"Effect":"Allow","Resource":"*"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.json")
	for name, tc := range map[string]struct {
		file string
		want []string
	}{
		"missing file":   {missing, []string{"iam-policy", missing, "no such file"}},
		"malformed file": {bad, []string{"iam-policy", bad, "invalid IAM policy", "missing Action"}},
	} {
		t.Run(name, func(t *testing.T) {
			cmd, log := command("--data-dir", dir, "--iam-policy", tc.file)
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("exit %v, want a failure\n%s", err, log)
			}
			for _, w := range tc.want {
				if !strings.Contains(log.String(), w) {
					t.Errorf("stderr does not say %q:\n%s", w, log)
				}
			}
		})
	}
}

func TestCommandLineIAMPoliciesAreEvaluated(t *testing.T) {
	ctx := context.Background()
	dir, addr := t.TempDir(), freeAddr(t)
	managed := filepath.Join(dir, "managed.json")
	deny := filepath.Join(dir, "deny.json")
	if err := errors.Join(os.WriteFile(managed, []byte(iam.ManagedPolicy), 0o600),
		os.WriteFile(deny, []byte(`{"Statement":{"Effect":"Deny","Action":"elasticfilesystem:DescribeMountTargets","Resource":"*"}}`), 0o600)); err != nil {
		t.Fatal(err)
	}
	cmd, log := start(t, addr, "--data-dir", filepath.Join(dir, "data"), "--file-system", "fs-0123456789abcdef0",
		"--iam-policy", managed, "--iam-policy", deny)
	c := client(addr)
	in := func(kv ...string) *efs.CreateAccessPointInput {
		in := &efs.CreateAccessPointInput{FileSystemId: aws.String("fs-0123456789abcdef0"), ClientToken: aws.String(strings.Join(kv, "-") + "x")}
		for i := 0; i+1 < len(kv); i += 2 {
			in.Tags = append(in.Tags, types.Tag{Key: aws.String(kv[i]), Value: aws.String(kv[i+1])})
		}
		return in
	}
	if _, err := c.CreateAccessPoint(ctx, in("efs.csi.aws.com/cluster", "true")); err != nil {
		t.Fatalf("create with the cluster tag: %v", err)
	}
	var denied interface{ ErrorCode() string }
	_, err := c.CreateAccessPoint(ctx, in("efs.csi.aws.com/cluster", "true", "team", "a"))
	if !errors.As(err, &denied) || denied.ErrorCode() != "AccessDeniedException" {
		t.Fatalf("create with an extra tag: %v, want AccessDeniedException", err)
	}
	_, err = c.DescribeMountTargets(ctx, &efs.DescribeMountTargetsInput{FileSystemId: aws.String("fs-0123456789abcdef0")})
	if !errors.As(err, &denied) || denied.ErrorCode() != "AccessDeniedException" || !strings.Contains(err.Error(), "explicit deny") {
		t.Fatalf("DescribeMountTargets under the second policy's Deny: %v", err)
	}
	stop(t, cmd, log)
	if !strings.Contains(log.String(), "deniedAction=elasticfilesystem:DescribeMountTargets") {
		t.Errorf("the log does not name the denied action:\n%s", log)
	}
}

// A bad command line is one line naming the flag or argument, with a hint,
// exit 2 (before: an unknown flag printed the whole usage, exit 1).
func TestCommandLineErrorsAreOneLine(t *testing.T) {
	clitest.Run(t, []string{beMainEnv + "=1"}, []clitest.Case{
		{Name: "help", Args: []string{"--help"}, Stdout: []string{"-data-dir directory"}},
		{Name: "unknown flag", Args: []string{"--data-dir=/tmp/x", "--filesystem=fs-1"}, Code: 2,
			Stderr: "efs-emulator: unknown flag --filesystem; run 'efs-emulator --help'\n"},
		{Name: "stray argument", Args: []string{"--data-dir=/tmp/x", "fs-1", "--listen=127.0.0.1:0"}, Code: 2,
			Stderr: "efs-emulator: unexpected argument \"fs-1\": the command takes flags only (a flag after it would be ignored); run 'efs-emulator --help'\n"},
		{Name: "bad value", Args: []string{"--access-point-limit=many"}, Code: 2,
			Stderr: "efs-emulator: invalid value \"many\" for flag -access-point-limit: parse error; run 'efs-emulator --help'\n"},
	})
}
