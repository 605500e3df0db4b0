package core

import (
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
)

// FS is what this process remembers of one file system between calls, for
// the machines to read and change by method calls with the time passed
// in: the volumes it answered, the deletes it finished, the GID tokens EFS
// named for access points it did not describe, and the access points its
// allocator's last listing showed under volume names' tokens (upstream's),
// and for root removal its creates and deletes of the last minutes
// (rootMemory). The process loses it on restart; the record (pkg/journal)
// is what survives.
//
// FS has no lock and never blocks, as etcd-io/raft's RawNode: the shell
// keeps one per file system and holds that file system's lock around every
// Next and Step of a machine given it, and around its own calls.
type FS struct {
	id string
	// answers and answerOf: the volumes this process answered here (name
	// -> access point, and back), so a repeat costs no request (or one
	// Describe), not a create. A delete drops its entry under the
	// volume's locks.
	answers  map[string]remembered
	answerOf map[string]string
	// finished: the deletes this process finished here, so that a repeat
	// costs no request either. A create drops its name's entries under its
	// locks.
	finished *finishedDeletes
	// invisible: GID tokens EFS named for an access point it did not
	// describe, and when first (Burned).
	invisible map[string]time.Time
	// From the allocator's last complete listing (Listed), and what this
	// process made or saw since: the access points under volume names'
	// tokens (Upstream); the ids access points under tokens other than GID
	// tokens carry, sorted (skipped by the sequences: Candidate); by id,
	// the volume (TokenHolder) of the access point that holds the id's GID
	// token, and back by access point (takenBy), until it is deleted
	// (GoneToken): EFS answers a send under that token with that access
	// point, so a volume's sequence skips the id as it would after that
	// answer.
	nameTokens map[string]ListedAP
	outsideIDs []int64
	taken      map[int64]string
	takenBy    map[string]int64
	// gids is the allocator's view of the file system (pkg/gid: the ids
	// its access points carry and the ids reserved by creates under way),
	// and alloc the allocator that decides on it, called as by a caller
	// that holds the view's lock: the shell gives the allocator this FS's
	// lock for it (gid.Options.Home).
	gids  gid.View
	alloc *gid.Allocator
	// rootsNotOwned: the deletes, with root removal on, that kept the
	// root directory of an access point no CSI driver made (a metric).
	rootsNotOwned int64
	// roots: this process's creates and deletes, for root removal.
	roots rootMemory
}

// remembered is what this process answered for a volume, and when.
type remembered struct {
	ap *efs.AccessPoint
	at time.Time
}

// ListedAP is an access point as a listing showed it: its ID and ids.
type ListedAP struct {
	ID       string
	UID, GID int64
}

// NewFS is the memory of file system id, empty, with an allocator of its
// own that lists nothing (the machines' Refresh is the caller's).
func NewFS(id string) *FS { return NewFSWith(id, nil) }

// NewFSWith is NewFS with the allocator alloc, whose view of id is this
// FS's (GIDView) under the caller's lock of it. nil: one of its own.
func NewFSWith(id string, alloc *gid.Allocator) *FS {
	f := &FS{id: id, answers: map[string]remembered{}, answerOf: map[string]string{},
		finished: newFinishedDeletes(), invisible: map[string]time.Time{}, taken: map[int64]string{}, takenBy: map[string]int64{},
		alloc: alloc, roots: newRootMemory()}
	if f.alloc == nil { // the caller serializes, as for the rest of FS
		f.alloc = gid.NewUnlocked(nil, gid.Options{}, func(string) *gid.View { return &f.gids })
	}
	return f
}

// GIDView is the allocator's view of this file system, for
// gid.Options.Home.
func (f *FS) GIDView() *gid.View { return &f.gids }

// Listings is how many listings the allocator's view has had: the since
// of Reserve, taken when a create begins.
func (f *FS) Listings() uint64 { return f.alloc.Listings(f.id) }

// Reserve reserves an id of [lo, hi] for key (gid.Allocator.TryReserve):
// gid.ErrStale when the machine must list the file system first
// (Refresh), gid.ErrExhausted when the range is full.
func (f *FS) Reserve(lo, hi int64, key string, since uint64, now time.Time, fits func(int64) bool) (*gid.Reservation, error) {
	return f.alloc.TryReserveFit(f.id, lo, hi, key, since, now, fits)
}

// Release ends a reservation Reserve made. Idempotent.
func (f *FS) Release(r *gid.Reservation) { r.ReleaseHeld() }

// Seen tells the allocator's view that ap exists, from now: this process
// made or found it.
func (f *FS) Seen(ap efs.AccessPoint, now time.Time) { f.alloc.RecordAt(ap, now) }

// Answered is the access point this process answered for the volume name,
// and when; nil if none.
func (f *FS) Answered(name string) (*efs.AccessPoint, time.Time) {
	a := f.answers[name]
	return a.ap, a.at
}

