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
	"maps"
	"math/bits"
	"sync"
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
}

// Allocator hands out GIDs per file system. It is safe for concurrent use.
type Allocator struct {
	src    Source
	maxAge time.Duration
	now    func() time.Time
	log    *slog.Logger

	mu  sync.Mutex
	fss map[string]*fsView

	// waiting, if set, is called (without the lock) when a caller starts
	// waiting for another caller's listing. Tests use it to order events.
	waiting func()
}

// fsView is what the allocator knows about one file system. Guarded by
// Allocator.mu.
type fsView struct {
	listed   bool           // used holds a listing (plus changes since)
	listedAt time.Time      // when the listing in used started
	gen      uint64         // listings completed
	used     map[int64]int  // GID -> access points using it
	reserved map[int64]bool // GIDs held by in-flight creates
	// taken has a bit per GID that is used or reserved, in 64-bit words
	// keyed by gid/64: finding a free GID skips 64 at a time, and a sparse
	// map stays small however scattered the GIDs are.
	taken  map[int64]uint64
	flight *listing // the listing in progress, nil when none
	// Changes made while flight runs, replayed onto its result (the listing
	// may have been read before or after each of them).
	added     map[int64]int
	forgotten map[int64]int
}

// listing is one ListAccessPoints in progress; done is closed when it ends.
type listing struct {
	done chan struct{}
	err  error
}

// New returns an Allocator reading access points from src.
func New(src Source, opts Options) *Allocator {
	a := &Allocator{src: src, maxAge: opts.MaxAge, now: opts.Now, log: opts.Logger, fss: map[string]*fsView{}}
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

// view returns fsID's view, creating an empty one. Caller holds a.mu.
func (a *Allocator) view(fsID string) *fsView {
	v := a.fss[fsID]
	if v == nil {
		v = &fsView{used: map[int64]int{}, reserved: map[int64]bool{}, taken: map[int64]uint64{}}
		a.fss[fsID] = v
	}
	return v
}

// Reservation is a GID held for one create until Commit or Release.
type Reservation struct {
	a     *Allocator
	fsID  string
	gid   int64
	state int // reserved, committed or released; guarded by a.mu
}

const (
	reserved = iota
	committed
	released
)

// GID is the reserved GID.
func (r *Reservation) GID() int64 { return r.gid }

// Reserve picks a GID in [lo, hi] that no access point of fsID uses (as far
// as the view knows) and no other reservation holds, and holds it until
// Commit or Release. hint (the volume name) chooses where the search starts,
// so two processes creating different volumes rarely pick the same GID and a
// retry of one volume tends to get the same one.
//
// The file system is listed only when its view is missing or older than
// MaxAge, or once when the range looks full (the view may hold deleted
// access points); concurrent callers share that listing and the lock is not
// held during it. ctx bounds the listing. A listing error is returned as is
// (wrapped), so errors.Is works with pkg/efs's sentinels. When no GID is
// free the error wraps ErrExhausted and names the range and file system.
func (a *Allocator) Reserve(ctx context.Context, fsID string, lo, hi int64, hint string) (*Reservation, error) {
	if lo < 0 || hi < lo || hi > maxGID {
		return nil, fmt.Errorf("gid: invalid range [%d, %d]", lo, hi)
	}
	start := probeStart(lo, hi, hint)
	a.mu.Lock()
	defer a.mu.Unlock()
	v := a.view(fsID)
	startGen := v.gen
	for {
		// A listing completed during this call is fresh whatever the clock
		// says, so a listing slower than MaxAge cannot loop forever.
		if !v.listed || (v.gen == startGen && a.now().Sub(v.listedAt) > a.maxAge) {
			if err := a.refresh(ctx, fsID, v); err != nil {
				return nil, err
			}
			continue
		}
		if g, ok := v.pick(lo, hi, start); ok {
			v.reserved[g] = true
			v.sync(g)
			return &Reservation{a: a, fsID: fsID, gid: g}, nil
		}
		if v.gen != startGen {
			// Listed during this call and still full: really full.
			return nil, fmt.Errorf("%w in [%d, %d] on %s (%d in use, %d reserved)", ErrExhausted, lo, hi, fsID, v.countUsed(lo, hi), len(v.reserved))
		}
		if err := a.refresh(ctx, fsID, v); err != nil {
			return nil, err
		}
	}
}

// refresh lists fsID, or waits for the listing already running. Called and
// returns with a.mu held; releases it while the listing runs.
func (a *Allocator) refresh(ctx context.Context, fsID string, v *fsView) error {
	for {
		if f := v.flight; f != nil {
			a.mu.Unlock()
			if a.waiting != nil {
				a.waiting()
			}
			select {
			case <-f.done:
			case <-ctx.Done():
			}
			a.mu.Lock()
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("gid: waiting for the access point listing of %s: %w", fsID, err)
			}
			if f.err != nil && (errors.Is(f.err, context.Canceled) || errors.Is(f.err, context.DeadlineExceeded)) {
				// The caller that ran it gave up; our context is still good.
				continue
			}
			return f.err
		}
		return a.list(ctx, fsID, v)
	}
}

