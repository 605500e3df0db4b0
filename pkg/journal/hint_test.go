package journal_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/journal/journaltest"
)

// hinted is a store whose hints are set by the test: any state, however
// stale.
type hinted struct {
	journal.Store
	hints map[journal.Key]journal.Entry
	gets  int
}

func (h *hinted) Hint(k journal.Key) (journal.Entry, bool) {
	e, ok := h.hints[k]
	return e, ok
}

func (h *hinted) Get(ctx context.Context, k journal.Key) (journal.Entry, error) {
	h.gets++
	return h.Store.Get(ctx, k)
}

// Finish releases the volume's id exactly when the id entry names the
// volume now, whatever the hint of it says: a hint is proven by the
// compare-and-swap of the Delete, or read again. The record is read once
// after the id entry, always: it proves the entry this life's (a later
// life's hold is refused, TestFinishLeavesTheNextLifesID).
func TestFinishReleasesTheIDWhateverItsHintSays(t *testing.T) {
	ctx := context.Background()
	idKey := journal.Key{Kind: journal.KindID, FileSystem: "fs-1", Name: "60000"}
	for _, tc := range []struct {
		name       string
		hint       func(ours journal.Entry) (journal.Entry, bool)
		takenSince bool // another volume holds the id now (ours was released before)
		wantHeld   string
		wantGets   int
	}{
		{"the hint is current: the record read only", func(e journal.Entry) (journal.Entry, bool) { return e, true }, false, "", 1},
		{"no hint: read", func(journal.Entry) (journal.Entry, bool) { return journal.Entry{}, false }, false, "", 2},
		{"the hint says ours, another holds it now: kept", func(e journal.Entry) (journal.Entry, bool) { return e, true }, true, "pvc-other", 3},
		{"the hint says another's, ours now: released", func(e journal.Entry) (journal.Entry, bool) {
			e.Value, e.Version = []byte("pvc-other"), "stale"
			return e, true
		}, false, "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := journal.NewMemory()
			h := &hinted{Store: mem, hints: map[journal.Key]journal.Entry{}}
			j := journal.New(h)
			rec, _, err := j.Begin(ctx, journal.Volume{FileSystem: "fs-1", Token: "pvc-1", Name: "pvc-1", Path: "/pvc-1", Allocated: 60000})
			if err != nil {
				t.Fatal(err)
			}
			if err := j.HoldID(ctx, rec); err != nil {
				t.Fatal(err)
			}
			ours, err := mem.Get(ctx, idKey)
			if err != nil {
				t.Fatal(err)
			}
			if tc.takenSince {
				if err := mem.Delete(ctx, ours); err != nil {
					t.Fatal(err)
				}
				if _, err := mem.Create(ctx, journal.Entry{Key: idKey, Value: []byte("pvc-other")}); err != nil {
					t.Fatal(err)
				}
			}
			if e, ok := tc.hint(ours); ok {
				h.hints[idKey] = e
			}
			h.gets = 0
			if err := j.Finish(ctx, rec); err != nil {
				t.Fatal(err)
			}
			held := ""
			if e, err := mem.Get(ctx, idKey); err == nil {
				held = string(e.Value)
			} else if !errors.Is(err, journal.ErrNotFound) {
				t.Fatal(err)
			}
			if held != tc.wantHeld {
				t.Errorf("id 60000 held by %q after Finish, want %q", held, tc.wantHeld)
			}
			if h.gets != tc.wantGets {
				t.Errorf("Finish read the store %d times, want %d", h.gets, tc.wantGets)
			}
		})
	}
}

