package gid

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/testutil"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

const fs1 = "fs-0123456789abcdef0"

// fakeSource serves access points from memory in pages of 1,000, as EFS
// does at most, and counts listings. beforeRead, if set, runs inside a
// listing before it reads the access points; tests block it there to order a
// listing against other events.
type fakeSource struct {
	mu         sync.Mutex
	aps        map[string]map[string]int64 // fs -> access point ID -> GID
	beforeRead func(ctx context.Context) error
	listings   atomic.Int64
	pages      atomic.Int64
	err        error
}

func newSource() *fakeSource { return &fakeSource{aps: map[string]map[string]int64{}} }

func (s *fakeSource) add(fsID, apID string, gid int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aps[fsID] == nil {
		s.aps[fsID] = map[string]int64{}
	}
	s.aps[fsID][apID] = gid
}

func (s *fakeSource) remove(fsID, apID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.aps[fsID], apID)
}

// fill adds n access points with GIDs from, from+1, ...
func (s *fakeSource) fill(fsID string, from int64, n int) {
	for i := range n {
		s.add(fsID, fmt.Sprintf("fsap-%017x", i), from+int64(i))
	}
}

func (s *fakeSource) ListAccessPoints(ctx context.Context, fsID string, fn func([]efs.AccessPoint) error) error {
	s.listings.Add(1)
	s.mu.Lock()
	hook, err := s.beforeRead, s.err
	s.mu.Unlock()
	if hook != nil {
		if err := hook(ctx); err != nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	var all []efs.AccessPoint
	for id, g := range s.aps[fsID] {
		all = append(all, efs.AccessPoint{ID: id, FileSystemID: fsID, PosixUser: &efs.PosixUser{UID: g, GID: g}})
	}
	s.mu.Unlock()
	for page := range slices.Chunk(all, 1000) {
		s.pages.Add(1)
		if err := fn(page); err != nil {
			return err
		}
	}
	return nil
}

func newAllocator(src Source) (*Allocator, *testutil.Clock) {
	c := testutil.NewClock(time.Unix(1_000_000, 0))
	return New(src, Options{MaxAge: time.Minute, Now: c.Now}), c
}

// apWith is an access point of fs1 with uid = gid = g.
func apWith(id string, g int64) efs.AccessPoint {
	return efs.AccessPoint{ID: id, FileSystemID: fs1, PosixUser: &efs.PosixUser{UID: g, GID: g}}
}

// commitAs is what the controller does when a create succeeds: record the
// access point, then release the reservation it was made with.
func commitAs(a *Allocator, r *Reservation, apID string) {
	a.Record(apWith(apID, r.GID()))
	r.Release()
}

func mustReserve(t testing.TB, a *Allocator, lo, hi int64, hint string) *Reservation {
	t.Helper()
	r, err := a.Reserve(context.Background(), fs1, lo, hi, hint)
	if err != nil {
		t.Fatalf("Reserve(%q): %v", hint, err)
	}
	return r
}

// used is the view's count of access points using g.
func (a *Allocator) usedCount(fsID string, g int64) int {
	v, mu := a.view(fsID)
	defer mu.Unlock()
	return v.used[g]
}

func TestConcurrentReservesGetDistinctFreeGIDs(t *testing.T) {
	src := newSource()
	src.fill(fs1, 50000, 100)
	a, _ := newAllocator(src)
	const n = 200
	gids := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := a.Reserve(context.Background(), fs1, 50000, 50400, fmt.Sprint("pvc-", i))
			if err != nil {
				t.Errorf("Reserve %d: %v", i, err)
				return
			}
			gids[i] = r.GID()
			if i%2 == 0 {
				commitAs(a, r, fmt.Sprint("fsap-c", i))
			}
		}()
	}
	wg.Wait()
	seen := map[int64]int{}
	for i, g := range gids {
		if g < 50100 || g > 50400 {
			t.Errorf("reserve %d got %d: used by an existing access point or out of range", i, g)
		}
		if j, dup := seen[g]; dup {
			t.Errorf("reserves %d and %d both got %d", j, i, g)
		}
		seen[g] = i
	}
	if got := src.listings.Load(); got != 1 {
		t.Errorf("%d listings for %d concurrent reserves, want 1 shared", got, n)
	}
	if st := a.Stats()[fs1]; st.Used != 200 || st.Reserved != 100 {
		t.Errorf("Stats = %+v, want 200 used (100 listed + 100 committed), 100 reserved", st)
	}
}

