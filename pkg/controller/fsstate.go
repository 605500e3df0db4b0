package controller

import (
	"slices"
	"sync"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/rootpath"
)

// fileSystems holds this process's state of each file system it has seen,
// one fsState each, shared by every backend (file system IDs are unique
// across accounts and APIs). The record (pkg/journal) and the volume
// locks (pkg/keylock) keep their own; what is here is every other thing a
// create or delete remembers of a file system between calls, the GID
// allocator's view included (pkg/gid keeps it under fsState's lock), and
// its zone, for placement. Entries are never dropped: one per file system
// this controller provisions on.
type fileSystems struct {
	mu   sync.Mutex
	byID map[string]*fsState
}

func newFileSystems() *fileSystems { return &fileSystems{byID: map[string]*fsState{}} }

// of is fsID's state, made at first use.
func (f *fileSystems) of(fsID string) *fsState {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.byID[fsID]
	if st == nil {
		st = &fsState{mem: core.NewFS(fsID), deleting: map[string]int{}, deleted: map[string]time.Time{},
			creates: rootpath.NewIndex(), createOf: map[string]createEntry{},
		}
		f.byID[fsID] = st
	}
	return st
}

// gidView is the allocator's view of fsID and its lock (gid.Options.Home):
// part of fsID's state, under its one lock.
func (f *fileSystems) gidView(fsID string) (*gid.View, sync.Locker) {
	st := f.of(fsID)
	return &st.gids, &st.mu
}

// fs is fsID's state.
func (s *Service) fs(fsID string) *fsState { return s.fss.of(fsID) }

// fsState is what this process knows of one file system, under one lock.
// Nothing blocks while it is held: no request, no callback of a caller.
// No method of it calls the allocator (pkg/gid), which takes the lock.
type fsState struct {
	mu sync.Mutex

	// gids: the GID allocator's view (pkg/gid, which keeps it under mu:
	// gidView). Only the allocator reads or writes it.
	gids gid.View

	// mem: what the machines remember of the file system (core.FS: the
	// answers, finished deletes, burned tokens, upstream's tokens listed),
	// under mu (effects.run holds it around their steps).
	mem *core.FS

	// others: from the allocator's last complete listing (watchedSource,
	// otherclusters.go), the ids (uid and gid), sorted, that other
	// clusters' access points carry, and one such cluster's ID. What else
	// it showed (the ids the sequences skip, upstream's tokens) goes to
	// mem.
	others otherIDs

	// Root removal's memory (rootdir.go). deleting: the access points
	// whose DeleteVolume is under way in this process: doomed, so they do
	// not keep a shared directory (two deletes of a shared directory at
	// once would otherwise keep it both). deleted: those this process
	// deleted, for as long as a listing taken before may still show them
	// (a delete that finished while the other's listing was in flight
	// would otherwise look live to it). deletedPruneAt: len(deleted) at
	// which old ones are dropped next.
	deleting       map[string]int
	deleted        map[string]time.Time
	deletedPruneAt int

	// creates: this process's creates, under way or ended within
	// goneMemory, indexed by root directory (createOf by token): what
	// reaches a directory since a listing began, at no cost
	// (createSharer). Only kept with root removal on.
	creates       *rootpath.Index
	createOf      map[string]createEntry
	createPruneAt int

	// zone: the file system's availability zone ("" for a regional one)
	// as described at zoneAt (zero: never), for placement and topology
	// (Service.zone).
	zone   string
	zoneAt time.Time

	// downAt: when placement last failed to list or describe this file
	// system (zero: it answered since), and why; placement skips it for
	// unreachableSkip after (placement.go).
	downAt  time.Time
	downWhy string
}

// knownZone is the zone described within zoneFresh before now.
func (st *fsState) knownZone(now time.Time) (string, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.zone, !st.zoneAt.IsZero() && now.Sub(st.zoneAt) < zoneFresh
}

// setZone notes the zone described at now.
func (st *fsState) setZone(zone string, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.zone, st.zoneAt = zone, now
}

// otherIDs: the ids (uid and gid) other clusters' access points on one file
// system carry, sorted, from the last complete listing, and one of those
// clusters' IDs (for the message).
type otherIDs struct {
	ids     []int64
	cluster string
}

// listed replaces what the last complete listing showed.
func (st *fsState) listed(others otherIDs, l core.Listing) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.others = others
	st.mem.Listed(l)
}