// MarkDeletingIf marks a record from a hint only at the version the hint
// holds: a record changed since is read again and checked again, and one
// gone or no longer as required is not marked (nil).
func TestMarkDeletingIfProvesAHint(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		since    func(t *testing.T, j *journal.Journal, r *journal.Record) // what another writer did after the hint
		wantMark bool
	}{
		{"the hint is current", func(*testing.T, *journal.Journal, *journal.Record) {}, true},
		{"changed since, still as required", func(t *testing.T, j *journal.Journal, r *journal.Record) {
			if err := j.SetClaim(ctx, r, "claim", "ns"); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"changed since, names another access point", func(t *testing.T, j *journal.Journal, r *journal.Record) {
			if err := j.SetAccessPoint(ctx, r, journal.Made{ID: "fsap-2", Path: "/pvc-1"}, true); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"gone since", func(t *testing.T, j *journal.Journal, r *journal.Record) {
			if err := j.Finish(ctx, r); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := journal.NewMemory()
			j, other := journal.New(mem), journal.New(mem)
			hint, _, err := j.Begin(ctx, journal.Volume{FileSystem: "fs-1", Token: "pvc-1", Name: "pvc-1", Path: "/pvc-1", Allocated: journal.NoID})
			if err != nil {
				t.Fatal(err)
			}
			if err := j.SetAccessPoint(ctx, hint, journal.Made{ID: "fsap-1", Path: "/pvc-1"}, false); err != nil {
				t.Fatal(err)
			}
			theirs, err := other.Volume(ctx, "fs-1", "pvc-1")
			if err != nil {
				t.Fatal(err)
			}
			tc.since(t, other, theirs)
			got, err := j.MarkDeletingIf(ctx, hint, func(r *journal.Record) bool { return r.AccessPoint == "fsap-1" })
			if err != nil {
				t.Fatal(err)
			}
			if (got != nil) != tc.wantMark {
				t.Fatalf("MarkDeletingIf = %+v, want marked %v", got, tc.wantMark)
			}
			now, err := j.Volume(ctx, "fs-1", "pvc-1")
			if err != nil && !errors.Is(err, journal.ErrNotFound) {
				t.Fatal(err)
			}
			if marked := now != nil && now.Deleting; marked != tc.wantMark {
				t.Fatalf("stored record deleting = %v, want %v", marked, tc.wantMark)
			}
		})
	}
}

// Finish removes the life of the record it was given, never the record's
// next one: a finisher whose record another finished and made again (not
// being deleted: a mark is never taken back) leaves that.
func TestFinishLeavesTheRecordsNextLife(t *testing.T) {
	ctx := context.Background()
	mem := journal.NewMemory()
	j, other := journal.New(mem), journal.New(mem)
	v := journal.Volume{FileSystem: "fs-1", Token: "pvc-1", Name: "pvc-1", Path: "/pvc-1", Allocated: journal.NoID}
	rec, _, err := j.Begin(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.MarkDeleting(ctx, rec); err != nil {
		t.Fatal(err)
	}
	theirs, err := other.Volume(ctx, "fs-1", "pvc-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Finish(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	v.Path = "/pvc-1-next"
	if _, _, err := other.Begin(ctx, v); err != nil {
		t.Fatal(err)
	}
	if err := j.Finish(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if got, err := j.Volume(ctx, "fs-1", "pvc-1"); err != nil || got.Path != "/pvc-1-next" {
		t.Fatalf("after the first life's Finish: %+v, %v; want the next life kept", got, err)
	}
}

// A Finish of a life that another caller finished already (two deletes of
// one volume, a withdrawn record taken over by the next create) leaves
// alone the record's next life and the id it holds again: the id table
// holds an id for a volume's token, whatever its life (found by TestModel
// with a writer outside the protocol; the id was released first, then
// the record found changed). With hints (the Lease store), the stale
// Finish's id entry, seen before its mark, is refused by version.
func TestFinishLeavesTheNextLifesID(t *testing.T) {
	for _, hints := range []bool{false, true} {
		t.Run(fmt.Sprintf("hints=%v", hints), func(t *testing.T) {
			ctx := context.Background()
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			mem := journal.NewMemory()
			var st journal.Store = mem
			if hints {
				st = journaltest.NewHinting(mem)
			}
			j := journal.NewClocked(st, func() time.Time { now = now.Add(time.Second); return now })
			v := journal.Volume{FileSystem: "fs-1", Token: "pvc-1", Name: "pvc-1", Path: "/pvc-1", UID: 60000, GID: 60000, Allocated: 60000}
			life, _, err := j.Begin(ctx, v)
			if err != nil {
				t.Fatal(err)
			}
			if err := j.HoldID(ctx, life); err != nil {
				t.Fatal(err)
			}
			if err := j.MarkDeleting(ctx, life); err != nil { // as a delete does
				t.Fatal(err)
			}
			stale := *life
			if err := j.Finish(ctx, life); err != nil { // the other finisher
				t.Fatal(err)
			}
			next, made, err := j.Begin(ctx, v)
			if err != nil || !made {
				t.Fatalf("the next life: made %v, %v", made, err)
			}
			if err := j.HoldID(ctx, next); err != nil {
				t.Fatal(err)
			}
			if err := j.Finish(ctx, &stale); err != nil {
				t.Fatal(err)
			}
			if got, err := j.Volume(ctx, "fs-1", "pvc-1"); err != nil || !got.Created.Equal(next.Created) {
				t.Errorf("the next life's record after the stale Finish: %v, %v", got, err)
			}
			e, err := mem.Get(ctx, journal.Key{Kind: journal.KindID, FileSystem: "fs-1", Name: "60000"})
			if err != nil || string(e.Value) != "pvc-1" {
				t.Errorf("id 60000 after the stale Finish: %q, %v; want held for pvc-1", e.Value, err)
			}
		})
	}
}

// MarkBound marks only the life it read, naming the access point it read:
// the volume's next life, begun by a create its caller forgot after the
// PersistentVolume's volume was deleted, is no PersistentVolume's, and
// marked bound it would never be collected (found by TestModel's abandoned
// claim). It answers ErrNotFound and writes nothing.
func TestMarkBoundOnlyTheLifeRead(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	j := journal.NewClocked(journal.NewMemory(), func() time.Time { now = now.Add(time.Second); return now })
	v := journal.Volume{FileSystem: "fs-1", Token: "pvc-1", Name: "pvc-1", Path: "/pvc-1", AccessPoint: "fsap-1"}
	named, _, err := j.Begin(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	read := *named // as the collector read it, with the PV naming fsap-1
	if err := j.Finish(ctx, named); err != nil {
		t.Fatal(err)
	}
	v.AccessPoint = "fsap-2"
	if _, _, err := j.Begin(ctx, v); err != nil {
		t.Fatal(err)
	}
	if err := j.MarkBound(ctx, &read); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("MarkBound of the life read: %v, want ErrNotFound", err)
	}
	if got, err := j.Volume(ctx, "fs-1", "pvc-1"); err != nil || got.Bound {
		t.Errorf("the next life after MarkBound of the one read: bound %v (%v), want not bound", got != nil && got.Bound, err)
	}
}

// SetAccessPoint is the last write before a create's answer, so it is
// always written, at the version the caller read: the write proves the
// record, at that moment, of the same life, naming the access point and
// not being deleted. When the record read named the access point already,
// it wrote nothing, and a create answered an access point that its
// volume's delete had marked and deleted meanwhile (the simulator's wide
// worlds, seed 319061).
func TestSetAccessPointAlreadyNamedStillConfirms(t *testing.T) {
	ctx := context.Background()
	j := journal.New(journal.NewMemory())
	v := journal.Volume{FileSystem: "fs-1", Token: "pvc-1", Name: "pvc-1", Path: "/pvc-1", AccessPoint: "fsap-1"}
	rec, _, err := j.Begin(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	read := *rec // a create's copy, naming fsap-1
	if err := j.MarkDeleting(ctx, rec); err != nil {
		t.Fatal(err)
	}
	made := journal.Made{ID: "fsap-1", Path: "/pvc-1"}
	if err := j.SetAccessPoint(ctx, &read, made, false); !errors.Is(err, journal.ErrDeleting) {
		t.Fatalf("SetAccessPoint of the access point a record being deleted names: %v, want ErrDeleting", err)
	}
}

// listing counts the index reads of a store whose hints are its entries
// as the test last copied them.
type listing struct {
	hinted
	lists int
}

func (l *listing) List(ctx context.Context, kind journal.Kind, fs, index string, fn func([]journal.Entry) error) error {
	l.lists++
	return l.Store.List(ctx, kind, fs, index, fn)
}

// A delete finds the record of an access point with no volume-name tag by
// the record's index: from this process's last write of it when that
// names the access point (no read of the index), else by the index; never
// a record that does not name it, and never one finished.
func TestByAccessPointHintReadsTheIndexOnlyWhenItMust(t *testing.T) {
	ctx := context.Background()
	l := &listing{hinted: hinted{Store: journal.NewMemory(), hints: map[journal.Key]journal.Entry{}}}
	j := journal.New(l)
	rec, _, err := j.Begin(ctx, journal.Volume{FileSystem: "fs-1", Token: "pvc-1", Name: "pvc-1", Path: "/pvc-1", Allocated: 60000, UID: 60000, GID: 60000})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.SetAccessPoint(ctx, rec, journal.Made{ID: "fsap-1", Path: "/pvc-1", UID: 60000, GID: 60000, Allocated: 60000}, false); err != nil {
		t.Fatal(err)
	}
	key := journal.Key{Kind: journal.KindVolume, FileSystem: "fs-1", Name: "pvc-1"}
	hint := func() {
		e, err := l.Store.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		l.hints[key] = e
	}
	hint()
	got, err := j.ByAccessPointHint(ctx, "fs-1", "fsap-1")
	if err != nil || got.AccessPoint != "fsap-1" || l.lists != 0 {
		t.Fatalf("named and hinted: %+v, %v after %d index reads, want the record and none", got, err, l.lists)
	}
	// Another access point named by the hint: the index decides.
	if _, err := j.ByAccessPointHint(ctx, "fs-1", "fsap-2"); !errors.Is(err, journal.ErrNotFound) || l.lists != 1 {
		t.Fatalf("an access point no record names: %v after %d index reads, want ErrNotFound after 1", err, l.lists)
	}
	if err := j.Finish(ctx, got); err != nil {
		t.Fatal(err)
	}
	if _, err := j.ByAccessPointHint(ctx, "fs-1", "fsap-1"); !errors.Is(err, journal.ErrNotFound) || l.lists != 2 {
		t.Fatalf("finished: %v after %d index reads, want ErrNotFound after 2", err, l.lists)
	}
}
