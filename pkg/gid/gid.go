// Package gid allocates POSIX GIDs for new access points: unique among the
// live access points of a file system, even under many concurrent creates,
// without listing every access point for every create.
//
// The upstream driver listed all access points before taking its mutex and
// reserved nothing, so concurrent creates picked the same GID, and it paid a
// full listing (1 call per 1,000 access points, at up to 10,000) per create.
// Here each file system has a view: the GIDs of its access points as last
// listed, plus what this process created or adopted since, plus the GIDs that
// in-flight creates have reserved. The view is listed once and refreshed only
// when it is older than Options.MaxAge or the range looks full; concurrent
// callers share one listing.
package gid

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// ErrExhausted: no GID of the range is free on the file system.
var ErrExhausted = errors.New("no free GID")

// Source lists a file system's access points, page by page. pkg/efs's client
// satisfies it.
type Source interface {
	ListAccessPoints(ctx context.Context, fsID string, fn func([]efs.AccessPoint) error) error
}

// DefaultMaxAge is how long a listing is trusted when Options.MaxAge is 0.
const DefaultMaxAge = 5 * time.Minute

// Options tune an Allocator.
type Options struct {
	// MaxAge: a file system's view is listed again when older than this.
	// Access points created by other processes (another cluster on the same
	// file system) become visible at the latest then. Default DefaultMaxAge.
	MaxAge time.Duration
	// Now is the clock; default time.Now. Tests move it.
	Now func() time.Time
	// Logger receives a debug line per listing; default discards.
	Logger *slog.Logger
	// ListingLag is how long EFS may take to list a new access point: one
	// this process recorded that a complete listing begun longer than this
	// after the Record does not show is taken as deleted by another
	// process. 0: any listing begun after the Record. The view is a hint
	// to pick from: an id it frees too early is one EFS's client token, or
	// the caller's record, then refuses.
	ListingLag time.Duration
	// Seed is mixed into every hint: processes with different seeds start
	// their searches at different GIDs for the same volume, so two writers
	// that cannot see each other's reservations rarely collide.
	Seed string
	// Home, if set, is where each file system's View lives and the lock
	// that guards it: the caller's own state of that file system, so that
	// one file system's state is under one lock (pkg/controller's
	// fsState). It returns the same pair for every call with one fsID, and
	// nothing that holds the lock may call the Allocator. Default: the
	// Allocator keeps each View with a mutex of its own.
	Home func(fsID string) (*View, sync.Locker)
}

// Allocator hands out GIDs per file system. It is safe for concurrent use.
type Allocator struct {
	src    Source
	maxAge time.Duration
	lag    time.Duration
	now    func() time.Time
	log    *slog.Logger
	seed   string

	home func(fsID string) (*View, sync.Locker)

	// floor (unix nanoseconds): a view listed before it is stale
	// (DistrustBefore).
	floor atomic.Int64

	mu    sync.Mutex       // guards views: which View and lock each file system has
	views map[string]homed // by file system ID

	// waiting, if set, is called (without the lock) when a caller starts
	// waiting for another caller's listing. Tests use it to order events.
	waiting func()
}

// homed is a file system's View and the lock that guards it.
type homed struct {
	v  *View
	mu sync.Locker
}

