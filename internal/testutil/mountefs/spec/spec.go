// Package spec is what the test mount.efs helper and the tests that drive it
// share: its configuration, the record of each invocation, and efs-utils'
// state file.
package spec

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Config is the helper's configuration file.
type Config struct {
	DataDir       string // the emulator's data directory: file system fs-X is DataDir/fs-X
	Endpoint      string // the emulator's URL, to look access points up
	Region        string
	ConfigDir     string // where efs-utils.conf is read (efs-utils: /etc/amazon/efs)
	StateDir      string // efs-utils' state directory (efs-utils: /var/run/efs)
	InvocationLog string // every invocation is appended here as a JSON line ("" = none)
}

// Invocation is one run of mount.efs as mount(8) made it.
type Invocation struct {
	Source, Target string
	Options        map[string]string // -o, key -> value ("" for a flag)
	Order          []string          // option keys in the order given
}

// State is efs-utils' state file of a TLS mount (the keys efs-utils
// writes, plus the port, which efs-utils keeps in the file's name).
type State struct {
	PID         int      `json:"pid"`
	Cmd         []string `json:"cmd"`
	Files       []string `json:"files"`
	MountTime   float64  `json:"mount_time"`
	Mountpoint  string   `json:"mountpoint"`
	UnmountTime float64  `json:"unmount_time,omitempty"`
	Port        int      `json:"port"`
}

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
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// StateName is the name efs-utils gives the state file of a mount of fsID
// on target whose tunnel listens on port (get_mount_specific_filename).
func StateName(fsID, target string, port int) string {
	return fsID + "." + strings.TrimLeft(strings.ReplaceAll(filepath.Clean(target), "/", "."), ".") + "." + strconv.Itoa(port)
}
