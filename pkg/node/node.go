// Package node is the CSI Node service: it mounts volumes into pods' target
// directories (NodePublishVolume), unmounts them (NodeUnpublishVolume), and
// reports where the node is and what a mounted volume holds.
//
// Every call may be a retry: of a call that timed out and is still running
// (it holds the target's lock, so the retry is ABORTED at once), or of a call
// whose process was killed between mounting and answering (the retry finds
// the mount in /proc/self/mountinfo and answers OK without mounting again). A
// target left stacked, half made or pointing at a vanished directory is
// unmounted and mounted again, never mounted over.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/mount"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Sentinel errors; pkg/driver maps them to gRPC codes. Invalid requests wrap
// the pkg/volume sentinels (ErrInvalidID, ErrInvalidParameter, ErrUnsafePath)
// and a busy target wraps keylock.ErrBusy.
var (
	// ErrTargetConflict: the target holds a different mount (ALREADY_EXISTS).
	ErrTargetConflict = errors.New("target path holds another mount")
	// ErrVolumeNotFound: the volume's directory does not exist, or the path
	// given to NodeGetVolumeStats is not a mounted volume (NOT_FOUND).
	ErrVolumeNotFound = errors.New("volume not found")
	// ErrMountFailed: mounting or unmounting failed (INTERNAL).
	ErrMountFailed = errors.New("mount failed")
	// ErrTooManyMounts: Config.AbortOverLimit is set and every mount slot
	// is taken (ABORTED, as upstream's --max-inflight-mount-calls).
	ErrTooManyMounts = errors.New("too many NodePublishVolume calls in flight")
)

// TopologyZoneKey is the topology segment NodeGetInfo reports the zone in.
const TopologyZoneKey = volume.TopologyZoneKey

// Mounter is what the service needs from a mount back end; *mount.Mounter
// satisfies it. The contract:
//
//   - Inspect reports what target holds relative to vol and changes nothing;
//     a target that does not exist is mount.NotMounted.
//   - MountVolume mounts vol on target, an existing directory that is not a
//     mount point: it refuses a mount point (mounts are never stacked) and
//     leaves nothing mounted when it fails. A missing volume directory is an
//     error wrapping mount.ErrNotFound.
//   - Unmount removes every mount stacked on target; nothing mounted, or no
//     target, is not an error. ForceUnmount does the same for a mount whose
//     server does not answer (forced, detached).
//   - Usage reports the statfs figures of a mount point, mount.ErrNotMounted
//     for anything else.
//
// All of them return when ctx ends, even if a system call is still stuck.
type Mounter interface {
	Inspect(ctx context.Context, vol mount.Volume, target string) (mount.State, error)
	MountVolume(ctx context.Context, vol mount.Volume, target string) error
	Unmount(ctx context.Context, target string) error
	ForceUnmount(ctx context.Context, target string) error
	Usage(ctx context.Context, target string) (mount.Usage, error)
}

// DefaultMaxConcurrentMounts bounds concurrent mounts when Config leaves it 0.
const DefaultMaxConcurrentMounts = 16

