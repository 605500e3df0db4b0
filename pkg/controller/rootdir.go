package controller

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// rootDirs is the state root-directory removal keeps between deletes.
type rootDirs struct {
	// slots bounds the removals (each a mount and a tree walk) under way
	// at once: 1,000 DeleteVolume calls at once make 1,000 mounts
	// otherwise, and the walks' buffers took the driver past 100 MiB.
	slots    chan struct{}
	kept     atomic.Int64 // deletes that left a directory another access point reaches
	notOwned atomic.Int64 // deletes that left the directory of an access point no CSI driver made

	// deleting are the access points whose DeleteVolume is under way in
	// this process: doomed, so they do not keep a shared directory (two
	// deletes of a shared directory at once would otherwise keep it both).
	// deleted are those this process deleted, for as long as a listing
	// taken before may still show them (a delete that finished while the
	// other's listing was in flight would otherwise look live to it).
	delMu    sync.Mutex
	deleting map[string]int
	deleted  map[string]time.Time
	pruneAt  int // len(deleted) at which old records are dropped next

	// creates are this process's creates, under way or ended within
	// goneMemory, indexed per file system by root directory: what reaches
	// a directory since a listing began, at no cost (createSharer). Only
	// kept with root removal on.
	cmu           sync.Mutex
	creates       map[string]*pathIndex
	createOf      map[string]createEntry
	createPruneAt int

	// pending are the mount points whose unmount failed, retried until
	// it succeeds; the value is false while a retry of it is under way.
	mu      sync.Mutex
	pending map[string]bool
}

// maxRemovals is how many root-directory removals run at once; the others
// wait for a slot within their call's deadline.
const maxRemovals = 16

func newRootDirs() *rootDirs {
	return &rootDirs{
		slots:    make(chan struct{}, maxRemovals),
		pending:  map[string]bool{},
		deleting: map[string]int{},
		deleted:  map[string]time.Time{},
		creates:  map[string]*pathIndex{},
		createOf: map[string]createEntry{},
	}
}

// goneMemory is how long a deleted access point is remembered: longer than
// a listing takes.
const goneMemory = 2 * time.Minute

// gone records that apID was deleted at now. Records older than goneMemory
// are dropped whenever the map has doubled since the last sweep, so that a
// storm of deletes costs amortized constant time each.
func (r *rootDirs) gone(apID string, now time.Time) {
	r.delMu.Lock()
	defer r.delMu.Unlock()
	r.deleted[apID] = now
	if len(r.deleted) < r.pruneAt {
		return
	}
	for id, at := range r.deleted {
		if now.Sub(at) > goneMemory {
			delete(r.deleted, id)
		}
	}
	r.pruneAt = max(1024, 2*len(r.deleted))
}

// deletingNow marks apID as being deleted until the returned func is called.
func (r *rootDirs) deletingNow(apID string) (done func()) {
	r.delMu.Lock()
	r.deleting[apID]++
	r.delMu.Unlock()
	return func() {
		r.delMu.Lock()
		if r.deleting[apID]--; r.deleting[apID] == 0 {
			delete(r.deleting, apID)
		}
		r.delMu.Unlock()
	}
}

func (r *rootDirs) beingDeleted(apID string) bool {
	r.delMu.Lock()
	defer r.delMu.Unlock()
	_, gone := r.deleted[apID]
	return r.deleting[apID] > 0 || gone
}

// RootDirsKept counts the deletes that kept the root directory because
// another live access point reaches it (for metrics: it only grows).
func (s *Service) RootDirsKept() int64 {
	return s.roots.kept.Load()
}

// RootDirsNotOwned counts the deletes, with root-directory removal on, of
// access points that no CSI driver made: the access point went, its
// directory was kept.
func (s *Service) RootDirsNotOwned() int64 {
	return s.roots.notOwned.Load()
}

// PendingUnmounts is the number of this process's temporary mount points
// whose unmount failed and is to be retried: 0 at rest.
func (s *Service) PendingUnmounts() int {
	s.roots.mu.Lock()
	defer s.roots.mu.Unlock()
	return len(s.roots.pending)
}

// sharer names what reaches ap's root directory besides ap itself (its
// own directory, one inside it or one containing it), "" if nothing does.
// The view's listing started after the delete asked: every listed access
// point counts, whoever created it (this driver, the upstream driver, an
// operator), since its users' data is in the directory too. The view's
// record adds this cluster's creates that a listing may not show yet (EFS
// lists with a lag; a record is written before its CreateAccessPoint), and
// this process's creates since (createSharer) what neither shows. One this
// process is deleting right now does not count: its volume is released
// already.
func (s *Service) sharer(ap *efs.AccessPoint, v *rootView) string {
	if h, ok := v.index.find(ap.Path, func(h holder) bool { return s.reaches(h, ap) }); ok {
		return h.String()
	}
	return s.createSharer(ap)
}

// createSharer names a create of this process, under way or finished
// within goneMemory, whose root directory is nested with ap's; "" if none.
// It costs no request, so it is asked again right before the removal: the
// listing, shared by a batch of deletes, started before this delete waited
// for its removal slot and mounted.
func (s *Service) createSharer(ap *efs.AccessPoint) string {
	if h, ok := s.roots.findCreate(ap.FileSystemID, ap.Path, func(h holder) bool { return s.reaches(h, ap) }); ok {
		return h.String()
	}
	return ""
}

