// Package realefs runs a test against the real amazon-efs-utils: the pinned release
// tarball (hack/versions) installed by hack/install-efs-utils.sh, the image's one install
// step, into a private root, whose mount.efs, mount.s3files and watchdog then run for real
// (Debian's python3 with python3-botocore, and stunnel4). Only what cannot run on a test
// machine is stubbed (see ./stub): the kernel's NFS client behind /sbin/mount.nfs4, and
// efs-proxy, whose Rust crates cannot be fetched here.
//
// The test runs again, in a re-executed test binary, in namespaces of its own (unshare
// --mount --net --pid): there the private root is laid over the machine's directories as
// the image lays them out (/sbin/mount.efs, /usr/bin/amazon-efs-mount-watchdog,
// /etc/amazon/efs-static-files...; overlays with writable upper layers for /etc, /run and
// /var/log), its loopback interface has 169.254.169.254, where the test serves the EC2
// instance metadata efs-utils and the driver ask for (ServeIMDS), and the test is PID 1,
// as the driver is in its container (efs-utils then sees no systemd, and orphans come to
// it). Nothing of this is visible outside, and everything started in there dies with it.
// /sys is read-only in there: efs-utils' read-ahead tuning writes to it after a mount.
//
// The tarball is found at $EFS_UTILS_TARBALL or ../shared/fixtures/efs-utils-VERSION.tar.gz
// from the repository root, and must have the pinned sha256. Without root, the tarball or
// the Debian packages the helpers need, the test is skipped, except under CI (CI set),
// where that is a failure: .ci/run installs them and CI has the tarball.
package realefs

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/internal/testutil/realefs/spec"
)

// TarballEnv names the environment variable with the tarball's path.
const TarballEnv = "EFS_UTILS_TARBALL"

const envInside = "REALEFS_DIR"

// StateDir is efs-utils' state directory (one state file per mount with a tunnel).
const StateDir = "/var/run/efs"

// LogDir is efs-utils' log directory (mount.log, mount-watchdog.log).
const LogDir = "/var/log/amazon/efs"

// ImagePath is the PATH of the image (debian's default): /usr/bin/python3 is Debian's.
const ImagePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Env is the namespace a test runs in, seen from inside.
type Env struct {
	Root    string // DESTDIR of hack/install-efs-utils.sh
	Version string // the pinned efs-utils version
	StubDir string // the stubs' call log and control files
	Scratch string // overlays' upper layers
}

// Pin is hack/versions' efs-utils version and tarball sha256.
func Pin(t testing.TB) (version, sha string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(RepoRoot(t), "hack", "versions"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "EFS_UTILS_VERSION="); ok {
			version = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "EFS_UTILS_SHA256="); ok {
			sha = strings.TrimSpace(v)
		}
	}
	if version == "" || sha == "" {
		t.Fatal("hack/versions has no EFS_UTILS_VERSION or EFS_UTILS_SHA256")
	}
	return version, sha
}

// RepoRoot is the repository's root directory.
func RepoRoot(t testing.TB) string {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(self), "..", "..", "..")
}

// Tarball returns the pinned release tarball, its sha256 checked. Where it is missing it
// skips the test, or fails it under CI.
func Tarball(t testing.TB) string {
	t.Helper()
	version, sha := Pin(t)
	path := os.Getenv(TarballEnv)
	if path == "" {
		path = filepath.Join(RepoRoot(t), "..", "shared", "fixtures", "efs-utils-"+version+".tar.gz")
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		unavailable(t, "the efs-utils %s release tarball is not at %s (set $%s to its path)", version, path, TarballEnv)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sha {
		t.Fatalf("%s: sha256 %s, want hack/versions' %s (efs-utils %s)", path, got, sha, version)
	}
	return path
}

// unavailable skips the test, or fails it under CI, which must run it.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s: CI must run the real efs-utils helpers (.ci/run installs what they need)", msg)
	}
	t.Skipf("real efs-utils helpers: %s", msg)
}

// Setup, called first by a top-level test, makes the test run against the real efs-utils.
// In the test's own process it installs the tarball with hack/install-efs-utils.sh into a
// private root, builds the stubs into it, runs this test again in its namespaces, reports
// its output and outcome, and returns nil: the caller returns at once. In the re-executed
// process it lays the root out and returns the Env.
func Setup(t *testing.T) *Env {
	t.Helper()
	if dir := os.Getenv(envInside); dir != "" {
		return inside(t, dir)
	}
	if strings.Contains(t.Name(), "/") {
		t.Fatal("realefs.Setup: call it from a top-level test")
	}
	if os.Geteuid() != 0 {
		t.Skip("the real efs-utils helpers need root (namespaces, mounts)")
	}
	for _, cmd := range []string{"unshare", "ip", "mount", "stunnel", "openssl", "which", "bash"} {
		if _, err := exec.LookPath(cmd); err != nil {
			unavailable(t, "%s is not installed", cmd)
		}
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", "import botocore").CombinedOutput(); err != nil {
		unavailable(t, "Debian's python3 with botocore (python3-botocore): %v: %s", err, bytes.TrimSpace(out))
	}
	tarball := Tarball(t)
	version, _ := Pin(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	Install(t, root, tarball)
	buildStubs(t, root, filepath.Join(dir, "stub"))

	args := []string{"--mount", "--net", "--pid", "--fork", "--mount-proc", "--propagation", "private",
		os.Args[0], "-test.run=^" + regexp.QuoteMeta(t.Name()) + "$", "-test.count=1", "-test.v", "-test.timeout=5m"}
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(cleanEnv(), envInside+"="+dir, "REALEFS_VERSION="+version)
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		t.Log(line)
	}
	if err != nil {
		t.Fatalf("the test in its namespaces: %v", err)
	}
	if strings.Contains(string(out), "--- SKIP: "+t.Name()) {
		t.Skip("skipped in its namespaces")
	}
	return nil
}