// othersInRange returns how many of the ids other clusters' access points
// carry lie in [lo, hi], and one such cluster's ID.
func (st *fsState) othersInRange(lo, hi int64) (int, string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	from, _ := slices.BinarySearch(st.others.ids, lo)
	to, _ := slices.BinarySearch(st.others.ids, hi+1)
	return to - from, st.others.cluster
}

// addOutside notes ids as carried outside the GID token protocol until the
// next complete listing (which shows them again if they still are): a
// directory volume's, made by this process.
func (st *fsState) addOutside(ids ...int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.mem.AddOutside(ids...)
}

// gone records that apID was deleted at now. Those older than goneMemory
// are dropped whenever the map has doubled since the last sweep, so that a
// storm of deletes costs amortized constant time each.
func (st *fsState) gone(apID string, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.deleted[apID] = now
	st.mem.GoneToken(apID)
	if len(st.deleted) < st.deletedPruneAt {
		return
	}
	for id, at := range st.deleted {
		if now.Sub(at) > goneMemory {
			delete(st.deleted, id)
		}
	}
	st.deletedPruneAt = max(1024, 2*len(st.deleted))
}

// deletingNow marks apID as being deleted until the returned func is called.
func (st *fsState) deletingNow(apID string) (done func()) {
	st.mu.Lock()
	st.deleting[apID]++
	st.mu.Unlock()
	return func() {
		st.mu.Lock()
		if st.deleting[apID]--; st.deleting[apID] == 0 {
			delete(st.deleting, apID)
		}
		st.mu.Unlock()
	}
}

// beingDeleted: apID's delete is under way in this process, or it deleted
// it within goneMemory.
func (st *fsState) beingDeleted(apID string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, gone := st.deleted[apID]
	return st.deleting[apID] > 0 || gone
}

// createEntry is a create of this process in the index; ended is zero while
// it is under way.
type createEntry struct {
	root  string
	ended time.Time
}

// creating records that this process creates token's volume at root,
// until done is called with what the create answered (nil: nothing
// known); the entry then stays for goneMemory, longer than any listing
// that started before the create ended is used.
func (st *fsState) creating(token, name, root string, now func() time.Time) (done func(ap *efs.AccessPoint)) {
	h := rootpath.Holder{Token: token, Name: name, Path: root, Kind: rootpath.Creating, Live: true}
	st.mu.Lock()
	st.forgetCreateLocked(token)
	st.putCreateLocked(token, h, time.Time{})
	st.mu.Unlock()
	return func(ap *efs.AccessPoint) {
		if ap != nil {
			h.APID = ap.ID
			h.Path = ap.Path // adopted access points may differ from the plan
		}
		at := now()
		st.mu.Lock()
		defer st.mu.Unlock()
		st.forgetCreateLocked(token)
		st.putCreateLocked(token, h, at)
		st.pruneCreatesLocked(at)
	}
}

func (st *fsState) putCreateLocked(token string, h rootpath.Holder, ended time.Time) {
	st.creates.Add(token, h)
	st.createOf[token] = createEntry{root: h.Path, ended: ended}
}

func (st *fsState) forgetCreateLocked(token string) {
	e, ok := st.createOf[token]
	if !ok {
		return
	}
	delete(st.createOf, token)
	st.creates.Remove(token, e.root)
}

// pruneCreatesLocked drops creates that ended over goneMemory ago whenever
// their number has doubled since the last sweep (amortized constant time
// per create, as gone).
func (st *fsState) pruneCreatesLocked(now time.Time) {
	if len(st.createOf) < st.createPruneAt {
		return
	}
	for token, e := range st.createOf {
		if !e.ended.IsZero() && now.Sub(e.ended) > goneMemory {
			st.forgetCreateLocked(token)
		}
	}
	st.createPruneAt = max(1024, 2*len(st.createOf))
}

// findCreate is a create of this process nested with root (the index's
// Nested) for which counts is true, asked once the lock is released (it
// may read this state again).
func (st *fsState) findCreate(root string, counts func(rootpath.Holder) bool) (rootpath.Holder, bool) {
	st.mu.Lock()
	nested := st.creates.Nested(root)
	st.mu.Unlock()
	for _, h := range nested {
		if counts(h) {
			return h, true
		}
	}
	return rootpath.Holder{}, false
}

// dropAnswer stops answering repeats of apID's volume from memory (found
// or made gone).
func (st *fsState) dropAnswer(apID string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.mem.DropAnswer(apID)
}
