package controller

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// GID tokens make EFS the compare-and-swap of each id; for every writer of
// one volume to send one token (replicas whose records differ mid-upgrade,
// a file record per pod), they must try the same ids in the same order and
// move past one only on what they all see alike: EFS's answer that another
// volume's access point holds its token. So a volume's ids are a fixed
// sequence, a function of its file system, name and class range (double
// hashing: every id of the range once), not of this process's view. The
// view is used only to skip ids that EFS holds alike for every writer: ids
// that access points under other tokens carry (upstream's, earlier
// releases', classes without GID tokens), which EFS cannot compare with
// ours, and ids whose GID token another volume's access point holds, which
// EFS would answer with that access point (fsState.skipped: the same move
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

// at is the i-th id of the sequence.
func (g gidProbe) at(i int) int64 {
	off := (g.start + (uint64(i)%g.size)*g.step%g.size) % g.size
	return g.lo + int64(off)
}

// maxProbeSkips bounds the ids one call skips (fsState.skipped) before it
// gives the call back as contention.
const maxProbeSkips = 1 << 16

// candidate is the first id of p's sequence at or after index from (the
// sequence wraps) that the file system's state does not skip, and its
// index. An id skipped only as taken is a hint that may be stale (its
// access point deleted by another process): when nothing else is left but
// the id the record has (the last of a full turn from its place), the
// first such id is tried, and EFS's answer decides, so a stale hint costs
// a request, never a create.
func (s *Service) candidate(p *plan, from int) (int64, int, error) {
	fsID, lo, hi := p.Params.FileSystemID, p.Params.GIDRangeStart, p.Params.GIDRangeEnd
	seq := newGIDProbe(fsID, p.Name, lo, hi)
	// The sequence wraps: an id taken when tried may be free on the next
	// round (whether the range is full is the allocator's view's to say).
	st := s.fs(fsID)
	n := min(seq.size, maxProbeSkips)
	recorded := from + int(seq.size) - 1 // the record's own id, for from > 0
	soft := -1
	for i := from; i < from+int(n); i++ {
		id := seq.at(i)
		outside, taken := st.skipped(id, p.Name, p.Input.Path)
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
	return 0, 0, fmt.Errorf("%w: %d ids of volume %q's sequence on %s are carried by access points under other tokens", ErrGIDContention, maxProbeSkips, p.Name, fsID)
}

// foundHeld tells this process at once what a Hold found: another
// volume's entry in the record holds the id. This call keeps it reserved
// in the allocator to its end (gid.ReserveID), through any listing, so no
// later pick of the call takes it again; the allocator counts it used for
// later calls too (a stand-in: a directory volume's own, as listings of
// the record's directory volumes carry it, dirSource; else one that a
// listing begun past the lag drops). A directory volume's id is also
// skipped by the GID token sequences from now on (carried outside the
// protocol, as dirSource's listings make it: candidate); an access point
// volume's is not: the writers of one volume under other records do not
// see this record's id table, and a skip they do not make, kept past the
// holder's move off the id, would part them (two access points for one
// volume). A directory volume holding it also says that the record has
// directory volumes the allocator has not listed (another replica's,
// made since its last listing): the first such find of a call reads them
// all (one List of the record's index) and the call keeps those of its
// class's range reserved too, so that when they fill the range its next
// reservation finds it full, after a listing, and answers
// gid.ErrExhausted (RESOURCE_EXHAUSTED), rather than walking held ids one
// request each until it gives up as contention.
func (x *effects) foundHeld(t *journal.IDTakenError) {
	s, fsID := x.s, t.FileSystem
	st := s.fs(fsID)
	x.res = append(x.res, s.gids.ReserveID(fsID, t.ID))
	standIn := efs.AccessPoint{ID: "held:" + strconv.FormatInt(t.ID, 10), FileSystemID: fsID, ClientToken: t.Holder,
		PosixUser: &efs.PosixUser{UID: t.ID, GID: t.ID}}
	if !volume.IsDirToken(t.Holder) {
		s.gids.Record(standIn)
		return
	}
	standIn.ID = core.DirStandInID(t.Holder)
	seen := func(ap *efs.AccessPoint) {
		s.gids.Record(*ap)
		st.addOutside(core.PosixIDs(ap))
	}
	listed := false
	if !x.dirsRead[fsID] {
		if x.dirsRead == nil {
			x.dirsRead = map[string]bool{}
		}
		x.dirsRead[fsID] = true
		lo, hi := int64(0), int64(-1)
		if x.p != nil && x.p.Params.NeedsGIDAllocation() {
			lo, hi = x.p.Params.GIDRangeStart, x.p.Params.GIDRangeEnd
		}
		err := s.journal.DirVolumes(x.ctx, fsID, func(recs []*journal.Record) error {
			for _, r := range recs {
				if r.Allocated == journal.NoID {
					continue
				}
				seen(core.DirStandIn(r))
				listed = listed || r.Token == t.Holder
				if r.Allocated >= lo && r.Allocated <= hi && r.Token != t.Holder {
					x.res = append(x.res, s.gids.ReserveID(fsID, r.Allocated))
				}
			}
			return nil
		})
		if err != nil {
			s.log.Debug("reading the record's directory volumes", slog.String("fileSystem", fsID), slog.Any("error", err))
		}
	}
	if !listed {
		seen(&standIn)
	}
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
