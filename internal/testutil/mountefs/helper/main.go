// Command helper is a stand-in for efs-utils' mount.efs and its watchdog,
// for tests only (never in the image). The real ones run in package realefs's
// tests (the pinned efs-utils, with only mount.nfs4 and efs-proxy stubbed), but
// mount nothing a test can read or write through, since there is no NFS
// client: this helper stays for the tests that need data through the mount
// (csi-sanity, the marker files, the soak). It behaves like efs-utils 3.2.0
// where the driver can tell:
//
//	mount.efs fs-X[:/path] TARGET -o tls,accesspoint=fsap-Y,mounttargetip=IP,crossaccount,ro,...
//
// reads efs-utils.conf (the TLS port range), refuses what efs-utils refuses
// (check_options_validity: an access point or iam without tls, a malformed
// access point ID, awsprofile without iam, tls with port or notls; and
// mounttargetip with crossaccount), bind-mounts the directory the volume
// names in an emulator's data directory (through pkg/mount's local back end,
// which looks access points up in the emulator), and leaves a "tunnel" process
// listening on a port of the range and a state file named as efs-utils names
// it (fs-X.<target with dots>.<port>), with efs-utils' fields, in the state
// directory: for every mount, TLS or not, as efs-utils' efs-proxy mode does,
// except one with the stunnel option and without tls, which efs-utils mounts
// directly. The port is drawn as efs-utils draws it: shuffled from [lower,
// upper), skipping the ports a state file names. A mount that fails leaves
// its tunnel and state file for the watchdog, as efs-utils does. Once the
// helper exits, the tunnel is re-parented to the nearest subreaper: the
// driver.
//
//	mount.efs watchdog
//
// is the watchdog: every [mount-watchdog] poll_interval_sec it looks at each
// state file as efs-utils' does: a mount that is gone, once the state file is
// UnmountDiffTime old and after more than unmount_count_for_consistency
// consistent reads, is marked unmounted; unmount_grace_period_sec later its
// tunnel is stopped (SIGTERM; the files are removed once it is gone). A live
// mount whose tunnel died gets a new one. The three settings are integers, as
// efs-utils reads them: anything else makes it exit, as efs-utils' crashes.
//
// Where it still differs from efs-utils: the mount is a bind mount, not NFS
// (its data is the emulator's); the tunnel forwards nothing; a live mount is
// one whose mount point is in mountinfo (efs-utils' watchdog looks for nfs4
// mounts from 127.0.0.1 with the tunnel's port=, which a bind mount cannot
// show); its poll interval and the 30 s efs-utils waits before it counts a
// mount gone are Config.WatchdogPoll and Config.UnmountDiffTime, which tests
// shorten (efs-utils.conf's integers are still checked); no client certificate, no
// instance metadata, no stunnel; the state file's certificate fields are
// there but name no file.
//
// Its configuration (emulator, directories) is a JSON file at a path fixed
// at build time (-X main.configPath=...), since mount(8) stands between the
// test and the helper.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/testutil/mountefs/spec"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/efsutils"
	"github.com/efs-csi/efs-csi-driver/pkg/mount"
)

var configPath string // set at build time

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "tunnel":
			tunnel()
			return
		case "watchdog":
			cfg := load()
			watchdog(cfg)
			return
		}
	}
	if err := mountMain(load(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mount.efs:", err)
		os.Exit(32) // mount(8)'s "mount failure"
	}
}

func load() spec.Config {
	b, err := os.ReadFile(configPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mount.efs (test helper): config:", err)
		os.Exit(1)
	}
	var c spec.Config
	if err := json.Unmarshal(b, &c); err != nil {
		fmt.Fprintln(os.Stderr, "mount.efs (test helper): config:", err)
		os.Exit(1)
	}
	return c
}

func readConf(c spec.Config) (map[string]map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(c.ConfigDir, efsutils.ConfFileName))
	if err != nil {
		return nil, err
	}
	return efsutils.ReadConf(b)
}