// Config wires the service.
type Config struct {
	NodeID string // required
	Zone   string // availability zone; "" = no topology
	// Mounter is required.
	Mounter Mounter
	// MaxConcurrentMounts bounds NodePublishVolume calls mounting at once;
	// others wait for a slot within their deadline (or, with
	// AbortOverLimit, are refused). <= 0 means DefaultMaxConcurrentMounts.
	MaxConcurrentMounts int
	// AbortOverLimit is upstream's --max-inflight-mount-calls-opt-in: a
	// NodePublishVolume that finds every slot taken answers ABORTED
	// (ErrTooManyMounts) at once instead of waiting for one.
	AbortOverLimit bool
	// VolMetricsOptIn advertises GET_VOLUME_STATS, as upstream's
	// --vol-metrics-opt-in: kubelet then calls NodeGetVolumeStats for every
	// mounted volume periodically, and a statfs on an NFS mount can block.
	// NodeGetVolumeStats answers either way.
	VolMetricsOptIn bool
	// UnmountTimeout: an unmount still running after this long is forced
	// (umount -f -l), so a dead server cannot keep a pod terminating. 0
	// means never force.
	UnmountTimeout time.Duration
	// MaxVolumesPerNode is reported by NodeGetInfo (upstream's
	// --volume-attach-limit); 0 reports no limit.
	MaxVolumesPerNode int64
	Logger            *slog.Logger

	// VolMetricsRefresh is how old a volume's usage may get before
	// NodeGetVolumeStats starts a new walk (--vol-metrics-refresh-period);
	// 0 means DefaultVolMetricsRefresh.
	VolMetricsRefresh time.Duration
	// VolMetricsFSRateLimit bounds the walks running at once per file
	// system (--vol-metrics-fs-rate-limit); 0 means
	// DefaultVolMetricsFSRateLimit.
	VolMetricsFSRateLimit int
	// MemoryLimit is the node plugin's memory limit in bytes (upstream
	// reads it from CSI_NODE_MEMORY_LIMIT, which its chart and this one set
	// from the container's limits.memory: the node's allocatable memory
	// when the container has no limit); below S3FilesReadCacheMinMemory,
	// S3 Files volumes are mounted with nos3readcache. 0 means unknown:
	// nos3readcache too, as upstream (a read cache the node may not hold).
	MemoryLimit int64
	// FIPS: efs-utils runs its TLS tunnels in FIPS mode (efsutils.Conf.FIPS).
	// stunnel then needs OpenSSL's FIPS provider, which the image does not
	// have, so the stunnel mount option is refused (efs-proxy, the default
	// tunnel, has AWS-LC's FIPS module built in).
	FIPS bool
}

// S3FilesReadCacheMinMemory is the least node plugin memory limit with
// which S3 Files mounts keep efs-proxy's read cache: under it they are
// mounted with nos3readcache. Upstream's threshold: the cache may grow to
// readahead_cache_max_memory_size_mb per mount, in the node plugin's
// container.
const S3FilesReadCacheMinMemory = 30 << 30

// Service is the CSI Node service.
type Service struct {
	csi.UnimplementedNodeServer
	nodeID         string
	zone           string
	mounter        Mounter
	volMetrics     bool
	unmountTimeout time.Duration
	maxVolumes     int64
	memoryLimit    int64
	fips           bool
	locks          *keylock.Set
	slots          chan struct{} // one token per mount in progress
	abortOverLimit bool
	stats          *volStats
	log            *slog.Logger
}

// New validates cfg and builds the service.
func New(cfg Config) (*Service, error) {
	if cfg.NodeID == "" {
		return nil, errors.New("node: node ID is required")
	}
	if cfg.Mounter == nil {
		return nil, errors.New("node: mounter is required")
	}
	if cfg.MaxConcurrentMounts <= 0 {
		cfg.MaxConcurrentMounts = DefaultMaxConcurrentMounts
	}
	if cfg.UnmountTimeout < 0 {
		return nil, fmt.Errorf("node: unmount timeout %v is negative", cfg.UnmountTimeout)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.VolMetricsRefresh < 0 || cfg.VolMetricsFSRateLimit < 0 {
		return nil, fmt.Errorf("node: volume metrics refresh %v and rate limit %d must not be negative",
			cfg.VolMetricsRefresh, cfg.VolMetricsFSRateLimit)
	}
	if cfg.VolMetricsRefresh == 0 {
		cfg.VolMetricsRefresh = DefaultVolMetricsRefresh
	}
	if cfg.VolMetricsFSRateLimit == 0 {
		cfg.VolMetricsFSRateLimit = DefaultVolMetricsFSRateLimit
	}
	return &Service{
		nodeID: cfg.NodeID, zone: cfg.Zone, mounter: cfg.Mounter, volMetrics: cfg.VolMetricsOptIn, memoryLimit: cfg.MemoryLimit, fips: cfg.FIPS,
		unmountTimeout: cfg.UnmountTimeout, maxVolumes: cfg.MaxVolumesPerNode, locks: keylock.New(),
		slots: make(chan struct{}, cfg.MaxConcurrentMounts), abortOverLimit: cfg.AbortOverLimit, log: cfg.Logger,
		stats: newVolStats(cfg.VolMetricsRefresh, cfg.VolMetricsFSRateLimit, cfg.Mounter, cfg.Logger),
	}, nil
}

// LocksHeld is the number of target locks held now: 0 at rest.
func (s *Service) LocksHeld() int { return s.locks.Len() }

// NodeGetInfo reports the node ID, the zone as topology when known, and the
// volume limit if one is configured (EFS mounts are not attachments).
func (s *Service) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	resp := &csi.NodeGetInfoResponse{NodeId: s.nodeID, MaxVolumesPerNode: s.maxVolumes}
	if s.zone != "" {
		resp.AccessibleTopology = &csi.Topology{Segments: map[string]string{TopologyZoneKey: s.zone}}
	}
	return resp, nil
}