// View is what the allocator knows about one file system, guarded by the
// lock Options.Home gives with it. Its zero value is ready; it must not be
// copied once used.
//
// It is kept per access point ID, not per GID count, because a listing is a
// snapshot of some moment while it ran (or of a lagging replica): it may or
// may not show what this process created or deleted meanwhile, and counting
// cannot tell which. By ID the merge is exact:
//   - local holds access points this process created or found (Record)
//     until a listing shows them; a listing that does not show one yet
//     does not drop it, unless it began more than Options.ListingLag
//     after the Record: then another process deleted it (its ids would
//     otherwise stay used here for good, and a range this process saw
//     full would stay full after every delete of another replica).
//   - deleted holds access points this process deleted (Forget) until a
//     listing no longer shows them; a stale listing that still shows one
//     never brings it back.
//
// Every access point's uid and gid both count as used: classes that fix
// the gid allocate the uid from the range, and a value that is any live
// access point's uid or gid is never handed out.
type View struct {
	listed   bool                // listedAPs holds a complete listing
	listedAt time.Time           // when that listing started
	gen      uint64              // listings completed
	apsOf    map[string][2]int64 // live access point ID -> its uid, gid (listing ∪ local − deleted)
	local    map[string]recorded // recorded by this process, not yet seen in a listing
	deleted  map[string]bool     // forgotten by this process, still seen in the last listing
	used     map[int64]int       // id -> access points in apsOf carrying it (as uid or gid)
	reserved map[int64]int       // id -> reservations holding it
	// taken has a bit per id that is used or reserved, in 64-bit words
	// keyed by id/64: finding a free id skips 64 at a time, and a sparse
	// map stays small however scattered the ids are.
	taken  map[int64]uint64
	flight *listing // the listing in progress, nil when none
}

// recorded is an access point Record told of: its ids, and when.
type recorded struct {
	ids [2]int64
	at  time.Time
}

// listing is one ListAccessPoints in progress; done is closed when it ends.
type listing struct {
	done chan struct{}
	err  error
}

