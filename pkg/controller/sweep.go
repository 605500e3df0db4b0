package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// SweepUnrecorded deletes the access points of fsID that this cluster's
// creates made for a record and that no record names (docs/design.md,
// "Access points no record names"), for the orphan collector. A request
// can reach EFS after everything that could name what it makes is gone: a
// duplicate create delayed past its volume's whole delete on another
// replica makes an access point under the GID token that delete freed. Its
// caller deletes it once its record write fails; one killed before that
// left it to this sweep. Each access point listed is one of them only if
// all of this holds:
//   - it carries this cluster's tags: efs.csi.aws.com/cluster=true, this
//     cluster's ID (never empty here), its volume name and a record life
//     (only a create of a record writes one), under a GID token for the
//     id it carries on this file system;
//   - its record life is older than grace, so its maker has long had its
//     chance to record or delete it;
//   - no PersistentVolume names it (named);
//   - its volume's record does not own it (owns): absent, of another
//     life, or naming another access point or token;
//   - this sweep holds its id in the record (journal.HoldForSweep), which
//     no volume does: every create holds its id before it sends the GID
//     token, so from then on none can adopt the access point; and the
//     record, read again under that hold, still does not own it.
//
// Only the controller's own credentials are used, and only with a cluster
// ID and a record that is the cluster's one (Leases, ConfigMaps: never a
// file record per host, where another host's record may own it). It
// returns how many access points it deleted.
func (s *Service) SweepUnrecorded(ctx context.Context, fsID string, named func(apID string) bool, grace time.Duration) (int, error) {
	if s.cluster == "" {
		return 0, nil // nothing proves an access point this cluster's
	}
	n := 0
	var errs []error
	// A killed sweep's holds first: each is an access point it was about
	// to delete, and an id held for nobody until resumed.
	holds, err := s.journal.SweepHolds(ctx, fsID)
	if err != nil {
		return 0, err
	}
	for id, apID := range holds {
		ap, err := s.efs.DescribeAccessPoint(ctx, apID)
		switch {
		case errors.Is(err, efs.ErrAccessPointNotFound):
			errs = append(errs, s.journal.ReleaseSweep(ctx, fsID, id, apID))
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		}
		if got, ok := s.sweepable(ap, fsID, grace); !ok || got != id {
			// Not one the sweep would take: a hold anyone who may write
			// the record could forge proves nothing.
			errs = append(errs, s.journal.ReleaseSweep(ctx, fsID, id, apID))
			continue
		}
		deleted, err := s.sweepHeld(ctx, ap, id, named)
		if deleted {
			n++
		}
		errs = append(errs, err)
	}
	aps, err := s.listAfterNow(ctx, fsID)
	if err != nil {
		if errors.Is(err, efs.ErrFileSystemNotFound) || errors.Is(err, efs.ErrAccessDenied) {
			return n, nil // not visible with these credentials: nothing to prove
		}
		return n, errors.Join(append(errs, err)...)
	}
	for i := range aps {
		ap := &aps[i]
		id, ok := s.sweepable(ap, fsID, grace)
		if !ok || named(ap.ID) {
			continue
		}
		deleted, err := s.sweepOne(ctx, ap, id, named)
		if deleted {
			n++
		}
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// sweepable: ap carries this cluster's tags for a record, made over grace
// ago, under the GID token of the id it carries on fsID (returned).
func (s *Service) sweepable(ap *efs.AccessPoint, fsID string, grace time.Duration) (int64, bool) {
	t := ap.Tags
	life, err := time.Parse(time.RFC3339Nano, t[TagRecordLife])
	if err != nil || t[TagCluster] != "true" || t[TagClusterID] != s.cluster || t[TagVolumeName] == "" ||
		ap.FileSystemID != fsID || !live(ap) || s.now().Sub(life) < grace {
		return 0, false
	}
	id := core.PosixGID(ap)
	if id < 0 || volume.GIDToken(fsID, id) != ap.ClientToken {
		// The token binds the id only if it is the id's own; a class
		// with a fixed GID allocates the UID.
		uid, _ := core.PosixIDs(ap)
		if uid < 0 || volume.GIDToken(fsID, uid) != ap.ClientToken {
			return 0, false
		}
		id = uid
	}
	return id, true
}

// owns: rec is the record ap was made for, and names it, or is still to
// learn whether its create made it (no access point recorded, sending
// ap's token): the record's own delete or the collector's listing deals
// with it.
func owns(rec *journal.Record, ap *efs.AccessPoint) bool {
	if rec == nil || ownership.RecordLife(rec) != ap.Tags[TagRecordLife] {
		return false
	}
	return rec.AccessPoint == ap.ID || rec.AccessPoint == "" && rec.SentToken() == ap.ClientToken
}

// ownerOf reads the record of ap's volume: nil if none.
func (s *Service) ownerOf(ctx context.Context, ap *efs.AccessPoint) (*journal.Record, error) {
	rec, err := s.journal.Volume(ctx, ap.FileSystemID, core.VolumeKeyOf(ap))
	if errors.Is(err, journal.ErrNotFound) {
		return nil, nil
	}
	return rec, err
}

// sweepOne deletes ap (sweepable, carrying id) unless its record owns it
// or a volume holds id: false, nil then.
func (s *Service) sweepOne(ctx context.Context, ap *efs.AccessPoint, id int64, named func(string) bool) (bool, error) {
	if rec, err := s.ownerOf(ctx, ap); err != nil || owns(rec, ap) {
		return false, err
	}
	fsID := ap.FileSystemID
	holder, err := s.journal.HoldForSweep(ctx, fsID, id, ap.ID)
	if errors.Is(err, journal.ErrIDTaken) {
		// Held for a volume: released only if its record holds another
		// id, is being deleted or is gone (a create killed between its
		// send and its cleanup held it for nobody); then held again.
		if err := s.journal.ReleaseMovedID(ctx, fsID, id, holder); err != nil {
			return false, err
		}
		_, err = s.journal.HoldForSweep(ctx, fsID, id, ap.ID)
	}
	if errors.Is(err, journal.ErrIDTaken) {
		return false, nil // a volume holds it: a create of it may adopt ap
	}
	if err != nil {
		return false, err
	}
	return s.sweepHeld(ctx, ap, id, named)
}

// sweepHeld goes on once the sweep holds id for ap: the record read again
// under the hold decides; the hold is released either way once done.
func (s *Service) sweepHeld(ctx context.Context, ap *efs.AccessPoint, id int64, named func(string) bool) (bool, error) {
	unlock, err := s.locks.TryLock(core.RecordLocks(&journal.Record{Volume: journal.Volume{Name: ap.Tags[TagVolumeName], Token: core.VolumeKeyOf(ap)}})...)
	if errors.Is(err, keylock.ErrBusy) {
		return false, nil // a create or delete of the volume here: next round (the hold stays)
	}
	if err != nil {
		return false, err
	}
	defer unlock()
	rec, err := s.ownerOf(ctx, ap)
	if err != nil {
		return false, err
	}
	release := func() error { return s.journal.ReleaseSweep(ctx, ap.FileSystemID, id, ap.ID) }
	if owns(rec, ap) || named(ap.ID) {
		return false, release()
	}
	if err := s.deleteAccessPoint(ctx, ap.FileSystemID, ap.ID); err != nil {
		return false, fmt.Errorf("sweep %s: %w", ap.ID, err)
	}
	s.log.Info("access point deleted", slog.String("accessPoint", ap.ID), slog.String("fileSystem", ap.FileSystemID),
		slog.String("name", ap.Tags[TagVolumeName]), slog.Int64("id", id),
		slog.String("reason", "unrecorded: made for a record that no longer names it (a create's request that reached EFS after its volume's delete), never answered"))
	return true, release()
}