func mountMain(c spec.Config, args []string) error {
	var pos []string
	opts := map[string]string{}
	var order []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-o" && i+1 < len(args):
			i++
			for _, o := range strings.Split(args[i], ",") {
				k, v, _ := strings.Cut(o, "=")
				if _, dup := opts[k]; !dup {
					order = append(order, k)
				}
				opts[k] = v
			}
		case strings.HasPrefix(a, "-"): // -n, -s, -f, -v: accepted
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return fmt.Errorf("usage: mount.efs fs-id[:/path] mount-point [-o options]: got %q", args)
	}
	source, target := pos[0], pos[1]
	inv := spec.Invocation{Source: source, Target: target, Options: opts, Order: order}
	logInvocation(c, inv)

	conf, err := readConf(c)
	if err != nil {
		return fmt.Errorf("efs-utils configuration: %w", err)
	}
	if err := checkOptions(opts); err != nil {
		return err
	}
	fsID, path, _ := strings.Cut(source, ":")
	tls := has(opts, "tls")
	ap := opts["accesspoint"]
	if path == "/" {
		path = ""
	}
	vol := mount.Volume{FileSystemID: fsID, Path: path, AccessPointID: ap, ReadOnly: has(opts, "ro")}

	// efs-proxy mode tunnels every mount; the stunnel mode only TLS ones.
	var tun, port int
	var name string
	if tls || !has(opts, "stunnel") {
		lo, err1 := strconv.Atoi(conf["mount"]["port_range_lower_bound"])
		hi, err2 := strconv.Atoi(conf["mount"]["port_range_upper_bound"])
		if err1 != nil || err2 != nil || lo >= hi {
			return fmt.Errorf("efs-utils.conf: bad port range %q-%q", conf["mount"]["port_range_lower_bound"], conf["mount"]["port_range_upper_bound"])
		}
		l, p, err := listenInRange(lo, hi, c.StateDir)
		if err != nil {
			return err
		}
		port = p
		tun, err = startTunnel(l)
		l.Close()
		if err != nil {
			return err
		}
		name = spec.StateName(fsID, target, port)
		if err := writeTunnelState(c, name, fsID, target, tun, tls, ap); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := efs.New(ctx, efs.Config{Region: c.Region, Endpoint: c.Endpoint, RateLimits: map[string]efs.RateLimit{"*": {}}})
	if err == nil {
		var m *mount.Mounter
		if m, err = mount.NewLocal(c.DataDir, client); err == nil {
			err = m.MountVolume(ctx, vol, target)
		}
	}
	if name != "" {
		// The temporary state file becomes the state file whether the mount
		// worked or not: a failed mount's tunnel is the watchdog's to stop.
		if rerr := os.Rename(filepath.Join(c.StateDir, "~"+name), filepath.Join(c.StateDir, name)); err == nil {
			err = rerr
		}
	}
	return err
}

// checkOptions refuses what efs-utils 3.2.0's mount.efs refuses
// (check_options_validity, and mounttargetip with crossaccount), with its words.
func checkOptions(opts map[string]string) error {
	tls := has(opts, "tls")
	switch {
	case tls && has(opts, "port"):
		return errors.New(`The "port" and "tls" options are mutually exclusive`)
	case tls && has(opts, "notls"):
		return errors.New(`The "tls" and "notls" options are mutually exclusive`)
	case has(opts, "accesspoint") && !tls:
		return errors.New(`The "tls" option is required when mounting via "accesspoint"`)
	case has(opts, "accesspoint") && !accessPointRE.MatchString(opts["accesspoint"]):
		return fmt.Errorf("Access Point ID %s is malformed", opts["accesspoint"])
	case has(opts, "iam") && !tls:
		return errors.New(`The "tls" option is required when mounting via "iam"`)
	case has(opts, "awsprofile") && !has(opts, "iam"):
		return errors.New(`The "iam" option is required when mounting with named profile option, "awsprofile"`)
	case has(opts, "mounttargetip") && has(opts, "crossaccount"):
		return errors.New("mounttargetip option is incompatible with crossaccount option.")
	}
	return nil
}

// accessPointRE is efs-utils' AP_REGEX_PATTERN (the driver accepts 8 to 40 digits).
var accessPointRE = regexp.MustCompile(`^fsap-[0-9a-f]{17}$`)

// writeTunnelState writes the temporary state file (~name) of a mount whose tunnel is
// tun, with the fields efs-utils' write_tunnel_state_file writes, and for a TLS mount
// the certificate fields and the mount state directory (name+).
func writeTunnelState(c spec.Config, name, fsID, target string, tun int, tls bool, ap string) error {
	stunnelConf := filepath.Join(c.StateDir, "stunnel-config."+name)
	port, _ := spec.StatePort(name)
	if err := os.WriteFile(stunnelConf, []byte(fmt.Sprintf("fips = no\npid = %s\n[efs]\naccept = 127.0.0.1:%d\n",
		filepath.Join(c.StateDir, name+"+", "stunnel.pid"), port)), 0o644); err != nil {
		return err
	}
	self, _ := os.Executable()
	st := spec.State{PID: tun, Cmd: []string{self, "tunnel"}, Files: []string{stunnelConf},
		MountTime: float64(time.Now().UnixNano()) / 1e9, Mountpoint: target, ServiceType: "elasticfilesystem"}
	if tls {
		st.AccessPoint, st.MountStateDir, st.Region, st.FSID = ap, name+"+", c.Region, fsID
		st.CommonName, _ = os.Hostname()
		st.CertificateCreationTime = time.Now().UTC().Format("060102150405Z")
		if err := os.MkdirAll(filepath.Join(c.StateDir, st.MountStateDir), 0o750); err != nil {
			return err
		}
	}
	return writeState(filepath.Join(c.StateDir, "~"+name), st)
}

func has(m map[string]string, k string) bool { _, ok := m[k]; return ok }

func logInvocation(c spec.Config, inv spec.Invocation) {
	if c.InvocationLog == "" {
		return
	}
	b, _ := json.Marshal(inv)
	f, err := os.OpenFile(c.InvocationLog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		f.Write(append(b, '\n'))
		f.Close()
	}
}

