package core

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// ErrForeign: the access point is another cluster's.
var ErrForeign = errors.New("access point of another cluster")

// The effects of a delete, besides Answer and Lock.
type (
	// LookUp is the access point ID names as Describe shows it
	// (Result.AP, or Result.Err: efs.ErrAccessPointNotFound). With root
	// removal the caller may take it from the listing it needs anyway,
	// which it keeps for RemoveRoot; without, from its own
	// CreateAccessPoint's answer. Either may show one deleted or retagged
	// since, as a Describe that raced that change does.
	LookUp struct{ ID volume.ID }
	// ReadRecord reads a volume's record (Result.Record, or Result.Err:
	// journal.ErrNotFound): by its volume entry's Key, or, with
	// AccessPoint set, the record naming that access point, by the
	// record's index.
	//
	// Hint: what this process last read or wrote of it may answer
	// (journal.VolumeHint, journal.ByAccessPointHint: only while it still
	// names the access point); the caller proves it before acting.
	ReadRecord struct {
		FileSystem, Key string
		AccessPoint     string
		Hint            bool
	}
	// Reachable checks that the file system is visible with the call's
	// credentials (Result.Err otherwise): not found proves nothing else.
	Reachable struct{ FileSystem string }
	// Mark marks Record deleting. With IfAgrees, a compare-and-swap at
	// the version read while the record still names it, or with IfOrphan
	// while it is still the orphan the collector judged (OrphanChange)
	// (journal.MarkDeletingIf): Result.Record is the marked record, nil if
	// it changed; else unconditional (journal.MarkDeleting, Result.Err
	// only).
	Mark struct {
		Record   *journal.Record
		IfAgrees *efs.AccessPoint
		IfOrphan *journal.Record
	}
	// RemoveRoot removes the access point's root directory unless another
	// access point reaches it, checked against a listing that began at
	// least the listing lag after Since (Result.Err: kept for a retry).
	// The caller counts the access point as being deleted until the call
	// ends.
	RemoveRoot struct {
		AP    *efs.AccessPoint
		Prov  Provenance
		Since time.Time
	}
	// DeleteAccessPoint deletes it, before new work; not found is success,
	// with Result.Yes (Result.Err otherwise).
	DeleteAccessPoint struct{ FileSystem, AccessPoint string }
	// Finish removes the record and releases its id (Result.Err).
	Finish struct{ Record *journal.Record }
)

func (LookUp) effect()            {}
func (ReadRecord) effect()        {}
func (Reachable) effect()         {}
func (Mark) effect()              {}
func (RemoveRoot) effect()        {}
func (DeleteAccessPoint) effect() {}
func (Finish) effect()            {}

// DeleteConfig is what a delete needs of its controller.
type DeleteConfig struct {
	Cluster       string // --cluster-id: another cluster's access points are never deleted
	DeleteRootDir bool   // --delete-access-point-root-dir
	// Logger is where the delete logs what it deleted or kept (nil:
	// nowhere).
	Logger *slog.Logger
}

// Delete is one DeleteVolume call (docs/design.md, "Delete"):
//  1. Parse; an unparsable ID or a static volume (no access point) is done;
//     a delete this process finished recently is answered from memory.
//  2. Lock the access point ID and look it up. It must be on the ID's file
//     system and not another cluster's; its record (by file system and
//     client token) says whose it is, and its name and token are locked: a
//     create of the same volume in flight makes this call ABORTED instead
//     of racing it.
//  3. The record is marked deleting before anything is deleted: from then
//     on no create answers the access point.
//  4. With root removal, the root directory goes first, unless another
//     access point (listed, or recorded) reaches it or no CSI driver made
//     the access point; if removal fails the access point stays, so a
//     retry can finish the job.
//  5. Delete the access point; "not found" means an earlier attempt did.
//     Then, and only then, the record and its id are released.
type Delete struct {
	proc
	cfg   DeleteConfig
	mem   Memory // the file system's of the ID, if it parses
	raw   string
	id    volume.ID
	began time.Time
	ap    *efs.AccessPoint
	rec   *journal.Record
	prov  Provenance
}

// NewDelete starts a DeleteVolume of volumeID (its backend prefix, if any,
// removed) at now.
func NewDelete(cfg DeleteConfig, volumeID string, mem Memory, now time.Time) *Delete {
	d := &Delete{cfg: cfg, mem: mem, raw: volumeID, began: now}
	d.now = now
	d.run(cfg.Logger, func() Effect { return Answer{Err: d.delete()} })
	return d
}

