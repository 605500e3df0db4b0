package rmtree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/pkg/rmtree/rmtreetest"
)

// layout is a test's directory: base (what the caller mounted) and, beside
// it, outside, which holds a sentinel no removal may touch.
type layout struct {
	t             *testing.T
	dir           string
	base, outside string
}

func newLayout(t *testing.T) *layout {
	t.Helper()
	dir := t.TempDir()
	l := &layout{t: t, dir: dir, base: filepath.Join(dir, "base"), outside: filepath.Join(dir, "outside")}
	l.file("outside/sentinel")
	l.mkdir("base")
	return l
}

func (l *layout) path(p string) string { return filepath.Join(l.dir, p) }

func (l *layout) mkdir(p string) {
	l.t.Helper()
	if err := os.MkdirAll(l.path(p), 0o755); err != nil {
		l.t.Fatal(err)
	}
}

func (l *layout) file(p string) {
	l.t.Helper()
	l.mkdir(filepath.Dir(p))
	if err := os.WriteFile(l.path(p), []byte(p), 0o644); err != nil {
		l.t.Fatal(err)
	}
}

func (l *layout) symlink(p, target string) {
	l.t.Helper()
	l.mkdir(filepath.Dir(p))
	if err := os.Symlink(target, l.path(p)); err != nil {
		l.t.Fatal(err)
	}
}

// swap replaces p by a symlink to target, keeping what was there as p~, as
// a tenant racing the removal would.
func (l *layout) swap(p, target string) {
	l.t.Helper()
	if err := os.Rename(l.path(p), l.path(p)+"~"); err != nil {
		l.t.Fatal(err)
	}
	l.symlink(p, target)
}

func (l *layout) exists(p string) bool {
	_, err := os.Lstat(l.path(p))
	return err == nil
}

func (l *layout) bindMount(src, target string) {
	l.t.Helper()
	if os.Geteuid() != 0 {
		l.t.Skip("bind mounts need root")
	}
	l.mkdir(target)
	if err := unix.Mount(l.path(src), l.path(target), "", unix.MS_BIND, ""); err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { _ = unix.Unmount(l.path(target), unix.MNT_DETACH) })
}

var errAny = errors.New("any error")

func TestRemoveAll(t *testing.T) {
	for _, tc := range []struct {
		name       string
		setup      func(l *layout)
		rel        string
		want       error // nil, ErrUnsafe or errAny
		kept, gone []string
	}{
		{"removes files, directories and symlinks, never what a symlink points at", func(l *layout) {
			l.file("base/v/a/b/c/file")
			l.file("base/other/file")
			l.symlink("base/v/to-outside", l.outside)
			l.symlink("base/v/a/up", "../../../outside")
			l.symlink("base/v/a/b/root", "/")
			l.symlink("base/v/a/sibling", "../../other")
			l.symlink("base/v/dangling", "nowhere")
		}, "v", nil, []string{"base/other/file", "base"}, []string{"base/v"}},
		{"removes a root several levels down, and only it", func(l *layout) {
			l.file("base/a/b/v/x/y")
			l.file("base/a/b/vv/keep")
			l.file("base/a/keep")
		}, "a/b/v", nil, []string{"base/a/b/vv/keep", "base/a/keep", "base/a/b"}, []string{"base/a/b/v"}},
		{"a root that is a symlink is refused", func(l *layout) {
			l.file("outside/data")
			l.symlink("base/v", l.outside)
		}, "v", ErrUnsafe, []string{"base/v", "outside/data"}, nil},
		{"a symlink above the root is refused", func(l *layout) {
			l.file("outside/v/data")
			l.symlink("base/p", l.outside)
		}, "p/v", ErrUnsafe, []string{"outside/v/data"}, nil},
		{"a symlink above the root is refused even when it stays inside base", func(l *layout) {
			l.file("base/q/v/data")
			l.symlink("base/p", "q")
		}, "p/v", ErrUnsafe, []string{"base/q/v/data"}, nil},
		{"a file on the way is refused", func(l *layout) {
			l.file("base/p")
		}, "p/v", ErrUnsafe, []string{"base/p"}, nil},
		{"a root that is a file is refused", func(l *layout) {
			l.file("base/v")
		}, "v", ErrUnsafe, []string{"base/v"}, nil},
		{"a missing root is nothing to do", func(l *layout) {}, "v", nil, nil, nil},
		{"a missing directory on the way is nothing to do", func(l *layout) {}, "p/v", nil, nil, nil},
		{"a mount point on the way is refused", func(l *layout) {
			l.file("outside/v/data")
			l.bindMount("outside", "base/p")
		}, "p/v", ErrUnsafe, []string{"outside/v/data"}, nil},
		{"a mount point as the root is refused", func(l *layout) {
			l.file("outside/data")
			l.bindMount("outside", "base/v")
		}, "v", ErrUnsafe, []string{"outside/data"}, nil},
		{"a mount point inside the tree is not entered", func(l *layout) {
			l.file("outside/data")
			l.bindMount("outside", "base/v/m")
		}, "v", errAny, []string{"outside/data"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLayout(t)
			tc.setup(l)
			err := RemoveAll(context.Background(), l.base, tc.rel)
			switch {
			case tc.want == nil && err != nil, tc.want == errAny && err == nil,
				tc.want == ErrUnsafe && !errors.Is(err, ErrUnsafe):
				t.Fatalf("RemoveAll(%q) = %v, want %v", tc.rel, err, tc.want)
			}
			for _, p := range append(tc.kept, "outside/sentinel") {
				if !l.exists(p) {
					t.Errorf("%s was removed", p)
				}
			}
			for _, p := range tc.gone {
				if l.exists(p) {
					t.Errorf("%s is still there", p)
				}
			}
		})
	}
}

