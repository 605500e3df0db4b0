// Package treecopy copies a directory tree that other people can write to
// into another directory on the same machine, keeping what a snapshot or a
// clone of an access point's root must keep, and never writing outside the
// destination: the tenants of the source may plant symlinks in it, or swap
// directories for symlinks, while it is being copied.
//
// Contract of Copy(ctx, src, dst, opts):
//   - src and dst are trusted paths (the caller's own mount); dst is an
//     existing, empty directory that the caller made and nobody else writes
//     to. Copy fills it, and sets dst's own owner, mode and times from src's
//     root last.
//   - Every entry of src is copied with its owner and group (remapped by
//     Options.MapIDs when set), its whole mode (setuid, setgid and sticky
//     included), and its access and modification times to the nanosecond
//     (a directory's after its entries are made). Symlinks are copied as
//     symlinks with the same target text and never followed. Names of one
//     inode (hard links, any kind but directories) become names of one
//     inode in dst. Regular files keep their holes: only data extents
//     (SEEK_DATA/SEEK_HOLE) are copied, with copy_file_range when the
//     kernel can, read/write otherwise. FIFOs and device nodes are made
//     again with mknod. Sockets are skipped and counted in Stats.Skipped.
//   - Not kept: extended attributes (ACLs, SELinux labels, user.*), file
//     flags (chattr), change and birth times, and the identity of inodes
//     (dst's inode numbers are new). The copy is not atomic: entries that
//     change while it runs are copied as Copy found them, each at some
//     moment of the copy; an entry removed meanwhile is left out.
//   - The walk of src opens one directory at a time relative to its
//     parent's descriptor, never following a symlink and never crossing a
//     mount point (pkg/dirfd); files are opened with O_NOFOLLOW. Everything
//     in dst is made relative to descriptors of dst's directories too. A
//     symlink swapped in anywhere in src is copied as a symlink; nothing
//     outside dst is written to, whatever the tenant does. A mount point
//     inside src is an error wrapping ErrMountPoint; a directory that
//     changes identity under the walk, ErrChanged. If dst is inside src,
//     the copy leaves it out.
//   - Bounded resources whatever the tree's width and depth: at most
//     Options.MaxOpenFiles descriptors, directory entries read a few
//     kilobytes at a time, at most MaxOpenFiles/6 files queued or being
//     copied at once, and only the inodes with more than one link that were
//     seen and still have unseen links remembered. A tree deeper than the
//     descriptor bound has its ancestors' descriptors closed and opened
//     again one component at a time (checking that they are the same
//     directories) when the walk returns to them: a cost in depth squared
//     over MaxOpenFiles (depth 2000: about a second with the default bound,
//     a few with 32).
//   - ctx is checked before every entry and every file: once cancelled,
//     Copy returns ctx.Err() promptly and leaves a partial copy in dst.
//     Callers copy into a temporary directory and rename it into place only
//     once Copy returned nil, so a partial copy is never taken for a whole
//     one (and remove the temporary directory otherwise, see pkg/rmtree).
//   - Errors name the entry by its path relative to src:
//     "treecopy: <rel>: <cause>". Copy never panics on what it finds.
//
// Linux only (openat2, copy_file_range, SEEK_DATA; the same fallbacks as
// pkg/dirfd without openat2). Without root (CAP_CHOWN, CAP_FOWNER,
// CAP_DAC_OVERRIDE, CAP_MKNOD) owners, device nodes and unreadable entries
// cannot be copied.
package treecopy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/pkg/dirfd"
)

// Sentinel errors, wrapped with the path of the entry (errors.Is).
var (
	// ErrMountPoint: a directory of src is a mount point; the walk does
	// not cross into another file system.
	ErrMountPoint = errors.New("mount point inside the tree")
	// ErrChanged: an entry kept changing kind while Copy looked at it, or a
	// directory opened again is not the one the walk left.
	ErrChanged = errors.New("changed during the copy")
	// ErrNotEmpty: dst has entries already.
	ErrNotEmpty = errors.New("destination is not empty")
)

// Defaults of Options.
const (
	DefaultWorkers      = 8
	DefaultMaxOpenFiles = 128
	minOpenFiles        = 16 // 4 spare, 3 directory pairs, 2 files in flight
	fdsPerFile          = 3  // the file, its copy, and the copy's directory
	spareFDs            = 4  // a reopening or hard link walk holds 2 more at once
	maxAttempts         = 3  // looks at an entry that keeps changing kind
	direntBufSize       = 8 << 10
)

