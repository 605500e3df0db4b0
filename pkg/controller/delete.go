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
	"github.com/efs-csi/efs-csi-driver/pkg/rmtree"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// DeleteVolume removes the access point of a provisioned volume.
//
// Protocol (docs/design.md, "Delete"):
//  1. Parse; an unparsable ID or a static volume (no access point) is done.
//  2. Lock the access point ID, describe it, recover the volume name (our
//     tag, or else every name the client token can be read as:
//     provenanceOf) and lock the name too: a Create of the same volume in
//     flight makes this call ABORTED instead of racing it.
//  3. With --delete-access-point-root-dir, remove the root directory first,
//     unless another access point reaches it or no CSI driver made the
//     access point; if removal fails the access point stays, so a retry can
//     finish the job.
//  4. Delete the access point; "not found" means an earlier attempt did.
func (s *Service) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, fmt.Errorf("%w: volume ID is required", ErrInvalidRequest)
	}
	// The same backend as the create: the ID names the API, the
	// provisioner passes the class's secrets to delete too (a volume
	// made as a role is deleted as that role, or not found and leaked).
	b, rest, err := backendOfID(req.GetVolumeId(), req.GetSecrets())
	if err != nil {
		return nil, err
	}
	svc, err := s.backend(ctx, b)
	if err != nil {
		return nil, err
	}
	return svc.deleteVolume(ctx, rest)
}

func (s *Service) deleteVolume(ctx context.Context, volumeID string) (*csi.DeleteVolumeResponse, error) {
	id, err := volume.ParseID(volumeID)
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
		if err := s.deleteAccessPoint(ctx, id.FileSystemID, id.AccessPointID); err != nil {
			return nil, err
		}
		return &csi.DeleteVolumeResponse{}, s.reachable(ctx, id.FileSystemID)
	}
	if err != nil {
		return nil, err
	}
	prov := provenanceOf(ap)
	unlockNames, err := s.locks.TryLock(prov.locks...)
	if err != nil {
		return nil, err
	}
	defer unlockNames()
	s.dropAnswer(ap.ID)
	switch {
	case !s.delRoot:
	case !prov.csi:
		// Not a CSI volume's directory: whose data it holds is unknown.
		// The access point goes (as without root removal: a PV stuck in
		// FAILED_PRECONDITION helps nobody), the directory stays.
		s.roots.notOwned.Add(1)
		s.log.Warn("root directory kept: the access point was not made by a CSI driver",
			slog.String("accessPoint", ap.ID), slog.String("path", ap.Path))
	default:
		defer s.roots.deletingNow(ap.ID)() // through the DeleteAccessPoint below
		if err := s.removeRootDir(ctx, ap); err != nil {
			return nil, err
		}
	}
	return &csi.DeleteVolumeResponse{}, s.deleteAccessPoint(ctx, ap.FileSystemID, ap.ID)
}

// reachable confirms that "not found" is about the access point: its file
// system is visible with these credentials. A volume made in another
// account (a class with a role secret) is not found with the controller's
// own credentials either, and answering OK then would drop its PV and leak
// the access point there. So a file system these credentials cannot see is
// FAILED_PRECONDITION: the class's provisioner secret must name the role (a
// file system deleted with everything on it reads the same: its PV is then
// removed by hand). One Describe, only on this path (a delete whose earlier
// attempt finished), and none where the client cannot describe.
func (s *Service) reachable(ctx context.Context, fsID string) error {
	d, ok := s.efs.(FileSystemDescriber)
	if !ok {
		return nil
	}
	_, err := d.DescribeFileSystem(ctx, fsID)
	switch {
	case errors.Is(err, efs.ErrFileSystemNotFound):
		return fmt.Errorf("%w: file system %s is not visible with these credentials: a volume made in another account is deleted with its class's provisioner secret (%s); the access point was not deleted here",
			ErrNotReachable, fsID, SecretRoleARN)
	case errors.Is(err, efs.ErrAccessDenied):
		// Credentials that may delete but not describe (a policy narrower
		// than upstream's): the check cannot be made, and refusing would
		// keep the PV for good. Answer as upstream does, and say so.
		s.log.Warn("deleted volume's file system not checked: DescribeFileSystems denied",
			slog.String("fileSystem", fsID), slog.String("error", err.Error()))
		return nil
	}
	return err
}

