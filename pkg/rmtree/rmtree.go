// Package rmtree removes a directory tree that other people can write to,
// and could have prepared, without ever removing anything outside it: the
// root directory of a deleted access point, on a file system whose tenants
// may plant symlinks in it or swap directories for symlinks while it is
// being removed.
//
// Contract of RemoveAll(ctx, base, rel):
//   - base is trusted (the caller's own mount point); rel is a relative,
//     slash-separated path below it with no "", "." or ".." component.
//   - The walk from base to base/rel opens one component at a time, relative
//     to the descriptor of the one before, never following a symlink and
//     never crossing a mount point. If a component, rel's last one included,
//     is a symlink, not a directory, or a mount point, RemoveAll removes
//     nothing and returns an error wrapping ErrUnsafe. If a component is
//     missing, there is nothing to remove: nil.
//   - Inside base/rel everything is removed through the descriptor of its
//     parent directory: a symlink is unlinked, never followed, whether it
//     was there from the start or swapped in during the walk; a mount point
//     inside the tree is not entered (the removal fails, EBUSY or ErrUnsafe).
//     Nothing outside base/rel is removed, renamed or written to.
//   - Bounded resources, whatever the depth and width of the tree: at most
//     MaxOpenDirs+2 descriptors and MaxOpenDirs*BatchSize names in memory.
//     A directory deeper than MaxOpenDirs is first moved up into base/rel
//     (renamed to ".rmtree-*"), which keeps it inside the tree.
//   - ctx is checked before every entry: on cancellation RemoveAll returns
//     ctx.Err() promptly, leaving a partly removed tree (and perhaps moved
//     ".rmtree-*" directories) inside base/rel, which a later call removes.
//   - base/rel itself is removed last. A tree that keeps being written to
//     during the removal may not be emptied: that is an error, and a later
//     call goes on.
//
// Linux only (openat2; without it, openat and a device-number check, which
// cannot see a bind mount of the same file system).
package rmtree

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/pkg/dirfd"
)

// ErrUnsafe: the path to the tree is not a chain of real directories on one
// mount (a symlink, a non-directory or a mount point on the way), or rel is
// not a path below base. Nothing was removed.
var ErrUnsafe = errors.New("unsafe path to the tree to remove")

// Defaults of Remover.
const (
	DefaultMaxOpenDirs = 64
	DefaultBatchSize   = 256
	minOpenDirs        = 2 // the root and one level to move from
	maxRootAttempts    = 3 // emptying rounds while someone writes into the root
	maxMoveNames       = 100
)

// Remover is RemoveAll with its bounds set; the zero value uses the defaults.
type Remover struct {
	// MaxOpenDirs bounds the directories of the tree held open at once
	// (the root included); deeper directories are moved up into the root.
	MaxOpenDirs int
	// BatchSize is how many names are read from a directory at a time.
	BatchSize int
}

// RemoveAll removes base/rel and everything in it; see the package
// documentation for what it promises.
func RemoveAll(ctx context.Context, base, rel string) error {
	return Remover{}.RemoveAll(ctx, base, rel)
}

// RemoveAll removes base/rel within r's bounds.
func (r Remover) RemoveAll(ctx context.Context, base, rel string) error {
	parent, name, err := openParent(base, rel)
	if parent < 0 || err != nil {
		return err
	}
	defer unix.Close(parent)
	for attempt := 1; ; attempt++ {
		beforeOpen(rel)
		root, err := openDir(parent, name)
		if err != nil {
			return walkError(parent, name, rel, err)
		}
		w := &walk{Remover: r.withDefaults(), ctx: ctx}
		if err := w.empty(root, rel); err != nil {
			return err
		}
		err = unlinkat(parent, name, unix.AT_REMOVEDIR)
		switch {
		case err == nil, errors.Is(err, unix.ENOENT):
			return nil
		case notEmpty(err) && attempt < maxRootAttempts:
			continue // written to since it was emptied: again
		default:
			return &os.PathError{Op: "rmdir", Path: rel, Err: err}
		}
	}
}

