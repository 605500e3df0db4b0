// Package snapshot keeps VolumeSnapshots, restores and clones as copies on
// the file system itself (EFS has no snapshot API): a snapshot is a copy
// of its source volume's directory into the file system's hidden Area,
// made through the controller's mount.
//
// The record owns every snapshot, as it owns volumes (docs/snapshots.md):
//   - A snapshot's entry (KindSnapshot, keyed by KeyOf its name) is
//     written before its copy starts, and removed only after its
//     directories are removed.
//   - A copy is made in a directory of its own attempt
//     (Area/.tmp-<key>-<random>) and renamed to Area/<key> last, with its
//     manifest inside: a restart, or a second controller copying at the
//     same time, never leaves a directory at Area/<key> that is not a
//     whole copy; the first rename wins, the other attempt's directory is
//     removed.
//   - The entry says ready only once Area/<key> is in place; an attempt
//     that finds it in place (a rename whose entry write was lost) adopts
//     it without copying again.
//   - A restore (CreateVolume from a snapshot, or a clone of a volume)
//     has an entry of its own (KindRestore, keyed by the volume's name),
//     written before its copy starts; the copy is made in the Area and
//     renamed onto the new volume's root directory (absent or empty: no
//     node has mounted a volume not yet answered), so that the volume is
//     answered only whole. DeleteSnapshot refuses (ErrInUse) while a
//     restore from the snapshot is unfinished and its volume's record
//     lives.
//
// Nothing here is atomic across a directory tree: a snapshot of a volume
// being written is a copy of what each file held when it was read
// (README, "Snapshots").
package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/rmtree"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Entry kinds of the record.
const (
	KindSnapshot journal.Kind = "snapshot"
	KindRestore  journal.Kind = "restore"
	// KindArea: a file system has a snapshot area (one entry a file
	// system, written before its first snapshot entry and kept for good,
	// as the handover's): the collector's CollectCopies goes through
	// these, so that a copy left behind after the last snapshot of its
	// file system is found too.
	KindArea journal.Kind = "snapshot-area"
)

// areaKey is the area entry of fsID.
func areaKey(fsID string) journal.Key {
	return journal.Key{Kind: KindArea, FileSystem: fsID, Name: "copies"}
}

// Sentinel errors (pkg/driver gives each its gRPC code).
var (
	// ErrNotFound: no snapshot (or source) of that ID.
	ErrNotFound = errors.New("snapshot: not found")
	// ErrNameTaken: the name is another source's snapshot, or the volume
	// name another source's restore.
	ErrNameTaken = errors.New("snapshot: the name is taken by another source")
	// ErrInUse: a restore from the snapshot is unfinished.
	ErrInUse = errors.New("snapshot: restores from it are unfinished")
	// ErrPending: the copy goes on; call again.
	ErrPending = errors.New("snapshot: copy in progress")
	// ErrNotReady: the snapshot's copy is not finished; a restore from it
	// waits.
	ErrNotReady = errors.New("snapshot: not ready to use yet")
	// ErrOtherFileSystem: a restore or clone onto a file system other than
	// its source's.
	ErrOtherFileSystem = errors.New("snapshot: a copy is made on its source's file system only")
)

// Mounter gives the root of a file system mounted for the controller.
// Contract: release unmounts (once every user released); the mount shows
// the whole file system, as root.
type Mounter interface {
	Mount(ctx context.Context, fsID string) (root string, release func(), err error)
}

// Copier copies the directory tree at src into the empty directory dst,
// keeping owners (through mapIDs, when not nil), modes, times, links and
// holes, never following a symlink nor writing outside dst
// (pkg/treecopy). It returns the bytes of file data copied.
type Copier func(ctx context.Context, src, dst string, mapIDs func(uid, gid int) (int, int)) (int64, error)

