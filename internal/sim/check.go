package sim

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
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
//	record    at the end: no record entry left in a live store (but the
//	          place entry of a claim abandoned before its create
//	          succeeded, docs/placement.md)
//	placement a class over several file systems: each volume on one, the
//	          one its place entry names (checkPlacement)
//	locks     at rest: no volume lock held
//	liveness  every call finishes once faults stop
func (s *Sim) check() {
	for _, a := range s.actors {
		if a.stuck != "" {
			s.violate("%s", a.stuck)
		}
	}
	s.scanMounts()
	for _, id := range s.fsIDs() {
		s.checkNamed(s.efs.fss[id])
	}
	// GIDs are unique within a file system (and a directory volume's
	// within its record, whose ids are per file system too).
	type fsGID struct {
		fs  string
		gid int64
	}
	byGID := map[fsGID][]*answered{}
	byName := map[string]*answered{}
	for _, an := range s.answers {
		if s.deletedIDs[an.volID] {
			continue
		}
		fs := s.efs.fss[an.fsID]
		exists := fs != nil && fs.aps[an.apID] != nil
		if an.dir != "" {
			_, exists = s.dirsOf(an.fsID)[an.dir]
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
		if g := (fsGID{an.fsID, an.gid}); an.gid >= 0 {
			for _, o := range byGID[g] {
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
			byGID[g] = append(byGID[g], an)
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
		if v := recordOf(an.inst.st, an.fsID, an.apID, an.token, an.name); v != nil && v.Deleting {
			s.violate("phantom: %s answered to %s (%s) but its record in %s is marked deleting", an.apID, an.by, an.name, an.inst.st.name)
		}
	}
	s.checkPlacement()
}

// checkPlacement: a class over several file systems places each volume
// on one, the one its place entry names (docs/placement.md):
//
//   - a record of a live store marked placed, and not being deleted, is
//     on the file system its place entry names, if it has one;
//   - an answered volume whose delete was not issued is on the file
//     system its record's place entry names;
//   - a name's live volumes (answered and not being deleted; records not
//     being deleted, which name the access points and directories made
//     for it) are all on one file system;
//   - none is on a file system whose listings failed from the start for
//     the whole run (Config.Down).
func (s *Sim) checkPlacement() {
	if s.cfg.fileSystems() < 2 {
		return
	}
	on := map[string]map[string]string{} // name -> file system -> what holds it there
	note := func(name, fs, what string) {
		if on[name] == nil {
			on[name] = map[string]string{}
		}
		if _, ok := on[name][fs]; !ok {
			on[name][fs] = what
		}
	}
	for _, st := range s.liveStores() {
		var keys []journal.Key
		for k := range st.m {
			if k.Kind == journal.KindVolume && !s.forged[k] || k.Kind == journal.KindPlace {
				keys = append(keys, k)
			}
		}
		slices.SortFunc(keys, keyLess)
		for _, k := range keys {
			if k.Kind == journal.KindPlace {
				if fs := string(st.m[k].Value); s.alwaysDown(fs) {
					s.violate("placement: place entry %s in %s names %s, whose listings always failed", k, st.name, fs)
				}
				continue
			}
			var v journal.Volume
			if json.Unmarshal(st.m[k].Value, &v) != nil || v.Deleting {
				continue
			}
			// A placed record that names no access point and holds no id
			// never passed its Begin's placement (journal.Begin: a create
			// whose Begin was cut short, or lost to another's place): it
			// holds and sends nothing, and the collector takes it once
			// its claim is gone. Any other is the volume's.
			if v.Placed != "" && v.AccessPoint == "" && !idHeldFor(st, k.FileSystem, v.Allocated, v.Token) {
				continue
			}
			note(v.Name, k.FileSystem, fmt.Sprintf("record %s in %s", k, st.name))
			if v.Placed == "" {
				continue
			}
			if got := placement(st, v.Placed); got != k.FileSystem && got != "" {
				s.violate("placement: record %s in %s (%s) is on %s but its place entry names %q", k, st.name, v.Name, k.FileSystem, got)
			}
		}
	}
	for _, an := range s.answers {
		if s.deletedIDs[an.volID] || s.deleteIssued[an.volID] {
			continue
		}
		note(an.name, an.fsID, fmt.Sprintf("%s answered to %s", an.apID, an.by))
		if got := placement(an.inst.st, volume.NameToken(an.name)); got != an.fsID {
			s.violate("placement: %s (%s) answered to %s on %s but its place entry in %s names %q", an.apID, an.name, an.by, an.fsID, an.inst.st.name, got)
		}
	}
	if s.alwaysDown(s.downFS()) {
		// Its listings never answered: placement never chose it.
		for _, name := range slices.Sorted(maps.Keys(on)) {
			if what, ok := on[name][s.downFS()]; ok {
				s.violate("placement: %s placed on %s, whose listings always failed (%s)", name, s.downFS(), what)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(on)) {
		if len(on[name]) > 1 {
			var where []string
			for _, fs := range slices.Sorted(maps.Keys(on[name])) {
				where = append(where, fs+": "+on[name][fs])
			}
			s.violate("placement: %s lives on %d file systems: %s", name, len(on[name]), strings.Join(where, "; "))
		}
	}
}

// alwaysDown: fs is the class's file system whose listings fail from the
// start for the whole run.
func (s *Sim) alwaysDown(fs string) bool {
	return fs != "" && fs == s.downFS() && s.cfg.Down < 0 && s.cfg.DownAt == 0
}

// placement is the file system st's place entry of the volume whose name
// token is token names ("" if none).
func placement(st *store, token string) string {
	e, ok := st.m[journal.Key{Kind: journal.KindPlace, FileSystem: "any", Name: token}]
	if !ok {
		return ""
	}
	return string(e.Value)
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
	s.checkKeptRoots()
	for _, fsID := range s.fsIDs() {
		fs := s.efs.fss[fsID]
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
	}
	for _, st := range s.stores {
		if !live[st] {
			continue
		}
		for _, e := range st.sorted() {
			if s.forged[e.Key] || e.Key.Kind == journal.KindHandover {
				continue // the handover fence's note stays for good
			}
			if e.Key.Kind == journal.KindPlace && s.abandonedName(e.Key.Name) {
				// docs/placement.md, "A refusal after the place entry":
				// the entry of a claim deleted before any create of it
				// succeeded stays (the next create of the name goes to
				// the same file system); nothing else does.
				continue
			}
			s.violate("record: %s left in %s after every claim was deleted (%s)", e.Key, st.name, e.Value)
		}
	}
}

// checkKeptRoots: with root removal on, the DeleteVolume of an access
// point made by hand kept its directory (no CSI driver made it: whose
// data it holds is unknown), and each controller still running counts at
// least as many kept directories as it deleted such access points (its
// metric, core.FS.RootNotOwned: the delete counts before its
// DeleteAccessPoint).
func (s *Sim) checkKeptRoots() {
	for _, h := range s.handVolumes {
		if _, ok := s.efs.fss[h.fsID].dirs[h.path]; !ok && !s.cfg.Share && s.deletedIDs[h.volID] {
			s.violate("data: the directory %s of %s, made by hand, was removed by its DeleteVolume", h.path, h.volID)
		}
	}
	for _, c := range s.clusters {
		for _, inst := range c.slots {
			if n := inst.svc.RootDirsNotOwned(); n < s.keptRoots[inst] {
				s.violate("metric: %s deleted %d access points made by hand with root removal on, and counts %d directories kept", inst.name, s.keptRoots[inst], n)
			}
		}
	}
}

// abandonedName: the volume whose name token is token had its claim
// given up by its provisioner (Config.Abandon) before any create of it
// was answered.
func (s *Sim) abandonedName(token string) bool {
	for _, a := range s.actors {
		if a.kind == "prov" && volume.NameToken(a.pv) == token {
			return a.claimGone && a.volID == "" && !slices.ContainsFunc(s.answers, func(an *answered) bool { return an.name == a.pv })
		}
	}
	return false
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
			if _, ok := recordEntry(st, fs.id, a.ap.ID, a.ap.ClientToken, volumeOf(a)); ok {
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

// idHeldFor reports whether st's id table holds id on fs for token.
func idHeldFor(st *store, fs string, id int64, token string) bool {
	e, ok := st.m[journal.Key{Kind: journal.KindID, FileSystem: fs, Name: strconv.FormatInt(id, 10)}]
	return ok && string(e.Value) == token
}
