// Package spec is what the test mount.efs helper and the tests that drive it
// share: its configuration, the record of each invocation, and efs-utils'
// state file (the real one's: package realefs/spec).
package spec

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	realspec "github.com/efs-csi/efs-csi-driver/internal/testutil/realefs/spec"
)

// Config is the helper's configuration file.
type Config struct {
	DataDir       string // the emulator's data directory: file system fs-X is DataDir/fs-X
	Endpoint      string // the emulator's URL, to look access points up
	Region        string
	ConfigDir     string // where efs-utils.conf is read (efs-utils: /etc/amazon/efs)
	StateDir      string // efs-utils' state directory (efs-utils: /var/run/efs)
	InvocationLog string // every invocation is appended here as a JSON line ("" = none)
	// WatchdogPoll is the watchdog's poll interval: 0 is efs-utils.conf's
	// [mount-watchdog] poll_interval_sec, whole seconds as efs-utils' watchdog reads
	// it; tests shorten it. (The helper checks the file's value either way.)
	WatchdogPoll time.Duration
	// UnmountDiffTime is how old a mount must be before the watchdog counts it gone:
	// efs-utils' watchdog has a fixed 30 s (UNMOUNT_DIFF_TIME), which 0 keeps; tests
	// shorten it.
	UnmountDiffTime time.Duration
}

// Invocation is one run of mount.efs as mount(8) made it.
type Invocation struct {
	Source, Target string
	Options        map[string]string // -o, key -> value ("" for a flag)
	Order          []string          // option keys in the order given
}

// State is efs-utils' state file of a mount with a tunnel, the real one's fields (the
// port is in the file's name: StatePort).
type State = realspec.State

// StatePort is the port in a state file's name.
var StatePort = realspec.StatePort

// IsTunnel reports whether pid is a live (not zombie) tunnel process of the
// helper: a PID reused by another process is not killed.
func IsTunnel(pid int) bool {
	if pid <= 0 {
		return false
	}
	p := "/proc/" + strconv.Itoa(pid)
	cmd, err := os.ReadFile(p + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(string(cmd), "\x00")
	if len(args) < 2 || args[1] != "tunnel" {
		return false
	}
	stat, err := os.ReadFile(p + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] != 'Z'
}

// Unescape undoes mountinfo's octal escapes (\040 for a space...).
var Unescape = realspec.Unescape

// StateName is the name efs-utils gives the state file of a mount of fsID
// on target whose tunnel listens on port (get_mount_specific_filename).
func StateName(fsID, target string, port int) string {
	return fsID + "." + strings.TrimLeft(strings.ReplaceAll(filepath.Clean(target), "/", "."), ".") + "." + strconv.Itoa(port)
}
