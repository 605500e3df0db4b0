// Package orphans deletes the volumes that provably never became a volume
// of this cluster's Kubernetes.
//
// One leak no CSI driver can prevent by itself: a claim is deleted while its
// CreateVolume is in flight, the call succeeds, and the provisioner is
// restarted before it records a PersistentVolume. The new provisioner never
// heard of the claim, so nobody ever calls DeleteVolume. The collector finds
// such volumes in the record (pkg/journal), which the controller writes
// before it creates any access point, and never in EFS: a tag, a client
// token or a listing proves nothing, since anyone who may tag access points
// can copy them. A volume is collected only when all of this holds
// (docs/leaks.md, "The leak no driver can prevent alone"):
//   - the record has it: access points without a record (an earlier
//     release's, the upstream driver's, anyone else's) are never collected;
//   - no PersistentVolume ever named it: the first time the collector sees
//     one that does (in a round's list, or reported by a PV watch through
//     Observe), it marks the record bound, for good, so a Retain PV deleted
//     by hand never loses its data;
//   - the record names the claim it was created for, no claim of that name
//     exists, and none has in any round of the whole grace period, and no
//     PV names it in a second read of the PVs made after everything else,
//     just before the deletion;
//
// and then the controller deletes it (CollectOrphan): under the volume's
// name locks, after reading the record again, through its own DeleteVolume.
// Volumes of classes whose provisioner secret names a role (awsRoleArn) live
// where the controller's own credentials do not reach, and are never
// collected.
//
// With the cluster's one record (Config.Sweep), each round also sweeps the
// access points this cluster's creates made that no record names any more
// (a create's request that reached EFS after its volume's delete finished
// the record, its caller killed before deleting it): the controller proves
// them by this cluster's tags and record life, holds their id in the
// record first, and reads the record again under that hold
// (controller.Service.SweepUnrecorded).
package orphans

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Cluster is what the collector reads from Kubernetes. Contract: errors are
// transient (the round is skipped, nothing is deleted); ClaimUID returns ""
// with a nil error only when the claim does not exist.
type Cluster interface {
	VolumeHandles(ctx context.Context, driver string) ([]string, error)
	ClaimUID(ctx context.Context, namespace, name string) (string, error)
}

// OrphanCollector is the controller (*controller.Service): CollectOrphan
// deletes the volume of a record under its locks, or answers
// keylock.ErrBusy (a create or delete of it is running),
// controller.ErrNotOrphan (the record changed) or
// controller.ErrNotCollectable (its access point cannot be proven the
// record's with the controller's credentials).
type OrphanCollector interface {
	CollectOrphan(ctx context.Context, rec *journal.Record) error
}

// Config wires a collector.
type Config struct {
	Driver string // CSI driver name in PersistentVolumes
	// ClusterID is accepted and logged; the record is this cluster's
	// already, so nothing depends on it any more.
	ClusterID string
	Interval  time.Duration
	Grace     time.Duration // how long a volume must stay an orphan
	Cluster   Cluster
	Journal   *journal.Journal // the record the controller keeps its volumes in
	Collector OrphanCollector
	Logger    *slog.Logger
	Now       func() time.Time
	// Sweep, when set, is the controller's sweep of the access points this
	// cluster's creates made that no record names
	// (controller.Service.SweepUnrecorded), run each round on every file
	// system of the record and of FileSystems, with the PVs read again
	// first. Set it only when the record is the cluster's one (Leases):
	// with a record per host, another host's record may name what this one
	// does not.
	Sweep func(ctx context.Context, fs string, named func(apID string) bool, grace time.Duration) (int, error)
	// FileSystems are the file systems of the driver's StorageClasses,
	// for Sweep and Purge (nil: those of the record only).
	FileSystems func(ctx context.Context) ([]string, error)
	// Purge, when set, is the controller's purge of root removal's trash
	// (controller.Service.PurgeTrash), run each round on every file
	// system of the record and of FileSystems.
	Purge func(ctx context.Context, fs string) error
	// Restores, when set, removes the record's entries of restores into
	// volumes whose record is gone (controller.Service.CollectRestores),
	// each round.
	Restores func(ctx context.Context) (int, error)
	// Readers, when set, removes the record's entries of read-only
	// volumes from snapshots given up (controller.Service.CollectReaders):
	// their claim gone, no PV naming them, older than Grace.
	Readers func(ctx context.Context, named func(volumeID string) bool,
		claimGone func(ctx context.Context, namespace, name string) (bool, error), grace time.Duration) (int, error)
}

