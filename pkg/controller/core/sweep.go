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

// The sweep of access points no record names (docs/leaks.md, "Access
// points no record names"; its steps in docs/design.md), one access point
// at a time, for the orphan collector. A request can reach EFS after
// everything that could name what it makes is gone: a duplicate create
// delayed past its volume's whole delete on another replica makes an access
// point under the GID token that delete freed. Its caller deletes it once
// its record write fails; one killed before that left it to this sweep. An
// access point is one of them only if all of this holds:
//   - it carries this cluster's tags: efs.csi.aws.com/cluster=true, this
//     cluster's ID (never empty here), its volume name and a record life
//     (only a create of a record writes one), under a GID token for the
//     id it carries on this file system (Sweepable);
//   - its record life is older than the grace, so its maker has long had
//     its chance to record or delete it;
//   - no PersistentVolume names it (Named);
//   - its volume's record does not own it (Owns): absent, of another
//     life, or naming another access point or token;
//   - the sweep holds its id in the record (HoldForSweep), which no
//     volume does: every create holds its id before it sends the GID
//     token, so from then on none can adopt the access point; and the
//     record, read again under that hold and the volume's name locks,
//     still does not own it.

// SweepConfig is what every sweep of one controller shares.
type SweepConfig struct {
	// Cluster is this cluster's ID; a sweep without one deletes nothing
	// (nothing proves an access point this cluster's).
	Cluster string
	// Grace is how old an access point's record life must be.
	Grace time.Duration
}

// Named asks whether a PersistentVolume names AccessPoint (Result.Yes).
type Named struct{ AccessPoint string }

// ReleaseOrphanID releases ID, held for the volume of token Holder, if
// that volume's record is gone, or is being deleted and holds another id
// (journal.ReleaseOrphanID; Result.Yes: released).
type ReleaseOrphanID struct {
	FileSystem string
	ID         int64
	Holder     string
}

func (Named) effect()           {}
func (ReleaseOrphanID) effect() {}

// NewFreeID releases id on fsID, which the id table holds for the volume
// of token holder, if that volume's record is gone, or is being deleted
// and holds another id: a call cut short past its cleanup's budget left
// it held for nobody, and no create of the volume can be moving to it
// (every create writes its record before it holds an id, and refuses a
// record being deleted). A record being deleted keeps its own id until its
// Finish (journal.ReleaseOrphanID).
func NewFreeID(fsID string, id int64, holder string) *Sweep {
	s := &Sweep{}
	s.do(ReleaseOrphanID{FileSystem: fsID, ID: id, Holder: holder}, func(r Result) {
		switch {
		case s.failed(r):
			return
		case !r.Yes:
			s.answer(nil)
			return
		}
		s.do(Log{Level: slog.LevelInfo, Msg: "id released", Attrs: []slog.Attr{slog.String("fileSystem", fsID),
			slog.Int64("id", id), slog.String("holder", holder),
			slog.String("reason", "held for a volume whose record is gone, or is being deleted and holds another id")}},
			func(Result) { s.answer(nil) })
	})
	return s
}

// Sweep is the sweep of one access point, or of one id (NewFreeID). Its
// answer carries the access point when it deleted one.
type Sweep struct{ machine }

// NewSweep sweeps ap, listed on fsID at now.
func NewSweep(cfg SweepConfig, fsID string, ap *efs.AccessPoint, now time.Time) *Sweep {
	s := &Sweep{}
	id, ok := Sweepable(ap, fsID, cfg, now)
	if !ok {
		s.answer(nil)
		return s
	}
	s.do(Named{AccessPoint: ap.ID}, func(r Result) {
		if r.Yes {
			s.answer(nil)
			return
		}
		s.do(ReadRecord{FileSystem: ap.FileSystemID, Key: VolumeKeyOf(ap)}, func(r Result) {
			rec, err := owner(r)
			switch {
			case err != nil:
				s.answer(err)
			case Owns(rec, ap):
				s.answer(nil)
			default:
				s.hold(ap, id, true)
			}
		})
	})
	return s
}

// NewResumeSweep resumes the sweep of apID, whose hold of id on fsID a
// killed sweep left (journal.ToSweep). A hold that names an access
// point the sweep would not take is released: anyone who may write the
// record could forge one, and it proves nothing.
func NewResumeSweep(cfg SweepConfig, fsID string, id int64, apID string) *Sweep {
	s := &Sweep{}
	release := func() {
		s.do(ReleaseSweep{FileSystem: fsID, ID: id, AccessPoint: apID}, func(r Result) { s.answer(r.Err) })
	}
	s.do(Describe{AccessPoint: apID}, func(r Result) {
		switch {
		case errors.Is(r.Err, efs.ErrAccessPointNotFound):
			release()
		case r.Err != nil:
			s.answer(r.Err)
		default:
			if got, ok := Sweepable(r.AP, fsID, cfg, r.Now); !ok || got != id {
				release()
				return
			}
			s.held(r.AP, id)
		}
	})
	return s
}