// RememberAnswer notes ap as the answer for the volume name at now; made:
// this call made or adopted it, so a delete of it this process finished
// before is forgotten too.
func (f *FS) RememberAnswer(name string, ap *efs.AccessPoint, made bool, now time.Time) {
	if old, ok := f.answers[name]; ok {
		delete(f.answerOf, old.ap.ID)
	}
	f.answers[name], f.answerOf[ap.ID] = remembered{ap, now}, name
	if made {
		f.finished.drop(ap.ID)
	}
}

// DropAnswer stops answering repeats of apID's volume from memory: when
// its delete begins (under the volume's locks, so that no create answered
// from memory hands out an access point being deleted), and when it is
// found or made gone.
func (f *FS) DropAnswer(apID string) {
	if name, ok := f.answerOf[apID]; ok {
		delete(f.answers, name)
		delete(f.answerOf, apID)
	}
}

// DeleteFinished reports whether the delete of access point apID finished
// here within finishedFresh before now.
func (f *FS) DeleteFinished(apID string, now time.Time) bool { return f.finished.done(apID, now) }

// FinishDelete remembers that apID's delete finished at now; names are the
// name locks the delete holds while it calls this.
func (f *FS) FinishDelete(apID string, names []string, now time.Time) {
	f.finished.add(apID, names, now)
}

// ForgetFinished forgets every finished delete remembered under one of
// names: a create of the volume is under way (under its name locks), and a
// delete of whatever it answers must go the whole way.
func (f *FS) ForgetFinished(names []string) { f.finished.dropNames(names) }

// maxInvisible bounds the tokens Burned remembers; a cleared sighting only
// delays the move off a burned token.
const maxInvisible = 1024

// BurnAfter is how long EFS may name an access point it does not describe
// as holding a GID token before the token counts as burned: kept by an
// access point deleted long ago, not held by one too fresh to describe
// (EFS describes a new one within seconds). Until then the create is
// retried: the access point may be this volume's own, whose answer was
// lost.
const BurnAfter = 2 * time.Minute

// Burned reports whether EFS has named token, a GID token, for an access
// point it does not describe for BurnAfter, counting from this process's
// first sighting (now, if this is it).
func (f *FS) Burned(token string, now time.Time) bool {
	first, ok := f.invisible[token]
	if !ok {
		if len(f.invisible) >= maxInvisible {
			clear(f.invisible)
		}
		f.invisible[token] = now
		return false
	}
	return now.Sub(first) >= BurnAfter
}

// Upstream is the access point the allocator's last listing showed under
// token, a volume name's token: upstream's driver made it for the volume
// (its ID and ids); nil if none.
func (f *FS) Upstream(token string) *efs.AccessPoint {
	l, ok := f.nameTokens[token]
	if !ok {
		return nil
	}
	return &efs.AccessPoint{ID: l.ID, FileSystemID: f.id, ClientToken: token, PosixUser: &efs.PosixUser{UID: l.UID, GID: l.GID}}
}

// RootNotOwned counts a delete, with root removal on, that kept the root
// directory of an access point no CSI driver made: whose data it holds is
// unknown.
func (f *FS) RootNotOwned() { f.rootsNotOwned++ }

// RootDirsNotOwned is how many deletes RootNotOwned counted.
func (f *FS) RootDirsNotOwned() int64 { return f.rootsNotOwned }

// Memory is what the machines read and change of their file system's FS,
// between effects, with the file system's lock held by their caller. *FS is
// the process's; the exhaustive tests give one whose every read is a
// branch.
type Memory interface {
	Answered(name string) (*efs.AccessPoint, time.Time)
	RememberAnswer(name string, ap *efs.AccessPoint, made bool, now time.Time)
	DropAnswer(apID string)
	DeleteFinished(apID string, now time.Time) bool
	FinishDelete(apID string, names []string, now time.Time)
	ForgetFinished(names []string)
	Burned(token string, now time.Time) bool
	Upstream(token string) *efs.AccessPoint
	Candidate(name, root string, lo, hi int64, from int, fits func(int64) bool) (int64, int, error)
	SawToken(ap *efs.AccessPoint, cluster string)
	AddOutside(ids ...int64)
	Listings() uint64
	Reserve(lo, hi int64, key string, since uint64, now time.Time, fits func(int64) bool) (*gid.Reservation, error)
	Release(r *gid.Reservation)
	Seen(ap efs.AccessPoint, now time.Time)
	RootNotOwned()
	Creating(token, name, root string)
	CreateEnded(token string, ap *efs.AccessPoint, now time.Time)
	Gone(apID string, now time.Time)
}

// FinishedDeletes is how many finished deletes FS remembers.
func (f *FS) FinishedDeletes() int { return f.finished.len() }