// Options tune Copy; the zero value uses the defaults.
type Options struct {
	// Workers is how many files are copied at once (DefaultWorkers).
	Workers int
	// MaxOpenFiles bounds the descriptors Copy holds at once
	// (DefaultMaxOpenFiles, at least 16): half of them for files in flight
	// (three each), the rest for the directories of the walk.
	MaxOpenFiles int
	// MapIDs, when set, gives the owner and group of each copy from those
	// of its original (a clone into another access point takes its ids).
	// It is called from several goroutines at once.
	MapIDs func(uid, gid int) (int, int)
}

// Stats counts what Copy made.
type Stats struct {
	Files     int64 // regular files, FIFOs and device nodes (one per inode)
	Dirs      int64 // directories below the root
	Symlinks  int64 // symlinks (one per inode)
	HardLinks int64 // further names of an inode already copied
	Skipped   int64 // sockets
	Bytes     int64 // data copied, holes not counted
	Size      int64 // sum of regular files' sizes (one per inode)
}

// Copy copies the tree at src into the empty directory dst; see the
// package documentation for what it promises.
func Copy(ctx context.Context, src, dst string, opts Options) (Stats, error) {
	opts = opts.withDefaults()
	c := newCopier(ctx, opts)
	defer c.cancel()
	root, err := openRoot(src, dst)
	if err != nil {
		return Stats{}, err
	}
	c.root, c.dstID = root, root.dstID
	c.stack = []*frame{root}
	c.open = 1
	var wg sync.WaitGroup
	for range opts.Workers {
		wg.Go(c.worker)
	}
	werr := c.walk()
	if werr != nil {
		c.cancel() // the workers only close what is queued
	}
	close(c.jobs)
	wg.Wait()
	c.closeAll()
	defer root.closeFDs()
	if err := c.firstError(werr); err != nil {
		return c.stats(), err
	}
	if err := c.setAttrs(root.dst, &root.st); err != nil {
		return c.stats(), fmt.Errorf("treecopy: .: %w", err)
	}
	return c.stats(), nil
}

func (o Options) withDefaults() Options {
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.MaxOpenFiles == 0 {
		o.MaxOpenFiles = DefaultMaxOpenFiles
	}
	o.MaxOpenFiles = max(o.MaxOpenFiles, minOpenFiles)
	return o
}

// devIno names an inode.
type devIno struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) devIno { return devIno{st.Dev, st.Ino} }

// frame is one directory of the walk: its source and its copy.
type frame struct {
	parent *frame // nil for the root
	name   string // in parent, the same in src and dst
	src    int    // descriptors, -1 while closed
	dst    int
	srcID  devIno // to check a reopened directory is the same one
	dstID  devIno
	st     unix.Stat_t // the source directory's, for its copy at the end
	ents   []dirent    // read and not handled yet
	pos    int64       // directory offset after the last handled entry
	eof    bool
	reseek bool // opened again: seek to pos before reading
	// unfinished counts the walk's hold on the directory (until it is
	// popped) and the files that workers are still to create in it: its
	// times are set by whoever takes it to zero, after the last entry.
	unfinished atomic.Int64
}

// rel is f's path relative to src ("." for the root), built only for
// errors and for jobs: the walk keeps names, not paths, so that a deep
// tree costs memory in its depth, not in its depth squared.
func (f *frame) rel() string {
	var names []string
	for g := f; g.parent != nil; g = g.parent {
		names = append(names, g.name)
	}
	if len(names) == 0 {
		return "."
	}
	for i, j := 0, len(names)-1; i < j; i, j = i+1, j-1 {
		names[i], names[j] = names[j], names[i]
	}
	return strings.Join(names, "/")
}

func (f *frame) relOf(name string) string {
	if f.parent == nil {
		return name
	}
	return f.rel() + "/" + name
}

func (f *frame) closeFDs() {
	if f.src >= 0 {
		unix.Close(f.src)
	}
	if f.dst >= 0 {
		unix.Close(f.dst)
	}
	f.src, f.dst = -1, -1
}

// openRoot opens src and dst (trusted paths, but not symlinks themselves)
// and checks that dst is empty.
func openRoot(src, dst string) (*frame, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	root := &frame{src: -1, dst: -1}
	var err error
	if root.src, err = dirfd.Retry(func() (int, error) { return unix.Open(src, flags, 0) }); err != nil {
		return nil, fmt.Errorf("treecopy: open %s: %w", src, err)
	}
	if root.dst, err = dirfd.Retry(func() (int, error) { return unix.Open(dst, flags, 0) }); err != nil {
		root.closeFDs()
		return nil, fmt.Errorf("treecopy: open %s: %w", dst, err)
	}
	var dstSt unix.Stat_t
	if err := errors.Join(unix.Fstat(root.src, &root.st), unix.Fstat(root.dst, &dstSt)); err != nil {
		root.closeFDs()
		return nil, fmt.Errorf("treecopy: stat: %w", err)
	}
	root.srcID, root.dstID = idOf(&root.st), idOf(&dstSt)
	if err := checkEmpty(root.dst); err != nil {
		root.closeFDs()
		return nil, fmt.Errorf("treecopy: %s: %w", dst, err)
	}
	return root, nil
}

