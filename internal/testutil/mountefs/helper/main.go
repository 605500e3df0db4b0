// Command helper is a stand-in for efs-utils' mount.efs and its watchdog,
// for tests only (never in the image). It behaves like efs-utils where the
// driver can tell:
//
//	mount.efs fs-X[:/path] TARGET -o tls,accesspoint=fsap-Y,mounttargetip=IP,crossaccount,ro,...
//
// reads efs-utils.conf (the TLS port range), refuses what efs-utils refuses
// (an access point without tls), bind-mounts the directory the volume names
// in an emulator's data directory (through pkg/mount's local back end,
// which looks access points up in the emulator), and for a TLS mount leaves
// a "tunnel" process listening on a port of the range, detached, and a
// state file named as efs-utils names it (fs-X.<target with dots>.<port>)
// in the state directory. Once the helper exits, the tunnel is re-parented
// to the nearest subreaper: the driver.
//
//	mount.efs watchdog
//
// is the watchdog: every [mount-watchdog] poll_interval_sec it kills the
// tunnel of each state file whose mount is gone for
// unmount_grace_period_sec and removes its files, and restarts the tunnel
// of a live mount whose tunnel died.
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
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	fsID, path, _ := strings.Cut(source, ":")
	_, tls := opts["tls"]
	ap := opts["accesspoint"]
	if ap != "" && !tls {
		return errors.New(`the "tls" option is required when mounting via "accesspoint"`)
	}
	if path == "/" {
		path = ""
	}
	vol := mount.Volume{FileSystemID: fsID, Path: path, AccessPointID: ap, ReadOnly: has(opts, "ro")}

	var tun, port int
	if tls {
		lo, err1 := strconv.Atoi(conf["mount"]["port_range_lower_bound"])
		hi, err2 := strconv.Atoi(conf["mount"]["port_range_upper_bound"])
		if err1 != nil || err2 != nil || lo >= hi {
			return fmt.Errorf("efs-utils.conf: bad port range %q-%q", conf["mount"]["port_range_lower_bound"], conf["mount"]["port_range_upper_bound"])
		}
		l, p, err := listenInRange(lo, hi)
		if err != nil {
			return err
		}
		port = p
		tun, err = startTunnel(l)
		l.Close()
		if err != nil {
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
	if err != nil {
		if tun != 0 {
			syscall.Kill(tun, syscall.SIGKILL)
		}
		return err
	}
	if tun == 0 {
		return nil
	}
	name := spec.StateName(fsID, target, port)
	stunnelConf := filepath.Join(c.StateDir, "stunnel-config."+name)
	if err := os.WriteFile(stunnelConf, []byte(fmt.Sprintf("accept = 127.0.0.1:%d\n", port)), 0o644); err != nil {
		return err
	}
	st := spec.State{PID: tun, Cmd: []string{"tunnel"}, Files: []string{stunnelConf},
		MountTime: float64(time.Now().UnixNano()) / 1e9, Mountpoint: target, Port: port}
	return writeState(filepath.Join(c.StateDir, name), st)
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

// listenInRange binds a free loopback port of [lo, hi], as efs-utils
// chooses its tunnel's port.
func listenInRange(lo, hi int) (*net.TCPListener, int, error) {
	start := lo + os.Getpid()%(hi-lo+1)
	for i := range hi - lo + 1 {
		p := lo + (start-lo+i)%(hi-lo+1)
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p})
		if err == nil {
			return l, p, nil
		}
	}
	return nil, 0, fmt.Errorf("no free port in %d-%d", lo, hi)
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

func writeState(path string, st spec.State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func watchdog(c spec.Config) {
	for {
		poll, grace := time.Second, 30*time.Second
		if conf, err := readConf(c); err == nil {
			if v, err := strconv.ParseFloat(conf["mount-watchdog"]["poll_interval_sec"], 64); err == nil {
				poll = time.Duration(v * float64(time.Second))
			}
			if v, err := strconv.ParseFloat(conf["mount-watchdog"]["unmount_grace_period_sec"], 64); err == nil {
				grace = time.Duration(v * float64(time.Second))
			}
		}
		checkMounts(c, grace)
		for { // tunnels this watchdog restarted and killed
			if pid, _ := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 {
				break
			}
		}
		time.Sleep(poll)
	}
}

func checkMounts(c spec.Config, grace time.Duration) {
	ents, err := os.ReadDir(c.StateDir)
	if err != nil {
		return
	}
	mounted := mountPoints()
	now := float64(time.Now().UnixNano()) / 1e9
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "fs-") || strings.HasSuffix(name, ".tmp") {
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
		if slices.Contains(mounted, st.Mountpoint) {
			if !spec.IsTunnel(st.PID) {
				restart(path, st)
			}
			continue
		}
		if st.UnmountTime == 0 {
			st.UnmountTime = now
			writeState(path, st)
		}
		if now-st.UnmountTime < grace.Seconds() {
			continue
		}
		if spec.IsTunnel(st.PID) {
			syscall.Kill(st.PID, syscall.SIGTERM)
		}
		for _, f := range st.Files {
			os.Remove(f)
		}
		os.Remove(path)
	}
}

// restart starts a new tunnel on a live mount's port, as the watchdog does
// for a tunnel that died (a driver restart killed it with its container).
func restart(path string, st spec.State) {
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: st.Port})
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
