package treecopy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// node is what a test compares of an entry.
type node struct {
	mode         uint32 // type and permission bits, setuid/setgid/sticky
	uid, gid     int
	size, blocks int64
	atime, mtime int64 // nanoseconds
	rdev         uint64
	target       string // symlinks
	data         []byte // regular files under 1 MiB
	ino          uint64
}

// snapshot lstat's every entry under root (root itself as "."), never
// following a symlink. Contents are read after all the stats, so that the
// reads cannot move an access time before it is recorded.
func snapshot(t testing.TB, root string) map[string]node {
	t.Helper()
	m := map[string]node{}
	err := filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n := node{mode: st.Mode, uid: int(st.Uid), gid: int(st.Gid), size: st.Size, blocks: st.Blocks,
			atime: st.Atim.Nano(), mtime: st.Mtim.Nano(), rdev: st.Rdev, ino: st.Ino}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			n.target, _ = os.Readlink(p)
		}
		m[rel] = n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for rel, n := range m {
		if n.mode&unix.S_IFMT == unix.S_IFREG && n.size < 1<<20 {
			n.data, err = os.ReadFile(filepath.Join(root, rel))
			if err != nil {
				t.Fatal(err)
			}
			m[rel] = n
		}
	}
	return m
}

// atimeNear is an access time that reads leave alone (relatime: after the
// modification and change times, and not a day old: an hour ahead), with
// nanoseconds to keep.
var atimeNear = time.Now().Add(time.Hour).Truncate(time.Second).Add(123456789)

func mtimeAt(i int) time.Time { return time.Date(2001, 2, 3, 4, 5, 6, 700000000+i, time.UTC) }

// tree is a source tree that a test builds.
type tree struct {
	t    *testing.T
	root string
	i    int
	// setTimes are entries whose times are set last, deepest first.
	setTimes []string
}

func newTree(t *testing.T, root string) *tree {
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return &tree{t: t, root: root}
}

func (tr *tree) path(rel string) string { return filepath.Join(tr.root, rel) }

func (tr *tree) check(err error) {
	tr.t.Helper()
	if err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *tree) dir(rel string, mode os.FileMode, uid, gid int) {
	tr.check(os.Mkdir(tr.path(rel), 0o700))
	tr.attrs(rel, mode, uid, gid)
}

func (tr *tree) file(rel string, data []byte, mode os.FileMode, uid, gid int) {
	tr.check(os.WriteFile(tr.path(rel), data, 0o600))
	tr.attrs(rel, mode, uid, gid)
}

// attrs sets owner, then mode (chown clears setuid/setgid).
func (tr *tree) attrs(rel string, mode os.FileMode, uid, gid int) {
	tr.check(os.Lchown(tr.path(rel), uid, gid))
	tr.check(unix.Fchmodat(unix.AT_FDCWD, tr.path(rel), uint32(mode), 0))
	tr.setTimes = append(tr.setTimes, rel)
}

func (tr *tree) symlink(rel, target string, uid, gid int) {
	tr.check(os.Symlink(target, tr.path(rel)))
	tr.check(os.Lchown(tr.path(rel), uid, gid))
	tr.setTimes = append(tr.setTimes, rel)
}

// times sets fixed, distinct times on every entry made, children before
// their directories (making them moved the directories' times).
func (tr *tree) times() {
	sort.Slice(tr.setTimes, func(i, j int) bool {
		return strings.Count(tr.setTimes[i], "/") > strings.Count(tr.setTimes[j], "/")
	})
	for i, rel := range append(tr.setTimes, ".") {
		ts := []unix.Timespec{unix.NsecToTimespec(atimeNear.UnixNano()), unix.NsecToTimespec(mtimeAt(i).UnixNano())}
		tr.check(unix.UtimesNanoAt(unix.AT_FDCWD, tr.path(rel), ts, unix.AT_SYMLINK_NOFOLLOW))
	}
}

// makeSocket binds a Unix socket at path and closes it: the file stays.
func makeSocket(t *testing.T, path string) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
}

