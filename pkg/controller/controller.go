// Package controller implements the CSI Controller service: CreateVolume and
// DeleteVolume carve EFS access points out of a file system so that no
// interleaving of retries, timeouts, restarts and concurrent calls can race,
// leak an access point, hand out a GID twice or lose data. docs/design.md
// walks through the protocols; the comments here say which step is which.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/snapshot"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Tags written on every access point this driver creates: pkg/ownership's,
// named here too for the callers of this package.
const (
	TagCluster        = ownership.TagCluster
	TagVolumeName     = ownership.TagVolumeName
	TagCapacity       = ownership.TagCapacity
	TagBasePath       = ownership.TagBasePath
	TagClusterID      = ownership.TagClusterID
	TagBound          = ownership.TagBound
	TagClaimName      = ownership.TagClaimName
	TagClaimNamespace = ownership.TagClaimNamespace
	TagRecordLife     = ownership.TagRecordLife
)

// Errors this package adds to the sentinels of pkg/efs, pkg/volume, pkg/gid and
// pkg/keylock. pkg/driver maps each to a gRPC code.
var (
	// ErrIncompatible: an access point exists for this name with other parameters.
	ErrIncompatible = core.ErrIncompatible
	// ErrVolumeNotFound: the volume ID names nothing that exists.
	ErrVolumeNotFound = errors.New("volume not found")
	// ErrNotYetVisible: EFS says the token's access point exists but does not show it yet; retry.
	ErrNotYetVisible = core.ErrNotYetVisible
	// ErrUnsafeRootDir: removing this root directory could remove data that is not the volume's.
	ErrUnsafeRootDir = errors.New("refusing to remove root directory")
	// ErrRootDirRemoval: the root directory could not be removed; the access point is kept.
	ErrRootDirRemoval = errors.New("root directory removal failed")
	// ErrInvalidRequest: a required request field is missing or malformed.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrUnresolvedRef: the class's file system reference names no object
	// or key this controller can read (or a value that is not an ID).
	ErrUnresolvedRef = errors.New("file system reference cannot be resolved")
	// ErrRefUnavailable: the Kubernetes API did not answer a reference read; retry.
	ErrRefUnavailable = errors.New("file system reference not readable now")
	// ErrNotReachable: the volume's file system is not visible with the
	// credentials of the call (another account's, and no role named).
	ErrNotReachable = core.ErrNotReachable
	// ErrForeign: the access point is another cluster's.
	ErrForeign = core.ErrForeign
	// ErrGIDContention: another writer took every GID this call tried; retry.
	ErrGIDContention = core.ErrGIDContention
)

// EFS is the subset of the EFS API the controller calls. pkg/efs.Client
// implements it. Contract:
//   - CreateAccessPoint is idempotent by ClientToken: a repeated token yields an
//     *efs.AlreadyExistsError naming the existing access point (or, on lenient
//     servers, that access point itself).
//   - Errors wrap the sentinels of pkg/efs. ErrUnavailable means the outcome of
//     a mutating call is unknown: it may have been applied.
//   - DescribeAccessPoint may answer ErrAccessPointNotFound for an access point
//     created a moment ago (eventual consistency); DeleteAccessPoint does not.
type EFS interface {
	CreateAccessPoint(ctx context.Context, in efs.CreateAccessPointInput) (*efs.AccessPoint, error)
	DeleteAccessPoint(ctx context.Context, accessPointID string) error
	DescribeAccessPoint(ctx context.Context, accessPointID string) (*efs.AccessPoint, error)
	ListAccessPoints(ctx context.Context, fsID string, fn func([]efs.AccessPoint) error) error
}

// FileSystemMounter mounts the root of a whole file system, for removing an
// access point's root directory. Contract: MountFileSystem mounts at an
// existing empty directory or fails leaving nothing mounted; Unmount of a
// target that is not mounted is not an error.
type FileSystemMounter interface {
	MountFileSystem(ctx context.Context, fsID, target string) error
	Unmount(ctx context.Context, target string) error
}

