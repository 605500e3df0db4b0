package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// entrywiseCopy copies src's entries one at a time, in name order, with
// cp -a, calling after(i) once entry i is copied; an entry gone from src
// meanwhile is skipped, as pkg/treecopy skips it (a volume being written
// loses files while it is copied).
func entrywiseCopy(after func(i int)) Copier {
	return func(_ context.Context, src, dst string, _ func(uid, gid int) (int, int)) (int64, error) {
		entries, err := os.ReadDir(src)
		if err != nil {
			return 0, err
		}
		for i, e := range entries {
			if out, err := exec.Command("cp", "-a", filepath.Join(src, e.Name()), dst).CombinedOutput(); err != nil {
				if _, err := os.Lstat(filepath.Join(src, e.Name())); errors.Is(err, os.ErrNotExist) {
					continue
				}
				return 0, errors.New(string(out))
			}
			after(i)
		}
		return 5, nil
	}
}

// deletion is what a DeleteSnapshot does once past its check for
// restores: its entry marked Deleting, then its copy removed, then its
// entry removed. Each step may be the last one done when the restore
// looks.
type deletion struct {
	mark, remove, drop bool
}

func (d deletion) run(ctx context.Context, t *testing.T, w *world, key string) {
	e, err := w.store.Get(ctx, snapshotKey(fs1, key))
	if err != nil {
		t.Errorf("the snapshot's entry: %v", err)
		return
	}
	snap, err := decodeSnapshot(e)
	if err != nil {
		t.Errorf("the snapshot's entry: %v", err)
		return
	}
	if d.mark {
		snap.Deleting = true
		if e.Value, err = json.Marshal(snap); err != nil {
			t.Errorf("the snapshot's entry: %v", err)
			return
		}
		if e, err = w.store.Update(ctx, e); err != nil {
			t.Errorf("marking the snapshot deleting: %v", err)
			return
		}
	}
	if d.remove {
		if err := os.RemoveAll(filepath.Join(w.root, Area, snap.CopyKey())); err != nil {
			t.Errorf("removing the snapshot's copy: %v", err)
		}
	}
	if d.drop {
		if err := w.store.Delete(ctx, e); err != nil {
			t.Errorf("removing the snapshot's entry: %v", err)
		}
	}
}

// A DeleteSnapshot whose check for unfinished restores ran before the
// restore's entry was written goes on while the restore copies: the
// restore must fail NotFound, never answer a volume with part of the
// snapshot, or none of it.
func TestARestoreWhoseSnapshotIsDeletedFailsNotFound(t *testing.T) {
	const before, whole = -1, 1 // the snapshot's data holds entries a and b
	for _, tc := range []struct {
		name string
		at   int // the deletion runs once entry at is copied; before: before Restore
		del  deletion
	}{
		{"data dir missing before the copy", before, deletion{remove: true}},
		{"deleted before the copy", before, deletion{mark: true, remove: true, drop: true}},
		{"marked deleting before the copy", before, deletion{mark: true}},
		{"marked deleting and removed mid-copy", 0, deletion{mark: true, remove: true}},
		{"deleted whole mid-copy", 0, deletion{mark: true, remove: true, drop: true}},
		{"marked deleting after the copy", whole, deletion{mark: true}},
		{"deleted whole after the copy", whole, deletion{mark: true, remove: true, drop: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			if err := os.WriteFile(filepath.Join(w.root, "vol", "b"), []byte("world"), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			key := KeyOf("snap-1")
			restoring := false // set before Restore: the snapshot's own copy runs no hook
			m := New(Config{Store: w.store, Mount: dirMount(w.root), Wait: time.Minute,
				Copy: entrywiseCopy(func(i int) {
					if restoring && i == tc.at {
						tc.del.run(ctx, t, w, key)
					}
				}),
				VolumeLive: func(context.Context, string, string, string) (bool, error) { return true, nil }})
			snap, err := m.Create(ctx, "snap-1", src)
			if err != nil || !snap.Ready {
				t.Fatalf("Create: %+v, %v", snap, err)
			}
			from := Source{SnapshotID: snap.ID, SnapshotLife: snap.Life, FileSystem: fs1, Path: DataDir(snap.CopyKey()), UID: -1, GID: -1}
			to := Target{Name: "pvc-new", VolumeID: "efs:" + fs1 + "::fsap-00000000000000009", FileSystem: fs1, Path: "/base/new",
				UID: -1, GID: -1}
			if err := m.BeginRestore(ctx, to, from); err != nil {
				t.Fatal(err)
			}
			if tc.at == before {
				tc.del.run(ctx, t, w, key)
			}
			restoring = true
			if err := m.Restore(ctx, to, from); !errors.Is(err, ErrNotFound) {
				t.Errorf("Restore: %v, want ErrNotFound", err)
			}
			if entries, err := os.ReadDir(filepath.Join(w.root, "base", "new")); err == nil && len(entries) != 0 || err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the new volume's root holds %v (%v), want it absent or empty", entries, err)
			}
			if r, err := m.readRestore(ctx, fs1, to.VolumeID); err != nil || r.Done {
				t.Errorf("the restore's entry: %v (done: %v); want it there, not done", err, r != nil && r.Done)
			}
			entries, _ := os.ReadDir(filepath.Join(w.root, Area))
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), ".restore-") {
					t.Errorf("the restore's stage %s is left in the area", e.Name())
				}
			}
		})
	}
}
