// Package mountefs runs a test with the test mount.efs helper (see
// ./helper) installed as /sbin/mount.efs, so that the real `mount -t efs`
// of util-linux runs it, without changing the machine: the test runs again,
// in a re-executed test binary, inside a private mount namespace and a PID
// namespace of its own (unshare -m -p) where an overlay over /sbin's
// directory adds the helper. Mounts made in there are invisible outside and
// vanish with the namespace, its processes with its PID 1, the test.
//
// The helper is a stand-in for the tests that need data through the mount;
// package realefs runs the real efs-utils (without data: no NFS client).
package mountefs

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/internal/testutil/mountefs/spec"
)

const envInside = "MOUNTEFS_HELPER_DIR"

// Helper is the installed helper, seen from inside the namespace.
type Helper struct {
	Dir        string // holds sbin/mount.efs and the configuration file
	Bin        string // the helper binary; run with "watchdog" it is the watchdog
	configPath string
}

// WatchdogArgs are the arguments that make Bin the watchdog.
var WatchdogArgs = []string{"watchdog"}

// Setup, called first by a top-level test, makes the test run with the
// helper installed. In the test's own process it builds the helper, runs
// this test again in a private mount namespace, reports its output and
// outcome, and returns nil: the caller returns at once. In the re-executed
// process it returns the Helper.
func Setup(t *testing.T) *Helper {
	t.Helper()
	if dir := os.Getenv(envInside); dir != "" {
		install(t, dir)
		return &Helper{Dir: dir, Bin: filepath.Join(dir, "sbin", "mount.efs"), configPath: filepath.Join(dir, "helper.json")}
	}
	if os.Geteuid() != 0 {
		t.Skip("the mount.efs helper needs root (mount namespaces, mounts)")
	}
	if strings.Contains(t.Name(), "/") {
		t.Fatal("mountefs.Setup: call it from a top-level test")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare(1) not installed")
	}
	dir := t.TempDir()
	build(t, dir)
	// A PID namespace too: the test is PID 1, as the driver in its container,
	// and whatever it leaves running (a tunnel the watchdog had no time to
	// stop) dies with it.
	args := []string{"--mount", "--pid", "--fork", "--mount-proc", "--propagation", "private", os.Args[0],
		"-test.run=^" + regexp.QuoteMeta(t.Name()) + "$", "-test.count=1", "-test.v"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), envInside+"="+dir)
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		t.Log(line)
	}
	if err != nil {
		t.Fatalf("the test in its mount namespace: %v", err)
	}
	if strings.Contains(string(out), "--- SKIP: "+t.Name()) {
		t.Skip("skipped in its mount namespace")
	}
	return nil
}

// build compiles the helper into dir/sbin/mount.efs, its configuration
// path fixed to dir/helper.json.
func build(t *testing.T, dir string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "helper")
	out := filepath.Join(dir, "sbin", "mount.efs")
	cmd := exec.Command(goBin, "build", "-o", out,
		"-ldflags", "-X main.configPath="+filepath.Join(dir, "helper.json"), ".")
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the mount.efs helper: %v\n%s", err, b)
	}
}

var installOnce sync.Once

// install overlays dir/sbin on the real /sbin directory, in this process's
// (private) mount namespace.
func install(t *testing.T, dir string) {
	t.Helper()
	var err error
	installOnce.Do(func() {
		var sbin string
		if sbin, err = filepath.EvalSymlinks("/sbin"); err != nil {
			return
		}
		err = unix.Mount("overlay", sbin, "overlay", 0, "lowerdir="+filepath.Join(dir, "sbin")+":"+sbin)
	})
	if err != nil {
		t.Fatalf("install /sbin/mount.efs: %v", err)
	}
	if _, err := os.Stat("/sbin/mount.efs"); err != nil {
		t.Fatalf("install /sbin/mount.efs: %v", err)
	}
}

// Configure writes the helper's configuration (it is read by every run).
func (h *Helper) Configure(t testing.TB, c spec.Config) {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.configPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// States reads efs-utils' state files in dir, by file name.
func States(t testing.TB, dir string) map[string]spec.State {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]spec.State{}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "fs-") || e.IsDir() { // fs-X...+: a TLS mount's directory
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // removed by the watchdog meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		var st spec.State
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("state file %s: %v", e.Name(), err)
		}
		out[e.Name()] = st
	}
	return out
}

// Invocations reads the helper's invocation log.
func Invocations(t testing.TB, path string) []spec.Invocation {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []spec.Invocation
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var inv spec.Invocation
		if err := json.Unmarshal(sc.Bytes(), &inv); err != nil {
			t.Fatal(err)
		}
		out = append(out, inv)
	}
	return out
}
