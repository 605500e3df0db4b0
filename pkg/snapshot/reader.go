package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// KindReader is the record's entry of a read-only volume served straight
// from a snapshot's copy (volume.ReaderPrefix): no copy of its own, so
// the snapshot's copy must outlive it. DeleteSnapshot refuses (ErrInUse)
// while one lives.
const KindReader journal.Kind = "reader"

// Reader is a read-only volume from a snapshot, as the record holds it.
type Reader struct {
	VolumeID string `json:"-"`
	Name     string `json:"name"`     // the CO's volume name
	Snapshot string `json:"snapshot"` // the snapshot's ID
	Copy     string `json:"copy"`     // the copy key of its life (Snapshot.CopyKey): the volume's directory
	// Claim is the claim it was made for ("namespace/name"; "" when the
	// provisioner passes none): the orphan collector's proof that the
	// volume was given up.
	Claim   string    `json:"claim,omitempty"`
	Created time.Time `json:"created"`
	entry   journal.Entry
}

func readerKey(fsID, name string) journal.Key {
	return journal.Key{Kind: KindReader, FileSystem: fsID, Name: KeyOf(name)}
}

// AddReader records the read-only volume named name of the snapshot of
// snapshotID and returns its volume ID: the same for the same name, after
// any restart (ErrNameTaken if the name is another snapshot's).
// ErrNotFound for a snapshot that is not there or deleted, keylock.ErrBusy
// while a DeleteSnapshot runs, ErrNotReady for one not yet whole.
//
// A delete of the snapshot that runs at once is told apart by the order
// of writes on both sides (as two flags in Dekker's algorithm): this entry
// is written before the snapshot is read again, and the delete writes
// Deleting before it lists readers. One of the two sees the other: if
// this read finds no Deleting, the delete's listing comes after this
// entry and refuses. The snapshot read again must be the same life
// (deleted and made again under its name between the two reads, it is
// another copy, maybe not made yet).
func (m *Manager) AddReader(ctx context.Context, name, snapshotID, claim string) (string, error) {
	// A DeleteVolume of the same volume at once waits (ABORTED), so that
	// an entry is never removed between its write and the answer.
	unlock, err := m.locks.TryLock("reader/" + KeyOf(name))
	if err != nil {
		return "", err
	}
	defer unlock()
	snap, err := m.Get(ctx, snapshotID)
	if err != nil {
		return "", err
	}
	if !snap.Ready {
		return "", fmt.Errorf("%w: snapshot %s", ErrNotReady, snapshotID)
	}
	fsID, key, _ := ParseID(snapshotID)
	copyKey := snap.CopyKey()
	r := Reader{Name: name, Snapshot: snapshotID, Copy: copyKey, Claim: claim, Created: m.cfg.Now().UTC().Truncate(time.Millisecond)}
	raw, _ := json.Marshal(r)
	var old *Reader
	_, err = m.cfg.Store.Create(ctx, journal.Entry{Key: readerKey(fsID, name), Value: raw, Index: indexOf(snapshotID)})
	if errors.Is(err, journal.ErrExists) {
		if old, err = m.readReader(ctx, fsID, name); err != nil {
			return "", err
		}
		if old.Snapshot != snapshotID {
			return "", fmt.Errorf("%w: read-only volume %q is of %s, not %s", ErrNameTaken, name, old.Snapshot, snapshotID)
		}
	} else if err != nil {
		return "", err
	}
	// The entry stays when the answer is no: it may be another call's
	// for the same volume (a repeated CreateVolume, or another
	// controller's), answered already; removing it would let the
	// snapshot be deleted under that volume. The CO's next call finds it
	// (or the orphan collector removes it once the claim is gone).
	life := snap.Life
	switch snap, err = m.read(ctx, fsID, key); {
	case errors.Is(err, ErrNotFound), err == nil && (snap.Removing || snap.Life != life):
		return "", fmt.Errorf("%w: snapshot %s was deleted", ErrNotFound, snapshotID)
	case err != nil:
		return "", err
	case snap.Deleting:
		// The delete finds this entry and refuses, unless it listed
		// before it was written: a next call tells which.
		return "", fmt.Errorf("%w: snapshot %s is being deleted", keylock.ErrBusy, snapshotID)
	}
	if old != nil && old.Copy != copyKey {
		// An earlier call's entry, answered no, of a life deleted since:
		// this life is the one read twice, and a life with a volume
		// answered is never deleted. The entry is this life's now (its
		// name protected the snapshot all along).
		old.Copy = copyKey
		raw, _ := json.Marshal(old)
		old.entry.Value = raw
		if _, err := m.cfg.Store.Update(ctx, old.entry); err != nil {
			return "", err
		}
	}
	id := volume.ReaderID(fsID, copyKey, KeyOf(name))
	m.cfg.Logger.Info("read-only volume recorded", slog.String("volume", id), slog.String("name", name), slog.String("snapshot", snapshotID))
	return id, nil
}

