package sim

import (
	"encoding/json"
	"maps"
	"path"
	"slices"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
)

// The invariants (docs/design.md, "Invariants"), each violation named by
// its kind before the colon:
//
//	gid       no GID answered on two live access points of one file system
//	          (across every controller and cluster), nor on a live
//	          directory volume and another live volume of its record
//	name      one name never answered with two live access points
//	deleted   no answered volume's access point (or directory) gone without
//	          its own DeleteVolume
//	phantom   no answered volume's record marked deleting before its DeleteVolume
//	leak      every access point this driver made is named by a record in a
//	          live store or by an answer; at the end, after every claim is
//	          deleted, none is left
//	record    at the end: no record entry left in a live store
//	locks     at rest: no volume lock held
//	liveness  every call finishes once faults stop
func (s *Sim) check() {
	for _, a := range s.actors {
		if a.stuck != "" {
			s.violate("%s", a.stuck)
		}
	}
	s.scanMounts()
	fs := s.efs.fss[FS]
	s.checkNamed(fs)
	byGID := map[int64][]*answered{}
	byName := map[string]*answered{}
	for _, an := range s.answers {
		if s.deletedIDs[an.volID] {
			continue
		}
		exists := fs.aps[an.apID] != nil
		if an.dir != "" {
			_, exists = fs.dirs[an.dir]
			if exists && s.deleteIssued[an.volID] {
				// Its delete releases the id once the record is marked
				// (and, with root removal, the directory removed): a
				// directory kept (root removal off) keeps its data, as an
				// access point's root does, not its volume's id.
				continue
			}
		}
		if !exists {
			if an.gid == -2 {
				s.violate("phantom: %s answered to %s (%s) did not exist when answered", an.apID, an.by, an.name)
			} else if !s.deleteIssued[an.volID] {
				s.violate("deleted: %s answered to %s (%s) is gone but its DeleteVolume was never called", an.apID, an.by, an.name)
			}
			continue
		}
		if an.gid >= 0 {
			for _, o := range byGID[an.gid] {
				switch {
				case o.apID == an.apID:
				case o.dir == "" && an.dir == "":
					s.violate("gid: GID %d answered on two live access points: %s (%s to %s via %s) and %s (%s to %s via %s)",
						an.gid, o.apID, o.name, o.by, o.inst.name, an.apID, an.name, an.by, an.inst.name)
				case o.inst.st == an.inst.st:
					// A directory volume's id is unique within its record
					// only: EFS cannot compare a directory with another
					// record's access points (docs/directory-volumes.md,
					// "What a directory volume is").
					s.violate("gid: GID %d answered on two live volumes of record %s: %s (%s to %s via %s) and %s (%s to %s via %s)",
						an.gid, an.inst.st.name, o.apID, o.name, o.by, o.inst.name, an.apID, an.name, an.by, an.inst.name)
				}
			}
			byGID[an.gid] = append(byGID[an.gid], an)
		}
		for _, id := range s.upstreamLive {
			if u := fs.aps[id]; u != nil && u.ap.PosixUser != nil && u.ap.PosixUser.GID == an.gid && an.gid >= 0 && id != an.apID {
				s.violate("gid: GID %d answered on %s (%s to %s) and carried by upstream's bound volume %s", an.gid, an.apID, an.name, an.by, id)
			}
		}
		if s.deleteIssued[an.volID] {
			continue
		}
		if o, ok := byName[an.name]; ok && o.apID != an.apID {
			s.violate("name: %s answered with two live access points: %s (to %s) and %s (to %s)", an.name, o.apID, o.by, an.apID, an.by)
		}
		byName[an.name] = an
		if v := recordOf(an.inst.st, FS, an.apID, an.token, an.name); v != nil && v.Deleting {
			s.violate("phantom: %s answered to %s (%s) but its record in %s is marked deleting", an.apID, an.by, an.name, an.inst.st.name)
		}
	}
}

// recordOf decodes the volume record in st of the access point apID, of
// client token token, of the volume name: the entry its key names (by
// token, or by name: which one is the controller's business) or that its
// index names; nil if none.
func recordOf(st *store, fs, apID, token, name string) *journal.Volume {
	e, ok := recordEntry(st, fs, apID, token, name)
	if !ok {
		return nil
	}
	var v journal.Volume
	if json.Unmarshal(e.Value, &v) != nil {
		return nil
	}
	return &v
}

