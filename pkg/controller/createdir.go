package controller

// Directory volumes (provisioningMode efs-dir; docs/directory-volumes.md;
// the step tables in docs/design.md, "Directory volumes"): a volume is a
// directory of the file system that the controller makes through its own
// mount, with no access point. The protocol is the access point one's
// without EFS in the middle: the record (its key the path's,
// volume.DirToken) and the id it holds are written before the directory is
// made, a compare-and-swap write follows the mkdir before the answer, and
// DeleteVolume marks the record deleting before it removes anything.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/dirfd"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// dirPlan is the plan of a directory volume: the record key is the path's
// token, nothing is tagged (there is no access point to tag), and the
// volume ID must fit CSI's 128 bytes.
func (s *Service) dirPlan(name string, capacity int64, crossAccount bool, params volume.Params, root string, topology []*csi.Topology) (*plan, error) {
	if id := volume.DirID(params.FileSystemID, root); len(id) > volume.MaxIDLength {
		return nil, &volume.ParamError{Key: volume.ParamBasePath,
			Reason: fmt.Sprintf("the directory volume's ID %q would be %d bytes; CSI allows %d: shorten basePath or subPathPattern", id, len(id), volume.MaxIDLength)}
	}
	if s.mounter == nil {
		return nil, &volume.ParamError{Key: volume.ParamProvisioningMode,
			Reason: fmt.Sprintf("%q needs the controller to mount file systems, and this one has no mounter", volume.ProvisioningModeDirectory)}
	}
	// Before the record and the name locks: a controller that may not
	// mount (the chart's default, unprivileged container) is told so at
	// once, not after a record and a failed mount.
	if check := s.cfg.DirPreflight; check != nil {
		if err := check(); err != nil {
			return nil, fmt.Errorf("%w: provisioningMode %q: this controller cannot make directories: %v; "+
				"install the chart with controller.directoryVolumes=true (helm --set controller.directoryVolumes=true), "+
				"which runs the controller container privileged", ErrNotSupported, volume.ProvisioningModeDirectory, err)
		}
	}
	return &plan{
		Plan: core.Plan{Name: name, Params: params, Capacity: capacity, Cluster: s.cluster, Dir: true,
			Input: efs.CreateAccessPointInput{FileSystemID: params.FileSystemID, ClientToken: volume.DirToken(root), Path: root}},
		crossAccount: crossAccount, topology: topology,
	}, nil
}

// dirAnswer answers a CreateVolume of a directory volume, whose record
// the create (core's createDir) answered, still under the name locks.
func (s *Service) dirAnswer(ctx context.Context, p *plan, rec *journal.Record) (*csi.CreateVolumeResponse, error) {
	volCtx, err := s.volumeContext(ctx, p.backend, p.crossAccount, p.Params.AZ, rec.FileSystem)
	if err != nil {
		return nil, err
	}
	// The directory's owner, for the pod's securityContext (fsGroup or
	// supplementalGroups: the gid); new keys beside upstream's.
	if volCtx == nil {
		volCtx = map[string]string{}
	}
	volCtx[CtxUID] = strconv.FormatInt(rec.UID, 10)
	volCtx[CtxGID] = strconv.FormatInt(rec.GID, 10)
	s.log.Info("volume ready", slog.String("name", p.Name), slog.String("directory", rec.Path),
		slog.Int64("uid", rec.UID), slog.Int64("gid", rec.GID))
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           volume.DirID(rec.FileSystem, rec.Path),
		CapacityBytes:      p.Capacity,
		VolumeContext:      volCtx,
		AccessibleTopology: p.topology,
	}}, nil
}

// makeDir makes rec's directory on its file system, through this
// controller's mount of it, one component at a time from the mount's root
// through descriptors (pkg/dirfd: no symlink followed, no mount crossed).
// Missing components above it are made root's, mode 0755 (as a base path
// an administrator makes); the directory itself is made with mode 0, then
// given rec's uid and gid, then perms: a directory of mode 0 owned by this
// process is one a killed attempt made, which a retry finishes. An existing
// directory is used as it is (as EFS uses an access point's existing
// root): ensureUniqueDirectory "false" names one on purpose. made: this
// call made it.
func (s *Service) makeDir(ctx context.Context, rec *journal.Record, perms string) (made bool, err error) {
	mode, err := strconv.ParseUint(perms, 8, 32)
	if err != nil {
		return false, &volume.ParamError{Key: volume.ParamDirectoryPerms, Reason: err.Error()}
	}
	mnt, release, err := s.dirMount(ctx, rec.FileSystem)
	if err != nil {
		return false, err
	}
	defer release()
	made, err = mkdirAt(mnt, rec.Path, int(rec.UID), int(rec.GID), uint32(mode))
	if err != nil {
		return false, fmt.Errorf("%w: directory %s on %s: %w", ErrDirCreation, rec.Path, rec.FileSystem, err)
	}
	if made {
		s.log.Info("directory made", slog.String("fileSystem", rec.FileSystem), slog.String("path", rec.Path),
			slog.Int64("uid", rec.UID), slog.Int64("gid", rec.GID), slog.String("mode", perms))
	}
	return made, nil
}