func (d *Delete) delete() error {
	id, err := volume.ParseID(d.raw)
	switch {
	case err == nil && id.Dir:
		return d.deleteDir(id)
	case err != nil || id.AccessPointID == "":
		// Not ours to delete: the CO may send anything, and a static volume
		// owns no access point (the upstream driver answers OK for both).
		return nil
	}
	d.id = id
	if d.mem.DeleteFinished(id.AccessPointID, d.now) {
		return nil // a repeat: no request, no record write
	}
	if r := d.do(Lock{Keys: []string{APKey(id.AccessPointID)}}); r.Err != nil {
		return r.Err
	}
	r := d.do(LookUp{ID: id})
	switch {
	case errors.Is(r.Err, efs.ErrAccessPointNotFound):
		return d.unseen()
	case r.Err != nil:
		return r.Err
	}
	ap := r.AP
	d.ap = ap
	if ap.FileSystemID != id.FileSystemID {
		// A crafted or mistyped ID: its file system has no such access
		// point, and the one of that ID on another file system is not this
		// volume's. Nothing is deleted.
		d.logAttrs(slog.LevelWarn, "volume not deleted: its access point is on another file system",
			slog.String("volumeID", d.raw), slog.String("accessPoint", ap.ID), slog.String("fileSystem", ap.FileSystemID))
		return nil
	}
	if other, ok := ownership.OtherCluster(ap, d.cfg.Cluster); ok {
		return fmt.Errorf("%w: access point %s was made by cluster %q, not this one (%q); it is not deleted here",
			ErrForeign, ap.ID, other, d.cfg.Cluster)
	}
	rec, err := d.recordOf(true)
	if err != nil {
		return err
	}
	// The name locks of the access point's volume (its record's, or what
	// its tags and token say), then the record marked.
	d.prov = ProvenanceOf(ap, rec)
	if r := d.do(Lock{Keys: d.prov.Locks}); r.Err != nil {
		return r.Err
	}
	d.mem.DropAnswer(ap.ID) // no repeat of its create is answered from memory
	if d.prov.Recorded {
		if err := d.mark(rec); err != nil {
			return err
		}
	}
	if err := d.removeRoot(); err != nil {
		return err
	}
	// After the record is marked deleting and the directory removed: the
	// rest of an irreversible step.
	r = d.do(DeleteAccessPoint{FileSystem: ap.FileSystemID, AccessPoint: ap.ID})
	if r.Err != nil {
		return r.Err
	}
	d.logAttrs(slog.LevelInfo, deletedMessage(r.Yes),
		slog.String("accessPoint", ap.ID), slog.String("reason", "DeleteVolume"), slog.Bool("recorded", d.rec != nil))
	return d.finish(d.rec, d.prov.Locks)
}

// mark marks rec deleting, before anything is deleted: from here on no
// create answers it. Marked at the version read before the name locks (a
// hint, maybe): a create that held them may have changed the record
// meanwhile, which fails the compare-and-swap and is read again, without
// hints (one under other locks than those held is left to a retry). A
// record no longer agreeing is deleted as unrecorded, under the locks held.
func (d *Delete) mark(rec *journal.Record) error {
	r := d.do(Mark{Record: rec, IfAgrees: d.ap})
	switch {
	case r.Err != nil:
		return r.Err
	case r.Record != nil:
		d.rec = r.Record
		return nil
	}
	found, err := d.recordOf(false)
	switch {
	case err != nil:
		return err
	case found == nil:
	case !isSubset(RecordLocks(found), d.prov.Locks):
		return fmt.Errorf("%w: the record of access point %s changed while its delete took its locks", keylock.ErrBusy, d.ap.ID)
	default:
		r := d.do(Mark{Record: found, IfAgrees: d.ap})
		switch {
		case r.Err != nil:
			return r.Err
		case r.Record == nil:
			return fmt.Errorf("%w: the record of access point %s (volume %q) keeps changing", keylock.ErrBusy, d.ap.ID, found.Name)
		}
		found = r.Record
	}
	held := d.prov.Locks
	d.prov = ProvenanceOf(d.ap, found)
	d.prov.Locks = held
	d.rec = found
	return nil
}

// removeRoot removes the access point's root directory with root removal
// on.
func (d *Delete) removeRoot() error {
	switch {
	case !d.cfg.DeleteRootDir:
		return nil
	case !d.prov.CSI:
		// Not a CSI volume's directory: whose data it holds is unknown.
		// The access point goes (as without root removal: a PV stuck in
		// FAILED_PRECONDITION helps nobody), the directory stays.
		d.mem.RootNotOwned()
		d.logAttrs(slog.LevelWarn, "root directory kept: the access point was not made by a CSI driver",
			slog.String("accessPoint", d.ap.ID), slog.String("path", d.ap.Path))
		return nil
	}
	since := d.began
	if d.rec != nil && !d.rec.DeletingSince.IsZero() && d.rec.DeletingSince.Before(since) {
		since = d.rec.DeletingSince // an earlier attempt's, before a restart too
	}
	return d.do(RemoveRoot{AP: d.ap, Prov: d.prov, Since: since}).Err
}