func recordEntry(st *store, fs, apID, token, name string) (journal.Entry, bool) {
	for _, k := range []string{token, name} {
		if k == "" {
			continue
		}
		if e, ok := st.m[journal.Key{Kind: journal.KindVolume, FileSystem: fs, Name: k}]; ok {
			return e, true
		}
	}
	for k, e := range st.m {
		if k.Kind == journal.KindVolume && k.FileSystem == fs && e.Index == apID && apID != "" {
			return e, true
		}
	}
	return journal.Entry{}, false
}

// final checks the world at rest: every actor done, no request in flight.
func (s *Sim) final() {
	if s.stopping {
		return
	}
	s.check()
	live := map[*store]bool{}
	for _, c := range s.clusters {
		for _, inst := range c.slots {
			if n := inst.svc.LocksHeld(); n != 0 {
				s.violate("locks: %s holds %d volume locks at rest", inst.name, n)
			}
			live[inst.st] = true
		}
	}
	fs := s.efs.fss[FS]
	for _, id := range slices.Sorted(maps.Keys(fs.aps)) {
		a := fs.aps[id]
		if a.driver {
			gid := int64(-1)
			if a.ap.PosixUser != nil {
				gid = a.ap.PosixUser.GID
			}
			s.violate("leak: %s (token %s, gid %d) made by %s is left after every claim was deleted", id, a.ap.ClientToken, gid, a.maker)
		}
	}
	for _, st := range s.stores {
		if !live[st] {
			continue
		}
		for _, e := range st.sorted() {
			if s.forged[e.Key] || e.Key.Kind == journal.KindHandover {
				continue // the handover fence's note stays for good
			}
			s.violate("record: %s left in %s after every claim was deleted (%s)", e.Key, st.name, e.Value)
		}
	}
}

// checkNamed: every access point this driver made is named by a record of
// a live store (written before its create) or by an answered volume, or
// is in the hands of the call that made it. A request can arrive at EFS
// after everything that could name it is gone (a duplicate create's send
// delayed past the volume's whole delete on another replica): no protocol
// keeps that one named, so its maker deletes it. What a maker could not
// delete is the collector's (the sweep of unrecorded access points), and
// final proves that nothing is left at rest: one whose maker died, whose
// DeleteAccessPoint failed, whose call, cleanup included, ran out of time
// (a step of 30 s outlasts the cleanup's budget), or whose
// CreateAccessPoint's answer was lost (its maker never learned its ID:
// the record that named its token stays for the retry, unless another
// create of the volume finishes it meanwhile, wide seed 508833). Flagged
// here: one a call left behind without any of these, a defect of the
// create path that the collector would hide.
func (s *Sim) checkNamed(fs *fileSystem) {
	var unnamed []*simAP
	for _, id := range slices.Sorted(maps.Keys(fs.aps)) {
		a := fs.aps[id]
		if !a.driver || s.answeredAP(a.ap.ID) || a.delTried || a.lost || s.handling[a.call] || s.cutShort[a.call] ||
			a.inst != nil && a.inst.dead {
			continue
		}
		unnamed = append(unnamed, a)
	}
	if len(unnamed) == 0 {
		return
	}
	live := s.liveStores()
	for _, a := range unnamed {
		named := false
		for _, st := range live {
			if _, ok := recordEntry(st, FS, a.ap.ID, a.ap.ClientToken, volumeOf(a)); ok {
				named = true
				break
			}
		}
		if !named {
			s.violate("leak: %s (token %s) made by %s is named by no record and no answer", a.ap.ID, a.ap.ClientToken, a.maker)
		}
	}
}

// liveStores are the stores some running controller uses.
func (s *Sim) liveStores() []*store {
	var out []*store
	for _, c := range s.clusters {
		for _, inst := range c.slots {
			if !slices.Contains(out, inst.st) {
				out = append(out, inst.st)
			}
		}
	}
	return out
}

// volumeOf is the volume a driver's access point was made for: its
// volume-name tag (--descriptive-tags), else its root directory's name,
// which is the volume's in the simulator's class (the driver's default
// tags say nothing of it: its record does).
func volumeOf(a *simAP) string {
	if name := a.ap.Tags[ownership.TagVolumeName]; name != "" {
		return name
	}
	return path.Base(a.ap.Path)
}
