// Package diskusage measures what a directory tree holds (bytes allocated
// and inodes), as du does, for the per-volume usage of NodeGetVolumeStats:
// on EFS, statfs of a mount reports the whole file system (8 EiB), not the
// volume.
//
// Contract of Walker.Walk(ctx, root):
//   - root is opened once, without following a symlink at it; everything
//     below is reached through the descriptor of its parent directory
//     (fstatat, and dirfd.Open for directories), never following a symlink
//     (a symlink counts as itself) and never entering another mount, a bind
//     mount of the same file system included (its mount point is not
//     counted either).
//   - Bytes are allocated blocks (st_blocks*512, what du reports); an inode
//     with several hard links in the tree counts once; the root counts.
//   - Bounded descriptors: at most MaxOpenDirs directories are open at once
//     (MaxOpenDirs+1 descriptors while a deferred one is reopened). A
//     directory deeper than that is remembered by its path and walked later,
//     reopened from the root one component at a time (the same checks); what
//     is remembered grows with the number of directories at those depths.
//     Names in memory: at most MaxOpenDirs*BatchSize.
//   - ctx is checked before every entry: on cancellation Walk returns
//     ctx.Err() promptly and closes every descriptor it opened. (A system
//     call blocked on a hung NFS server cannot be interrupted: Walk returns
//     once it does.)
//   - Entries removed or renamed during the walk are skipped; the result is
//     a snapshot as good as du's on a tree that is being written to. A
//     directory renamed out of the tree while open is still counted.
package diskusage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/pkg/dirfd"
)

// Defaults of Walker.
const (
	DefaultMaxOpenDirs = 32
	DefaultBatchSize   = 512
	minOpenDirs        = 2 // the root and one level below it
)

// Usage is what a tree holds.
type Usage struct {
	Bytes  int64 // allocated: st_blocks*512, hard links once
	Inodes int64 // files, directories, symlinks, ...; hard links once; the root included
	Dirs   int64 // directories walked, the root included
}

// Walker is Walk with its bounds set; the zero value uses the defaults.
type Walker struct {
	// MaxOpenDirs bounds the directories held open at once, the root
	// included.
	MaxOpenDirs int
	// BatchSize is how many names are read from a directory at a time.
	BatchSize int
	// OnDir, if set, is called after each directory is opened, with the
	// walk's context, its root and the count so far: for progress, and for
	// tests to hold a walk at a chosen point.
	OnDir func(ctx context.Context, root string, sofar Usage)
}

func (w Walker) withDefaults() Walker {
	if w.MaxOpenDirs == 0 {
		w.MaxOpenDirs = DefaultMaxOpenDirs
	}
	w.MaxOpenDirs = max(w.MaxOpenDirs, minOpenDirs)
	if w.BatchSize <= 0 {
		w.BatchSize = DefaultBatchSize
	}
	return w
}

// pathNode is a directory deferred below the depth bound: its name and its
// parent's node (nil for a child of the root), so deferred paths share their
// prefixes.
type pathNode struct {
	parent *pathNode
	name   string
}

func (p *pathNode) components() []string {
	var c []string
	for n := p; n != nil; n = n.parent {
		c = append(c, n.name)
	}
	for i, j := 0, len(c)-1; i < j; i, j = i+1, j-1 {
		c[i], c[j] = c[j], c[i]
	}
	return c
}

type frame struct {
	f     *os.File
	fd    int
	node  *pathNode // nil for the root
	names []string
}

type walk struct {
	Walker
	ctx      context.Context
	root     string
	dev      uint64 // the root's device: another one is another mount
	u        Usage
	seen     map[[2]uint64]struct{} // (dev, ino) of inodes with several links
	stack    []*frame
	deferred []*pathNode
}

// Walk measures the tree at root; see the package documentation.
func Walk(ctx context.Context, root string) (Usage, error) { return Walker{}.Walk(ctx, root) }

// Walk measures the tree at root within w's bounds.
func (w Walker) Walk(ctx context.Context, root string) (Usage, error) {
	if err := ctx.Err(); err != nil {
		return Usage{}, err
	}
	fd, err := dirfd.Retry(func() (int, error) {
		return unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return Usage{}, &os.PathError{Op: "open", Path: root, Err: err}
	}
	wk := &walk{Walker: w.withDefaults(), ctx: ctx, root: root, seen: map[[2]uint64]struct{}{}}
	defer func() {
		for _, f := range wk.stack {
			f.f.Close()
		}
	}()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return Usage{}, &os.PathError{Op: "fstat", Path: root, Err: err}
	}
	wk.dev = st.Dev
	wk.count(&st)
	wk.push(fd, nil, root)
	if err := wk.run(); err != nil {
		return wk.u, err
	}
	return wk.u, nil
}

