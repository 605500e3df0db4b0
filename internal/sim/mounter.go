package sim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// mounter stands for mounting a whole file system (root removal,
// Config.DeleteRootDir; directory volumes): MountFileSystem makes the
// file system's directories under the target, a real directory, so that
// the controller's own removal (pkg/rmtree) and directory making
// (mkdirAt) run on them. At every step (scanMounts) and at Unmount, what
// was removed and made under each target is applied to the simulated file
// system and to every other mounted target (they mount one file system),
// and no data a live access point or directory volume reaches may have
// been removed. A removal runs in the step that answered the mount: the
// volumes that existed then are the ones whose data it could remove.
type mounter struct {
	s    *Sim
	inst *instance
}

// mount is one mounted target.
type mount struct {
	seq     int // in the order mounted
	target  string
	inst    *instance
	fsID    string
	dirs    map[string]bool // the file system's directories under the target, as last synced
	reached map[string][]string
}

func (m *mounter) MountFileSystem(ctx context.Context, fsID, target string) error {
	_, err := m.s.park(ctx, m.inst, kindEFS, "Mount "+fsID, func() (any, error) {
		f, err := m.s.efs.fs(fsID)
		if err != nil {
			return nil, err
		}
		m.s.mountSeq++
		mt := &mount{seq: m.s.mountSeq, target: target, inst: m.inst, fsID: fsID, reached: m.s.liveReach(f), dirs: map[string]bool{}}
		if err := m.s.sync(mt); err != nil {
			return nil, err
		}
		m.s.mounts[target] = mt
		return nil, nil
	})
	return err
}

func (m *mounter) Unmount(ctx context.Context, target string) error {
	_, err := m.s.park(ctx, m.inst, kindEFS, "Unmount", func() (any, error) {
		mt, ok := m.s.mounts[target]
		if !ok {
			return nil, nil
		}
		m.s.changes(mt)
		delete(m.s.mounts, target)
		entries, _ := os.ReadDir(target)
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(target, e.Name())); err != nil {
				return nil, fmt.Errorf("sim: unmount %s: %w", target, err)
			}
		}
		return nil, nil
	})
	return err
}

// nested: one of the directories is the other or below it.
func nested(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/") || b == "/" || a == "/"
}

// liveReach is, per directory, the live access points that reach it (made
// by writers that are not this driver, or answered and not being
// deleted) and the answered directory volumes not being deleted.
func (s *Sim) liveReach(f *fileSystem) map[string][]string {
	out := map[string][]string{}
	answered := map[string]bool{}
	for _, an := range s.answers {
		if s.deleteIssued[an.volID] {
			continue
		}
		answered[an.apID] = true
		if an.dir != "" {
			out[an.dir] = append(out[an.dir], an.apID)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(f.aps)) {
		a := f.aps[id]
		if !a.driver || answered[id] {
			out[a.ap.Path] = append(out[a.ap.Path], id)
		}
	}
	return out
}

// scanMounts looks, at every step, for what the controllers removed from
// and made under the mounted targets in the step before (in the order
// mounted: the controller unmounts its pending targets in map order), and
// then makes every target show the file system as it is now.
func (s *Sim) scanMounts() {
	if len(s.mounts) == 0 {
		return
	}
	ms := slices.Collect(maps.Values(s.mounts))
	slices.SortFunc(ms, func(a, b *mount) int { return a.seq - b.seq })
	for _, mt := range ms {
		s.changes(mt)
	}
	for _, mt := range ms {
		if err := s.sync(mt); err != nil {
			s.violate("sim: sync %s: %v", mt.target, err)
		}
	}
}

// changes applies what was removed and made under mt since it was last
// synced to the file system, and checks each removal against the volumes
// live when mt was mounted.
func (s *Sim) changes(mt *mount) {
	f := s.efs.fss[mt.fsID]
	for _, d := range slices.Sorted(maps.Keys(mt.dirs)) {
		if _, err := os.Lstat(filepath.Join(mt.target, d)); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		delete(mt.dirs, d)
		if _, ok := f.dirs[d]; !ok {
			continue // removed under another target first
		}
		delete(f.dirs, d)
		if s.trashChange(f, mt, d) {
			continue
		}
		s.tracef("%s removed %s", mt.inst.name, d)
		for _, p := range slices.Sorted(maps.Keys(mt.reached)) {
			if nested(p, d) {
				s.violate("data: %s removed %s, which %s reached (live then)", mt.inst.name, d, strings.Join(mt.reached[p], ", "))
			}
		}
	}
	_ = filepath.WalkDir(mt.target, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() || p == mt.target {
			return nil
		}
		d := "/" + filepath.ToSlash(strings.TrimPrefix(p, mt.target+string(filepath.Separator)))
		if !mt.dirs[d] {
			mt.dirs[d] = true
			if _, ok := f.dirs[d]; !ok {
				f.dirs[d] = ""
				s.tracef("%s made %s", mt.inst.name, d)
			}
		}
		return nil
	})
}