func TestRelativePathsThatLeaveBaseAreRefused(t *testing.T) {
	l := newLayout(t)
	l.file("base/v/data")
	for _, rel := range []string{"", ".", "..", "/v", "v/", "./v", "v/.", "v/..", "v/../v", "v//data", "v\x00"} {
		if err := RemoveAll(context.Background(), l.base, rel); !errors.Is(err, ErrUnsafe) {
			t.Errorf("RemoveAll(%q) = %v, want ErrUnsafe", rel, err)
		}
	}
	if !l.exists("base/v/data") {
		t.Fatal("a refused call removed data")
	}
}

// A tenant swaps a directory for a symlink between the walk's steps: the
// walk holds descriptors, so the swap cannot redirect it.
func TestDirectorySwappedForASymlinkDuringTheWalk(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   string // the path being opened when the swap happens
		rel  string
		want error
	}{
		{"on the way to the root: refused", "p", "p/v", ErrUnsafe},
		{"the root itself: refused", "p/v", "p/v", ErrUnsafe},
		{"inside the tree: the link is removed, not followed", "p/v/sub", "p/v", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLayout(t)
			l.file("base/p/v/sub/x")
			l.file("outside/v/sub/x")
			l.file("outside/sub/x")
			testHookOpen = func(p string) {
				if p == tc.at {
					testHookOpen = nil
					l.swap("base/"+p, l.outside)
				}
			}
			t.Cleanup(func() { testHookOpen = nil })
			err := RemoveAll(context.Background(), l.base, tc.rel)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			for _, p := range []string{"outside/sentinel", "outside/v/sub/x", "outside/sub/x"} {
				if !l.exists(p) {
					t.Errorf("%s removed through the swapped-in symlink", p)
				}
			}
			if tc.want == nil && l.exists("base/p/v") {
				t.Errorf("the tree is still there")
			}
		})
	}
}