// New returns an Allocator reading access points from src.
func New(src Source, opts Options) *Allocator {
	a := &Allocator{src: src, maxAge: opts.MaxAge, lag: max(0, opts.ListingLag), now: opts.Now, log: opts.Logger, seed: opts.Seed,
		home: opts.Home, views: map[string]homed{}}
	if a.maxAge <= 0 {
		a.maxAge = DefaultMaxAge
	}
	if a.now == nil {
		a.now = time.Now
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	return a
}

// NewUnlocked is an Allocator whose views view gives, guarded by no lock:
// for a caller that serializes every call itself (pkg/controller/core's
// FS of its own, in tests and models).
func NewUnlocked(src Source, opts Options, view func(fsID string) *View) *Allocator {
	opts.Home = func(fsID string) (*View, sync.Locker) { return view(fsID), noLock{} }
	return New(src, opts)
}

// noLock is a lock its holder never contends for.
type noLock struct{}

func (noLock) Lock()   {}
func (noLock) Unlock() {}

// DistrustBefore makes every view listed before t stale: the next Reserve
// of its file system lists it again. A caller that knows access points
// may have been made outside this process's sight until t (the handover
// from upstream's controller) calls it once t has passed.
func (a *Allocator) DistrustBefore(t time.Time) {
	for {
		old := a.floor.Load()
		if t.UnixNano() <= old || a.floor.CompareAndSwap(old, t.UnixNano()) {
			return
		}
	}
}

// view returns fsID's view, ready, and its lock, locked: the caller
// unlocks it.
func (a *Allocator) view(fsID string) (*View, sync.Locker) {
	h := a.homeOf(fsID)
	h.mu.Lock()
	h.v.ready()
	return h.v, h.mu
}

// homeOf is fsID's view and its lock, not locked.
func (a *Allocator) homeOf(fsID string) homed {
	a.mu.Lock()
	defer a.mu.Unlock()
	h, ok := a.views[fsID]
	if !ok {
		if a.home != nil {
			h.v, h.mu = a.home(fsID)
		} else {
			h = homed{&View{}, &sync.Mutex{}}
		}
		a.views[fsID] = h
	}
	return h
}

// ready makes v's maps. Caller holds its lock.
func (v *View) ready() {
	if v.apsOf != nil {
		return
	}
	v.apsOf, v.local, v.deleted = map[string][2]int64{}, map[string]recorded{}, map[string]bool{}
	v.used, v.reserved, v.taken = map[int64]int{}, map[int64]int{}, map[int64]uint64{}
}

// Reservation is a GID held for one create until Release. A create whose
// outcome is unknown keeps its reservation (the access point may exist with
// this GID) and hands it to the retry.
type Reservation struct {
	v        *View
	mu       sync.Locker // v's
	gid      int64
	released bool // guarded by mu
}

// GID is the reserved GID.
func (r *Reservation) GID() int64 { return r.gid }

// Reserve picks a GID in [lo, hi] that no access point of fsID uses as uid
// or gid (as far as the view knows) and no other reservation holds, and
// holds it until Release. hint (the volume name, mixed with Options.Seed)
// chooses where the search starts, so two processes creating different
// volumes rarely pick the same GID.
//
// The file system is listed only when its view is missing or older than
// MaxAge, or once when the range looks full (the view may hold deleted
// access points); concurrent callers share that listing and the lock is not
// held during it. ctx bounds the listing. A listing error is returned as is
// (wrapped), so errors.Is works with pkg/efs's sentinels. When no GID is
// free the error wraps ErrExhausted and names the range and file system.
func (a *Allocator) Reserve(ctx context.Context, fsID string, lo, hi int64, hint string) (*Reservation, error) {
	return a.ReserveFrom(ctx, a.src, fsID, lo, hi, hint)
}

// ReserveFrom is Reserve listing through src: one Allocator serves every
// client (the controller's own credentials, a role's, S3 Files), so that
// one file system has one view whichever credentials reach it.
func (a *Allocator) ReserveFrom(ctx context.Context, src Source, fsID string, lo, hi int64, hint string) (*Reservation, error) {
	mu := a.lockOf(fsID)
	mu.Lock()
	since := a.viewHeld(fsID).gen
	for {
		r, err := a.TryReserve(fsID, lo, hi, hint, since, a.now())
		mu.Unlock()
		if !errors.Is(err, ErrStale) {
			return r, err
		}
		if err := a.Refresh(ctx, src, fsID, since); err != nil {
			return nil, err
		}
		mu.Lock()
	}
}

// ErrStale: the view must be listed (Refresh) before TryReserve trusts it.
var ErrStale = errors.New("gid: the view needs a listing")

// The calls below are for a caller that already holds fsID's view lock
// (the one Options.Home gives) and does the listing itself, outside that
// lock: pkg/controller/core, whose machines run under their file system's
// lock and ask their caller for I/O. They never block. ReserveFrom is
// TryReserve and Refresh in one loop.

// Listings is how many listings of fsID have completed: the since a
// caller passes TryReserve and Refresh, taken when its create began.
func (a *Allocator) Listings(fsID string) uint64 { return a.viewHeld(fsID).gen }

// TryReserve is ReserveFrom's pick, at now, for a caller that began when
// Listings was since: ErrStale when the view must be listed first (none
// yet; older than MaxAge or DistrustBefore's time, and none completed since;
// or the range looks full and none completed since), else a reservation or
// ErrExhausted.
func (a *Allocator) TryReserve(fsID string, lo, hi int64, hint string, since uint64, now time.Time) (*Reservation, error) {
	return a.TryReserveFit(fsID, lo, hi, hint, since, now, nil)
}

// TryReserveFit is TryReserve preferring an id that fits (nil: any): the
// first free one of the next MaxFitProbes from the hint's place that
// fits, else the first free one.
func (a *Allocator) TryReserveFit(fsID string, lo, hi int64, hint string, since uint64, now time.Time, fits func(int64) bool) (*Reservation, error) {
	if lo < 0 || hi < lo || hi > maxGID {
		return nil, fmt.Errorf("gid: invalid range [%d, %d]", lo, hi)
	}
	h := a.homeOf(fsID)
	h.v.ready()
	v, mu := h.v, h.mu
	if !v.listed || (v.gen == since && (now.Sub(v.listedAt) > a.maxAge || v.listedAt.UnixNano() < a.floor.Load())) {
		return nil, ErrStale
	}
	if g, ok := v.pickFit(lo, hi, probeStart(lo, hi, a.seed+hint), fits); ok {
		v.reserved[g]++
		v.sync(g)
		return &Reservation{v: v, mu: mu, gid: g}, nil
	}
	if v.gen == since {
		return nil, ErrStale // the view may hold deleted access points: list once more
	}
	return nil, fmt.Errorf("%w in [%d, %d] on %s (%d in use, %d reserved)", ErrExhausted, lo, hi, fsID, v.countUsed(lo, hi), len(v.reserved))
}

// Refresh lists fsID through src (or waits for the listing running),
// unless a listing completed since the caller saw since. The caller does
// not hold the view's lock.
func (a *Allocator) Refresh(ctx context.Context, src Source, fsID string, since uint64) error {
	if src == nil {
		src = a.src
	}
	v, mu := a.view(fsID)
	defer mu.Unlock()
	if v.gen != since {
		return nil
	}
	return a.refresh(ctx, src, fsID, v, mu)
}

// RecordAt is Record, at now, for a caller holding ap's view lock.
func (a *Allocator) RecordAt(ap efs.AccessPoint, now time.Time) {
	a.viewHeld(ap.FileSystemID).record(ap, now)
}

// ReleaseHeld is Release for a caller holding the view's lock.
func (r *Reservation) ReleaseHeld() { r.release() }

// viewHeld is fsID's view, ready, for a caller holding its lock.
func (a *Allocator) viewHeld(fsID string) *View {
	h := a.homeOf(fsID)
	h.v.ready()
	return h.v
}

// lockOf is fsID's view lock.
func (a *Allocator) lockOf(fsID string) sync.Locker { return a.homeOf(fsID).mu }

// ReserveID holds id on fsID as Reserve would have, whether or not the
// view counts it used: the caller found it held elsewhere (another
// volume's entry in its record) and keeps every pick of this process off
// it until Release, whatever a listing says meanwhile.
func (a *Allocator) ReserveID(fsID string, id int64) *Reservation {
	v, mu := a.view(fsID)
	defer mu.Unlock()
	v.reserved[id]++
	v.sync(id)
	return &Reservation{v: v, mu: mu, gid: id}
}

// refresh lists fsID, or waits for the listing already running. Called and
// returns with mu (v's lock) held; releases it while the listing runs.
func (a *Allocator) refresh(ctx context.Context, src Source, fsID string, v *View, mu sync.Locker) error {
	for {
		if f := v.flight; f != nil {
			mu.Unlock()
			if a.waiting != nil {
				a.waiting()
			}
			select {
			case <-f.done:
			case <-ctx.Done():
			}
			mu.Lock()
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("gid: waiting for the access point listing of %s: %w", fsID, err)
			}
			if f.err != nil && (errors.Is(f.err, context.Canceled) || errors.Is(f.err, context.DeadlineExceeded)) {
				// The caller that ran it gave up; our context is still good.
				continue
			}
			return f.err
		}
		return a.list(ctx, src, fsID, v, mu)
	}
}