// TestListingIsAmortized is defect 9: 1,000 creates on a file system with
// 10,000 access points list it once, not 1,000 times (10 pages, not 10,000).
func TestListingIsAmortized(t *testing.T) {
	src := newSource()
	src.fill(fs1, 50000, 10000)
	a, _ := newAllocator(src)
	seen := map[int64]bool{}
	for i := range 1000 {
		r := mustReserve(t, a, 50000, 70000, fmt.Sprint("pvc-", i))
		if r.GID() < 60000 || seen[r.GID()] {
			t.Fatalf("reserve %d got %d: used or repeated", i, r.GID())
		}
		seen[r.GID()] = true
		commitAs(a, r, fmt.Sprint("fsap-c", i))
	}
	if l, p := src.listings.Load(), src.pages.Load(); l != 1 || p != 10 {
		t.Fatalf("1,000 reserves made %d listings (%d pages), want 1 (10)", l, p)
	}
}

func TestViewIsListedAgainAfterMaxAge(t *testing.T) {
	src := newSource()
	a, clk := newAllocator(src)
	mustReserve(t, a, 1, 100, "a").Release()
	clk.Advance(time.Minute) // exactly MaxAge: still fresh
	mustReserve(t, a, 1, 100, "b").Release()
	if got := src.listings.Load(); got != 1 {
		t.Fatalf("listings within MaxAge = %d, want 1", got)
	}
	// Another process created an access point with GID 42 meanwhile; once
	// the view is stale it is listed again and 42 is not handed out.
	src.add(fs1, "fsap-0ther", 42)
	clk.Advance(time.Second)
	if r, err := a.Reserve(context.Background(), fs1, 42, 42, "c"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Reserve([42, 42]) = %v, %v; want ErrExhausted", r, err)
	}
	if got := src.listings.Load(); got != 2 {
		t.Fatalf("listings = %d, want 2 (one refresh for staleness, none more: it was fresh)", got)
	}
}

func TestExhaustedNamesRangeAndFileSystem(t *testing.T) {
	src := newSource()
	src.fill(fs1, 100, 3)
	a, _ := newAllocator(src)
	_, err := a.Reserve(context.Background(), fs1, 100, 102, "x")
	if !errors.Is(err, ErrExhausted) {
		t.Fatalf("err = %v, want ErrExhausted", err)
	}
	for _, want := range []string{"[100, 102]", fs1} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if got := src.listings.Load(); got != 1 {
		t.Errorf("listings = %d, want 1: the first listing was made by this call", got)
	}
}

// TestFullRangeIsListedOnceMore: the view may hold access points deleted by
// someone else; a range that looks full is listed once more before giving up.
func TestFullRangeIsListedOnceMore(t *testing.T) {
	src := newSource()
	src.fill(fs1, 100, 3)
	a, _ := newAllocator(src)
	if _, err := a.Reserve(context.Background(), fs1, 100, 102, "x"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("err = %v, want ErrExhausted", err)
	}
	src.remove(fs1, fmt.Sprintf("fsap-%017x", 1)) // GID 101, deleted elsewhere
	r := mustReserve(t, a, 100, 102, "x")
	if r.GID() != 101 {
		t.Fatalf("got %d, want 101", r.GID())
	}
	if got := src.listings.Load(); got != 2 {
		t.Fatalf("listings = %d, want 2", got)
	}
}

func TestReleaseAndCommit(t *testing.T) {
	src := newSource()
	a, _ := newAllocator(src)
	r := mustReserve(t, a, 7, 7, "a")
	if _, err := a.Reserve(context.Background(), fs1, 7, 7, "b"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("a reserved GID was handed out twice: %v", err)
	}
	r.Release()
	r.Release() // idempotent
	r2 := mustReserve(t, a, 7, 7, "b")
	if r2.GID() != 7 {
		t.Fatalf("released GID not reused: got %d", r2.GID())
	}
	commitAs(a, r2, "fsap-b")
	src.add(fs1, "fsap-b", 7) // what the create did
	commitAs(a, r2, "fsap-b") // idempotent
	r2.Release()              // no-op after release
	if n := a.usedCount(fs1, 7); n != 1 {
		t.Fatalf("used count of 7 = %d, want 1", n)
	}
	if _, err := a.Reserve(context.Background(), fs1, 7, 7, "c"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("a committed GID was handed out: %v", err)
	}
	if st := a.Stats()[fs1]; st != (Stats{Used: 1, Reserved: 0}) {
		t.Fatalf("Stats = %+v", st)
	}
	// The access point is deleted: Forget frees the GID.
	src.remove(fs1, "fsap-b")
	a.Forget(fs1, "fsap-b")
	mustReserve(t, a, 7, 7, "d")
}

