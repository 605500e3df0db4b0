//go:build e2e

// The end-to-end suite: a real etcd, kube-apiserver, kube-controller-manager and
// csi-provisioner on loopback, with the driver and the EFS emulator built from this
// repository. Run it with `make e2e` (or `go test -tags e2e ./...` in test/e2e).
//
// Environment:
//
//	EFS_E2E_BUILD=0      never build the components: skip when they are not cached
//	EFS_E2E_CACHE=DIR    component cache (default /var/cache/efs-csi-e2e)
//	EFS_E2E_BIN_DIR=DIR  take efs-csi-driver and efs-emulator from DIR instead of building
//	EFS_E2E_KEEP=1       keep the working directory (logs, etcd data) after the run
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/test/e2e/cluster"
)

// suite is what every test shares: one control plane serves them all, each test using
// object names of its own.
type suite struct {
	repo    string
	dir     string
	comps   cluster.Components
	cluster *cluster.Cluster
	bins    string // directory holding efs-csi-driver and efs-emulator
}

var (
	shared *suite
	// skipReason is set when the suite cannot run here; every test then skips with it.
	skipReason string
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))

	s, code, err := setUp(ctx, repo)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e setup: %v\n", err)
		if s != nil && s.cluster != nil {
			s.cluster.Tail(os.Stderr, 40)
		}
		return code
	}
	shared = s
	code = m.Run()
	if s.cluster != nil {
		fmt.Printf("e2e: control plane stopped in %v\n", s.cluster.Stop().Round(time.Millisecond))
		if code != 0 {
			s.cluster.Tail(os.Stdout, 40)
		}
	}
	if os.Getenv("EFS_E2E_KEEP") == "1" || code != 0 {
		fmt.Printf("e2e: logs and data kept in %s\n", s.dir)
	} else {
		_ = os.RemoveAll(s.dir)
	}
	return code
}

// setUp finds or builds the components and binaries and starts the control plane. A
// missing component with EFS_E2E_BUILD=0 is not an error: the tests skip.
func setUp(ctx context.Context, repo string) (*suite, int, error) {
	s := &suite{repo: repo}
	build := os.Getenv("EFS_E2E_BUILD") != "0"
	start := time.Now()
	comps, err := cluster.LoadComponents(ctx, repo, build, os.Stderr)
	switch {
	case errors.Is(err, cluster.ErrComponentsMissing) && !build:
		skipReason = fmt.Sprintf("%v; EFS_E2E_BUILD=0 forbids building them (run hack/e2e-components.sh, about 20 min on 2 cores)", err)
		return s, 0, nil
	case err != nil:
		return nil, 1, err
	}
	s.comps = comps
	fmt.Printf("e2e: components ready in %v\n", time.Since(start).Round(time.Millisecond))

	if s.dir, err = os.MkdirTemp("", "efs-e2e-"); err != nil {
		return nil, 1, err
	}
	if s.bins, err = driverBinaries(ctx, repo, s.dir); err != nil {
		return nil, 1, err
	}
	cl, tm, err := cluster.Start(ctx, comps, s.dir)
	s.cluster = cl
	if err != nil {
		return s, 1, err
	}
	fmt.Printf("e2e: control plane up in %v (etcd %v, kube-apiserver %v)\n",
		tm.Total.Round(time.Millisecond), tm.Etcd.Round(time.Millisecond), tm.APIServer.Round(time.Millisecond))
	return s, 0, nil
}

// driverBinaries returns the directory of efs-csi-driver and efs-emulator: EFS_E2E_BIN_DIR
// (make e2e builds bin/ first), or a fresh build of this checkout, so that the test
// never runs stale binaries.
func driverBinaries(ctx context.Context, repo, dir string) (string, error) {
	if d := os.Getenv("EFS_E2E_BIN_DIR"); d != "" {
		for _, b := range []string{"efs-csi-driver", "efs-emulator"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				return "", fmt.Errorf("EFS_E2E_BIN_DIR: %w", err)
			}
		}
		return d, nil
	}
	out := filepath.Join(dir, "bin")
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out+"/", "./cmd/efs-csi-driver", "./cmd/efs-emulator")
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build the driver and emulator: %w\n%s", err, b)
	}
	fmt.Printf("e2e: driver and emulator built in %v\n", time.Since(start).Round(time.Millisecond))
	return out, nil
}

// env returns the shared suite, or skips the test when it cannot run here.
func env(t *testing.T) *suite {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	if err := shared.cluster.Alive(); err != nil {
		t.Fatalf("control plane: %v", err)
	}
	return shared
}