// cleanEnv is the environment without what would steer efs-utils or the AWS SDK away
// from the test's instance metadata (AWS_*), with the image's PATH.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "AWS_") || strings.HasPrefix(kv, "PATH=") || strings.HasPrefix(kv, "ECS_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PATH="+ImagePath)
}

// Install runs hack/install-efs-utils.sh DESTDIR TARBALL, as the Dockerfile does, with
// the pins of hack/versions.
func Install(t testing.TB, destdir, tarball string) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(RepoRoot(t), "hack", "install-efs-utils.sh"), destdir, tarball)
	cmd.Env = cleanEnv()
	for i, kv := range cmd.Env {
		if strings.HasPrefix(kv, "EFS_UTILS_") {
			cmd.Env[i] = "IGNORED_" + kv
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/install-efs-utils.sh: %v\n%s", err, out)
	}
}

// buildStubs builds ./stub as root/sbin/mount.nfs4 and root/usr/bin/efs-proxy (one
// binary, two names), recording into stubDir.
func buildStubs(t *testing.T, root, stubDir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(stubDir, spec.ControlDir), 0o755); err != nil {
		t.Fatal(err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	_, self, _, _ := runtime.Caller(0)
	bin := filepath.Join(root, "sbin", "mount.nfs4")
	cmd := exec.Command(goBin, "build", "-o", bin, "-ldflags", "-X main.dir="+stubDir, ".")
	cmd.Dir = filepath.Join(filepath.Dir(self), "stub")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the stubs: %v\n%s", err, out)
	}
	if err := os.Link(bin, filepath.Join(root, "usr", "bin", spec.EFSProxy)); err != nil {
		t.Fatal(err)
	}
}

var setupOnce sync.Once

func inside(t *testing.T, dir string) *Env {
	t.Helper()
	e := &Env{Root: filepath.Join(dir, "root"), Version: os.Getenv("REALEFS_VERSION"),
		StubDir: filepath.Join(dir, "stub"), Scratch: filepath.Join(dir, "scratch")}
	var err error
	setupOnce.Do(func() { err = e.layOut() })
	if err != nil {
		t.Fatalf("real efs-utils namespace: %v", err)
	}
	for _, p := range []string{"/sbin/mount.efs", "/sbin/mount.s3files", "/sbin/mount.nfs4", "/usr/bin/amazon-efs-mount-watchdog",
		"/usr/bin/efs-proxy", "/etc/amazon/efs-static-files/efs-utils.crt"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("real efs-utils namespace: %v", err)
		}
	}
	return e
}

// layOut sets the namespace up: loopback with the metadata address, /sys read-only, the
// private root over the machine's directories.
func (e *Env) layOut() error {
	if os.Getpid() != 1 {
		return fmt.Errorf("the test is PID %d, not 1 of its PID namespace", os.Getpid())
	}
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", "169.254.169.254/32", "dev", "lo"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	if err := unix.Mount("/sys", "/sys", "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind /sys: %w", err)
	}
	if err := unix.Mount("", "/sys", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("/sys read-only: %w", err)
	}
	for _, o := range []struct {
		dir, lower string
		writable   bool
	}{
		{"/sbin", "sbin", false},
		{"/usr/bin", "usr/bin", false},
		{"/etc", "etc", true},
		{"/var/log", "var/log", true},
		{"/run", "", true},
	} {
		if err := e.overlay(o.dir, o.lower, o.writable); err != nil {
			return err
		}
	}
	return os.MkdirAll(StateDir, 0o750)
}

// overlay lays Root/lower (if any) over dir, with a writable upper layer in Scratch if
// writable.
func (e *Env) overlay(dir, lower string, writable bool) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	lowers := real
	if lower != "" {
		lowers = filepath.Join(e.Root, lower) + ":" + real
	}
	opts := "lowerdir=" + lowers
	if writable {
		up := filepath.Join(e.Scratch, strings.ReplaceAll(strings.Trim(real, "/"), "/", "-"))
		for _, d := range []string{"upper", "work"} {
			if err := os.MkdirAll(filepath.Join(up, d), 0o755); err != nil {
				return err
			}
		}
		opts += ",upperdir=" + filepath.Join(up, "upper") + ",workdir=" + filepath.Join(up, "work")
	}
	if err := unix.Mount("overlay", real, "overlay", 0, opts); err != nil {
		return fmt.Errorf("overlay on %s (%s): %w", real, opts, err)
	}
	return nil
}

