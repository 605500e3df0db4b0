package controller

import (
	"log/slog"
	"strconv"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// foundHeld tells this process at once what a Hold found: another
// volume's entry in the record holds the id. This call keeps it reserved
// in the allocator to its end (gid.ReserveID), through any listing, so no
// later pick of the call takes it again; the allocator counts it used for
// later calls too (a stand-in: a directory volume's own, as listings of
// the record's directory volumes carry it, dirSource; else one that a
// listing begun past the lag drops). A directory volume's id is also
// skipped by the GID token sequences from now on (carried outside the
// protocol, as dirSource's listings make it: core.FS.Candidate); an access point
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