// NodeGetCapabilities: no staging (EFS has nothing to attach); volume stats
// when opted in.
func (s *Service) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	resp := &csi.NodeGetCapabilitiesResponse{}
	if s.volMetrics {
		resp.Capabilities = append(resp.Capabilities, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{
				Type: csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
			}},
		})
	}
	return resp, nil
}

// acquire takes a mount slot, waiting no longer than ctx allows, or not at
// all with AbortOverLimit.
func (s *Service) acquire(ctx context.Context) (release func(), err error) {
	if s.abortOverLimit {
		select {
		case s.slots <- struct{}{}:
			return func() { <-s.slots }, nil
		default:
			return nil, fmt.Errorf("%w: the limit is %d", ErrTooManyMounts, cap(s.slots))
		}
	}
	select {
	case s.slots <- struct{}{}:
		return func() { <-s.slots }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for one of %d mount slots: %w", cap(s.slots), ctx.Err())
	}
}

// unmount unmounts target; once the unmount has run for UnmountTimeout it
// forces it, with a short deadline of its own, so that a caller whose
// deadline is the same as the timeout still gets the forced unmount. A
// caller that gives up sooner gets its context's error and no forcing.
func (s *Service) unmount(ctx context.Context, target string) error {
	// A usage walk holds descriptors in the volume: stop it first, and
	// start none until the unmount is over (the entry is dropped).
	release := s.stats.stop(ctx, target)
	defer release()
	if s.unmountTimeout <= 0 {
		return s.mounter.Unmount(ctx, target)
	}
	start := time.Now()
	uctx, cancel := context.WithTimeout(ctx, s.unmountTimeout)
	defer cancel()
	err := s.mounter.Unmount(uctx, target)
	if err == nil || !s.unmountTimedOut(err, uctx, start) {
		return err
	}
	s.log.Warn("unmount timed out, forcing it", slog.String("target", target), slog.Duration("timeout", s.unmountTimeout))
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), forceUnmountTimeout)
	defer fcancel()
	if ferr := s.mounter.ForceUnmount(fctx, target); ferr != nil {
		return errors.Join(err, fmt.Errorf("forced unmount: %w", ferr))
	}
	return nil
}

// unmountTimedOut says whether err, from an unmount started at start with
// uctx, means the unmount has been blocked for UnmountTimeout: this one, or
// an earlier one still blocked on the same mount point (a retry after the
// caller gave up is refused at once, mount.ErrNotResponding, and would
// otherwise never force).
func (s *Service) unmountTimedOut(err error, uctx context.Context, start time.Time) bool {
	if since, ok := mount.BlockedSince(err); ok {
		return time.Since(since) >= s.unmountTimeout
	}
	return uctx.Err() != nil && time.Since(start) >= s.unmountTimeout
}

// forceUnmountTimeout bounds a forced unmount, which should not block.
const forceUnmountTimeout = 10 * time.Second