// reaches reports whether h reaches its directory for the users of another
// volume than ap's.
func (s *Service) reaches(h holder, ap *efs.AccessPoint) bool {
	switch {
	case !h.live, h.apID == ap.ID, h.token != "" && h.token == volumeKeyOf(ap):
		return false // ap itself, its own record or create, or gone
	}
	return h.apID == "" || !s.roots.beingDeleted(h.apID)
}

// volumeKeyOf is the key of ap's volume in the record and in its creates'
// name locks (plan.input.ClientToken): its client token, or for a GID
// token the name token of its volume-name tag.
func volumeKeyOf(ap *efs.AccessPoint) string {
	if name := ap.Tags[TagVolumeName]; volume.IsGIDToken(ap.ClientToken) && name != "" {
		return volume.NameToken(name)
	}
	return ap.ClientToken
}

// live: an access point being deleted gives its users no access any more.
func live(ap *efs.AccessPoint) bool {
	return ap.LifeCycleState != "deleting" && ap.LifeCycleState != "deleted"
}

// creating records that this process creates token's volume at root on
// fsID, until done is called with what the create answered (nil: nothing
// known); the entry then stays for goneMemory, longer than any listing
// that started before the create ended is used.
func (r *rootDirs) creating(fsID, token, name, root string, now func() time.Time) (done func(ap *efs.AccessPoint)) {
	key := fsID + "\x00" + token
	h := holder{token: token, name: name, path: root, kind: creatingHolder, live: true}
	r.cmu.Lock()
	r.forgetCreateLocked(key)
	r.putCreateLocked(key, fsID, h, time.Time{})
	r.cmu.Unlock()
	return func(ap *efs.AccessPoint) {
		if ap != nil {
			h.apID = ap.ID
			h.path = ap.Path // adopted access points may differ from the plan
		}
		at := now()
		r.cmu.Lock()
		defer r.cmu.Unlock()
		r.forgetCreateLocked(key)
		r.putCreateLocked(key, fsID, h, at)
		r.pruneCreatesLocked(at)
	}
}

// createEntry is a create of this process in the index; ended is zero while
// it is under way.
type createEntry struct {
	fsID  string
	root  string
	ended time.Time
}

func (r *rootDirs) putCreateLocked(key, fsID string, h holder, ended time.Time) {
	x := r.creates[fsID]
	if x == nil {
		x = newPathIndex()
		r.creates[fsID] = x
	}
	x.add(key, h)
	r.createOf[key] = createEntry{fsID: fsID, root: h.path, ended: ended}
}

func (r *rootDirs) forgetCreateLocked(key string) {
	e, ok := r.createOf[key]
	if !ok {
		return
	}
	delete(r.createOf, key)
	if x := r.creates[e.fsID]; x != nil {
		x.remove(key, e.root)
		if len(x.at) == 0 {
			delete(r.creates, e.fsID)
		}
	}
}

// pruneCreatesLocked drops creates that ended over goneMemory ago whenever
// their number has doubled since the last sweep (amortized constant time
// per create, as gone).
func (r *rootDirs) pruneCreatesLocked(now time.Time) {
	if len(r.createOf) < r.createPruneAt {
		return
	}
	for key, e := range r.createOf {
		if !e.ended.IsZero() && now.Sub(e.ended) > goneMemory {
			r.forgetCreateLocked(key)
		}
	}
	r.createPruneAt = max(1024, 2*len(r.createOf))
}

// findCreate is pathIndex.find over this process's creates on fsID.
func (r *rootDirs) findCreate(fsID, root string, counts func(holder) bool) (holder, bool) {
	r.cmu.Lock()
	defer r.cmu.Unlock()
	x := r.creates[fsID]
	if x == nil {
		return holder{}, false
	}
	return x.find(root, counts)
}

// releaseMount unmounts and removes a temporary mount point, on a context
// detached from the call's (which may be cancelled already), and retries
// the unmounts that failed before. One that fails again is kept pending,
// never forgotten and never removed while it may still be the file system:
// it is retried by the next delete and by CleanStaleMountPoints.
func (s *Service) releaseMount(ctx context.Context, mnt string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	s.roots.mu.Lock()
	s.roots.pending[mnt] = true
	s.roots.mu.Unlock()
	_ = s.retryUnmounts(cctx)
}

// retryUnmounts unmounts and removes every pending mount point, keeping
// those that fail. Each is claimed while it is tried, so that concurrent
// deletes do not unmount the same one twice.
func (s *Service) retryUnmounts(ctx context.Context) error {
	s.roots.mu.Lock()
	todo := make([]string, 0, len(s.roots.pending))
	for mnt, free := range s.roots.pending {
		if free {
			todo = append(todo, mnt)
			s.roots.pending[mnt] = false // claimed
		}
	}
	s.roots.mu.Unlock()
	var errs []error
	for _, mnt := range todo {
		err := s.mounter.Unmount(ctx, mnt)
		if err == nil {
			if err = os.Remove(mnt); errors.Is(err, os.ErrNotExist) {
				err = nil
			}
		}
		s.roots.mu.Lock()
		if err == nil {
			delete(s.roots.pending, mnt)
		} else {
			s.roots.pending[mnt] = true
		}
		s.roots.mu.Unlock()
		if err != nil {
			s.log.Warn("temporary mount point not released; will retry", slog.String("path", mnt), slog.String("error", err.Error()))
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
