package core

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// The orphan collector's collection of one volume of the record
// (docs/leaks.md and docs/design.md, "The leak no driver can prevent
// alone"). pkg/orphans
// proved from the record and Kubernetes that no PersistentVolume ever
// named it and that its claim is gone; this proves the rest, under the
// volume's name locks (those a create of it holds: a create being retried
// makes this keylock.ErrBusy):
//   - the record read again is still unbound, for the same claim and name,
//     naming the same access point (or still none): else ErrNotOrphan;
//   - a recorded access point that its tags prove the record's is deleted
//     through DeleteVolume (DeleteOrphan: its root directory too, with
//     root removal, and its record and id released);
//   - without one (the create's outcome never came back, or it failed),
//     the record is marked deleting, and a listing that begins once EFS's
//     listing lag has passed since the mark shows every access point made
//     before it (from the mark on, a create of it that makes one deletes it
//     instead of recording it): the one with the record's token at the
//     record's root directory, proven by its tags, is deleted the same
//     way; if none carries the token, the create never made one, and the
//     record and its id are released; one with the token at another
//     directory is left alone (ErrNotCollectable).
//
// Only the controller's own credentials are used: a file system they do
// not see (a class whose provisioner secret names a role in another
// account) is never collected (ErrNotCollectable).

// Errors of a collection besides keylock.ErrBusy (a create or delete of
// the volume holds its locks, or the mark waits out the listing lag: try
// again next round) and transient ones.
var (
	// ErrNotOrphan: the record changed since the collector read it (bound,
	// another claim or name, an access point recorded meanwhile) or is
	// gone. Nothing was deleted; the collector starts over with it.
	ErrNotOrphan = errors.New("volume is no longer an orphan")
	// ErrNotCollectable: nothing proves what the record's access point is
	// with the controller's own credentials (its file system is not visible
	// with them), or an access point carries the record's token at another
	// root directory than the record's, or its tags do not prove it the
	// record's. Nothing was deleted and the record stays.
	ErrNotCollectable = errors.New("orphan not collectable")
	// ErrNotReachable: the volume's file system is not visible with the
	// credentials of the call (another account's, and no role named).
	ErrNotReachable = errors.New("file system not reachable")
)

// CollectConfig is what every collection of one controller shares.
type CollectConfig struct {
	// Cluster is this cluster's ID: an access point made before the
	// record-life tag is the record's only if it carries it.
	Cluster string
	// ListingLag is how late EFS lists a new access point.
	ListingLag time.Duration
	// Logger is where the collection logs a record it released (nil:
	// nowhere).
	Logger *slog.Logger
}

// DeleteOrphan hands the collection to DeleteVolume of AccessPoint on
// FileSystem, or of the directory volume at Path when Dir (a Handoff):
// the caller lets go of the volume's locks first, and DeleteVolume takes
// them itself and reads the record again under them (a create of the
// volume starting in between makes it ErrBusy).
type DeleteOrphan struct {
	FileSystem, AccessPoint string
	Dir                     bool
	Path                    string
}

func (DeleteOrphan) effect()  {}
func (DeleteOrphan) handoff() {}

// Collect is the collection of one orphaned volume. It answers nil once
// it released a record whose create made no access point, or hands off
// to DeleteVolume (DeleteOrphan).
//
// Each step below is a method that returns the collection's final effect
// (its answer or its DeleteOrphan): the protocol reads top to bottom from
// locked.
type Collect struct {
	proc
	cfg  CollectConfig
	seen *journal.Record // the record the collector judged
	rec  *journal.Record // as read under the locks
}

// NewCollect collects the volume seen records, as the collector read it.
func NewCollect(cfg CollectConfig, seen *journal.Record) *Collect {
	c := &Collect{cfg: cfg, seen: seen}
	c.run(cfg.Logger, c.locked)
	return c
}