func (m *Manager) readReader(ctx context.Context, fsID, name string) (*Reader, error) {
	e, err := m.cfg.Store.Get(ctx, readerKey(fsID, name))
	if errors.Is(err, journal.ErrNotFound) {
		return nil, fmt.Errorf("%w: read-only volume %q", ErrNotFound, name)
	}
	if err != nil {
		return nil, err
	}
	return decodeReader(e)
}

func decodeReader(e journal.Entry) (*Reader, error) {
	r := &Reader{}
	if err := json.Unmarshal(e.Value, r); err != nil {
		return nil, fmt.Errorf("snapshot: the record's read-only volume entry %s is damaged: %w", e.Key.Name, err)
	}
	fsID, _, ok := ParseID(r.Snapshot)
	if !ok || fsID != e.Key.FileSystem || !volume.ValidKey(e.Key.Name) || !volume.ValidKey(r.Copy) {
		return nil, fmt.Errorf("snapshot: the record's read-only volume entry %s is damaged: it names snapshot %q, copy %q", e.Key.Name, r.Snapshot, r.Copy)
	}
	r.entry, r.VolumeID = e, volume.ReaderID(e.Key.FileSystem, r.Copy, e.Key.Name)
	return r, nil
}

// RemoveReader removes the entry of the read-only volume id (a
// volume.ReaderPrefix ID): DeleteVolume's. Nothing else is removed: the
// data is the snapshot's.
func (m *Manager) RemoveReader(ctx context.Context, id volume.ID, reason string) error {
	unlock, err := m.locks.TryLock("reader/" + id.Reader)
	if err != nil {
		return err
	}
	defer unlock()
	key := journal.Key{Kind: KindReader, FileSystem: id.FileSystemID, Name: id.Reader}
	if err := m.forget(ctx, key); err != nil {
		return err
	}
	m.cfg.Logger.Info("read-only volume deleted", slog.String("volume", id.String()), slog.String("reason", reason))
	return nil
}

// readers lists the read-only volumes of snap.
func (m *Manager) readers(ctx context.Context, snap *Snapshot) ([]*Reader, error) {
	var out []*Reader
	err := m.cfg.Store.List(ctx, KindReader, snap.FileSystem, indexOf(snap.ID), func(es []journal.Entry) error {
		for _, e := range es {
			r, err := decodeReader(e)
			if err != nil {
				// Kept, and counted: a damaged entry may be a live volume's.
				m.cfg.Logger.Error("read-only volume entry damaged: its snapshot is kept", slog.String("entry", e.Key.Name), slog.Any("error", err))
				out = append(out, &Reader{Snapshot: snap.ID, entry: e})
				continue
			}
			if r.Snapshot == snap.ID {
				out = append(out, r)
			}
		}
		return nil
	})
	return out, err
}

// Readers returns every read-only volume of the record.
func (m *Manager) Readers(ctx context.Context) ([]*Reader, error) {
	var out []*Reader
	err := m.cfg.Store.List(ctx, KindReader, "", "", func(es []journal.Entry) error {
		for _, e := range es {
			r, err := decodeReader(e)
			if err != nil {
				m.cfg.Logger.Error("read-only volume entry damaged: left as it is", slog.String("entry", e.Key.Name), slog.Any("error", err))
				continue
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// CollectReaders removes the entries of read-only volumes given up: made
// for a claim that no longer exists (claimGone), named by no
// PersistentVolume (named), recorded longer than grace ago. The leak no
// driver prevents alone (a claim deleted while its CreateVolume ran, the
// provisioner restarted before it made a PV) leaves such an entry, which
// would keep its snapshot from being deleted. A volume without a recorded
// claim is never collected.
func (m *Manager) CollectReaders(ctx context.Context, named func(volumeID string) bool,
	claimGone func(ctx context.Context, namespace, name string) (bool, error), grace time.Duration) (int, error) {
	rs, err := m.Readers(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range rs {
		ns, claim, ok := cutClaim(r.Claim)
		if !ok || named(r.VolumeID) || m.cfg.Now().Sub(r.Created) < grace {
			continue
		}
		gone, err := claimGone(ctx, ns, claim)
		if err != nil {
			return n, err
		}
		if !gone {
			continue
		}
		id, err := volume.ParseID(r.VolumeID)
		if err != nil {
			return n, err
		}
		if err := m.RemoveReader(ctx, id, "its claim "+r.Claim+" is gone and no PersistentVolume names it"); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func cutClaim(c string) (namespace, name string, ok bool) {
	namespace, name, ok = strings.Cut(c, "/")
	return namespace, name, ok && namespace != "" && name != ""
}
