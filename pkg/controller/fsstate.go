package controller

import (
	"slices"
	"sync"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
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
			creates: newPathIndex(), createOf: map[string]createEntry{},
			taken: map[int64]string{}, takenBy: map[string]int64{}}
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

	// From the allocator's last complete listing (watchedSource,
	// otherclusters.go): the ids (uid and gid), sorted, that other
	// clusters' access points carry, and one such cluster's ID; the ids
	// that access points under tokens other than GID tokens carry
	// (skipped). The volume names' tokens access points were listed under
	// (upstream's) go to mem.
	others     otherIDs
	outsideIDs []int64

	// taken: by id, the volume (its volume-name tag, else its root
	// directory: tokenHolder; "" for another cluster's) of the access point that holds the id's GID token, as
	// the last complete listing showed, and this process has made or seen
	// since (takenBy: by access point, until it deletes it). EFS answers
	// a send under that token with that access point, so a volume's
	// sequence skips the id (candidate) as it would after that answer.
	taken   map[int64]string
	takenBy map[string]int64

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
	creates       *pathIndex
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
func (st *fsState) listed(others otherIDs, nameTokens map[string]core.ListedAP, outside []int64, taken map[int64]string, takenBy map[string]int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.others, st.outsideIDs = others, outside
	st.mem.SetNameTokens(nameTokens)
	st.taken, st.takenBy = taken, takenBy
}

// tokenHolder is the id whose GID token ap holds, and its volume as
// fsState.taken keeps it: its volume-name tag, or without one its root
// directory, which tells GID-token volumes apart (core.Plan.usesGIDToken;
// no volume name begins with "/"); "" for another cluster's. ok is false
// for an access point under another token, or whose ids are not its
// token's (nothing is inferred of it: a send under that token learns what
// EFS answers).
func tokenHolder(ap *efs.AccessPoint, cluster string) (id int64, vol string, ok bool) {
	if !volume.IsGIDToken(ap.ClientToken) {
		return 0, "", false
	}
	uid, g := core.PosixIDs(ap)
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

// sawToken notes ap in taken, if it holds a GID token: this process made
// or adopted it.
func (st *fsState) sawToken(ap *efs.AccessPoint, cluster string) {
	id, vol, ok := tokenHolder(ap, cluster)
	if !ok {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.taken[id], st.takenBy[ap.ID] = vol, id
}

// skipped says why the sequence of the volume named name, at root
// directory root, passes over id: an access point under another token
// carries it (outside: EFS cannot compare the two), or another volume's
// access point held its GID token when last listed or seen (taken: EFS
// would answer with that access point, unless it has been deleted since
// by a writer this process does not hear of; a hint).
func (st *fsState) skipped(id int64, name, root string) (outside, taken bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, found := slices.BinarySearch(st.outsideIDs, id); found {
		return true, false
	}
	holder, held := st.taken[id]
	return false, held && holder != name && holder != root
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
	for _, id := range ids {
		if i, found := slices.BinarySearch(st.outsideIDs, id); !found {
			st.outsideIDs = slices.Insert(st.outsideIDs, i, id)
		}
	}
}

// gone records that apID was deleted at now. Those older than goneMemory
// are dropped whenever the map has doubled since the last sweep, so that a
// storm of deletes costs amortized constant time each.
func (st *fsState) gone(apID string, now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.deleted[apID] = now
	if id, ok := st.takenBy[apID]; ok {
		delete(st.takenBy, apID)
		delete(st.taken, id)
	}
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
	h := holder{token: token, name: name, path: root, kind: creatingHolder, live: true}
	st.mu.Lock()
	st.forgetCreateLocked(token)
	st.putCreateLocked(token, h, time.Time{})
	st.mu.Unlock()
	return func(ap *efs.AccessPoint) {
		if ap != nil {
			h.apID = ap.ID
			h.path = ap.Path // adopted access points may differ from the plan
		}
		at := now()
		st.mu.Lock()
		defer st.mu.Unlock()
		st.forgetCreateLocked(token)
		st.putCreateLocked(token, h, at)
		st.pruneCreatesLocked(at)
	}
}

func (st *fsState) putCreateLocked(token string, h holder, ended time.Time) {
	st.creates.add(token, h)
	st.createOf[token] = createEntry{root: h.path, ended: ended}
}

func (st *fsState) forgetCreateLocked(token string) {
	e, ok := st.createOf[token]
	if !ok {
		return
	}
	delete(st.createOf, token)
	st.creates.remove(token, e.root)
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

// findCreate is pathIndex.find over this process's creates, with counts
// asked once the lock is released (it may read this state again).
func (st *fsState) findCreate(root string, counts func(holder) bool) (holder, bool) {
	var nested []holder
	st.mu.Lock()
	st.creates.find(root, func(h holder) bool { nested = append(nested, h); return false })
	st.mu.Unlock()
	for _, h := range nested {
		if counts(h) {
			return h, true
		}
	}
	return holder{}, false
}

// dropAnswer stops answering repeats of apID's volume from memory (found
// or made gone).
func (st *fsState) dropAnswer(apID string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.mem.DropAnswer(apID)
}
