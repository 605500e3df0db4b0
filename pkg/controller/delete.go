package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// DeleteVolume removes the access point of a provisioned volume.
//
// Protocol (docs/design.md, "Delete"):
//  1. Parse; an unparsable ID or a static volume (no access point) is done.
//  2. Lock the access point ID, describe it, recover the volume name from its
//     tag and lock the name too: a Create of the same volume in flight makes
//     this call ABORTED instead of racing it.
//  3. With --delete-access-point-root-dir, remove the root directory first;
//     if that fails the access point stays, so a retry can finish the job.
//  4. Delete the access point; "not found" means an earlier attempt did.
func (s *Service) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, fmt.Errorf("%w: volume ID is required", ErrInvalidRequest)
	}
	id, err := volume.ParseID(req.GetVolumeId())
	if err != nil || id.AccessPointID == "" {
		// Not ours to delete: the CO may send anything, and a static volume
		// owns no access point (the upstream driver answers OK for both).
		return &csi.DeleteVolumeResponse{}, nil
	}
	unlock, err := s.locks.TryLock(apKey(id.AccessPointID))
	if err != nil {
		return nil, err
	}
	defer unlock()

	ap, err := s.efs.DescribeAccessPoint(ctx, id.AccessPointID)
	if errors.Is(err, efs.ErrAccessPointNotFound) {
		// Gone, or created so recently that Describe does not show it yet.
		// DeleteAccessPoint is authoritative: call it rather than trust Describe.
		return &csi.DeleteVolumeResponse{}, s.deleteAccessPoint(ctx, id.FileSystemID, id.AccessPointID)
	}
	if err != nil {
		return nil, err
	}
	if name := ap.Tags[TagVolumeName]; name != "" {
		unlockName, err := s.locks.TryLock(nameKey(name))
		if err != nil {
			return nil, err
		}
		defer unlockName()
	}
	if s.delRoot {
		if err := s.removeRootDir(ctx, ap); err != nil {
			return nil, err
		}
	}
	return &csi.DeleteVolumeResponse{}, s.deleteAccessPoint(ctx, ap.FileSystemID, ap.ID)
}

// deleteAccessPoint deletes apID and tells the allocator its ids are free.
func (s *Service) deleteAccessPoint(ctx context.Context, fsID, apID string) error {
	err := s.efs.DeleteAccessPoint(ctx, apID)
	if err != nil && !errors.Is(err, efs.ErrAccessPointNotFound) {
		return err
	}
	s.gids.Forget(fsID, apID)
	s.forgetAnswer(apID)
	return nil
}

// cleanupTimeout bounds the unmount after the call's own context is gone.
const cleanupTimeout = 30 * time.Second

// removeRootDir mounts the file system at a fresh directory of its own,
// removes the access point's root directory, and always unmounts and removes
// the mount point, whether removal succeeded, failed or was cancelled.
func (s *Service) removeRootDir(ctx context.Context, ap *efs.AccessPoint) (err error) {
	rel, err := removableRoot(ap)
	if err != nil {
		return err
	}
	mnt, err := os.MkdirTemp(s.tmpDir, mountPointPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return fmt.Errorf("%w: mount point: %v", ErrRootDirRemoval, err)
	}
	if err := s.mounter.MountFileSystem(ctx, ap.FileSystemID, mnt); err != nil {
		_ = os.Remove(mnt)
		return fmt.Errorf("%w: mount %s: %w", ErrRootDirRemoval, ap.FileSystemID, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if uerr := s.mounter.Unmount(cctx, mnt); uerr != nil {
			// Never remove a directory that may still be the file system.
			err = errors.Join(err, fmt.Errorf("%w: unmount %s: %w", ErrRootDirRemoval, mnt, uerr))
			return
		}
		if rerr := os.Remove(mnt); rerr != nil {
			err = errors.Join(err, fmt.Errorf("%w: remove mount point: %v", ErrRootDirRemoval, rerr))
		}
	}()
	target, err := volume.ResolveParentInside(mnt, rel)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnsafeRootDir, ap.Path, err)
	}
	if target == mnt {
		return fmt.Errorf("%w: %s resolves to the file system root", ErrUnsafeRootDir, ap.Path)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.RemoveAll(target); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrRootDirRemoval, ap.Path, err)
	}
	s.log.Info("root directory removed", slog.String("accessPoint", ap.ID), slog.String("path", ap.Path))
	return nil
}

// removableRoot returns the root directory relative to the file system root,
// refusing what removal could turn into data loss: the root itself, a path
// that is not clean, and any access point the driver did not create.
func removableRoot(ap *efs.AccessPoint) (string, error) {
	p := ap.Path
	if ap.Tags[TagVolumeName] == "" {
		return "", fmt.Errorf("%w: access point %s was not created by this driver", ErrUnsafeRootDir, ap.ID)
	}
	if p == "" || !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return "", fmt.Errorf("%w: access point %s has root %q", ErrUnsafeRootDir, ap.ID, p)
	}
	if base, ok := ap.Tags[TagBasePath]; ok && path.Clean("/"+base) == p {
		return "", fmt.Errorf("%w: access point %s has the base path %q as root", ErrUnsafeRootDir, ap.ID, p)
	}
	return filepath.FromSlash(p[1:]), nil
}

// mountPointPrefix names the per-call mount points: prefix + pid + "-" + random,
// so a restarted process can tell its dead predecessor's from a live one's.
const mountPointPrefix = "efs-csi-delete-"

// CleanStaleMountPoints unmounts and removes the mount points that a killed
// controller process left in the temporary directory. Mount points of live
// processes (another controller sharing the directory) are left alone.
func (s *Service) CleanStaleMountPoints(ctx context.Context) error {
	if s.mounter == nil {
		return nil
	}
	dirs, err := filepath.Glob(filepath.Join(s.tmpDir, mountPointPrefix+"*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, dir := range dirs {
		pidPart, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(dir), mountPointPrefix), "-")
		pid, err := strconv.Atoi(pidPart)
		if err != nil || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		if err := s.mounter.Unmount(ctx, dir); err != nil {
			errs = append(errs, err)
			continue // never remove what may still be a mounted file system
		}
		if err := os.Remove(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		s.log.Info("removed a stale mount point", slog.String("path", dir))
	}
	return errors.Join(errs...)
}

func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}
