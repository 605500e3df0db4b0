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

// The effects of a delete, besides Answer, Lock and Log.
type (
	// Recall asks whether this process finished a delete of the access
	// point recently (Result.Yes): a repeat is answered from memory.
	Recall struct{ FileSystem, AccessPoint string }
	// LookUp is the access point ID names as Describe shows it
	// (Result.AP, or Result.Err: efs.ErrAccessPointNotFound). With root
	// removal the caller may take it from the listing it needs anyway,
	// which it keeps for RemoveRoot.
	LookUp struct{ ID volume.ID }
	// ReadRecord reads the volume entry of Key (Result.Record, or
	// Result.Err: journal.ErrNotFound). Hint: what this process last
	// knew of it may answer (journal.VolumeHint).
	ReadRecord struct {
		FileSystem, Key string
		Hint            bool
	}
	// ReadRecordOf reads the record naming the access point, by the
	// record's index (Result.Record, or journal.ErrNotFound).
	//
	// Hint: from what this process last read or wrote of that record
	// (journal.ByAccessPointHint), when it still names the access point;
	// the caller proves it before acting, as ReadRecord's.
	ReadRecordOf struct {
		FileSystem, AccessPoint string
		Hint                    bool
	}
	// Reachable checks that the file system is visible with the call's
	// credentials (Result.Err otherwise): not found proves nothing else.
	Reachable struct{ FileSystem string }
	// Forget drops what this process answered for the access point, so a
	// repeat of its create is not answered from memory. No result.
	Forget struct{ FileSystem, AccessPoint string }
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
	// RootNotOwned notes a directory kept because no CSI driver made its
	// access point (counted and logged). No result.
	RootNotOwned struct{ AP *efs.AccessPoint }
	// DeleteAccessPoint deletes it, before new work; not found is success
	// (Result.Err otherwise).
	DeleteAccessPoint struct{ FileSystem, AccessPoint string }
	// Finish removes the record and releases its id (Result.Err).
	Finish struct{ Record *journal.Record }
	// Remember notes the delete as finished, under the name locks Locks,
	// for Recall. No result.
	Remember struct {
		FileSystem, AccessPoint string
		Locks                   []string
	}
)

func (Recall) effect()            {}
func (LookUp) effect()            {}
func (ReadRecord) effect()        {}
func (ReadRecordOf) effect()      {}
func (Reachable) effect()         {}
func (Forget) effect()            {}
func (Mark) effect()              {}
func (RemoveRoot) effect()        {}
func (RootNotOwned) effect()      {}
func (DeleteAccessPoint) effect() {}
func (Finish) effect()            {}
func (Remember) effect()          {}

// DeleteConfig is what a delete needs of its controller.
type DeleteConfig struct {
	Cluster       string // --cluster-id: another cluster's access points are never deleted
	DeleteRootDir bool   // --delete-access-point-root-dir
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
	machine
	cfg   DeleteConfig
	raw   string
	id    volume.ID
	began time.Time
	ap    *efs.AccessPoint
	rec   *journal.Record
	prov  Provenance
}

// NewDelete starts a DeleteVolume of volumeID (its backend prefix, if any,
// removed) at now.
func NewDelete(cfg DeleteConfig, volumeID string, now time.Time) *Delete {
	d := &Delete{cfg: cfg, raw: volumeID, began: now}
	id, err := volume.ParseID(volumeID)
	switch {
	case err == nil && id.Dir:
		d.deleteDir(id)
	case err != nil || id.AccessPointID == "":
		// Not ours to delete: the CO may send anything, and a static volume
		// owns no access point (the upstream driver answers OK for both).
		d.answer(nil)
	default:
		d.id = id
		d.do(Recall{FileSystem: id.FileSystemID, AccessPoint: id.AccessPointID}, d.recalled)
	}
	return d
}

func (d *Delete) recalled(r Result) {
	if r.Yes {
		d.answer(nil) // a repeat: no request, no record write
		return
	}
	d.do(Lock{Keys: []string{APKey(d.id.AccessPointID)}}, func(r Result) {
		if !d.failed(r) {
			d.do(LookUp{ID: d.id}, d.lookedUp)
		}
	})
}

