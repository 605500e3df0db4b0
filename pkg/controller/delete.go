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

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/rmtree"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// DeleteVolume removes the access point of a provisioned volume.
//
// Protocol (docs/design.md, "Delete"):
//  1. Parse; an unparsable ID or a static volume (no access point) is done.
//  2. Lock the access point ID and describe it. It must be on the ID's file
//     system and not another cluster's; its record (by file system and
//     client token) says whose it is, and lock its name and token: a Create
//     of the same volume in flight makes this call ABORTED instead of racing
//     it.
//  3. With --delete-access-point-root-dir, remove the root directory first,
//     unless another access point (listed, or recorded) reaches it or no CSI
//     driver made the access point; if removal fails the access point
//     stays, so a retry can finish the job.
//  4. Delete the access point; "not found" means an earlier attempt did.
//     Then, and only then, the record and its GID are released.
func (s *Service) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, fmt.Errorf("%w: volume ID is required", ErrInvalidRequest)
	}
	s.noteCall()
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
	if id, err := volume.ParseID(rest); err == nil && id.Reader != "" {
		return svc.deleteReader(ctx, id)
	}
	// A copy this process runs into the volume (a restore or clone given
	// up) ends before the volume's root is removed.
	svc.stopRestore(req.GetVolumeId())
	resp, err := svc.deleteVolume(ctx, rest)
	if errors.Is(err, efs.ErrAccessDenied) && b != (Backend{}) {
		s.dropBackend(b)
	}
	if err == nil {
		// The record of a restore into it goes with the volume (the
		// collector's CollectRestores, if not here).
		err = s.forgetRestore(ctx, req.GetVolumeId())
	}
	return resp, err
}

