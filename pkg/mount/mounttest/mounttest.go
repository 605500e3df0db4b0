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