func (w *walk) push(fd int, node *pathNode, name string) {
	w.stack = append(w.stack, &frame{f: os.NewFile(uintptr(fd), name), fd: fd, node: node})
	w.u.Dirs++
	if w.OnDir != nil {
		w.OnDir(w.ctx, w.root, w.u)
	}
}

func (w *walk) pop() {
	top := w.stack[len(w.stack)-1]
	w.stack = w.stack[:len(w.stack)-1]
	top.f.Close()
}

// count adds an inode, once however many links it has.
func (w *walk) count(st *unix.Stat_t) {
	if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		k := [2]uint64{st.Dev, st.Ino}
		if _, dup := w.seen[k]; dup {
			return
		}
		w.seen[k] = struct{}{}
	}
	w.u.Inodes++
	w.u.Bytes += st.Blocks * 512
}

// run walks until the stack and the deferred directories are done.
func (w *walk) run() error {
	for {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		top := w.stack[len(w.stack)-1]
		if len(top.names) > 0 {
			name := top.names[len(top.names)-1]
			top.names = top.names[:len(top.names)-1]
			if err := w.entry(top, name); err != nil {
				return err
			}
			continue
		}
		names, err := top.f.Readdirnames(w.BatchSize)
		if len(names) > 0 {
			top.names = names
			continue
		}
		if err != nil && err != io.EOF && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("read directory %s: %w", w.path(top.node), err)
		}
		if len(w.stack) > 1 {
			w.pop()
			continue
		}
		if len(w.deferred) == 0 {
			return nil
		}
		next := w.deferred[len(w.deferred)-1]
		w.deferred = w.deferred[:len(w.deferred)-1]
		if err := w.reopen(next); err != nil {
			return err
		}
	}
}

// entry counts name, in top, and opens it for the walk if it is a directory.
func (w *walk) entry(top *frame, name string) error {
	var st unix.Stat_t
	_, err := dirfd.Retry(func() (int, error) { return 0, unix.Fstatat(top.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) })
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil // removed meanwhile
	case err != nil:
		return &os.PathError{Op: "fstatat", Path: w.path(&pathNode{top.node, name}), Err: err}
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		w.count(&st)
		return nil
	case st.Dev != w.dev:
		return nil // a mount point of another file system: not ours
	}
	node := &pathNode{top.node, name}
	if len(w.stack) >= w.MaxOpenDirs {
		w.deferred = append(w.deferred, node)
		return nil
	}
	return w.enter(top.fd, node)
}

// enter opens node, a directory in the open directory parent, counts it and
// pushes it. A directory that is gone, is no longer one, or is a mount point
// (EXDEV: a bind mount of the same file system) is skipped.
func (w *walk) enter(parent int, node *pathNode) error {
	fd, err := dirfd.Open(parent, node.name)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return nil
	case err != nil:
		return &os.PathError{Op: "open", Path: w.path(node), Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return &os.PathError{Op: "fstat", Path: w.path(node), Err: err}
	}
	w.count(&st)
	w.push(fd, node, node.name)
	return nil
}

// reopen opens a deferred directory from the root (the only frame left),
// one component at a time with the same checks as the first walk, holding
// two descriptors besides the root's on the way, and pushes it. A path that no longer leads to a directory
// is skipped.
func (w *walk) reopen(node *pathNode) error {
	comps := node.components()
	cur := w.stack[0].fd
	for i, c := range comps[:len(comps)-1] {
		if err := w.ctx.Err(); err != nil {
			closeUnlessRoot(w, cur)
			return err
		}
		next, err := dirfd.Open(cur, c)
		closeUnlessRoot(w, cur)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
				return nil
			}
			return &os.PathError{Op: "open", Path: strings.Join(comps[:i+1], "/"), Err: err}
		}
		cur = next
	}
	err := w.enter(cur, node)
	closeUnlessRoot(w, cur)
	return err
}

func closeUnlessRoot(w *walk, fd int) {
	if fd != w.stack[0].fd {
		unix.Close(fd)
	}
}

// path is node's path relative to the root, for errors.
func (w *walk) path(node *pathNode) string {
	if node == nil {
		return "."
	}
	return strings.Join(node.components(), "/")
}
