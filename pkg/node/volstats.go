package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/diskusage"
	"github.com/efs-csi/efs-csi-driver/pkg/mount"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Defaults of the per-volume usage settings, upstream's.
const (
	DefaultVolMetricsRefresh     = 240 * time.Minute
	DefaultVolMetricsFSRateLimit = 5
)

// failedWalkRetry is how soon a walk that failed is tried again (or the
// refresh period, if shorter).
const failedWalkRetry = time.Minute

// volStats is the per-volume usage cache behind NodeGetVolumeStats: one
// entry per published target path that has been asked about, refreshed by a
// background walk (pkg/diskusage) at most every refresh period, with at
// most fsLimit walks running per file system. A call never waits for a
// walk: it answers what the last walk found, and starts one when none has
// run for the period.
type volStats struct {
	refresh time.Duration
	fsLimit int
	mounter Mounter
	log     *slog.Logger
	// Hooks for tests: the clock, the walker, and a call after every walk.
	now    func() time.Time
	walker diskusage.Walker
	walked func(target string, err error)

	mu      sync.Mutex
	entries map[string]*statEntry    // by target path
	slots   map[string]chan struct{} // by file system: one token per walk running
}

type statEntry struct {
	fsKey    string
	usage    []*csi.VolumeUsage // nil until a walk has finished
	next     time.Time          // when the next walk may start
	running  bool
	stopped  bool // the target is being unmounted: no new walk
	cancel   context.CancelFunc
	finished chan struct{} // closed when the running walk ends
}

func newVolStats(refresh time.Duration, fsLimit int, m Mounter, log *slog.Logger) *volStats {
	return &volStats{refresh: refresh, fsLimit: fsLimit, mounter: m, log: log, now: time.Now,
		entries: map[string]*statEntry{}, slots: map[string]chan struct{}{}}
}

// unknownUsage is the answer before the first walk of a volume has
// finished, as upstream's: a usage of unit UNKNOWN, so that kubelet records
// no figures rather than wrong ones (statfs would report the whole file
// system; a zero would read as an empty volume).
var unknownUsage = []*csi.VolumeUsage{{Unit: csi.VolumeUsage_UNKNOWN}}

// get answers the usage known for the volume at target and starts a walk
// if it is due. fsKey groups walks for the rate limit.
func (v *volStats) get(fsKey, target string) []*csi.VolumeUsage {
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.entries[target]
	if e == nil {
		e = &statEntry{fsKey: fsKey}
		v.entries[target] = e
	}
	if !e.running && !e.stopped && !v.now().Before(e.next) {
		v.start(target, e)
	}
	if e.usage == nil {
		return unknownUsage
	}
	return e.usage
}

// start launches e's walk; v.mu is held.
func (v *volStats) start(target string, e *statEntry) {
	ctx, cancel := context.WithCancel(context.Background())
	e.running, e.cancel, e.finished = true, cancel, make(chan struct{})
	slots := v.slots[e.fsKey]
	if slots == nil {
		slots = make(chan struct{}, v.fsLimit)
		v.slots[e.fsKey] = slots
	}
	go v.run(ctx, target, e, slots)
}

// run waits for a slot of the file system (without holding a thread), walks
// and stores the result, unless the entry was stopped or dropped meanwhile.
func (v *volStats) run(ctx context.Context, target string, e *statEntry, slots chan struct{}) {
	defer close(e.finished)
	defer e.cancel()
	var usage []*csi.VolumeUsage
	err := ctx.Err()
	select {
	case slots <- struct{}{}:
		usage, err = v.measure(ctx, target)
		<-slots
	case <-ctx.Done():
		err = ctx.Err()
	}
	v.mu.Lock()
	e.running = false
	if err == nil {
		e.usage, e.next = usage, v.now().Add(v.refresh)
	} else {
		e.next = v.now().Add(min(v.refresh, failedWalkRetry))
	}
	v.mu.Unlock()
	if err != nil && !errors.Is(err, context.Canceled) {
		v.log.Warn("volume usage walk failed", slog.String("target", target), slog.Any("error", err))
	}
	if v.walked != nil {
		v.walked(target, err)
	}
}

// measure is one walk: statfs of the mount for the file system's capacity
// and free space, and the directory walk for what the volume uses.
func (v *volStats) measure(ctx context.Context, target string) ([]*csi.VolumeUsage, error) {
	fsu, err := v.mounter.Usage(ctx, target)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	du, err := v.walker.Walk(ctx, target)
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", target, err)
	}
	v.log.Debug("volume usage walked", slog.String("target", target), slog.Int64("bytes", du.Bytes),
		slog.Int64("inodes", du.Inodes), slog.Duration("took", time.Since(start)))
	return []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: fsu.TotalBytes, Available: fsu.AvailableBytes, Used: du.Bytes},
		{Unit: csi.VolumeUsage_INODES, Total: fsu.TotalInodes, Available: fsu.FreeInodes, Used: du.Inodes},
	}, nil
}

// stop cancels the walk of target, if one runs, and waits (within ctx) for
// it to close its descriptors, which would make the unmount fail (EBUSY);
// no walk starts until release, which drops the entry.
func (v *volStats) stop(ctx context.Context, target string) (release func()) {
	v.mu.Lock()
	e := v.entries[target]
	if e == nil {
		e = &statEntry{}
		v.entries[target] = e
	}
	e.stopped = true
	running, finished := e.running, e.finished
	if running {
		e.cancel()
	}
	v.mu.Unlock()
	if running {
		select {
		case <-finished:
		case <-ctx.Done(): // blocked in a system call: go on, the unmount says what it can
		}
	}
	return func() { v.drop(target, e) }
}

// drop removes target's entry if it is still e, cancelling its walk.
func (v *volStats) drop(target string, e *statEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.entries[target] != e {
		return
	}
	if e.running {
		e.cancel()
	}
	delete(v.entries, target)
}

// forget drops target's entry, whatever it is: the path is not mounted.
func (v *volStats) forget(target string) {
	v.mu.Lock()
	e := v.entries[target]
	v.mu.Unlock()
	if e != nil {
		v.drop(target, e)
	}
}

// cached counts the entries: one per published volume asked about.
func (v *volStats) cached() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.entries)
}

// NodeGetVolumeStats reports the volume's own usage: bytes and inodes used
// from a walk of the published directory tree (what the volume holds, not
// the whole file system statfs would report), with the file system's
// capacity and free space (EFS is elastic: no smaller capacity exists). It
// never waits for the walk: the first call answers UNKNOWN and starts it;
// later calls answer the last walk's figures and start a new walk once they
// are older than the refresh period. A path that is not a mount point,
// relative paths included, is NOT_FOUND (as csi-sanity expects); the volume
// ID must be present and names the file system the walk counts against.
func (s *Service) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume ID", "is required")
	}
	p := req.GetVolumePath()
	if p == "" {
		return nil, invalid("volume path", "is required")
	}
	target, err := checkTarget("volume path", p)
	if err != nil {
		// %v, not %w: the path's own sentinel would make it INVALID_ARGUMENT.
		return nil, fmt.Errorf("%w: %s is not a published volume: %v", ErrVolumeNotFound, p, err)
	}
	// mountinfo, not a system call on the mount: it cannot block.
	if n, err := mount.Layers(target); err != nil || n == 0 {
		s.stats.forget(target)
		return nil, fmt.Errorf("%w: %s is not a mount point (%v)", ErrVolumeNotFound, p, err)
	}
	fsKey := req.GetVolumeId()
	if id, err := volume.ParseID(fsKey); err == nil {
		fsKey = id.FileSystemID
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: s.stats.get(fsKey, target)}, nil
}
