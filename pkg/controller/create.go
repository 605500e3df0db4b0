package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// plan is everything a CreateVolume sends to EFS, computed from the request
// alone, so that every retry of the same call sends identical parameters.
type plan struct {
	name     string
	params   volume.Params
	capacity int64
	input    efs.CreateAccessPointInput // PosixUser is filled once a GID is reserved
}

// CreateVolume creates (or finds) the access point for req.Name.
//
// Protocol (docs/design.md, "Create"):
//  1. Validate and derive everything from the request: root directory, client
//     token and tags are functions of the name and parameters, never random.
//  2. Take the name lock without waiting; a concurrent call on the name is ABORTED.
//  3. Reserve a GID (if the class does not fix one).
//  4. CreateAccessPoint with the derived token. A repeated token means an
//     earlier attempt (maybe of a killed process, maybe with a lost answer)
//     created it: describe it, adopt it if compatible, else ALREADY_EXISTS.
//  5. Commit or release the GID; an unknown outcome keeps it reserved.
func (s *Service) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	p, err := s.plan(req)
	if err != nil {
		return nil, err
	}
	unlock, err := s.locks.TryLock(nameKey(p.name))
	if err != nil {
		return nil, err
	}
	defer unlock()

	ap, err := s.createOrAdopt(ctx, p)
	if err != nil {
		return nil, err
	}
	s.log.Info("volume ready", slog.String("name", p.name), slog.String("accessPoint", ap.ID),
		slog.String("path", ap.Path), slog.Int64("gid", posixGID(ap)))
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      volume.ProvisionedID(ap.FileSystemID, ap.ID),
		CapacityBytes: p.capacity,
	}}, nil
}