// Stats is what the last round saw and totals since start.
type Stats struct {
	Own, OwnBound int // volumes in the record, and those a PV named
	Candidates    int // orphans waiting out their grace period
	// Kept are orphans past their grace period that are not collected:
	// their access point is not visible with the controller's own
	// credentials, or another access point carries their token.
	Kept                          int
	Rounds, FailedRounds, Deleted int
}

// key names a volume in the record.
type key struct{ fs, token string }

func keyOf(r *journal.Record) key { return key{r.FileSystem, r.Token} }

// apRef is an access point a PersistentVolume names.
type apRef struct{ fs, ap string }

// Collector finds and deletes orphaned volumes. Round is not safe for
// concurrent use (Run calls it from one goroutine); Stats and Observe are.
type Collector struct {
	cfg   Config
	since map[key]time.Time // first round the volume was seen orphaned
	// named holds the volumes a PV was seen naming whose record could not
	// be marked bound yet: this process never collects them, and marks
	// them in later rounds.
	named map[key]bool
	// kept holds the orphans CollectOrphan would not collect, so that each
	// is logged once.
	kept map[key]bool

	mu    sync.Mutex
	stats Stats
	// watched holds the access points a PV watch reported (Observe) and no
	// complete round has taken in yet: a PV that lived only between two
	// rounds still counts as seen.
	watched map[apRef]bool
}