func TestMarkUsedAndSharedGIDs(t *testing.T) {
	src := newSource()
	src.add(fs1, "fsap-a", 5) // two access points share GID 5
	src.add(fs1, "fsap-b", 5)
	a, _ := newAllocator(src)
	mustReserve(t, a, 1, 10, "x").Release()
	a.Record(apWith("fsap-c", 6)) // adopted, not yet listed
	a.Forget(fs1, "fsap-a")       // one of the two is deleted
	if n5, n6 := a.usedCount(fs1, 5), a.usedCount(fs1, 6); n5 != 1 || n6 != 1 {
		t.Fatalf("used counts: 5 -> %d, 6 -> %d; want 1 and 1", n5, n6)
	}
	for i := range 8 { // whatever the hint, only 7 is free
		r := mustReserve(t, a, 5, 7, fmt.Sprint(i))
		if r.GID() != 7 {
			t.Fatalf("reserved %d although 5 is still used once and 6 was adopted", r.GID())
		}
		r.Release()
	}
	if got := src.listings.Load(); got != 1 {
		t.Fatalf("listings = %d, want 1", got)
	}
}

func TestSameHintStartsAtSameGID(t *testing.T) {
	a1, _ := newAllocator(newSource())
	a2, _ := newAllocator(newSource())
	g1 := mustReserve(t, a1, 50000, 60000, "pvc-1").GID()
	g2 := mustReserve(t, a2, 50000, 60000, "pvc-1").GID()
	g3 := mustReserve(t, a2, 50000, 60000, "pvc-2").GID()
	if g1 != g2 || g1 == g3 {
		t.Fatalf("hint pvc-1 got %d and %d; pvc-2 got %d", g1, g2, g3)
	}
}

func TestInvalidRange(t *testing.T) {
	a, _ := newAllocator(newSource())
	for _, r := range [][2]int64{{-1, 5}, {10, 9}, {1, 1 << 32}} {
		if _, err := a.Reserve(context.Background(), fs1, r[0], r[1], "x"); err == nil {
			t.Errorf("Reserve(%v) succeeded", r)
		}
	}
}

func TestListingErrorIsReturnedWrapped(t *testing.T) {
	src := newSource()
	src.err = fmt.Errorf("describe: %w", efs.ErrFileSystemNotFound)
	a, _ := newAllocator(src)
	_, err := a.Reserve(context.Background(), fs1, 1, 10, "x")
	if !errors.Is(err, efs.ErrFileSystemNotFound) || !strings.Contains(err.Error(), fs1) {
		t.Fatalf("err = %v, want ErrFileSystemNotFound naming %s", err, fs1)
	}
}

// gate blocks listings inside beforeRead until released, reporting each
// entry on started. run, if set, runs at the gate before blocking.
type gate struct {
	started chan struct{}
	proceed chan struct{}
}

