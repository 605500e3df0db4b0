// Package mount puts EFS volumes on a node's directories, behind one type
// with two back ends:
//
//   - efs (NewEFS): `mount -t efs` through the efs-utils mount helper, as the
//     upstream driver does (TLS, access points, mount target IPs).
//   - local (NewLocal): bind mounts of the emulator's file system
//     directories, ROOT/<fs-id>/<access point root>/<sub path>, so a volume
//     provisioned against the emulator can be mounted on one machine without
//     NFS. It differs from the real thing in what the NFS server would
//     enforce: no POSIX identity from the access point (files keep the
//     caller's uid/gid), no TLS, no mount target or cross-account options (they
//     are accepted and ignored), and a missing access point root directory is
//     not created on first mount (the emulator creates it with the access
//     point).
//
// Both back ends share the bookkeeping that makes publishing idempotent: the
// state of a target is read from /proc/self/mountinfo (Inspect), a target is
// never mounted twice (MountVolume refuses a mounted target, Unmount removes
// every stacked layer), and a failed mount leaves nothing mounted.
package mount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Sentinel errors.
var (
	// ErrNotFound: the directory the volume names does not exist (a file
	// system directory, an access point root, a sub path).
	ErrNotFound = errors.New("volume source not found")
	// ErrNotMounted: Usage was asked about a path that is not a mount point.
	ErrNotMounted = errors.New("not a mount point")
	// ErrTargetMounted: MountVolume was asked to mount on a mount point; it
	// never stacks mounts. Callers Inspect first and Unmount stale mounts.
	ErrTargetMounted = errors.New("target is already a mount point")
)

// State is what a target holds, relative to the volume a caller wants there.
type State int

const (
	// NotMounted: nothing is mounted at the target (or it does not exist).
	NotMounted State = iota
	// Mounted: the volume is mounted there as asked: nothing to do.
	Mounted
	// Conflict: something else is mounted there (another source, or the
	// volume with an incompatible read-only setting).
	Conflict
	// Stale: a mount that cannot be kept as is: stacked mounts, a source
	// directory that was deleted, an unreachable server, or a read-only
	// mount half made (bound, not yet remounted read-only). Unmount it and
	// mount again.
	Stale
)