func (s *Service) plan(req *csi.CreateVolumeRequest) (*plan, error) {
	name := req.GetName()
	if name == "" {
		return nil, fmt.Errorf("%w: volume name is required", ErrInvalidRequest)
	}
	if err := volume.ValidateCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	capacity, err := capacityOf(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	if req.GetVolumeContentSource() != nil {
		return nil, fmt.Errorf("%w: volume content sources are not supported", ErrInvalidRequest)
	}
	params, err := volume.ParseParams(req.GetParameters())
	if err != nil {
		return nil, err
	}
	root, err := params.RootDir(name)
	if err != nil {
		return nil, err
	}
	tags := maps.Clone(s.tags)
	if tags == nil {
		tags = map[string]string{}
	}
	tags[TagCluster] = "true"
	tags[TagVolumeName] = name
	tags[TagCapacity] = capacityTag(capacity)
	if s.cluster != "" {
		tags[TagClusterID] = s.cluster
	}
	if params.BasePath != "" {
		tags[TagBasePath] = params.BasePath
	}
	if params.PVCName != "" && params.PVCNamespace != "" {
		tags[TagClaimName], tags[TagClaimNamespace] = params.PVCName, params.PVCNamespace
	}
	return &plan{
		name: name, params: params, capacity: capacity,
		input: efs.CreateAccessPointInput{
			FileSystemID: params.FileSystemID,
			ClientToken:  params.ClientToken(name),
			Path:         root,
			Tags:         tags,
		},
	}, nil
}

// maxYields bounds how often one call gives its GID up to another writer.
const maxYields = 3

// createOrAdopt runs steps 3-6 under the name lock.
func (s *Service) createOrAdopt(ctx context.Context, p *plan) (*efs.AccessPoint, error) {
	fsID := p.params.FileSystemID
	for yields := 0; ; yields++ {
		ap, err := s.createOnce(ctx, p)
		if err != nil || !p.params.NeedsGIDAllocation() || !s.verify.needed(fsID) {
			return ap, err
		}
		id := allocatedID(p.params.GID, ap)
		collide, err := s.verify.collides(ctx, ap, id)
		if err != nil || !collide {
			// On error the access point exists unverified and unanswered:
			// the retry adopts it and verifies again.
			return ap, err
		}
		// Step 6: an access point created before ours holds the GID, so no
		// one can have answered ours (see verifier): give it up. The GID stays
		// marked used in the allocator: it now stands for the other one.
		s.log.Warn("GID taken by another writer; yielding", "accessPoint", ap.ID, "gid", id, "name", p.name)
		if err := s.efs.DeleteAccessPoint(ctx, ap.ID); err != nil && !errors.Is(err, efs.ErrAccessPointNotFound) {
			return nil, err
		}
		if yields+1 >= maxYields {
			return nil, fmt.Errorf("%w: GID %d on %s is also used by another writer", ErrGIDContention, id, fsID)
		}
	}
}

// createOnce creates the access point or adopts the one an earlier attempt made.
func (s *Service) createOnce(ctx context.Context, p *plan) (*efs.AccessPoint, error) {
	var res *gid.Reservation
	uid, g := p.params.UID, p.params.GID
	if p.params.NeedsGIDAllocation() {
		r, err := s.reserveGID(ctx, p)
		if err != nil {
			return nil, err
		}
		res = r
		uid, g = p.params.Identity(r.GID())
	}
	in := p.input
	in.PosixUser = &efs.PosixUser{UID: uid, GID: g}
	in.CreationInfo = &efs.CreationInfo{OwnerUID: uid, OwnerGID: g, Permissions: p.params.DirectoryPerms}

	ap, err := s.efs.CreateAccessPoint(ctx, in)
	switch {
	case err == nil:
		commit(res)
		s.verify.created(ap.FileSystemID, ap.ID)
		return ap, nil
	case errors.Is(err, efs.ErrAlreadyExists):
		// Our token is taken: by an earlier attempt of this very volume (the
		// answer was lost, the caller timed out, or the process died), or on a
		// lenient server by an access point with other parameters. The GID we
		// reserved is not the one it carries.
		release(res)
		var ae *efs.AlreadyExistsError
		if !errors.As(err, &ae) || ae.AccessPointID == "" {
			return nil, fmt.Errorf("client token %q is taken but EFS named no access point: %w", in.ClientToken, err)
		}
		return s.adopt(ctx, p, ae.AccessPointID)
	case errors.Is(err, efs.ErrUnavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// Outcome unknown: the access point may exist with this GID. Keep the
		// reservation for the retry, which then sends identical parameters.
		s.keepInDoubt(p.name, res)
		return nil, err
	default:
		release(res)
		return nil, err
	}
}

// reserveGID returns the reservation an earlier attempt of this volume left
// in doubt (so a retry sends the GID the first attempt sent), or a new one.
func (s *Service) reserveGID(ctx context.Context, p *plan) (*gid.Reservation, error) {
	s.mu.Lock()
	r := s.inDoubt[p.name]
	delete(s.inDoubt, p.name)
	s.mu.Unlock()
	if r != nil {
		if g := r.GID(); g >= p.params.GIDRangeStart && g <= p.params.GIDRangeEnd {
			return r, nil
		}
		// The class changed between attempts; the old GID may be in use.
		r.Commit()
	}
	return s.gids.Reserve(ctx, p.params.FileSystemID, p.params.GIDRangeStart, p.params.GIDRangeEnd, p.name)
}

func (s *Service) keepInDoubt(name string, r *gid.Reservation) {
	if r == nil {
		return
	}
	s.mu.Lock()
	s.inDoubt[name] = r
	s.mu.Unlock()
}

// adopt returns the existing access point id if it is what p asks for. It
// describes the access point under the name lock, so it can never return one
// that a concurrent DeleteVolume removed (Delete needs the same lock).
func (s *Service) adopt(ctx context.Context, p *plan, id string) (*efs.AccessPoint, error) {
	ap, err := s.efs.DescribeAccessPoint(ctx, id)
	if errors.Is(err, efs.ErrAccessPointNotFound) {
		return nil, fmt.Errorf("%w: %s holds client token %q", ErrNotYetVisible, id, p.input.ClientToken)
	}
	if err != nil {
		return nil, err
	}
	if why := p.incompatibility(ap); why != "" {
		return nil, fmt.Errorf("%w: access point %s for volume %q: %s", ErrIncompatible, ap.ID, p.name, why)
	}
	if ap.PosixUser != nil && p.params.NeedsGIDAllocation() {
		s.gids.MarkUsed(ap.FileSystemID, allocatedID(p.params.GID, ap))
	}
	return ap, nil
}

// incompatibility says why ap cannot serve as the volume p describes, or "".
func (p *plan) incompatibility(ap *efs.AccessPoint) string {
	if ap.FileSystemID != p.params.FileSystemID {
		return fmt.Sprintf("file system %s, want %s", ap.FileSystemID, p.params.FileSystemID)
	}
	if p.params.ReuseAccessPoint {
		// The point of reuse: a re-created claim gets its old access point,
		// whatever its directory or size.
		return ""
	}
	if ap.Path != p.input.Path {
		return fmt.Sprintf("root directory %q, want %q", ap.Path, p.input.Path)
	}
	if c, ok := ap.Tags[TagCapacity]; ok && c != capacityTag(p.capacity) {
		return fmt.Sprintf("capacity %s bytes, want %d", c, p.capacity)
	}
	uid, g := posixIDs(ap)
	switch {
	case p.params.GID >= 0 && g != p.params.GID:
		return fmt.Sprintf("gid %d, want %d", g, p.params.GID)
	case p.params.UID >= 0 && uid != p.params.UID:
		return fmt.Sprintf("uid %d, want %d", uid, p.params.UID)
	}
	if p.params.NeedsGIDAllocation() {
		// The allocated GID went to whichever of uid/gid the class leaves open.
		alloc := g
		if p.params.GID >= 0 {
			alloc = uid
		}
		if alloc < p.params.GIDRangeStart || alloc > p.params.GIDRangeEnd {
			return fmt.Sprintf("allocated id %d outside [%d, %d]", alloc, p.params.GIDRangeStart, p.params.GIDRangeEnd)
		}
	}
	return ""
}

func posixIDs(ap *efs.AccessPoint) (uid, gid int64) {
	if ap.PosixUser == nil {
		return -1, -1
	}
	return ap.PosixUser.UID, ap.PosixUser.GID
}

func posixGID(ap *efs.AccessPoint) int64 {
	_, g := posixIDs(ap)
	return g
}

// defaultCapacity is reported when the CO asks for no size: EFS is elastic.
const defaultCapacity = 5 << 30

func capacityOf(r *csi.CapacityRange) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	switch {
	case req < 0 || lim < 0:
		return 0, fmt.Errorf("%w: capacity range must not be negative", ErrInvalidRequest)
	case lim > 0 && req > lim:
		return 0, fmt.Errorf("%w: required bytes %d exceed limit bytes %d", ErrInvalidRequest, req, lim)
	case req > 0:
		return req, nil
	case lim > 0 && lim < defaultCapacity:
		return lim, nil
	}
	return defaultCapacity, nil
}

// commit and release accept the nil reservation of a class with a fixed GID.
func commit(r *gid.Reservation) {
	if r != nil {
		r.Commit()
	}
}

func release(r *gid.Reservation) {
	if r != nil {
		r.Release()
	}
}

// allocatedID is the id the allocator handed out for ap: its gid, or its uid
// when the class fixed the gid.
func allocatedID(fixedGID int64, ap *efs.AccessPoint) int64 {
	uid, g := posixIDs(ap)
	if fixedGID >= 0 {
		return uid
	}
	return g
}
