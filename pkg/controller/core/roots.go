package core

import (
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/rootpath"
)

// GoneMemory is how long this process remembers an access point it
// deleted, and a create of its that ended: longer than a listing takes,
// so that root removal's view (pkg/controller, rootdir.go), whose listing
// began before either, is checked against what it may not show.
const GoneMemory = 2 * time.Minute

// rootMemory is what FS keeps for root removal (pkg/controller,
// rootdir.go): this process's creates and the deletes it finished, which
// a listing taken before may not show.
type rootMemory struct {
	// creates: this process's creates, under way or ended within
	// GoneMemory, indexed by root directory (createOf by token): what
	// reaches a directory since a listing began, at no cost. Only kept
	// with root removal on (the machines call Creating only then).
	// createPruneAt: len(createOf) at which old ones are dropped next.
	creates       *rootpath.Index
	createOf      map[string]createEntry
	createPruneAt int
	// deleted: the access points (or directory volumes' stand-ins) this
	// process deleted, for as long as a listing taken before may still
	// show them (a delete that finished while another's listing was in
	// flight would otherwise look live to it). deletedPruneAt: as
	// createPruneAt.
	deleted        map[string]time.Time
	deletedPruneAt int
}

// createEntry is a create of this process in the index; ended is zero while
// it is under way.
type createEntry struct {
	h     rootpath.Holder
	ended time.Time
}

func newRootMemory() rootMemory {
	return rootMemory{creates: rootpath.NewIndex(), createOf: map[string]createEntry{}, deleted: map[string]time.Time{}}
}

// Creating notes that this process creates token's volume (name) at root,
// until CreateEnded: root removal keeps a directory it may reach, from
// before its record is written. A create abandoned before its end (its
// call killed) stays noted as under way: this process's deletes keep the
// directories it may reach for as long as the process runs.
func (f *FS) Creating(token, name, root string) {
	f.forgetCreate(token)
	f.putCreate(token, rootpath.Holder{Token: token, Name: name, Path: root, Kind: rootpath.Creating, Live: true}, time.Time{})
}

// CreateEnded notes that token's create, begun with Creating, answered ap
// (nil: nothing known) at now: its entry then names ap, at ap's path
// (adopted access points may differ from the plan), and stays for
// GoneMemory, longer than any listing that started before the create
// ended is used.
func (f *FS) CreateEnded(token string, ap *efs.AccessPoint, now time.Time) {
	e, ok := f.roots.createOf[token]
	if !ok {
		return // no Creating of it: nothing to end
	}
	h := e.h
	if ap != nil {
		h.APID, h.Path = ap.ID, ap.Path
	}
	f.forgetCreate(token)
	f.putCreate(token, h, now)
	f.pruneCreates(now)
}

func (f *FS) putCreate(token string, h rootpath.Holder, ended time.Time) {
	f.roots.creates.Add(token, h)
	f.roots.createOf[token] = createEntry{h: h, ended: ended}
}

func (f *FS) forgetCreate(token string) {
	e, ok := f.roots.createOf[token]
	if !ok {
		return
	}
	delete(f.roots.createOf, token)
	f.roots.creates.Remove(token, e.h.Path)
}

// pruneCreates drops creates that ended over GoneMemory ago whenever
// their number has doubled since the last sweep (amortized constant time
// per create, as Gone).
func (f *FS) pruneCreates(now time.Time) {
	r := &f.roots
	if len(r.createOf) < r.createPruneAt {
		return
	}
	for token, e := range r.createOf {
		if !e.ended.IsZero() && now.Sub(e.ended) > GoneMemory {
			f.forgetCreate(token)
		}
	}
	r.createPruneAt = max(1024, 2*len(r.createOf))
}

// Creates are this process's creates, under way or ended (within
// GoneMemory, or not yet pruned), whose root directory is nested with
// root.
func (f *FS) Creates(root string) []rootpath.Holder { return f.roots.creates.Nested(root) }

// Gone notes that access point apID (or a directory volume's stand-in)
// was deleted at now: root removal counts it gone (Deleted), the GID
// token it held is forgotten (GoneToken), and the allocator's view frees
// its ids once no other live access point carries them. Those older than GoneMemory are
// dropped whenever their number has doubled since the last sweep, so that
// a storm of deletes costs amortized constant time each.
func (f *FS) Gone(apID string, now time.Time) {
	r := &f.roots
	r.deleted[apID] = now
	f.GoneToken(apID)
	f.gids.Forget(apID) // its ids are free once no other live access point carries them
	if len(r.deleted) < r.deletedPruneAt {
		return
	}
	for id, at := range r.deleted {
		if now.Sub(at) > GoneMemory {
			delete(r.deleted, id)
		}
	}
	r.deletedPruneAt = max(1024, 2*len(r.deleted))
}

// Deleted reports whether this process deleted apID within GoneMemory
// (or longer: until a prune drops it).
func (f *FS) Deleted(apID string) bool {
	_, ok := f.roots.deleted[apID]
	return ok
}