func newGate(src *fakeSource) *gate {
	g := &gate{started: make(chan struct{}, 10), proceed: make(chan struct{})}
	src.mu.Lock()
	src.beforeRead = func(ctx context.Context) error {
		g.started <- struct{}{}
		select {
		case <-g.proceed:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	src.mu.Unlock()
	return g
}

func (g *gate) open() { close(g.proceed) }

// staleRefresh makes the view stale and starts a Reserve that lists again,
// blocked at the gate (before it reads). It returns the Reserve's result.
func staleRefresh(t *testing.T, a *Allocator, clk *testutil.Clock, src *fakeSource) (*gate, chan *Reservation) {
	t.Helper()
	g := newGate(src)
	clk.Advance(2 * time.Minute)
	done := make(chan *Reservation, 1)
	go func() {
		r, err := a.Reserve(context.Background(), fs1, 1000, 2000, "refresher")
		if err != nil {
			t.Errorf("refreshing Reserve: %v", err)
		}
		done <- r
	}()
	<-g.started
	return g, done
}

// TestCommitDuringRefreshIsKept: a listing that read the access points
// before a create finished must not lose that create's GID when it lands.
func TestCommitDuringRefreshIsKept(t *testing.T) {
	src := newSource()
	a, clk := newAllocator(src)
	r := mustReserve(t, a, 1, 10, "vol")
	g, done := staleRefresh(t, a, clk, src) // its listing will not show the new access point
	commitAs(a, r, "fsap-vol")
	g.open()
	<-done
	src.add(fs1, "fsap-vol", r.GID()) // reality, after the listing read
	if n := a.usedCount(fs1, r.GID()); n != 1 {
		t.Fatalf("GID %d committed during the refresh has used count %d, want 1", r.GID(), n)
	}
}

// TestForgetDuringRefresh covers the ways a delete can interleave with a
// listing: the listing reads the access points before or after the delete.
func TestForgetDuringRefresh(t *testing.T) {
	oneAP := func(src *fakeSource) { src.add(fs1, "fsap-x", 5) }
	twoAPs := func(src *fakeSource) { oneAP(src); src.add(fs1, "fsap-y", 5) }
	deleteX := func(a *Allocator, src *fakeSource) {
		src.remove(fs1, "fsap-x")
		a.Forget(fs1, "fsap-x")
	}
	createAndDelete := func(a *Allocator, _ *fakeSource) {
		a.Record(apWith("fsap-z", 5))
		a.Forget(fs1, "fsap-z")
	}
	tests := []struct {
		name      string
		setup     func(src *fakeSource)               // before the first listing
		during    func(a *Allocator, src *fakeSource) // while the refresh is held
		readFirst bool                                // the refresh read before during ran
		wantUsed  int
	}{
		{"listing saw the deleted access point: not re-added", oneAP, deleteX, true, 0},
		{"listing did not see it: stays free", oneAP, deleteX, false, 0},
		{"shared GID, listing saw only the survivor: still used", twoAPs, deleteX, false, 1},
		{"shared GID, listing saw both: one left", twoAPs, deleteX, true, 1},
		{"created and deleted before the listing read: free", func(*fakeSource) {}, createAndDelete, false, 0},
		{"created and deleted after the listing read: free", func(*fakeSource) {}, createAndDelete, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newSource()
			tt.setup(src)
			a, clk := newAllocator(src)
			mustReserve(t, a, 1000, 2000, "first").Release()
			hold := staleRefresh
			if tt.readFirst {
				hold = heldAfterRead
			}
			g, done := hold(t, a, clk, src)
			tt.during(a, src)
			g.open()
			<-done
			if n := a.usedCount(fs1, 5); n != tt.wantUsed {
				t.Fatalf("used count of GID 5 = %d, want %d", n, tt.wantUsed)
			}
		})
	}
}

// heldAfterRead is staleRefresh with the listing holding a snapshot taken
// before the gate, i.e. it has read the access points already.
func heldAfterRead(t *testing.T, a *Allocator, clk *testutil.Clock, src *fakeSource) (*gate, chan *Reservation) {
	t.Helper()
	snap := &snapshotSource{fakeSource: src, g: &gate{started: make(chan struct{}, 1), proceed: make(chan struct{})}}
	a.src = snap
	clk.Advance(2 * time.Minute)
	done := make(chan *Reservation, 1)
	go func() {
		r, err := a.Reserve(context.Background(), fs1, 1000, 2000, "refresher")
		if err != nil {
			t.Errorf("refreshing Reserve: %v", err)
		}
		done <- r
	}()
	<-snap.g.started
	return snap.g, done
}

// snapshotSource reads the access points, then waits at its gate before
// handing them over.
type snapshotSource struct {
	*fakeSource
	g *gate
}

func (s *snapshotSource) ListAccessPoints(ctx context.Context, fsID string, fn func([]efs.AccessPoint) error) error {
	var pages [][]efs.AccessPoint
	err := s.fakeSource.ListAccessPoints(ctx, fsID, func(p []efs.AccessPoint) error {
		pages = append(pages, slices.Clone(p))
		return nil
	})
	s.g.started <- struct{}{}
	<-s.g.proceed
	for _, p := range pages {
		if err := fn(p); err != nil {
			return err
		}
	}
	return err
}

func TestWaitersShareOneListing(t *testing.T) {
	src := newSource()
	a, _ := newAllocator(src)
	g := newGate(src)
	waiting := make(chan struct{}, 10)
	a.waiting = func() { waiting <- struct{}{} }
	results := make(chan error, 5)
	for i := range 5 {
		go func() {
			_, err := a.Reserve(context.Background(), fs1, 1, 100, fmt.Sprint(i))
			results <- err
		}()
	}
	<-g.started
	for range 4 {
		<-waiting // the other four wait for the one listing
	}
	g.open()
	for range 5 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if got := src.listings.Load(); got != 1 {
		t.Fatalf("listings = %d, want 1", got)
	}
}

// TestCancelledLeaderDoesNotFailWaiters: the caller whose listing is shared
// gives up; a waiter whose own context is fine lists again and succeeds.
func TestCancelledLeaderDoesNotFailWaiters(t *testing.T) {
	src := newSource()
	a, _ := newAllocator(src)
	g := newGate(src)
	waiting := make(chan struct{}, 1)
	a.waiting = func() { waiting <- struct{}{} }

	leaderCtx, cancel := context.WithCancel(context.Background())
	leaderErr := make(chan error, 1)
	go func() {
		_, err := a.Reserve(leaderCtx, fs1, 1, 100, "leader")
		leaderErr <- err
	}()
	<-g.started
	waiterRes := make(chan error, 1)
	go func() {
		_, err := a.Reserve(context.Background(), fs1, 1, 100, "waiter")
		waiterRes <- err
	}()
	<-waiting
	src.mu.Lock()
	src.beforeRead = nil // the waiter's own listing goes through
	src.mu.Unlock()
	cancel()
	if err := <-leaderErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("leader err = %v, want context.Canceled", err)
	}
	if err := <-waiterRes; err != nil {
		t.Fatalf("waiter err = %v, want success", err)
	}
	if got := src.listings.Load(); got != 2 {
		t.Fatalf("listings = %d, want 2", got)
	}
}