func checkEmpty(fd int) error {
	buf := make([]byte, direntBufSize)
	ents, _, err := readDirents(fd, buf)
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return ErrNotEmpty
	}
	_, err = unix.Seek(fd, 0, 0)
	return err
}

// copier is one Copy: a walker (the calling goroutine) that reads src's
// directories and makes dst's entries, and workers that fill the regular
// files it made.
type copier struct {
	opts   Options
	ctx    context.Context
	cancel context.CancelFunc

	root      *frame
	dstID     devIno
	stack     []*frame
	open      int // frames with open descriptors
	maxFrames int
	dirents   []byte
	links     map[devIno]*link // inodes with links not seen yet

	slots chan struct{} // a file in flight holds one
	jobs  chan job

	files, dirs, symlinks, hardLinks, skipped, size int64 // walker's
	bytes                                           atomic.Int64

	errOnce sync.Once
	err     error // a worker's first error
}

// link is the first copy of an inode with more than one name.
type link struct {
	dir    *frame
	name   string
	unseen uint64 // names not met yet
}

func newCopier(ctx context.Context, opts Options) *copier {
	ctx, cancel := context.WithCancel(ctx)
	fileSlots := opts.MaxOpenFiles / (2 * fdsPerFile)
	return &copier{
		opts: opts, ctx: ctx, cancel: cancel,
		maxFrames: (opts.MaxOpenFiles - spareFDs - fdsPerFile*fileSlots) / 2,
		dirents:   make([]byte, direntBufSize),
		links:     map[devIno]*link{},
		slots:     make(chan struct{}, fileSlots),
		jobs:      make(chan job, fileSlots),
	}
}

func (c *copier) stats() Stats {
	return Stats{Files: c.files, Dirs: c.dirs, Symlinks: c.symlinks, HardLinks: c.hardLinks,
		Skipped: c.skipped, Bytes: c.bytes.Load(), Size: c.size}
}

// fail records a worker's error and stops the walk.
func (c *copier) fail(err error) {
	c.errOnce.Do(func() { c.err = err; c.cancel() })
}

// firstError prefers a worker's error to the walker's, which is then only
// the cancellation it caused.
func (c *copier) firstError(walkErr error) error {
	c.errOnce.Do(func() {}) // no more writes to c.err
	if c.err != nil {
		return c.err
	}
	return walkErr
}

// closeAll closes the frames an error left on the stack, but the root's.
func (c *copier) closeAll() {
	for _, f := range c.stack {
		if f.parent != nil {
			f.closeFDs()
		}
	}
	c.stack = nil
}

// testHookEntry, when set by this package's tests, runs before each entry
// is looked at, with its path relative to src: the moment a tenant would
// swap it.
var testHookEntry func(rel string)

// walk copies the tree depth first, one entry at a time.
func (c *copier) walk() error {
	for len(c.stack) > 0 {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		top := c.stack[len(c.stack)-1]
		if top.src < 0 {
			if err := c.reopen(len(c.stack) - 1); err != nil {
				return err
			}
		}
		if len(top.ents) == 0 && !top.eof {
			if err := c.read(top); err != nil {
				return fmt.Errorf("treecopy: %s: %w", top.rel(), err)
			}
			continue
		}
		if len(top.ents) == 0 {
			if err := c.pop(); err != nil {
				return err
			}
			continue
		}
		e := top.ents[0]
		top.ents = top.ents[1:]
		top.pos = e.off
		if testHookEntry != nil {
			testHookEntry(top.relOf(e.name))
		}
		if err := c.entry(top, e.name); err != nil {
			return err
		}
	}
	return nil
}

// read reads the next batch of top's entries.
func (c *copier) read(top *frame) error {
	if top.reseek {
		if _, err := unix.Seek(top.src, top.pos, 0); err != nil {
			return err
		}
		top.reseek = false
	}
	ents, eof, err := readDirents(top.src, c.dirents)
	top.ents, top.eof = ents, eof
	return err
}

