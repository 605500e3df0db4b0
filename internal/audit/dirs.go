package audit

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// maxOrphanDirs bounds the orphan directories listed per file system; the
// rest are counted.
const maxOrphanDirs = 1000

// reach is the set of directories access points (and static PVs) reach,
// and every directory above one of them, so that a walk knows in one
// lookup per path component whether to stop, descend or report.
type reach struct {
	roots  map[string]bool // root directories of access points and static PVs
	above  map[string]bool // every strict ancestor of a root
	atRoot bool            // "/" is a root: everything is reached
}

func newReach(dirs []string) *reach {
	r := &reach{roots: map[string]bool{}, above: map[string]bool{}}
	for _, d := range dirs {
		d = path.Clean("/" + d)
		if d == "/" {
			r.atRoot = true
			continue
		}
		r.roots[d] = true
		for p := path.Dir(d); p != "/"; p = path.Dir(p) {
			r.above[p] = true
		}
		r.above["/"] = true
	}
	return r
}

// reached: d is a root or inside one.
func (r *reach) reached(d string) bool {
	if r.atRoot {
		return true
	}
	for p := d; p != "/"; p = path.Dir(p) {
		if r.roots[p] {
			return true
		}
	}
	return false
}

// scanDirs walks the directories below each base path of the file system
// whose root directory is root (a mount of it, or the emulator's data
// directory), through an os.Root (no symlink leads out of it; symlinks
// are not followed at all): a directory that a root is, or is inside, is
// reached and not entered; one above a root is entered; any other is an
// orphan, reported and not entered. So the walk reads only the
// directories on the way to access points' roots, whatever their data.
func scanDirs(root string, basePaths, reached []string) *DirScan {
	ds := &DirScan{Root: root, BasePaths: basePaths, Orphans: []string{}, Trash: []TrashWait{}}
	rt, err := os.OpenRoot(root)
	if err != nil {
		ds.Error = err.Error()
		return ds
	}
	defer rt.Close()
	r := newReach(reached)
	var errs []string
	trash := "/" + volume.TrashDir
	if names, err := subdirs(rt, trash); err == nil {
		for _, name := range names {
			if e, ok := controller.ParseTrashName(name); ok {
				ds.Trash = append(ds.Trash, TrashWait{Path: e.Orig, Entry: path.Join(trash, name), MovedAt: e.At.UTC(), Purging: e.Purging})
			}
		}
		slices.SortFunc(ds.Trash, func(a, b TrashWait) int { return a.MovedAt.Compare(b.MovedAt) })
	} else if !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err.Error())
	}
	for _, base := range basePaths {
		if r.reached(base) {
			continue // an access point at the base path or above it reaches everything below
		}
		queue := []string{base}
		for len(queue) > 0 {
			dir := queue[0]
			queue = queue[1:]
			names, err := subdirs(rt, dir)
			ds.Read++
			if err != nil {
				if !(dir == base && errors.Is(err, fs.ErrNotExist)) {
					errs = append(errs, err.Error())
				}
				continue
			}
			for _, name := range names {
				d := path.Join(dir, name)
				switch {
				case r.reached(d), volume.InTrash(d): // the trash: listed as such
				case r.above[d]:
					queue = append(queue, d)
				case len(ds.Orphans) < maxOrphanDirs:
					ds.Orphans = append(ds.Orphans, d)
				default:
					ds.More++
				}
			}
		}
	}
	slices.Sort(ds.Orphans)
	ds.Orphans = slices.Compact(ds.Orphans) // base paths may nest
	if len(errs) > 0 {
		ds.Error = strings.Join(errs[:min(len(errs), 5)], "; ")
	}
	return ds
}

// subdirs lists the directories (not symlinks) in dir of rt, sorted, a
// batch at a time.
func subdirs(rt *os.Root, dir string) ([]string, error) {
	rel := strings.TrimPrefix(dir, "/")
	if rel == "" {
		rel = "."
	}
	f, err := rt.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var names []string
	for {
		es, err := f.ReadDir(1024)
		for _, e := range es {
			if e.IsDir() {
				names = append(names, e.Name())
			}
		}
		if errors.Is(err, io.EOF) || len(es) == 0 && err == nil {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(names)
	return names, nil
}