// MountPrivileges is nil when this process may make directory volumes:
// mount a file system (CAP_SYS_ADMIN) and give a directory its owner
// (CAP_CHOWN); else an error naming what it lacks. Capabilities that
// cannot be read are no answer (nil): the mount says.
func MountPrivileges() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil
	}
	var missing []string
	for _, c := range []struct {
		bit  int
		name string
	}{{unix.CAP_SYS_ADMIN, "CAP_SYS_ADMIN (mount)"}, {unix.CAP_CHOWN, "CAP_CHOWN (chown)"}} {
		if data[c.bit/32].Effective&(1<<(uint(c.bit)%32)) == 0 {
			missing = append(missing, c.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("its process lacks %s", strings.Join(missing, " and "))
	}
	return nil
}

// ErrDirCreation: a directory volume's directory could not be made; the
// record stays, and the retry makes it.
var ErrDirCreation = errors.New("directory creation failed")

// mkdirAt is makeDir's walk below root (a mount point).
func mkdirAt(root, path string, uid, gid int, mode uint32) (made bool, err error) {
	comps := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for _, c := range comps {
		if c == "" || c == "." || c == ".." {
			return false, fmt.Errorf("%w: %q", volume.ErrUnsafePath, path)
		}
	}
	fd, err := dirfd.Retry(func() (int, error) {
		return unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return false, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer func() { unix.Close(fd) }()
	for i, c := range comps[:len(comps)-1] {
		next, err := dirfd.Open(fd, c)
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(fd, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				return false, &os.PathError{Op: "mkdir", Path: "/" + strings.Join(comps[:i+1], "/"), Err: err}
			}
			next, err = dirfd.Open(fd, c)
		}
		if err != nil {
			return false, &os.PathError{Op: "open", Path: "/" + strings.Join(comps[:i+1], "/"), Err: err}
		}
		unix.Close(fd)
		fd = next
	}
	name := comps[len(comps)-1]
	err = unix.Mkdirat(fd, name, 0)
	made = err == nil
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return false, &os.PathError{Op: "mkdir", Path: path, Err: err}
	}
	d, err := dirfd.Open(fd, name)
	if err != nil {
		return made, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(d)
	var st unix.Stat_t
	if err := unix.Fstat(d, &st); err != nil {
		return made, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if !made && (st.Mode&0o7777 != 0 || int(st.Uid) != os.Geteuid()) {
		return false, nil // someone's directory: used as it is
	}
	if err := unix.Fchown(d, uid, gid); err != nil {
		return made, &os.PathError{Op: "chown", Path: path, Err: err}
	}
	if err := unix.Fchmod(d, mode); err != nil {
		return made, &os.PathError{Op: "chmod", Path: path, Err: err}
	}
	return made, nil
}

// unmakeDir removes the (empty) directory of rec that this create made
// and nobody answered. A directory that is not empty is kept (logged).
func (s *Service) unmakeDir(ctx context.Context, rec *journal.Record) error {
	mnt, release, err := s.dirMount(ctx, rec.FileSystem)
	if err != nil {
		return err
	}
	defer release()
	dir, name := pathSplit(rec.Path)
	fd, err := openBelow(mnt, dir)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	defer unix.Close(fd)
	err = unix.Unlinkat(fd, name, unix.AT_REMOVEDIR)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		s.log.Info("directory removed", slog.String("path", rec.Path), slog.String("reason", "made while its volume was being deleted; never answered"))
		return nil
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		s.log.Warn("directory kept: made while its volume was being deleted, and not empty", slog.String("path", rec.Path))
		return nil
	}
	return &os.PathError{Op: "rmdir", Path: rec.Path, Err: err}
}

// pathSplit splits an absolute path into its parent's components and its
// last one.
func pathSplit(p string) ([]string, string) {
	comps := strings.Split(strings.TrimPrefix(p, "/"), "/")
	return comps[:len(comps)-1], comps[len(comps)-1]
}

// openBelow opens root/comps... through descriptors (pkg/dirfd).
func openBelow(root string, comps []string) (int, error) {
	fd, err := dirfd.Retry(func() (int, error) {
		return unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return -1, err
	}
	for _, c := range comps {
		next, err := dirfd.Open(fd, c)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// dirMounts are the controller's mounts of whole file systems for making
// directories: one per file system, shared by the creates under way and
// released by the last (a storm mounts once; a lone create mounts for
// itself). The mount points are root removal's kind (mountPointPrefix), so
// a killed process's are cleaned up alike (CleanStaleMountPoints).
type dirMounts struct {
	mu sync.Mutex
	m  map[dirMountKey]*dirMount
}

// dirMountKey: a file system through one backend's mounter.
type dirMountKey struct {
	mounter FileSystemMounter
	fsID    string
}

type dirMount struct {
	users int
	ready chan struct{} // closed once path and err are set
	path  string
	err   error
}

// dirMount returns the mount point of fsID's root, and the func that
// releases it (the last user's release unmounts).
func (s *Service) dirMount(ctx context.Context, fsID string) (string, func(), error) {
	key := dirMountKey{s.mounter, fsID}
	d := s.dirs
	d.mu.Lock()
	if d.m == nil {
		d.m = map[dirMountKey]*dirMount{}
	}
	m := d.m[key]
	first := m == nil
	if first {
		m = &dirMount{ready: make(chan struct{})}
		d.m[key] = m
	}
	m.users++
	d.mu.Unlock()
	release := func() { s.releaseDirMount(ctx, key, m) }
	if first {
		m.path, m.err = s.mountRoot(ctx, fsID)
		if m.err != nil {
			d.mu.Lock()
			if d.m[key] == m {
				delete(d.m, key) // the next create mounts again
			}
			d.mu.Unlock()
		}
		close(m.ready)
	} else {
		select {
		case <-m.ready:
		case <-ctx.Done():
			release()
			return "", nil, fmt.Errorf("%w: waiting for the mount of %s: %w", ErrDirCreation, fsID, ctx.Err())
		}
	}
	if m.err != nil {
		release()
		return "", nil, m.err
	}
	return m.path, release, nil
}

func (s *Service) releaseDirMount(ctx context.Context, key dirMountKey, m *dirMount) {
	d := s.dirs
	d.mu.Lock()
	m.users--
	last := m.users == 0
	if last && d.m[key] == m {
		delete(d.m, key)
	}
	d.mu.Unlock()
	if last && m.err == nil && m.path != "" {
		s.releaseMount(ctx, m.path)
	}
}

// mountRoot mounts fsID's root at a fresh mount point of its own.
func (s *Service) mountRoot(ctx context.Context, fsID string) (string, error) {
	mnt, err := os.MkdirTemp(s.tmpDir, mountPointPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", fmt.Errorf("%w: mount point: %v", ErrDirCreation, err)
	}
	if err := s.mounter.MountFileSystem(ctx, fsID, mnt); err != nil {
		// Released as a mount point all the same: a mount cut short (a
		// cancelled call, a helper that failed late) may have happened.
		s.releaseMount(ctx, mnt)
		return "", fmt.Errorf("%w: mount %s (directory volumes need a controller that may mount file systems: the chart's controller.directoryVolumes): %w", ErrDirCreation, fsID, err)
	}
	return mnt, nil
}

// dirVolumeIDs are the IDs of this cluster's directory volumes (the
// record's, not being deleted), for ListVolumes.
func (s *Service) dirVolumeIDs(ctx context.Context) ([]string, error) {
	var ids []string
	err := s.journal.Volumes(ctx, "", func(recs []*journal.Record) error {
		for _, r := range recs {
			if r.Dir && !r.Deleting && API(r.API) == s.api {
				ids = append(ids, volume.DirID(r.FileSystem, r.Path))
			}
		}
		return nil
	})
	return ids, err
}

// dirSource is the EFS client with the record's directory volumes in
// every listing of a file system, under the allocator's Source
// (watchedSource): each listing of its access points is followed by a
// page of stand-ins carrying their ids (core.DirStandIn), so that no create
// picks an id a directory volume holds, after a restart too: the
// allocator's (directory volumes) count them used, and access point
// creates under GID tokens, which hold no id entry and walk their own
// sequence of ids, skip them as ids carried outside the GID token
// protocol (a stand-in's token is no GID token: skipped).
//
// The record is read by its index of directory volumes (one List per
// listing, once a minute per file system), on every file system, whether
// this process has provisioned directory volumes there or not: a
// directory volume's id is held by its id entry and also by its record,
// which every replica's allocator reads before it picks an id, so that
// the loss of the id entry alone (its record Lease deleted by hand, before
// a replica that knew it restores it: pkg/kube, leasedamage.go) does not
// give the id to an access point. A directory volume made since the
// listing is held by its id entry alone until the next one.
type dirSource struct {
	EFS
	j *journal.Journal
}

func (d dirSource) ListAccessPoints(ctx context.Context, fsID string, fn func([]efs.AccessPoint) error) error {
	if err := d.EFS.ListAccessPoints(ctx, fsID, fn); err != nil {
		return err
	}
	var page []efs.AccessPoint
	err := d.j.DirVolumes(ctx, fsID, func(recs []*journal.Record) error {
		for _, r := range recs {
			if r.Allocated != journal.NoID {
				page = append(page, *core.DirStandIn(r))
			}
		}
		return nil
	})
	if err != nil || len(page) == 0 {
		return err
	}
	return fn(page)
}