func (s State) String() string {
	switch s {
	case NotMounted:
		return "not mounted"
	case Mounted:
		return "mounted"
	case Conflict:
		return "conflict"
	case Stale:
		return "stale"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Volume is what to mount. FileSystemID is required; the rest is optional.
type Volume struct {
	// API is volume.APIS3Files for an S3 Files file system: `mount -t
	// s3files` (always TLS), and the local back end looks its access
	// points up in S3 Files.
	API          volume.API
	FileSystemID string
	// Path is "" (the root of the file system, or of the access point) or
	// an absolute path below it.
	Path          string
	AccessPointID string
	ReadOnly      bool
	// NoTLS asks for an unencrypted mount (encryptInTransit=false). Access
	// point mounts are always TLS: efs-utils requires it.
	NoTLS bool
	// MountTargetIP is the IP address to mount from, bypassing DNS.
	MountTargetIP string
	// CrossAccount asks efs-utils to resolve the mount target in the
	// file system owner's account (the "crossaccount" option).
	CrossAccount bool
	// NoS3ReadCache (S3 Files) turns the read cache of efs-utils' proxy
	// off (the nos3readcache option), for a node plugin short of memory.
	NoS3ReadCache bool
	// Options are further mount options passed to efs-utils verbatim,
	// already validated and free of the ones the fields above set.
	Options []string
}

func (v Volume) validate() error {
	if !volume.ValidFileSystemID(v.FileSystemID) {
		return fmt.Errorf("%w: file system ID %q", volume.ErrInvalidID, v.FileSystemID)
	}
	if v.AccessPointID != "" && !volume.ValidAccessPointID(v.AccessPointID) {
		return fmt.Errorf("%w: access point ID %q", volume.ErrInvalidID, v.AccessPointID)
	}
	if v.Path != "" && v.Path[0] != '/' {
		return fmt.Errorf("%w: path %q is not absolute", volume.ErrUnsafePath, v.Path)
	}
	return nil
}

// AccessPoints looks access points up; *efs.Client satisfies it. The local
// back end needs it to find an access point's root directory.
type AccessPoints interface {
	DescribeAccessPoint(ctx context.Context, id string) (*efs.AccessPoint, error)
}

// Runner runs a command and returns its combined output. The efs back end
// runs `mount` through it; tests replace it to see the exact argv.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// Option configures a Mounter.
type Option func(*Mounter)

// WithRunner replaces the command runner of the efs back end.
func WithRunner(r Runner) Option { return func(m *Mounter) { m.run = r } }

// WithS3FilesAccessPoints gives the local back end the S3 Files client its
// S3 Files volumes' access points are looked up with.
func WithS3FilesAccessPoints(aps AccessPoints) Option {
	return func(m *Mounter) {
		if l, ok := m.b.(*localBackend); ok {
			l.s3aps = aps
		}
	}
}

// WithMountTypes adds file system types that a mount made by the efs back
// end's helper may show besides nfs, nfs4 and efs: a stand-in mount.efs in
// tests bind-mounts a local directory, whose mount shows that directory's
// file system type.
func WithMountTypes(types ...string) Option {
	return func(m *Mounter) { m.efsTypes = append(m.efsTypes, types...) }
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(m *Mounter) { m.log = l } }

// Names of the system calls that may block on a hung server, as passed to
// the WithBeforeSyscall hook.
const (
	OpStat         = "stat"
	OpStatfs       = "statfs"
	OpUnmount      = "unmount"
	OpForceUnmount = "force-unmount"
)

// WithBeforeSyscall sets a hook called with the operation (OpStat, ...) and
// the mount point's real path right before each system call that may block
// on a hung NFS server, on the goroutine that makes it. Tests block in it to
// play a server that stopped answering.
func WithBeforeSyscall(hook func(op, path string)) Option {
	return func(m *Mounter) { m.beforeSyscall = hook }
}

// backend is what differs between mount -t efs and bind mounts.
type backend interface {
	// mount mounts vol at target, an existing directory (real path) that is
	// not a mount point.
	mount(ctx context.Context, vol Volume, target string) error
	// classify says whether m, the only mount at target, is vol as asked.
	// st is target's stat (the mounted root directory).
	classify(ctx context.Context, vol Volume, m mountInfo, st *unix.Stat_t) (State, error)
}

// Mounter mounts volumes with one back end. It is safe for concurrent use;
// callers serialize calls on one target.
type Mounter struct {
	b   backend
	run Runner
	log *slog.Logger
	// gate keeps at most one possibly blocking system call per mount point
	// (and one forced unmount) in flight.
	gate          *gate
	beforeSyscall func(op, path string)
	efsTypes      []string
}

func newMounter(b backend, opts []Option) *Mounter {
	m := &Mounter{b: b, run: execRunner, log: slog.New(slog.DiscardHandler), gate: newGate()}
	for _, o := range opts {
		o(m)
	}
	return m
}

// MountVolume mounts vol at target, an existing directory that is not a
// mount point (ErrTargetMounted otherwise: mounts are never stacked). A
// target that is a symlink is refused. On failure nothing is left mounted.
func (m *Mounter) MountVolume(ctx context.Context, vol Volume, target string) error {
	if err := vol.validate(); err != nil {
		return err
	}
	real, err := existingTarget(target)
	if err != nil {
		return err
	}
	at, err := mountsAt(real)
	if err != nil {
		return err
	}
	if len(at) > 0 {
		return fmt.Errorf("%w: %s", ErrTargetMounted, target)
	}
	if err := m.b.mount(ctx, vol, real); err != nil {
		// The contract is "nothing mounted after a failure": a helper that
		// died half way may have left a mount behind.
		if at, _ := mountsAt(real); len(at) > 0 {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			if uerr := m.Unmount(cctx, real); uerr != nil {
				err = errors.Join(err, fmt.Errorf("roll back: %w", uerr))
			}
		}
		return err
	}
	m.log.Debug("mounted", slog.String("fileSystem", vol.FileSystemID), slog.String("accessPoint", vol.AccessPointID),
		slog.String("path", vol.Path), slog.Bool("readOnly", vol.ReadOnly), slog.String("target", target))
	return nil
}

// MountFileSystem mounts the root of file system fsID at target, an existing
// empty directory, for the controller's root-directory removal. On failure
// nothing is left mounted.
func (m *Mounter) MountFileSystem(ctx context.Context, fsID, target string) error {
	return m.MountVolume(ctx, Volume{FileSystemID: fsID}, target)
}

// S3Files mounts whole S3 Files file systems (MountFileSystem) with m.
type S3Files struct{ *Mounter }

// MountFileSystem mounts the root of S3 Files file system fsID at target,
// with MountFileSystem's contract.
func (m S3Files) MountFileSystem(ctx context.Context, fsID, target string) error {
	return m.MountVolume(ctx, Volume{API: volume.APIS3Files, FileSystemID: fsID}, target)
}

// Inspect reports what target holds relative to vol. It reads mountinfo and
// stats the target (bounded by ctx: a hung NFS server cannot hang the call).
func (m *Mounter) Inspect(ctx context.Context, vol Volume, target string) (State, error) {
	if err := vol.validate(); err != nil {
		return NotMounted, err
	}
	real, exists, err := realPath(target)
	if err != nil || !exists {
		return NotMounted, err
	}
	at, err := mountsAt(real)
	if err != nil {
		return NotMounted, err
	}
	switch {
	case len(at) == 0:
		return NotMounted, nil
	case len(at) > 1:
		m.log.Warn("stacked mounts", slog.String("target", target), slog.Int("layers", len(at)))
		return Stale, nil
	case at[0].deleted():
		return Stale, nil
	}
	st, err := m.stat(ctx, real)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, ErrNotResponding) {
			return NotMounted, err
		}
		// ESTALE, ENOTCONN, EIO, a vanished directory...: the mount
		// point is there but cannot be used.
		m.log.Warn("unusable mount", slog.String("target", target), slog.Any("error", err))
		return Stale, nil
	}
	if st.Nlink == 0 {
		return Stale, nil
	}
	return m.b.classify(ctx, vol, at[0], st)
}

