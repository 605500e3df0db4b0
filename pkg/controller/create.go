package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// plan is everything a CreateVolume sends to EFS, computed from the request
// alone, so that every retry of the same call sends identical parameters.
type plan struct {
	name         string
	params       volume.Params
	capacity     int64
	cluster      string                     // this controller's cluster ID (Config.ClusterID)
	topology     []*csi.Topology            // AccessibleTopology of the answer (enforceZoneAffinity)
	input        efs.CreateAccessPointInput // PosixUser is filled once a GID is reserved
	backend      Backend
	crossAccount bool // provisioner secret crossaccount (see volumeContext)
	// dir: a directory volume (provisioningMode efs-dir, createdir.go);
	// input.ClientToken is then its record key (volume.DirToken), never sent.
	dir bool
	// placed: the class names several file systems, and the place entry
	// of this key says which holds the volume (placement.go).
	placed string
}

// locks are the name locks a create of the volume holds: its name's, and
// its client token's when that is not the name (a long name's hash,
// reuseAccessPoint's claim hash), which a DeleteVolume of an access point
// without a record recovers from the token alone.
func (p *plan) locks() []string {
	if p.input.ClientToken == p.name {
		return []string{core.NameKey(p.name)}
	}
	return []string{core.NameKey(p.name), core.NameKey(p.input.ClientToken)}
}

// CreateVolume creates (or finds) the access point for req.Name.
//
// Protocol (docs/design.md, "Create"):
//  1. Validate and derive everything from the request: root directory, client
//     token and tags are functions of the name and parameters, never random;
//     with enforceZoneAffinity, the topology is a function of the file
//     system's zone, which never changes (topology.go).
//  2. Take the name lock without waiting; a concurrent call on the name is ABORTED.
//  3. Reserve a GID (if the class does not fix one).
//  4. CreateAccessPoint with the derived token. A repeated token means an
//     earlier attempt (maybe of a killed process, maybe with a lost answer)
//     created it: describe it, adopt it if compatible, else ALREADY_EXISTS.
//  5. Commit or release the GID; an unknown outcome keeps it reserved.
//
// The class's provisioningMode and the provisioner secrets choose the
// backend (backend.go): the API, and whose credentials (awsRoleArn).
func (s *Service) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	b, err := secretsBackend(apiOfMode(req.GetParameters()), req.GetSecrets())
	if err != nil {
		return nil, err
	}
	svc, err := s.backend(ctx, b)
	if err != nil {
		return nil, err
	}
	resp, err := svc.createVolume(ctx, req, b)
	if errors.Is(err, efs.ErrAccessDenied) && b != (Backend{}) {
		s.dropBackend(b) // a role that refuses this controller keeps nothing
	}
	return resp, err
}

func (s *Service) createVolume(ctx context.Context, req *csi.CreateVolumeRequest, b Backend) (*csi.CreateVolumeResponse, error) {
	p, err := s.plan(ctx, req)
	if err != nil {
		return nil, err
	}
	p.backend = b
	unlock, err := s.locks.TryLock(p.locks()...)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Whatever this create answers, a delete of it must go the whole way.
	s.finished.dropNames(p.locks())
	if p.dir {
		return s.createDirVolume(ctx, p)
	}

	ap := s.repeat(ctx, p)
	if ap == nil {
		if ap, err = s.createSeen(ctx, p); err != nil {
			return nil, err
		}
		s.remember(p.name, ap)
	}
	volCtx, err := s.volumeContext(ctx, p.backend, p.crossAccount, p.params.AZ, ap.FileSystemID)
	if err != nil {
		return nil, err
	}
	s.log.Info("volume ready", slog.String("name", p.name), slog.String("accessPoint", ap.ID),
		slog.String("path", ap.Path), slog.Int64("gid", posixGID(ap)))
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           s.volumeID(ap),
		CapacityBytes:      p.capacity,
		VolumeContext:      volCtx,
		AccessibleTopology: p.topology,
	}}, nil
}

// createSeen is createOrAdopt, and with root removal on it is seen by
// the deletes of this process from before its record is written until
// goneMemory after it ends (rootDirs.creating): a delete whose listing and
// record read came earlier still sees it before it removes a directory.
func (s *Service) createSeen(ctx context.Context, p *plan) (*efs.AccessPoint, error) {
	if !s.delRoot {
		return s.createOrAdopt(ctx, p)
	}
	done := s.fs(p.params.FileSystemID).creating(p.input.ClientToken, p.name, p.input.Path, s.now)
	ap, err := s.createOrAdopt(ctx, p)
	done(ap)
	return ap, err
}

// repeatFresh is how long this process answers a repeated CreateVolume from
// memory alone. A delete through this process drops the memory under the
// volume's locks, so within the process the memory is exact; the bound
// covers what it cannot see (an access point deleted behind its back, by
// hand or by another replica), which an older answer is checked against with
// one Describe. Provisioner retries and duplicate callers come within
// seconds.
const repeatFresh = time.Minute

// repeat answers a repeated CreateVolume of a volume this process answered
// before, without a mutation and without verification (it was verified when
// first answered): from memory if the answer is fresh, else from one
// Describe; and in both cases only once a read of the record, the last
// step before the answer, shows the volume still recorded and not being
// deleted. A delete through this process drops the memory, but one
// through another replica marks only the record (before it deletes
// anything), so no memory alone can say the access point is not being
// deleted now. nil: go the whole way (unknown, gone, changed, being
// deleted, or a read failed).
func (s *Service) repeat(ctx context.Context, p *plan) *efs.AccessPoint {
	ap := s.remembered(ctx, p)
	if ap == nil {
		return nil
	}
	rec, err := s.journal.Volume(ctx, ap.FileSystemID, p.input.ClientToken)
	if err != nil || rec.Deleting || !ownership.Agrees(rec, ap) {
		return nil
	}
	return ap
}