func (d *Delete) lookedUp(r Result) {
	if errors.Is(r.Err, efs.ErrAccessPointNotFound) {
		d.unseen()
		return
	}
	if d.failed(r) {
		return
	}
	ap := r.AP
	d.ap = ap
	if ap.FileSystemID != d.id.FileSystemID {
		// A crafted or mistyped ID: its file system has no such access
		// point, and the one of that ID on another file system is not this
		// volume's. Nothing is deleted.
		d.do(Log{Level: slog.LevelWarn, Msg: "volume not deleted: its access point is on another file system",
			Attrs: []slog.Attr{slog.String("volumeID", d.raw), slog.String("accessPoint", ap.ID), slog.String("fileSystem", ap.FileSystemID)}},
			func(Result) { d.answer(nil) })
		return
	}
	if other, ok := ownership.OtherCluster(ap, d.cfg.Cluster); ok {
		d.answer(fmt.Errorf("%w: access point %s was made by cluster %q, not this one (%q); it is not deleted here",
			ErrForeign, ap.ID, other, d.cfg.Cluster))
		return
	}
	d.recordOf(true, d.found)
}

// found takes the name locks of the access point's volume (its record's,
// or what its tags and token say) and marks the record.
func (d *Delete) found(rec *journal.Record) {
	d.prov = ProvenanceOf(d.ap, rec)
	d.do(Lock{Keys: d.prov.Locks}, func(r Result) {
		if d.failed(r) {
			return
		}
		d.do(Forget{FileSystem: d.ap.FileSystemID, AccessPoint: d.ap.ID}, func(Result) {
			if !d.prov.Recorded {
				d.removeRoot()
				return
			}
			d.mark(rec)
		})
	})
}

// mark marks rec deleting, before anything is deleted: from here on no
// create answers it. Marked at the version read before the name locks (a
// hint, maybe): a create that held them may have changed the record
// meanwhile, which fails the compare-and-swap and is read again.
func (d *Delete) mark(rec *journal.Record) {
	d.do(Mark{Record: rec, IfAgrees: d.ap}, func(r Result) {
		switch {
		case d.failed(r):
		case r.Record != nil:
			d.rec = r.Record
			d.removeRoot()
		default:
			// Changed since the first read, which may have been a hint
			// long stale: look the record up again, without hints. One
			// under other locks than those held is left to a retry.
			d.recordOf(false, d.markFound)
		}
	})
}

func (d *Delete) markFound(found *journal.Record) {
	if found == nil {
		d.marked(nil)
		return
	}
	if !isSubset(RecordLocks(found), d.prov.Locks) {
		d.answer(fmt.Errorf("%w: the record of access point %s changed while its delete took its locks", keylock.ErrBusy, d.ap.ID))
		return
	}
	d.do(Mark{Record: found, IfAgrees: d.ap}, func(r Result) {
		switch {
		case d.failed(r):
		case r.Record == nil:
			d.answer(fmt.Errorf("%w: the record of access point %s (volume %q) keeps changing", keylock.ErrBusy, d.ap.ID, found.Name))
		default:
			d.marked(r.Record)
		}
	})
}

// marked goes on with fresh, the record marked on a second read (nil: none
// agrees any more, deleted as unrecorded). The locks taken stay the ones
// held.
func (d *Delete) marked(fresh *journal.Record) {
	held := d.prov.Locks
	d.prov = ProvenanceOf(d.ap, fresh)
	d.prov.Locks = held
	d.rec = fresh
	d.removeRoot()
}

func (d *Delete) removeRoot() {
	switch {
	case !d.cfg.DeleteRootDir:
		d.deleteAccessPoint()
	case !d.prov.CSI:
		// Not a CSI volume's directory: whose data it holds is unknown.
		// The access point goes (as without root removal: a PV stuck in
		// FAILED_PRECONDITION helps nobody), the directory stays.
		d.do(RootNotOwned{AP: d.ap}, func(Result) { d.deleteAccessPoint() })
	default:
		since := d.began
		if d.rec != nil && !d.rec.DeletingSince.IsZero() && d.rec.DeletingSince.Before(since) {
			since = d.rec.DeletingSince // an earlier attempt's, before a restart too
		}
		d.do(RemoveRoot{AP: d.ap, Prov: d.prov, Since: since}, func(r Result) {
			if !d.failed(r) {
				d.deleteAccessPoint()
			}
		})
	}
}

