package kube

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	coordinationv1api "k8s.io/api/coordination/v1"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// Damage to the record: a shard deleted or rewritten by hand (docs/record.md,
// Damage).
//
// The store never deletes one of its Leases (shards never merge; a split
// parent stays, marked done), and every write of its own keeps the Lease's
// epoch, raises its seq by one and gives each entry it writes the version
// "<epoch>.<seq>" of that write. So a shard as read from the API server
// now is damaged, judged against the shard as this process last read or
// wrote it (seen), when seen was a Lease and the one read:
//   - is gone (404, or missing from a listing taken after seen): deleted;
//   - has another epoch, or none: made again after a deletion (the epoch is
//     drawn only when a Lease is created), or rewritten without the
//     store's bookkeeping;
//   - has a lower seq;
//   - is not done (a split's done parent drops its entries, which its
//     children hold) and holds, against seen, an entry missing while its
//     seq is seen's (no write of the store came between), an entry changed
//     under the version it had (every write of an entry gives it a new
//     one), or an entry new or rewritten whose version no write since
//     seen can have given it (other than "<epoch>.<n>", seq(seen) < n <=
//     seq).
//
// Every write of another replica passes these checks: it is a write of
// this store. A hand edit passes only if it plays the store's part too
// (raises seq, versions the entries it writes), or if another replica
// writes the shard after it before this process reads it (an entry
// removed by hand then looks deleted by that write).
//
// On damage the store logs, at Error, the shard, what happened and the
// entries seen held that are lost (missing, or changed under their
// version), and restores them: the next write of the shard creates each
// again (a new version; its key's entry, if another writer made one
// since, is kept, and an id entry held for another volume is logged as a
// GID given twice), so no id they held is given again while its volume's
// record does not say it is free. The restoring write marks the shard
// annotationLeaseRestored with the state restored from: another replica
// that saw the same deletion from a state no later restores nothing,
// since what it knew that this state lacks was deleted by a write it did
// not see. What cannot be told apart: an entry deleted by another replica
// after this process's seen and before the Lease was deleted comes back,
// with the other writes of that interval lost (an id entry so restored is
// held for a volume whose record is gone, which the sweep releases).
const annotationLeaseRestored = "efs.csi.aws.com/journal-restored"

// maxDamageListed bounds the entries one damage line names.
const maxDamageListed = 32

// damage is what judge found of one read of a shard.
type damage struct {
	what string
	// lost: the entries seen held (by hash key, as stored) that the Lease
	// read lacks or changed under their version.
	lost map[string]string
	// forged: the entries the Lease read holds that no write of this store
	// can have made (names, for the log).
	forged []string
}

// stateOf is "<epoch>.<seq>" of a shard's Lease.
func stateOf(l *coordinationv1api.Lease) string {
	return l.Annotations[annotationLeaseEpoch] + "." + l.Annotations[annotationLeaseSeq]
}

func seqOf(l *coordinationv1api.Lease) (uint64, bool) {
	n, err := strconv.ParseUint(l.Annotations[annotationLeaseSeq], 10, 64)
	return n, err == nil
}