// Config is what a Manager works with.
type Config struct {
	Store  journal.Store
	Mount  Mounter
	Copy   Copier
	Now    func() time.Time
	Logger *slog.Logger
	// Wait bounds how long a call waits for its copy before it answers
	// "not yet" (0: 10 s): small volumes finish in one call.
	Wait time.Duration
	// MaxCopies bounds the copies running at once (0: 4).
	MaxCopies int
	// VolumeLive reports whether the record holds the volume named name
	// on fsID, not being deleted: an unfinished restore of a volume that
	// does not live is given up.
	VolumeLive func(ctx context.Context, fsID, name, path string) (bool, error)
}

// Manager serves snapshots and restores for one controller.
type Manager struct {
	cfg   Config
	locks *keylock.Set
	slots chan struct{}
	mu    sync.Mutex
	jobs  map[string]*job // by entry key: the copies running in this process
	// restores: the volumes whose restore this process recorded, for
	// Forget (the collector's CollectRestores finds the rest).
	restores map[string]bool
	// areas: the file systems whose area entry this process wrote or saw
	// (it is never removed: no need to write it again).
	areas map[string]bool
}

// New returns a Manager.
func New(cfg Config) *Manager {
	if cfg.Wait == 0 {
		cfg.Wait = 10 * time.Second
	}
	if cfg.MaxCopies == 0 {
		cfg.MaxCopies = 4
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{cfg: cfg, locks: keylock.New(), slots: make(chan struct{}, cfg.MaxCopies), jobs: map[string]*job{}, restores: map[string]bool{}, areas: map[string]bool{}}
}

// Source is what a snapshot or restore copies: a volume's directory.
type Source struct {
	VolumeID   string // the CO's ID of the volume (a snapshot's source)
	SnapshotID string // or a snapshot's (a restore's source)
	// SnapshotLife is the snapshot's Life when the restore read it ready.
	SnapshotLife string
	FileSystem   string
	Path         string // absolute, on FileSystem
	UID, GID     int64  // the ids its files are made with (-1: none)
}

// Snapshot is a snapshot as the record holds it (KindSnapshot's value).
type Snapshot struct {
	ID         string    `json:"-"`
	Name       string    `json:"name"`
	Source     string    `json:"source"`
	FileSystem string    `json:"fileSystem"`
	SourcePath string    `json:"sourcePath"`
	UID        int64     `json:"uid"`
	GID        int64     `json:"gid"`
	Created    time.Time `json:"created"`
	// Life is random, drawn when the entry is made: a snapshot deleted
	// and made again under the same name is another life, whose copy a
	// read-only volume or restore of the earlier one must not take for
	// its own.
	Life  string `json:"life,omitempty"`
	Ready bool   `json:"ready,omitempty"`
	Size  int64  `json:"size,omitempty"`
	// Deleting: a DeleteSnapshot runs; undone if it finds read-only
	// volumes served from the copy (AddReader).
	Deleting bool `json:"deleting,omitempty"`
	// Removing: the copy is being removed (Deleting, for good).
	Removing bool `json:"removing,omitempty"`
	entry    journal.Entry
}

// restore is a restore as the record holds it (KindRestore's value).
type restore struct {
	Name     string `json:"name"`
	Source   string `json:"source"` // a snapshot's ID or a volume's
	Path     string `json:"path"`   // the new volume's root on the file system
	Volume   string `json:"volume,omitempty"`
	Done     bool   `json:"done,omitempty"`
	Snapshot bool   `json:"snapshot,omitempty"` // Source is a snapshot's
	// Moving is the Area's directory an attempt is renaming onto the
	// volume's root: written before the rename, so that an attempt that
	// finds the root taken can tell that rename's result (the directory
	// gone from the Area) from data that was there before.
	Moving string `json:"moving,omitempty"`
	entry  journal.Entry
}

// manifest is Area/<key>/manifest.json: what the copy is of.
type manifest struct {
	Name       string    `json:"name"`
	Source     string    `json:"source"`
	SourcePath string    `json:"sourcePath"`
	UID        int64     `json:"uid"`
	GID        int64     `json:"gid"`
	Created    time.Time `json:"created"`
	Life       string    `json:"life,omitempty"`
	Size       int64     `json:"size"`
}

// CopyKey is the name of the snapshot's copy in the Area: a function of
// its key and its life, so that a snapshot deleted and made again under
// its name never finds the earlier life's copy at its own (a rename of an
// attempt that outlived its delete lands at the dead life's name, which
// nothing reads, and CollectCopies removes).
func (snap *Snapshot) CopyKey() string { return CopyKey(snap.entry.Key.Name, snap.Life) }

// CopyKey is the copy key of the snapshot of key in its life life.
func CopyKey(key, life string) string {
	if life == "" {
		return key
	}
	return KeyOf(key + "/" + life)
}

func snapshotKey(fsID, key string) journal.Key {
	return journal.Key{Kind: KindSnapshot, FileSystem: fsID, Name: key}
}

// restoreKey is the restore entry of the volume volumeID (a restore is
// recorded once its volume is made, before its copy starts).
func restoreKey(fsID, volumeID string) journal.Key {
	return journal.Key{Kind: KindRestore, FileSystem: fsID, Name: KeyOf(volumeID)}
}

// Create takes the snapshot named name of src: the one recorded under the
// name if any (ErrNameTaken if of another source), else a new one,
// recorded before its copy starts. It waits for the copy up to
// Config.Wait: the snapshot returned is Ready or not yet.
func (m *Manager) Create(ctx context.Context, name string, src Source) (*Snapshot, error) {
	key := KeyOf(name)
	unlock, err := m.locks.TryLock("snapshot/" + key)
	if err != nil {
		return nil, err
	}
	defer unlock()
	snap, err := m.begin(ctx, name, src)
	if err != nil {
		return nil, err
	}
	if snap.Ready {
		return snap, nil
	}
	j := m.start(snap.entry.Key, func(ctx context.Context) error { return m.copySnapshot(ctx, snap) })
	if err := m.await(ctx, j); err != nil && !errors.Is(err, ErrPending) {
		return nil, err
	}
	return m.read(ctx, src.FileSystem, key)
}

// begin is the snapshot named name of src as recorded, recorded now (not
// ready) if it was not: Create's first step, under the name's lock.
func (m *Manager) begin(ctx context.Context, name string, src Source) (*Snapshot, error) {
	key := KeyOf(name)
	snap, err := m.read(ctx, src.FileSystem, key)
	switch {
	case errors.Is(err, ErrNotFound):
		// Before the snapshot entry, so before anything is copied: the
		// collector finds every file system that may hold copies.
		if err := m.noteArea(ctx, src.FileSystem); err != nil {
			return nil, err
		}
		snap = &Snapshot{Name: name, Source: src.VolumeID, FileSystem: src.FileSystem, SourcePath: src.Path,
			UID: src.UID, GID: src.GID, Created: m.cfg.Now().UTC().Truncate(time.Millisecond), Life: randomHex()}
		raw, _ := json.Marshal(snap)
		e, err := m.cfg.Store.Create(ctx, journal.Entry{Key: snapshotKey(src.FileSystem, key), Value: raw, Index: indexOf(src.VolumeID)})
		if err != nil {
			if errors.Is(err, journal.ErrExists) {
				return nil, fmt.Errorf("%w: snapshot %q: %w", keylock.ErrBusy, name, err) // another replica's: retry
			}
			return nil, err
		}
		snap.entry, snap.ID = e, ID(src.FileSystem, key)
		m.cfg.Logger.Info("snapshot recorded", slog.String("snapshot", snap.ID), slog.String("name", name), slog.String("source", src.VolumeID))
	case err != nil:
		return nil, err
	case snap.Source != src.VolumeID:
		return nil, fmt.Errorf("%w: snapshot %q is of %s, not %s", ErrNameTaken, name, snap.Source, src.VolumeID)
	case snap.Deleting:
		return nil, fmt.Errorf("%w: snapshot %q is being deleted", keylock.ErrBusy, name)
	}
	return snap, nil
}

// Get returns the snapshot of id: ErrNotFound if there is none (or it is
// being deleted).
func (m *Manager) Get(ctx context.Context, id string) (*Snapshot, error) {
	fsID, key, ok := ParseID(id)
	if !ok {
		return nil, fmt.Errorf("%w: %q is not a snapshot ID of this driver", ErrNotFound, id)
	}
	snap, err := m.read(ctx, fsID, key)
	if err == nil && snap.Deleting {
		return nil, fmt.Errorf("%w: snapshot %s is being deleted", ErrNotFound, id)
	}
	return snap, err
}

// read reads the snapshot entry of key.
func (m *Manager) read(ctx context.Context, fsID, key string) (*Snapshot, error) {
	e, err := m.cfg.Store.Get(ctx, snapshotKey(fsID, key))
	if errors.Is(err, journal.ErrNotFound) {
		return nil, fmt.Errorf("%w: snapshot %s", ErrNotFound, ID(fsID, key))
	}
	if err != nil {
		return nil, err
	}
	return decodeSnapshot(e)
}

func decodeSnapshot(e journal.Entry) (*Snapshot, error) {
	snap := &Snapshot{}
	if err := json.Unmarshal(e.Value, snap); err != nil {
		return nil, fmt.Errorf("snapshot: the record's entry %s is damaged: %w", e.Key.Name, err)
	}
	snap.entry, snap.ID = e, ID(e.Key.FileSystem, e.Key.Name)
	return snap, nil
}

// indexOf is the record's index of a source volume's snapshots.
func indexOf(volumeID string) string { return KeyOf(volumeID) }

// Delete deletes the snapshot of id: nothing if there is none (an ID of
// no snapshot is one that is gone). ErrInUse while a restore from it is
// unfinished or a read-only volume is served from it (AddReader). Its
// entry is marked deleting, its copy stopped, its
// directories removed, and its entry removed last.
func (m *Manager) Delete(ctx context.Context, id string) error {
	fsID, key, ok := ParseID(id)
	if !ok {
		return nil
	}
	unlock, err := m.locks.TryLock("snapshot/" + key)
	if err != nil {
		return err
	}
	defer unlock()
	snap, err := m.read(ctx, fsID, key)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !snap.Removing {
		if !snap.Deleting {
			if err := m.refuseInUse(ctx, snap); err != nil {
				return err
			}
			snap.Deleting = true
			if err := m.write(ctx, snap); err != nil {
				return err
			}
		}
		// Read-only volumes are listed after Deleting is written (AddReader
		// writes its entry before it reads Deleting): one added at once is
		// either listed here, or sees Deleting and gives up.
		rs, err := m.readers(ctx, snap)
		if err != nil {
			return err
		}
		if len(rs) > 0 {
			snap.Deleting = false
			if err := m.write(ctx, snap); err != nil {
				return err
			}
			return fmt.Errorf("%w: %d read-only volumes are served from %s (%s, made for %q)", ErrInUse, len(rs), id, rs[0].VolumeID, rs[0].Name)
		}
		// From here the copy is removed: Deleting is never undone.
		snap.Removing = true
		if err := m.write(ctx, snap); err != nil {
			return err
		}
	}
	m.stop(snap.entry.Key)
	root, release, err := m.cfg.Mount.Mount(ctx, fsID)
	if err != nil {
		return err
	}
	defer release()
	if err := m.removeCopies(ctx, root, snap.CopyKey(), true); err != nil {
		return err
	}
	if err := m.cfg.Store.Delete(ctx, snap.entry); err != nil && !errors.Is(err, journal.ErrNotFound) {
		return err
	}
	m.cfg.Logger.Info("snapshot deleted", slog.String("snapshot", id), slog.String("name", snap.Name),
		slog.String("reason", "DeleteSnapshot"))
	return nil
}

// write updates snap's entry to snap.
func (m *Manager) write(ctx context.Context, snap *Snapshot) error {
	raw, _ := json.Marshal(snap)
	snap.entry.Value = raw
	e, err := m.cfg.Store.Update(ctx, snap.entry)
	if err != nil {
		return err
	}
	snap.entry = e
	return nil
}

// refuseInUse is ErrInUse if a restore from snap is unfinished and its
// volume lives; an unfinished restore of a volume gone is given up.
func (m *Manager) refuseInUse(ctx context.Context, snap *Snapshot) error {
	var open []restore
	err := m.cfg.Store.List(ctx, KindRestore, snap.FileSystem, indexOf(snap.ID), func(es []journal.Entry) error {
		for _, e := range es {
			var r restore
			if json.Unmarshal(e.Value, &r) == nil && r.Snapshot && r.Source == snap.ID && !r.Done {
				r.entry = e
				open = append(open, r)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, r := range open {
		if m.running(r.entry.Key) {
			return fmt.Errorf("%w: the restore of %q from %s is copying", ErrInUse, r.Name, snap.ID)
		}
		live, err := m.cfg.VolumeLive(ctx, snap.FileSystem, r.Name, r.Path)
		if err != nil {
			return err
		}
		if live {
			return fmt.Errorf("%w: the restore of %q from %s is unfinished", ErrInUse, r.Name, snap.ID)
		}
		// Its attempts' directories go with it, as CollectRestores
		// removes them.
		if err := m.forgetRestore(ctx, snap.FileSystem, r.Volume); err != nil {
			return err
		}
		m.cfg.Logger.Warn("unfinished restore given up: its volume's record is gone", slog.String("volume", r.Name),
			slog.String("snapshot", snap.ID), slog.String("reason", "volume gone"))
	}
	return nil
}

// removeCopies removes the snapshot's attempts (Area/.tmp-<key>-*) and,
// with final, its copy (Area/<key>).
func (m *Manager) removeCopies(ctx context.Context, root, key string, final bool) error {
	err := m.removeStale(ctx, root, ".tmp-"+key+"-", "")
	if err == nil && final {
		err = rmtree.RemoveAll(ctx, root, Area+"/"+key)
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// List returns the snapshots of the record (of sourceVolumeID if not ""),
// not being deleted, by ID.
func (m *Manager) List(ctx context.Context, sourceVolumeID string) ([]*Snapshot, error) {
	var out []*Snapshot
	index := ""
	if sourceVolumeID != "" {
		index = indexOf(sourceVolumeID)
	}
	err := m.cfg.Store.List(ctx, KindSnapshot, "", index, func(es []journal.Entry) error {
		for _, e := range es {
			snap, err := decodeSnapshot(e)
			if err != nil {
				m.cfg.Logger.Error("snapshot entry damaged: not listed", slog.String("entry", e.Key.Name), slog.Any("error", err))
				continue
			}
			if !snap.Deleting && (sourceVolumeID == "" || snap.Source == sourceVolumeID) {
				out = append(out, snap)
			}
		}
		return nil
	})
	slices.SortFunc(out, func(a, b *Snapshot) int { return strings.Compare(a.ID, b.ID) })
	return out, err
}

// copySnapshot makes snap's copy, once: in an attempt's directory, renamed
// into place, then the entry marked ready. An attempt that finds the copy
// in place adopts it.
func (m *Manager) copySnapshot(ctx context.Context, snap *Snapshot) error {
	root, release, err := m.cfg.Mount.Mount(ctx, snap.FileSystem)
	if err != nil {
		return err
	}
	defer release()
	key := snap.CopyKey()
	final := filepath.Join(root, dir(key))
	var man manifest
	if raw, err := os.ReadFile(filepath.Join(final, "manifest.json")); err == nil && json.Unmarshal(raw, &man) == nil {
		// In place already: an earlier attempt's rename, whose entry
		// write did not happen.
		if err := m.markReady(ctx, snap, man.Size); err != nil {
			return err
		}
		return m.removeCopies(ctx, root, key, false)
	}
	if err := os.MkdirAll(filepath.Join(root, Area), 0o700); err != nil {
		return err
	}
	tmp := ".tmp-" + key + "-" + randomHex()
	work := filepath.Join(root, Area, tmp)
	if err := os.Mkdir(work, 0o700); err != nil {
		return err
	}
	defer func() { _ = rmtree.RemoveAll(context.WithoutCancel(ctx), root, Area+"/"+tmp) }() // gone once renamed
	if err := os.Mkdir(filepath.Join(work, "data"), 0o700); err != nil {
		return err
	}
	began := m.cfg.Now()
	size, err := m.copyTree(ctx, filepath.Join(root, snap.SourcePath), filepath.Join(work, "data"), nil)
	if err != nil {
		return fmt.Errorf("snapshot: copy %s of %s: %w", snap.SourcePath, snap.FileSystem, err)
	}
	man = manifest{Name: snap.Name, Source: snap.Source, SourcePath: snap.SourcePath, UID: snap.UID, GID: snap.GID,
		Created: snap.Created, Life: snap.Life, Size: size}
	raw, _ := json.MarshalIndent(man, "", "  ")
	if err := os.WriteFile(filepath.Join(work, "manifest.json"), append(raw, '\n'), 0o600); err != nil {
		return err
	}
	switch err := rmtree.Move(root, Area+"/"+tmp, dir(key)); {
	case errors.Is(err, rmtree.ErrExist):
		// Another attempt's rename came first: its copy is the snapshot
		// (the copy key is this life's: no other life's copy is there).
	case err != nil:
		return err
	}
	m.cfg.Logger.Info("snapshot copied", slog.String("snapshot", snap.ID), slog.Int64("bytes", size),
		slog.Duration("took", m.cfg.Now().Sub(began)))
	if err := m.markReady(ctx, snap, size); err != nil {
		return err
	}
	// Attempts cut short before (a restart), or still copying on another
	// controller, whose rename would find this copy: theirs are garbage
	// now. Not before the copy: two controllers would remove each other's.
	return m.removeCopies(ctx, root, key, false)
}

// markReady writes snap's entry ready, unless it is gone, being removed,
// or another life (deleted, and made again under its name): then the copy
// just put in place is removed again (the delete may have removed the
// directories before the rename). Being deleted only, it is marked ready:
// the copy is whole, and the delete, if it refuses, leaves it so.
func (m *Manager) markReady(ctx context.Context, snap *Snapshot, size int64) error {
	for {
		cur, err := m.read(ctx, snap.FileSystem, snap.entry.Key.Name)
		if errors.Is(err, ErrNotFound) || err == nil && (cur.Removing || cur.Life != snap.Life) {
			return m.discard(ctx, snap)
		}
		if err != nil {
			return err
		}
		if cur.Ready {
			return nil
		}
		cur.Ready, cur.Size = true, size
		raw, _ := json.Marshal(cur)
		cur.entry.Value = raw
		_, err = m.cfg.Store.Update(ctx, cur.entry)
		if !errors.Is(err, journal.ErrConflict) {
			return err
		}
	}
}

// discard removes the copy of a snapshot deleted while it was made.
func (m *Manager) discard(ctx context.Context, snap *Snapshot) error {
	root, release, err := m.cfg.Mount.Mount(ctx, snap.FileSystem)
	if err != nil {
		return err
	}
	defer release()
	m.cfg.Logger.Warn("snapshot copy removed: the snapshot was deleted while it was copied", slog.String("snapshot", snap.ID),
		slog.String("reason", "snapshot deleted"))
	return m.removeCopies(context.WithoutCancel(ctx), root, snap.CopyKey(), true)
}

// copyTree is Config.Copy, with a source that does not exist yet copied
// as an empty directory: an access point's root is made by EFS at its
// first mount, and a volume no node has mounted holds nothing.
func (m *Manager) copyTree(ctx context.Context, src, dst string, mapIDs func(uid, gid int) (int, int)) (int64, error) {
	if _, err := os.Lstat(src); errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	return m.cfg.Copy(ctx, src, dst, mapIDs)
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// CollectCopies removes, on every file system with snapshots in the
// record, the copies and copy attempts of no snapshot's life: what an
// attempt that outlived its snapshot's delete renamed into place, its
// process killed before it removed it again. The orphan collector's, each
// round (with CollectRestores). It returns how many it removed.
func (m *Manager) CollectCopies(ctx context.Context) (int, error) {
	areas, fss := map[string]bool{}, map[string]bool{}
	if err := m.cfg.Store.List(ctx, KindArea, "", "", func(es []journal.Entry) error {
		for _, e := range es {
			areas[e.Key.FileSystem], fss[e.Key.FileSystem] = true, true
		}
		return nil
	}); err != nil {
		return 0, err
	}
	if err := m.cfg.Store.List(ctx, KindSnapshot, "", "", func(es []journal.Entry) error {
		for _, e := range es {
			fss[e.Key.FileSystem] = true
		}
		return nil
	}); err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, fsID := range slices.Sorted(maps.Keys(fss)) {
		if !areas[fsID] {
			// Snapshots recorded before area entries were: the file system
			// is recorded now, for the rounds after its last snapshot.
			if err := m.noteArea(ctx, fsID); err != nil {
				errs = append(errs, err)
			}
		}
		k, err := m.collectCopies(ctx, fsID)
		n += k
		if err != nil {
			// The other file systems' rounds still run.
			errs = append(errs, fmt.Errorf("snapshot copies of %s: %w", fsID, err))
		}
	}
	return n, errors.Join(errs...)
}

// noteArea makes sure the record's area entry of fsID exists.
func (m *Manager) noteArea(ctx context.Context, fsID string) error {
	m.mu.Lock()
	known := m.areas[fsID]
	m.mu.Unlock()
	if known {
		return nil
	}
	_, err := m.cfg.Store.Create(ctx, journal.Entry{Key: areaKey(fsID), Value: []byte("/" + Area)})
	if err != nil && !errors.Is(err, journal.ErrExists) {
		return err
	}
	m.mu.Lock()
	m.areas[fsID] = true
	m.mu.Unlock()
	return nil
}

// collectCopies is CollectCopies on fsID. The area is listed before the
// record is read: a directory listed is of a life whose entry was made
// before it; if no entry names that life once read, the life is over and
// nothing reads its copy. Nothing is removed while a snapshot entry of
// fsID is damaged (its life, and so its copy's name, is unknown).
func (m *Manager) collectCopies(ctx context.Context, fsID string) (int, error) {
	root, release, err := m.cfg.Mount.Mount(ctx, fsID)
	if err != nil {
		return 0, err
	}
	defer release()
	names, err := os.ReadDir(filepath.Join(root, Area))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	live, damaged := map[string]bool{}, false
	if err := m.cfg.Store.List(ctx, KindSnapshot, fsID, "", func(es []journal.Entry) error {
		for _, e := range es {
			snap, err := decodeSnapshot(e)
			if err != nil {
				damaged = true
				continue
			}
			live[snap.CopyKey()] = true
		}
		return nil
	}); err != nil {
		return 0, err
	}
	if damaged {
		m.cfg.Logger.Error("snapshot copies not collected: a snapshot entry of the file system is damaged", slog.String("fileSystem", fsID))
		return 0, nil
	}
	n := 0
	for _, d := range names {
		name := d.Name()
		copyKey := name
		if rest, ok := strings.CutPrefix(name, ".tmp-"); ok {
			copyKey, _, _ = strings.Cut(rest, "-")
		}
		if !volume.ValidKey(copyKey) || live[copyKey] {
			continue // a restore's directory, or a live life's
		}
		if err := rmtree.RemoveAll(ctx, root, Area+"/"+name); err != nil {
			return n, err
		}
		n++
		m.cfg.Logger.Warn("snapshot copy removed: no snapshot's life names it", slog.String("fileSystem", fsID),
			slog.String("directory", "/"+Area+"/"+name), slog.String("reason", "copy of a snapshot deleted"))
	}
	return n, nil
}