// RefReader reads the file system ID a StorageClass names by reference
// (fileSystemIdConfigRef, fileSystemIdSecretRef). Contract: Value returns
// the value under ref.Key of the ConfigMap or Secret ref names, as stored;
// an object or key that does not exist, or that this controller may not
// read, wraps ErrUnresolvedRef; any other error is transient. It never
// writes.
type RefReader interface {
	Value(ctx context.Context, ref volume.ObjectRef) (string, error)
}

// GID verification modes (--gid-verify). Since the record (pkg/journal)
// makes GIDs unique by construction, no mode lists to verify any more; the
// flag is accepted for the command lines that set it.
const (
	VerifyAuto   = "auto"
	VerifyAlways = "always"
	VerifyNever  = "never"
)

// Config wires the service. EFS is required; Mounter is required when
// DeleteRootDir is set.
type Config struct {
	EFS       EFS
	Mounter   FileSystemMounter
	Refs      RefReader           // nil: a class naming its file system by reference is an error
	Backends  Backends            // nil: only Config.EFS (no other account, no S3 Files)
	Zones     FileSystemDescriber // nil: a class with enforceZoneAffinity "true" is an error
	Tags      map[string]string   // added to every access point (--tags)
	ClusterID string              // --cluster-id, written as TagClusterID with DescriptiveTags; "" = unknown
	// DescriptiveTags (--descriptive-tags) adds this driver's own tags
	// (volume name, capacity, claim, base path, cluster ID, record life)
	// to efs.csi.aws.com/cluster on every access point. AWS's managed
	// policy AmazonEFSCSIDriverPolicy allows only the cluster tag: with it
	// every create is denied (docs/iam.md).
	DescriptiveTags bool
	DeleteRootDir   bool // --delete-access-point-root-dir
	// DirPreflight, before a directory volume's create writes anything,
	// says why this process cannot make directories (MountPrivileges), or
	// nil. nil: no check (the mount's error says it, after the record).
	DirPreflight func() error
	// ListingLag (--listing-lag) is how long EFS may take to list an
	// access point after creating it. A root directory is removed only
	// after a listing that began this long after its DeleteVolume did, so
	// that an access point another writer made on the directory just
	// before the delete is seen. 0: none.
	ListingLag time.Duration
	TempDir    string      // parent of per-call mount points; "" = os.TempDir()
	GIDOptions gid.Options // how stale the allocator's listing may get
	GIDVerify  string      // accepted for compatibility: VerifyAuto (""), VerifyAlways or VerifyNever

	// HandoverFence (--handover-fence) is how long the calls of the
	// controller this one takes over from (upstream's, in an in-place
	// upgrade) may run after the handover: its csi-provisioner's
	// --timeout. Creates wait that long, plus ListingLag, after this
	// process's first create or delete, until a controller of the record
	// has (handover.go). 0: no fence.
	HandoverFence time.Duration

	// AccessPointLimit (--access-point-limit) is how many access points a
	// file system may have (EFS's quota, 10,000 unless raised): a class
	// over several file systems places no new volume on one at it. 0: no
	// limit known (EFS's answer alone says it).
	AccessPointLimit int

	// Journal is the record of this cluster's volumes and GIDs (required in
	// production: the Kubernetes store, or a local file outside Kubernetes;
	// nil: one in this process's memory, for tests of one controller).
	Journal journal.Store
	Now     func() time.Time // nil: time.Now
	Logger  *slog.Logger

	// Copier copies a directory tree for snapshots, restores and clones
	// (pkg/treecopy); nil: this controller offers none.
	Copier snapshot.Copier
	// SnapshotWait bounds how long a snapshot, restore or clone call
	// waits for its copy before it answers ABORTED (0: 10 s).
	SnapshotWait time.Duration
}

