// Package mounttest holds helpers for tests that make real mounts: an access
// point table, target directories that are unmounted at cleanup, and marker
// files that tell mounted directories apart.
package mounttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// AccessPoints answers DescribeAccessPoint from a table, as the EFS client
// does (an unknown ID wraps efs.ErrAccessPointNotFound).
type AccessPoints map[string]efs.AccessPoint

// DescribeAccessPoint implements mount.AccessPoints.
func (a AccessPoints) DescribeAccessPoint(_ context.Context, id string) (*efs.AccessPoint, error) {
	ap, ok := a[id]
	if !ok {
		return nil, fmt.Errorf("describe %s: %w", id, efs.ErrAccessPointNotFound)
	}
	return &ap, nil
}

// RequireRoot skips the test unless it runs as root (mounts need it).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounts need root")
	}
}

// Target returns a path, not yet created, in a fresh temporary directory.
// Whatever is mounted on it when the test ends is detached, layer by layer,
// before the temporary directory is removed (removing it through a mount
// would delete the mounted data).
func Target(t testing.TB) string {
	t.Helper()
	target := filepath.Join(t.TempDir(), "target")
	t.Cleanup(func() {
		for range 64 {
			err := unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				return // not (or no longer) a mount point
			}
			if err != nil {
				t.Errorf("cleanup: unmount %s: %v", target, err)
				return
			}
		}
	})
	return target
}

// WriteMarker creates dir (and parents) holding a file "marker" with content.
func WriteMarker(t testing.TB, dir, content string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "marker"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Marker reads the marker file of dir.
func Marker(t testing.TB, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "marker"))
	if err != nil {
		t.Fatalf("read marker in %s: %v", dir, err)
	}
	return string(b)
}

// Hang plays an NFS server that stopped answering, for a Mounter's
// WithBeforeSyscall hook: Block, called on the goroutine about to make the
// system call, blocks in a real system call (a read of an empty pipe), so it
// pins an OS thread the way a stat on a hung NFS mount does, until Release.
// It differs from a hung NFS mount in that the system call behind it is
// never made at all (the hook holds the thread before it), the mount itself
// answers every other caller (an ls of it, a walk), and a forced unmount
// does not abort it as it would abort NFS requests: only Release does.
type Hang struct {
	r, w    int
	match   func(op, path string) bool
	Entered chan string // "op path" of every call that blocked, if there is room
}

// NewHang returns a Hang that blocks the calls match selects; Release is
// called at cleanup.
func NewHang(t testing.TB, match func(op, path string) bool) *Hang {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	h := &Hang{r: p[0], w: p[1], match: match, Entered: make(chan string, 1024)}
	t.Cleanup(h.Release)
	return h
}

// Block is the WithBeforeSyscall hook.
func (h *Hang) Block(op, path string) {
	if !h.match(op, path) {
		return
	}
	select {
	case h.Entered <- op + " " + path:
	default:
	}
	var b [1]byte
	for {
		// A raw blocking read (not os.File, which would park the
		// goroutine on the poller and free the thread).
		_, err := unix.Read(h.r, b[:])
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// Release ends every Block, present and future: the server answers again.
func (h *Hang) Release() {
	if h.w >= 0 {
		unix.Close(h.w)
		h.w = -1
	}
}

// Threads is the number of OS threads of this process (/proc/self/status).
func Threads(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}
