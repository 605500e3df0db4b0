package controller

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
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
	// alloc decides on each file system's view in its core.FS (set once,
	// before the first of).
	alloc *gid.Allocator
}

func newFileSystems() *fileSystems { return &fileSystems{byID: map[string]*fsState{}} }

// of is fsID's state, made at first use.
func (f *fileSystems) of(fsID string) *fsState {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.byID[fsID]
	if st == nil {
		st = &fsState{mem: core.NewFSWith(fsID, f.alloc), deleting: map[string]int{}}
		f.byID[fsID] = st
	}
	return st
}

// all is every file system's state made so far. The caller takes each
// one's lock itself, never under f.mu.
func (f *fileSystems) all() []*fsState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Collect(maps.Values(f.byID))
}

// gidView is the allocator's view of fsID and its lock (gid.Options.Home):
// part of fsID's state, under its one lock.
func (f *fileSystems) gidView(fsID string) (*gid.View, sync.Locker) {
	st := f.of(fsID)
	return st.mem.GIDView(), &st.mu
}

// fs is fsID's state.
func (s *Service) fs(fsID string) *fsState { return s.fss.of(fsID) }

// fsState is what this process knows of one file system, under one lock.
// Nothing blocks while it is held: no request, no log write, no callback
// of a caller.
// No method of it calls the allocator (pkg/gid), which takes the lock.
type fsState struct {
	mu sync.Mutex

	// mem: what the machines remember of the file system (core.FS: the
	// answers, finished deletes, burned tokens, upstream's tokens listed,
	// root removal's creates and deletes), under mu (effects.run holds it
	// around their steps).
	mem *core.FS

	// others: from the allocator's last complete listing (watchedSource,
	// otherclusters.go), the ids (uid and gid), sorted, that other
	// clusters' access points carry, and one such cluster's ID. What else
	// it showed (the ids the sequences skip, upstream's tokens) goes to
	// mem.
	others otherIDs

	// deleting: the access points whose DeleteVolume is under way in
	// this process, for root removal (rootdir.go): doomed, so they do not
	// keep a shared directory (two deletes of a shared directory at once
	// would otherwise keep it both). Held by the RemoveRoot effect through
	// the DeleteAccessPoint. Those it deleted, and its creates, are mem's
	// (core.FS.Deleted, core.FS.Creates).
	deleting map[string]int

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

// gone records that apID (an access point, or a directory volume's
// stand-in) was deleted at now, for root removal and the allocator: its
// ids are free once no other live access point carries them.
func (st *fsState) gone(apID string, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.mem.Gone(apID, now)
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
// it within core.GoneMemory.
func (st *fsState) beingDeleted(apID string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.deleting[apID] > 0 || st.mem.Deleted(apID)
}

// findCreate is a create of this process (core.FS.Creates) nested with
// root for which counts is true. The index is read under the lock; counts
// is asked once it is released (it may read this state again).
func (st *fsState) findCreate(root string, counts func(rootpath.Holder) bool) (rootpath.Holder, bool) {
	st.mu.Lock()
	nested := st.mem.Creates(root)
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
