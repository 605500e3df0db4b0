package diskusage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// du is the reference: filepath.WalkDir and Lstat, hard links once, not
// entering mount points (other devices, or listed as mount points in
// skip).
func du(t testing.TB, root string, skip ...string) Usage {
	t.Helper()
	var u Usage
	seen := map[[2]uint64]bool{}
	var rootDev uint64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if p == root {
			rootDev = st.Dev
		}
		if d.IsDir() && (st.Dev != rootDev || contains(skip, p)) {
			return filepath.SkipDir
		}
		if d.IsDir() {
			u.Dirs++
		}
		if st.Nlink > 1 && !d.IsDir() {
			k := [2]uint64{st.Dev, st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		u.Inodes++
		u.Bytes += st.Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func write(t testing.TB, p string, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	return len(ents)
}

// TestWalkCountsWhatDuCounts: bytes, inodes and directories as du counts
// them, over trees that try to make it count twice or count what is not
// the volume's.
func TestWalkCountsWhatDuCounts(t *testing.T) {
	tests := []struct {
		name  string
		build func(t *testing.T, root, outside string)
		want  func(t *testing.T, root string) Usage // nil: du(root)
	}{
		{"empty", func(*testing.T, string, string) {}, nil},
		{"files and directories", func(t *testing.T, root, _ string) {
			write(t, filepath.Join(root, "a", "f1"), 10000)
			write(t, filepath.Join(root, "a", "b", "f2"), 1)
			write(t, filepath.Join(root, "c", "f3"), 0)
			must(t, os.Mkdir(filepath.Join(root, "empty"), 0o755))
		}, nil},
		{"hard links count once", func(t *testing.T, root, _ string) {
			write(t, filepath.Join(root, "f"), 1<<20)
			must(t, os.Link(filepath.Join(root, "f"), filepath.Join(root, "g")))
			must(t, os.MkdirAll(filepath.Join(root, "d"), 0o755))
			must(t, os.Link(filepath.Join(root, "f"), filepath.Join(root, "d", "h")))
		}, func(t *testing.T, root string) Usage {
			var st unix.Stat_t
			must(t, unix.Stat(filepath.Join(root, "f"), &st))
			var d, r unix.Stat_t
			must(t, unix.Stat(filepath.Join(root, "d"), &d))
			must(t, unix.Stat(root, &r))
			return Usage{Bytes: (st.Blocks + d.Blocks + r.Blocks) * 512, Inodes: 3, Dirs: 2}
		}},
		{"symlinks are not followed", func(t *testing.T, root, outside string) {
			write(t, filepath.Join(outside, "big"), 4<<20)
			must(t, os.Symlink(outside, filepath.Join(root, "to-outside")))
			must(t, os.Symlink(filepath.Join(outside, "big"), filepath.Join(root, "to-big")))
		}, nil},
		{"a bind mount inside is not entered", func(t *testing.T, root, outside string) {
			if os.Geteuid() != 0 {
				t.Skip("bind mounts need root")
			}
			write(t, filepath.Join(outside, "big"), 4<<20)
			mnt := filepath.Join(root, "mnt")
			must(t, os.Mkdir(mnt, 0o755))
			must(t, unix.Mount(outside, mnt, "", unix.MS_BIND, ""))
			t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
		}, func(t *testing.T, root string) Usage { return du(t, root, filepath.Join(root, "mnt")) }},
		{"deeper than the open-directory bound", func(t *testing.T, root, _ string) {
			p := root
			for i := range 40 {
				p = filepath.Join(p, fmt.Sprintf("d%d", i))
				write(t, filepath.Join(p, "f"), 100*i)
				if i%5 == 0 {
					must(t, os.MkdirAll(filepath.Join(p, "side", "x"), 0o755))
				}
			}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, outside := t.TempDir(), t.TempDir()
			tt.build(t, root, outside)
			want := du(t, root)
			if tt.want != nil {
				want = tt.want(t, root)
			}
			base := openFDs(t)
			peak := 0
			w := Walker{MaxOpenDirs: 4, BatchSize: 3, OnDir: func(context.Context, string, Usage) { peak = max(peak, openFDs(t)-base) }}
			got, err := w.Walk(context.Background(), root)
			must(t, err)
			if got != want {
				t.Errorf("Walk = %+v, want %+v", got, want)
			}
			// +1: reading /proc/self/fd; +1: reopening a deferred directory.
			if peak > w.MaxOpenDirs+2 {
				t.Errorf("%d descriptors open at once, bound %d", peak, w.MaxOpenDirs+1)
			}
			if n := openFDs(t) - base; n != 0 {
				t.Errorf("%d descriptors left open", n)
			}
			if unbounded, err := Walk(context.Background(), root); err != nil || unbounded != got {
				t.Errorf("with the default bounds: %+v, %v", unbounded, err)
			}
		})
	}
}

// TestWalkStopsWhenCancelled: a walk whose context ends returns the
// context's error before the next entry and closes what it opened.
func TestWalkStopsWhenCancelled(t *testing.T) {
	root := t.TempDir()
	for i := range 20 {
		write(t, filepath.Join(root, fmt.Sprintf("d%d", i), "sub", "f"), 1)
	}
	base := openFDs(t)
	ctx, cancel := context.WithCancel(context.Background())
	dirs := 0
	w := Walker{MaxOpenDirs: 3, OnDir: func(_ context.Context, _ string, u Usage) {
		if dirs = int(u.Dirs); dirs == 5 {
			cancel()
		}
	}}
	_, err := w.Walk(ctx, root)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Walk: %v, want context.Canceled", err)
	}
	if dirs != 5 {
		t.Errorf("walked %d directories, want it to stop at the 5th", dirs)
	}
	if n := openFDs(t) - base; n != 0 {
		t.Errorf("%d descriptors left open", n)
	}
}

// TestWalkRefusesASymlinkRoot: the root itself is not followed either.
func TestWalkRefusesASymlinkRoot(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	must(t, os.Symlink(dir, link))
	if _, err := Walk(context.Background(), link); !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("Walk of a symlink: %v", err)
	}
}

// BenchmarkWalk100k walks 100,000 files in 1,000 directories (of 10 levels).
func BenchmarkWalk100k(b *testing.B) {
	root := b.TempDir()
	for d := range 1000 {
		dir := filepath.Join(root, strings.Repeat("l/", d%10), fmt.Sprintf("d%d", d))
		must(b, os.MkdirAll(dir, 0o755))
		for f := range 100 {
			must(b, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", f)), nil, 0o644))
		}
	}
	b.ResetTimer()
	for b.Loop() {
		u, err := Walk(context.Background(), root)
		if err != nil || u.Inodes < 100000 {
			b.Fatal(u, err)
		}
	}
}
