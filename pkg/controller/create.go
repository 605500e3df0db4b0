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

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// plan is everything a CreateVolume sends to EFS, computed from the request
// alone, so that every retry of the same call sends identical parameters.
type plan struct {
	name         string
	params       volume.Params
	capacity     int64
	topology     []*csi.Topology            // AccessibleTopology of the answer (enforceZoneAffinity)
	input        efs.CreateAccessPointInput // PosixUser is filled once a GID is reserved
	backend      Backend
	crossAccount bool // provisioner secret crossaccount (see volumeContext)
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
	return svc.createVolume(ctx, req, b)
}

func (s *Service) createVolume(ctx context.Context, req *csi.CreateVolumeRequest, b Backend) (*csi.CreateVolumeResponse, error) {
	p, err := s.plan(ctx, req)
	if err != nil {
		return nil, err
	}
	p.backend = b
	unlock, err := s.locks.TryLock(nameKey(p.name))
	if err != nil {
		return nil, err
	}
	defer unlock()

	ap := s.repeat(ctx, p)
	if ap == nil {
		if ap, err = s.createOrAdopt(ctx, p); err != nil {
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
// Describe. nil: go the whole way (unknown, gone, changed, or Describe
// failed).
func (s *Service) repeat(ctx context.Context, p *plan) *efs.AccessPoint {
	s.mu.Lock()
	known, ok := s.answers[p.name]
	s.mu.Unlock()
	if !ok {
		return nil
	}
	if s.now().Sub(known.at) < repeatFresh && p.check(known.ap) == nil {
		return known.ap
	}
	ap, err := s.efs.DescribeAccessPoint(ctx, known.ap.ID)
	if err != nil || p.check(ap) != nil {
		if errors.Is(err, efs.ErrAccessPointNotFound) {
			s.forgetAnswer(known.ap.ID)
		}
		return nil
	}
	s.gids.Record(*ap)
	s.mu.Lock()
	s.answers[p.name] = answer{ap, s.now()}
	s.mu.Unlock()
	return ap
}

// remember records an answered volume (under its name lock).
func (s *Service) remember(name string, ap *efs.AccessPoint) {
	s.verify.markAnswered(ap.ID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.answers[name]; ok {
		delete(s.answerOf, old.ap.ID)
	}
	s.answers[name], s.answerOf[ap.ID] = answer{ap, s.now()}, name
}

// answer is what this process answered for a volume, and when.
type answer struct {
	ap *efs.AccessPoint
	at time.Time
}

// forgetAnswer drops what this process remembers of a deleted access point.
func (s *Service) forgetAnswer(apID string) {
	s.verify.forget(apID)
	s.dropAnswer(apID)
}

// dropAnswer stops answering repeats of apID's volume from memory: called
// under the volume's locks when its delete begins, so that no create
// answered from memory can hand out an access point being deleted.
func (s *Service) dropAnswer(apID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if name, ok := s.answerOf[apID]; ok {
		delete(s.answers, name)
		delete(s.answerOf, apID)
	}
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
	tags := maps.Clone(s.tags)
	if tags == nil {
		tags = map[string]string{}
	}
	tags[TagCluster] = "true"
	tags[TagVolumeName] = name
	tags[TagWriter] = s.writer
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
		name: name, params: params, capacity: capacity, crossAccount: crossAccount, topology: topology,
		input: efs.CreateAccessPointInput{
			FileSystemID: params.FileSystemID,
			ClientToken:  params.ClientToken(name),
			Path:         root,
			Tags:         tags,
		},
	}, nil
}

// maxYields bounds how often one call gives its GID up to another writer;
// maxGenerations bounds the client tokens a volume can ever use (see yield).
const (
	maxYields      = 3
	maxGenerations = 16
)

// createOrAdopt runs steps 3-6 under the name lock.
//
// Generations: when verification finds that an access point created earlier
// holds our GID, ours must go, and the volume needs another access point
// with another GID. EFS documents nothing about reusing a deleted access
// point's client token, so the replacement is created under the next
// generation's token (generationToken) before the loser is deleted: every
// moment, some generation's access point exists, and a retry that finds
// generation 0 gone finds the latest one by its token in a listing.
func (s *Service) createOrAdopt(ctx context.Context, p *plan) (*efs.AccessPoint, error) {
	fsID := p.params.FileSystemID
	var losers []efs.AccessPoint // earlier generations to delete once a later one stands
	gen := s.firstGeneration(p.name)
	for yields := 0; ; yields++ {
		ap, created, err := s.createOnce(ctx, p, gen)
		if errors.Is(err, ErrNotYetVisible) && gen == 0 {
			// Generation 0's access point may be gone because it yielded:
			// look for a later generation before asking for a retry.
			if found, k, ferr := s.findGeneration(ctx, p); ferr == nil && found != nil {
				ap, gen, err = found, k, p.check(found)
			}
		}
		if err != nil {
			if errors.Is(err, gid.ErrExhausted) && len(losers) > 0 {
				// No GID left for a successor: the losers must not stay,
				// they share their GIDs. The next attempt starts here.
				err = errors.Join(err, s.retire(ctx, losers))
				s.setFirstGeneration(p.name, gen)
			}
			return nil, err
		}
		if !p.params.NeedsGIDAllocation() || !s.verify.needed(ap) {
			return ap, s.retire(ctx, losers)
		}
		id := allocatedID(p.params.GID, ap)
		rivals, listing, err := s.verify.rivals(ctx, ap, id)
		if err != nil {
			// The access point exists unverified and unanswered: the
			// retry finds it and verifies again.
			return nil, err
		}
		// Generations converge on the latest: a later one exists only
		// because this one yielded, and nobody answers an earlier one once
		// a later one is listed (see verifier).
		if later, k, older := generations(listing, p.input.ClientToken, ap.ID, gen); later != nil {
			losers = append(append(losers, *ap), older...)
			s.gids.Record(*later)
			s.verify.learned(later)
			ap, gen = later, k
			if err := p.check(ap); err != nil {
				return nil, err
			}
			continue
		} else {
			losers = append(losers, older...)
		}
		switch s.verify.verdict(ap, created, rivals) {
		case answerIt:
			return ap, s.retire(ctx, losers)
		case waitForIt:
			return nil, errors.Join(fmt.Errorf("%w: access point %s (GID %d) was made by another writer that may still be verifying it (%d other access points carry the GID)",
				ErrGIDContention, ap.ID, id, len(rivals)), s.retire(ctx, losers))
		}
		// yieldIt: another access point carries the GID and ours gives way.
		// Its GID stays used in the allocator: it stands for the other one.
		s.log.Warn("GID taken by another writer; yielding", "accessPoint", ap.ID, "gid", id, "name", p.name, "generation", gen)
		losers = append(losers, *ap)
		if gen+1 >= maxGenerations {
			return nil, fmt.Errorf("%w: GID %d on %s is also used by another writer, and volume %q has used all %d generations",
				ErrGIDContention, id, fsID, p.name, maxGenerations)
		}
		if yields+1 >= maxYields {
			// This call has yielded enough: the retry goes on with the next
			// generation. What yielded goes now, or it would outlive its
			// yield deadline and keep a GID it shares with another.
			s.setFirstGeneration(p.name, gen+1)
			return nil, errors.Join(fmt.Errorf("%w: GID %d on %s is also used by another writer", ErrGIDContention, id, fsID),
				s.retire(ctx, losers))
		}
		gen++
	}
}

// generations finds the other generations of a volume (base is its
// generation-0 token) in a listing: the latest one if it is later than gen
// (with its generation), and every one earlier than max(gen, latest) but ap.
func generations(listing []efs.AccessPoint, base, apID string, gen int) (later *efs.AccessPoint, k int, older []efs.AccessPoint) {
	genOf := make(map[string]int, maxGenerations)
	for g := range maxGenerations {
		genOf[generationToken(base, g)] = g
	}
	top := gen
	for i := range listing {
		if g, ok := genOf[listing[i].ClientToken]; ok && listing[i].ID != apID && g > top {
			later, top = &listing[i], g
		}
	}
	for _, other := range listing {
		if g, ok := genOf[other.ClientToken]; ok && other.ID != apID && g < top && (later == nil || other.ID != later.ID) {
			older = append(older, other)
		}
	}
	return later, top, older
}

// retire deletes access points that yielded their GID or were superseded by
// a later generation of their volume; never one this process answered.
func (s *Service) retire(ctx context.Context, aps []efs.AccessPoint) error {
	for _, ap := range aps {
		if !s.verify.mayRetire(&ap) {
			continue
		}
		if err := s.efs.DeleteAccessPoint(ctx, ap.ID); err != nil && !errors.Is(err, efs.ErrAccessPointNotFound) {
			return err
		}
		s.gids.Forget(ap.FileSystemID, ap.ID)
		s.verify.forget(ap.ID)
	}
	return nil
}

func (s *Service) setFirstGeneration(name string, gen int) {
	s.mu.Lock()
	s.nextGen[name] = gen
	s.mu.Unlock()
}

// firstGeneration is where a create of name starts: 0, unless this process
// deleted an earlier generation that had no successor.
func (s *Service) firstGeneration(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextGen[name]
}

// generationToken is the client token of generation gen of a volume whose
// generation-0 token is base: base itself (what upstream sends, so its
// access points are found), then a hash of base and gen.
func generationToken(base string, gen int) string {
	if gen == 0 {
		return base
	}
	sum := sha256.Sum256([]byte(base + "\x00generation-" + strconv.Itoa(gen)))
	return hex.EncodeToString(sum[:])
}

// findGeneration looks for the latest generation (> 0) of p's access point
// in a fresh listing of its file system.
func (s *Service) findGeneration(ctx context.Context, p *plan) (*efs.AccessPoint, int, error) {
	aps, err := s.verify.listAfterNow(ctx, p.params.FileSystemID)
	if err != nil {
		return nil, 0, err
	}
	byToken := make(map[string]*efs.AccessPoint, len(aps))
	for i := range aps {
		byToken[aps[i].ClientToken] = &aps[i]
	}
	for gen := maxGenerations - 1; gen > 0; gen-- {
		if ap := byToken[generationToken(p.input.ClientToken, gen)]; ap != nil {
			s.gids.Record(*ap)
			s.verify.learned(ap)
			return ap, gen, nil
		}
	}
	return nil, 0, nil
}

// pending is the GID reservation of one generation of a volume between
// attempts. Only touched under the volume's name lock.
type pending struct {
	res *gid.Reservation // nil for a class that fixes uid and gid
	// inDoubt: an attempt with res had an unknown outcome, so an access
	// point may carry its GID. Then only a definitive answer about the
	// volume's access point (created, or found by its token) releases it;
	// any other error of a later attempt keeps it.
	inDoubt bool
}

// settle releases the reservation: its create's access point is known (and
// recorded) or provably not made with it.
func (pd *pending) settle() {
	if pd.res != nil {
		pd.res.Release()
	}
}

// createOnce creates generation gen of the access point (created), or
// adopts the one an earlier attempt made.
func (s *Service) createOnce(ctx context.Context, p *plan, gen int) (ap *efs.AccessPoint, created bool, err error) {
	key := pendingKey(p.name, gen)
	pd, err := s.takePending(ctx, p, key)
	if err != nil {
		return nil, false, err
	}
	uid, g := p.params.UID, p.params.GID
	if pd.res != nil {
		uid, g = p.params.Identity(pd.res.GID())
	}
	in := p.input
	in.ClientToken = generationToken(p.input.ClientToken, gen)
	in.PosixUser = &efs.PosixUser{UID: uid, GID: g}
	in.CreationInfo = &efs.CreationInfo{OwnerUID: uid, OwnerGID: g, Permissions: p.params.DirectoryPerms}

	ap, err = s.efs.CreateAccessPoint(ctx, in)
	switch {
	case err == nil:
		s.gids.Record(*ap) // before the release: the GID is never free in between
		pd.settle()
		s.verify.learned(ap)
		return ap, true, nil
	case errors.Is(err, efs.ErrAlreadyExists):
		// Our token is taken: by an earlier attempt of this very volume (the
		// answer was lost, the caller timed out, or the process died), or on a
		// lenient server by an access point with other parameters.
		var ae *efs.AlreadyExistsError
		if !errors.As(err, &ae) || ae.AccessPointID == "" {
			s.keepPending(key, pd)
			return nil, false, fmt.Errorf("client token %q is taken but EFS named no access point: %w", in.ClientToken, err)
		}
		found, err := s.efs.DescribeAccessPoint(ctx, ae.AccessPointID)
		if err != nil {
			// Until we see it we cannot know which GID it carries: if an
			// attempt of ours is in doubt, it may be ours.
			s.keepPending(key, pd)
			if errors.Is(err, efs.ErrAccessPointNotFound) {
				return nil, false, fmt.Errorf("%w: %s holds client token %q", ErrNotYetVisible, ae.AccessPointID, in.ClientToken)
			}
			return nil, false, err
		}
		// The token is bound to this access point, so none of our attempts
		// made another one: its GIDs are recorded, ours is free again.
		s.gids.Record(*found)
		pd.settle()
		s.verify.learned(found)
		if err := p.check(found); err != nil {
			return nil, false, err
		}
		return found, false, nil
	case errors.Is(err, efs.ErrUnavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// Outcome unknown: the access point may exist with this GID. Keep the
		// reservation for the retry, which then sends identical parameters.
		pd.inDoubt = true
		s.keepPending(key, pd)
		return nil, false, err
	default:
		s.keepPending(key, pd) // released unless an earlier attempt is in doubt
		return nil, false, err
	}
}

func pendingKey(name string, gen int) string { return name + "\x00" + strconv.Itoa(gen) }

// takePending returns what an earlier attempt of this generation left (so a
// retry sends the GID the first attempt sent), or a new reservation.
func (s *Service) takePending(ctx context.Context, p *plan, key string) (*pending, error) {
	s.mu.Lock()
	pd := s.pending[key]
	delete(s.pending, key)
	s.mu.Unlock()
	if pd != nil && (pd.res == nil) == p.params.NeedsGIDAllocation() {
		// The class changed between attempts from or to a fixed identity;
		// an in-doubt GID stays held for good, it may be on an access point.
		if !pd.inDoubt {
			pd.settle()
		}
		pd = nil
	}
	if pd != nil && pd.res != nil {
		if g := pd.res.GID(); g < p.params.GIDRangeStart || g > p.params.GIDRangeEnd {
			if !pd.inDoubt {
				pd.settle()
			}
			pd = nil
		}
	}
	if pd != nil {
		return pd, nil
	}
	pd = &pending{}
	if p.params.NeedsGIDAllocation() {
		r, err := s.gids.Reserve(ctx, p.params.FileSystemID, p.params.GIDRangeStart, p.params.GIDRangeEnd, key)
		if err != nil {
			return nil, err
		}
		pd.res = r
	}
	return pd, nil
}

// keepPending hands pd to the next attempt if an attempt is in doubt, and
// releases it otherwise.
func (s *Service) keepPending(key string, pd *pending) {
	if !pd.inDoubt {
		pd.settle()
		return
	}
	s.mu.Lock()
	s.pending[key] = pd
	s.mu.Unlock()
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
	if id, ok := ap.Tags[TagClusterID]; ok && id != p.input.Tags[TagClusterID] {
		return fmt.Sprintf("made by cluster %q, not this one (%q)", id, p.input.Tags[TagClusterID])
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