// deleteAccessPoint runs after the record is marked deleting and the
// directory removed: the rest of an irreversible step.
func (d *Delete) deleteAccessPoint() {
	d.do(DeleteAccessPoint{FileSystem: d.ap.FileSystemID, AccessPoint: d.ap.ID}, func(r Result) {
		if d.failed(r) {
			return
		}
		d.do(Log{Level: slog.LevelInfo, Msg: "access point deleted",
			Attrs: []slog.Attr{slog.String("accessPoint", d.ap.ID), slog.String("reason", "DeleteVolume"), slog.Bool("recorded", d.rec != nil)}},
			func(Result) { d.finish(d.rec, d.prov.Locks) })
	})
}

// finish removes rec (if any), then remembers the delete as finished,
// still under the name locks.
func (d *Delete) finish(rec *journal.Record, locks []string) {
	remember := func() {
		d.do(Remember{FileSystem: d.id.FileSystemID, AccessPoint: d.id.AccessPointID, Locks: locks},
			func(Result) { d.answer(nil) })
	}
	if rec == nil {
		remember()
		return
	}
	d.do(Finish{Record: rec}, func(r Result) {
		if !d.failed(r) {
			remember()
		}
	})
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
func (d *Delete) unseen() {
	fsID, apID := d.id.FileSystemID, d.id.AccessPointID
	d.do(ReadRecordOf{FileSystem: fsID, AccessPoint: apID}, func(r Result) {
		if errors.Is(r.Err, journal.ErrNotFound) {
			d.do(Reachable{FileSystem: fsID}, func(r Result) { d.answer(r.Err) })
			return
		}
		if d.failed(r) {
			return
		}
		rec := r.Record
		locks := RecordLocks(rec)
		d.do(Reachable{FileSystem: fsID}, func(r Result) {
			if d.failed(r) {
				return
			}
			d.do(Lock{Keys: locks}, func(r Result) {
				if d.failed(r) {
					return
				}
				d.do(Forget{FileSystem: fsID, AccessPoint: apID}, func(Result) {
					d.do(Mark{Record: rec}, func(r Result) {
						if d.failed(r) {
							return
						}
						d.do(DeleteAccessPoint{FileSystem: fsID, AccessPoint: apID}, func(r Result) {
							if d.failed(r) {
								return
							}
							d.do(Log{Level: slog.LevelInfo, Msg: "access point deleted",
								Attrs: []slog.Attr{slog.String("accessPoint", apID), slog.String("reason", "DeleteVolume (not visible, recorded)")}},
								func(Result) { d.finish(rec, locks) })
						})
					})
				})
			})
		})
	})
}

// recordOf reads the record of the access point and passes it to k (nil if
// none agrees, ownership.Agrees). It is read by its key: the access
// point's client token for volumes under a name token (upstream's, which a
// create adopted); for a GID token, the name token of its volume-name tag
// (a hint, which the record must prove by naming it). A GID token whose
// tag leads to no record, or a 64-hex token (upstream's reuseAccessPoint
// hash) is looked up by the record's index of access points.
//
// With hints, the key's record may be read from what this process last
// knew of it: the caller then takes only its locks from it and reads it
// again under them before acting (Mark's compare-and-swap).
func (d *Delete) recordOf(hints bool, k func(*journal.Record)) {
	ap := d.ap
	byIndex := func() {
		if !volume.IsGIDToken(ap.ClientToken) && !volume.IsClaimNameHash(ap.ClientToken) {
			k(nil)
			return
		}
		d.do(ReadRecordOf{FileSystem: ap.FileSystemID, AccessPoint: ap.ID, Hint: hints}, func(r Result) { d.agreeing(r, k, func() { k(nil) }) })
	}
	key := VolumeKeyOf(ap)
	if key == "" || volume.IsGIDToken(key) {
		byIndex()
		return
	}
	read := ReadRecord{FileSystem: ap.FileSystemID, Key: key, Hint: hints}
	d.do(read, func(r Result) {
		if hints && r.Err == nil && !ownership.Agrees(r.Record, ap) {
			// Only a hint that agrees is taken: one that does not may be
			// stale (the record adopted this access point since).
			read.Hint = false
			d.do(read, func(r Result) { d.agreeing(r, k, byIndex) })
			return
		}
		d.agreeing(r, k, byIndex)
	})
}

// agreeing passes r's record to k if it agrees with the access point,
// answers an error other than not found, else runs otherwise.
func (d *Delete) agreeing(r Result, k func(*journal.Record), otherwise func()) {
	switch {
	case r.Err == nil && ownership.Agrees(r.Record, d.ap):
		k(r.Record)
	case r.Err != nil && !errors.Is(r.Err, journal.ErrNotFound):
		d.answer(r.Err)
	default:
		otherwise()
	}
}
