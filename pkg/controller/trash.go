package controller

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/rmtree"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Root removal never destroys a directory on a listing that may lag
// (docs/root-removal.md, "The trash"): the delete moves the directory into
// the file system's trash (volume.TrashDir) at once, and a purge destroys
// a trash entry only once a listing that began trashWindow after the move
// shows no access point, and the record no volume, reaching its original
// directory; if one does, the entry is moved back. A trash entry's name is
// its whole record: when it was moved and from where (TrashName), so no
// record entry is written and a restart finds every entry as it was. The
// rename is atomic, so a crash leaves the directory at one of its two
// names, whole; an entry judged for purging is renamed (purgePrefix)
// before the tree is removed, so a purge cut short is finished, never
// restored half removed.

// minTrashWindow is the least trashWindow: EFS documents no bound on its
// listing lag, which is seconds when it shows at all, and a minute of
// disk for a deleted volume's data costs little.
const minTrashWindow = time.Minute

// trashWindow is how long a moved directory waits before a listing may
// judge it: ten times --listing-lag, at least minTrashWindow. --listing-lag
// is an estimate; the removal already waited for it once (removeRootDir),
// so what reaches the trash is an access point that lagged longer than
// the estimate said, and the window is the margin against that.
func (s *Service) trashWindow() time.Duration {
	return max(10*s.cfg.ListingLag, minTrashWindow)
}

// purgePrefix marks a trash entry judged for purging: it is removed
// whatever a later listing says, never restored.
const purgePrefix = "purge."

// TrashName is the name in volume.TrashDir of the directory orig moved
// there at: the time in Unix nanoseconds and orig in unpadded base64url
// (at most 100 bytes: 134 characters).
func TrashName(orig string, at time.Time) string {
	return strconv.FormatInt(at.UnixNano(), 10) + "." + base64.RawURLEncoding.EncodeToString([]byte(orig))
}

// TrashEntry is a trash entry's name read back: the directory's original
// path, when it was moved, and whether a purge of it is under way.
type TrashEntry struct {
	Name    string
	Orig    string
	At      time.Time
	Purging bool
}

// ParseTrashName reads a name TrashName made (perhaps behind
// purgePrefix); false for any other.
func ParseTrashName(name string) (TrashEntry, bool) {
	e := TrashEntry{Name: name}
	rest, purging := strings.CutPrefix(name, purgePrefix)
	ns, enc, ok := strings.Cut(rest, ".")
	if !ok {
		return e, false
	}
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return e, false
	}
	orig, err := base64.RawURLEncoding.DecodeString(enc)
	if p := string(orig); err != nil || !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return e, false
	}
	e.Orig, e.At, e.Purging = string(orig), time.Unix(0, n), purging
	return e, true
}