// list runs one listing. Called and returns with a.mu held.
func (a *Allocator) list(ctx context.Context, fsID string, v *fsView) error {
	f := &listing{done: make(chan struct{})}
	v.flight, v.added, v.forgotten = f, map[int64]int{}, map[int64]int{}
	began := a.now()
	a.mu.Unlock()

	got := map[int64]int{}
	n := 0
	err := a.src.ListAccessPoints(ctx, fsID, func(page []efs.AccessPoint) error {
		for _, ap := range page {
			n++
			if ap.PosixUser != nil {
				got[ap.PosixUser.GID]++
			}
		}
		return nil
	})

	a.mu.Lock()
	if err != nil {
		f.err = fmt.Errorf("gid: listing access points of %s: %w", fsID, err)
	} else {
		// The listing read each page at some moment while it ran, so it may
		// or may not show the creates and deletes this process finished
		// meanwhile. Creates are added (if it showed one too, the GID is
		// counted twice, which only delays its release until the next
		// listing). A delete is subtracted only as far as the listing shows
		// more uses of the GID than the view now holds, i.e. when it can
		// have seen the deleted access point: subtracting otherwise would
		// free a GID that another access point sharing it still uses.
		for g, k := range v.added {
			got[g] += k
		}
		for g, k := range v.forgotten {
			if extra := got[g] - v.used[g]; extra > 0 {
				got[g] -= min(k, extra)
			}
		}
		maps.DeleteFunc(got, func(_ int64, k int) bool { return k <= 0 })
		v.used, v.listed, v.listedAt = got, true, began
		v.taken = make(map[int64]uint64, len(v.taken))
		for g := range v.used {
			v.sync(g)
		}
		for g := range v.reserved {
			v.sync(g)
		}
		v.gen++
	}
	v.flight, v.added, v.forgotten = nil, nil, nil
	close(f.done)
	a.log.Debug("listed access points", slog.String("fileSystem", fsID), slog.Int("accessPoints", n),
		slog.Int("gids", len(got)), slog.Duration("took", a.now().Sub(began)), slog.Any("error", err))
	return f.err
}

// maxGID is the largest POSIX ID EFS accepts.
const maxGID = 1<<32 - 1

// probeStart hashes hint to a starting point in [lo, hi].
func probeStart(lo, hi int64, hint string) int64 {
	h := fnv.New64a()
	h.Write([]byte(hint))
	return lo + int64(h.Sum64()%uint64(hi-lo+1))
}

// pick returns the first free GID at or after start, wrapping around.
func (v *fsView) pick(lo, hi, start int64) (int64, bool) {
	if g, ok := v.firstFree(start, hi); ok {
		return g, true
	}
	if start > lo {
		return v.firstFree(lo, start-1)
	}
	return 0, false
}

// firstFree returns the lowest GID in [from, to] whose taken bit is clear.
func (v *fsView) firstFree(from, to int64) (int64, bool) {
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
func (v *fsView) sync(g int64) {
	word, bit := g>>6, uint64(1)<<(g&63)
	if v.used[g] > 0 || v.reserved[g] {
		v.taken[word] |= bit
		return
	}
	if w := v.taken[word] &^ bit; w != 0 {
		v.taken[word] = w
	} else {
		delete(v.taken, word)
	}
}

func (v *fsView) countUsed(lo, hi int64) int {
	n := 0
	for g, k := range v.used {
		if k > 0 && g >= lo && g <= hi {
			n++
		}
	}
	return n
}

// addUsed records one more access point using g. Caller holds a.mu.
func (v *fsView) addUsed(g int64) {
	if !v.listed && v.flight == nil {
		return // the first listing will see it
	}
	v.used[g]++
	v.sync(g)
	if v.flight != nil {
		v.added[g]++
	}
}

// Commit records that the access point was created with the GID: it is now
// used. Idempotent; a Commit after Release still marks the GID used (an
// access point that exists must never lose its GID).
func (r *Reservation) Commit() {
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	if r.state == committed {
		return
	}
	v := r.a.view(r.fsID)
	if r.state == reserved {
		delete(v.reserved, r.gid)
		v.sync(r.gid)
	}
	r.state = committed
	v.addUsed(r.gid)
}

// Release returns the GID: its create failed and no access point carries it.
// A no-op after Commit or a previous Release.
func (r *Reservation) Release() {
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	if r.state != reserved {
		return
	}
	r.state = released
	v := r.a.view(r.fsID)
	delete(v.reserved, r.gid)
	v.sync(r.gid)
}

// MarkUsed records an access point this process adopted (found rather than
// created) with the given GID.
func (a *Allocator) MarkUsed(fsID string, gid int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.view(fsID).addUsed(gid)
}

// Forget records that an access point with the given GID was deleted. The GID
// becomes free once no other access point in the view uses it.
func (a *Allocator) Forget(fsID string, gid int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v := a.fss[fsID]
	if v == nil {
		return
	}
	if v.used[gid] > 0 {
		v.used[gid]--
		if v.used[gid] == 0 {
			delete(v.used, gid)
		}
		v.sync(gid)
	}
	if v.flight != nil {
		v.forgotten[gid]++
	}
}

// Stats is one file system's view, for metrics.
type Stats struct {
	Used     int // distinct GIDs in use by access points
	Reserved int // GIDs held by creates in flight
}

// Stats reports every file system the allocator has seen.
func (a *Allocator) Stats() map[string]Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]Stats, len(a.fss))
	for fsID, v := range a.fss {
		out[fsID] = Stats{Used: len(v.used), Reserved: len(v.reserved)}
	}
	return out
}