// pop leaves the directory on top: all its entries are read, and made
// but for files a worker is still to create. The last of them sets its
// owner, mode and times (the root's are set by Copy, after the workers).
func (c *copier) pop() error {
	top := c.stack[len(c.stack)-1]
	c.stack = c.stack[:len(c.stack)-1]
	if top.parent == nil {
		return nil
	}
	defer func() { top.closeFDs(); c.open-- }()
	return c.release(top, top.dst)
}

// release drops one hold on f, whose copy is open at fd, and sets the
// copy's attributes if it was the last.
func (c *copier) release(f *frame, fd int) error {
	if f.unfinished.Add(-1) > 0 {
		return nil
	}
	if err := c.setAttrs(fd, &f.st); err != nil {
		return fmt.Errorf("treecopy: %s: %w", f.rel(), err)
	}
	return nil
}

// push adds a directory opened by the walk, closing the descriptors of the
// shallowest open ancestors (never the root's) when over the bound.
func (c *copier) push(f *frame) {
	c.stack = append(c.stack, f)
	c.open++
	c.trim(len(c.stack) - 1)
}

// trim closes frames below keep, shallowest first, until within bounds.
// The deepest stay open: the walk returns to them first.
func (c *copier) trim(keep int) {
	for i := 1; i < keep && c.open > c.maxFrames; i++ {
		if f := c.stack[i]; f.src >= 0 {
			f.closeFDs()
			f.ents, f.eof = nil, false // read again from pos once reopened
			c.open--
		}
	}
}

// reopen opens the closed frames from the nearest open ancestor down to
// stack[k], one component at a time, checking each is the directory the
// walk left (a tenant may have moved directories meanwhile).
func (c *copier) reopen(k int) error {
	a := k
	for c.stack[a].src < 0 {
		a--
	}
	for i := a + 1; i <= k; i++ {
		f, up := c.stack[i], c.stack[i-1]
		if err := f.reopenIn(up); err != nil {
			return fmt.Errorf("treecopy: %s: %w", f.rel(), err)
		}
		c.open++
		c.trim(i)
	}
	return nil
}

func (f *frame) reopenIn(up *frame) error {
	src, err := openDirAs(up.src, f.name, f.srcID)
	if err != nil {
		return err
	}
	dst, err := openDirAs(up.dst, f.name, f.dstID)
	if err != nil {
		unix.Close(src)
		return err
	}
	f.src, f.dst, f.reseek = src, dst, true
	return nil
}