// openParent opens the directory that holds rel's last component, walking
// from base one component at a time (no symlink, no mount point), and
// returns its descriptor and that component. A missing component on the
// way: -1 and no error (nothing there).
func openParent(base, rel string) (int, string, error) {
	comps, err := components(rel)
	if err != nil {
		return -1, "", err
	}
	parent, err := retry(func() (int, error) {
		return unix.Open(base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return -1, "", &os.PathError{Op: "open", Path: base, Err: err}
	}
	for i, c := range comps[:len(comps)-1] {
		beforeOpen(strings.Join(comps[:i+1], "/"))
		next, err := openDir(parent, c)
		if err != nil {
			err = walkError(parent, c, strings.Join(comps[:i+1], "/"), err)
			unix.Close(parent)
			return -1, "", err
		}
		unix.Close(parent)
		parent = next
	}
	return parent, comps[len(comps)-1], nil
}

// ErrExist: Move's destination is there already (a non-empty directory,
// or anything but a directory). Nothing was moved.
var ErrExist = errors.New("destination exists")

// Move renames the directory base/from to base/to, one atomic rename on
// one file system: the tree stays whole at one of the two names, whatever
// happens. The walks to both parents are RemoveAll's (no symlink, no mount
// point, ErrUnsafe otherwise), and from itself must be a real directory
// that is not a mount point. An empty directory at to is replaced (as
// rename(2) does); a non-empty one, or anything else there, is ErrExist.
// A missing from (or a missing component on its way): os.ErrNotExist.
func Move(base, from, to string) error {
	parent := func(rel string) (int, string, error) {
		fd, name, err := openParent(base, rel)
		if err == nil && fd < 0 {
			err = &os.PathError{Op: "rename", Path: rel, Err: os.ErrNotExist}
		}
		return fd, name, err
	}
	fp, fname, err := parent(from)
	if err != nil {
		return err
	}
	defer unix.Close(fp)
	beforeOpen(from)
	fd, err := openDir(fp, fname)
	if err != nil {
		if err := walkError(fp, fname, from, err); err != nil {
			return err
		}
		return &os.PathError{Op: "rename", Path: from, Err: os.ErrNotExist}
	}
	unix.Close(fd)
	tp, tname, err := parent(to)
	if err != nil {
		return err
	}
	defer unix.Close(tp)
	_, err = retry(func() (int, error) { return 0, unix.Renameat(fp, fname, tp, tname) })
	switch {
	case err == nil:
		return nil
	case notEmpty(err), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EISDIR):
		return fmt.Errorf("%w: %s: %w", ErrExist, to, err)
	}
	return &os.PathError{Op: "rename", Path: from + " -> " + to, Err: err}
}

func (r Remover) withDefaults() Remover {
	if r.MaxOpenDirs == 0 {
		r.MaxOpenDirs = DefaultMaxOpenDirs
	}
	r.MaxOpenDirs = max(r.MaxOpenDirs, minOpenDirs)
	if r.BatchSize <= 0 {
		r.BatchSize = DefaultBatchSize
	}
	return r
}

// components splits rel, refusing anything that is not a plain path below base.
func components(rel string) ([]string, error) {
	if rel == "" || strings.HasPrefix(rel, "/") || strings.ContainsRune(rel, 0) {
		return nil, fmt.Errorf("%w: %q is not a relative path below the base", ErrUnsafe, rel)
	}
	comps := strings.Split(rel, "/")
	for _, c := range comps {
		if c == "" || c == "." || c == ".." {
			return nil, fmt.Errorf("%w: %q has a %q component", ErrUnsafe, rel, c)
		}
	}
	return comps, nil
}

// walkError explains why name, in dirfd, could not be opened as a directory
// on the way to the tree; ENOENT means the tree is gone: nil.
func walkError(dirfd int, name, path string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: %s is a mount point", ErrUnsafe, path)
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		var st unix.Stat_t
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return fmt.Errorf("%w: %s is a symlink", ErrUnsafe, path)
		}
		return fmt.Errorf("%w: %s is not a directory", ErrUnsafe, path)
	}
	return &os.PathError{Op: "open", Path: path, Err: err}
}

// testHookOpen, when set by this package's tests, runs before each directory
// is opened, with its path relative to base: the moment a tenant would swap
// it for a symlink.
var testHookOpen func(path string)

func beforeOpen(path string) {
	if testHookOpen != nil {
		testHookOpen(path)
	}
}

// openDir opens name in dirfd as a directory of the tree: no symlink, no
// mount point (see dirfd.Open).
func openDir(dir int, name string) (int, error) { return dirfd.Open(dir, name) }

var retry = dirfd.Retry

func unlinkat(dirfd int, name string, flags int) error {
	_, err := retry(func() (int, error) { return 0, unix.Unlinkat(dirfd, name, flags) })
	return err
}

func notEmpty(err error) bool { return errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) }

// frame is one open directory of the walk.
type frame struct {
	f     *os.File
	fd    int
	path  string   // relative to base, for errors
	name  string   // in the frame below
	names []string // read and not handled yet
	seen  bool     // root only: a name was read, or moved in, since the last rewind
}

// walk empties one tree. os.RemoveAll would do, were it not for two things:
// it recurses holding a descriptor per level (a 200,000-deep tree exhausts
// them) and it takes no context.
type walk struct {
	Remover
	ctx   context.Context
	stack []*frame
	tag   string // names of moved directories: ".rmtree-<tag>-<n>"
	moved int
}

