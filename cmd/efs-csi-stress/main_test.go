package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/internal/cli/clitest"
)

// These run the real command (this test binary, re-executed as main).

const beMainEnv = "EFS_CSI_STRESS_TEST_BE_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(beMainEnv) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A bad command line is one line naming the flag or argument, with a hint,
// exit 2 (before: an unknown flag printed the whole usage); --help lists the
// exit statuses.
func TestCommandLineErrorsAreOneLine(t *testing.T) {
	clitest.Run(t, []string{beMainEnv + "=1"}, []clitest.Case{
		{Name: "help lists the exit statuses", Args: []string{"--help"},
			Stdout: []string{"usage: efs-csi-stress [flags]", "Exit status:\n  0  clean", "  3  claims never got a volume", "(errors, random-throttle", "-volumes int"}},
		{Name: "unknown flag", Args: []string{"--embedded", "--volume=3"}, Code: 2,
			Stderr: "efs-csi-stress: unknown flag --volume; run 'efs-csi-stress --help'\n"},
		{Name: "stray argument", Args: []string{"--embedded", "100", "--volumes=3"}, Code: 2,
			Stderr: "efs-csi-stress: unexpected argument \"100\": the command takes flags only (a flag after it would be ignored); run 'efs-csi-stress --help'\n"},
	})
}

// A run whose every create is denied exits 3 (before: CLEAN, exit 0).
func TestEveryCreateFailingExits3(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the driver")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "efs-csi-driver")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/efs-csi/efs-csi-driver/cmd/efs-csi-driver").CombinedOutput(); err != nil {
		t.Fatalf("go build driver: %v\n%s", err, out)
	}
	policy := filepath.Join(dir, "deny-create.json")
	if err := os.WriteFile(policy, []byte(`{"Version": "2012-10-17", "Statement": [
		{"Effect": "Allow", "Action": "elasticfilesystem:*", "Resource": "*"},
		{"Effect": "Deny", "Action": "elasticfilesystem:CreateAccessPoint", "Resource": "*"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "--embedded", "--driver-binary="+bin, "--iam-policy="+policy, "--volumes=8",
		"--fault-profile=none", "--chaos=false", "--progress=false", "--out-dir="+filepath.Join(dir, "out"))
	cmd.Env = append(os.Environ(), beMainEnv+"=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("err %v, want exit status 3\n%s", err, out)
	}
	// Every create is denied; a claim the workload deletes while it is
	// being provisioned does not count, so "N of 8" depends on the run.
	if !strings.Contains(string(out), "result: CREATES-FAILED") || !strings.Contains(string(out), " of 8 claims never got a volume") {
		t.Errorf("output:\n%s", out)
	}
}
