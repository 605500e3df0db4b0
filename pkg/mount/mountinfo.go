package mount

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// mountInfo is one line of /proc/self/mountinfo (proc(5)).
type mountInfo struct {
	ID, Parent int
	Root       string // path inside the source file system that is mounted; " //deleted" when gone
	MountPoint string
	Options    []string // per-mount options: ro/rw, nosuid, ...
	FSType     string
	Source     string
}

// readOnly reports whether the mount itself (not its super block) is read-only.
func (m mountInfo) readOnly() bool {
	for _, o := range m.Options {
		if o == "ro" {
			return true
		}
	}
	return false
}

// deleted reports whether the mounted directory was removed from its file
// system after the mount: the kernel marks the root field.
func (m mountInfo) deleted() bool { return strings.HasSuffix(m.Root, "//deleted") }

// parseMountInfo parses the mountinfo format:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// Lines it cannot parse are an error: silently skipping one could hide the
// very mount a caller asks about.
func parseMountInfo(r io.Reader) ([]mountInfo, error) {
	var out []mountInfo
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		m, err := parseMountInfoLine(line)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

func parseMountInfoLine(line string) (mountInfo, error) {
	// Fields are separated by single spaces; spaces inside them are
	// escaped. (strings.Fields would also split on other Unicode spaces,
	// which the kernel leaves as they are.)
	f := strings.Split(line, " ")
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || len(f) < sep+3 {
		return mountInfo{}, fmt.Errorf("mountinfo: malformed line %q", line)
	}
	id, err1 := strconv.Atoi(f[0])
	parent, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return mountInfo{}, fmt.Errorf("mountinfo: malformed IDs in %q", line)
	}
	return mountInfo{
		ID:         id,
		Parent:     parent,
		Root:       unescapeOctal(f[3]),
		MountPoint: unescapeOctal(f[4]),
		Options:    strings.Split(f[5], ","),
		FSType:     unescapeOctal(f[sep+1]),
		Source:     unescapeOctal(f[sep+2]),
	}, nil
}

// unescapeOctal undoes the kernel's escaping of space, tab, newline and
// backslash as \NNN in mountinfo fields.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] <= '3' && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			b.WriteByte(v)
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// mountInfoPath is what the process sees; tests never change it, they make
// real mounts.
const mountInfoPath = "/proc/self/mountinfo"

// mountsAt lists the mounts whose mount point is exactly path (a real path:
// no symlinks). More than one means mounts are stacked on it.
func mountsAt(path string) ([]mountInfo, error) {
	data, err := os.ReadFile(mountInfoPath)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", mountInfoPath, err)
	}
	all, err := parseMountInfo(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	var at []mountInfo
	for _, m := range all {
		if m.MountPoint == path {
			at = append(at, m)
		}
	}
	return at, nil
}

// Layers reports how many mounts are stacked on target: 0 when it is not a
// mount point or does not exist. For tests and diagnostics.
func Layers(target string) (int, error) {
	real, exists, err := realPath(target)
	if err != nil || !exists {
		return 0, err
	}
	at, err := mountsAt(real)
	return len(at), err
}

// realPath resolves the symlinks in target's parent directories, so that it
// can be compared with mountinfo, without following target itself (the
// mount, if any, sits on target; following it could reach a hung NFS
// server). exists is false when the parent does not exist.
func realPath(target string) (path string, exists bool, err error) {
	if !filepath.IsAbs(target) {
		return "", false, fmt.Errorf("%q is not absolute", target)
	}
	target = filepath.Clean(target)
	if target == "/" {
		return target, true, nil
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(target))
	if os.IsNotExist(err) {
		return target, false, nil
	}
	if err != nil {
		return "", false, err
	}
	return filepath.Join(dir, filepath.Base(target)), true, nil
}
