package core

import (
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// GID tokens make EFS the compare-and-swap of each id; for every writer of
// one volume to send one token (replicas whose records differ mid-upgrade,
// a file record per pod), they must try the same ids in the same order and
// move past one only on what they all see alike: EFS's answer that another
// volume's access point holds its token. So a volume's ids are a fixed
// sequence, a function of its file system, name and class range (double
// hashing: every id of the range once), not of this process's view. The
// view is used only to skip ids that EFS holds alike for every writer
// (and to try first an id whose entry the record keeps with the volume's,
// Candidate's fits: writers of one volume that share a record agree
// through it, whichever id each tries first): ids
// that access points under other tokens carry (upstream's, earlier
// releases', classes without GID tokens), which EFS cannot compare with
// ours, and ids whose GID token another volume's access point holds, which
// EFS would answer with that access point (FS.Skips: the same move
// without the request, so that a volume of a range 90% full does not give
// up after MaxIDAttempts of them). What can still part two writers of one
// volume: an access point holding an id deleted between their two tries of
// it (or since the listing one of them skipped it by), or two volumes of
// one record contending for an id (the id table) that another record's
// writer does not see (docs/design.md, Known limits).

// gidProbe is a volume's sequence of ids in [lo, lo+size).
type gidProbe struct {
	lo          int64
	size, start uint64
	step        uint64
}

func newGIDProbe(fsID, name string, lo, hi int64) gidProbe {
	size := uint64(hi - lo + 1)
	h := fnv.New64a()
	h.Write([]byte(fsID + "\x00" + name))
	h1 := h.Sum64()
	h.Write([]byte("\x00step"))
	h2 := h.Sum64()
	step := uint64(1)
	if size > 2 {
		step = 1 + h2%(size-1)
		for gcd(step, size) != 1 {
			step = step%(size-1) + 1
		}
	}
	return gidProbe{lo: lo, size: size, start: h1 % size, step: step}
}

// SequenceAt is the i-th id of the sequence of the volume named name on
// fsID in [lo, hi] (tests and tools: which id a volume tries first).
func SequenceAt(fsID, name string, lo, hi int64, i int) int64 {
	return newGIDProbe(fsID, name, lo, hi).at(i)
}

// at is the i-th id of the sequence.
func (g gidProbe) at(i int) int64 {
	off := (g.start + (uint64(i)%g.size)*g.step%g.size) % g.size
	return g.lo + int64(off)
}

// maxProbeSkips bounds the ids one call skips (FS.Skips) before it
// gives the call back as contention.
const maxProbeSkips = 1 << 16

// maxFitProbes bounds the ids Candidate tries for one that fits, as the
// allocator bounds its free ones: the Lease record's shards split past 8,
// one id in 2^depth fits, and 512 find one in 99.98% of tries at depth 6
// (64 shards, about 8,000 volumes), 98% at depth 7.
const maxFitProbes = gid.MaxFitProbes

// Candidate is the first id of the sequence of the volume named name, at
// root directory root, in [lo, hi], at or after index from (the
// sequence wraps) that the file system's state does not skip, and its
// index. With fits (nil: none), the first such id of the next
// maxFitProbes that fits comes first: an id whose entry the record keeps
// with the volume's (journal.Journal.Near), so that one write makes the
// record and holds the id (Journal.BeginHeld); any id is as safe, so
// past them the sequence chooses as without. An id skipped only as taken is a hint that may be stale (its
// access point deleted by another process): when nothing else is left but
// the id the record has (the last of a full turn from its place), the
// first such id is tried, and EFS's answer decides, so a stale hint costs
// a request, never a create.
func (f *FS) Candidate(name, root string, lo, hi int64, from int, fits func(int64) bool) (int64, int, error) {
	fsID := f.id
	seq := newGIDProbe(fsID, name, lo, hi)
	if fits != nil {
		// Short of a full turn: the record's own id (index from-1, for
		// from > 0) is never one.
		for i := from; i < from+int(min(seq.size-1, maxFitProbes)); i++ {
			id := seq.at(i)
			if outside, taken := f.Skips(id, name, root); !outside && !taken && fits(id) {
				return id, i, nil
			}
		}
	}
	// The sequence wraps: an id taken when tried may be free on the next
	// round (whether the range is full is the allocator's view's to say).
	n := min(seq.size, maxProbeSkips)
	recorded := from + int(seq.size) - 1 // the record's own id, for from > 0
	soft := -1
	for i := from; i < from+int(n); i++ {
		id := seq.at(i)
		outside, taken := f.Skips(id, name, root)
		switch {
		case outside:
		case taken:
			if soft < 0 {
				soft = i
			}
		case from > 0 && i == recorded && soft >= 0:
		default:
			return id, i, nil
		}
	}
	if soft >= 0 {
		return seq.at(soft), soft, nil
	}
	if n == seq.size {
		return 0, 0, fmt.Errorf("%w in [%d, %d] on %s: access points under other tokens carry every id", gid.ErrExhausted, lo, hi, fsID)
	}
	return 0, 0, fmt.Errorf("%w: %d ids of volume %q's sequence on %s are carried by access points under other tokens", ErrGIDContention, maxProbeSkips, name, fsID)
}

// Skips says why the sequence of the volume named name, at root
// directory root, passes over id: an access point under another token
// carries it (outside: EFS cannot compare the two), or another volume's
// access point held its GID token when last listed or seen (taken: EFS
// would answer with that access point, unless it has been deleted since
// by a writer this process does not hear of; a hint).
func (f *FS) Skips(id int64, name, root string) (outside, taken bool) {
	if _, found := slices.BinarySearch(f.outsideIDs, id); found {
		return true, false
	}
	holder, held := f.taken[id]
	return false, held && holder != name && holder != root
}

// TokenHolder is the id whose GID token ap holds, and its volume as
// FS.taken keeps it: its volume-name tag, or without one its root
// directory, which tells GID-token volumes apart (Plan.usesGIDToken;
// no volume name begins with "/"); "" for another cluster's. ok is false
// for an access point under another token, or whose ids are not its
// token's (nothing is inferred of it: a send under that token learns what
// EFS answers).
func TokenHolder(ap *efs.AccessPoint, cluster string) (id int64, vol string, ok bool) {
	if !volume.IsGIDToken(ap.ClientToken) {
		return 0, "", false
	}
	uid, g := PosixIDs(ap)
	for _, id := range []int64{g, uid} {
		if id >= 0 && volume.GIDToken(ap.FileSystemID, id) == ap.ClientToken {
			if _, other := ownership.OtherCluster(ap, cluster); other {
				return id, "", true
			}
			if name, tagged := ap.Tags[ownership.TagVolumeName]; tagged {
				return id, name, true
			}
			return id, ap.Path, true
		}
	}
	return 0, "", false
}

// SawToken notes ap in taken, if it holds a GID token: this process made,
// adopted or found it.
func (f *FS) SawToken(ap *efs.AccessPoint, cluster string) {
	if id, vol, ok := TokenHolder(ap, cluster); ok {
		f.taken[id], f.takenBy[ap.ID] = vol, id
	}
}

// AddOutside notes ids as carried outside the GID token protocol until the
// next complete listing (which shows them again if they still are): a
// directory volume's, made or found by this process.
func (f *FS) AddOutside(ids ...int64) {
	for _, id := range ids {
		if i, found := slices.BinarySearch(f.outsideIDs, id); !found {
			f.outsideIDs = slices.Insert(f.outsideIDs, i, id)
		}
	}
}

// GoneToken forgets the GID token apID held: it is deleted.
func (f *FS) GoneToken(apID string) {
	if id, ok := f.takenBy[apID]; ok {
		delete(f.takenBy, apID)
		delete(f.taken, id)
	}
}

// Listing is what a complete listing of the file system showed, for the
// sequences and the handover: the ids access points under tokens other
// than GID tokens carry (Outside, sorted), the volume (TokenHolder) holding
// each id's GID token (Taken, and back by access point: TakenBy), and the
// access points under volume names' tokens (NameTokens: upstream's).
type Listing struct {
	Outside    []int64
	Taken      map[int64]string
	TakenBy    map[string]int64
	NameTokens map[string]ListedAP
}

// Listed replaces what the last complete listing showed.
func (f *FS) Listed(l Listing) {
	f.outsideIDs, f.taken, f.takenBy, f.nameTokens = l.Outside, l.Taken, l.TakenBy, l.NameTokens
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