func openDirAs(parent int, name string, want devIno) (int, error) {
	fd, err := dirfd.Open(parent, name)
	if err != nil {
		return -1, fmt.Errorf("%w: open again: %w", ErrChanged, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if idOf(&st) != want {
		unix.Close(fd)
		return -1, fmt.Errorf("%w: another directory is at its name", ErrChanged)
	}
	return fd, nil
}

// errAgain: the entry changed kind between two looks; look again.
var errAgain = errors.New("entry changed kind")

// entry copies name, an entry of dir, by its kind.
func (c *copier) entry(dir *frame, name string) error {
	for range maxAttempts {
		var st unix.Stat_t
		err := unix.Fstatat(dir.src, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil {
			err = c.copyEntry(dir, name, &st)
		}
		switch {
		case err == nil, errors.Is(err, unix.ENOENT) && !errors.Is(err, errInCopy):
			return nil // removed from src meanwhile: not part of the copy
		case !errors.Is(err, errAgain):
			return fmt.Errorf("treecopy: %s: %w", dir.relOf(name), err)
		}
	}
	return fmt.Errorf("treecopy: %s: %w", dir.relOf(name), ErrChanged)
}

// errInCopy marks an error on the copy's side, which no ENOENT there
// may pass for a source entry removed meanwhile.
var errInCopy = errors.New("in the copy")

// mark says err happened in dst.
func mark(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", errInCopy, err)
}

func (c *copier) copyEntry(dir *frame, name string, st *unix.Stat_t) error {
	kind := st.Mode & unix.S_IFMT
	if kind == unix.S_IFDIR {
		return c.enterDir(dir, name)
	}
	if kind == unix.S_IFSOCK {
		c.skipped++
		return nil
	}
	if st.Nlink > 1 {
		if done, err := c.linkKnown(dir, name, st); done || err != nil {
			return err
		}
	}
	var err error
	switch kind {
	case unix.S_IFREG:
		err = c.startFile(dir, name, st)
	case unix.S_IFLNK:
		err = c.symlink(dir, name, st)
	case unix.S_IFIFO, unix.S_IFCHR, unix.S_IFBLK:
		err = c.mknod(dir, name, st)
	default:
		c.skipped++
		return nil
	}
	if err == nil && st.Nlink > 1 {
		c.links[idOf(st)] = &link{dir: dir, name: name, unseen: uint64(st.Nlink) - 1}
	}
	return err
}

// enterDir opens a directory of src, makes its copy and pushes both.
func (c *copier) enterDir(dir *frame, name string) error {
	src, err := dirfd.Open(dir.src, name)
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return errAgain // swapped for a symlink or a file
	case errors.Is(err, unix.EXDEV):
		return ErrMountPoint
	case err != nil:
		return err
	}
	f := &frame{parent: dir, name: name, src: src, dst: -1}
	if err := unix.Fstat(src, &f.st); err != nil {
		unix.Close(src)
		return err
	}
	f.srcID = idOf(&f.st)
	if f.srcID == c.dstID {
		unix.Close(src) // dst is inside src: not a copy of itself
		return nil
	}
	if err := unix.Mkdirat(dir.dst, name, 0o700); err != nil {
		unix.Close(src)
		return mark(err)
	}
	if f.dst, err = dirfd.Open(dir.dst, name); err != nil {
		unix.Close(src)
		return mark(err)
	}
	var dst unix.Stat_t
	if err := unix.Fstat(f.dst, &dst); err != nil {
		f.closeFDs()
		return err
	}
	f.dstID = idOf(&dst)
	f.unfinished.Store(1)
	c.dirs++
	c.push(f)
	return nil
}

// linkKnown makes name a link to the copy of st's inode if it was met
// before.
func (c *copier) linkKnown(dir *frame, name string, st *unix.Stat_t) (bool, error) {
	id := idOf(st)
	l := c.links[id]
	if l == nil {
		return false, nil
	}
	if l.unseen--; l.unseen == 0 {
		delete(c.links, id)
	}
	from, closeFrom, err := c.dstDir(l.dir)
	if err != nil {
		return true, mark(err)
	}
	defer closeFrom()
	if err := unix.Linkat(from, l.name, dir.dst, name, 0); err != nil {
		return true, mark(err)
	}
	c.hardLinks++
	return true, nil
}

// dstDir is the descriptor of f's copy: f's own while f is open, else one
// opened from the nearest open ancestor (dst is the caller's alone).
func (c *copier) dstDir(f *frame) (int, func(), error) {
	if f.dst >= 0 {
		return f.dst, func() {}, nil
	}
	var names []string
	g := f
	for ; g.dst < 0; g = g.parent {
		names = append(names, g.name)
	}
	fd := g.dst
	for i := len(names) - 1; i >= 0; i-- {
		next, err := dirfd.Open(fd, names[i])
		if fd != g.dst {
			unix.Close(fd)
		}
		if err != nil {
			return -1, nil, err
		}
		fd = next
	}
	return fd, func() { unix.Close(fd) }, nil
}

func (c *copier) symlink(dir *frame, name string, st *unix.Stat_t) error {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dir.src, name, buf)
	if errors.Is(err, unix.EINVAL) {
		return errAgain // no longer a symlink
	}
	if err != nil {
		return err
	}
	if err := unix.Symlinkat(string(buf[:n]), dir.dst, name); err != nil {
		return mark(err)
	}
	c.symlinks++
	return mark(c.setAttrsAt(dir.dst, name, st, false))
}

func (c *copier) mknod(dir *frame, name string, st *unix.Stat_t) error {
	if err := unix.Mknodat(dir.dst, name, st.Mode, int(st.Rdev)); err != nil {
		return mark(err)
	}
	c.files++
	return mark(c.setAttrsAt(dir.dst, name, st, true))
}

// ids is the owner and group of a copy of st.
func (c *copier) ids(st *unix.Stat_t) (int, int) {
	uid, gid := int(st.Uid), int(st.Gid)
	if c.opts.MapIDs != nil {
		return c.opts.MapIDs(uid, gid)
	}
	return uid, gid
}

// setAttrs sets an open copy's owner, mode and times; the mode after the
// owner, which clears setuid and setgid.
func (c *copier) setAttrs(fd int, st *unix.Stat_t) error {
	uid, gid := c.ids(st)
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, st.Mode&0o7777); err != nil {
		return err
	}
	return futimens(fd, st)
}

// setAttrsAt does the same by name, not following a symlink (whose mode
// Linux cannot set: chmod is skipped for them).
func (c *copier) setAttrsAt(dirfd int, name string, st *unix.Stat_t, chmod bool) error {
	uid, gid := c.ids(st)
	if err := unix.Fchownat(dirfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if chmod {
		// The entry is one this walk just made in dst, which only the
		// caller writes to: following it is safe (and it is no symlink).
		if err := unix.Fchmodat(dirfd, name, st.Mode&0o7777, 0); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}