// empty removes everything in root, an open directory it takes over (and
// closes); root itself stays.
func (w *walk) empty(root int, rel string) error {
	w.push(root, rel, "")
	defer func() {
		for _, f := range w.stack {
			f.f.Close()
		}
	}()
	for {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		top := w.stack[len(w.stack)-1]
		if len(top.names) > 0 {
			name := top.names[len(top.names)-1]
			top.names = top.names[:len(top.names)-1]
			if err := w.remove(top, name); err != nil {
				return err
			}
			continue
		}
		names, err := top.f.Readdirnames(w.BatchSize)
		if len(names) > 0 {
			top.names, top.seen = names, true
			continue
		}
		// ENOENT: the directory was removed under us (another delete of
		// the same tree at once): it has no entries left to remove.
		if err != nil && err != io.EOF && !errors.Is(err, unix.ENOENT) {
			return err
		}
		if len(w.stack) == 1 {
			if !top.seen {
				return nil
			}
			// Removing entries while reading a directory can make the
			// reading skip others (see os.RemoveAll and Go issue 20841),
			// and moveUp adds entries: read the root again from the start
			// until a whole pass finds nothing.
			if _, err := top.f.Seek(0, io.SeekStart); err != nil {
				return err
			}
			top.seen = false
			continue
		}
		// Below the root a skipped entry shows as ENOTEMPTY here, and the
		// directory is then entered again, from the start.
		w.stack = w.stack[:len(w.stack)-1]
		top.f.Close()
		below := w.stack[len(w.stack)-1]
		switch err := unlinkat(below.fd, top.name, unix.AT_REMOVEDIR); {
		case err == nil, errors.Is(err, unix.ENOENT):
		case notEmpty(err):
			below.names = append(below.names, top.name) // an entry skipped or written meanwhile: again
		default:
			return &os.PathError{Op: "rmdir", Path: top.path, Err: err}
		}
	}
}

func (w *walk) push(fd int, path, name string) {
	w.stack = append(w.stack, &frame{f: os.NewFile(uintptr(fd), path), fd: fd, path: path, name: name})
}

// remove removes name in top if it is not a directory or an empty one, and
// otherwise opens it for the walk to empty (or, at the depth bound, moves it
// up into the root).
func (w *walk) remove(top *frame, name string) error {
	path := top.path + "/" + name
	err := unlinkat(top.fd, name, 0)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return nil
	case !errors.Is(err, unix.EISDIR):
		return &os.PathError{Op: "unlink", Path: path, Err: err}
	}
	err = unlinkat(top.fd, name, unix.AT_REMOVEDIR)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ENOTDIR):
		top.names = append(top.names, name) // no longer a directory: unlink it
		return nil
	case !notEmpty(err):
		return &os.PathError{Op: "rmdir", Path: path, Err: err}
	}
	if len(w.stack) >= w.MaxOpenDirs {
		return w.moveUp(top, name)
	}
	beforeOpen(path)
	fd, err := openDir(top.fd, name)
	switch {
	case err == nil:
		w.push(fd, path, name)
		return nil
	case errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		top.names = append(top.names, name) // swapped for a symlink or a file: unlink it
		return nil
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: %s is a mount point", ErrUnsafe, path)
	}
	return &os.PathError{Op: "open", Path: path, Err: err}
}

// moveUp renames name, a directory in top, into the root, where the walk
// finds it again at depth one: the tree stays the same set of entries, and
// the walk never holds more than MaxOpenDirs directories. (Climbing back
// through ".." instead would need every ancestor's identity checked, or a
// directory moved meanwhile would lead the walk out of the tree.)
func (w *walk) moveUp(top *frame, name string) error {
	root := w.stack[0]
	if w.tag == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		w.tag = hex.EncodeToString(b)
	}
	for range maxMoveNames {
		w.moved++
		to := fmt.Sprintf(".rmtree-%s-%d", w.tag, w.moved)
		err := unix.Renameat(top.fd, name, root.fd, to)
		switch {
		case err == nil:
			root.seen = true // the root is read again before it counts as empty
			return nil
		case errors.Is(err, unix.ENOENT):
			return nil
		case notEmpty(err), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EISDIR), errors.Is(err, unix.EINTR):
			continue // the name is taken (by the tenant, say): another one
		default:
			return &os.PathError{Op: "rename", Path: top.path + "/" + name, Err: err}
		}
	}
	return fmt.Errorf("rename %s/%s: no free name in the root after %d attempts", top.path, name, maxMoveNames)
}
