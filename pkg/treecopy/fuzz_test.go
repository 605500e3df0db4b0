package treecopy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzCopy plants an arbitrary small tree of directories, files, hard
// links, FIFOs and symlinks (to anywhere: up, out, absolute, dangling) in
// src, optionally swaps the n-th entry the walk looks at for a symlink out
// of src, and stops the walk after an arbitrary number of entries with an
// arbitrary descriptor bound. Whatever happens Copy does not panic, nothing
// outside dst changes but the swap, and a copy that returns nil, with no
// swap, has src's names, kinds, targets and data.
//
//	go test ./pkg/treecopy -run '^$' -fuzz FuzzCopy -fuzztime 60s
func FuzzCopy(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 1, 1, 0, 2, 2, 0, 3}, uint8(0), uint8(0), uint8(0))
	f.Add([]byte{0, 0, 1, 0, 0, 1, 2, 0, 2, 1, 3, 2, 2, 0, 0, 4, 3, 2, 4, 0}, uint8(2), uint8(0), uint8(1))
	f.Add([]byte{0, 0, 0, 0, 0, 1, 1, 0, 0, 2, 2, 0, 1, 3, 3, 9, 2, 3, 4, 1}, uint8(3), uint8(0), uint8(0))
	f.Add([]byte{1, 0, 0, 7, 3, 0, 1, 0, 3, 0, 2, 0, 4, 0, 3, 0}, uint8(0), uint8(3), uint8(2))
	f.Add([]byte{0, 0, 0, 0, 2, 1, 1, 1, 2, 1, 2, 2, 2, 1, 3, 5}, uint8(1), uint8(0), uint8(3))
	f.Fuzz(func(t *testing.T, plan []byte, swapAt, stopAt, maxOpen uint8) {
		if len(plan) > 200 {
			return
		}
		dir := t.TempDir()
		src, dst, outside := filepath.Join(dir, "src"), filepath.Join(dir, "dst"), filepath.Join(dir, "outside")
		for _, d := range []string{src, dst, outside} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(outside, "sentinel"), []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		plantTree(t, src, outside, plan)
		before := snapshot(t, dir)
		seen, swapped := 0, ""
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		testHookEntry = func(rel string) {
			seen++
			if seen == int(swapAt) {
				swapped = rel
				swapForSymlink(t, filepath.Join(src, rel), []string{outside, "../../outside", "/"}[int(swapAt)%3])
			}
			if seen == int(stopAt) {
				cancel()
			}
		}
		defer func() { testHookEntry = nil }()
		_, err := Copy(ctx, src, dst, Options{MaxOpenFiles: 16 + int(maxOpen%3)*8, Workers: 1 + int(maxOpen%4)})
		after := snapshot(t, dir)
		for rel, n := range after {
			if under(rel, "dst") || swapped != "" && under(rel, "src") {
				continue
			}
			b, ok := before[rel]
			if !ok || b.mode != n.mode || b.target != n.target || string(b.data) != string(n.data) || b.mtime != n.mtime {
				t.Errorf("%s: changed outside dst (before %+v, after %+v)", rel, b, n)
			}
		}
		for rel := range before {
			if _, ok := after[rel]; !ok && !under(rel, "dst") && !(swapped != "" && under(rel, "src")) {
				t.Errorf("%s: removed outside dst", rel)
			}
		}
		if err != nil || swapped != "" {
			return
		}
		got, wantSrc := snapshot(t, dst), snapshot(t, src)
		for rel, w := range wantSrc {
			g, ok := got[rel]
			if w.mode&unix.S_IFMT == unix.S_IFSOCK {
				continue
			}
			if !ok || g.mode != w.mode || g.target != w.target || string(g.data) != string(w.data) {
				t.Errorf("%s: copied as %+v, want %+v", rel, g, w)
			}
		}
		if len(got) != len(wantSrc) {
			t.Errorf("%d entries in the copy, want %d", len(got), len(wantSrc))
		}
	})
}

func under(rel, dir string) bool { return rel == dir || strings.HasPrefix(rel, dir+"/") }

// plantTree reads plan four bytes an entry: kind (directory, file,
// symlink, hard link, FIFO), parent (among the directories made so far),
// name, and a symlink's target, a file's size or a link's original.
func plantTree(t *testing.T, src, outside string, plan []byte) {
	names := []string{"a", "b", "c", "d", ".x", "a b"}
	targets := []string{outside, "../outside", "../../outside", "..", "/", ".", "a", "nowhere", outside + "/sentinel", "../../../../../../etc"}
	dirs, files := []string{"."}, []string{}
	for i := 0; i+3 < len(plan); i += 4 {
		parent := dirs[int(plan[i+1])%len(dirs)]
		rel := filepath.Join(parent, names[int(plan[i+2])%len(names)])
		p := filepath.Join(src, rel)
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		var err error
		switch plan[i] % 5 {
		case 0:
			if err = os.Mkdir(p, 0o755); err == nil {
				dirs = append(dirs, rel)
			}
		case 1:
			err = os.WriteFile(p, []byte(strings.Repeat("x", int(plan[i+3])*37)), 0o644)
			files = append(files, rel)
		case 2:
			err = os.Symlink(targets[int(plan[i+3])%len(targets)], p)
		case 3:
			if len(files) > 0 {
				err = os.Link(filepath.Join(src, files[int(plan[i+3])%len(files)]), p)
			}
		case 4:
			err = unix.Mkfifo(p, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