// locked takes the volume's name locks and reads its record again under
// them.
func (c *Collect) locked() Effect {
	seen := c.seen
	if r := c.do(Lock{Keys: RecordLocks(seen)}); r.Err != nil {
		return Answer{Err: r.Err}
	}
	r := c.do(ReadRecord{FileSystem: seen.FileSystem, Key: seen.Token})
	switch {
	case errors.Is(r.Err, journal.ErrNotFound):
		return Answer{Err: fmt.Errorf("%w: the record of %s/%q is gone", ErrNotOrphan, seen.FileSystem, seen.Token)}
	case r.Err != nil:
		return Answer{Err: r.Err}
	}
	if why := OrphanChange(seen, r.Record); why != "" {
		return Answer{Err: fmt.Errorf("%w: volume %q (%s/%q): %s", ErrNotOrphan, r.Record.Name, seen.FileSystem, seen.Token, why)}
	}
	c.rec = r.Record
	if r.Record.Dir {
		// No access point: DeleteVolume of the directory volume proves
		// the rest (its directory is removed only when the class or flag
		// says so).
		return DeleteOrphan{FileSystem: seen.FileSystem, Dir: true, Path: r.Record.Path}
	}
	return c.described()
}

// OrphanChange says how cur, the record read under the locks, differs
// from seen, the one the collector judged, in what makes it an orphan;
// "" if not.
func OrphanChange(seen, cur *journal.Record) string {
	switch {
	case cur.Bound:
		return "a PersistentVolume named it"
	case cur.ClaimNamespace != seen.ClaimNamespace || cur.ClaimName != seen.ClaimName:
		return fmt.Sprintf("its claim is now %s/%s", cur.ClaimNamespace, cur.ClaimName)
	case cur.Name != seen.Name:
		return fmt.Sprintf("its volume name is now %q", cur.Name)
	case cur.AccessPoint != seen.AccessPoint:
		return fmt.Sprintf("its access point is now %q", cur.AccessPoint)
	}
	return ""
}

// described goes on with the recorded access point, if the record names
// one and EFS describes it: the access point is never deleted on the
// record's word alone (its tags must prove it the record's). One EFS does
// not describe (deleted after DeleteVolume's record release failed, not
// described yet, or in a file system these credentials do not see) is
// looked for in a listing.
func (c *Collect) described() Effect {
	rec := c.rec
	if rec.AccessPoint == "" {
		return c.listed()
	}
	r := c.do(Describe{AccessPoint: rec.AccessPoint})
	switch {
	case errors.Is(r.Err, efs.ErrAccessPointNotFound):
		return c.listed()
	case r.Err != nil:
		return Answer{Err: r.Err}
	case !ownership.Agrees(rec, r.AP):
		return Answer{Err: fmt.Errorf("%w: volume %q: access point %s on %s with token %q and root %q is not the one recorded",
			ErrNotCollectable, rec.Name, r.AP.ID, r.AP.FileSystemID, r.AP.ClientToken, r.AP.Path)}
	}
	return c.collect(r.AP)
}

// listed marks the record deleting and looks for its access point in a
// listing that shows every one made before the mark: one begun once EFS's
// listing lag has passed since it. Until then the collection is
// keylock.ErrBusy: the collector goes on with its other orphans and comes
// back next round (the mark stays), so that a round's orphans wait out
// the lag together, not one after another. A listing of a file system
// these credentials do not see would show no access point, and the
// record would be released with one existing: that is checked first.
func (c *Collect) listed() Effect {
	rec := c.rec
	if r := c.do(Reachable{FileSystem: rec.FileSystem}); r.Err != nil {
		return Answer{Err: unreachable(rec, r.Err)}
	}
	r := c.do(Mark{Record: rec, IfOrphan: c.seen})
	switch {
	case r.Err != nil:
		return Answer{Err: r.Err}
	case r.Record == nil:
		return Answer{Err: fmt.Errorf("%w: volume %q (%s/%q) changed", ErrNotOrphan, rec.Name, rec.FileSystem, rec.Token)}
	}
	marked := r.Record
	if settled := marked.DeletingSince.Add(c.cfg.ListingLag); r.Now.Before(settled) {
		return Answer{Err: fmt.Errorf("%w: volume %q marked for collection: listed once EFS's listing lag has passed (%v)",
			keylock.ErrBusy, rec.Name, settled.Sub(r.Now).Round(time.Millisecond))}
	}
	c.rec = marked
	r = c.do(List{FileSystem: rec.FileSystem})
	if err := r.Err; err != nil {
		if errors.Is(err, efs.ErrFileSystemNotFound) || errors.Is(err, efs.ErrAccessDenied) {
			err = unreachable(rec, err)
		}
		return Answer{Err: err}
	}
	return c.found(r.APs)
}