func requireRoot(t testing.TB) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: owners, modes and device nodes")
	}
}

// buildFullTree makes a tree with every kind of entry Copy must keep.
func buildFullTree(t *testing.T, root, outside string) {
	tr := newTree(t, root)
	tr.dir("a", 0o755, 0, 0)
	tr.dir("a/b", 0o750, 1001, 1002)
	tr.dir("a/b/c", 0o700, 1003, 1003)
	tr.dir("empty", 0o755, 0, 0)
	tr.dir("setgid", 0o2775, 0, 1500)
	tr.dir("sticky", 0o1777, 0, 0)
	tr.dir("locked", 0, 1001, 1001)
	for i, size := range []int{0, 1, 100, 4095, 4096, 4097, 65536, 300000} {
		data := bytes.Repeat([]byte{byte('a' + i)}, size)
		tr.file(fmt.Sprintf("a/b/c/f%d", size), data, 0o644, 1000+i, 2000+i)
	}
	tr.file("empty-file", nil, 0o600, 0, 0)
	tr.file("setuid", []byte("#!/bin/sh\n"), 0o4755, 1001, 1001)
	tr.file("setgid/inherits", []byte("x"), 0o2755, 1001, 1500)
	tr.file("mode0000", []byte("secret"), 0, 1001, 1001)
	tr.file("sticky/tmpfile", []byte("y"), 0o666, 1004, 1004)
	tr.file("locked/inside", []byte("z"), 0o640, 1001, 1001)
	tr.symlink("rel-link", "a/b/c/f100", 1001, 1001)
	tr.symlink("a/up-link", "../setuid", 0, 0)
	tr.symlink("abs-link", "/etc/passwd", 0, 0)
	tr.symlink("dangling", "no/such/thing", 1002, 1002)
	tr.symlink("outside-link", outside, 0, 0)
	tr.symlink("dir-link", "a/b", 0, 0)
	// Three names of one inode in three directories, and a pair.
	tr.file("a/hard1", []byte("one inode"), 0o640, 1005, 1005)
	tr.check(os.Link(tr.path("a/hard1"), tr.path("a/b/hard2")))
	tr.check(os.Link(tr.path("a/hard1"), tr.path("sticky/hard3")))
	tr.file("pair1", []byte("two"), 0o644, 0, 0)
	tr.check(os.Link(tr.path("pair1"), tr.path("a/b/c/pair2")))
	// 1 GiB with two 4 KiB extents.
	sparse := tr.path("sparse")
	f, err := os.Create(sparse)
	tr.check(err)
	_, err = f.WriteAt(bytes.Repeat([]byte("D"), 4096), 1<<20)
	tr.check(err)
	_, err = f.WriteAt(bytes.Repeat([]byte("E"), 4096), 512<<20)
	tr.check(err)
	tr.check(f.Truncate(1 << 30))
	tr.check(f.Close())
	tr.attrs("sparse", 0o644, 1001, 1001)
	tr.check(unix.Mkfifo(tr.path("fifo"), 0o620))
	tr.attrs("fifo", 0o620, 1001, 1002)
	if err := unix.Mknod(tr.path("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err == nil {
		tr.attrs("null", 0o666, 0, 0)
	} else {
		t.Logf("no device node: %v", err)
	}
	makeSocket(t, tr.path("sock"))
	tr.times()
}

// want is the snapshot of src as dst should be: ids mapped, sockets out.
func want(src map[string]node, mapIDs func(int, int) (int, int)) map[string]node {
	w := map[string]node{}
	for rel, n := range src {
		if n.mode&unix.S_IFMT == unix.S_IFSOCK {
			continue
		}
		if mapIDs != nil {
			n.uid, n.gid = mapIDs(n.uid, n.gid)
		}
		w[rel] = n
	}
	return w
}

// compare checks that dst's entries are src's, field by field, and that
// names sharing an inode in src share one in dst (and no others do).
func compare(t *testing.T, want, got map[string]node) {
	t.Helper()
	for rel, w := range want {
		g, ok := got[rel]
		if !ok {
			t.Errorf("%s: missing in the copy", rel)
			continue
		}
		if w.mode != g.mode || w.uid != g.uid || w.gid != g.gid || w.target != g.target || w.rdev != g.rdev {
			t.Errorf("%s: got mode %o uid %d gid %d target %q rdev %d, want mode %o uid %d gid %d target %q rdev %d",
				rel, g.mode, g.uid, g.gid, g.target, g.rdev, w.mode, w.uid, w.gid, w.target, w.rdev)
		}
		if w.atime != g.atime || w.mtime != g.mtime {
			t.Errorf("%s: got times %d %d, want %d %d", rel, g.atime, g.mtime, w.atime, w.mtime)
		}
		if w.mode&unix.S_IFMT == unix.S_IFREG && (w.size != g.size || !bytes.Equal(w.data, g.data)) {
			t.Errorf("%s: got %d bytes, want %d, or other data", rel, g.size, w.size)
		}
	}
	for rel := range got {
		if _, ok := want[rel]; !ok {
			t.Errorf("%s: in the copy, not in the source", rel)
		}
	}
	if t.Failed() {
		return
	}
	srcOf, dstOf := map[uint64]string{}, map[uint64]string{}
	for rel, w := range want {
		if w.mode&unix.S_IFMT == unix.S_IFDIR {
			continue
		}
		g := got[rel]
		first, seen := srcOf[w.ino]
		if !seen {
			srcOf[w.ino] = rel
			if other, taken := dstOf[g.ino]; taken {
				t.Errorf("%s and %s: one inode in the copy, two in the source", rel, other)
			}
			dstOf[g.ino] = rel
			continue
		}
		if got[first].ino != g.ino {
			t.Errorf("%s and %s: one inode in the source, two in the copy", rel, first)
		}
	}
}

func TestCopyKeepsOwnersModesTimesLinksAndHoles(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name   string
		mapIDs func(int, int) (int, int)
	}{
		{"ids kept", nil},
		{"ids remapped", func(uid, gid int) (int, int) { return uid + 50000, gid + 60000 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src, dst, outside := filepath.Join(dir, "s"), filepath.Join(dir, "d"), filepath.Join(dir, "victim")
			if err := os.Mkdir(outside, 0o755); err != nil {
				t.Fatal(err)
			}
			buildFullTree(t, src, outside)
			if err := os.Mkdir(dst, 0o700); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, src)
			st, err := Copy(context.Background(), src, dst, Options{MapIDs: tc.mapIDs})
			if err != nil {
				t.Fatal(err)
			}
			compare(t, want(before, tc.mapIDs), snapshot(t, dst))
			compare(t, before, snapshot(t, src)) // the source is left as it was
			if got := snapshot(t, dst)["sparse"].blocks; got > 1024 {
				t.Errorf("sparse: %d blocks in the copy, want its holes kept (<= 1024)", got)
			}
			assertEmpty(t, outside)
			wantStats := Stats{Files: 19, Dirs: 7, Symlinks: 6, HardLinks: 3, Skipped: 1,
				Bytes: 1 + 100 + 4095 + 4096 + 4097 + 65536 + 300000 + 10 + 1 + 6 + 1 + 1 + 9 + 3 + 2*4096,
				Size:  1 + 100 + 4095 + 4096 + 4097 + 65536 + 300000 + 10 + 1 + 6 + 1 + 1 + 9 + 3 + 1<<30}
			if _, ok := before["null"]; !ok {
				wantStats.Files--
			}
			if st != wantStats {
				t.Errorf("stats = %+v, want %+v", st, wantStats)
			}
		})
	}
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) > 0 {
		t.Errorf("%s: %d entries written outside the copy, want none", dir, len(ents))
	}
}

