package controller

// VolumeSnapshots, restores and clones (docs/snapshots.md): copies on the
// file system itself, through the controller's mount, owned by the record
// (pkg/snapshot). Access point and directory volumes of Amazon EFS; S3
// Files volumes are refused (ErrNotSupported).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/snapshot"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// snapshots is the process's snapshot manager, made on first use: nil
// (ErrNotSupported) for a controller that may not mount file systems.
func (s *Service) snapshots() (*snapshot.Manager, error) {
	if s.mounter == nil || s.cfg.Copier == nil {
		return nil, fmt.Errorf("%w: snapshots and clones need a controller that mounts file systems (the chart's controller.directoryVolumes)", ErrNotSupported)
	}
	if check := s.cfg.DirPreflight; check != nil {
		if err := check(); err != nil {
			return nil, fmt.Errorf("%w: snapshots and clones: this controller cannot mount file systems: %v; "+
				"install the chart with controller.directoryVolumes=true, which runs the controller container privileged", ErrNotSupported, err)
		}
	}
	s.snapOnce.Do(func() {
		s.snaps.Store(snapshot.New(snapshot.Config{
			Store: s.cfg.Journal, Mount: snapMounter{s}, Copy: s.cfg.Copier, Now: s.now, Logger: s.log,
			VolumeLive: s.volumeLive, Wait: s.cfg.SnapshotWait,
		}))
	})
	return s.snaps.Load(), nil
}

// snapMounter mounts a file system for the snapshot manager: the mount
// directory volumes share (dirMount).
type snapMounter struct{ s *Service }

func (m snapMounter) Mount(ctx context.Context, fsID string) (string, func(), error) {
	return m.s.dirMount(ctx, fsID)
}

// volumeLive reports whether the record holds the volume named name (or
// the directory volume at path) on fsID, not being deleted.
func (s *Service) volumeLive(ctx context.Context, fsID, name, path string) (bool, error) {
	for _, key := range []string{volume.NameToken(name), volume.DirToken(path)} {
		rec, err := s.journal.Volume(ctx, fsID, key)
		switch {
		case errors.Is(err, journal.ErrNotFound):
		case err != nil:
			return false, err
		case !rec.Deleting:
			return true, nil
		}
	}
	return false, nil
}

// CreateSnapshot copies the source volume's directory into the file
// system's snapshot area, once per name: ABORTED while the copy goes on
// (past a bounded wait), the snapshot ready once it is whole.
func (s *Service) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if req.GetName() == "" {
		return nil, fmt.Errorf("%w: snapshot name is required", ErrInvalidRequest)
	}
	if req.GetSourceVolumeId() == "" {
		return nil, fmt.Errorf("%w: source volume ID is required", ErrInvalidRequest)
	}
	m, err := s.snapshots()
	if err != nil {
		return nil, err
	}
	src, err := s.snapshotSource(ctx, req.GetSourceVolumeId())
	if err != nil {
		return nil, err
	}
	snap, err := m.Create(ctx, req.GetName(), src)
	if err != nil {
		return nil, err
	}
	if !snap.Ready {
		return nil, fmt.Errorf("%w: snapshot %q of %s", snapshot.ErrPending, req.GetName(), req.GetSourceVolumeId())
	}
	return &csi.CreateSnapshotResponse{Snapshot: csiSnapshot(snap)}, nil
}

func csiSnapshot(snap *snapshot.Snapshot) *csi.Snapshot {
	return &csi.Snapshot{SnapshotId: snap.ID, SourceVolumeId: snap.Source, SizeBytes: snap.Size,
		CreationTime: timestamppb.New(snap.Created), ReadyToUse: snap.Ready}
}

// snapshotSource is what a snapshot or clone of the volume volumeID
// copies: an access point's root directory, a directory volume, or a
// directory of a static volume; NOT_FOUND for a volume that does not
// exist.
func (s *Service) snapshotSource(ctx context.Context, volumeID string) (snapshot.Source, error) {
	id, err := volume.ParseID(volumeID)
	if err != nil {
		return snapshot.Source{}, fmt.Errorf("%w: source volume %q: %w", snapshot.ErrNotFound, volumeID, err)
	}
	if id.API != volume.APIEFS {
		return snapshot.Source{}, fmt.Errorf("%w: snapshots and clones of S3 Files volumes", ErrUnimplemented)
	}
	src := snapshot.Source{VolumeID: volumeID, FileSystem: id.FileSystemID, Path: id.Path, UID: -1, GID: -1}
	if id.AccessPointID != "" {
		ap, err := s.efs.DescribeAccessPoint(ctx, id.AccessPointID)
		if errors.Is(err, efs.ErrAccessPointNotFound) {
			return snapshot.Source{}, fmt.Errorf("%w: source volume %s", snapshot.ErrNotFound, volumeID)
		}
		if err != nil {
			return snapshot.Source{}, err
		}
		// A static "fs:/sub:fsap" ID names a directory below the root.
		if src.Path, err = volume.SafeJoin(cmp.Or(ap.Path, "/"), id.Path); err != nil {
			return snapshot.Source{}, err
		}
		if ap.PosixUser != nil {
			src.UID, src.GID = ap.PosixUser.UID, ap.PosixUser.GID
		}
	} else if id.Dir {
		rec, err := s.journal.Volume(ctx, id.FileSystemID, volume.DirToken(id.Path))
		switch {
		case errors.Is(err, journal.ErrNotFound):
			return snapshot.Source{}, fmt.Errorf("%w: source volume %s", snapshot.ErrNotFound, volumeID)
		case err != nil:
			return snapshot.Source{}, err
		}
		src.UID, src.GID = rec.UID, rec.GID
	}
	if src.Path == "" || src.Path == "/" || volume.InSnapshots(src.Path) || volume.InTrash(src.Path) {
		return snapshot.Source{}, fmt.Errorf("%w: a snapshot of %q would copy the whole file system, or the controller's own directories", ErrInvalidRequest, volumeID)
	}
	return src, nil
}