// AddHosts adds name -> address lines to /etc/hosts (the namespace's): the DNS names of
// mount targets that efs-utils resolves.
func (e *Env) AddHosts(t testing.TB, hosts map[string]string) {
	t.Helper()
	f, err := os.OpenFile("/etc/hosts", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, ip := range hosts {
		if _, err := fmt.Fprintf(f, "%s\t%s\n", ip, name); err != nil {
			t.Fatal(err)
		}
	}
}

// ServeNFS listens on ip:2049 (an address of the loopback interface) and closes every
// connection: a mount target efs-utils can reach, for its mounttargetip check.
func (e *Env) ServeNFS(t testing.TB, ip string) {
	t.Helper()
	if !strings.HasPrefix(ip, "127.") {
		t.Fatalf("mount target %s: use a loopback address", ip)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "2049"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// FailMount makes mount.nfs4 fail for target.
func (e *Env) FailMount(t testing.TB, target string) {
	t.Helper()
	if err := os.WriteFile(e.control(target), []byte("fail\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// HangMount makes mount.nfs4 hang for target until ReleaseMount.
func (e *Env) HangMount(t testing.TB, target string) {
	t.Helper()
	if err := unix.Mkfifo(e.control(target), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ReleaseMount ends mount.nfs4's hang on target with verdict ("fail" or "ok"). The
// hanging mount.nfs4 must be there (WaitCall first).
func (e *Env) ReleaseMount(t testing.TB, target, verdict string) {
	t.Helper()
	f, err := os.OpenFile(e.control(target), os.O_WRONLY|unix.O_NONBLOCK, 0)
	if err != nil { // ENXIO: no reader
		t.Fatalf("release the mount of %s: %v", target, err)
	}
	defer f.Close()
	if _, err := f.WriteString(verdict + "\n"); err != nil {
		t.Fatal(err)
	}
}

func (e *Env) control(target string) string {
	return filepath.Join(e.StubDir, spec.ControlDir, spec.ControlName(target))
}

// Calls reads the stubs' call log.
func (e *Env) Calls(t testing.TB) []spec.Call {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.StubDir, spec.CallLog))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []spec.Call
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var c spec.Call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("call log: %v: %s", err, sc.Bytes())
		}
		out = append(out, c)
	}
	return out
}

// States reads efs-utils' state files, by name (the temporary ~ files of a mount in
// progress are not state files yet).
func States(t testing.TB) map[string]spec.State {
	t.Helper()
	ents, err := os.ReadDir(StateDir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]spec.State{}
	for _, ent := range ents {
		if !strings.HasPrefix(ent.Name(), "fs-") || ent.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(StateDir, ent.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // the watchdog removed it meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		var st spec.State
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("state file %s: %v: %s", ent.Name(), err, b)
		}
		out[ent.Name()] = st
	}
	return out
}

// Mount is a line of /proc/self/mountinfo.
type Mount struct {
	Source, FSType string
	ReadOnly       bool
}

// MountAt is the mount at path, if any (the top one).
func MountAt(t testing.TB, path string) (Mount, bool) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var m Mount
	var found bool
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 2 || spec.Unescape(f[4]) != path {
			continue
		}
		m = Mount{Source: spec.Unescape(g[1]), FSType: g[0]}
		for _, o := range strings.Split(f[5], ",") {
			m.ReadOnly = m.ReadOnly || o == "ro"
		}
		found = true
	}
	return m, found
}

// Process is a process of the namespace.
type Process struct {
	PID, PPID int
	State     byte // R, S, Z...
	Cmdline   []string
}

// Processes lists the processes of the namespace.
func Processes(t testing.TB) []Process {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []Process
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if p, ok := ProcessOf(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

// ProcessOf reads process pid (false: gone).
func ProcessOf(pid int) (Process, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Process{}, false
	}
	i := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(f) < 2 {
		return Process{}, false
	}
	p := Process{PID: pid, State: f[0][0]}
	p.PPID, _ = strconv.Atoi(f[1])
	if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
		p.Cmdline = strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
	}
	return p, true
}

// Listening reports whether a TCP socket listens on 127.0.0.1:port (/proc/net/tcp):
// without connecting, which a real stunnel would forward to the mount target.
func Listening(t testing.TB, port int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("0100007F:%04X", port) // little-endian 127.0.0.1
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && f[1] == want && f[3] == "0A" { // TCP_LISTEN
			return true
		}
	}
	return false
}

// Eventually polls cond every 50 ms until it holds or the deadline passes.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// DumpLogs logs efs-utils' log files (for a failed test).
func DumpLogs(t testing.TB) {
	t.Helper()
	ents, _ := os.ReadDir(LogDir)
	for _, ent := range ents {
		if b, err := os.ReadFile(filepath.Join(LogDir, ent.Name())); err == nil {
			t.Logf("==== %s\n%s", filepath.Join(LogDir, ent.Name()), b)
		}
	}
}