// deleteAccessPoint deletes apID and tells the allocator its ids are free.
func (s *Service) deleteAccessPoint(ctx context.Context, fsID, apID string) error {
	err := s.efs.DeleteAccessPoint(ctx, apID)
	if err != nil && !errors.Is(err, efs.ErrAccessPointNotFound) {
		return err
	}
	s.roots.gone(apID, s.now())
	s.gids.Forget(fsID, apID)
	s.forgetAnswer(apID)
	return nil
}

// cleanupTimeout bounds the unmount after the call's own context is gone.
const cleanupTimeout = 30 * time.Second

// removeRootDir mounts the file system at a fresh directory of its own and
// removes the access point's root directory unless another live access
// point reaches it (then the directory stays and the delete goes on). The
// removal walks descriptors from the mount point (pkg/rmtree): a symlink or
// a mount point on the way is refused, nothing inside is followed. The
// mount point is always released, whether removal succeeded, failed or was
// cancelled; an unmount that fails is retried later (releaseMount).
func (s *Service) removeRootDir(ctx context.Context, ap *efs.AccessPoint) error {
	rel, err := removableRoot(ap)
	if err != nil {
		return err
	}
	select {
	case s.roots.slots <- struct{}{}:
		defer func() { <-s.roots.slots }()
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for a removal slot: %w", ErrRootDirRemoval, ctx.Err())
	}
	mnt, err := os.MkdirTemp(s.tmpDir, mountPointPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return fmt.Errorf("%w: mount point: %v", ErrRootDirRemoval, err)
	}
	if err := s.mounter.MountFileSystem(ctx, ap.FileSystemID, mnt); err != nil {
		_ = os.Remove(mnt)
		return fmt.Errorf("%w: mount %s: %w", ErrRootDirRemoval, ap.FileSystemID, err)
	}
	defer s.releaseMount(ctx, mnt)
	// Listed after mounting, right before the removal: the window in
	// which a new access point on the directory goes unseen is the removal.
	other, err := s.sharer(ctx, ap)
	if err != nil {
		return err
	}
	if other != nil {
		s.roots.kept.Add(1)
		s.log.Warn("root directory kept: another access point reaches it",
			slog.String("accessPoint", ap.ID), slog.String("path", ap.Path),
			slog.String("otherAccessPoint", other.ID), slog.String("otherPath", other.Path))
		return nil
	}
	err = rmtree.RemoveAll(ctx, mnt, rel)
	switch {
	case err == nil:
		s.log.Info("root directory removed", slog.String("accessPoint", ap.ID), slog.String("path", ap.Path))
		return nil
	case errors.Is(err, rmtree.ErrUnsafe):
		return fmt.Errorf("%w: %s: %w", ErrUnsafeRootDir, ap.Path, err)
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %s: %w", ErrRootDirRemoval, ap.Path, ctx.Err())
	}
	return fmt.Errorf("%w: %s: %w", ErrRootDirRemoval, ap.Path, err)
}

// removableRoot returns the root directory relative to the file system root,
// refusing what removal could turn into data loss: the root itself, a path
// that is not clean, a base path, and any access point no CSI driver made.
func removableRoot(ap *efs.AccessPoint) (string, error) {
	p := ap.Path
	if !provenanceOf(ap).csi {
		return "", fmt.Errorf("%w: access point %s was not created by a CSI driver", ErrUnsafeRootDir, ap.ID)
	}
	if p == "" || !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return "", fmt.Errorf("%w: access point %s has root %q", ErrUnsafeRootDir, ap.ID, p)
	}
	if base, ok := ap.Tags[TagBasePath]; ok && path.Clean("/"+base) == p {
		return "", fmt.Errorf("%w: access point %s has the base path %q as root", ErrUnsafeRootDir, ap.ID, p)
	}
	return p[1:], nil
}

// mountPointPrefix names the per-call mount points: prefix + pid + "-" + random,
// so a restarted process can tell its dead predecessor's from a live one's.
const mountPointPrefix = "efs-csi-delete-"

// CleanStaleMountPoints unmounts and removes the mount points that a killed
// controller process left in the temporary directory. Mount points of live
// processes (another controller sharing the directory) are left alone.
//
// It also retries this process's own mount points whose unmount failed.
func (s *Service) CleanStaleMountPoints(ctx context.Context) error {
	if s.mounter == nil {
		return nil
	}
	var errs []error
	for _, svc := range s.services() {
		errs = append(errs, svc.retryUnmounts(ctx))
	}
	dirs, err := filepath.Glob(filepath.Join(s.tmpDir, mountPointPrefix+"*"))
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
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