// swapForSymlink replaces the entry at p by a symlink to target, as a
// tenant would, moving the entry aside.
func swapForSymlink(t testing.TB, p, target string) {
	if err := os.Rename(p, p+"~"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func TestCopyNeverFollowsASymlinkWhereADirectoryWas(t *testing.T) {
	for _, tc := range []struct {
		name   string
		swapAt string // entry swapped just before the walk looks at it; "" none
		target func(victim string) string
	}{
		{"symlink planted before the copy", "", nil},
		{"directory swapped for an absolute symlink", "d", func(v string) string { return v }},
		{"deeper directory swapped for a relative symlink", "d/e", func(v string) string { return "../../victim" }},
		{"file swapped for a symlink", "d/f", func(v string) string { return v + "/f" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src, dst, victim := filepath.Join(dir, "s"), filepath.Join(dir, "d"), filepath.Join(dir, "victim")
			for _, d := range []string{src + "/d/e/g", dst, victim} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range []string{"d/f", "d/e/f", "d/e/g/f"} {
				if err := os.WriteFile(filepath.Join(src, f), []byte("data"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(victim, filepath.Join(src, "planted")); err != nil {
				t.Fatal(err)
			}
			swapped := ""
			testHookEntry = func(rel string) {
				if rel == tc.swapAt {
					swapForSymlink(t, filepath.Join(src, rel), tc.target(victim))
					swapped = rel
				}
			}
			defer func() { testHookEntry = nil }()
			if _, err := Copy(context.Background(), src, dst, Options{}); err != nil {
				t.Fatal(err)
			}
			if swapped != tc.swapAt {
				t.Fatalf("the walk never looked at %s", tc.swapAt)
			}
			assertEmpty(t, victim)
			if got, err := os.Readlink(filepath.Join(dst, "planted")); err != nil || got != victim {
				t.Errorf("planted: Readlink = %q, %v; want the symlink copied as is", got, err)
			}
			if swapped != "" {
				fi, err := os.Lstat(filepath.Join(dst, swapped))
				if err != nil || fi.Mode()&os.ModeSymlink == 0 {
					t.Errorf("%s: %v, %v; want the symlink that was there when the walk came", swapped, fi, err)
				}
			}
		})
	}
}

func TestCopyStopsWhenCancelled(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cancelAt int // entries looked at before the cancel; 0: cancelled before the call
	}{
		{"cancelled before the call", 0},
		{"cancelled after the first entry", 1},
		{"cancelled in the middle", 150},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src, dst := filepath.Join(dir, "s"), filepath.Join(dir, "d")
			for i := range 10 {
				d := filepath.Join(src, strconv.Itoa(i))
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
				for j := range 30 {
					if err := os.WriteFile(filepath.Join(d, strconv.Itoa(j)), []byte("x"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := os.Mkdir(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			seen := 0
			if tc.cancelAt == 0 {
				cancel()
			}
			testHookEntry = func(string) {
				if seen++; seen == tc.cancelAt {
					cancel()
				}
			}
			defer func() { testHookEntry = nil }()
			st, err := Copy(ctx, src, dst, Options{})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Copy = %v, want context.Canceled", err)
			}
			if seen > tc.cancelAt {
				t.Errorf("%d entries looked at after the cancel, want none", seen-tc.cancelAt)
			}
			if st.Files+st.Dirs > int64(tc.cancelAt) {
				t.Errorf("stats %+v: more entries than looked at before the cancel", st)
			}
		})
	}
}

func TestCopyNotEmptyDestination(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "s"), filepath.Join(dir, "d")
	for _, d := range []string{src, dst + "/x"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Copy(context.Background(), src, dst, Options{}); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("Copy = %v, want ErrNotEmpty", err)
	}
}

func TestCopyLeavesOutADestinationInsideTheSource(t *testing.T) {
	src := t.TempDir()
	dst := filepath.Join(src, "copy")
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Copy(context.Background(), src, dst, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "f")); err != nil {
		t.Error(err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "copy")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("copy/copy: %v, want the destination left out of its own copy", err)
	}
}

func TestCopyErrorsNameTheEntry(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "s"), filepath.Join(dir, "d")
	for _, d := range []string{src + "/a/b", dst} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "a/b/f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A name taken in the copy when the walk gets there (only the caller
	// writes to dst, but say one did): EEXIST, named by its path in src.
	testHookEntry = func(rel string) {
		if rel == "a/b/f" {
			_ = os.WriteFile(filepath.Join(dst, "a/b/f"), nil, 0o644)
		}
	}
	defer func() { testHookEntry = nil }()
	_, err := Copy(context.Background(), src, dst, Options{})
	if !errors.Is(err, unix.EEXIST) || !strings.HasPrefix(err.Error(), "treecopy: a/b/f: ") {
		t.Fatalf("Copy = %v, want EEXIST named treecopy: a/b/f", err)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) - 1 // the one reading it
}

func TestCopyDeepAndWideTreesWithBoundedDescriptors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxOpen  int
		build    func(t *testing.T, src string) int // entries made
		checkRel string                             // an entry to find in the copy
	}{
		{"2000 levels deep, 32 descriptors", 32, buildDeep(2000), strings.Repeat("d/", 1999) + "d/f"},
		{"2000 levels deep, default descriptors", 0, buildDeep(2000), strings.Repeat("d/", 1999) + "d/f"},
		{"20,000 entries in one directory", 16, buildWide(20000), "w/19999"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src, dst := filepath.Join(dir, "s"), filepath.Join(dir, "d")
			if err := os.Mkdir(src, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			made := tc.build(t, src)
			before := openFDs(t)
			bound := Options{MaxOpenFiles: tc.maxOpen}.withDefaults().MaxOpenFiles
			peak, n := 0, 0
			testHookEntry = func(string) {
				if n++; n%97 == 0 {
					peak = max(peak, openFDs(t)-before)
				}
			}
			defer func() { testHookEntry = nil }()
			start := time.Now()
			st, err := Copy(context.Background(), src, dst, Options{MaxOpenFiles: tc.maxOpen})
			t.Logf("copied in %v", time.Since(start))
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Files + st.Dirs; got != int64(made) {
				t.Errorf("copied %d entries, want %d", got, made)
			}
			if peak > bound {
				t.Errorf("%d descriptors open at once, want at most %d", peak, bound)
			}
			if after := openFDs(t); after != before {
				t.Errorf("%d descriptors open after the copy, %d before", after, before)
			}
			if err := lstatDeep(dst, tc.checkRel); err != nil {
				t.Errorf("%.20s...: %v", tc.checkRel, err)
			}
		})
	}
}

// buildDeep makes a chain of depth directories "d" with a file at each
// level, through descriptors (the path outgrows PATH_MAX).
func buildDeep(depth int) func(t *testing.T, src string) int {
	return func(t *testing.T, src string) int {
		fd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		for range depth {
			if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
				t.Fatal(err)
			}
			next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
			unix.Close(fd)
			if err != nil {
				t.Fatal(err)
			}
			fd = next
			f, err := unix.Openat(fd, "f", unix.O_CREAT|unix.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			unix.Close(f)
		}
		unix.Close(fd)
		return 2 * depth
	}
}

func buildWide(width int) func(t *testing.T, src string) int {
	return func(t *testing.T, src string) int {
		w := filepath.Join(src, "w")
		if err := os.Mkdir(w, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range width {
			if err := os.WriteFile(filepath.Join(w, strconv.Itoa(i)), []byte(strconv.Itoa(i)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return width + 1
	}
}

// lstatDeep checks that rel is in root, walking one component at a time
// (rel may be longer than PATH_MAX).
func lstatDeep(root, rel string) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	comps := strings.Split(rel, "/")
	for _, c := range comps[:len(comps)-1] {
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		unix.Close(fd)
		if err != nil {
			return err
		}
		fd = next
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstatat(fd, comps[len(comps)-1], &st, unix.AT_SYMLINK_NOFOLLOW)
}