// judge is the damage, if any, of the shard read as l (nil: gone, with
// entries its entries) against seen (seenEntries its entries).
func judge(seen *coordinationv1api.Lease, seenEntries map[string]string, l *coordinationv1api.Lease, entries map[string]string) (damage, bool) {
	if seen == nil || seen.Annotations[annotationLeaseEpoch] == "" {
		return damage{}, false // known absent, or not a Lease this store wrote
	}
	if l == nil {
		return damage{what: "deleted", lost: seenEntries}, true
	}
	if l.ResourceVersion == seen.ResourceVersion || splitState(l) == splitDone {
		return damage{}, false
	}
	epoch0, epoch := seen.Annotations[annotationLeaseEpoch], l.Annotations[annotationLeaseEpoch]
	seq0, _ := seqOf(seen)
	seq, seqOK := seqOf(l)
	missing := func() map[string]string {
		lost := map[string]string{}
		for k, v := range seenEntries {
			if _, ok := entries[k]; !ok {
				lost[k] = v
			}
		}
		return lost
	}
	switch {
	case epoch != epoch0 && restoredSince(l, seen):
		// Deleted, and restored by another replica from a state no
		// earlier than seen: nothing of seen is missing that its writers
		// had not deleted.
		return damage{what: fmt.Sprintf("deleted and made again (epoch %s, was %s), restored by another replica from %s",
			epoch, epoch0, l.Annotations[annotationLeaseRestored])}, true
	case epoch != epoch0 && epoch != "":
		return damage{what: fmt.Sprintf("deleted and made again (epoch %s, was %s)", epoch, epoch0), lost: missing()}, true
	case epoch == "" || !seqOK:
		return damage{what: "rewritten without the record's bookkeeping (epoch, seq)", lost: missing()}, true
	case seq < seq0:
		return damage{what: fmt.Sprintf("rewritten: its seq went back from %d to %d", seq0, seq), lost: missing()}, true
	}
	var d damage
	written := func(v string) bool {
		e, err := decodeEntry(v)
		if err != nil {
			return false
		}
		ep, n, ok := strings.Cut(e.Version, ".")
		s, err := strconv.ParseUint(n, 10, 64)
		return ok && err == nil && ep == epoch && seq0 < s && s <= seq
	}
	for k, v0 := range seenEntries {
		v, ok := entries[k]
		switch {
		case !ok && seq == seq0, ok && v != v0 && (versionOf(v) == versionOf(v0) || !written(v)):
			if d.lost == nil {
				d.lost = map[string]string{}
			}
			d.lost[k] = v0
		}
	}
	for k, v := range entries {
		if _, ok := seenEntries[k]; !ok && !written(v) {
			d.forged = append(d.forged, entryName(v))
		}
	}
	if len(d.lost) == 0 && len(d.forged) == 0 {
		return damage{}, false
	}
	d.what = "rewritten by hand: entries changed with no write of the record"
	return d, true
}

// restoredSince: l was restored (annotationLeaseRestored) from a state of
// seen's epoch no earlier than seen.
func restoredSince(l, seen *coordinationv1api.Lease) bool {
	ep, n, ok := strings.Cut(l.Annotations[annotationLeaseRestored], ".")
	s, err := strconv.ParseUint(n, 10, 64)
	seq0, _ := seqOf(seen)
	return ok && err == nil && ep == seen.Annotations[annotationLeaseEpoch] && s >= seq0
}

func versionOf(raw string) string {
	e, err := decodeEntry(raw)
	if err != nil {
		return ""
	}
	return e.Version
}

// entryName is an entry as the damage log names it: kind, file system,
// name, and what an id entry's holder or a volume's index says.
func entryName(raw string) string {
	e, err := decodeEntry(raw)
	if err != nil {
		return "(not an entry)"
	}
	s := fmt.Sprintf("%s %s/%s", e.Key.Kind, e.Key.FileSystem, e.Key.Name)
	switch {
	case e.Key.Kind == journal.KindID:
		s += " held by " + strconv.Quote(string(e.Value))
	case e.Index != "":
		s += " (" + e.Index + ")"
	}
	return s
}

// names is at most maxDamageListed of entries' names, sorted, and how many
// more there are.
func names(entries []string) string {
	slices.Sort(entries)
	if len(entries) > maxDamageListed {
		return strings.Join(entries[:maxDamageListed], "; ") + fmt.Sprintf("; and %d more", len(entries)-maxDamageListed)
	}
	return strings.Join(entries, "; ")
}