// Service is the CSI Controller service. A backend's Service (backend.go)
// is a copy of its parent with another client, mounter and logger: every
// other field points at state shared by all backends, one per file system
// whichever credentials reach it.
type Service struct {
	csi.UnimplementedControllerServer
	efs     EFS
	mounter FileSystemMounter
	// describer: the zones of file systems (topology.go); nil without
	// Config.Zones.
	describer FileSystemDescriber
	log       *slog.Logger
	api       API
	// made: the access points this backend made and has not deleted
	// (made.go), which a delete looks up without a request.
	made *madeAPs

	*shared
}

// shared is the state of the controller, the same for every backend.
type shared struct {
	refs     RefReader
	tags     map[string]string
	cluster  string // Config.ClusterID
	now      func() time.Time
	delRoot  bool
	tmpDir   string
	locks    *keylock.Set
	gids     *gid.Allocator
	journal  *journal.Journal
	roots    *rootDirs                                // root-directory removal (rootdir.go)
	listings *freshFlight[listKey, []efs.AccessPoint] // listings that start after their caller asked
	views    *freshFlight[listKey, *rootView]         // the same, with the record, for root removal (rootindex.go)
	handover handover                                 // the handover fence (handover.go)
	cfg      Config

	// Backends (backend.go): the Services of other backends, made at
	// first use, at most maxBackends of them.
	backends Backends
	bmu      sync.Mutex
	others   map[Backend]*Service

	// warned: the warnings already logged once (firstWarning: ignored
	// StorageClass keys, other clusters in a class's GID range), warnedN
	// their number.
	warned  sync.Map
	warnedN atomic.Int64

	// fss: this process's state of each file system (fsstate.go).
	fss *fileSystems

	// dirs: the file systems mounted for making directory volumes
	// (createdir.go).
	dirs *dirMounts

	// snaps: snapshots, restores and clones (snapshots.go), made once.
	snapOnce sync.Once
	snaps    atomic.Pointer[snapshot.Manager]
}

// listKey is a listing of a file system through one client.
type listKey struct {
	client EFS
	fsID   string
}

// listTimeout bounds a shared listing.
const listTimeout = time.Minute

