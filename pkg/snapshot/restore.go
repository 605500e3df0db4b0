package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/rmtree"
)

// ErrNotEmpty: the new volume's root directory holds data no restore put
// there (a path of an earlier volume, kept): nothing is copied over it.
var ErrNotEmpty = errors.New("snapshot: the new volume's directory is not empty")

// Target is the new volume a restore fills.
type Target struct {
	Name       string // the CO's volume name
	VolumeID   string // its ID, once made
	FileSystem string
	Path       string // its root directory, absolute
	// UID and GID own the root, and replace the source's ids on every
	// file (-1: the source's kept).
	UID, GID int64
	Mode     uint32 // the root's mode bits, setgid and sticky too (0: the source root's)
	// KeepOwners: files keep the source's uid and gid (the root is still
	// UID and GID's).
	KeepOwners bool
}

// BeginRestore records the restore of the volume t from src, once the
// volume is made and before its copy starts (the volume is answered only
// once the copy is whole): ErrNameTaken if the volume's restore is of
// another source, ErrOtherFileSystem if src is on another file system.
func (m *Manager) BeginRestore(ctx context.Context, t Target, src Source) error {
	if src.FileSystem != t.FileSystem {
		return fmt.Errorf("%w: the source is on %s, the class's file system is %s", ErrOtherFileSystem, src.FileSystem, t.FileSystem)
	}
	m.mu.Lock()
	m.restores[t.VolumeID] = true
	m.mu.Unlock()
	r, err := m.readRestore(ctx, t.FileSystem, t.VolumeID)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return err
	case r.Source != sourceID(src):
		return fmt.Errorf("%w: volume %q is being restored from %s, not %s", ErrNameTaken, t.Name, r.Source, sourceID(src))
	default:
		return nil
	}
	r = &restore{Name: t.Name, Source: sourceID(src), Snapshot: src.SnapshotID != "", Path: t.Path, Volume: t.VolumeID}
	raw, _ := json.Marshal(r)
	_, err = m.cfg.Store.Create(ctx, journal.Entry{Key: restoreKey(t.FileSystem, t.VolumeID), Value: raw, Index: indexOf(r.Source)})
	if errors.Is(err, journal.ErrExists) {
		return m.BeginRestore(ctx, t, src) // another replica's, just now: judged again
	}
	return err
}

func sourceID(src Source) string {
	if src.SnapshotID != "" {
		return src.SnapshotID
	}
	return src.VolumeID
}

func (m *Manager) readRestore(ctx context.Context, fsID, volumeID string) (*restore, error) {
	e, err := m.cfg.Store.Get(ctx, restoreKey(fsID, volumeID))
	if errors.Is(err, journal.ErrNotFound) {
		return nil, fmt.Errorf("%w: restore of %s", ErrNotFound, volumeID)
	}
	if err != nil {
		return nil, err
	}
	r := &restore{}
	if err := json.Unmarshal(e.Value, r); err != nil {
		return nil, fmt.Errorf("snapshot: the record's restore entry of %s is damaged: %w", volumeID, err)
	}
	r.entry = e
	return r, nil
}

// Restore fills the new volume t from src, once (BeginRestore first): nil
// once its root directory holds the whole copy, ErrPending while the copy
// goes on past Config.Wait.
func (m *Manager) Restore(ctx context.Context, t Target, src Source) error {
	unlock, err := m.locks.TryLock("restore/" + KeyOf(t.VolumeID))
	if err != nil {
		return err
	}
	defer unlock()
	r, err := m.readRestore(ctx, t.FileSystem, t.VolumeID)
	if err != nil {
		return err
	}
	if r.Done {
		return nil
	}
	j := m.start(r.entry.Key, func(ctx context.Context) error { return m.copyRestore(ctx, t, src) })
	return m.await(ctx, j)
}

func (m *Manager) writeRestore(ctx context.Context, r *restore) (journal.Entry, error) {
	raw, _ := json.Marshal(r)
	e := r.entry
	e.Value = raw
	return m.cfg.Store.Update(ctx, e)
}

