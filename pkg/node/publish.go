package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/pkg/mount"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// targetLockKey is the keylock key of a target path.
func targetLockKey(target string) string { return "target:" + target }

// NodePublishVolume mounts the volume at the target path, creating the
// target directory if needed. A target that already holds this volume is OK;
// one that holds something else is ErrTargetConflict; a stale or half-made
// mount is unmounted and mounted again.
func (s *Service) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	vol, target, err := s.publishRequest(req)
	if err != nil {
		return nil, err
	}
	unlock, err := s.locks.TryLock(targetLockKey(target))
	if err != nil {
		return nil, err
	}
	defer unlock()
	release, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	log := s.log.With(slog.String("volume", req.GetVolumeId()), slog.String("target", target))
	if err := s.publish(ctx, log, vol, target); err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (s *Service) publish(ctx context.Context, log *slog.Logger, vol mount.Volume, target string) error {
	state, err := s.mounter.Inspect(ctx, vol, target)
	if err != nil {
		return mountError(err)
	}
	switch state {
	case mount.Mounted:
		log.Info("volume already published")
		return nil
	case mount.Conflict:
		return fmt.Errorf("%w: %s (not volume %s%s, or with another read-only setting)",
			ErrTargetConflict, target, vol.FileSystemID, apSuffix(vol))
	case mount.Stale:
		log.Warn("repairing a stale mount on the target")
		if err := s.unmount(ctx, target); err != nil {
			return fmt.Errorf("%w: unmount stale mount: %w", ErrMountFailed, err)
		}
	}
	created, err := makeTarget(target)
	if err != nil {
		return err
	}
	if err := s.mounter.MountVolume(ctx, vol, target); err != nil {
		if created {
			_ = os.Remove(target)
		}
		return mountError(err)
	}
	log.Info("volume published", slog.Bool("readOnly", vol.ReadOnly))
	return nil
}

func apSuffix(vol mount.Volume) string {
	if vol.AccessPointID == "" {
		return ""
	}
	return " through " + vol.AccessPointID
}

// mountError classifies a mounter error: a missing directory is
// ErrVolumeNotFound; anything else is ErrMountFailed, unless it already wraps
// a sentinel that pkg/driver's table finds first (invalid input, EFS API
// errors, deadlines).
func mountError(err error) error {
	if errors.Is(err, mount.ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrVolumeNotFound, err)
	}
	return fmt.Errorf("%w: %w", ErrMountFailed, err)
}

// makeTarget makes sure target is a directory (not a symlink), creating it
// and missing parents as upstream does. created says whether it did.
func makeTarget(target string) (created bool, err error) {
	fi, err := os.Lstat(target)
	switch {
	case err == nil && fi.Mode()&os.ModeSymlink != 0:
		return false, fmt.Errorf("%w: target %s is a symlink", volume.ErrUnsafePath, target)
	case err == nil && !fi.IsDir():
		return false, invalid("target path", "%s exists and is not a directory", target)
	case err == nil:
		return false, nil
	case !errors.Is(err, os.ErrNotExist):
		return false, fmt.Errorf("%w: target: %w", ErrMountFailed, err)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return false, fmt.Errorf("%w: create target: %w", ErrMountFailed, err)
	}
	return true, nil
}

// NodeUnpublishVolume unmounts whatever is mounted at the target (every
// stacked layer) and removes the target directory, as the CSI spec asks. A
// target that is not mounted or does not exist is OK.
//
// The volume ID must be present but is not parsed: unpublishing must work
// for every volume that was ever published, whatever this version thinks of
// its ID, or the pod could never finish terminating.
func (s *Service) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume ID", "is required")
	}
	target, err := checkTarget("target path", req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	unlock, err := s.locks.TryLock(targetLockKey(target))
	if err != nil {
		return nil, err
	}
	defer unlock()
	log := s.log.With(slog.String("volume", req.GetVolumeId()), slog.String("target", target))
	if err := s.unmount(ctx, target); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMountFailed, err)
	}
	if err := removeTarget(log, target); err != nil {
		return nil, err
	}
	log.Info("volume unpublished")
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// removeTarget removes the (unmounted) target directory. It never removes
// anything but an empty directory: a target that holds files (written
// while nothing was mounted) is left alone with a warning, since data is
// worth more than a tidy kubelet directory.
func removeTarget(log *slog.Logger, target string) error {
	err := unix.Rmdir(target)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOTDIR):
		log.Warn("target left in place: not an empty directory", slog.Any("error", err))
		return nil
	}
	return fmt.Errorf("%w: remove target %s: %w", ErrMountFailed, target, err)
}
