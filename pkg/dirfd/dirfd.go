// Package dirfd opens directories one component at a time, relative to the
// descriptor of their parent, never following a symlink and never crossing
// into another mount: the step of every walk of a tree that its tenants can
// write to (pkg/rmtree removes one, pkg/diskusage measures one).
//
// Linux only (openat2; without it, openat and a device-number check, which
// cannot see a bind mount of the same file system).
package dirfd

import (
	"errors"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// noOpenat2 is set once the kernel has said it has no openat2.
var noOpenat2 atomic.Bool

// Open opens name, a single component in dirfd, as a directory: not a
// symlink (O_NOFOLLOW, RESOLVE_NO_SYMLINKS), not a mount point
// (RESOLVE_NO_XDEV: EXDEV). os.Root would follow symlinks that stay inside
// it, and nothing in the tree may be followed at all, so this is by hand.
// Errors are the kernel's: ENOENT, ELOOP or ENOTDIR (a symlink or a file),
// EXDEV (a mount point), ...
func Open(dirfd int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !noOpenat2.Load() {
		fd, err := Retry(func() (int, error) {
			return unix.Openat2(dirfd, name, &unix.OpenHow{Flags: flags,
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
		})
		if !errors.Is(err, unix.ENOSYS) {
			return fd, err
		}
		noOpenat2.Store(true)
	}
	fd, err := Retry(func() (int, error) { return unix.Openat(dirfd, name, flags, 0) })
	if err != nil {
		return -1, err
	}
	var parent, child unix.Stat_t
	if err := unix.Fstat(dirfd, &parent); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Fstat(fd, &child); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if parent.Dev != child.Dev {
		unix.Close(fd)
		return -1, unix.EXDEV
	}
	return fd, nil
}

// Retry repeats a call the kernel interrupted (EINTR), or that openat2
// refused because of a concurrent rename or mount (EAGAIN).
func Retry(call func() (int, error)) (int, error) {
	for {
		fd, err := call()
		if !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN) {
			return fd, err
		}
	}
}
