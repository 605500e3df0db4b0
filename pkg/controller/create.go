package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/snapshot"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// plan is a CreateVolume's core.Plan, computed from the request alone, and
// what its answer needs besides.
type plan struct {
	core.Plan
	topology     []*csi.Topology // AccessibleTopology of the answer (enforceZoneAffinity)
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
	var src snapshot.Source
	cs := req.GetVolumeContentSource()
	if volume.ReaderOnly(req.GetVolumeCapabilities()) {
		// Served from a snapshot's copy, with no copy of its own: a
		// read-only volume of no content would stay empty.
		if cs.GetSnapshot() == nil || b.API != APIEFS {
			return nil, fmt.Errorf("%w: reader-only access modes (ReadOnlyMany) are served from a VolumeSnapshot of an EFS volume: "+
				"set the claim's dataSource to one, or ask for ReadWriteMany", ErrInvalidRequest)
		}
		return svc.createReader(ctx, req, b)
	}
	if cs != nil {
		// Before anything is made: a source that does not exist is
		// NOT_FOUND, and a snapshot not yet whole is waited for.
		if b.API != APIEFS {
			return nil, fmt.Errorf("%w: S3 Files volumes from a snapshot or a volume", ErrUnimplemented)
		}
		if src, err = svc.restoreSource(ctx, cs); err != nil {
			return nil, err
		}
	}
	resp, err := svc.createVolume(ctx, req, b)
	if errors.Is(err, efs.ErrAccessDenied) && b != (Backend{}) {
		s.dropBackend(b) // a role that refuses this controller keeps nothing
	}
	if err != nil || cs == nil {
		return resp, err
	}
	// Answered only once whole (ABORTED while the copy goes on).
	if err := svc.restore(ctx, req.GetName(), resp, src, req.GetParameters()); err != nil {
		return nil, err
	}
	resp.Volume.ContentSource = cs
	return resp, nil
}

// createVolume validates the request into a plan (step 1), then executes
// the rest of the protocol (core.NewCreateVolume, effects.go) under the
// name locks, and answers with the volume's context.
func (s *Service) createVolume(ctx context.Context, req *csi.CreateVolumeRequest, b Backend) (*csi.CreateVolumeResponse, error) {
	if err := s.awaitHandover(ctx); err != nil {
		return nil, err
	}
	p, err := s.plan(ctx, req)
	if err != nil {
		return nil, err
	}
	p.backend = b
	st := s.fs(p.Params.FileSystemID)
	x := &effects{s: s, ctx: ctx, p: p, st: st}
	defer x.release() // the name locks, after the answer's context is read
	end := x.run(core.NewCreateVolume(s.createConfig(x.logger()), &p.Plan, st.mem, s.now()))
	if p.Params.NeedsGIDAllocation() {
		// From the listing the create's allocator view came from.
		s.warnOtherClusters(p.Params.FileSystemID, p.Params.GIDRangeStart, p.Params.GIDRangeEnd)
	}
	e, ok := end.(core.Answer)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: a create ended with %T", core.ErrStuck, end)
	case e.Err != nil:
		return nil, e.Err
	}
	if p.Dir {
		return s.dirAnswer(ctx, p, e.Record)
	}
	ap := e.AP
	volCtx, err := s.volumeContext(ctx, p.backend, p.crossAccount, p.Params.AZ, ap.FileSystemID)
	if err != nil {
		return nil, err
	}
	s.log.Info("volume ready", slog.String("name", p.Name), slog.String("accessPoint", ap.ID),
		slog.String("path", ap.Path), slog.Int64("gid", core.PosixGID(ap)))
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:           s.volumeID(ap),
		CapacityBytes:      p.Capacity,
		VolumeContext:      volCtx,
		AccessibleTopology: p.topology,
	}}, nil
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
	classParams, err := s.resolveFileSystem(ctx, req.GetParameters())
	if err != nil {
		return nil, err
	}
	params, err := volume.ParseParams(classParams)
	if err != nil {
		return nil, err
	}
	s.warnIgnored(params.FileSystemID, volume.IgnoredParams(classParams))
	// Every check that can refuse the create is planOn's, run on the file
	// system chosen before a class over several records its choice
	// (placed): a refused create leaves no place entry.
	planOn := func(params volume.Params, placed string) (*plan, error) {
		return s.planOn(ctx, req, capacity, crossAccount, params, placed)
	}
	if params.FileSystemIDs != "" {
		return s.placed(ctx, name, params, req.GetAccessibilityRequirements(), planOn)
	}
	return planOn(params, "")
}

// planOn is the rest of plan, on the file system params names.
func (s *Service) planOn(ctx context.Context, req *csi.CreateVolumeRequest, capacity int64, crossAccount bool,
	params volume.Params, placed string) (*plan, error) {
	name := req.GetName()
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
			p.Placed = placed
		}
		return p, err
	}
	tags, err := s.tagsFor(name, capacity, params)
	if err != nil {
		return nil, err
	}
	return &plan{
		Plan: core.Plan{Name: name, Params: params, Capacity: capacity, Cluster: s.cluster, Placed: placed,
			Input: efs.CreateAccessPointInput{
				FileSystemID: params.FileSystemID,
				ClientToken:  params.ClientToken(name),
				Path:         root,
				Tags:         tags,
			}},
		crossAccount: crossAccount, topology: topology,
	}, nil
}

// tagsFor is what a volume's access point is tagged with: nil for a class
// with enableTagging "false" (no tag at all, as upstream: so --tags, which
// upstream also refuses with it, is INVALID_ARGUMENT). By default only
// efs.csi.aws.com/cluster=true, as upstream, and --tags: AWS's managed
// policy allows that one key and no other (what proves an access point
// this cluster's is its record and its GID token, core.TaggedFor). The
// descriptive tags (Config.DescriptiveTags) only when asked.
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
	if !s.cfg.DescriptiveTags {
		return tags, nil
	}
	tags[TagVolumeName] = name
	tags[TagCapacity] = core.CapacityTag(capacity)
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

// createConfig is what core.Create needs of this controller, logging to
// log.
func (s *Service) createConfig(log *slog.Logger) core.CreateConfig {
	return core.CreateConfig{API: string(s.api), Cluster: s.cluster, DeleteRootDir: s.delRoot, Near: s.journal.Near, Logger: log}
}

// cleanupContext is ctx without its end, within cleanupTimeout: for what
// must follow what a call did (an access point made is recorded or
// deleted, an id held for nothing released), since a call cut short there
// would leave it for nobody.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
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
