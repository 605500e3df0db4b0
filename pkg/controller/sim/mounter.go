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
	fsID    string
	dirs    []string // directories made under the target
	reached map[string][]string
}

func (m *mounter) MountFileSystem(ctx context.Context, fsID, target string) error {
	_, err := m.s.park(ctx, m.inst, kindEFS, "Mount "+fsID, func() (any, error) {
		f, err := m.s.efs.fs(fsID)
		if err != nil {
			return nil, err
		}
		mt := &mount{fsID: fsID, reached: m.s.liveReach(f)}
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
		delete(m.s.mounts, target)
		f := m.s.efs.fss[mt.fsID]
		for _, d := range mt.dirs {
			if _, err := os.Lstat(filepath.Join(target, d)); !errors.Is(err, fs.ErrNotExist) {
				continue
			}
			delete(f.dirs, d)
			m.s.tracef("%s removed %s", m.inst.name, d)
			for _, p := range slices.Sorted(maps.Keys(mt.reached)) {
				if nested(p, d) {
					m.s.violate("data: %s removed %s, which %s reached (live then)", m.inst.name, d, strings.Join(mt.reached[p], ", "))
				}
			}
		}
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
