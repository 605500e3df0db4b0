// Package orphans deletes the access points that Kubernetes has forgotten.
//
// One leak no CSI driver can prevent by itself: a claim is deleted while its
// CreateVolume is in flight, the call succeeds, and the provisioner is
// restarted before it records a PersistentVolume. The new provisioner never
// heard of the claim, so nobody ever calls DeleteVolume. The collector finds
// such access points by asking Kubernetes: an access point is an orphan when
// no PersistentVolume refers to it and no claim of the name it was created
// for (its tags name the claim) exists any more. It must stay an orphan for a grace period, then it is deleted
// through the controller's own DeleteVolume, locks and all.
package orphans

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Cluster is what the collector reads from Kubernetes. Contract: errors are
// transient (the round is skipped, nothing is deleted); ClaimUID returns ""
// with a nil error only when the claim does not exist.
type Cluster interface {
	VolumeHandles(ctx context.Context, driver string) ([]string, error)
	ClaimUID(ctx context.Context, namespace, name string) (string, error)
}

// AccessPoints enumerates what might be orphaned.
type AccessPoints interface {
	ListFileSystems(ctx context.Context) ([]efs.FileSystem, error)
	ListAccessPoints(ctx context.Context, fsID string, fn func([]efs.AccessPoint) error) error
}

// Deleter is the controller: deleting through it takes the volume's locks,
// so an orphan whose create is being retried is left alone (ABORTED).
type Deleter interface {
	DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error)
}

// Tags the collector reads; the controller writes them.
type Tags struct {
	Cluster, VolumeName, ClaimName, ClaimNamespace string
}

// Config wires a collector.
type Config struct {
	Driver       string        // CSI driver name in PersistentVolumes
	Interval     time.Duration // between rounds
	Grace        time.Duration // how long an access point must stay an orphan
	Tags         Tags
	Cluster      Cluster
	AccessPoints AccessPoints
	Deleter      Deleter
	Logger       *slog.Logger
	Now          func() time.Time
}

// Collector finds and deletes orphaned access points.
type Collector struct {
	cfg   Config
	since map[string]time.Time // access point ID → first round it was seen orphaned
}

// New validates cfg.
func New(cfg Config) (*Collector, error) {
	if cfg.Cluster == nil || cfg.AccessPoints == nil || cfg.Deleter == nil {
		return nil, errors.New("orphans: cluster, access points and deleter are required")
	}
	if cfg.Interval <= 0 || cfg.Grace < 0 {
		return nil, fmt.Errorf("orphans: interval %v and grace %v must be positive", cfg.Interval, cfg.Grace)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Collector{cfg: cfg, since: map[string]time.Time{}}, nil
}

// Run collects every Interval until ctx ends.
func (c *Collector) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		if n, err := c.Round(ctx); err != nil {
			c.cfg.Logger.Warn("orphan collection", slog.String("error", err.Error()))
		} else if n > 0 {
			c.cfg.Logger.Info("orphaned access points deleted", slog.Int("count", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round makes one pass and returns how many orphans it deleted.
func (c *Collector) Round(ctx context.Context) (int, error) {
	handles, err := c.cfg.Cluster.VolumeHandles(ctx, c.cfg.Driver)
	if err != nil {
		return 0, err
	}
	referenced := map[string]bool{}
	for _, h := range handles {
		if id, err := volume.ParseID(h); err == nil && id.AccessPointID != "" {
			referenced[id.AccessPointID] = true
		}
	}
	fss, err := c.cfg.AccessPoints.ListFileSystems(ctx)
	if err != nil {
		return 0, err
	}
	now := c.cfg.Now()
	seen := map[string]bool{}
	deleted := 0
	var errs []error
	for _, fs := range fss {
		aps, err := efs.Collect(ctx, c.cfg.AccessPoints.ListAccessPoints, fs.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, ap := range aps {
			orphan, err := c.orphaned(ctx, ap, referenced)
			if err != nil {
				errs = append(errs, err)
			}
			if !orphan {
				continue
			}
			seen[ap.ID] = true
			first, ok := c.since[ap.ID]
			if !ok {
				c.since[ap.ID] = now
				continue
			}
			if now.Sub(first) < c.cfg.Grace {
				continue
			}
			id := volume.ProvisionedID(ap.FileSystemID, ap.ID)
			if _, err := c.cfg.Deleter.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
				errs = append(errs, fmt.Errorf("delete orphan %s: %w", id, err))
				continue
			}
			c.cfg.Logger.Info("orphaned access point deleted", slog.String("volumeID", id),
				slog.String("name", ap.Tags[c.cfg.Tags.VolumeName]),
				slog.String("claim", ap.Tags[c.cfg.Tags.ClaimNamespace]+"/"+ap.Tags[c.cfg.Tags.ClaimName]))
			delete(c.since, ap.ID)
			deleted++
		}
	}
	for id := range c.since {
		if !seen[id] {
			delete(c.since, id) // gone, or claimed again
		}
	}
	return deleted, errors.Join(errs...)
}

// orphaned applies the rule: ours, provisioned for a claim (pvc-<uid>), not
// referenced by any PersistentVolume, and that claim is gone.
func (c *Collector) orphaned(ctx context.Context, ap efs.AccessPoint, referenced map[string]bool) (bool, error) {
	t := c.cfg.Tags
	name, claim, ns := ap.Tags[t.VolumeName], ap.Tags[t.ClaimName], ap.Tags[t.ClaimNamespace]
	_, isPVC := strings.CutPrefix(name, "pvc-")
	if ap.Tags[t.Cluster] != "true" || !isPVC || claim == "" || ns == "" || referenced[ap.ID] {
		return false, nil
	}
	current, err := c.cfg.Cluster.ClaimUID(ctx, ns, claim)
	if err != nil {
		return false, err
	}
	// A claim of that name exists: it may still be provisioning this volume
	// (its UID is in the name) or, with reuseAccessPoint, a re-created claim
	// may be about to adopt it. Only a claim that is gone entirely is proof.
	return current == "", nil
}