func TestWaiterGivesUpWithItsContext(t *testing.T) {
	src := newSource()
	a, _ := newAllocator(src)
	g := newGate(src)
	waiting := make(chan struct{}, 1)
	a.waiting = func() { waiting <- struct{}{} }
	go func() { _, _ = a.Reserve(context.Background(), fs1, 1, 100, "leader") }()
	<-g.started
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, err := a.Reserve(ctx, fs1, 1, 100, "waiter")
		res <- err
	}()
	<-waiting
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter err = %v, want context.Canceled", err)
	}
	g.open()
}

// BenchmarkReserveCommit: steady state with 10,000 access points on the file
// system (one reserve, commit and delete per iteration).
func BenchmarkReserveCommit(b *testing.B) {
	for _, tc := range []struct {
		name   string
		hi     int64
		listed int
	}{
		{"10000used-range20000", 70000, 10000},
		{"10000used-range10001", 60000, 10000}, // one free GID: worst-case probing
	} {
		b.Run(tc.name, func(b *testing.B) {
			src := newSource()
			src.fill(fs1, 50000, tc.listed)
			a, _ := newAllocator(src)
			mustReserve(b, a, 50000, tc.hi, "warm").Release()
			b.ResetTimer()
			for i := range b.N {
				r := mustReserve(b, a, 50000, tc.hi, fmt.Sprint("pvc-", i))
				id := fmt.Sprint("fsap-b", r.GID())
				commitAs(a, r, id)
				a.Forget(fs1, id)
			}
			b.StopTimer()
			if got := src.listings.Load(); got != 1 {
				b.Fatalf("listings = %d", got)
			}
		})
	}
}

// TestPickMatchesNaiveScan checks the bitset search against the obvious
// loop on random views, including word boundaries and wrap-around.
func TestPickMatchesNaiveScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 500 {
		v := &View{used: map[int64]int{}, reserved: map[int64]int{}, taken: map[int64]uint64{}}
		lo := rng.Int64N(300)
		hi := lo + rng.Int64N(300)
		density := rng.Float64()
		for g := lo; g <= hi; g++ {
			switch x := rng.Float64(); {
			case x < density/2:
				v.used[g] = 1
			case x < density:
				v.reserved[g] = 1
			}
			v.sync(g)
		}
		start := lo + rng.Int64N(hi-lo+1)
		want, wantOK := int64(0), false
		for i := int64(0); i <= hi-lo; i++ {
			g := lo + (start-lo+i)%(hi-lo+1)
			if v.used[g] == 0 && v.reserved[g] == 0 {
				want, wantOK = g, true
				break
			}
		}
		if got, ok := v.pick(lo, hi, start); got != want || ok != wantOK {
			t.Fatalf("round %d: pick(%d, %d, %d) = %d, %v; want %d, %v", round, lo, hi, start, got, ok, want, wantOK)
		}
	}
}

