// Package rmtreetest builds huge directory trees fast and measures what a
// removal holds, for the tests of pkg/rmtree and of its callers: trees are
// made with *at system calls holding one directory descriptor at a time (a
// 200,000-deep path is far longer than PATH_MAX, so no path-based call can
// reach its bottom), descriptors are counted in /proc/self/fd, and a
// context can watch, or end, a walk that checks it once per entry.
package rmtreetest

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// FastDir is a new temporary directory on tmpfs (/dev/shm) when the machine
// has one, else t.TempDir(): a disk file system mounted with discard takes
// minutes to remove 200,000 directories, tmpfs seconds, and the tests
// measure the walk, not the disk.
func FastDir(tb testing.TB) string {
	tb.Helper()
	var st unix.Statfs_t
	if unix.Statfs("/dev/shm", &st) != nil || st.Type != unix.TMPFS_MAGIC {
		return tb.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "rmtreetest-")
	if err != nil {
		return tb.TempDir()
	}
	tb.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			tb.Errorf("FastDir cleanup: %v", err)
		}
	})
	return dir
}

// ChainName is the name of every directory of a Chain.
const ChainName = "d"

// Chain makes dir/d/d/.../d, depth directories below dir (an existing
// directory), and registers a cleanup that removes what a failed test left.
func Chain(tb testing.TB, dir string, depth int) {
	tb.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := RemoveChain(dir); err != nil {
			tb.Errorf("removing the chain below %s: %v", dir, err)
		}
	})
	for i := range depth {
		if err := unix.Mkdirat(fd, ChainName, 0o755); err != nil {
			unix.Close(fd)
			tb.Fatalf("mkdir at depth %d: %v", i, err)
		}
		next, err := unix.Openat(fd, ChainName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			tb.Fatalf("open at depth %d: %v", i, err)
		}
		fd = next
	}
	unix.Close(fd)
}

// RemoveChain removes a Chain below dir, whatever is left of it, with two
// descriptors: down to the bottom, then up through "..". Climbing ".." is
// only sound in a tree nobody else changes, as a test's own; production code
// must never do it (see pkg/rmtree).
func RemoveChain(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	depth := 0
	for {
		next, err := unix.Openat(fd, ChainName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			break
		}
		if err != nil {
			unix.Close(fd)
			return err
		}
		unix.Close(fd)
		fd, depth = next, depth+1
	}
	for ; depth > 0; depth-- {
		up, err := unix.Openat(fd, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return err
		}
		fd = up
		if err := unix.Unlinkat(fd, ChainName, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
			unix.Close(fd)
			return err
		}
	}
	return unix.Close(fd)
}

// Wide makes n empty directories 0 .. n-1 in dir.
func Wide(tb testing.TB, dir string, n int) {
	tb.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer unix.Close(fd)
	for i := range n {
		if err := unix.Mkdirat(fd, strconv.Itoa(i), 0o755); err != nil {
			tb.Fatalf("mkdir %d: %v", i, err)
		}
	}
}

// Entries counts the names in dir.
func Entries(tb testing.TB, dir string) int {
	tb.Helper()
	f, err := os.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	n := 0
	for {
		names, err := f.Readdirnames(4096)
		n += len(names)
		if err != nil || len(names) == 0 {
			return n
		}
	}
}

// OpenFDs is the number of descriptors the process holds now.
func OpenFDs(tb testing.TB) int {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	return len(ents) - 1 // the one ReadDir itself held
}

// LimitOpenFiles lowers the soft RLIMIT_NOFILE to the descriptors open now
// plus headroom until the test ends, so that a walk holding one descriptor
// per level fails with EMFILE instead of passing on a generous machine.
func LimitOpenFiles(tb testing.TB, headroom int) {
	tb.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		tb.Fatal(err)
	}
	lim := old
	lim.Cur = uint64(OpenFDs(tb) + headroom)
	if lim.Cur > old.Cur {
		return
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = unix.Setrlimit(unix.RLIMIT_NOFILE, &old) })
}

// Watch returns a context whose Err calls fn on every every-th call, with
// the number of calls so far; when fn returns true the context is cancelled.
// A walk that checks its context once per entry can so be sampled (open
// descriptors, say) or cancelled after exactly n entries, with no timing.
func Watch(ctx context.Context, every int64, fn func(calls int64) (cancel bool)) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	return &watched{Context: ctx, every: every, fn: fn, cancel: cancel}
}

type watched struct {
	context.Context
	every  int64
	fn     func(int64) bool
	cancel context.CancelFunc
	mu     sync.Mutex // fn is called under it: callers need no locking of their own
	calls  atomic.Int64
}

func (w *watched) Err() error {
	if n := w.calls.Add(1); n%w.every == 0 {
		w.mu.Lock()
		stop := w.fn(n)
		w.mu.Unlock()
		if stop {
			w.cancel()
		}
	}
	return w.Context.Err()
}

// OnFirstRemoval calls fn once, from another goroutine, as soon as the
// kernel reports that an entry of dir was removed (inotify), whoever removed
// it. It lets a test cancel a removal it cannot hook into, once it has begun.
func OnFirstRemoval(tb testing.TB, dir string, fn func()) {
	tb.Helper()
	ifd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := unix.InotifyAddWatch(ifd, dir, unix.IN_DELETE|unix.IN_MOVED_FROM); err != nil {
		unix.Close(ifd)
		tb.Fatal(err)
	}
	f := os.NewFile(uintptr(ifd), "inotify") // non-blocking: Close ends the Read
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		if n, err := f.Read(buf); err == nil && n > 0 {
			fn()
		}
	}()
	tb.Cleanup(func() {
		f.Close()
		<-done
	})
}
