package controller

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// idTries counts, per id, the id entries of fs a record is asked to make
// (a Hold's first request), from now on.
func idTries(t *testing.T, b *bed) (tries func() map[int64]int) {
	t.Helper()
	store, _ := records.Load(b.emu)
	var mu sync.Mutex
	n := map[int64]int{}
	store.(*journal.Memory).SetHook(func(op string, k journal.Key) error {
		if op == "create" && k.Kind == journal.KindID && k.FileSystem == testFS {
			if id, err := strconv.ParseInt(k.Name, 10, 64); err == nil {
				mu.Lock()
				n[id]++
				mu.Unlock()
			}
		}
		return nil
	})
	t.Cleanup(func() { store.(*journal.Memory).SetHook(nil) })
	return func() map[int64]int {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[int64]int, len(n))
		for id, k := range n {
			out[id] = k
		}
		return out
	}
}

// holdForDirVolume writes, as another replica's directory volume create
// does, the record of a directory volume at path holding id, and its id
// entry: what this process's allocator has not listed.
func holdForDirVolume(t *testing.T, b *bed, path string, id int64) {
	t.Helper()
	rec, made, err := b.svc.journal.Begin(b.ctx(), journal.Volume{FileSystem: testFS, Token: volume.DirToken(path),
		Name: "pvc-elsewhere" + path[1:], Path: path, UID: id, GID: id, Allocated: id, Capacity: 1 << 30, Dir: true})
	if err != nil || !made {
		t.Fatalf("record of %s: made %v, %v", path, made, err)
	}
	if err := b.svc.journal.HoldID(b.ctx(), rec); err != nil {
		t.Fatal(err)
	}
}

// Issue 44, item 3: a class's range every id of which directory volumes
// hold. An access point create on a replica whose allocator listed the
// file system before another replica made them walked MaxIDAttempts held
// ids and answered GID contention (UNAVAILABLE), retried for good until
// its next listing; on every replica it is RESOURCE_EXHAUSTED in one
// call, having asked the record for at most one held id.
func TestFullRangeOfDirectoryVolumesIsExhaustedInOneCall(t *testing.T) {
	r := newRootBed(t)
	other := newBedOn(t, r.url, r.emu)
	// other's allocator lists the file system now, before the directory
	// volumes are made.
	if _, err := other.svc.CreateVolume(other.ctx(), createReq("pvc-listed-before", 1<<30, params("gidRangeStart", "60000", "gidRangeEnd", "60009"))); err != nil {
		t.Fatal(err)
	}
	const size = 16
	rng := []string{"gidRangeStart", "50000", "gidRangeEnd", strconv.Itoa(50000 + size - 1)}
	for i := range size {
		r.mustCreateDir(fmt.Sprintf("pvc-dir-%d", i), rng...)
	}
	for _, b := range []*bed{other, r.bed} {
		tries := idTries(t, b)
		_, err := b.svc.CreateVolume(b.ctx(), createReq(fmt.Sprintf("pvc-ap-%p", b), 1<<30, params(rng...)))
		if !errors.Is(err, gid.ErrExhausted) || errors.Is(err, core.ErrGIDContention) {
			t.Fatalf("access point create in a range of directory volumes: %v, want ErrExhausted (RESOURCE_EXHAUSTED)", err)
		}
		total := 0
		for id, n := range tries() {
			total += n
			if n > 1 {
				t.Errorf("id %d asked of the record %d times in one call", id, n)
			}
		}
		if total > 1 {
			t.Errorf("%d held ids asked of the record, want at most one: the record's directory volumes tell the rest", total)
		}
	}
	r.wantAccessPoints(1)
}

// Issue 44, item 3: a directory volume whose first pick another replica's
// directory volume holds, unknown to this process's allocator, took the
// id again on a later pick (the allocator never heard it was held). Found
// held, it is skipped by every later pick: here the one free id is
// taken, and the held one is asked for once.
func TestDirectoryVolumeNeverPicksAgainAnIDFoundHeld(t *testing.T) {
	r := newRootBed(t)
	const lo, hi = 50000, 50002
	rng := []string{"gidRangeStart", strconv.Itoa(lo), "gidRangeEnd", strconv.Itoa(hi)}
	// A name whose picks, as the allocator makes them for a directory
	// volume (its name, then name#1, name#2 with the first released), come
	// round to its first pick on the third: the picks a create that does
	// not learn what it found held would make.
	pick := func(name string) *gid.Reservation {
		res, err := r.svc.gids.ReserveFrom(r.ctx(), r.svc.gidSource(), testFS, lo, hi, name)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	name, first, second := "", int64(0), int64(0)
	for i := range 100 {
		n := fmt.Sprintf("pvc-new-%d", i)
		a := pick(n)
		b := pick(n + "#1")
		a.Release()
		c := pick(n + "#2")
		b.Release()
		c.Release()
		if c.GID() == a.GID() {
			name, first, second = n, a.GID(), b.GID()
			break
		}
	}
	if name == "" {
		t.Fatal("no name comes round to its first pick")
	}
	holdForDirVolume(t, r.bed, "/elsewhere-1", first)
	holdForDirVolume(t, r.bed, "/elsewhere-2", second)
	tries := idTries(t, r.bed)
	vol, err := r.createDir(name, rng...)
	if err != nil {
		t.Fatalf("directory volume with a free id in its range: %v (ids asked: %v)", err, tries())
	}
	if n := tries()[first]; n != 1 {
		t.Errorf("its first pick %d, held, was asked of the record %d times (ids asked: %v)", first, n, tries())
	}
	free := int64(lo + hi + lo + 1 - first - second) // the third id of three
	if gid := r.recordOf(name).GID; gid != free {
		t.Errorf("volume %s has gid %d, want %d, the free one", vol.GetVolume().GetVolumeId(), gid, free)
	}
}