// maxLayers bounds the unmount loop: more stacked mounts than this on one
// target means something else keeps mounting there.
const maxLayers = 32

// Unmount unmounts every mount stacked on target. A target that is not
// mounted, or does not exist, is not an error. It does not remove target.
func (m *Mounter) Unmount(ctx context.Context, target string) error {
	return m.unmount(ctx, target, 0)
}

// ForceUnmount is Unmount for a mount whose server does not answer: it
// forces pending requests to fail and detaches the mount (umount -f -l).
func (m *Mounter) ForceUnmount(ctx context.Context, target string) error {
	return m.unmount(ctx, target, unix.MNT_FORCE|unix.MNT_DETACH)
}

func (m *Mounter) unmount(ctx context.Context, target string, flags int) error {
	real, exists, err := realPath(target)
	if err != nil || !exists {
		return err
	}
	for range maxLayers {
		at, err := mountsAt(real)
		if err != nil {
			return err
		}
		if len(at) == 0 {
			return nil
		}
		// A forced unmount is the remedy for a mount point whose other
		// calls are stuck, so it has a key of its own.
		op := OpUnmount
		if flags&unix.MNT_FORCE != 0 {
			op = OpForceUnmount
		}
		_, err = syscallOn(ctx, m, op, real, func() (struct{}, error) {
			return struct{}{}, unix.Unmount(real, flags|unix.UMOUNT_NOFOLLOW)
		})
		switch {
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // not a mount point after all
		case err != nil:
			return fmt.Errorf("unmount %s: %w", target, err)
		}
		m.log.Debug("unmounted", slog.String("target", target), slog.Int("flags", flags))
	}
	return fmt.Errorf("unmount %s: still mounted after %d unmounts", target, maxLayers)
}