// observe takes l (nil: gone), the shard as the API server answers it now
// (a GET, or a listing), with its entries, as what this process knows of
// the shard, judging it against seen first: damage is logged, and what it
// lost is queued to be restored by the shard's next write. It reports
// whether anything is queued to be restored.
func (s *leaseStore) observe(sh *leaseShard, l *coordinationv1api.Lease, entries map[string]string) bool {
	sh.mu.Lock()
	if l != nil && sh.seen != nil && !newer(l.ResourceVersion, sh.seen.ResourceVersion) {
		// Older than the Lease seen: a read that was answered before
		// another this store observed first (reads of a shard run side by
		// side: a commit's Get, a List). A rewrite or a re-creation has a
		// later resourceVersion; this is neither, and judging it would
		// take what it lacks of the later state as lost.
		pending := sh.restore != nil
		sh.mu.Unlock()
		return pending
	}
	d, bad := judge(sh.seen, sh.seenParsed(), l, entries)
	if sh.restore != nil && l != nil && restoredSince(l, &coordinationv1api.Lease{ObjectMeta: sh.restoreFrom}) {
		sh.restore = nil // restored by another replica from a state no earlier
	}
	if bad && sh.seen != nil && (len(d.lost) > 0 || l == nil || l.Annotations[annotationLeaseRestored] == "") {
		// Restored, or at least marked restored from seen (a write, even
		// with nothing lost): a replica that knew an earlier state then
		// restores nothing that seen's writers had deleted.
		if sh.restore == nil {
			sh.restore, sh.restoreFrom = map[string]string{}, *sh.seen.ObjectMeta.DeepCopy()
		}
		maps.Copy(sh.restore, d.lost)
	}
	from := ""
	if sh.seen != nil {
		from = sh.seen.ResourceVersion + " (" + stateOf(sh.seen) + ")"
	}
	sh.seen, sh.seenEntries = l, entries
	sh.seenN++
	if !sh.known || sh.cur == nil || l == nil || newer(l.ResourceVersion, sh.cur.ResourceVersion) {
		sh.known, sh.cur, sh.entries = true, l, entries
	}
	pending := sh.restore != nil
	sh.mu.Unlock()
	if bad {
		lost := make([]string, 0, len(d.lost))
		for _, v := range d.lost {
			lost = append(lost, entryName(v))
		}
		s.log.Error("the record's Lease was damaged: deleted or rewritten by hand; what it lost is restored",
			slog.String("lease", s.ns+"/"+sh.name), slog.String("damage", d.what), slog.String("knownAt", from),
			slog.Int("lost", len(lost)), slog.String("entries", names(lost)), slog.String("forged", names(d.forged)))
	}
	return pending
}

// seenSince reports whether sh's seen changed since it was counted sent:
// a "not found" answered to a GET sent before is older than what is seen
// (another replica made the Lease meanwhile, and this store saw it in a
// List), not a deletion.
func (s *leaseStore) seenSince(sh *leaseShard, sent uint64) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.seenN != sent
}

// seenParsed is seen's entries, parsed once (nil seen: none). Under sh.mu.
func (sh *leaseShard) seenParsed() map[string]string {
	if sh.seen == nil {
		return nil
	}
	if sh.seenEntries == nil {
		if sh.seen == sh.cur && sh.entries != nil {
			sh.seenEntries = sh.entries
		} else if es, err := entriesOf(sh.seen); err == nil {
			sh.seenEntries = es
		}
	}
	return sh.seenEntries
}

// restoreOps are the creates that restore what damage to sh lost, to
// apply before a batch, and the state they restore from.
func (s *leaseStore) restoreOps(sh *leaseShard) ([]*leaseOp, string) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.restore == nil {
		return nil, ""
	}
	ops := make([]*leaseOp, 0, len(sh.restore))
	for _, k := range slices.Sorted(maps.Keys(sh.restore)) {
		e, err := decodeEntry(sh.restore[k])
		if err != nil {
			delete(sh.restore, k)
			continue
		}
		_, bits := entryAnnotation(e.Key)
		ops = append(ops, &leaseOp{kind: opCreate, e: journal.Entry{Key: e.Key, Value: e.Value, Index: e.Index}, ann: k, bits: bits})
	}
	return ops, stateOf(&coordinationv1api.Lease{ObjectMeta: sh.restoreFrom})
}

