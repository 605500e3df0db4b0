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
//   - no PersistentVolume names it (SweepConfig.Named);
//   - its volume's record does not own it (Owns): absent, of another
//     life, or naming another access point or token;
//   - the sweep holds its id in the record (HoldForSweep), which no
//     volume does: every create holds its id before it sends the GID
//     token, so from then on none can adopt the access point; and the
//     record, read again under that hold and the volume's name locks,
//     still does not own it.

// SweepConfig is what every sweep of one round shares.
type SweepConfig struct {
	// Cluster is this cluster's ID; a sweep without one deletes nothing
	// (nothing proves an access point this cluster's).
	Cluster string
	// Grace is how old an access point's record life must be.
	Grace time.Duration
	// Named reports whether a PersistentVolume names the access point
	// apID: answered from the caller's snapshot of PersistentVolumes (the
	// collector's listing for the round, and its watch since), never by a
	// request, since the machine asks it inside Next and Step, which must
	// not block. Asked again under the sweep's hold: a PersistentVolume
	// the watch saw meanwhile counts. NewSweep and NewResumeSweep need it.
	Named func(apID string) bool
	// Logger is where the sweep logs what it deleted or released (nil:
	// nowhere).
	Logger *slog.Logger
}

// ReleaseOrphanID releases ID, held for the volume of token Holder, if
// that volume's record is gone, or is being deleted and holds another id
// (journal.ReleaseOrphanID; Result.Yes: released).
type ReleaseOrphanID struct {
	FileSystem string
	ID         int64
	Holder     string
}

func (ReleaseOrphanID) effect() {}

// NewFreeID releases id on fsID, which the id table holds for the volume
// of token holder, if that volume's record is gone, or is being deleted
// and holds another id: a call cut short past its cleanup's budget left
// it held for nobody, and no create of the volume can be moving to it
// (every create writes its record before it holds an id, and refuses a
// record being deleted). A record being deleted keeps its own id until its
// Finish (journal.ReleaseOrphanID). Of cfg it uses only the logger.
func NewFreeID(cfg SweepConfig, fsID string, id int64, holder string) *Sweep {
	s := &Sweep{}
	s.run(cfg.Logger, func() Effect { return s.freeID(fsID, id, holder) })
	return s
}

// freeID is NewFreeID's protocol.
func (s *Sweep) freeID(fsID string, id int64, holder string) Answer {
	r := s.do(ReleaseOrphanID{FileSystem: fsID, ID: id, Holder: holder})
	if r.Err != nil || !r.Yes {
		return Answer{Err: r.Err}
	}
	s.logAttrs(slog.LevelInfo, "id released", slog.String("fileSystem", fsID),
		slog.Int64("id", id), slog.String("holder", holder),
		slog.String("reason", "held for a volume whose record is gone, or is being deleted and holds another id"))
	return Answer{}
}

// Sweep is the sweep of one access point, or of one id (NewFreeID). Its
// answer carries the access point when it deleted one.
//
// Each step below is a method that returns the sweep's answer: the
// protocol reads top to bottom from sweep, resume and freeID.
type Sweep struct {
	proc
	named func(apID string) bool // SweepConfig.Named
}

// NewSweep sweeps ap, listed on fsID at now.
func NewSweep(cfg SweepConfig, fsID string, ap *efs.AccessPoint, now time.Time) *Sweep {
	s := &Sweep{named: cfg.Named}
	s.run(cfg.Logger, func() Effect { return s.sweep(cfg, fsID, ap, now) })
	return s
}

// sweep is NewSweep's protocol: ap is left if it is not Sweepable, a
// PersistentVolume names it or its record owns it; else the sweep holds
// its id.
func (s *Sweep) sweep(cfg SweepConfig, fsID string, ap *efs.AccessPoint, now time.Time) Answer {
	id, ok := Sweepable(ap, fsID, cfg, now)
	if !ok {
		return Answer{}
	}
	if s.named(ap.ID) {
		return Answer{}
	}
	rec, err := owner(s.do(ReadRecord{FileSystem: ap.FileSystemID, Key: VolumeKeyOf(ap)}))
	switch {
	case err != nil:
		return Answer{Err: err}
	case Owns(rec, ap):
		return Answer{}
	}
	return s.hold(ap, id)
}