// remembered is the access point this process answered for p's volume:
// from memory if fresh, else as one Describe shows it; nil if none.
func (s *Service) remembered(ctx context.Context, p *plan) *efs.AccessPoint {
	st := s.fs(p.params.FileSystemID)
	known, ok := st.answered(p.name)
	if !ok {
		return nil
	}
	if s.now().Sub(known.at) < repeatFresh && p.check(known.ap) == nil {
		return known.ap
	}
	ap, err := s.efs.DescribeAccessPoint(ctx, known.ap.ID)
	if err != nil || p.check(ap) != nil {
		if errors.Is(err, efs.ErrAccessPointNotFound) {
			st.dropAnswer(known.ap.ID)
		}
		return nil
	}
	s.gids.Record(*ap)
	st.remember(p.name, ap, s.now())
	return ap
}

// remember records an answered volume (under its name lock).
func (s *Service) remember(name string, ap *efs.AccessPoint) {
	s.fs(ap.FileSystemID).remember(name, ap, s.now())
	s.finished.drop(s.finishedKey(ap.FileSystemID, ap.ID))
}

func (s *Service) plan(ctx context.Context, req *csi.CreateVolumeRequest) (*plan, error) {
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
	crossAccount, err := crossAccountMode(req.GetSecrets())
	if err != nil {
		return nil, err
	}
	if req.GetVolumeContentSource() != nil {
		return nil, fmt.Errorf("%w: volume content sources are not supported", ErrInvalidRequest)
	}
	classParams, err := s.resolveFileSystem(ctx, req.GetParameters())
	if err != nil {
		return nil, err
	}
	params, err := volume.ParseParams(classParams)
	if err != nil {
		return nil, err
	}
	s.warnIgnored(params.FileSystemID, volume.IgnoredParams(classParams))
	placed := ""
	if params.FileSystemIDs != "" {
		if params.FileSystemID, err = s.place(ctx, name, params, req.GetAccessibilityRequirements()); err != nil {
			return nil, err
		}
		placed = volume.NameToken(name)
	}
	root, err := params.RootDir(name)
	if err != nil {
		return nil, err
	}
	// Before the name lock and any mutation: a volume that could not be
	// used where it is requested is never made.
	topology, err := s.topology(ctx, params, req.GetAccessibilityRequirements())
	if err != nil {
		return nil, err
	}
	if params.Dir() {
		p, err := s.dirPlan(name, capacity, crossAccount, params, root, topology)
		if p != nil {
			p.placed = placed
		}
		return p, err
	}
	tags, err := s.tagsFor(name, capacity, params)
	if err != nil {
		return nil, err
	}
	return &plan{
		name: name, params: params, capacity: capacity, cluster: s.cluster, crossAccount: crossAccount, topology: topology, placed: placed,
		input: efs.CreateAccessPointInput{
			FileSystemID: params.FileSystemID,
			ClientToken:  params.ClientToken(name),
			Path:         root,
			Tags:         tags,
		},
	}, nil
}