// list runs one listing. Called and returns with mu (v's lock) held.
func (a *Allocator) list(ctx context.Context, src Source, fsID string, v *View, mu sync.Locker) error {
	f := &listing{done: make(chan struct{})}
	v.flight = f
	began := a.now()
	mu.Unlock()

	got := map[string][2]int64{}
	err := src.ListAccessPoints(ctx, fsID, func(page []efs.AccessPoint) error {
		for _, ap := range page {
			got[ap.ID] = idsOf(ap)
		}
		return nil
	})

	mu.Lock()
	if err != nil {
		f.err = fmt.Errorf("gid: listing access points of %s: %w", fsID, err)
	} else {
		v.merge(got, began.Add(-a.lag))
		v.listed, v.listedAt = true, began
		v.gen++
	}
	v.flight = nil
	close(f.done)
	a.log.Debug("listed access points", slog.String("fileSystem", fsID), slog.Int("accessPoints", len(got)),
		slog.Int("ids", len(v.used)), slog.Duration("took", a.now().Sub(began)), slog.Any("error", err))
	return f.err
}

// merge replaces the view with a listing, keeping what this process knows
// better (see View): what it recorded at or after settled (the listing's
// start less the lag) and the listing does not show yet. Caller holds v's
// lock.
func (v *View) merge(got map[string][2]int64, settled time.Time) {
	for id, l := range v.local {
		if _, ok := got[id]; ok || settled.After(l.at) {
			delete(v.local, id) // the listing carries it now, or it is gone
		}
	}
	for id := range v.deleted {
		if _, ok := got[id]; !ok {
			delete(v.deleted, id) // the listing has caught up with the delete
		}
	}
	aps := make(map[string][2]int64, len(got)+len(v.local))
	for id, ids := range got {
		if !v.deleted[id] {
			aps[id] = ids
		}
	}
	for id, l := range v.local {
		aps[id] = l.ids
	}
	v.apsOf = aps
	v.used = make(map[int64]int, len(v.used))
	for _, ids := range aps {
		for _, x := range distinct(ids) {
			v.used[x]++
		}
	}
	v.taken = make(map[int64]uint64, len(v.taken))
	for g := range v.used {
		v.sync(g)
	}
	for g := range v.reserved {
		v.sync(g)
	}
}