// copyRestore copies src into a directory of the Area and renames it onto
// t's root (absent or empty), then marks the restore done. The rename is
// the restore's one visible step: the volume's root is empty or whole.
func (m *Manager) copyRestore(ctx context.Context, t Target, src Source) error {
	root, release, err := m.cfg.Mount.Mount(ctx, t.FileSystem)
	if err != nil {
		return err
	}
	defer release()
	if err := os.MkdirAll(filepath.Join(root, Area), 0o700); err != nil {
		return err
	}
	r, err := m.readRestore(ctx, t.FileSystem, t.VolumeID)
	if err != nil || r.Done {
		return err
	}
	if r.Moving != "" {
		if _, err := os.Lstat(filepath.Join(root, Area, r.Moving)); errors.Is(err, os.ErrNotExist) {
			if _, err := os.Lstat(filepath.Join(root, t.Path)); err == nil {
				// An earlier attempt renamed its whole copy onto the
				// root, and its restart lost the entry's write.
				if err := m.markRestored(ctx, t, r); err != nil {
					return err
				}
				return m.removeStale(ctx, root, ".restore-"+KeyOf(t.VolumeID)+"-", "")
			}
		}
	}
	stage := ".restore-" + KeyOf(t.VolumeID) + "-" + randomHex()
	work := filepath.Join(root, Area, stage)
	if err := os.Mkdir(work, 0o700); err != nil {
		return err
	}
	moving := false
	defer func() {
		// Gone once renamed. Once recorded as the one being renamed, it
		// stays if the rename failed: an attempt that finds it gone
		// concludes that the rename happened.
		if !moving {
			_ = rmtree.RemoveAll(context.WithoutCancel(ctx), root, Area+"/"+stage)
		}
	}()
	var mapIDs func(uid, gid int) (int, int)
	if t.UID >= 0 && t.GID >= 0 && src.UID >= 0 && src.GID >= 0 && !t.KeepOwners {
		mapIDs = func(uid, gid int) (int, int) {
			if int64(uid) == src.UID {
				uid = int(t.UID)
			}
			if int64(gid) == src.GID {
				gid = int(t.GID)
			}
			return uid, gid
		}
	}
	from := filepath.Join(root, src.Path)
	if src.SnapshotID != "" {
		// A snapshot's data directory exists from its Ready until its
		// DeleteSnapshot removes it: missing, the snapshot is deleted (by
		// a DeleteSnapshot whose check for restores ran before this
		// restore's entry was written), not empty, as copyTree would take
		// it (right for a volume never mounted, not for a snapshot).
		if _, err := os.Lstat(from); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: snapshot %s: its copy is gone", ErrNotFound, src.SnapshotID)
		}
	}
	size, err := m.copyTree(ctx, from, work, mapIDs)
	if src.SnapshotID != "" {
		// Such a DeleteSnapshot may remove the snapshot while it is
		// copied: the copy skips what is gone and would be answered
		// whole with a part of it, or none. Deleting is written before
		// anything is removed, so a copy that finished while the entry
		// was not yet Deleting read the snapshot intact (a DeleteSnapshot
		// checking after this restore's entry was written refuses). A
		// copy that failed as the snapshot went is ErrNotFound too.
		if err := m.snapshotLives(ctx, src.SnapshotID, src.SnapshotLife); err != nil {
			return fmt.Errorf("snapshot: restore %s: %w", t.Name, err)
		}
	}
	if err != nil {
		return fmt.Errorf("snapshot: restore %s from %s: %w", t.Name, sourceID(src), err)
	}
	if t.UID >= 0 && t.GID >= 0 {
		if err := os.Lchown(work, int(t.UID), int(t.GID)); err != nil {
			return err
		}
	}
	if t.Mode != 0 {
		// After the chown, which clears setgid; unix.Chmod, as os.Chmod
		// takes no raw setgid bit.
		if err := unix.Chmod(work, t.Mode&0o7777); err != nil {
			return &os.PathError{Op: "chmod", Path: work, Err: err}
		}
	}
	if err := os.MkdirAll(filepath.Join(root, path.Dir(t.Path)), 0o755); err != nil {
		return err
	}
	if r, err = m.readRestore(ctx, t.FileSystem, t.VolumeID); err != nil || r.Done {
		return err
	}
	r.Moving, moving = stage, true // kept from here: the write may apply though it fails
	if r.entry, err = m.writeRestore(ctx, r); err != nil {
		return err // a conflict too: another attempt's write; the next call judges again
	}
	switch err := rmtree.Move(root, Area+"/"+stage, t.Path[1:]); {
	case errors.Is(err, rmtree.ErrExist):
		if r, err = m.readRestore(ctx, t.FileSystem, t.VolumeID); err != nil {
			return err
		}
		if r.Done {
			return nil
		}
		if _, err := os.Lstat(filepath.Join(root, Area, r.Moving)); r.Moving == stage || !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s on %s", ErrNotEmpty, t.Path, t.FileSystem)
		}
		// Another attempt's rename (before a restart, or on another
		// controller) put the whole copy there.
	case err != nil:
		return err
	}
	m.cfg.Logger.Info("volume restored", slog.String("volume", t.Name), slog.String("source", sourceID(src)),
		slog.String("path", t.Path), slog.Int64("bytes", size))
	if err := m.markRestored(ctx, t, r); err != nil {
		return err
	}
	// Other attempts' directories (cut short, or another controller's)
	// are garbage once the restore is done; not before: two controllers
	// would remove each other's.
	return m.removeStale(ctx, root, ".restore-"+KeyOf(t.VolumeID)+"-", "")
}