// found goes on with the access point of aps that carries the record's
// token, or releases the record if none does.
func (c *Collect) found(aps []efs.AccessPoint) Effect {
	rec := c.rec
	for i := range aps {
		ap := &aps[i]
		if ap.ClientToken != rec.SentToken() || ap.FileSystemID != rec.FileSystem {
			continue
		}
		if ap.Path != rec.Path {
			// EFS binds a token to one access point: this one is not the
			// one the record planned. Whose directory it holds is unknown
			// (the collector logs this, once).
			return Answer{Err: fmt.Errorf("%w: volume %q: access point %s carries its token %q at %q, not the recorded %q",
				ErrNotCollectable, rec.Name, ap.ID, rec.SentToken(), ap.Path, rec.Path)}
		}
		return c.collect(ap)
	}
	return c.release(slog.LevelInfo, "orphan's record released: its create made no access point")
}

// release finishes the orphan's record, deleting nothing, and logs msg.
func (c *Collect) release(level slog.Level, msg string, attrs ...slog.Attr) Answer {
	rec := c.rec
	if r := c.do(Finish{Record: rec}); r.Err != nil {
		return Answer{Err: r.Err}
	}
	c.logAttrs(level, msg,
		append([]slog.Attr{slog.String("name", rec.Name), slog.String("fileSystem", rec.FileSystem),
			slog.String("claim", rec.ClaimNamespace+"/"+rec.ClaimName),
			slog.String("reason", "orphan: claim gone, no PersistentVolume ever named it"), slog.Int64("id", rec.Allocated)}, attrs...)...)
	return Answer{}
}

// collect hands ap to DeleteVolume if its tags prove it the record's. One
// under a token outside the GID token protocol that they do not prove
// (upstream's driver made it for the volume, before the handover, and the
// record, sending its token to adopt it, was abandoned) is left, and the
// record released: the record alone proves nothing, and leaving it would
// mark it for ever. The audit reports the access point.
func (c *Collect) collect(ap *efs.AccessPoint) Effect {
	if err := TaggedFor(c.cfg.Cluster, c.rec, ap); err != nil {
		if !volume.IsGIDToken(ap.ClientToken) {
			return c.release(slog.LevelWarn, "orphan's record released; its access point, made outside this driver's protocol, is left for the audit",
				slog.String("accessPoint", ap.ID), slog.String("token", ap.ClientToken))
		}
		return Answer{Err: err}
	}
	return DeleteOrphan{FileSystem: c.rec.FileSystem, AccessPoint: ap.ID}
}