// DeleteSnapshot removes the snapshot's copy, then its record entry: OK
// for an ID of no snapshot; FAILED_PRECONDITION while a restore from it
// is unfinished.
func (s *Service) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, fmt.Errorf("%w: snapshot ID is required", ErrInvalidRequest)
	}
	m, err := s.snapshots()
	if err != nil {
		return nil, err
	}
	if err := m.Delete(ctx, req.GetSnapshotId()); err != nil {
		return nil, err
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots lists the record's snapshots, by ID, a page at a time
// (starting_token: the index of the first; an unknown one is ABORTED).
func (s *Service) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	m, err := s.snapshots()
	if err != nil {
		return nil, err
	}
	var snaps []*snapshot.Snapshot
	if id := req.GetSnapshotId(); id != "" {
		snap, err := m.Get(ctx, id)
		switch {
		case errors.Is(err, snapshot.ErrNotFound):
		case err != nil:
			return nil, err
		case req.GetSourceVolumeId() == "" || snap.Source == req.GetSourceVolumeId():
			snaps = append(snaps, snap)
		}
	} else if snaps, err = m.List(ctx, req.GetSourceVolumeId()); err != nil {
		return nil, err
	}
	start := 0
	if t := req.GetStartingToken(); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 || n > len(snaps) {
			return nil, fmt.Errorf("%w: %q", ErrInvalidStartingToken, t)
		}
		start = n
	}
	end := len(snaps)
	if mx := int(req.GetMaxEntries()); mx > 0 && start+mx < end {
		end = start + mx
	}
	resp := &csi.ListSnapshotsResponse{}
	for _, snap := range snaps[start:end] {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: csiSnapshot(snap)})
	}
	if end < len(snaps) {
		resp.NextToken = strconv.Itoa(end)
	}
	return resp, nil
}

// restoreSource is what a CreateVolume from content copies: a ready
// snapshot, or a volume (a clone). NOT_FOUND for one that does not exist.
func (s *Service) restoreSource(ctx context.Context, cs *csi.VolumeContentSource) (snapshot.Source, error) {
	if snap := cs.GetSnapshot(); snap != nil {
		m, err := s.snapshots()
		if err != nil {
			return snapshot.Source{}, err
		}
		got, err := m.Get(ctx, snap.GetSnapshotId())
		if err != nil {
			return snapshot.Source{}, err
		}
		if !got.Ready {
			return snapshot.Source{}, fmt.Errorf("%w: snapshot %s", snapshot.ErrNotReady, got.ID)
		}
		return snapshot.Source{SnapshotID: got.ID, SnapshotLife: got.Life, FileSystem: got.FileSystem, Path: snapshot.DataDir(got.CopyKey()),
			UID: got.UID, GID: got.GID}, nil
	}
	if v := cs.GetVolume(); v != nil {
		if _, err := s.snapshots(); err != nil {
			return snapshot.Source{}, err
		}
		return s.snapshotSource(ctx, v.GetVolumeId())
	}
	return snapshot.Source{}, fmt.Errorf("%w: a volume content source names a snapshot or a volume", ErrInvalidRequest)
}

// restore fills the volume resp answers from src (restoreSource) before
// it is answered: ABORTED while the copy goes on.
// The class's parameters were validated (ParseParams) when the volume
// was made.
func (s *Service) restore(ctx context.Context, name string, resp *csi.CreateVolumeResponse, src snapshot.Source, params map[string]string) error {
	m, err := s.snapshots()
	if err != nil {
		return err
	}
	id, err := volume.ParseID(resp.GetVolume().GetVolumeId())
	if err != nil {
		return err
	}
	t := snapshot.Target{Name: name, VolumeID: resp.GetVolume().GetVolumeId(), FileSystem: id.FileSystemID, Path: id.Path, UID: -1, GID: -1,
		KeepOwners: params[volume.ParamRestoreOwnership] == volume.RestoreOwnershipSource}
	if perms := params[volume.ParamDirectoryPerms]; perms != "" {
		mode, err := strconv.ParseUint(perms, 8, 32)
		if err != nil {
			return err
		}
		t.Mode = uint32(mode)
	}
	if id.AccessPointID != "" {
		ap, err := s.efs.DescribeAccessPoint(ctx, id.AccessPointID)
		if err != nil {
			return err
		}
		t.Path = ap.Path
		if ap.PosixUser != nil {
			t.UID, t.GID = ap.PosixUser.UID, ap.PosixUser.GID
		}
		if ci := ap.CreationInfo; ci != nil {
			t.UID, t.GID = ci.OwnerUID, ci.OwnerGID
			if mode, err := strconv.ParseUint(ci.Permissions, 8, 32); err == nil {
				t.Mode = uint32(mode)
			}
		}
	} else if id.Dir {
		rec, err := s.journal.Volume(ctx, id.FileSystemID, volume.DirToken(id.Path))
		if err != nil {
			return err
		}
		t.UID, t.GID = rec.UID, rec.GID
	}
	if src.FileSystem != t.FileSystem {
		return fmt.Errorf("%w: the source is on %s, the new volume on %s", snapshot.ErrOtherFileSystem, src.FileSystem, t.FileSystem)
	}
	if err := m.BeginRestore(ctx, t, src); err != nil {
		return err
	}
	return m.Restore(ctx, t, src)
}