// sync makes mt's target show the file system's directories: those made
// or removed under another target since.
func (s *Sim) sync(mt *mount) error {
	f := s.efs.fss[mt.fsID]
	for _, d := range slices.Sorted(maps.Keys(f.dirs)) {
		if !mt.dirs[d] {
			if err := os.MkdirAll(filepath.Join(mt.target, d), 0o755); err != nil {
				return err
			}
			mt.dirs[d] = true
		}
	}
	for _, d := range slices.Sorted(maps.Keys(mt.dirs)) {
		if _, ok := f.dirs[d]; !ok {
			if err := os.RemoveAll(filepath.Join(mt.target, d)); err != nil {
				return err
			}
			delete(mt.dirs, d)
		}
	}
	return nil
}

// trashChange handles d, gone from under mt, if root removal's trash
// explains it (pkg/controller/trash.go), and reports whether it did. A
// directory moved into the trash keeps its data: the holders live then
// are noted. A trash entry that goes while not marked for purging was
// renamed (marked, or moved back), keeping its data; one marked for
// purging is destroyed, and none of the holders noted at its move may
// still be live (each is a listed access point its purge's listing,
// begun the window after the move, must have shown).
func (s *Sim) trashChange(f *fileSystem, mt *mount, d string) bool {
	trashRoot := "/" + volume.TrashDir
	if d == trashRoot {
		return false
	}
	if rest, ok := strings.CutPrefix(d, trashRoot+"/"); ok {
		name, _, deeper := strings.Cut(rest, "/")
		e, ok := controller.ParseTrashName(name)
		if deeper || !ok || !e.Purging {
			return true // inside an entry, or an entry renamed
		}
		key := strings.TrimPrefix(name, "purge.")
		live := map[string]bool{}
		for _, ids := range s.liveReach(f) {
			for _, id := range ids {
				live[id] = true
			}
		}
		for _, id := range f.trashed[key] {
			if live[id] {
				s.violate("data: %s purged %s (moved from %s), which %s reached when it was moved and still does", mt.inst.name, d, e.Orig, id)
			}
		}
		delete(f.trashed, key)
		s.tracef("%s purged %s", mt.inst.name, d)
		return true
	}
	entries, _ := controller.ReadTrash(mt.target)
	for _, e := range entries {
		if e.Purging || d != e.Orig && !strings.HasPrefix(d, e.Orig+"/") {
			continue
		}
		if _, err := os.Lstat(filepath.Join(mt.target, volume.TrashDir, e.Name)); err != nil {
			continue
		}
		if d == e.Orig {
			if f.trashed == nil {
				f.trashed = map[string][]string{}
			}
			var held []string
			for _, p := range slices.Sorted(maps.Keys(mt.reached)) {
				if nested(p, d) {
					held = append(held, mt.reached[p]...)
				}
			}
			f.trashed[e.Name] = held
			s.tracef("%s moved %s to the trash", mt.inst.name, d)
		}
		return true
	}
	return false
}