// restored settles the restoring creates ops after the batch of sh that
// carried them (results their answers; written: the shard was written,
// with the mark annotationLeaseRestored): each is done, created or found
// made by another writer since. An id entry another volume holds now is
// logged: its id may be on two volumes.
func (s *leaseStore) restored(sh *leaseShard, ops []*leaseOp, results []leaseResult, written bool) {
	var made, kept []string
	sh.mu.Lock()
	for i, op := range ops {
		r := results[i]
		if r.err != nil && !errors.Is(r.err, journal.ErrExists) {
			continue // the shard's entries could not be read: kept for the next write
		}
		delete(sh.restore, op.ann)
		switch {
		case r.err == nil:
			made = append(made, entryName(encodeEntry(op.e)))
		case op.e.Key.Kind == journal.KindID && string(r.e.Value) != string(op.e.Value):
			kept = append(kept, fmt.Sprintf("%s: now held by %q", entryName(encodeEntry(op.e)), r.e.Value))
		}
	}
	if len(sh.restore) == 0 && written {
		sh.restore = nil
	}
	sh.mu.Unlock()
	if len(made) > 0 {
		s.log.Warn("the record's Lease is restored", slog.String("lease", s.ns+"/"+sh.name), slog.Int("restored", len(made)),
			slog.String("entries", names(made)))
	}
	if len(kept) > 0 {
		s.log.Error("ids of a damaged Lease were held by other volumes before they were restored: a GID may be on two volumes (audit)",
			slog.String("lease", s.ns+"/"+sh.name), slog.String("entries", names(kept)))
	}
}

// passRestore hands what is to be restored in sh, now done, to its
// children, which hold its keys.
func (s *leaseStore) passRestore(sh *leaseShard) {
	sh.mu.Lock()
	lost, from := sh.restore, sh.restoreFrom
	sh.restore = nil
	sh.mu.Unlock()
	for k, v := range lost {
		e, err := decodeEntry(v)
		if err != nil {
			continue
		}
		_, bits := entryAnnotation(e.Key)
		d := sh.id.depth + 1
		child := s.shard(shardID{d, prefixOf(bits, d)})
		child.mu.Lock()
		if child.restore == nil {
			child.restore, child.restoreFrom = map[string]string{}, from
		}
		child.restore[k] = v
		child.mu.Unlock()
	}
}

// kick queues a read on sh, whose commit writes what is to be restored
// there: damage a listing found is restored at once, not at the shard's
// next operation.
func (s *leaseStore) kick(sh *leaseShard) {
	bits := sh.id.prefix << (64 - sh.id.depth) // routes to sh (or, split since, to its children)
	s.route(&leaseOp{kind: opGet, e: journal.Entry{Key: journal.Key{Kind: "restore"}}, bits: bits, done: make(chan leaseResult, 1)})
}

// warm takes l, a shard of this store a listing read, with its entries:
// as the shard's state if nothing is known of it yet (its next write then
// needs no read first: a stale state costs a conflict, never a lost
// write, and a split shard is routed through without a read), and
// judged for damage if it is later than the shard as last seen.
func (s *leaseStore) warm(l *coordinationv1api.Lease, entries map[string]string) {
	var id shardID
	if _, err := fmt.Sscanf(l.Annotations[annotationLeaseShard], "%d/%x", &id.depth, &id.prefix); err != nil ||
		id.depth < rootDepth || id.depth > maxDepth {
		return
	}
	sh := s.shard(id)
	if sh.name != l.Name {
		return
	}
	sh.mu.Lock()
	later := sh.seen == nil || l.ResourceVersion != sh.seen.ResourceVersion && newer(l.ResourceVersion, sh.seen.ResourceVersion)
	if !later {
		if !sh.known {
			sh.known, sh.cur = true, l.DeepCopy()
		}
		sh.mu.Unlock()
		return
	}
	sh.mu.Unlock()
	if s.observe(sh, l.DeepCopy(), entries) {
		s.kick(sh)
	}
}

// listedAll judges, after a complete listing at resourceVersion rv that
// answered the Leases named listed, every shard this process saw as a
// Lease at or before rv that the listing did not show: the store never
// deletes its Leases, so it was deleted.
func (s *leaseStore) listedAll(rv string, listed map[string]bool) {
	at, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return
	}
	s.mu.Lock()
	shards := slices.Collect(maps.Values(s.shards))
	s.mu.Unlock()
	for _, sh := range shards {
		sh.mu.Lock()
		gone := false
		if sh.seen != nil && !listed[sh.name] {
			v, err := strconv.ParseUint(sh.seen.ResourceVersion, 10, 64)
			gone = err == nil && v <= at
		}
		sh.mu.Unlock()
		if gone && s.observe(sh, nil, nil) {
			s.kick(sh)
		}
	}
}
