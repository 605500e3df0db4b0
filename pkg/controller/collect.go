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

// Errors of CollectOrphan besides keylock.ErrBusy (a create or delete of
// the volume holds its locks: try again next round) and transient ones.
var (
	// ErrNotOrphan: the record changed since the collector read it (bound,
	// another claim or name, an access point recorded meanwhile) or is
	// gone. Nothing was deleted; the collector starts over with it.
	ErrNotOrphan = errors.New("volume is no longer an orphan")
	// ErrNotCollectable: nothing proves what the record's access point is
	// with the controller's own credentials (its file system is not visible
	// with them: a volume of a class with an awsRoleArn secret, whose
	// credentials only the provisioner has), or an access point carries the
	// record's token at another root directory than the record's. Nothing
	// was deleted and the record stays.
	ErrNotCollectable = errors.New("orphan not collectable")
)

// Journal is the record this controller keeps its volumes in: the orphan
// collector reads its candidates from it and marks bound volumes in it.
func (s *Service) Journal() *journal.Journal { return s.journal }

// CollectOrphan deletes the volume rec records, for the orphan collector
// (pkg/orphans), which proved from the record and Kubernetes that no
// PersistentVolume ever named it and that its claim is gone. The controller
// proves the rest, under the volume's name locks (those a create of it
// holds: a create being retried makes this ErrBusy):
//   - the record read again is still unbound, for the same claim and name,
//     naming the same access point (or still none): else ErrNotOrphan;
//   - a recorded access point is deleted through DeleteVolume (its root
//     directory too, with --delete-access-point-root-dir), and its record
//     and id released;
//   - without a recorded access point (the create's outcome never came
//     back, or it failed), the file system is listed: the access point
//     with the record's token at the record's root directory is deleted
//     the same way; if none carries the token, the create never made one
//     (the grace period outlasts any attempt), and the record and its id
//     are released; one with the token at another directory is left alone
//     (ErrNotCollectable).
//
// Only the controller's own credentials are used (the EFS client, or the
// S3 Files one for a record of S3 Files): a volume of a class whose
// provisioner secret names a role (awsRoleArn) is in another account,
// which they do not see, and is never collected (ErrNotCollectable).
func (s *Service) CollectOrphan(ctx context.Context, rec *journal.Record) error {
	if rec.Dir {
		return s.collectDir(ctx, rec)
	}
	var b Backend
	switch API(rec.API) {
	case APIEFS, "efs":
	case APIS3Files:
		b = Backend{API: APIS3Files}
	default:
		return fmt.Errorf("%w: %s/%q: API %q", ErrNotCollectable, rec.FileSystem, rec.Token, rec.API)
	}
	svc, err := s.backend(ctx, b)
	if err != nil {
		if errors.Is(err, ErrNotSupported) {
			return fmt.Errorf("%w: %s/%q: %w", ErrNotCollectable, rec.FileSystem, rec.Token, err)
		}
		return err
	}
	return svc.collectOrphan(ctx, rec)
}

// collectDir deletes the directory volume rec records, as DeleteVolume
// does (its directory too with --delete-access-point-root-dir), once the
// record read again under its locks is still the orphan the collector
// judged.
func (s *Service) collectDir(ctx context.Context, seen *journal.Record) error {
	unlock, err := s.locks.TryLock(core.RecordLocks(seen)...)
	if err != nil {
		return err
	}
	rec, err := s.journal.Volume(ctx, seen.FileSystem, seen.Token)
	switch {
	case errors.Is(err, journal.ErrNotFound):
		unlock()
		return fmt.Errorf("%w: the record of %s/%q is gone", ErrNotOrphan, seen.FileSystem, seen.Token)
	case err != nil:
		unlock()
		return err
	}
	if why := orphanChange(seen, rec); why != "" {
		unlock()
		return fmt.Errorf("%w: volume %q (%s/%q): %s", ErrNotOrphan, rec.Name, rec.FileSystem, rec.Token, why)
	}
	// deleteDirVolume takes the locks itself (as collectOrphan's
	// DeleteVolume), and reads the record again under them.
	unlock()
	if _, err := s.deleteDirVolume(ctx, volume.ID{FileSystemID: rec.FileSystem, Path: rec.Path, Dir: true}); err != nil {
		return fmt.Errorf("delete orphan %s: %w", volume.DirID(rec.FileSystem, rec.Path), err)
	}
	return nil
}

