// Package orphans deletes the access points that provably never became a
// volume of this cluster.
//
// One leak no CSI driver can prevent by itself: a claim is deleted while its
// CreateVolume is in flight, the call succeeds, and the provisioner is
// restarted before it records a PersistentVolume. The new provisioner never
// heard of the claim, so nobody ever calls DeleteVolume. The collector finds
// such access points by asking Kubernetes, and deletes one only when all of
// this holds (docs/design.md, "The leak no driver can prevent alone"):
//   - it carries this cluster's ID (another cluster's, or one made before
//     cluster IDs existed, is never collected), the claim tags, and the client
//     token CreateVolume derives from its volume name (one made and tagged by
//     hand has another);
//   - no PersistentVolume ever referred to it: the first time the collector
//     sees one that does (in a round's list, or reported by a PV watch through
//     Observe), it tags the access point bound, for good, so a Retain PV
//     deleted by hand never loses its data;
//   - no claim of the name it was created for exists, and none has for the
//     whole grace period, and no PV refers to it in a second read of the PVs
//     made after everything else, just before the deletion;
//
// and then it goes through the controller's own DeleteVolume, locks and all.
// Only file systems named by this cluster's StorageClasses are looked at.
package orphans

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/time/rate"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Cluster is what the collector reads from Kubernetes. Contract: errors are
// transient (the round is skipped, nothing is deleted); ClaimUID returns ""
// with a nil error only when the claim does not exist.
type Cluster interface {
	VolumeHandles(ctx context.Context, driver string) ([]string, error)
	ClaimUID(ctx context.Context, namespace, name string) (string, error)
	// FileSystemIDs are the fileSystemId parameters of the driver's StorageClasses.
	FileSystemIDs(ctx context.Context, driver string) ([]string, error)
}

// AccessPoints enumerates what might be orphaned and records what is not.
// TagResource adds tags, keeping the others, and is idempotent.
type AccessPoints interface {
	ListAccessPoints(ctx context.Context, fsID string, fn func([]efs.AccessPoint) error) error
	TagResource(ctx context.Context, resourceID string, tags map[string]string) error
}

// Deleter is the controller: deleting through it takes the volume's locks,
// so an orphan whose create is being retried is left alone (ABORTED).
type Deleter interface {
	DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error)
}

// Tags the collector reads (the controller writes them) and writes (Bound,
// and ClusterID on an access point of a release before cluster IDs).
type Tags struct {
	Cluster, ClusterID, Bound, VolumeName, ClaimName, ClaimNamespace string
}

// Config wires a collector.
type Config struct {
	Driver    string // CSI driver name in PersistentVolumes and StorageClasses
	ClusterID string // required: what this cluster's controller writes as Tags.ClusterID
	Interval  time.Duration
	Grace     time.Duration // how long an access point must stay an orphan
	// TagsPerSecond paces TagResource calls (the first round after an upgrade
	// marks every bound volume once); 0: 10 per second, the pace of the
	// client's other mutations.
	TagsPerSecond float64
	Tags          Tags
	Cluster       Cluster
	AccessPoints  AccessPoints
	Deleter       Deleter
	Logger        *slog.Logger
	Now           func() time.Time
}

// Stats is what the last round saw, by owner, and totals since start.
type Stats struct {
	Own, OwnBound, Legacy, Foreign int // access points on the cluster's file systems
	Candidates                     int // orphans waiting out their grace period
	Rounds, FailedRounds, Deleted  int
}

// Collector finds and deletes orphaned access points. Round is not safe for
// concurrent use (Run calls it from one goroutine); Stats is.
type Collector struct {
	cfg   Config
	marks *rate.Limiter
	since map[string]time.Time // access point ID → first round it was seen orphaned
	// referenced holds the access points a PV was seen referring to, in case
	// tagging them bound failed: this process never collects them either.
	referenced map[string]bool

	mu    sync.Mutex
	stats Stats
	// watched holds the access points a PV watch reported (Observe) and no
	// complete round has taken in yet: a PV that lived only between two
	// rounds still counts as seen.
	watched map[string]bool
}

