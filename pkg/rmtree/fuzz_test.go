package rmtree

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/rmtree/rmtreetest"
)

// FuzzRemoveAllStaysInside plants an arbitrary tree of directories, files
// and symlinks (to anywhere: up, out, absolute, dangling) beside and inside
// an arbitrary root path, optionally swaps the n-th directory the walk opens
// for a symlink, and stops the walk after an arbitrary number of entries
// with an arbitrary descriptor bound. Whatever happens, nothing outside the
// root path changes, and a call that returns nil has removed the root.
//
//	go test ./pkg/rmtree -run '^$' -fuzz FuzzRemoveAllStaysInside -fuzztime 60s
func FuzzRemoveAllStaysInside(f *testing.F) {
	f.Add("v", []byte{0, 0, 0, 0, 1, 1, 1, 0, 2, 2, 0, 3}, uint8(0), uint16(0), uint8(0))
	f.Add("a/v", []byte{0, 0, 1, 0, 0, 1, 2, 0, 2, 1, 3, 2, 2, 0, 0, 4}, uint8(2), uint16(7), uint8(1))
	f.Add("a/b", []byte{2, 0, 1, 5, 0, 0, 2, 0, 0, 3, 3, 0, 1, 4, 0, 0}, uint8(1), uint16(0), uint8(3))
	f.Add("v", []byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 1, 4, 0, 0}, uint8(3), uint16(3), uint8(0))
	f.Add("../outside", []byte{}, uint8(0), uint16(0), uint8(0))
	f.Fuzz(func(t *testing.T, rel string, plan []byte, swapAt uint8, stopAt uint16, maxOpen uint8) {
		if len(plan) > 256 || len(rel) > 64 {
			return
		}
		l := newLayout(t)
		plant(l, plan)
		before := snapshot(t, l.dir)
		root := filepath.ToSlash(filepath.Join("base", rel))
		opened, swapped := 0, ""
		testHookOpen = func(p string) {
			if opened++; opened == int(swapAt) && l.exists("base/"+p) {
				testHookOpen = nil
				swapped = "base/" + p
				l.swap(swapped, targets(l)[int(swapAt)%len(targets(l))])
			}
		}
		defer func() { testHookOpen = nil }()
		ctx := context.Background()
		if stopAt > 0 {
			ctx = rmtreetest.Watch(ctx, 1, func(n int64) bool { return n == int64(stopAt) })
		}
		err := Remover{MaxOpenDirs: 2 + int(maxOpen%4), BatchSize: 1 + int(maxOpen%3)}.RemoveAll(ctx, l.base, rel)
		after := snapshot(t, l.dir)
		if _, cerr := components(rel); cerr != nil {
			if !errors.Is(err, ErrUnsafe) {
				t.Fatalf("RemoveAll(%q) = %v, want ErrUnsafe", rel, err)
			}
			root = "\x00" // nothing is inside
		}
		if swapped != "" {
			// The tenant moved swapped to swapped~ and planted a link there.
			before = movedBy(before, swapped)
			delete(after, swapped)
		}
		checkOutside(t, before, after, root)
		if err == nil {
			if _, serr := os.Lstat(filepath.Join(l.base, rel)); !errors.Is(serr, os.ErrNotExist) {
				t.Fatalf("RemoveAll(%q) = nil, but it is still there: %v", rel, serr)
			}
		}
	})
}

// movedBy is before as the tenant's swap left it: what was below dir is
// below dir~. An entry that was inside the root and is now outside it (the
// swap was on the way to the root, or of the root itself) must be kept too:
// the walk refuses such a tree before removing anything.
func movedBy(before map[string]string, dir string) map[string]string {
	m := map[string]string{}
	for p, what := range before {
		if under(p, dir) {
			p = dir + "~" + strings.TrimPrefix(p, dir)
		}
		m[p] = what
	}
	return m
}

// names the plan draws from: short, colliding, and one that looks like a
// moved directory.
var names = []string{"a", "b", "v", "c", ".rmtree-x-1", "d"}

func targets(l *layout) []string {
	return []string{l.outside, "../outside", "../../outside", "..", "/", l.base, "a", "nowhere", filepath.Join(l.outside, "sentinel")}
}

// plant reads plan four bytes an entry: kind (directory, file, symlink),
// parent (among the directories made so far), name, symlink target.
func plant(l *layout, plan []byte) {
	dirs := []string{"base", "outside"}
	for i := 0; i+3 < len(plan); i += 4 {
		parent := dirs[int(plan[i+1])%len(dirs)]
		p := parent + "/" + names[int(plan[i+2])%len(names)]
		if _, err := os.Lstat(l.path(p)); err == nil {
			continue
		}
		switch plan[i] % 3 {
		case 0:
			l.mkdir(p)
			dirs = append(dirs, p)
			// A marker, so that removing the directory shows as a file gone.
			if err := os.WriteFile(l.path(p+"/m"+strconv.Itoa(i)), []byte(p+"/m"+strconv.Itoa(i)), 0o644); err != nil {
				l.t.Fatal(err)
			}
		case 1:
			l.file(p)
		case 2:
			ts := targets(l)
			l.symlink(p, ts[int(plan[i+3])%len(ts)])
		}
	}
}