// idsOf is the uid and gid of ap; -1 for an access point without a POSIX user.
func idsOf(ap efs.AccessPoint) [2]int64 {
	if ap.PosixUser == nil {
		return [2]int64{-1, -1}
	}
	return [2]int64{ap.PosixUser.UID, ap.PosixUser.GID}
}

// distinct is the ids of an access point, each once, without -1.
func distinct(ids [2]int64) []int64 {
	switch {
	case ids[0] < 0 && ids[1] < 0:
		return nil
	case ids[0] < 0 || ids[0] == ids[1]:
		return ids[1:]
	case ids[1] < 0:
		return ids[:1]
	}
	return ids[:]
}

// addAP and removeAP keep used and taken in step with apsOf. Caller holds
// v's lock.
func (v *View) addAP(id string, ids [2]int64) {
	if _, ok := v.apsOf[id]; ok {
		return
	}
	v.apsOf[id] = ids
	for _, x := range distinct(ids) {
		v.used[x]++
		v.sync(x)
	}
}

func (v *View) removeAP(id string) {
	ids, ok := v.apsOf[id]
	if !ok {
		return
	}
	delete(v.apsOf, id)
	for _, x := range distinct(ids) {
		if v.used[x]--; v.used[x] <= 0 {
			delete(v.used, x)
		}
		v.sync(x)
	}
}

// maxGID is the largest POSIX ID EFS accepts.
const maxGID = 1<<32 - 1

// probeStart hashes hint to a starting point in [lo, hi].
func probeStart(lo, hi int64, hint string) int64 {
	h := fnv.New64a()
	h.Write([]byte(hint))
	return lo + int64(h.Sum64()%uint64(hi-lo+1))
}

// MaxFitProbes bounds the free ids TryReserveFit tries for one that fits.
const MaxFitProbes = 512

// pickFit is pick's first free GID that fits of the next MaxFitProbes
// free ones, if any, else pick's.
func (v *View) pickFit(lo, hi, start int64, fits func(int64) bool) (int64, bool) {
	first, ok := v.pick(lo, hi, start)
	if !ok || fits == nil || fits(first) {
		return first, ok
	}
	g := first
	for range MaxFitProbes - 1 {
		next, _ := v.pick(lo, hi, g+1) // first is free: found, at worst it
		if next == first {
			break // a full turn
		}
		if fits(next) {
			return next, true
		}
		g = next
	}
	return first, true
}

// pick returns the first free GID at or after start, wrapping around.
func (v *View) pick(lo, hi, start int64) (int64, bool) {
	if g, ok := v.firstFree(start, hi); ok {
		return g, true
	}
	if start > lo {
		return v.firstFree(lo, start-1)
	}
	return 0, false
}

// firstFree returns the lowest GID in [from, to] whose taken bit is clear.
func (v *View) firstFree(from, to int64) (int64, bool) {
	for g := from; g <= to; {
		word := g >> 6
		free := ^v.taken[word] &^ (1<<(g&63) - 1) // clear bits of GIDs below g
		if free != 0 {
			if c := word<<6 + int64(bits.TrailingZeros64(free)); c <= to {
				return c, true
			}
			return 0, false
		}
		g = (word + 1) << 6
	}
	return 0, false
}

