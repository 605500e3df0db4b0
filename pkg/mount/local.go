package mount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// NewLocal returns a Mounter that bind-mounts directories of root, the
// emulator's data directory, where file system fs-X lives in root/fs-X. aps
// finds access point roots; it may be nil if no volume names an access
// point. See the package documentation for how this differs from EFS.
func NewLocal(root string, aps AccessPoints, opts ...Option) (*Mounter, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("local root %q: %w", root, err)
	}
	// Resolve once, so that every path checked against it is a real path.
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("local root: %w", err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("local root: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("local root %s is not a directory", root)
	}
	return newMounter(&localBackend{root: real, aps: aps}, opts), nil // options after the back end: WithS3FilesAccessPoints sets it
}

type localBackend struct {
	root  string // real path
	aps   AccessPoints
	s3aps AccessPoints // S3 Files volumes' (WithS3FilesAccessPoints)
}

// openSource finds the directory vol names and opens it with O_PATH. Every
// step stays inside root/<fs-id> (and inside the access point root for an
// access point volume, as the NFS server would enforce): paths go through
// volume.ResolveInside, and the opened directory's real path is checked
// again, so a symlink swapped in after the resolution cannot redirect the
// mount, which then uses the descriptor, not the path.
func (l *localBackend) openSource(ctx context.Context, vol Volume) (fd int, err error) {
	fsDir := filepath.Join(l.root, vol.FileSystemID)
	fi, err := os.Lstat(fsDir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return -1, fmt.Errorf("%w: file system %s has no directory in %s", ErrNotFound, vol.FileSystemID, l.root)
	case err != nil:
		return -1, err
	case !fi.IsDir():
		return -1, fmt.Errorf("%w: %s is not a directory", volume.ErrUnsafePath, fsDir)
	}
	base := fsDir
	if vol.AccessPointID != "" {
		aps, api := l.aps, "EFS"
		if vol.API == volume.APIS3Files {
			aps, api = l.s3aps, "S3 Files"
		}
		if aps == nil {
			return -1, fmt.Errorf("access point %s: no %s client to look it up", vol.AccessPointID, api)
		}
		ap, err := aps.DescribeAccessPoint(ctx, vol.AccessPointID)
		if err != nil {
			return -1, fmt.Errorf("access point %s: %w", vol.AccessPointID, err)
		}
		if ap.FileSystemID != "" && ap.FileSystemID != vol.FileSystemID {
			return -1, fmt.Errorf("%w: access point %s belongs to %s, not %s", volume.ErrInvalidID,
				vol.AccessPointID, ap.FileSystemID, vol.FileSystemID)
		}
		if base, err = volume.ResolveInside(fsDir, ap.Path); err != nil {
			return -1, fmt.Errorf("access point %s root %q: %w", vol.AccessPointID, ap.Path, err)
		}
	}
	src, err := volume.ResolveInside(base, vol.Path)
	if err != nil {
		return -1, fmt.Errorf("path %q: %w", vol.Path, err)
	}
	fd, err = unix.Open(src, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return -1, fmt.Errorf("%w: %s: %v", ErrNotFound, src, err)
	case errors.Is(err, unix.ELOOP):
		return -1, fmt.Errorf("%w: %s became a symlink", volume.ErrUnsafePath, src)
	case err != nil:
		return -1, fmt.Errorf("open %s: %w", src, err)
	}
	opened, err := os.Readlink(procFD(fd))
	if err == nil && !inside(base, opened) {
		err = fmt.Errorf("%w: %s resolved to %s, outside %s", volume.ErrUnsafePath, src, opened, base)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func (l *localBackend) mount(ctx context.Context, vol Volume, target string) error {
	src, err := l.openSource(ctx, vol)
	if err != nil {
		return err
	}
	defer unix.Close(src)
	// The target too is opened without following a symlink and mounted
	// on through its descriptor.
	dst, err := unix.Open(target, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: target %s: %v", volume.ErrUnsafePath, target, err)
	}
	defer unix.Close(dst)
	if err := unix.Mount(procFD(src), procFD(dst), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount onto %s: %w", target, err)
	}
	if !vol.ReadOnly {
		return nil
	}
	// A bind mount takes the read-only flag only on a remount. If the
	// process dies between the two, Inspect sees a read-write mount where
	// a read-only one is wanted and calls it Stale, so the retry redoes it.
	if err := remountReadOnly(target); err != nil {
		return fmt.Errorf("remount %s read-only: %w", target, err)
	}
	return nil
}

// remountReadOnly makes the bind mount at target read-only, keeping the
// nosuid/nodev/noexec/atime flags it has (a remount that dropped a flag
// locked by a user namespace would fail).
func remountReadOnly(target string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		return err
	}
	const kept = unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC | unix.ST_NOATIME | unix.ST_NODIRATIME | unix.ST_RELATIME
	flags := uintptr(unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY) | uintptr(st.Flags)&kept
	return unix.Mount("", target, "", flags, "")
}

// classify compares the directory mounted at the target with the one vol
// names by device and inode: a bind mount shows its source's.
func (l *localBackend) classify(ctx context.Context, vol Volume, m mountInfo, st *unix.Stat_t) (State, error) {
	src, err := l.openSource(ctx, vol)
	if err != nil {
		return NotMounted, err
	}
	defer unix.Close(src)
	var sst unix.Stat_t
	if err := unix.Fstat(src, &sst); err != nil {
		return NotMounted, err
	}
	switch {
	case sst.Dev != st.Dev || sst.Ino != st.Ino:
		return Conflict, nil
	case vol.ReadOnly && !m.readOnly():
		return Stale, nil // bound, not yet remounted read-only
	case !vol.ReadOnly && m.readOnly():
		return Conflict, nil
	}
	return Mounted, nil
}

func procFD(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// inside reports whether p is base or below it (both clean, absolute).
func inside(base, p string) bool {
	return p == base || strings.HasPrefix(p, strings.TrimSuffix(base, "/")+"/")
}