// New validates cfg.
func New(cfg Config) (*Collector, error) {
	if cfg.Cluster == nil || cfg.Journal == nil || cfg.Collector == nil {
		return nil, errors.New("orphans: cluster, journal and collector are required")
	}
	if cfg.Interval <= 0 || cfg.Grace < 0 {
		return nil, fmt.Errorf("orphans: interval %v must be positive and grace %v not negative", cfg.Interval, cfg.Grace)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Collector{cfg: cfg, since: map[key]time.Time{}, named: map[key]bool{}, kept: map[key]bool{},
		watched: map[apRef]bool{}}, nil
}

// refOf is the access point a volume handle names, if any: for a
// directory volume (efsdir:), its directory (dirRef).
func refOf(handle string) (apRef, bool) {
	id, err := volume.ParseID(handle) // s3files: IDs too
	switch {
	case err == nil && id.Dir:
		return apRef{id.FileSystemID, dirRef(id.Path)}, true
	case err != nil || id.AccessPointID == "":
		return apRef{}, false
	}
	return apRef{id.FileSystemID, id.AccessPointID}, true
}

// dirRef stands for a directory volume's directory where an access point
// ID goes: no access point ID has a '/'.
func dirRef(path string) string { return "dir:" + path }

// recordRef is what a PV of r's volume names: its access point, or its
// directory; false while r's create has not recorded an access point.
func recordRef(r *journal.Record) (apRef, bool) {
	switch {
	case r.Dir:
		return apRef{r.FileSystem, dirRef(r.Path)}, true
	case r.AccessPoint != "":
		return apRef{r.FileSystem, r.AccessPoint}, true
	}
	return apRef{}, false
}

// Observe takes the handle of a PersistentVolume of the driver that was
// created or changed: its volume counts as named by a PV in the next
// round, even if the PV is gone by then. Safe for concurrent use with Round.
func (c *Collector) Observe(handle string) {
	ref, ok := refOf(handle)
	if !ok {
		return
	}
	c.mu.Lock()
	c.watched[ref] = true
	c.mu.Unlock()
}

// addWatched adds what Observe reported to refs and returns those refs.
func (c *Collector) addWatched(refs map[apRef]bool) []apRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	var taken []apRef
	for ref := range c.watched {
		refs[ref] = true
		taken = append(taken, ref)
	}
	return taken
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
			c.cfg.Logger.Info("orphaned volumes collected", slog.Int("count", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round makes one pass and returns how many orphans it collected.
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

// handlesNow reads the access points PersistentVolumes name now.
func (c *Collector) handlesNow(ctx context.Context) (map[apRef]bool, error) {
	handles, err := c.cfg.Cluster.VolumeHandles(ctx, c.cfg.Driver)
	if err != nil {
		return nil, err
	}
	refs := map[apRef]bool{}
	for _, h := range handles {
		if ref, ok := refOf(h); ok {
			refs[ref] = true
		}
	}
	return refs, nil
}

// records reads every volume of the record.
func (c *Collector) records(ctx context.Context) ([]*journal.Record, error) {
	var all []*journal.Record
	err := c.cfg.Journal.Volumes(ctx, "", func(rs []*journal.Record) error {
		all = append(all, rs...)
		return nil
	})
	return all, err
}

func (c *Collector) round(ctx context.Context) (int, error) {
	// PVs first: a PV exists only after its create recorded the access
	// point, so the record read next has every volume a PV names.
	refs, err := c.handlesNow(ctx)
	if err != nil {
		return 0, err
	}
	watched := c.addWatched(refs)
	recs, err := c.records(ctx)
	if err != nil {
		return 0, err
	}
	byAP := map[apRef]*journal.Record{}
	present := map[key]*journal.Record{}
	for _, r := range recs {
		present[keyOf(r)] = r
		if ref, ok := recordRef(r); ok {
			byAP[ref] = r
		}
	}
	for ref := range refs {
		if r := byAP[ref]; r != nil && !r.Bound {
			c.named[keyOf(r)] = true
		}
	}
	// Every watched access point was taken in: named, or in no record.
	c.mu.Lock()
	for _, ref := range watched {
		delete(c.watched, ref)
	}
	c.mu.Unlock()
	c.forgetAbsent(present)
	var errs []error
	errs = append(errs, c.markNamed(ctx, present))

	now := c.cfg.Now()
	var st Stats
	var due []*journal.Record
	claims := map[[2]string]bool{} // namespace/name -> gone, read once a round
	for _, r := range recs {
		st.Own++
		k := keyOf(r)
		if r.Bound || c.named[k] {
			st.OwnBound++
			delete(c.since, k)
			continue
		}
		orphan, err := c.claimGone(ctx, r, claims)
		if err != nil {
			errs = append(errs, err)
		}
		if !orphan {
			delete(c.since, k)
			delete(c.kept, k)
			continue
		}
		first, ok := c.since[k]
		switch {
		case !ok:
			c.since[k] = now
		case now.Sub(first) >= c.cfg.Grace:
			due = append(due, r)
			continue
		}
		st.Candidates++
	}
	out, err := c.collectDue(ctx, due, present)
	st.Candidates += out.left
	st.Kept = out.kept
	errs = append(errs, err)
	swept, err := c.sweep(ctx, recs)
	out.deleted += swept
	errs = append(errs, err, c.purge(ctx, recs))
	if c.cfg.Restores != nil {
		_, err := c.cfg.Restores(ctx)
		errs = append(errs, err)
	}
	if c.cfg.Readers != nil {
		n, err := c.readers(ctx)
		out.deleted += n
		errs = append(errs, err)
	}
	c.mu.Lock()
	st.Rounds, st.FailedRounds, st.Deleted = c.stats.Rounds, c.stats.FailedRounds, c.stats.Deleted
	c.stats = st
	c.mu.Unlock()
	return out.deleted, errors.Join(errs...)
}

// readers collects the read-only volumes from snapshots given up, with
// the PVs read after the record (the entries' Created is a grace period
// old: a PV made from an answer is in this read).
func (c *Collector) readers(ctx context.Context) (int, error) {
	handles, err := c.cfg.Cluster.VolumeHandles(ctx, c.cfg.Driver)
	if err != nil {
		return 0, err
	}
	named := map[string]bool{}
	for _, h := range handles {
		named[h] = true
	}
	claimGone := func(ctx context.Context, ns, name string) (bool, error) {
		uid, err := c.cfg.Cluster.ClaimUID(ctx, ns, name)
		return err == nil && uid == "", err
	}
	return c.cfg.Readers(ctx, func(id string) bool { return named[id] }, claimGone, c.cfg.Grace)
}

// forgetAbsent drops what the collector remembers of volumes the record
// no longer has (read completely).
func (c *Collector) forgetAbsent(present map[key]*journal.Record) {
	for _, m := range []map[key]bool{c.named, c.kept} {
		for k := range m {
			if present[k] == nil {
				delete(m, k)
			}
		}
	}
	for k := range c.since {
		if present[k] == nil {
			delete(c.since, k)
		}
	}
}

// markNamed records for good that a PV named each volume in c.named:
// bound in the record, so that no later collector (which never saw the PV)
// collects it. A failure is retried next round; this process keeps the
// volume out of reach meanwhile.
func (c *Collector) markNamed(ctx context.Context, present map[key]*journal.Record) error {
	var errs []error
	// In order: the same round writes the same way each time (the
	// simulator replays a seed exactly).
	for _, k := range slices.SortedFunc(maps.Keys(c.named), func(a, b key) int {
		return cmp.Or(strings.Compare(a.fs, b.fs), strings.Compare(a.token, b.token))
	}) {
		r := present[k]
		if r == nil || r.Bound {
			delete(c.named, k)
			continue
		}
		err := c.cfg.Journal.MarkBound(ctx, r) // sets r.Bound
		switch {
		case errors.Is(err, journal.ErrNotFound), errors.Is(err, journal.ErrDeleting):
			// Deleted since the read, or being deleted (its PV's
			// DeleteVolume), or a next life of it that no PV named:
			// nothing left to keep. A PV that still names it keeps it
			// next round.
			delete(c.named, k)
		case err != nil:
			errs = append(errs, fmt.Errorf("mark %s/%q bound: %w", k.fs, k.token, err))
		default:
			c.cfg.Logger.Info("volume marked bound: never collected", slog.String("name", r.Name),
				slog.String("fileSystem", r.FileSystem), slog.String("accessPoint", r.AccessPoint))
			delete(c.named, k)
		}
	}
	return errors.Join(errs...)
}

// claimGone applies the rule to an unbound volume: it was created for a
// claim the record names, and no claim of that name exists. claims caches
// the round's reads.
func (c *Collector) claimGone(ctx context.Context, r *journal.Record, claims map[[2]string]bool) (bool, error) {
	if r.ClaimNamespace == "" || r.ClaimName == "" {
		return false, nil // no claim to ask about: never collected
	}
	ck := [2]string{r.ClaimNamespace, r.ClaimName}
	if gone, ok := claims[ck]; ok {
		return gone, nil
	}
	uid, err := c.cfg.Cluster.ClaimUID(ctx, r.ClaimNamespace, r.ClaimName)
	if err != nil {
		return false, err // not read: the grace period starts over
	}
	// A claim of that name exists: it may still be provisioning this volume
	// or, with reuseAccessPoint, a re-created claim may be about to adopt
	// it. Only a claim that is gone entirely is proof.
	claims[ck] = uid == ""
	return uid == "", nil
}

// collectDue collects the orphans whose grace period is over, after reading
// the PVs once more (and what the watch reported meanwhile): a PV created
// since the round's first read (its provisioner got the CreateVolume answer
// more than a grace period ago and only now saved it) saves its volume.
// What is left is the time one DeleteVolume takes.
func (c *Collector) collectDue(ctx context.Context, due []*journal.Record, present map[key]*journal.Record) (outcome, error) {
	var out outcome
	if len(due) == 0 {
		return out, nil
	}
	refs, err := c.handlesNow(ctx)
	if err != nil {
		out.left = len(due)
		return out, err
	}
	c.addWatched(refs) // left for the next round to take in as well
	var errs []error
	late := false
	for _, r := range due {
		k := keyOf(r)
		if ref, ok := recordRef(r); ok && refs[ref] {
			c.named[k] = true
			delete(c.since, k)
			late = true
			continue
		}
		err := c.cfg.Collector.CollectOrphan(ctx, r)
		switch {
		case err == nil:
			c.cfg.Logger.Info("orphaned volume collected", slog.String("name", r.Name),
				slog.String("fileSystem", r.FileSystem), slog.String("accessPoint", r.AccessPoint),
				slog.String("reason", fmt.Sprintf("orphan: claim %s/%s gone for %v, no PersistentVolume ever named it",
					r.ClaimNamespace, r.ClaimName, c.cfg.Grace)))
			delete(c.since, k)
			delete(c.kept, k)
			out.deleted++
		case errors.Is(err, keylock.ErrBusy):
			out.left++
			// A create (or delete) of the volume is running: next round.
			c.cfg.Logger.Debug("orphan busy: next round", slog.String("name", r.Name), slog.String("error", err.Error()))
		case errors.Is(err, controller.ErrNotOrphan):
			c.cfg.Logger.Info("not an orphan any more", slog.String("name", r.Name), slog.String("why", err.Error()))
			delete(c.since, k)
		case errors.Is(err, controller.ErrNotCollectable):
			out.kept++
			if !c.kept[k] {
				c.kept[k] = true
				c.cfg.Logger.Warn("orphan not collected", slog.String("name", r.Name),
					slog.String("claim", r.ClaimNamespace+"/"+r.ClaimName), slog.String("why", err.Error()))
			}
		default:
			out.left++
			errs = append(errs, fmt.Errorf("collect orphan %q (%s/%q): %w", r.Name, r.FileSystem, r.Token, err))
		}
	}
	if late {
		errs = append(errs, c.markNamed(ctx, present))
	}
	return out, errors.Join(errs...)
}

// sweep runs cfg.Sweep on every file system of recs and of
// cfg.FileSystems, against the PVs read now (and what the watch reported):
// an access point a PV names is never swept.
func (c *Collector) sweep(ctx context.Context, recs []*journal.Record) (int, error) {
	if c.cfg.Sweep == nil {
		return 0, nil
	}
	fss, errs := c.fileSystems(ctx, recs)
	refs, err := c.handlesNow(ctx)
	if err != nil {
		return 0, errors.Join(append(errs, err)...)
	}
	c.addWatched(refs)
	n := 0
	for _, fs := range slices.Sorted(maps.Keys(fss)) {
		named := func(ap string) bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return refs[apRef{fs, ap}] || c.watched[apRef{fs, ap}]
		}
		swept, err := c.cfg.Sweep(ctx, fs, named, c.cfg.Grace)
		n += swept
		if err != nil {
			errs = append(errs, fmt.Errorf("sweep %s: %w", fs, err))
		}
	}
	return n, errors.Join(errs...)
}

// fileSystems are the file systems of recs and of cfg.FileSystems; an
// error reading the latter leaves the record's.
func (c *Collector) fileSystems(ctx context.Context, recs []*journal.Record) (map[string]bool, []error) {
	fss := map[string]bool{}
	for _, r := range recs {
		fss[r.FileSystem] = true
	}
	var errs []error
	if c.cfg.FileSystems != nil {
		// Unread (no list on StorageClasses): the record's still are.
		ids, err := c.cfg.FileSystems(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("the StorageClasses' file systems: %w", err))
		}
		for _, fs := range ids {
			fss[fs] = true
		}
	}
	return fss, errs
}

// purge runs cfg.Purge on every file system of recs and of
// cfg.FileSystems.
func (c *Collector) purge(ctx context.Context, recs []*journal.Record) error {
	if c.cfg.Purge == nil {
		return nil
	}
	fss, errs := c.fileSystems(ctx, recs)
	for _, fs := range slices.Sorted(maps.Keys(fss)) {
		if err := c.cfg.Purge(ctx, fs); err != nil {
			errs = append(errs, fmt.Errorf("purge %s: %w", fs, err))
		}
	}
	return errors.Join(errs...)
}

// outcome is what collectDue did with the orphans due.
type outcome struct {
	deleted int // collected
	kept    int // not collectable (controller.ErrNotCollectable)
	left    int // busy or failed: tried again next round
}