// sync sets g's taken bit from its used count and reservation.
func (v *View) sync(g int64) {
	word, bit := g>>6, uint64(1)<<(g&63)
	if v.used[g] > 0 || v.reserved[g] > 0 {
		v.taken[word] |= bit
		return
	}
	if w := v.taken[word] &^ bit; w != 0 {
		v.taken[word] = w
	} else {
		delete(v.taken, word)
	}
}

func (v *View) countUsed(lo, hi int64) int {
	n := 0
	for g, k := range v.used {
		if k > 0 && g >= lo && g <= hi {
			n++
		}
	}
	return n
}

// Record tells the allocator that ap exists: this process created it, or
// found it by its client token. Its uid and gid stay used until a listing
// shows it (and then for as long as listings do), whatever listings that
// lag behind say: those begun within ListingLag of the Record. A later one
// that does not show it frees them (another process deleted it). Record before releasing the reservation the access point
// was created with, so that its GID is never free in between.
func (a *Allocator) Record(ap efs.AccessPoint) {
	v, mu := a.view(ap.FileSystemID)
	defer mu.Unlock()
	v.record(ap, a.now())
}

func (v *View) record(ap efs.AccessPoint, now time.Time) {
	delete(v.deleted, ap.ID)
	ids := idsOf(ap)
	v.local[ap.ID] = recorded{ids: ids, at: now}
	v.addAP(ap.ID, ids)
}

// Release gives the GID back: the create it was reserved for is settled,
// either with an access point that Record has been told about, or with the
// proof that no access point carries it. Idempotent.
func (r *Reservation) Release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.release()
}

func (r *Reservation) release() {
	if r.released {
		return
	}
	r.released = true
	v := r.v
	if v.reserved[r.gid]--; v.reserved[r.gid] <= 0 {
		delete(v.reserved, r.gid)
	}
	v.sync(r.gid)
}

// Forget records that this process deleted access point apID of fsID. Its
// ids become free once no other live access point carries them; a listing
// that still shows it does not bring them back.
func (a *Allocator) Forget(fsID, apID string) {
	v, mu := a.view(fsID)
	defer mu.Unlock()
	delete(v.local, apID)
	v.deleted[apID] = true
	v.removeAP(apID)
}

// Forget is Allocator.Forget of v's file system for a caller that holds
// v's lock (Options.Home's): one that holds it may not call the
// Allocator, and the file system's memory hears of a delete under it.
func (v *View) Forget(apID string) {
	v.ready()
	delete(v.local, apID)
	v.deleted[apID] = true
	v.removeAP(apID)
}

// Count is how many access points fsID has in the view (listed within
// MaxAge, as ReserveFrom lists, plus this process's creates, minus its
// deletes; only EFS access point IDs, "fsap-", count: not the stand-ins
// callers Record for other things), plus the creates in flight
// (reservations), for choosing among file systems.
func (a *Allocator) Count(ctx context.Context, src Source, fsID string) (int, error) {
	if src == nil {
		src = a.src
	}
	v, mu := a.view(fsID)
	defer mu.Unlock()
	if !v.listed || a.now().Sub(v.listedAt) > a.maxAge {
		if err := a.refresh(ctx, src, fsID, v, mu); err != nil {
			return 0, err
		}
	}
	n := len(v.reserved)
	for id := range v.apsOf {
		if strings.HasPrefix(id, "fsap-") {
			n++
		}
	}
	return n, nil
}

// Stats is one file system's view, for metrics.
type Stats struct {
	Used     int // distinct GIDs in use by access points
	Reserved int // GIDs held by creates in flight
}

// Stats reports every file system the allocator has seen.
func (a *Allocator) Stats() map[string]Stats {
	a.mu.Lock()
	ids := make([]string, 0, len(a.views))
	for fsID := range a.views {
		ids = append(ids, fsID)
	}
	a.mu.Unlock()
	out := make(map[string]Stats, len(ids))
	for _, fsID := range ids {
		v, mu := a.view(fsID)
		out[fsID] = Stats{Used: len(v.used), Reserved: len(v.reserved)}
		mu.Unlock()
	}
	return out
}