// orphanChange says how cur, the record read under the locks, differs from
// seen, the one the collector judged, in what makes it an orphan; "" if not.
func orphanChange(seen, cur *journal.Record) string {
	switch {
	case cur.Bound:
		return "a PersistentVolume named it"
	case cur.ClaimNamespace != seen.ClaimNamespace || cur.ClaimName != seen.ClaimName:
		return fmt.Sprintf("its claim is now %s/%s", cur.ClaimNamespace, cur.ClaimName)
	case cur.Name != seen.Name:
		return fmt.Sprintf("its volume name is now %q", cur.Name)
	case cur.AccessPoint != seen.AccessPoint:
		return fmt.Sprintf("its access point is now %q", cur.AccessPoint)
	}
	return ""
}

func (s *Service) collectOrphan(ctx context.Context, seen *journal.Record) error {
	unlock, err := s.locks.TryLock(core.RecordLocks(seen)...)
	if err != nil {
		return err
	}
	defer unlock()
	rec, err := s.journal.Volume(ctx, seen.FileSystem, seen.Token)
	if errors.Is(err, journal.ErrNotFound) {
		return fmt.Errorf("%w: the record of %s/%q is gone", ErrNotOrphan, seen.FileSystem, seen.Token)
	}
	if err != nil {
		return err
	}
	if why := orphanChange(seen, rec); why != "" {
		return fmt.Errorf("%w: volume %q (%s/%q): %s", ErrNotOrphan, rec.Name, rec.FileSystem, rec.Token, why)
	}
	log := s.log.With(slog.String("name", rec.Name), slog.String("fileSystem", rec.FileSystem),
		slog.String("claim", rec.ClaimNamespace+"/"+rec.ClaimName))
	target, rec, err := s.orphanTarget(ctx, seen, rec)
	if err != nil {
		return err
	}
	if target == "" {
		// No access point carries the token: the create never made one,
		// or it is deleted.
		if err := s.journal.Finish(ctx, rec); err != nil {
			return err
		}
		log.Info("orphan's record released: its create made no access point",
			slog.String("reason", "orphan: claim gone, no PersistentVolume ever named it"), slog.Int64("id", rec.Allocated))
		return nil
	}
	// DeleteVolume takes the volume's locks itself (a TryLock of a key this
	// call holds fails): released here, a create of the volume starting in
	// between makes DeleteVolume ErrBusy, and DeleteVolume reads the
	// record again under them.
	unlock()
	if _, err := s.deleteVolume(ctx, volume.ProvisionedID(rec.FileSystem, target)); err != nil {
		return fmt.Errorf("delete orphan %s: %w", target, err)
	}
	log.Info("orphaned access point deleted", slog.String("accessPoint", target),
		slog.String("reason", "orphan: claim gone, no PersistentVolume ever named it"))
	return nil
}

// markOrphan marks rec, read under its locks, deleting while it is still
// the orphan seen, and answers it once a listing begun now shows every
// access point made before the mark. Until then it is keylock.ErrBusy:
// the collector goes on with its other orphans and comes back next round
// (the mark stays), so that a round's orphans wait out the lag together
// instead of one after another.
func (s *Service) markOrphan(ctx context.Context, seen, rec *journal.Record) (*journal.Record, error) {
	marked, err := s.journal.MarkDeletingIf(ctx, rec, func(cur *journal.Record) bool { return orphanChange(seen, cur) == "" })
	switch {
	case err != nil:
		return nil, err
	case marked == nil:
		return nil, fmt.Errorf("%w: volume %q (%s/%q) changed", ErrNotOrphan, rec.Name, rec.FileSystem, rec.Token)
	}
	if settled := marked.DeletingSince.Add(s.cfg.ListingLag); s.now().Before(settled) {
		return nil, fmt.Errorf("%w: volume %q marked for collection: listed once EFS's listing lag has passed (%v)",
			keylock.ErrBusy, rec.Name, settled.Sub(s.now()).Round(time.Millisecond))
	}
	return marked, nil
}