// hold holds id for ap's deletion. An id held for a volume is released
// first if its record holds another id, is being deleted or is gone (a
// create killed between its send and its cleanup held it for nobody),
// then held again (retry); held by a volume still, ap is left: a create of
// that volume may adopt it.
func (s *Sweep) hold(ap *efs.AccessPoint, id int64, retry bool) {
	s.do(HoldForSweep{FileSystem: ap.FileSystemID, ID: id, AccessPoint: ap.ID}, func(r Result) {
		switch {
		case errors.Is(r.Err, journal.ErrIDTaken) && retry:
			s.do(ReleaseMovedID{FileSystem: ap.FileSystemID, ID: id, Holder: r.Token}, func(r Result) {
				if !s.failed(r) {
					s.hold(ap, id, false)
				}
			})
		case errors.Is(r.Err, journal.ErrIDTaken):
			s.answer(nil)
		case r.Err != nil:
			s.answer(r.Err)
		default:
			s.held(ap, id)
		}
	})
}

// held goes on once the sweep holds id for ap: the record read again
// under the hold and the volume's name locks decides; the hold is
// released either way once done. A create or delete of the volume in this
// process holds its locks: the hold stays, for the next round.
func (s *Sweep) held(ap *efs.AccessPoint, id int64) {
	release := func(deleted *efs.AccessPoint) {
		s.do(ReleaseSweep{FileSystem: ap.FileSystemID, ID: id, AccessPoint: ap.ID}, func(r Result) {
			s.finish(Answer{AP: deleted, Err: r.Err})
		})
	}
	keys := RecordLocks(&journal.Record{Volume: journal.Volume{Name: ap.Tags[ownership.TagVolumeName], Token: VolumeKeyOf(ap)}})
	s.do(Lock{Keys: keys}, func(r Result) {
		switch {
		case errors.Is(r.Err, keylock.ErrBusy):
			s.answer(nil)
			return
		case s.failed(r):
			return
		}
		s.do(ReadRecord{FileSystem: ap.FileSystemID, Key: VolumeKeyOf(ap)}, func(r Result) {
			rec, err := owner(r)
			if err != nil {
				s.answer(err)
				return
			}
			if Owns(rec, ap) {
				release(nil)
				return
			}
			s.do(Named{AccessPoint: ap.ID}, func(r Result) {
				if r.Yes {
					release(nil)
					return
				}
				s.do(DeleteAccessPoint{FileSystem: ap.FileSystemID, AccessPoint: ap.ID}, func(r Result) {
					if r.Err != nil {
						s.answer(fmt.Errorf("sweep %s: %w", ap.ID, r.Err))
						return
					}
					s.do(Log{Level: slog.LevelInfo, Msg: "access point deleted", Attrs: []slog.Attr{
						slog.String("accessPoint", ap.ID), slog.String("fileSystem", ap.FileSystemID),
						slog.String("name", ap.Tags[ownership.TagVolumeName]), slog.Int64("id", id),
						slog.String("reason", "unrecorded: made for a record that no longer names it (a create's request that reached EFS after its volume's delete), never answered"),
					}}, func(Result) { release(ap) })
				})
			})
		})
	})
}

// owner is the record a ReadRecord found: nil if none.
func owner(r Result) (*journal.Record, error) {
	if errors.Is(r.Err, journal.ErrNotFound) {
		return nil, nil
	}
	return r.Record, r.Err
}

// Sweepable reports whether ap carries cfg's cluster's tags for a record
// made over cfg.Grace before now, under the GID token of the id it
// carries on fsID, and returns that id.
func Sweepable(ap *efs.AccessPoint, fsID string, cfg SweepConfig, now time.Time) (int64, bool) {
	t := ap.Tags
	life, err := time.Parse(time.RFC3339Nano, t[ownership.TagRecordLife])
	if err != nil || cfg.Cluster == "" || t[ownership.TagCluster] != "true" || t[ownership.TagClusterID] != cfg.Cluster ||
		t[ownership.TagVolumeName] == "" || ap.FileSystemID != fsID || !Live(ap) || now.Sub(life) < cfg.Grace {
		return 0, false
	}
	id := PosixGID(ap)
	if id < 0 || volume.GIDToken(fsID, id) != ap.ClientToken {
		// The token binds the id only if it is the id's own; a class
		// with a fixed GID allocates the UID.
		uid, _ := PosixIDs(ap)
		if uid < 0 || volume.GIDToken(fsID, uid) != ap.ClientToken {
			return 0, false
		}
		id = uid
	}
	return id, true
}

// Owns reports whether rec is the record ap was made for, and names it,
// or is still to learn whether its create made it (no access point
// recorded, sending ap's token): the record's own delete or the
// collector's listing deals with it.
func Owns(rec *journal.Record, ap *efs.AccessPoint) bool {
	if rec == nil || ownership.RecordLife(rec) != ap.Tags[ownership.TagRecordLife] {
		return false
	}
	return rec.AccessPoint == ap.ID || rec.AccessPoint == "" && rec.SentToken() == ap.ClientToken
}

// Live reports whether ap is neither being deleted nor deleted: one being
// deleted gives its users no access any more.
func Live(ap *efs.AccessPoint) bool {
	return ap.LifeCycleState != "deleting" && ap.LifeCycleState != "deleted"
}