// createReader answers a read-only volume of a ready snapshot, with no
// copy: its ID names the snapshot's copy, which the node mounts
// read-only; the record's entry (snapshot.Manager.AddReader) keeps the
// snapshot from being deleted while the volume lives.
func (s *Service) createReader(ctx context.Context, req *csi.CreateVolumeRequest, b Backend) (*csi.CreateVolumeResponse, error) {
	p, err := s.plan(ctx, req)
	if err != nil {
		return nil, err
	}
	m, err := s.snapshots()
	if err != nil {
		return nil, err
	}
	snapID := req.GetVolumeContentSource().GetSnapshot().GetSnapshotId()
	fsID, _, ok := snapshot.ParseID(snapID)
	if !ok {
		return nil, fmt.Errorf("%w: %q is not a snapshot ID of this driver", snapshot.ErrNotFound, snapID)
	}
	if fsID != p.Params.FileSystemID {
		return nil, fmt.Errorf("%w: the snapshot is on %s, the class's file system is %s", snapshot.ErrOtherFileSystem, fsID, p.Params.FileSystemID)
	}
	claim := ""
	if ns, name := req.GetParameters()[volume.ParamPVCNamespace], req.GetParameters()[volume.ParamPVCName]; ns != "" && name != "" {
		claim = ns + "/" + name
	}
	id, err := m.AddReader(ctx, req.GetName(), snapID, claim)
	if err != nil {
		return nil, err
	}
	volCtx, err := s.volumeContext(ctx, b, p.crossAccount, p.Params.AZ, fsID)
	if err != nil {
		return nil, err
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           id,
		CapacityBytes:      p.Capacity,
		VolumeContext:      volCtx,
		AccessibleTopology: p.topology,
		ContentSource:      req.GetVolumeContentSource(),
	}}, nil
}

// deleteReader removes the record's entry of a read-only volume from a
// snapshot: its data is the snapshot's, and stays.
func (s *Service) deleteReader(ctx context.Context, id volume.ID) (*csi.DeleteVolumeResponse, error) {
	m, err := s.snapshots()
	if err != nil {
		return nil, err
	}
	if err := m.RemoveReader(ctx, id, "DeleteVolume"); err != nil {
		return nil, err
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// CollectReaders removes the record's entries of read-only volumes given
// up (snapshot.Manager.CollectReaders): the orphan collector's, each
// round.
func (s *Service) CollectReaders(ctx context.Context, named func(volumeID string) bool,
	claimGone func(ctx context.Context, namespace, name string) (bool, error), grace time.Duration) (int, error) {
	m, err := s.snapshots()
	if err != nil {
		return 0, nil // no snapshots here: nothing to collect
	}
	return m.CollectReaders(ctx, named, claimGone, grace)
}

// stopRestore stops a copy this process runs into the volume being
// deleted (snapshot.Manager.StopRestore).
func (s *Service) stopRestore(volumeID string) {
	m := s.snaps.Load()
	if m == nil {
		return // no restore began in this process
	}
	if id, err := volume.ParseID(volumeID); err == nil {
		m.StopRestore(id.FileSystemID, volumeID)
	}
}

// forgetRestore ends the record of a restore into a volume deleted.
func (s *Service) forgetRestore(ctx context.Context, volumeID string) error {
	m := s.snaps.Load()
	if m == nil {
		return nil // no restore began in this process: the collector's
	}
	id, err := volume.ParseID(volumeID)
	if err != nil {
		return nil
	}
	return m.Forget(ctx, id.FileSystemID, volumeID)
}

// CollectRestores removes the record's restore entries of volumes whose
// record is gone, and the snapshot copies of no snapshot's life (the
// orphan collector's, each round).
func (s *Service) CollectRestores(ctx context.Context) (int, error) {
	m, err := s.snapshots()
	if err != nil {
		return 0, nil // no snapshots here: nothing to collect
	}
	n, err := m.CollectRestores(ctx)
	if err != nil {
		return n, err
	}
	k, err := m.CollectCopies(ctx)
	return n + k, err
}