// snapshotLives is ErrNotFound if the snapshot of id is gone, being
// deleted, or another life than life (deleted and made again).
func (m *Manager) snapshotLives(ctx context.Context, id, life string) error {
	fsID, key, ok := ParseID(id)
	if !ok {
		return fmt.Errorf("%w: %q is not a snapshot ID of this driver", ErrNotFound, id)
	}
	snap, err := m.read(ctx, fsID, key)
	if err != nil {
		return err
	}
	if snap.Deleting || !snap.Ready || snap.Life != life {
		return fmt.Errorf("%w: snapshot %s is being deleted, or was deleted and made again", ErrNotFound, id)
	}
	return nil
}

// markRestored writes r done.
func (m *Manager) markRestored(ctx context.Context, t Target, r *restore) error {
	for {
		r.Done = true
		_, err := m.writeRestore(ctx, r)
		if !errors.Is(err, journal.ErrConflict) {
			return err
		}
		if r, err = m.readRestore(ctx, t.FileSystem, t.VolumeID); err != nil {
			return err
		}
	}
}

// StopRestore stops the copy into the volume volumeID on fsID, if this
// process runs one, and waits for its end: DeleteVolume's first step, so
// that no rename lands on the volume's path after the delete removed it.
// After it, the copy's rename has happened (and the delete removes it
// with the root) or never will.
func (m *Manager) StopRestore(fsID, volumeID string) {
	m.stop(restoreKey(fsID, volumeID))
}

// Forget removes the restore entry of the volume volumeID on fsID, once
// its DeleteVolume is done, and stops a copy into it: of the volumes this
// process restored (with no request for any other volume);
// CollectRestores finds the rest.
func (m *Manager) Forget(ctx context.Context, fsID, volumeID string) error {
	m.mu.Lock()
	known := m.restores[volumeID]
	m.mu.Unlock()
	if !known {
		return nil
	}
	if err := m.forgetRestore(ctx, fsID, volumeID); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.restores, volumeID)
	m.mu.Unlock()
	return nil
}

// forgetRestore ends the restore into volumeID on fsID: its copy here
// stopped, its attempts' directories removed (garbage, done or not: one
// whose Done write's answer was lost kept them), then its entry, last, so
// that a failure leaves the entry naming what is left to remove.
func (m *Manager) forgetRestore(ctx context.Context, fsID, volumeID string) error {
	key := restoreKey(fsID, volumeID)
	m.stop(key)
	if err := m.removeStages(ctx, fsID, volumeID); err != nil {
		return err
	}
	return m.forget(ctx, key)
}

func (m *Manager) forget(ctx context.Context, key journal.Key) error {
	m.stop(key)
	e, err := m.cfg.Store.Get(ctx, key)
	if errors.Is(err, journal.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := m.cfg.Store.Delete(ctx, e); err != nil && !errors.Is(err, journal.ErrNotFound) {
		return err
	}
	return nil
}

// CollectRestores removes the restore entries of volumes whose record is
// gone or being deleted (Config.VolumeLive), and the Area's directories
// of their unfinished copies: the orphan collector's, each round.
func (m *Manager) CollectRestores(ctx context.Context) (int, error) {
	var gone []restore
	err := m.cfg.Store.List(ctx, KindRestore, "", "", func(es []journal.Entry) error {
		for _, e := range es {
			var r restore
			if err := json.Unmarshal(e.Value, &r); err != nil {
				m.cfg.Logger.Error("restore entry damaged: left as it is", slog.String("entry", e.Key.Name), slog.Any("error", err))
				continue
			}
			r.entry = e
			gone = append(gone, r)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range gone {
		if m.running(r.entry.Key) {
			continue
		}
		live, err := m.cfg.VolumeLive(ctx, r.entry.Key.FileSystem, r.Name, r.Path)
		if err != nil {
			return n, err
		}
		if live {
			continue
		}
		if err := m.forgetRestore(ctx, r.entry.Key.FileSystem, r.Volume); err != nil {
			return n, err
		}
		n++
		m.cfg.Logger.Info("restore entry removed: its volume's record is gone", slog.String("volume", r.Volume),
			slog.String("source", r.Source), slog.Bool("done", r.Done), slog.String("reason", "volume gone"))
	}
	return n, nil
}

// removeStages removes the Area's directories of every attempt at the
// restore of volumeID, given up.
func (m *Manager) removeStages(ctx context.Context, fsID, volumeID string) error {
	root, release, err := m.cfg.Mount.Mount(ctx, fsID)
	if err != nil {
		return err
	}
	defer release()
	err = m.removeStale(ctx, root, ".restore-"+KeyOf(volumeID)+"-", "")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// removeStale removes the Area's directories whose names start with
// prefix (a snapshot's or a restore's attempts), but moving (the one a
// restore's entry says is being renamed; "" for none).
func (m *Manager) removeStale(ctx context.Context, root, prefix, moving string) error {
	entries, err := os.ReadDir(filepath.Join(root, Area))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if n := e.Name(); strings.HasPrefix(n, prefix) && n != moving {
			if err := rmtree.RemoveAll(ctx, root, Area+"/"+n); err != nil {
				return err
			}
		}
	}
	return nil
}