// tagsFor is what a volume's access point is tagged with: nil for a class
// with enableTagging "false" (no tag at all, as upstream: so --tags, which
// upstream also refuses with it, is INVALID_ARGUMENT).
func (s *Service) tagsFor(name string, capacity int64, params volume.Params) (map[string]string, error) {
	if !params.EnableTagging {
		if len(s.tags) > 0 {
			return nil, &volume.ParamError{Key: volume.ParamEnableTagging,
				Reason: fmt.Sprintf("\"false\" creates access points without tags, but this controller adds %d (--tags)", len(s.tags))}
		}
		return nil, nil
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
	return tags, nil
}

// maxIDAttempts bounds how many ids one call tries when other volumes hold
// the ones it picked (in the record, or on access points carrying their
// GID tokens: another controller's creates at the same moment).
const maxIDAttempts = 8

// usesGIDToken reports whether the plan's creates send a GID token
// (volume.GIDToken) rather than the name's: every class that allocates an
// id and tags its access points (the tags say whose an access point found
// by the token is). reuseAccessPoint keeps upstream's claim-name token, by
// which a re-created claim finds its access point.
func (p *plan) usesGIDToken() bool {
	return p.params.NeedsGIDAllocation() && p.params.EnableTagging && !p.params.ReuseAccessPoint && !p.dir
}

// ours reports whether ap, which holds the GID token this volume's record
// sends, was made for this volume: its name tag, not another cluster's.
// PV names carry the claim's UID, so no other volume of any cluster has it.
func (p *plan) ours(ap *efs.AccessPoint) bool {
	_, other := ownership.OtherCluster(ap, p.cluster)
	return !other && ap.FileSystemID == p.params.FileSystemID && ap.Tags[TagVolumeName] == p.name
}

// createOrAdopt runs steps 3-7 under the name lock (docs/design.md,
// "Create"). The record comes first: the volume's entry (token, path, ids)
// and its id, held in the record, before any CreateAccessPoint, so that
// every later step (a retry, a restart, another controller, DeleteVolume,
// the orphan collector) knows what this create may have made. The client
// token sent is the record's (a GID token for allocating classes): EFS binds
// it to one access point, so no two writers using GID tokens ever put one
// id on two access points, whatever record each keeps. Nothing is deleted
// on this path but an access point withdrawn before anyone answered it.
func (s *Service) createOrAdopt(ctx context.Context, p *plan) (*efs.AccessPoint, error) {
	var res *gid.Reservation
	defer func() {
		// The local reservation keeps this process's other creates off the
		// id until the allocator has the access point (Record) or the
		// create failed; the record holds it for every process.
		if res != nil {
			res.Release()
		}
	}()
	rec, res, err := s.record(ctx, p)
	if err != nil {
		return nil, err
	}
	if rec.AccessPoint != "" {
		// A create of this volume was applied: its read goes before new
		// work (efs.PriorityFollowUp), never shed.
		ap, err := s.efs.DescribeAccessPoint(efs.WithPriority(ctx, efs.PriorityFollowUp), rec.AccessPoint)
		switch {
		case err == nil:
			s.gids.Record(*ap)
			if err := p.check(ap); err != nil {
				return nil, err
			}
			return ap, nil
		case !errors.Is(err, efs.ErrAccessPointNotFound):
			return nil, err
		}
		// Not visible: deleted behind the record's back, or Describe lags.
		// The create below tells which: the token finds it, or it is free.
		// But first the record again: a delete marks it before it deletes
		// the access point, so a read after this Describe shows that
		// delete, and a create sent now would make an access point under
		// the token it freed that nobody can answer (a kill before its
		// cleanup leaks it).
		if err := s.confirm(ctx, rec); err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		in := p.input
		in.ClientToken = rec.SentToken()
		if in.Tags != nil {
			in.Tags = maps.Clone(in.Tags)
			in.Tags[TagRecordLife] = ownership.RecordLife(rec)
		}
		in.PosixUser = &efs.PosixUser{UID: rec.UID, GID: rec.GID}
		in.CreationInfo = &efs.CreationInfo{OwnerUID: rec.UID, OwnerGID: rec.GID, Permissions: p.params.DirectoryPerms}
		sentID := rec.Allocated
		ap, err := s.efs.CreateAccessPoint(ctx, in)
		if err == nil && volume.IsGIDToken(in.ClientToken) && !p.ours(ap) {
			// A lenient server (S3 Files) answers a repeated token with
			// the access point holding it, as if created.
			err = &efs.AlreadyExistsError{AccessPointID: ap.ID}
		}
		switch {
		case err == nil:
			s.gids.Record(*ap) // before the local release: never free in between
			// From here on past the call's own context: cut short, this
			// call would leave an access point that a retry adopts only
			// while the record is not being deleted. One made after
			// another replica's delete marked the record (a duplicate's
			// send delayed past the mark) would be named by nothing, and
			// that delete, which deletes the recorded access point, never
			// sees it (the simulator's seed 27447: no fault, no kill, a
			// provisioner's timeout). Recorded here, the write answers
			// ErrDeleting and the access point is deleted.
			ctx, cancel := cleanupContext(ctx)
			defer cancel()
			if err := s.outsiders(efs.WithPriority(ctx, efs.PriorityFollowUp), p, rec, ap); err != nil {
				return nil, err
			}
			made := journal.Made{ID: ap.ID, Path: ap.Path, Token: ap.ClientToken, UID: rec.UID, GID: rec.GID, Allocated: rec.Allocated,
				Sent: stale(in.ClientToken)}
			if err := s.journal.SetAccessPoint(ctx, rec, made, true); err != nil {
				if errors.Is(err, journal.ErrDeleting) || errors.Is(err, journal.ErrStaleToken) {
					// The volume's delete began after this create read the
					// record and deleted the access point before this one
					// was made: nobody can answer this one (every create
					// refuses a record being deleted), so it goes.
					// Or a request sent under a token the record has moved
					// from (ErrStaleToken): not the record's, never answered.
					return nil, s.dropUnanswered(ctx, rec, ap, sentID, err,
						"created while its volume was being deleted, or under a token its record moved from; never answered")
				}
				return nil, err
			}
			return ap, nil
		case !errors.Is(err, efs.ErrAlreadyExists):
			// Unknown outcome (UNAVAILABLE, deadline) or refused: the
			// record and its id stay, so the retry sends the identical
			// request, and the id is on no other access point meanwhile.
			return nil, err
		}
		found, err := s.holder(ctx, in.ClientToken, err)
		if errors.Is(err, ErrNotYetVisible) && volume.IsGIDToken(in.ClientToken) && s.fs(rec.FileSystem).burned(in.ClientToken, s.now()) {
			// EFS keeps the token of an access point deleted long ago (it
			// documents nothing either way): the id is unusable under it.
			// A stand-in that never shows in a listing keeps the id off this
			// process's allocator for good.
			found, err = &efs.AccessPoint{ID: "burned:" + in.ClientToken, FileSystemID: rec.FileSystem,
				PosixUser: &efs.PosixUser{UID: rec.Allocated, GID: rec.Allocated}}, nil
		}
		if err != nil {
			return nil, err
		}
		if !volume.IsGIDToken(in.ClientToken) || p.ours(found) {
			return s.adopt(ctx, p, rec, found)
		}
		// Another writer's access point holds the record's GID token, so
		// carries its id, and no attempt of ours made one with it (EFS
		// binds the token to one access point): take another id.
		s.gids.Record(*found)
		s.log.Info("GID taken by another writer's access point; taking another",
			slog.String("name", p.name), slog.Int64("gid", rec.Allocated), slog.String("other", found.ID))
		if attempt >= maxIDAttempts {
			return nil, fmt.Errorf("%w: GID %d on %s is carried by access point %s (tried %d ids)", ErrGIDContention, rec.Allocated, rec.FileSystem, found.ID, attempt)
		}
		r, err := s.moveID(ctx, p, rec, attempt)
		if err != nil {
			return nil, err
		}
		if r != nil {
			if res != nil {
				res.Release()
			}
			res = r
		}
		if err := s.hold(ctx, p, rec, &res, false); err != nil {
			return nil, err
		}
	}
}

// cleanupContext is ctx without its end, within cleanupTimeout: for what
// must follow what a call did (an access point made is recorded or
// deleted, an id held for nothing released), since a call cut short there
// would leave it for nobody.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// releaseMovedID releases id, which this call held for rec's volume, unless
// its record holds it (journal.ReleaseMovedID): after the call's own
// context, which may have ended with the call (the id would stay held for
// nobody), within cleanupTimeout.
func (s *Service) releaseMovedID(ctx context.Context, rec *journal.Record, id int64) error {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	return s.journal.ReleaseMovedID(ctx, rec.FileSystem, id, rec.Token)
}

// confirm writes rec again, a compare-and-swap at the version this call
// read (journal.Touch): it proves the record unchanged since, or reads it
// again. It must still be the same life, naming the same access point and
// id, sending the same token, and not be being deleted; else
// keylock.ErrBusy (the volume's delete, or another create, is under way:
// retry), and the id this call holds for rec is released unless the
// record holds it (journal.ReleaseMovedID): this call may have held it
// again after the record moved off it or its delete released it. A write,
// not a read: the record's version moves, so a delete that read it before
// must read it again to mark it (the Lease store batches writes; a read
// is a request of its own).
func (s *Service) confirm(ctx context.Context, rec *journal.Record) error {
	held := *rec
	err := s.journal.Touch(ctx, rec)
	switch {
	case errors.Is(err, journal.ErrDeleting):
		err = fmt.Errorf("%w: %w", keylock.ErrBusy, err)
	case err != nil:
		return err
	case rec.AccessPoint != held.AccessPoint || !rec.Created.Equal(held.Created) ||
		rec.Allocated != held.Allocated || rec.SentToken() != held.SentToken():
		err = fmt.Errorf("%w: the record of volume %q changed (another create)", keylock.ErrBusy, rec.Name)
	default:
		return nil
	}
	if rerr := s.releaseMovedID(ctx, &held, held.Allocated); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return err
}

// burnAfter is how long EFS may name an access point it does not describe
// as holding a GID token before the token counts as burned: kept by an
// access point deleted long ago, not held by one too fresh to describe
// (EFS describes a new one within seconds). Until then the create is
// retried: the access point may be this volume's own, whose answer was
// lost.
const burnAfter = 2 * time.Minute

// holder describes the access point EFS named (err) as holding token.
func (s *Service) holder(ctx context.Context, token string, err error) (*efs.AccessPoint, error) {
	var ae *efs.AlreadyExistsError
	if !errors.As(err, &ae) || ae.AccessPointID == "" {
		return nil, fmt.Errorf("client token %q is taken but EFS named no access point: %w", token, err)
	}
	// The token's create was applied: its read is a follow-up.
	found, err := s.efs.DescribeAccessPoint(efs.WithPriority(ctx, efs.PriorityFollowUp), ae.AccessPointID)
	if err != nil {
		if errors.Is(err, efs.ErrAccessPointNotFound) {
			return nil, fmt.Errorf("%w: %s holds client token %q", ErrNotYetVisible, ae.AccessPointID, token)
		}
		return nil, err
	}
	return found, nil
}

// unrecordedWindow is how long after its start a controller checks its new
// access points against writers outside the GID token protocol: a release
// before it (an earlier one of this driver, or upstream's) running beside
// it in a rolling update or an in-place upgrade picks GIDs, and makes
// access points for the same volumes, under tokens of its own, which EFS
// does not compare with ours.
const unrecordedWindow = 10 * time.Minute

// upgrading reports whether a new record of p sends the volume name's
// token rather than a GID token: in the controller's first minutes on a
// file system whose last listing showed access points under name tokens,
// where upstream's driver or a release before GID tokens may be creating
// the same volumes right now (a rolling update, an in-place upgrade).
// EFS then makes both writers converge on one access point per volume, as
// before GID tokens; GIDs are then unique by the record, the allocator's
// view and the other writer's own check, not by construction (docs/design.md,
// "Writers outside the record").
func (s *Service) upgrading(p *plan) bool {
	return s.inWindow(p) && s.fs(p.params.FileSystemID).nameTokensListed()
}

// inWindow reports whether creates of p are checked against writers
// outside the protocol now: in the controller's first minutes, for a class
// that allocates ids.
func (s *Service) inWindow(p *plan) bool {
	return p.params.NeedsGIDAllocation() && s.cfg.GIDVerify != VerifyNever &&
		s.now().Sub(s.started) <= unrecordedWindow
}

// outsiders checks ap, which this call just made or found for rec before
// the record names it, in the controller's first minutes, against a
// listing that starts after it exists: another access point carrying rec's
// allocated id, or made for this volume under another token, was made by
// a writer outside the protocol (an earlier release mid-upgrade), which
// answers its own. Ours then gives way, by Withdraw: a compare-and-swap on
// the version this call read, while the record names no access point
// (every create that answers one writes the record naming it first), so an
// access point withdrawn was never answered and one answered is never
// withdrawn. Any failure answers nothing (the retry checks again). The
// retry's record then adopts the other writer's access point for this
// volume (outsideToken), or takes another id.
func (s *Service) outsiders(ctx context.Context, p *plan, rec *journal.Record, ap *efs.AccessPoint) error {
	if !s.inWindow(p) || rec.AccessPoint == ap.ID || !volume.IsGIDToken(ap.ClientToken) {
		// Only an access point under a GID token is surely this driver's
		// alone: one under a name token may be an outside writer's, which
		// it may have answered.
		return nil
	}
	aps, err := s.listAfterNow(ctx, ap.FileSystemID)
	if err != nil {
		return err
	}
	var rival *efs.AccessPoint
	for i := range aps {
		uid, g := posixIDs(&aps[i])
		if aps[i].ID == ap.ID || uid != rec.Allocated && g != rec.Allocated && !p.madeOutside(&aps[i]) {
			continue
		}
		s.learnOutside(p, &aps[i])
		if rival == nil || p.madeOutside(&aps[i]) {
			rival = &aps[i]
		}
	}
	if rival == nil {
		return nil
	}
	s.gids.Record(*rival)
	if err := s.journal.Withdraw(ctx, rec, ap.ID); err != nil {
		if errors.Is(err, journal.ErrConflict) {
			return nil // another create wrote the record first: it may answer ap
		}
		if errors.Is(err, journal.ErrDeleting) {
			err = fmt.Errorf("%w: %w", keylock.ErrBusy, err)
		}
		return err
	}
	s.log.Warn("access point made outside the protocol for this GID or volume; withdrawing ours",
		slog.String("accessPoint", ap.ID), slog.Int64("gid", rec.Allocated), slog.String("other", rival.ID),
		slog.String("otherToken", rival.ClientToken))
	if err := s.finishWithdrawn(ctx, rec); err != nil {
		return err
	}
	return fmt.Errorf("%w: GID %d on %s or volume %q is also on access point %s, made outside the protocol", ErrGIDContention, rec.Allocated, ap.FileSystemID, p.name, rival.ID)
}

// madeOutside reports whether ap was made for p's volume by a writer
// outside the GID token protocol: it carries the volume's name token (an
// earlier release's, upstream's) or an earlier release's later generation
// of it.
func (p *plan) madeOutside(ap *efs.AccessPoint) bool {
	if ap.FileSystemID != p.params.FileSystemID || volume.IsGIDToken(ap.ClientToken) {
		return false
	}
	if _, other := ownership.OtherCluster(ap, p.cluster); other {
		return false
	}
	return generationOf(p.input.ClientToken, ap.ClientToken) >= 0
}

// windowToken is, for a record this call just made, the token of an
// access point a writer outside the GID token protocol made for the
// volume (its latest generation), "" if none is known: the create then
// sends it and adopts that access point, as that writer answers it,
// instead of making a second one. Known: seen by this process's outsider
// check (outsideToken); or, in the controller's first minutes on a file
// system whose last listing showed access points under name tokens (an
// upgrade from upstream's driver or a release before GID tokens, which may
// be creating the same volumes right now), in a listing that starts now.
// A file system only GID tokens are on pays no listing. The listing only
// narrows the race with a concurrent outside create: the outsider check
// after the create sees one made before its own listing.
func (s *Service) windowToken(ctx context.Context, p *plan, rec *journal.Record) (string, error) {
	if !volume.IsGIDToken(rec.SentToken()) {
		return "", nil
	}
	if tok := s.outsideToken(p); tok != "" || !s.inWindow(p) || !s.fs(p.params.FileSystemID).nameTokensListed() {
		return tok, nil
	}
	aps, err := s.listAfterNow(ctx, p.params.FileSystemID)
	if err != nil {
		return "", err
	}
	best, token := -1, ""
	for i := range aps {
		if !p.madeOutside(&aps[i]) {
			continue
		}
		if g := generationOf(p.input.ClientToken, aps[i].ClientToken); g > best {
			best, token = g, aps[i].ClientToken
		}
	}
	return token, nil
}

// maxOutsiders bounds the volumes whose outside writer's token this
// process remembers (outsideToken).
const maxOutsiders = 1024

// outsideToken is the token of the access point a writer outside the
// protocol made for p's volume, which the outsider check saw (and withdrew
// ours for) in this process, "" if none: the retry's new record sends it,
// and adopts that access point (the other writer answers it too) instead
// of making another. Forgotten by a restart, whose retry then withdraws
// once more and learns it again.
func (s *Service) outsideToken(p *plan) string {
	return s.fs(p.params.FileSystemID).outsideToken(p.name)
}

// learnOutside remembers ap as the access point an outside writer made
// for p's volume, if it is one; a later generation wins.
func (s *Service) learnOutside(p *plan, ap *efs.AccessPoint) {
	if !p.madeOutside(ap) {
		return
	}
	// Under the volume's name locks: no other create of it learns between
	// the read and the write.
	st := s.fs(p.params.FileSystemID)
	if old := st.outsideToken(p.name); old != "" && generationOf(p.input.ClientToken, old) >= generationOf(p.input.ClientToken, ap.ClientToken) {
		return
	}
	st.learnOutside(p.name, ap.ClientToken)
}

// finishWithdrawn deletes a withdrawn record's access point, which nobody
// answered (journal.Withdraw), and removes the record: the next create of
// the volume starts over with another id.
func (s *Service) finishWithdrawn(ctx context.Context, rec *journal.Record) error {
	if rec.AccessPoint != "" {
		if err := s.deleteAccessPoint(efs.WithPriority(ctx, efs.PriorityFollowUp), rec.FileSystem, rec.AccessPoint); err != nil {
			return err
		}
		s.log.Info("access point deleted", slog.String("accessPoint", rec.AccessPoint),
			slog.String("reason", "withdrawn before any answer: its GID is carried by an access point made outside the protocol"))
	}
	return s.journal.Finish(ctx, rec)
}

// record returns the volume's record, made now (with an id reserved in the
// allocator, whose reservation is returned) or by an earlier attempt, a
// restarted process or another controller, and makes its id held in the
// record.
func (s *Service) record(ctx context.Context, p *plan) (*journal.Record, *gid.Reservation, error) {
	for range maxIDAttempts {
		rec, res, made, err := s.begin(ctx, p)
		if err != nil {
			return nil, res, err
		}
		if rec.Withdrawn {
			// An earlier attempt withdrew its access point but did not get
			// to delete it: nobody answered it, so it goes.
			if err := s.finishWithdrawn(ctx, rec); err != nil {
				return nil, res, err
			}
			continue
		}
		if rec.Deleting {
			return nil, res, fmt.Errorf("%w: %w: %s/%q", keylock.ErrBusy, journal.ErrDeleting, rec.FileSystem, rec.Token)
		}
		if made {
			tok, err := s.windowToken(efs.WithPriority(ctx, efs.PriorityFollowUp), p, rec)
			if err != nil {
				return nil, res, err
			}
			if tok != "" {
				// Sent under that token: EFS answers with its access point,
				// which adopt records (with its own ids).
				if err := s.journal.SetIDs(ctx, rec, rec.Allocated, rec.UID, rec.GID, rec.Allocated, tok, rec.Probe); err != nil {
					return nil, res, err
				}
			}
		}
		if why := p.recordMismatch(rec); why != "" {
			return nil, res, fmt.Errorf("%w: volume %q: %s", ErrIncompatible, p.name, why)
		}
		if err := s.hold(ctx, p, rec, &res, !made); err != nil {
			return nil, res, err
		}
		return rec, res, nil
	}
	return nil, nil, fmt.Errorf("%w: the record of volume %q kept being withdrawn", ErrGIDContention, p.name)
}

// begin finds the volume's record or makes it with a freshly reserved id
// (returned with the record, and made true). A retry whose record exists
// needs no new id:
// when the range is full (it may be full of this very volume's id) the
// record is looked up before giving up.
func (s *Service) begin(ctx context.Context, p *plan) (*journal.Record, *gid.Reservation, bool, error) {
	fsID := p.params.FileSystemID
	uid, g, alloc := p.params.UID, p.params.GID, int64(journal.NoID)
	var res *gid.Reservation
	var err error
	if p.params.NeedsGIDAllocation() {
		r, err := s.gids.ReserveFrom(ctx, s.gidSource(), fsID, p.params.GIDRangeStart, p.params.GIDRangeEnd, p.name)
		if errors.Is(err, gid.ErrExhausted) {
			rec, rerr := s.journal.Volume(ctx, fsID, p.input.ClientToken)
			if rerr == nil {
				return rec, nil, false, nil
			}
			if !errors.Is(rerr, journal.ErrNotFound) {
				return nil, nil, false, rerr
			}
		}
		if err != nil {
			return nil, nil, false, err
		}
		res, alloc = r, r.GID()
		s.warnOtherClusters(fsID, p.params.GIDRangeStart, p.params.GIDRangeEnd)
	}
	probe, gidToken := 0, p.usesGIDToken() && !s.upgrading(p)
	if gidToken {
		// The allocator only refreshed the view and said the range is not
		// full: the volume's own sequence chooses (probe.go).
		res.Release()
		res = nil
		if alloc, probe, err = s.candidate(p, 0); err != nil {
			return nil, nil, false, err
		}
	}
	if alloc != journal.NoID {
		uid, g = p.params.Identity(alloc)
	}
	v := journal.Volume{
		FileSystem: fsID, Token: p.input.ClientToken, Name: p.name, API: string(s.api), Path: p.input.Path,
		UID: uid, GID: g, Allocated: alloc, ClaimNamespace: p.params.PVCNamespace, ClaimName: p.params.PVCName,
	}
	if p.dir {
		v.Dir, v.Capacity = true, p.capacity
	}
	v.Placed = p.placed
	if gidToken {
		v.ClientToken, v.Probe = volume.GIDToken(fsID, alloc), probe
	}
	rec, made, err := s.journal.Begin(ctx, v)
	if err != nil {
		return nil, res, false, err
	}
	if !made {
		if res != nil {
			res.Release() // the record has its own
		}
		return rec, nil, false, nil
	}
	return rec, res, true, nil
}

// hold makes the record's id held in the id table, taking another id
// (into *res) while other volumes hold the ones it has. Then, for a record
// this call found (found) or an id the volume's token held already
// (another create of it at work: a retry, a duplicate), the record is
// confirmed, the last step before the send: a delete, or another create's
// move to another id, may have overtaken what this call read, and a delete
// marks the record before it deletes anything. A send under a token that
// delete freed would make an access point nobody answers
// (leak-dup-create-after-delete); one under an id the record moved from,
// an id held for nobody (record-id-left-after-stale-drop).
func (s *Service) hold(ctx context.Context, p *plan, rec *journal.Record, res **gid.Reservation, found bool) error {
	for attempt := 1; ; attempt++ {
		again, err := s.journal.Hold(ctx, rec)
		if err == nil {
			if !found && !again {
				return nil
			}
			return s.confirm(ctx, rec)
		}
		if !errors.Is(err, journal.ErrIDTaken) {
			return err
		}
		if rec.AccessPoint != "" || !p.params.NeedsGIDAllocation() || attempt >= maxIDAttempts {
			// An access point already carries the id (adopted from a
			// release before the record, which shared it), or the class
			// changed to fixed ids: nothing this call may change.
			return fmt.Errorf("%w: %w", ErrGIDContention, err)
		}
		// Another volume holds the id: this record's id was never sent (a
		// create sends only a held id), so it may take another.
		r, err := s.moveID(ctx, p, rec, attempt)
		if err != nil {
			return err
		}
		if r != nil {
			if *res != nil {
				(*res).Release()
			}
			*res = r
		}
	}
}

// moveID gives rec another id, reserved now (returned), and the GID token
// that goes with it, once no access point of rec's can carry the one it has
// (never sent, or EFS answered that another writer's holds its token). The
// old id's entry is released first: a crash in between leaves a record
// naming an id it no longer holds, which its retry holds again or moves
// from, never an id held for nobody. nil, nil: another writer changed the
// record's ids first; use what it chose.
func (s *Service) moveID(ctx context.Context, p *plan, rec *journal.Record, attempt int) (*gid.Reservation, error) {
	fsID := p.params.FileSystemID
	var r *gid.Reservation
	var next int64
	token, probe := "", 0
	if volume.IsGIDToken(rec.SentToken()) {
		// The next of the volume's own sequence, as every writer of it
		// takes (probe.go), if the allocator's view says the range is not
		// full.
		full, err := s.gids.ReserveFrom(ctx, s.gidSource(), fsID, p.params.GIDRangeStart, p.params.GIDRangeEnd, p.name)
		if err != nil {
			return nil, err
		}
		full.Release()
		if next, probe, err = s.candidate(p, rec.Probe+1); err != nil {
			return nil, err
		}
		if next == rec.Allocated {
			return nil, fmt.Errorf("%w in [%d, %d] on %s: volume %q's sequence came round to %d, which another volume holds",
				gid.ErrExhausted, p.params.GIDRangeStart, p.params.GIDRangeEnd, fsID, p.name, next)
		}
		token = volume.GIDToken(fsID, next)
	} else {
		var err error
		if r, err = s.gids.ReserveFrom(ctx, s.gidSource(), fsID, p.params.GIDRangeStart, p.params.GIDRangeEnd, p.name+"#"+strconv.Itoa(attempt)); err != nil {
			return nil, err
		}
		next = r.GID()
	}
	release := func() {
		if r != nil {
			r.Release()
		}
	}
	if err := s.journal.ReleaseUnsentID(ctx, fsID, rec.Allocated, rec.Token); err != nil {
		release()
		return nil, err
	}
	nu, ng := p.params.Identity(next)
	if err := s.journal.SetIDs(ctx, rec, rec.Allocated, nu, ng, next, token, probe); err != nil {
		release()
		if errors.Is(err, journal.ErrConflict) {
			return nil, nil // another writer changed the record first: hold what it chose
		}
		return nil, err
	}
	return r, nil
}

// recordMismatch says why a record found for the plan's token serves
// another volume, or "".
func (p *plan) recordMismatch(rec *journal.Record) string {
	if p.params.ReuseAccessPoint {
		// The token is the claim name's hash: a claim of that name in
		// another namespace has the same token, and must not get it.
		if rec.ClaimNamespace != p.params.PVCNamespace {
			return fmt.Sprintf("its access point token is recorded for a claim in namespace %q, not %q", rec.ClaimNamespace, p.params.PVCNamespace)
		}
		return ""
	}
	if rec.Name != p.name {
		return fmt.Sprintf("its access point token is recorded for volume %q", rec.Name)
	}
	return ""
}

// adopt answers a create whose token EFS says is taken by found, this
// volume's: by an earlier attempt whose answer was lost, a killed process,
// another controller of this cluster, an earlier release or the upstream
// driver (whose tokens are ours), or with reuseAccessPoint a claim's
// earlier volume. It is the volume's if it matches the plan, and the
// record then names it, the ids and the token it carries.
func (s *Service) adopt(ctx context.Context, p *plan, rec *journal.Record, found *efs.AccessPoint) (*efs.AccessPoint, error) {
	s.gids.Record(*found)
	if later := s.laterGeneration(ctx, p, found); later != nil {
		found = later
	}
	if err := p.check(found); err != nil {
		return nil, err
	}
	if p.params.ReuseAccessPoint && rec.AccessPoint == "" && !p.claimProven(found) && !madeWith(rec, found) {
		return nil, fmt.Errorf("%w: access point %s for volume %q: made for claim %q by an earlier driver, and nothing records its namespace (tag it %s=<namespace> to adopt it)",
			ErrIncompatible, found.ID, p.name, p.params.PVCName, TagClaimNamespace)
	}
	uid, g := posixIDs(found)
	alloc := int64(journal.NoID)
	if p.params.NeedsGIDAllocation() {
		alloc = allocatedID(p.params.GID, found)
	}
	if err := s.outsiders(efs.WithPriority(ctx, efs.PriorityFollowUp), p, rec, found); err != nil {
		return nil, err
	}
	made := journal.Made{ID: found.ID, Path: found.Path, Token: found.ClientToken, UID: uid, GID: g, Allocated: alloc,
		Sent: stale(rec.SentToken())}
	if alloc != rec.Allocated {
		// The token is bound to found, so no attempt of ours made another
		// access point: the id the record planned is on none of ours.
		planned := rec.Allocated
		adopted := *rec
		adopted.Allocated = alloc
		if err := s.journal.HoldID(ctx, &adopted); err != nil {
			if !errors.Is(err, journal.ErrIDTaken) {
				return nil, err
			}
			// Two access points of this file system already carry it (an
			// earlier release or the upstream driver shared it): answering
			// changes nothing, refusing would not fix it.
			s.log.Warn("adopted access point shares its GID with another recorded volume",
				slog.String("accessPoint", found.ID), slog.Int64("gid", alloc), slog.String("error", err.Error()))
			made.Allocated = journal.NoID
		}
		if err := s.journal.SetAccessPoint(ctx, rec, made, false); err != nil {
			return nil, s.dropStale(ctx, rec, found, alloc, err)
		}
		if err := s.journal.ReleaseUnsentID(ctx, rec.FileSystem, planned, rec.Token); err != nil {
			return nil, err
		}
	} else if err := s.journal.SetAccessPoint(ctx, rec, made, false); err != nil {
		return nil, s.dropStale(ctx, rec, found, alloc, err)
	}
	if p.params.ReuseAccessPoint {
		if err := s.journal.SetClaim(ctx, rec, p.name, p.params.PVCNamespace); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// dropStale deletes found, an access point of this volume made under a
// GID token its record no longer sends (err wraps journal.ErrStaleToken):
// the record never named it, so nobody answered it (dropUnanswered).
// Other errors pass.
func (s *Service) dropStale(ctx context.Context, rec *journal.Record, found *efs.AccessPoint, id int64, err error) error {
	if !errors.Is(err, journal.ErrStaleToken) {
		return err
	}
	return s.dropUnanswered(ctx, rec, found, id, err, "made under a GID token its volume's record moved from; never answered")
}

// dropUnanswered deletes ap, which this call made or found for rec's
// volume and which nobody can answer (why: the record is being deleted or
// gone, or sends another token by now), then releases id, held for it by
// this call, unless the record holds it: both after the call's own
// context, within cleanupTimeout, since a call cut short here would leave
// them for nobody. The call ends keylock.ErrBusy (retry), wrapping why.
func (s *Service) dropUnanswered(ctx context.Context, rec *journal.Record, ap *efs.AccessPoint, id int64, why error, reason string) error {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	if err := s.deleteAccessPoint(efs.WithPriority(ctx, efs.PriorityFollowUp), ap.FileSystemID, ap.ID); err != nil {
		return fmt.Errorf("%w: %w", keylock.ErrBusy, errors.Join(why, err))
	}
	s.log.Info("access point deleted", slog.String("accessPoint", ap.ID), slog.String("name", rec.Name), slog.String("reason", reason))
	if err := s.releaseMovedID(ctx, rec, id); err != nil {
		why = errors.Join(why, err)
	}
	return fmt.Errorf("%w: %w", keylock.ErrBusy, why)
}

// stale is the token a GID-token create's SetAccessPoint must still find
// the record sending (journal.Made.Sent), "" for other tokens: another
// create of the volume may have moved the record to another id meanwhile,
// and an access point made under the old token (a request delayed past
// that move) is then nobody's answer.
func stale(token string) string {
	if volume.IsGIDToken(token) {
		return token
	}
	return ""
}

// madeWith reports whether found was made with rec's planned request: it
// carries the id rec holds in the record, which no other volume of this
// cluster can carry and which the allocator picked off every listed access
// point, at rec's root directory.
func madeWith(rec *journal.Record, found *efs.AccessPoint) bool {
	uid, g := posixIDs(found)
	return rec.Allocated != journal.NoID && (uid == rec.Allocated || g == rec.Allocated) &&
		uid == rec.UID && g == rec.GID && found.Path == rec.Path
}

// claimProven: an access point found by a reuseAccessPoint token that the
// record does not name serves this claim only if it proves the claim's
// namespace: this driver's claim tags, or a root directory that this
// class's subPathPattern derives from the namespace.
func (p *plan) claimProven(ap *efs.AccessPoint) bool {
	if ns, ok := ap.Tags[TagClaimNamespace]; ok {
		return ns == p.params.PVCNamespace
	}
	return p.params.RootDirHasNamespace(ap.Path)
}

// check returns ErrIncompatible unless ap can serve as the volume p describes.
func (p *plan) check(ap *efs.AccessPoint) error {
	if why := p.incompatibility(ap); why != "" {
		return fmt.Errorf("%w: access point %s for volume %q: %s", ErrIncompatible, ap.ID, p.name, why)
	}
	return nil
}

// incompatibility says why ap cannot serve as the volume p describes, or "".
func (p *plan) incompatibility(ap *efs.AccessPoint) string {
	if ap.FileSystemID != p.params.FileSystemID {
		return fmt.Sprintf("file system %s, want %s", ap.FileSystemID, p.params.FileSystemID)
	}
	// Client tokens are per account, not per cluster: another cluster's
	// claim of the same name (reuseAccessPoint) finds this token too. An
	// access point without the tag (upstream's, or of the release before
	// cluster IDs) is judged by the other checks.
	if id, ok := ownership.OtherCluster(ap, p.cluster); ok {
		return fmt.Sprintf("made by cluster %q, not this one (%q)", id, p.cluster)
	}
	if p.params.ReuseAccessPoint {
		// The token is a hash of the claim name alone (as upstream, so its
		// access points are found): a claim of that name in another
		// namespace, class or cluster finds the same access point and must
		// not get it.
		if why := p.reuseMismatch(ap); why != "" {
			return why
		}
	} else if ap.Path != p.input.Path {
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

// reuseMismatch says why ap, found by the reuseAccessPoint token, belongs to
// another claim than p's, or "". Access points without our tags (made by the
// upstream driver) are judged by their root directory alone.
func (p *plan) reuseMismatch(ap *efs.AccessPoint) string {
	if ns, ok := ap.Tags[TagClaimNamespace]; ok && ns != p.params.PVCNamespace {
		return fmt.Sprintf("made for a claim in namespace %q, not %q", ns, p.params.PVCNamespace)
	}
	if name, ok := ap.Tags[TagClaimName]; ok && name != p.params.PVCName {
		return fmt.Sprintf("made for claim %q, not %q", name, p.params.PVCName)
	}
	if !p.params.RootDirFits(ap.Path) {
		return fmt.Sprintf("root directory %q is not one this class makes (it makes %q)", ap.Path, p.input.Path)
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

// allocatedID is the id the allocator handed out for ap: its gid, or its uid
// when the class fixed the gid.
func allocatedID(fixedGID int64, ap *efs.AccessPoint) int64 {
	uid, g := posixIDs(ap)
	if fixedGID >= 0 {
		return uid
	}
	return g
}

// maxWarnings bounds the warnings firstWarning remembers; past it, every
// further one is logged at each call (memory stays bounded whatever the
// classes say).
const maxWarnings = 1024

// firstWarning reports whether the warning named key is logged for the
// first time by this process.
func (s *shared) firstWarning(key string) bool {
	if s.warnedN.Load() < maxWarnings {
		if _, seen := s.warned.LoadOrStore(key, struct{}{}); seen {
			return false
		}
		s.warnedN.Add(1)
		return true
	}
	_, seen := s.warned.Load(key)
	return !seen
}

// warnIgnored logs, once per file system and key, the StorageClass
// parameters ParseParams ignored: upstream ignores unknown keys, so a class
// with a stray one (mountOptions under parameters, a typo beside the right
// key) provisions, but the administrator is told. CreateVolume's answer has
// no field for a warning, so the controller's log is the place.
func (s *Service) warnIgnored(fsID string, keys []string) {
	for _, k := range keys {
		if !s.firstWarning("ignored\x00" + fsID + "\x00" + k) {
			continue
		}
		s.log.Warn("StorageClass parameter ignored: not a parameter of this driver (upstream ignores it too; check its spelling, and that it belongs under parameters)",
			"parameter", k, "fileSystemId", fsID)
	}
}

// laterGeneration is the latest access point of an earlier release's later
// generation of p's volume, if a fresh listing has one, during
// unrecordedWindow. That release (3276f99 and before) gave a volume whose
// GID it yielded another access point under the token generationToken(base,
// g), answers only the latest, and deletes the earlier ones: adopting one of
// those would answer an access point it is about to delete (the e2e upgrade
// test saw its PV name a deleted access point).
func (s *Service) laterGeneration(ctx context.Context, p *plan, found *efs.AccessPoint) *efs.AccessPoint {
	if s.now().Sub(s.started) > unrecordedWindow {
		return nil
	}
	aps, err := s.listAfterNow(efs.WithPriority(ctx, efs.PriorityFollowUp), found.FileSystemID)
	if err != nil {
		return nil
	}
	byToken := make(map[string]*efs.AccessPoint, len(aps))
	for i := range aps {
		byToken[aps[i].ClientToken] = &aps[i]
	}
	for g := earlierMaxGenerations - 1; g > 0; g-- {
		if ap := byToken[generationToken(p.input.ClientToken, g)]; ap != nil {
			s.gids.Record(*ap)
			return ap
		}
	}
	return nil
}

// generationOf is the generation of base's volume that token is (0: base
// itself), -1 if none.
func generationOf(base, token string) int {
	for g := range earlierMaxGenerations {
		if generationToken(base, g) == token {
			return g
		}
	}
	return -1
}

// earlierMaxGenerations is how many generations an earlier release used.
const earlierMaxGenerations = 16

// generationToken is an earlier release's client token of generation gen
// of the volume whose generation-0 token is base.
func generationToken(base string, gen int) string {
	if gen == 0 {
		return base
	}
	sum := sha256.Sum256([]byte(base + "\x00generation-" + strconv.Itoa(gen)))
	return hex.EncodeToString(sum[:])
}