// NewResumeSweep resumes the sweep of apID, whose hold of id on fsID a
// killed sweep left (journal.ToSweep). A hold that names an access
// point the sweep would not take is released: anyone who may write the
// record could forge one, and it proves nothing.
func NewResumeSweep(cfg SweepConfig, fsID string, id int64, apID string) *Sweep {
	s := &Sweep{named: cfg.Named}
	s.run(cfg.Logger, func() Effect { return s.resume(cfg, fsID, id, apID) })
	return s
}

// resume is NewResumeSweep's protocol.
func (s *Sweep) resume(cfg SweepConfig, fsID string, id int64, apID string) Answer {
	r := s.do(Describe{AccessPoint: apID})
	switch {
	case errors.Is(r.Err, efs.ErrAccessPointNotFound):
		// Gone: the hold is released.
	case r.Err != nil:
		return Answer{Err: r.Err}
	default:
		if got, ok := Sweepable(r.AP, fsID, cfg, r.Now); ok && got == id {
			return s.held(r.AP, id)
		}
	}
	return s.release(fsID, id, apID, nil)
}

// hold holds id for ap's deletion. An id held for a volume is released
// first if its record holds another id, is being deleted or is gone (a
// create killed between its send and its cleanup held it for nobody),
// then held again, once; held by a volume still, ap is left: a create of
// that volume may adopt it.
func (s *Sweep) hold(ap *efs.AccessPoint, id int64) Answer {
	take := HoldForSweep{FileSystem: ap.FileSystemID, ID: id, AccessPoint: ap.ID}
	r := s.do(take)
	if errors.Is(r.Err, journal.ErrIDTaken) {
		if moved := s.do(ReleaseMovedID{FileSystem: ap.FileSystemID, ID: id, Holder: r.Token}); moved.Err != nil {
			return Answer{Err: moved.Err}
		}
		r = s.do(take)
	}
	switch {
	case errors.Is(r.Err, journal.ErrIDTaken):
		return Answer{}
	case r.Err != nil:
		return Answer{Err: r.Err}
	}
	return s.held(ap, id)
}

// held goes on once the sweep holds id for ap: the record read again
// under the hold and the volume's name locks decides; the hold is
// released either way once done. A create or delete of the volume in this
// process holds its locks: the hold stays, for the next round.
func (s *Sweep) held(ap *efs.AccessPoint, id int64) Answer {
	keys := RecordLocks(&journal.Record{Volume: journal.Volume{Name: ap.Tags[ownership.TagVolumeName], Token: VolumeKeyOf(ap)}})
	r := s.do(Lock{Keys: keys})
	switch {
	case errors.Is(r.Err, keylock.ErrBusy):
		return Answer{}
	case r.Err != nil:
		return Answer{Err: r.Err}
	}
	rec, err := owner(s.do(ReadRecord{FileSystem: ap.FileSystemID, Key: VolumeKeyOf(ap)}))
	if err != nil {
		return Answer{Err: err}
	}
	if Owns(rec, ap) {
		return s.release(ap.FileSystemID, id, ap.ID, nil)
	}
	if s.named(ap.ID) {
		return s.release(ap.FileSystemID, id, ap.ID, nil)
	}
	r = s.do(DeleteAccessPoint{FileSystem: ap.FileSystemID, AccessPoint: ap.ID})
	if r.Err != nil {
		return Answer{Err: fmt.Errorf("sweep %s: %w", ap.ID, r.Err)}
	}
	s.logAttrs(slog.LevelInfo, deletedMessage(r.Yes),
		slog.String("accessPoint", ap.ID), slog.String("fileSystem", ap.FileSystemID),
		slog.String("name", ap.Tags[ownership.TagVolumeName]), slog.Int64("id", id),
		slog.String("reason", "unrecorded: made for a record that no longer names it (a create's request that reached EFS after its volume's delete), never answered"))
	return s.release(ap.FileSystemID, id, ap.ID, ap)
}

// release releases the sweep's hold of id on fsID for apID, and answers
// deleted (nil: nothing deleted).
func (s *Sweep) release(fsID string, id int64, apID string, deleted *efs.AccessPoint) Answer {
	r := s.do(ReleaseSweep{FileSystem: fsID, ID: id, AccessPoint: apID})
	return Answer{AP: deleted, Err: r.Err}
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
