package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Errors of CollectOrphan besides keylock.ErrBusy (a create or delete of
// the volume holds its locks: try again next round) and transient ones
// (core.NewCollect says when each is answered).
var (
	ErrNotOrphan      = core.ErrNotOrphan
	ErrNotCollectable = core.ErrNotCollectable
)

// Journal is the record this controller keeps its volumes in: the orphan
// collector reads its candidates from it and marks bound volumes in it.
func (s *Service) Journal() *journal.Journal { return s.journal }

// CollectOrphan deletes the volume rec records, for the orphan collector
// (pkg/orphans), which proved from the record and Kubernetes that no
// PersistentVolume ever named it and that its claim is gone. The
// controller proves the rest under the volume's name locks
// (core.NewCollect), and deletes it
// through its own DeleteVolume.
//
// Only the controller's own credentials are used (the EFS client, or the
// S3 Files one for a record of S3 Files): a volume of a class whose
// provisioner secret names a role (awsRoleArn) is in another account,
// which they do not see, and is never collected (ErrNotCollectable).
func (s *Service) CollectOrphan(ctx context.Context, rec *journal.Record) error {
	if rec.Dir {
		return s.collectOrphan(ctx, rec)
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

// collectOrphan runs core.NewCollect, then, if it hands the volume to
// DeleteVolume, that with the locks let go (DeleteVolume takes them itself
// and reads the record again under them).
func (s *Service) collectOrphan(ctx context.Context, seen *journal.Record) error {
	x := &effects{s: s, ctx: ctx}
	end := x.run(core.NewCollect(core.CollectConfig{Cluster: s.cluster, ListingLag: s.cfg.ListingLag, Logger: s.log}, seen))
	x.release()
	switch end := end.(type) {
	case core.DeleteOrphan:
		if end.Dir {
			if _, err := s.deleteVolume(ctx, volume.DirID(end.FileSystem, end.Path)); err != nil {
				return fmt.Errorf("delete orphan %s: %w", volume.DirID(end.FileSystem, end.Path), err)
			}
			return nil
		}
		if _, err := s.deleteVolume(ctx, volume.ProvisionedID(end.FileSystem, end.AccessPoint)); err != nil {
			return fmt.Errorf("delete orphan %s: %w", end.AccessPoint, err)
		}
		s.log.Info("orphaned access point deleted", slog.String("accessPoint", end.AccessPoint),
			slog.String("name", seen.Name), slog.String("fileSystem", seen.FileSystem),
			slog.String("claim", seen.ClaimNamespace+"/"+seen.ClaimName),
			slog.String("reason", "orphan: claim gone, no PersistentVolume ever named it"))
		return nil
	case core.Answer:
		return end.Err
	}
	return fmt.Errorf("%w: collection of %s/%q ended with %T", core.ErrStuck, seen.FileSystem, seen.Token, end)
}