// finish removes rec (if any), then remembers the delete as finished,
// still under the name locks.
func (d *Delete) finish(rec *journal.Record, locks []string) error {
	if rec != nil {
		if r := d.do(Finish{Record: rec}); r.Err != nil {
			return r.Err
		}
	}
	d.mem.FinishDelete(d.id.AccessPointID, locks, d.now)
	return nil
}

// unseen finishes a delete whose access point Describe does not show:
// deleted by an earlier attempt whose answer was lost (its record then may
// remain), or so fresh that Describe lags. Only the record can say that
// the ID's access point is on the ID's file system, so only a recorded one
// is deleted; an unrecorded one that is not visible is gone as far as this
// controller can prove, as upstream answers. That answer is not remembered:
// without a record, no name is known whose create could make the ID answer
// again, so none could drop it. Not found with these credentials proves
// nothing if they cannot see the file system (a volume of another account
// deleted without its class's secret): the record then stays.
func (d *Delete) unseen() error {
	fsID, apID := d.id.FileSystemID, d.id.AccessPointID
	r := d.do(ReadRecord{FileSystem: fsID, AccessPoint: apID})
	switch {
	case errors.Is(r.Err, journal.ErrNotFound):
		return d.do(Reachable{FileSystem: fsID}).Err
	case r.Err != nil:
		return r.Err
	}
	rec := r.Record
	locks := RecordLocks(rec)
	for _, e := range []Effect{Reachable{FileSystem: fsID}, Lock{Keys: locks}} {
		if r := d.do(e); r.Err != nil {
			return r.Err
		}
	}
	d.mem.DropAnswer(apID)
	if r := d.do(Mark{Record: rec}); r.Err != nil {
		return r.Err
	}
	r = d.do(DeleteAccessPoint{FileSystem: fsID, AccessPoint: apID})
	if r.Err != nil {
		return r.Err
	}
	d.logAttrs(slog.LevelInfo, deletedMessage(r.Yes),
		slog.String("accessPoint", apID), slog.String("reason", "DeleteVolume (not visible, recorded)"))
	return d.finish(rec, locks)
}

// recordOf reads the record of the access point (nil if none agrees,
// ownership.Agrees). It is read by its key: the access point's client
// token for volumes under a name token (upstream's, which a create
// adopted); for a GID token, the name token of its volume-name tag (a
// hint, which the record must prove by naming it). A GID token whose tag
// leads to no record, or a 64-hex token (upstream's reuseAccessPoint hash)
// is looked up by the record's index of access points.
//
// With hints, the key's record may be read from what this process last
// knew of it: the caller then takes only its locks from it and reads it
// again under them before acting (Mark's compare-and-swap).
func (d *Delete) recordOf(hints bool) (*journal.Record, error) {
	ap := d.ap
	if key := VolumeKeyOf(ap); key != "" && !volume.IsGIDToken(key) {
		read := ReadRecord{FileSystem: ap.FileSystemID, Key: key, Hint: hints}
		r := d.do(read)
		if hints && r.Err == nil && !ownership.Agrees(r.Record, ap) {
			// Only a hint that agrees is taken: one that does not may be
			// stale (the record adopted this access point since).
			read.Hint = false
			r = d.do(read)
		}
		if rec, done, err := d.agreeing(r); done {
			return rec, err
		}
	}
	if !volume.IsGIDToken(ap.ClientToken) && !volume.IsClaimNameHash(ap.ClientToken) {
		return nil, nil
	}
	rec, _, err := d.agreeing(d.do(ReadRecord{FileSystem: ap.FileSystemID, AccessPoint: ap.ID, Hint: hints}))
	return rec, err
}

// agreeing is r's record if it agrees with the access point, or r's error
// other than not found (done); else nothing (not done).
func (d *Delete) agreeing(r Result) (rec *journal.Record, done bool, err error) {
	switch {
	case r.Err == nil && ownership.Agrees(r.Record, d.ap):
		return r.Record, true, nil
	case r.Err != nil && !errors.Is(r.Err, journal.ErrNotFound):
		return nil, true, r.Err
	}
	return nil, false, nil
}

// deletedMessage is the log line of a DeleteAccessPoint that succeeded:
// gone says EFS no longer had the access point (deleted by another call,
// a replica or by hand), so this call deleted nothing.
func deletedMessage(gone bool) string {
	if gone {
		return "access point already gone"
	}
	return "access point deleted"
}