// snapshot maps every path below dir (symlinks not followed) to what it is.
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			m[rel] = "link:" + target
			return err
		case d.IsDir():
			m[rel] = "dir"
		default:
			b, err := os.ReadFile(p)
			m[rel] = "file:" + string(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func under(p, root string) bool { return p == root || strings.HasPrefix(p, root+"/") }

// checkOutside: every entry of before that is not inside root is still
// there, unchanged, and nothing new appeared outside root.
func checkOutside(t testing.TB, before, after map[string]string, root string) {
	t.Helper()
	for p, what := range before {
		if !under(p, root) && after[p] != what {
			t.Fatalf("%s outside the tree changed: %q, was %q", p, after[p], what)
		}
	}
	for p := range after {
		if !under(p, root) && before[p] == "" {
			t.Fatalf("%s appeared outside the tree", p)
		}
	}
}

// With few descriptors allowed, deep directories are moved up into the root;
// whenever the walk stops, everything is still inside the tree, and the
// walk never holds more directories than allowed.
func TestDeepDirectoriesAreMovedUpWithinTheTree(t *testing.T) {
	for _, maxOpen := range []int{2, 3, 5} {
		l := newLayout(t)
		p := "base/v"
		for i := range 12 {
			p += "/" + string(rune('a'+i))
			l.file(p + "/file.txt")
			l.symlink(p+"/out", l.outside)
		}
		before := snapshot(t, l.dir)
		r := Remover{MaxOpenDirs: maxOpen, BatchSize: 2}
		fds := rmtreetest.OpenFDs(t)
		for stopAt := int64(1); ; stopAt++ {
			most := 0
			ctx := rmtreetest.Watch(context.Background(), 1, func(n int64) bool {
				most = max(most, rmtreetest.OpenFDs(t)-fds)
				return n == stopAt
			})
			err := r.RemoveAll(ctx, l.base, "v")
			if most > maxOpen+2 {
				t.Fatalf("MaxOpenDirs=%d: %d descriptors open", maxOpen, most)
			}
			checkOutside(t, before, snapshot(t, l.dir), "base/v")
			if err == nil {
				break
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("MaxOpenDirs=%d, stopped after %d checks: %v", maxOpen, stopAt, err)
			}
		}
		if l.exists("base/v") {
			t.Fatalf("MaxOpenDirs=%d: tree still there", maxOpen)
		}
	}
}

// Cancelling stops the walk at the next entry; the next call goes on.
func TestCancelStopsAtTheNextEntry(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t testing.TB, dir string, n int)
	}{{"wide", rmtreetest.Wide}, {"deep", rmtreetest.Chain}} {
		t.Run(tc.name, func(t *testing.T) {
			const n, stopAt = 1500, 100 // a deeper chain is past PATH_MAX for the snapshot
			dir := rmtreetest.FastDir(t)
			if err := os.Mkdir(filepath.Join(dir, "v"), 0o755); err != nil {
				t.Fatal(err)
			}
			tc.make(t, filepath.Join(dir, "v"), n)
			before := snapshot(t, dir)
			ctx := rmtreetest.Watch(context.Background(), 1, func(calls int64) bool { return calls == stopAt })
			if err := RemoveAll(ctx, dir, "v"); !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			after := snapshot(t, dir)
			// One check per entry handled or batch read: at most stopAt entries gone.
			if gone := len(before) - len(after); gone > stopAt {
				t.Fatalf("%d entries removed after %d checks", gone, stopAt)
			}
			if err := RemoveAll(context.Background(), dir, "v"); err != nil {
				t.Fatalf("the next call: %v", err)
			}
			if _, err := os.Lstat(filepath.Join(dir, "v")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("tree still there: %v", err)
			}
		})
	}
}

// Two removals of one tree at once (two deletes of volumes sharing a root
// directory) both succeed: a directory the other walker removed while this
// one was reading it has nothing left to remove. Before, the reader failed
// with "readdirent: no such file or directory".
func TestTwoRemovalsOfOneTreeAtOnceBothSucceed(t *testing.T) {
	for round := range 20 {
		base := t.TempDir()
		for i := range 50 {
			for j := range 20 {
				p := filepath.Join(base, "tree", fmt.Sprintf("d%02d", i), fmt.Sprintf("e%02d", j))
				if err := os.MkdirAll(p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- RemoveAll(context.Background(), base, "tree") }()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if _, err := os.Stat(filepath.Join(base, "tree")); !os.IsNotExist(err) {
			t.Fatalf("round %d: the tree is still there: %v", round, err)
		}
	}
}

// Move renames a whole tree in one step, refuses a symlink on either way
// or as the source (nothing moves), replaces only an empty destination,
// and says when the source is not there.
func TestMove(t *testing.T) {
	base := t.TempDir()
	mk := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(base, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk("a/tree/sub")
	mk("trash")
	mk("elsewhere/x")
	if err := os.WriteFile(filepath.Join(base, "a/tree/sub/f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "elsewhere"), filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, to string }{{"link", "trash/l"}, {"link/x", "trash/x"}, {"a/tree", "link/t"}} {
		if err := Move(base, tc.from, tc.to); !errors.Is(err, ErrUnsafe) {
			t.Errorf("Move(%s, %s) = %v, want ErrUnsafe", tc.from, tc.to, err)
		}
	}
	if err := Move(base, "a/tree", "trash/1"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(base, "trash/1/sub/f")); err != nil || string(b) != "data" {
		t.Fatalf("moved tree: %q, %v", b, err)
	}
	if err := Move(base, "a/tree", "trash/2"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("moving what is gone: %v, want os.ErrNotExist", err)
	}
	mk("a/tree") // empty: replaced
	if err := Move(base, "trash/1", "a/tree"); err != nil {
		t.Fatalf("back over an empty directory: %v", err)
	}
	mk("trash/3/y")
	if err := Move(base, "trash/3", "a/tree"); !errors.Is(err, ErrExist) {
		t.Errorf("over a non-empty directory: %v, want ErrExist", err)
	}
	if _, err := os.Stat(filepath.Join(base, "a/tree/sub/f")); err != nil {
		t.Errorf("the tree in place was touched: %v", err)
	}
}