// Usage is what statfs reports for a mounted volume.
type Usage struct {
	TotalBytes, AvailableBytes, UsedBytes int64
	TotalInodes, FreeInodes, UsedInodes   int64
}

// Usage reports the capacity and use of the file system mounted at target;
// ErrNotMounted when target is not a mount point.
func (m *Mounter) Usage(ctx context.Context, target string) (Usage, error) {
	real, exists, err := realPath(target)
	if err != nil {
		return Usage{}, fmt.Errorf("%w: %s: %v", ErrNotMounted, target, err)
	}
	if !exists {
		return Usage{}, fmt.Errorf("%w: %s", ErrNotMounted, target)
	}
	at, err := mountsAt(real)
	if err != nil {
		return Usage{}, err
	}
	if len(at) == 0 {
		return Usage{}, fmt.Errorf("%w: %s", ErrNotMounted, target)
	}
	st, err := syscallOn(ctx, m, OpStatfs, real, func() (unix.Statfs_t, error) {
		var st unix.Statfs_t
		err := unix.Statfs(real, &st)
		return st, err
	})
	if err != nil {
		return Usage{}, fmt.Errorf("statfs %s: %w", target, err)
	}
	bs := uint64(st.Bsize)
	return Usage{
		TotalBytes:     product(st.Blocks, bs),
		AvailableBytes: product(st.Bavail, bs),
		UsedBytes:      product(st.Blocks-st.Bfree, bs),
		TotalInodes:    product(st.Files, 1),
		FreeInodes:     product(st.Ffree, 1),
		UsedInodes:     product(st.Files-st.Ffree, 1),
	}, nil
}

// product is a*b capped at MaxInt64: EFS reports a size of nearly 8 EiB,
// which some block size products would push past int64.
func product(a, b uint64) int64 {
	if b != 0 && a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return int64(a * b)
}

// existingTarget checks that target is an existing directory, not a
// symlink, and returns its real path.
func existingTarget(target string) (string, error) {
	real, exists, err := realPath(target)
	if err != nil {
		return "", fmt.Errorf("%w: target %q: %v", volume.ErrUnsafePath, target, err)
	}
	if !exists {
		return "", fmt.Errorf("target %s: parent directory does not exist", target)
	}
	fi, err := os.Lstat(real)
	if err != nil {
		return "", fmt.Errorf("target: %w", err)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return "", fmt.Errorf("%w: target %s is a symlink", volume.ErrUnsafePath, target)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: target %s is not a directory", volume.ErrInvalidParameter, target)
	}
	return real, nil
}

// stat stats path (following a mount on it), bounded by ctx.
func (m *Mounter) stat(ctx context.Context, path string) (*unix.Stat_t, error) {
	return syscallOn(ctx, m, OpStat, path, func() (*unix.Stat_t, error) {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			return nil, err
		}
		return &st, nil
	})
}

// syscallOn runs f, a system call named op on the mount point path that may
// block on a hung NFS server, and gives up waiting when ctx ends. The call
// itself cannot be interrupted: its goroutine finishes when the kernel lets
// it, and until then the mount point's gate refuses further calls on it
// (see gate). Stat, statfs and unmount share one key per mount point; a
// forced unmount has its own.
func syscallOn[T any](ctx context.Context, m *Mounter, op, path string, f func() (T, error)) (T, error) {
	key := path
	if op == OpForceUnmount {
		key = op + "\x00" + path
	}
	return gated(ctx, m.gate, key, op, path, func() (T, error) {
		if m.beforeSyscall != nil {
			m.beforeSyscall(op, path)
		}
		return f()
	})
}

// SyscallsInFlight counts the system calls on mount points running now,
// those abandoned by their callers included: at most two per mount point.
func (m *Mounter) SyscallsInFlight() int { return m.gate.inFlight() }