// listenInRange binds a free loopback port of [lo, hi), as efs-utils chooses
// its tunnel's port: in a random order, skipping the ports a file of the state
// directory names (fs-X.<mount point>.<port>, a live mount's or one in
// progress).
func listenInRange(lo, hi int, stateDir string) (*net.TCPListener, int, error) {
	taken := map[int]bool{}
	if ents, err := os.ReadDir(stateDir); err == nil {
		for _, e := range ents {
			if p, ok := spec.StatePort(e.Name()); ok {
				taken[p] = true
			}
		}
	}
	for _, i := range rand.Perm(hi - lo) {
		p := lo + i
		if taken[p] {
			continue
		}
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p})
		if err == nil {
			return l, p, nil
		}
	}
	return nil, 0, fmt.Errorf("Failed to locate an available port in the range [%d, %d]", lo, hi)
}

// startTunnel starts a detached tunnel process holding l and returns its PID.
func startTunnel(l *net.TCPListener) (int, error) {
	f, err := l.File()
	if err != nil {
		return 0, err
	}
	defer f.Close()
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(self, "tunnel")
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	return pid, cmd.Process.Release()
}

// tunnel accepts on fd 3 and drops connections, until killed.
func tunnel() {
	l, err := net.FileListener(os.NewFile(3, "listener"))
	if err != nil {
		os.Exit(1)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			os.Exit(1)
		}
		c.Close()
	}
}

// writeState writes a state file, through a temporary ~ file renamed over it,
// as efs-utils' watchdog rewrites one.
func writeState(path string, st spec.State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	dir, name := filepath.Split(path)
	if strings.HasPrefix(name, "~") {
		return os.WriteFile(path, b, 0o644)
	}
	tmp := filepath.Join(dir, "~"+name)
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func watchdog(c spec.Config) {
	conf, err := readConf(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "amazon-efs-mount-watchdog (test helper):", err)
		os.Exit(1)
	}
	// Read once, as integers, as efs-utils' watchdog reads them (config.getint:
	// "0.02" is a ValueError, and it exits).
	wd := conf["mount-watchdog"]
	getint := func(key, def string) int {
		v, ok := wd[key]
		if !ok {
			v = def
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ValueError: invalid literal for int() with base 10: '%s' ([mount-watchdog] %s)\n", v, key)
			os.Exit(1)
		}
		return n
	}
	poll := time.Duration(getint("poll_interval_sec", "")) * time.Second
	if c.WatchdogPoll > 0 {
		poll = c.WatchdogPoll
	}
	count := getint("unmount_count_for_consistency", "5")
	grace := time.Duration(getint("unmount_grace_period_sec", "")) * time.Second
	diff := c.UnmountDiffTime
	if diff == 0 {
		diff = 30 * time.Second
	}
	for {
		checkMounts(c, grace, diff, count)
		for { // tunnels this watchdog restarted and killed
			if pid, _ := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 {
				break
			}
		}
		time.Sleep(poll)
	}
}

// checkMounts is efs-utils' check_efs_mounts.
func checkMounts(c spec.Config, grace, diff time.Duration, count int) {
	ents, err := os.ReadDir(c.StateDir)
	if err != nil {
		return
	}
	mounted := mountPoints()
	now := float64(time.Now().UnixNano()) / 1e9
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "fs-") || e.IsDir() {
			continue
		}
		path := filepath.Join(c.StateDir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var st spec.State
		if json.Unmarshal(b, &st) != nil {
			continue
		}
		switch {
		case st.UnmountTime != 0:
			if st.UnmountTime+grace.Seconds() < now {
				cleanUp(c, path, st)
			}
		case !slices.Contains(mounted, st.Mountpoint):
			if now-st.MountTime > diff.Seconds() {
				if st.UnmountCount > count {
					st.UnmountTime = now
				} else {
					st.UnmountCount++
				}
				writeState(path, st)
			}
		default:
			st.UnmountCount = 0
			writeState(path, st)
			if !spec.IsTunnel(st.PID) {
				restart(path, st)
			}
		}
	}
}

// cleanUp stops a gone mount's tunnel, and once it is gone removes its files,
// its state file and its mount state directory (clean_up_mount_state).
func cleanUp(c spec.Config, path string, st spec.State) {
	if spec.IsTunnel(st.PID) {
		syscall.Kill(st.PID, syscall.SIGTERM)
	}
	if spec.IsTunnel(st.PID) {
		return // next time
	}
	for _, f := range st.Files {
		os.Remove(f)
	}
	os.Remove(path)
	if st.MountStateDir != "" {
		os.RemoveAll(filepath.Join(c.StateDir, st.MountStateDir))
	}
}

// restart starts a new tunnel on a live mount's port, as the watchdog does
// for a tunnel that died (a driver restart killed it with its container).
func restart(path string, st spec.State) {
	port, _ := spec.StatePort(filepath.Base(path))
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		return
	}
	pid, err := startTunnel(l)
	l.Close()
	if err != nil {
		return
	}
	st.PID = pid
	writeState(path, st)
}

// mountPoints lists the mount points of this mount namespace.
func mountPoints() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			out = append(out, spec.Unescape(f[4]))
		}
	}
	return out
}
