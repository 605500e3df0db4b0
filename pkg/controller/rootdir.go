package controller

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/rootpath"
)

// rootDirs is the state root-directory removal keeps between deletes.
type rootDirs struct {
	// slots bounds the removals (each a mount and a tree walk) under way
	// at once: 1,000 DeleteVolume calls at once make 1,000 mounts
	// otherwise, and the walks' buffers took the driver past 100 MiB.
	slots chan struct{}
	kept  atomic.Int64 // deletes that left a directory another access point reaches

	// pending are the mount points whose unmount failed, retried until
	// it succeeds; the value is false while a retry of it is under way.
	mu      sync.Mutex
	pending map[string]bool
	// emptyTrash: file systems whose trash this process last found
	// empty, and put nothing in since (PurgeTrash does not mount them).
	emptyTrash map[string]bool
}

// maxRemovals is how many root-directory removals run at once; the others
// wait for a slot within their call's deadline.
const maxRemovals = 16

func newRootDirs() *rootDirs {
	return &rootDirs{
		slots:      make(chan struct{}, maxRemovals),
		pending:    map[string]bool{},
		emptyTrash: map[string]bool{},
	}
}

// RootDirsKept counts the deletes that kept the root directory because
// another live access point reaches it (for metrics: it only grows).
func (s *Service) RootDirsKept() int64 {
	return s.roots.kept.Load()
}

// RootDirsNotOwned counts the deletes, with root-directory removal on, of
// access points that no CSI driver made: the access point went, its
// directory was kept. Each file system's memory counts its own
// (core.FS.RootNotOwned, by the delete's machine).
func (s *Service) RootDirsNotOwned() int64 {
	var n int64
	for _, st := range s.fss.all() {
		st.mu.Lock()
		n += st.mem.RootDirsNotOwned()
		st.mu.Unlock()
	}
	return n
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
	if h, ok := v.index.Find(ap.Path, func(h rootpath.Holder) bool { return s.reaches(h, ap) }); ok {
		return h.String()
	}
	return s.createSharer(ap)
}

// createSharer names a create of this process, under way or finished
// within core.GoneMemory, whose root directory is nested with ap's; ""
// if none. It costs no request, so it is asked again right before the
// removal: the listing, shared by a batch of deletes, started before this
// delete waited for its removal slot and mounted.
func (s *Service) createSharer(ap *efs.AccessPoint) string {
	if h, ok := s.fs(ap.FileSystemID).findCreate(ap.Path, func(h rootpath.Holder) bool { return s.reaches(h, ap) }); ok {
		return h.String()
	}
	return ""
}

// reaches reports whether h reaches its directory for the users of another
// volume than ap's.
func (s *Service) reaches(h rootpath.Holder, ap *efs.AccessPoint) bool {
	switch {
	case !h.Live, h.APID == ap.ID, h.Token != "" && h.Token == core.VolumeKeyOf(ap):
		return false // ap itself, its own record or create, or gone
	}
	return h.APID == "" || !s.fs(ap.FileSystemID).beingDeleted(h.APID)
}

// releaseMount unmounts and removes a temporary mount point, on a context
// detached from the call's (which may be cancelled already), and retries
// the unmounts that failed before. One that fails again is kept pending,
// never forgotten and never removed while it may still be the file system:
// it is retried by the next delete and by CleanStaleMountPoints.
func (s *Service) releaseMount(ctx context.Context, mnt string) {
	cctx, cancel := cleanupContext(ctx)
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
