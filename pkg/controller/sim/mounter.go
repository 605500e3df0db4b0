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
)

// mounter stands for mounting a whole file system (root removal,
// Config.DeleteRootDir): MountFileSystem makes the file system's
// directories under the target, a real directory, so that the
// controller's own removal (pkg/rmtree) runs on them; Unmount sees what
// was removed, applies it to the simulated file system and checks that no
// data a live access point reaches was removed. The removal runs in the
// step that answered the mount: the access points that existed then are
// the ones whose data it could remove.
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
	dirs    []string // directories made under the target, not seen removed yet
	reached map[string][]string
}

func (m *mounter) MountFileSystem(ctx context.Context, fsID, target string) error {
	_, err := m.s.park(ctx, m.inst, kindEFS, "Mount "+fsID, func() (any, error) {
		f, err := m.s.efs.fs(fsID)
		if err != nil {
			return nil, err
		}
		m.s.mountSeq++
		mt := &mount{seq: m.s.mountSeq, target: target, inst: m.inst, fsID: fsID, reached: m.s.liveReach(f)}
		for _, d := range slices.Sorted(maps.Keys(f.dirs)) {
			if err := os.MkdirAll(filepath.Join(target, d), 0o755); err != nil {
				return nil, err
			}
			mt.dirs = append(mt.dirs, d)
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
		m.s.removals(mt)
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

// liveReach is, per directory, the live access points that reach it: made
// by writers that are not this driver, or answered and not being deleted.
func (s *Sim) liveReach(f *fileSystem) map[string][]string {
	out := map[string][]string{}
	answered := map[string]bool{}
	for _, an := range s.answers {
		if !s.deleteIssued[an.volID] {
			answered[an.apID] = true
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

// scanMounts looks, at every step, for what the removals of the step
// before took from the mounted targets (in the order mounted: the
// controller unmounts its pending targets in map order).
func (s *Sim) scanMounts() {
	if len(s.mounts) == 0 {
		return
	}
	ms := slices.Collect(maps.Values(s.mounts))
	slices.SortFunc(ms, func(a, b *mount) int { return a.seq - b.seq })
	for _, mt := range ms {
		s.removals(mt)
	}
}

// removals applies what was removed under mt to the file system, and
// checks it against the access points live when it was mounted.
func (s *Sim) removals(mt *mount) {
	f := s.efs.fss[mt.fsID]
	kept := mt.dirs[:0]
	for _, d := range mt.dirs {
		if _, err := os.Lstat(filepath.Join(mt.target, d)); !errors.Is(err, fs.ErrNotExist) {
			kept = append(kept, d)
			continue
		}
		delete(f.dirs, d)
		s.tracef("%s removed %s", mt.inst.name, d)
		for _, p := range slices.Sorted(maps.Keys(mt.reached)) {
			if nested(p, d) {
				s.violate("data: %s removed %s, which %s reached (live then)", mt.inst.name, d, strings.Join(mt.reached[p], ", "))
			}
		}
	}
	mt.dirs = kept
}