// TaggedFor proves with what ap carries in EFS what the record says of
// it: the collector acts on no record alone, since a record entry can be
// written by anyone who may write the controller's Leases,
// and an entry naming an upstream-made, hand-made, another cluster's or
// untagged access point would otherwise delete it with its data.
//
// With its default tags (the cluster tag alone, which AWS's managed policy
// allows) this driver's access point proves it by its client token, the
// record's own GID token, at the record's root directory with the ids the
// record holds (TokenFor). With --descriptive-tags it
// carries its cluster tag, the record's volume name, no other cluster's
// ID, the record's life (MadeForRecord) and the record's claim where it
// names one. Upstream's access points (no volume-name tag, no GID token)
// and untagged ones are never collected; neither are, without the
// descriptive tags, those of classes that send a name's or claim's token
// (which upstream's driver sends too), nor any enableTagging "false"
// class's: the audit finds them.
func TaggedFor(cluster string, rec *journal.Record, ap *efs.AccessPoint) error {
	t := ap.Tags
	if _, named := t[ownership.TagVolumeName]; !named {
		if !TokenFor(rec, ap) {
			return fmt.Errorf("%w: volume %q: access point %s does not carry this cluster's token for it (cluster tag %q, token %q, want %q at %q): the record alone proves nothing to the collector",
				ErrNotCollectable, rec.Name, ap.ID, t[ownership.TagCluster], ap.ClientToken, rec.SentToken(), rec.Path)
		}
		return nil
	}
	claimOK := func(key, want string) bool { v, ok := t[key]; return !ok || v == want }
	_, other := ownership.OtherCluster(ap, cluster)
	if t[ownership.TagCluster] != "true" || t[ownership.TagVolumeName] != rec.Name || other || !MadeForRecord(cluster, rec, ap) ||
		!claimOK(ownership.TagClaimName, rec.ClaimName) || !claimOK(ownership.TagClaimNamespace, rec.ClaimNamespace) {
		return fmt.Errorf("%w: volume %q: access point %s does not carry this cluster's tags for it (cluster %q, volume %q, cluster ID %q, record life %q, claim %s/%s): the record alone proves nothing to the collector",
			ErrNotCollectable, rec.Name, ap.ID, t[ownership.TagCluster], t[ownership.TagVolumeName], t[ownership.TagClusterID],
			t[ownership.TagRecordLife], t[ownership.TagClaimNamespace], t[ownership.TagClaimName])
	}
	return nil
}

// TokenFor: ap, without a volume-name tag, carries the cluster tag and
// the GID token rec sends, at rec's root directory, with the id rec holds
// in the record's id table. Only a create of a volume holding the id
// sends the token, and the root directory names the volume
// (Plan.usesGIDToken). What it cannot prove, which the record-life and
// cluster-ID tags do (docs/design.md, Building blocks, "Tags"): that rec is
// not an entry forged, by a writer of the record, to name an access point
// that no PersistentVolume of this cluster names (one being provisioned
// here, or another cluster's on a shared file system).
func TokenFor(rec *journal.Record, ap *efs.AccessPoint) bool {
	return ap.Tags[ownership.TagCluster] == "true" && volume.IsGIDToken(ap.ClientToken) &&
		ap.ClientToken == rec.SentToken() && ap.FileSystemID == rec.FileSystem && madeWith(rec, ap)
}

// MadeForRecord: ap carries the life of rec (TagRecordLife), which only a
// create of that record writes; or, made by a release before the tag,
// this cluster's ID. Name and claim tags can be read off the cluster's
// volumes and copied into a forged entry; a record life is in EFS alone.
// An access point with neither is never collected: the audit finds it.
func MadeForRecord(cluster string, rec *journal.Record, ap *efs.AccessPoint) bool {
	if life, ok := ap.Tags[ownership.TagRecordLife]; ok {
		return life == ownership.RecordLife(rec)
	}
	return cluster != "" && ap.Tags[ownership.TagClusterID] == cluster
}

// unreachable is the error of an orphan whose file system these
// credentials do not see (ErrNotReachable, or a listing refused).
func unreachable(rec *journal.Record, err error) error {
	if errors.Is(err, ErrNotReachable) || errors.Is(err, efs.ErrFileSystemNotFound) || errors.Is(err, efs.ErrAccessDenied) {
		return fmt.Errorf("%w: volume %q: %w", ErrNotCollectable, rec.Name, err)
	}
	return err
}