// An access point this process made and another process deleted is never
// shown by a listing here, and before it stayed used for good: a range this
// process saw full stayed full after every delete of another replica (the
// simulator's wide worlds: three replicas of one record, a claim's create
// answered on one and deleted on another, and every later create of the
// 2-id range answered "no free GID"). A listing that began more than
// ListingLag after the Record and does not show it frees its ids; one that
// began within the lag does not.
func TestRecordedAccessPointDeletedElsewhereIsFreed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		after    time.Duration // from the Record to the listing's start
		wantFree bool
	}{
		{"listing within the lag", 500 * time.Millisecond, false},
		{"listing past the lag", 1500 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newSource()
			clk := testutil.NewClock(time.Unix(1_000_000, 0))
			a := New(src, Options{MaxAge: time.Minute, ListingLag: time.Second, Now: clk.Now})
			commitAs(a, mustReserve(t, a, 7, 7, "vol"), "fsap-deleted-elsewhere") // never added to src
			clk.Advance(tc.after)
			v, mu := a.view(fs1)
			err := a.refresh(context.Background(), src, fs1, v, mu)
			mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			if free := a.usedCount(fs1, 7) == 0; free != tc.wantFree {
				t.Fatalf("GID 7 free = %v after a listing begun %v after the Record, want %v", free, tc.after, tc.wantFree)
			}
		})
	}
}

// countingLock is a mutex that counts its Locks.
type countingLock struct {
	sync.Mutex
	n atomic.Int64
}

func (l *countingLock) Lock() { l.n.Add(1); l.Mutex.Lock() }

// With Options.Home, a file system's view is the one its home gives, and
// every call on it runs under the home's lock (the controller's one lock
// per file system): nothing of it is kept elsewhere.
func TestHomeHoldsTheViewUnderItsLock(t *testing.T) {
	src := newSource()
	src.fill(fs1, 10, 3) // ids 10, 11, 12 in use
	var view View
	lock := &countingLock{}
	homes := 0
	a := New(src, Options{Home: func(fsID string) (*View, sync.Locker) {
		if fsID != fs1 {
			t.Fatalf("home asked for %s", fsID)
		}
		homes++
		return &view, lock
	}})
	r := mustReserve(t, a, 10, 13, "vol")
	if r.GID() != 13 {
		t.Fatalf("reserved %d, want 13, the only free id", r.GID())
	}
	lock.Lock()
	reserved, used := view.reserved[13], len(view.used)
	lock.Unlock()
	if reserved != 1 || used != 3 {
		t.Fatalf("the home's view holds %d reservations of 13 and %d used ids, want 1 and 3", reserved, used)
	}
	before := lock.n.Load()
	commitAs(a, r, "fsap-new")
	a.Forget(fs1, "fsap-new")
	if _, err := a.Count(context.Background(), nil, fs1); err != nil {
		t.Fatal(err)
	}
	if got := lock.n.Load() - before; got < 4 {
		t.Errorf("Record, Release, Forget and Count took the home's lock %d times, want at least 4", got)
	}
	if homes != 1 {
		t.Errorf("home asked %d times for one file system, want once", homes)
	}
}

// An id the caller found held elsewhere (ReserveID) is picked by nobody
// until released, through a listing that does not show it, and a range
// every other id of which is used is then exhausted after one listing.
func TestReserveIDKeepsPicksOffAnIDFoundHeld(t *testing.T) {
	ctx := context.Background()
	src := newSource()
	src.add(fs1, "fsap-1", 100)
	a := New(src, Options{})
	held := a.ReserveID(fs1, 101)
	if held.GID() != 101 {
		t.Fatalf("ReserveID gave %d", held.GID())
	}
	listings := src.listings.Load()
	if _, err := a.Reserve(ctx, fs1, 100, 101, "v"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("range of a used and a found-held id: %v, want ErrExhausted", err)
	}
	if n := src.listings.Load() - listings; n != 1 {
		t.Errorf("%d listings, want 1 (made during the call: it proves the range full)", n)
	}
	held.Release()
	r, err := a.Reserve(ctx, fs1, 100, 101, "v")
	if err != nil || r.GID() != 101 {
		t.Fatalf("after the release: %v, %v; want 101", r, err)
	}
	r.Release()
}