// orphanTarget is the access point rec's volume has, proven rec's by its
// tags (taggedFor): "" when none was ever made or it is deleted, which only
// a listing shows (it proves the record marked deleting, markOrphan). It
// errs when that cannot be proven with this Service's credentials
// (ErrNotCollectable) or not now. The access point is never deleted on the
// record's word alone: one Describe does not show (EFS describes a new
// access point with a lag, as it lists it) is looked for in the listing,
// and its tags checked there.
func (s *Service) orphanTarget(ctx context.Context, seen, rec *journal.Record) (string, *journal.Record, error) {
	if rec.AccessPoint != "" {
		ap, err := s.efs.DescribeAccessPoint(ctx, rec.AccessPoint)
		switch {
		case err == nil:
			if !ownership.Agrees(rec, ap) {
				return "", nil, fmt.Errorf("%w: volume %q: access point %s on %s with token %q and root %q is not the one recorded",
					ErrNotCollectable, rec.Name, ap.ID, ap.FileSystemID, ap.ClientToken, ap.Path)
			}
			if err := s.taggedFor(rec, ap); err != nil {
				return "", nil, err
			}
			return ap.ID, rec, nil
		case !errors.Is(err, efs.ErrAccessPointNotFound):
			return "", nil, err
		}
		// Deleted (DeleteVolume's record release failed after), not
		// described yet, or in a file system these credentials do not
		// see: the listing below tells.
	}
	// A listing of a file system these credentials do not see would show
	// no access point: the record would be released with one existing.
	if err := s.reachable(ctx, rec.FileSystem); err != nil {
		return "", nil, s.unreachable(rec, err)
	}
	// The listing proves no access point carries the token only if it
	// shows every one made: it begins ListingLag after the record is marked
	// deleting (EFS lists a new access point with a lag), and from the mark
	// on a create of it that makes one deletes it instead of recording it.
	rec, err := s.markOrphan(ctx, seen, rec)
	if err != nil {
		return "", nil, err
	}
	aps, err := s.listAfterNow(ctx, rec.FileSystem)
	if err != nil {
		if errors.Is(err, efs.ErrFileSystemNotFound) || errors.Is(err, efs.ErrAccessDenied) {
			return "", nil, s.unreachable(rec, err)
		}
		return "", nil, err
	}
	for _, ap := range aps {
		if ap.ClientToken != rec.SentToken() || ap.FileSystemID != rec.FileSystem {
			continue
		}
		if ap.Path != rec.Path {
			// EFS binds a token to one access point: this one is not the
			// one the record planned. Whose directory it holds is unknown
			// (the collector logs this, once).
			return "", nil, fmt.Errorf("%w: volume %q: access point %s carries its token %q at %q, not the recorded %q",
				ErrNotCollectable, rec.Name, ap.ID, rec.SentToken(), ap.Path, rec.Path)
		}
		if err := s.taggedFor(rec, &ap); err != nil {
			return "", nil, err
		}
		return ap.ID, rec, nil
	}
	return "", rec, nil
}

// taggedFor proves with ap's tags what the record says of it: the
// collector acts on no record alone, since a record entry can be written by
// anyone who may write the controller's ConfigMaps or Leases, and an entry
// naming an upstream-made, hand-made or untagged access point would
// otherwise delete it with its data. This driver tags every access point
// it makes (but for enableTagging "false" classes, whose orphans are left
// to the audit): its cluster tag, the record's volume name, no other
// cluster's ID (a replica that could not read its cluster's ID, under
// upstream's RBAC, writes none), and the record's claim where it names one.
// Upstream's access points (no volume-name tag) and untagged ones are never
// collected; an earlier release's, which carries this driver's tags, is
// when a forged entry names it with its own name and claim.
func (s *Service) taggedFor(rec *journal.Record, ap *efs.AccessPoint) error {
	t := ap.Tags
	claimOK := func(key, want string) bool { v, ok := t[key]; return !ok || v == want }
	_, other := ownership.OtherCluster(ap, s.cluster)
	if t[TagCluster] != "true" || t[TagVolumeName] != rec.Name || other || !s.madeForRecord(rec, ap) ||
		!claimOK(TagClaimName, rec.ClaimName) || !claimOK(TagClaimNamespace, rec.ClaimNamespace) {
		return fmt.Errorf("%w: volume %q: access point %s does not carry this cluster's tags for it (cluster %q, volume %q, cluster ID %q, record life %q, claim %s/%s): the record alone proves nothing to the collector",
			ErrNotCollectable, rec.Name, ap.ID, t[TagCluster], t[TagVolumeName], t[TagClusterID], t[TagRecordLife], t[TagClaimNamespace], t[TagClaimName])
	}
	return nil
}

// madeForRecord: ap carries the life of rec (TagRecordLife), which only a
// create of that record writes; or, made by a release before the tag,
// this cluster's ID. Name and claim tags can be read off the cluster's
// volumes and copied into a forged entry; a record life is in EFS alone.
// An earlier release's access point without a cluster ID (a replica under
// upstream's RBAC wrote none) is never collected: the audit finds it.
func (s *Service) madeForRecord(rec *journal.Record, ap *efs.AccessPoint) bool {
	if life, ok := ap.Tags[TagRecordLife]; ok {
		return life == ownership.RecordLife(rec)
	}
	return s.cluster != "" && ap.Tags[TagClusterID] == s.cluster
}

// unreachable is the error of an orphan whose file system these
// credentials do not see (ErrNotReachable, or a listing refused).
func (s *Service) unreachable(rec *journal.Record, err error) error {
	if errors.Is(err, ErrNotReachable) || errors.Is(err, efs.ErrFileSystemNotFound) || errors.Is(err, efs.ErrAccessDenied) {
		return fmt.Errorf("%w: volume %q: %w", ErrNotCollectable, rec.Name, err)
	}
	return err
}
