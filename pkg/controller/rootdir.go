package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
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

// sharer names a live access point other than ap on its file system, or
// a recorded create, whose root directory is ap's, inside it or contains
// it; "" if there is none. The access points are from a listing that
// started after the call: every one counts, whoever created it (this
// driver, the upstream driver, an operator), since its users' data is in
// the directory too. The record adds this cluster's creates that a listing
// may not show yet (EFS lists with a lag; a record is written before its
// CreateAccessPoint is sent). One this process is deleting right now does
// not count: its volume is released already.
func (s *Service) sharer(ctx context.Context, ap *efs.AccessPoint) (string, error) {
	aps, err := s.listAfterNow(ctx, ap.FileSystemID)
	if err != nil {
		return "", err
	}
	for i := range aps {
		other := &aps[i]
		if other.ID != ap.ID && live(other) && !s.roots.beingDeleted(other.ID) && nested(other.Path, ap.Path) {
			return fmt.Sprintf("access point %s at %s", other.ID, other.Path), nil
		}
	}
	var found string
	err = s.journal.Volumes(ctx, ap.FileSystemID, func(recs []*journal.Record) error {
		for _, r := range recs {
			if found == "" && r.Token != ap.ClientToken && r.AccessPoint != ap.ID &&
				(r.AccessPoint == "" || !s.roots.beingDeleted(r.AccessPoint)) && nested(r.Path, ap.Path) {
				found = fmt.Sprintf("the recorded volume %q at %s", r.Name, r.Path)
			}
		}
		return nil
	})
	return found, err
}

// live: an access point being deleted gives its users no access any more.
func live(ap *efs.AccessPoint) bool {
	return ap.LifeCycleState != "deleting" && ap.LifeCycleState != "deleted"
}

// nested reports whether one of two root directories is the other or lies
// inside it, comparing whole components: /a/b and /a/bc are unrelated, and
// "/" (or no root set) contains every directory.
func nested(a, b string) bool {
	a, b = path.Clean("/"+a), path.Clean("/"+b)
	if len(a) > len(b) {
		a, b = b, a
	}
	return a == "/" || a == b || strings.HasPrefix(b, a+"/")
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