// deleteVolume executes the delete protocol (core.Delete, effects.go).
func (s *Service) deleteVolume(ctx context.Context, volumeID string) (*csi.DeleteVolumeResponse, error) {
	x := &effects{s: s, ctx: ctx}
	defer x.release()
	// The memory of the ID's file system, if it parses (the delete reads
	// none otherwise).
	var mem core.Memory
	if id, err := volume.ParseID(volumeID); err == nil {
		x.st = s.fs(id.FileSystemID)
		mem = x.st.mem
	}
	end := x.run(core.NewDelete(core.DeleteConfig{Cluster: s.cluster, DeleteRootDir: s.delRoot, Logger: x.logger()}, volumeID, mem, s.now()))
	switch e, ok := end.(core.Answer); {
	case !ok:
		return nil, fmt.Errorf("%w: a delete ended with %T", core.ErrStuck, end)
	case e.Err != nil:
		return nil, e.Err
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// lookUp is the access point the volume ID names, as DescribeAccessPoint
// answers it. With root removal on, the listing that removal needs anyway
// (its view, which started after this call and is shared by every delete
// waiting then) shows it with everything Describe would: no request of its
// own, so a delete costs its DeleteAccessPoint and a share of one listing
// per batch of deletes, however many access points the file system has.
// One the listing does not show (EFS lists with a lag; gone; another file
// system's ID) or a listing that failed (a file system these credentials
// cannot see) is described, as without root removal; the view, if any,
// still serves the removal. Without root removal, one this backend made
// and has not deleted is as CreateAccessPoint answered it (made.go): no
// request either.
func (s *Service) lookUp(ctx context.Context, id volume.ID) (*efs.AccessPoint, *rootView, error) {
	var view *rootView
	if s.delRoot {
		v, err := s.viewAfterNow(ctx, id.FileSystemID)
		if err != nil && ctx.Err() != nil {
			return nil, nil, err
		}
		if err == nil {
			if ap := v.accessPoint(id.AccessPointID); ap != nil {
				return ap, v, nil
			}
			view = v
		}
	} else if ap, ok := s.made.get(id.AccessPointID); ok {
		return ap, nil, nil // made here: no request (made.go)
	}
	ap, err := s.efs.DescribeAccessPoint(ctx, id.AccessPointID)
	return ap, view, err
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
func (s *Service) deleteAccessPoint(ctx context.Context, fsID, apID string) (gone bool, _ error) {
	err := s.efs.DeleteAccessPoint(ctx, apID)
	if err != nil && !errors.Is(err, efs.ErrAccessPointNotFound) {
		return false, err
	}
	s.made.drop(apID)
	s.fs(fsID).gone(apID, s.now())
	s.fs(fsID).dropAnswer(apID)
	return err != nil, nil
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
//
// view is the listing and record of the file system that lookUp got (nil:
// one is fetched now); both began after this call did. It is checked
// before waiting for a removal slot, so that one listing serves every
// delete waiting for it rather than the 16 that hold a slot (a listing of
// 10,000 access points is 10 pages; within the slots, that was 0.6
// requests per delete and a wait of a listing per 16 deletes), and a
// shared directory is never mounted. What reaches the directory since the
// view was read is this process's creates (createSharer), checked again
// once mounted, right before the removal; another writer's access point
// made meanwhile is not seen (docs/root-removal.md, "Limits").
//
// EFS lists a new access point with a lag (the emulator's
// --visibility-delay): one another writer made on the directory shortly
// before the delete began (since: this call's start, or the time an
// earlier attempt marked the record deleting) shows only in a listing that
// begins ListingLag after that: a view that began earlier is fetched
// again then, whether or not this process has seen EFS lag (it cannot
// tell: a lag shows only as an access point missing from a listing, and
// another writer's is not known to be missing). A retry after a restart
// does not wait again.
func (s *Service) removeRootDir(ctx context.Context, ap *efs.AccessPoint, prov core.Provenance, view *rootView, since time.Time) error {
	rel, err := removableRoot(ap, prov)
	if err != nil {
		return err
	}
	if view != nil && s.keptFor(ap, s.sharer(ap, view)) {
		return nil // kept whatever a later listing says
	}
	if settled := since.Add(s.cfg.ListingLag); view == nil || view.began.Before(settled) {
		if err := s.sleepUntil(ctx, settled); err != nil {
			return fmt.Errorf("%w: %w", ErrRootDirRemoval, err)
		}
		view = nil
	}
	if view == nil {
		if view, err = s.viewAfterNow(ctx, ap.FileSystemID); err != nil {
			return err
		}
	}
	if s.keptFor(ap, s.sharer(ap, view)) {
		return nil
	}
	return s.withMount(ctx, ap.FileSystemID, func(mnt string) error {
		if s.keptFor(ap, s.createSharer(ap)) {
			return nil
		}
		err := s.moveToTrash(mnt, rel)
		switch {
		case errors.Is(err, rmtree.ErrUnsafe):
			return fmt.Errorf("%w: %s: %w", ErrUnsafeRootDir, ap.Path, err)
		case err != nil:
			return fmt.Errorf("%w: %s: %w", ErrRootDirRemoval, ap.Path, err)
		}
		s.roots.setTrash(ap.FileSystemID, true)
		s.log.Info("root directory moved to the trash", slog.String("accessPoint", ap.ID), slog.String("path", ap.Path),
			slog.Duration("purgedAfter", s.trashWindow()))
		// The older entries whose window has passed: this delete's
		// directory is gone for its pods already, whatever a purge does.
		if left, err := s.purgeTrash(ctx, mnt, ap.FileSystemID, view); err != nil {
			s.log.Warn("trash not purged; will retry", slog.String("fileSystem", ap.FileSystemID), slog.String("error", err.Error()))
		} else {
			s.roots.setTrash(ap.FileSystemID, left)
		}
		return nil
	})
}

// withMount runs fn on a mount of fsID at a fresh directory of its own,
// holding one of the removal slots; the mount point is always released,
// whether fn succeeded, failed or was cancelled (releaseMount).
func (s *Service) withMount(ctx context.Context, fsID string, fn func(mnt string) error) error {
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
	if err := s.mounter.MountFileSystem(ctx, fsID, mnt); err != nil {
		_ = os.Remove(mnt)
		return fmt.Errorf("%w: mount %s: %w", ErrRootDirRemoval, fsID, err)
	}
	defer s.releaseMount(ctx, mnt)
	return fn(mnt)
}

// keptFor reports whether ap's directory is kept because other (a
// sharer's description, "" for none) reaches it, and counts and logs it.
func (s *Service) keptFor(ap *efs.AccessPoint, other string) bool {
	if other == "" {
		return false
	}
	s.roots.kept.Add(1)
	s.log.Warn("root directory kept: another volume reaches it",
		slog.String("accessPoint", ap.ID), slog.String("path", ap.Path), slog.String("other", other))
	return true
}

// removableRoot returns the root directory relative to the file system root,
// refusing what removal could turn into data loss: the root itself, a path
// that is not clean, a base path, and any access point no CSI driver made.
func removableRoot(ap *efs.AccessPoint, prov core.Provenance) (string, error) {
	p := ap.Path
	if !prov.CSI {
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

// sleepUntil waits until t by the controller's clock (Config.Now), or
// returns ctx's error. It reads no other clock: the wait is a timer of the
// duration the clock gives (in production the real clock, whose time EFS's
// listing lag passes in).
func (s *Service) sleepUntil(ctx context.Context, t time.Time) error {
	d := t.Sub(s.now())
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting %v for EFS's listing lag: %w", d.Round(time.Millisecond), ctx.Err())
	}
}