// New validates cfg.
func New(cfg Config) (*Collector, error) {
	if cfg.Cluster == nil || cfg.AccessPoints == nil || cfg.Deleter == nil {
		return nil, errors.New("orphans: cluster, access points and deleter are required")
	}
	if cfg.ClusterID == "" {
		return nil, errors.New("orphans: a cluster ID is required: without one nothing is provably this cluster's")
	}
	t := cfg.Tags
	if t.Cluster == "" || t.ClusterID == "" || t.Bound == "" || t.VolumeName == "" || t.ClaimName == "" || t.ClaimNamespace == "" {
		return nil, fmt.Errorf("orphans: every tag name is required: %+v", t)
	}
	if cfg.Interval <= 0 || cfg.Grace < 0 {
		return nil, fmt.Errorf("orphans: interval %v must be positive and grace %v not negative", cfg.Interval, cfg.Grace)
	}
	if cfg.TagsPerSecond <= 0 {
		cfg.TagsPerSecond = 10
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Collector{cfg: cfg, marks: rate.NewLimiter(rate.Limit(cfg.TagsPerSecond), 1),
		since: map[string]time.Time{}, referenced: map[string]bool{}, watched: map[string]bool{}}, nil
}

// Observe takes the handle of a PersistentVolume of the driver that was
// created or changed: its access point counts as referenced in the next
// round, even if the PV is gone by then. Safe for concurrent use with Round.
func (c *Collector) Observe(handle string) {
	id, err := volume.ParseID(handle)
	if err != nil || id.AccessPointID == "" {
		return
	}
	c.mu.Lock()
	c.watched[id.AccessPointID] = true
	c.mu.Unlock()
}

// addWatched adds what Observe reported to referenced and returns those IDs.
func (c *Collector) addWatched(referenced map[string]bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for id := range c.watched {
		referenced[id] = true
		ids = append(ids, id)
	}
	return ids
}

// Stats returns what the last round saw and the totals.
func (c *Collector) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Run collects every Interval until ctx ends.
func (c *Collector) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		if n, err := c.Round(ctx); err != nil && ctx.Err() == nil {
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

// owner classes of an access point.
type owner int

const (
	foreign owner = iota // another cluster's, or not the driver's
	legacy               // the driver's, made before cluster IDs: no cluster ID tag
	own                  // carries this cluster's ID
)

func (c *Collector) owner(ap efs.AccessPoint) owner {
	t := c.cfg.Tags
	if ap.Tags[t.Cluster] != "true" || ap.Tags[t.VolumeName] == "" {
		return foreign
	}
	switch id, ok := ap.Tags[t.ClusterID]; {
	case !ok:
		return legacy
	case id == c.cfg.ClusterID:
		return own
	}
	return foreign
}

// Round makes one pass and returns how many orphans it deleted.
func (c *Collector) Round(ctx context.Context) (int, error) {
	n, err := c.round(ctx)
	c.mu.Lock()
	c.stats.Rounds++
	c.stats.Deleted += n
	if err != nil {
		c.stats.FailedRounds++
	}
	c.mu.Unlock()
	return n, err
}

func (c *Collector) round(ctx context.Context) (int, error) {
	fss, err := c.cfg.Cluster.FileSystemIDs(ctx, c.cfg.Driver)
	if err != nil {
		return 0, err
	}
	referenced, err := c.referencedNow(ctx)
	if err != nil {
		return 0, err
	}
	watched := c.addWatched(referenced)
	now := c.cfg.Now()
	var st Stats
	listed := map[string]bool{}
	var due []efs.AccessPoint
	var marks []mark
	var errs []error
	for _, fs := range fss {
		aps, err := efs.Collect(ctx, c.cfg.AccessPoints.ListAccessPoints, fs)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, ap := range aps {
			listed[ap.ID] = true
			switch c.owner(ap) {
			case foreign:
				st.Foreign++
				continue
			case legacy:
				st.Legacy++
				if referenced[ap.ID] || c.referenced[ap.ID] {
					// A PV of this cluster is the proof it is ours: adopt it.
					marks = append(marks, c.seenReferenced(ap, true))
				}
				continue // never collected: nothing proves it never had a PV
			}
			st.Own++
			if ap.Tags[c.cfg.Tags.Bound] == "true" {
				st.OwnBound++
				continue
			}
			if referenced[ap.ID] || c.referenced[ap.ID] { // seen before: the tag write failed, try again
				marks = append(marks, c.seenReferenced(ap, false))
				continue
			}
			orphan, err := c.orphaned(ctx, ap)
			if err != nil {
				errs = append(errs, err)
			}
			if !orphan {
				delete(c.since, ap.ID)
				continue
			}
			st.Candidates++
			first, ok := c.since[ap.ID]
			if !ok {
				c.since[ap.ID] = now
			} else if now.Sub(first) >= c.cfg.Grace {
				due = append(due, ap)
			}
		}
	}
	if len(errs) == 0 { // every file system listed: the watched ones were all taken in
		c.forgetUnlisted(listed)
		c.mu.Lock()
		for _, id := range watched {
			delete(c.watched, id)
		}
		c.mu.Unlock()
	}
	deleted, late, err := c.deleteDue(ctx, due)
	errs = append(errs, err)
	// Tags last: a round's first marks after an upgrade can take minutes at
	// TagsPerSecond, and must not hold up the deletions (this process already
	// keeps the marked ones out of reach, in c.referenced).
	for _, m := range append(marks, late...) {
		errs = append(errs, c.writeBound(ctx, m))
	}
	c.mu.Lock()
	st.Rounds, st.FailedRounds, st.Deleted = c.stats.Rounds, c.stats.FailedRounds, c.stats.Deleted
	c.stats = st
	c.mu.Unlock()
	return deleted, errors.Join(errs...)
}

// forgetUnlisted drops what the collector remembers of access points that
// are gone; only after a complete listing, so that a failed one forgets nothing.
func (c *Collector) forgetUnlisted(listed map[string]bool) {
	for id := range c.since {
		if !listed[id] {
			delete(c.since, id)
		}
	}
	for id := range c.referenced {
		if !listed[id] {
			delete(c.referenced, id)
		}
	}
}

// referencedNow reads the access points PersistentVolumes refer to now.
func (c *Collector) referencedNow(ctx context.Context) (map[string]bool, error) {
	handles, err := c.cfg.Cluster.VolumeHandles(ctx, c.cfg.Driver)
	if err != nil {
		return nil, err
	}
	referenced := map[string]bool{}
	for _, h := range handles {
		if id, err := volume.ParseID(h); err == nil && id.AccessPointID != "" {
			referenced[id.AccessPointID] = true
		}
	}
	return referenced, nil
}

// deleteDue deletes the orphans whose grace period is over, after reading
// the PVs once more (and what the watch reported meanwhile): a PV created
// since the round's first read (its provisioner got the CreateVolume answer
// more than a grace period ago and only now saved it) saves its access
// point. What is left is the time one DeleteVolume takes.
func (c *Collector) deleteDue(ctx context.Context, due []efs.AccessPoint) (int, []mark, error) {
	if len(due) == 0 {
		return 0, nil, nil
	}
	referenced, err := c.referencedNow(ctx)
	if err != nil {
		return 0, nil, err
	}
	c.addWatched(referenced)
	deleted := 0
	var marks []mark
	var errs []error
	for _, ap := range due {
		if referenced[ap.ID] {
			marks = append(marks, c.seenReferenced(ap, false))
			continue
		}
		id := volume.ProvisionedID(ap.FileSystemID, ap.ID)
		if _, err := c.cfg.Deleter.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			errs = append(errs, fmt.Errorf("delete orphan %s: %w", id, err))
			continue
		}
		t := c.cfg.Tags
		c.cfg.Logger.Info("orphaned access point deleted", slog.String("volumeID", id),
			slog.String("name", ap.Tags[t.VolumeName]),
			slog.String("claim", ap.Tags[t.ClaimNamespace]+"/"+ap.Tags[t.ClaimName]))
		delete(c.since, ap.ID)
		deleted++
	}
	return deleted, marks, errors.Join(errs...)
}

// mark is a bound tag to write.
type mark struct {
	ap    efs.AccessPoint
	adopt bool // also this cluster's ID: an access point of a release before cluster IDs
}

// seenReferenced keeps ap out of this process's reach from now on, and
// returns the tag that keeps it out of every later collector's.
func (c *Collector) seenReferenced(ap efs.AccessPoint, adopt bool) mark {
	c.referenced[ap.ID] = true
	delete(c.since, ap.ID)
	return mark{ap, adopt}
}

// writeBound records for good that a PV referred to the access point: the
// bound tag and, to adopt one, this cluster's ID.
func (c *Collector) writeBound(ctx context.Context, m mark) error {
	tags := map[string]string{c.cfg.Tags.Bound: "true"}
	if m.adopt {
		tags[c.cfg.Tags.ClusterID] = c.cfg.ClusterID
	}
	if err := c.marks.Wait(ctx); err != nil {
		return err
	}
	err := c.cfg.AccessPoints.TagResource(ctx, m.ap.ID, tags)
	if errors.Is(err, efs.ErrAccessPointNotFound) {
		return nil // deleted since the listing (its PV's DeleteVolume): nothing left to keep
	}
	if err != nil {
		return fmt.Errorf("mark %s bound: %w", m.ap.ID, err)
	}
	c.cfg.Logger.Info("access point marked bound: never collected", slog.String("accessPoint", m.ap.ID),
		slog.String("name", m.ap.Tags[c.cfg.Tags.VolumeName]), slog.Bool("adopted", m.adopt))
	return nil
}

// orphaned applies the rule to an unbound access point of this cluster that
// no PV refers to: made by CreateVolume for a claim (pvc-<uid>, claim tags,
// the client token CreateVolume derives), never seen referenced by this
// process, and that claim is gone.
func (c *Collector) orphaned(ctx context.Context, ap efs.AccessPoint) (bool, error) {
	t := c.cfg.Tags
	name, claim, ns := ap.Tags[t.VolumeName], ap.Tags[t.ClaimName], ap.Tags[t.ClaimNamespace]
	if !strings.HasPrefix(name, "pvc-") || claim == "" || ns == "" || c.referenced[ap.ID] {
		return false, nil
	}
	// An access point made by hand (console, CLI, another tool) and tagged
	// like ours has a token of its own, not the one CreateVolume derives.
	if ap.ClientToken != (volume.Params{}).ClientToken(name) &&
		ap.ClientToken != (volume.Params{ReuseAccessPoint: true, PVCName: claim}).ClientToken(name) {
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