// ReadTrash lists the entries of the trash of the file system mounted at
// root (none if it has no trash), oldest first; names not of TrashName's
// form are left out.
func ReadTrash(root string) ([]TrashEntry, error) {
	es, err := os.ReadDir(filepath.Join(root, volume.TrashDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []TrashEntry
	for _, e := range es {
		if t, ok := ParseTrashName(e.Name()); ok {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b TrashEntry) int { return a.At.Compare(b.At) })
	return out, nil
}

// moveToTrash moves the directory rel of the file system mounted at mnt
// into its trash. A directory that is not there (an earlier attempt moved
// it) is nothing to move.
func (s *Service) moveToTrash(mnt, rel string) error {
	if err := os.Mkdir(filepath.Join(mnt, volume.TrashDir), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	err := rmtree.Move(mnt, rel, volume.TrashDir+"/"+TrashName("/"+rel, s.now()))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// trashSharerID stands for a trash entry's former access point in sharer:
// no access point has it, so every holder counts.
const trashSharerID = "trash"

// purgeTrash judges the trash of fsID, mounted at mnt, against view: an
// entry moved at least trashWindow before the view's listing began is
// moved back if something reaches its original directory (loudly: a
// listing lagged longer than --listing-lag said), else purged. It reports
// whether entries are left.
func (s *Service) purgeTrash(ctx context.Context, mnt, fsID string, view *rootView) (bool, error) {
	entries, err := ReadTrash(mnt)
	if err != nil {
		return true, fmt.Errorf("%w: trash of %s: %w", ErrRootDirRemoval, fsID, err)
	}
	left := false
	var errs []error
	for _, e := range entries {
		if !e.Purging && view.began.Before(e.At.Add(s.trashWindow())) {
			left = true
			continue // waiting
		}
		if err := s.judge(ctx, mnt, fsID, view, e); err != nil {
			left = true
			errs = append(errs, err)
		}
	}
	return left, errors.Join(errs...)
}

// judge restores or purges one trash entry whose window has passed.
func (s *Service) judge(ctx context.Context, mnt, fsID string, view *rootView, e TrashEntry) error {
	at := volume.TrashDir + "/" + e.Name
	attrs := []any{slog.String("fileSystem", fsID), slog.String("path", e.Orig), slog.String("trash", "/"+at)}
	if !e.Purging {
		if other := s.sharer(&efs.AccessPoint{ID: trashSharerID, FileSystemID: fsID, Path: e.Orig}, view); other != "" {
			err := rmtree.Move(mnt, at, e.Orig[1:])
			if err != nil {
				s.log.Error("deleted volume's directory NOT restored: another volume reaches its path, which holds other data now; it stays in the trash",
					append(attrs, slog.String("other", other), slog.String("error", err.Error()))...)
				return fmt.Errorf("%w: restore %s: %w", ErrRootDirRemoval, e.Orig, err)
			}
			s.roots.kept.Add(1)
			s.log.Error("deleted volume's directory restored: another volume reaches it, which EFS did not list when the volume was deleted (its listing lagged more than --listing-lag)",
				append(attrs, slog.String("other", other))...)
			return nil
		}
		next := volume.TrashDir + "/" + purgePrefix + e.Name
		if err := rmtree.Move(mnt, at, next); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrRootDirRemoval, at, err)
		}
		at = next
	}
	if err := rmtree.RemoveAll(ctx, mnt, at); err != nil {
		return fmt.Errorf("%w: purge %s: %w", ErrRootDirRemoval, at, err)
	}
	s.log.Info("root directory purged", attrs...)
	return nil
}

// PurgeTrash judges the trash of fsID (purgeTrash) on a listing begun now,
// for the orphan collector's rounds: a file system whose trash this
// process last found empty, and has put nothing in since, is not mounted.
func (s *Service) PurgeTrash(ctx context.Context, fsID string) error {
	if !s.delRoot || s.mounter == nil || s.roots.trashEmpty(fsID) {
		return nil
	}
	return s.withMount(ctx, fsID, func(mnt string) error {
		entries, err := ReadTrash(mnt)
		if err != nil {
			return fmt.Errorf("%w: trash of %s: %w", ErrRootDirRemoval, fsID, err)
		}
		now := s.now()
		if !slices.ContainsFunc(entries, func(e TrashEntry) bool { return e.Purging || !now.Before(e.At.Add(s.trashWindow())) }) {
			s.roots.setTrash(fsID, len(entries) > 0)
			return nil // nothing due: no listing
		}
		view, err := s.viewAfterNow(ctx, fsID)
		if err != nil {
			return err
		}
		left, err := s.purgeTrash(ctx, mnt, fsID, view)
		s.roots.setTrash(fsID, left)
		return err
	})
}

// trashEmpty: this process last found the trash of fsID empty.
func (r *rootDirs) trashEmpty(fsID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.emptyTrash[fsID]
}

// setTrash notes whether fsID's trash has entries.
func (r *rootDirs) setTrash(fsID string, left bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.emptyTrash[fsID] = !left
}