// New validates cfg and builds the service.
func New(cfg Config) (*Service, error) {
	if cfg.EFS == nil {
		return nil, errors.New("controller: EFS client is required")
	}
	if cfg.ListingLag < 0 {
		return nil, fmt.Errorf("controller: listing lag %v is negative", cfg.ListingLag)
	}
	if cfg.HandoverFence < 0 {
		return nil, fmt.Errorf("controller: handover fence %v is negative", cfg.HandoverFence)
	}
	if cfg.DeleteRootDir && cfg.Mounter == nil {
		return nil, errors.New("controller: deleting root directories needs a file system mounter")
	}
	for k := range cfg.Tags {
		if strings.HasPrefix(k, "efs.csi.aws.com/") {
			return nil, fmt.Errorf("controller: tag %q is reserved for the driver", k)
		}
	}
	if !validClusterID(cfg.ClusterID) {
		return nil, fmt.Errorf("controller: cluster ID %q: want at most 256 letters, digits, spaces and _.:/=+-@", cfg.ClusterID)
	}
	switch cfg.GIDVerify {
	case "", VerifyAuto, VerifyAlways, VerifyNever:
	default:
		return nil, fmt.Errorf("controller: GID verification mode %q: want auto, always or never", cfg.GIDVerify)
	}
	if cfg.TempDir == "" {
		cfg.TempDir = os.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Journal == nil {
		cfg.Journal = journal.NewMemory()
	}
	// No per-process seed (GIDOptions.Seed): two processes creating one
	// volume start their GID search at the same id, so send one GID token
	// and converge on one access point even when they keep records of
	// their own; different volumes start apart by their names.
	if cfg.GIDOptions.Now == nil {
		cfg.GIDOptions.Now = cfg.Now
	}
	if cfg.GIDOptions.ListingLag == 0 {
		// What this process made and another deleted is freed by the
		// first listing that would show it if it were there.
		cfg.GIDOptions.ListingLag = cfg.ListingLag
	}
	if cfg.GIDOptions.MaxAge == 0 {
		// Short enough that another cluster's access points are seen soon,
		// long enough that listing stays a small share of the API calls.
		cfg.GIDOptions.MaxAge = time.Minute
	}
	listings := newFreshFlight(listTimeout, func(ctx context.Context, k listKey) ([]efs.AccessPoint, error) {
		return efs.Collect(ctx, k.client.ListAccessPoints, k.fsID)
	})
	fss := newFileSystems()
	gidOpts := cfg.GIDOptions
	gidOpts.Home = fss.gidView // the allocator's view of a file system is in its fsState, under its lock
	j := journal.NewClocked(cfg.Journal, cfg.Now)
	views := newFreshFlight(listTimeout, func(ctx context.Context, k listKey) (*rootView, error) {
		return newView(ctx, k.client, j, k.fsID, cfg.Now())
	})
	fss.alloc = gid.New(cfg.EFS, gidOpts)
	return &Service{
		efs: cfg.EFS, mounter: cfg.Mounter, describer: cfg.Zones, log: cfg.Logger, made: newMadeAPs(),
		shared: &shared{
			refs: cfg.Refs, tags: cfg.Tags, cluster: cfg.ClusterID, now: cfg.Now, delRoot: cfg.DeleteRootDir, tmpDir: cfg.TempDir,
			locks: keylock.New(), gids: fss.alloc, journal: j,
			roots: newRootDirs(), listings: listings, views: views, cfg: cfg,
			handover: handover{fence: fenceOf(cfg)},
			backends: cfg.Backends, others: map[Backend]*Service{},
			fss: fss, dirs: &dirMounts{},
		},
	}, nil
}

// fenceOf is the handover fence of cfg: none without HandoverFence.
func fenceOf(cfg Config) time.Duration {
	if cfg.HandoverFence <= 0 {
		return 0
	}
	return cfg.HandoverFence + cfg.ListingLag + handoverMargin
}

// handoverMargin: a request sent just before its call's deadline still
// reaches EFS after it.
const handoverMargin = time.Second

// listAfterNow lists fsID through this Service's client in a listing that
// starts after the call (shared with every caller waiting then).
func (s *Service) listAfterNow(ctx context.Context, fsID string) ([]efs.AccessPoint, error) {
	return s.listings.Do(ctx, listKey{s.efs, fsID})
}

// viewAfterNow is listAfterNow with the record read after the listing,
// indexed for root removal (shared with every delete waiting then).
func (s *Service) viewAfterNow(ctx context.Context, fsID string) (*rootView, error) {
	return s.views.Do(ctx, listKey{s.efs, fsID})
}

// LocksHeld is the number of volume locks held now: 0 at rest.
func (s *Service) LocksHeld() int { return s.locks.Len() }

// GIDStats reports the allocators' view per file system, for metrics: of
// every backend (file system IDs are unique across accounts and APIs).
func (s *Service) GIDStats() map[string]gid.Stats {
	return s.gids.Stats()
}

// ControllerGetCapabilities advertises create/delete and listing.
func (s *Service) ControllerGetCapabilities(_ context.Context, _ *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	rpcs := []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME}
	if s.canList() {
		rpcs = append(rpcs, csi.ControllerServiceCapability_RPC_LIST_VOLUMES)
	}
	if _, err := s.snapshots(); err == nil {
		rpcs = append(rpcs, csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
			csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS, csi.ControllerServiceCapability_RPC_CLONE_VOLUME)
	}
	for _, c := range rpcs {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: c}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// validClusterID: what EFS accepts as a tag value.
func validClusterID(id string) bool {
	return len(id) <= 256 && !strings.ContainsFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(" _.:/=+-@", r))
	})
}
