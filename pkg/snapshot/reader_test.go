package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// hookStore runs after on the first Create of an entry of kind, once the
// entry is written: a deterministic interleaving of another call.
type hookStore struct {
	journal.Store
	kind  journal.Kind
	after func()
}

func (h *hookStore) Create(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	got, err := h.Store.Create(ctx, e)
	if f := h.after; f != nil && e.Key.Kind == h.kind {
		h.after = nil
		f()
	}
	return got, err
}

func readyWorld(t *testing.T) (*world, *Manager, *Snapshot) {
	t.Helper()
	w := newWorld(t)
	m := w.manager(time.Minute)
	snap, err := m.Create(context.Background(), "snap-1", src)
	if err != nil || !snap.Ready {
		t.Fatalf("Create: %+v, %v", snap, err)
	}
	return w, m, snap
}

// hookedWorld is readyWorld with a Manager whose store runs a hook after
// the first reader entry's write.
func hookedWorld(t *testing.T) (*world, *Manager, *hookStore, *Snapshot) {
	w, _, snap := readyWorld(t)
	hs := &hookStore{Store: w.store, kind: KindReader}
	m := New(Config{Store: hs, Mount: dirMount(w.root), Copy: w.cp.copy, Wait: time.Minute,
		VolumeLive: func(context.Context, string, string, string) (bool, error) { return false, nil }})
	return w, m, hs, snap
}

func readerEntries(t *testing.T, m *Manager) []*Reader {
	t.Helper()
	rs, err := m.Readers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestAReadOnlyVolumeKeepsItsSnapshot: a read-only volume from a snapshot
// has an ID of its own per name (the same on a retry), names the
// snapshot's copy, and DeleteSnapshot refuses until the volume is deleted.
func TestAReadOnlyVolumeKeepsItsSnapshot(t *testing.T) {
	w, m, snap := readyWorld(t)
	ctx := context.Background()
	a, err := m.AddReader(ctx, "pvc-a", snap.ID, "ns/claim-a")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := m.AddReader(ctx, "pvc-a", snap.ID, "ns/claim-a"); err != nil || again != a {
		t.Fatalf("retry: %q, %v; want %q", again, err, a)
	}
	b, err := m.AddReader(ctx, "pvc-b", snap.ID, "ns/claim-b")
	if err != nil || b == a {
		t.Fatalf("second volume: %q, %v; want an ID other than %q", b, err, a)
	}
	id, err := volume.ParseID(a)
	if err != nil || id.Path != DataDir(snap.CopyKey()) {
		t.Fatalf("ID %q parses to %+v, %v; want the snapshot's copy", a, id, err)
	}
	if _, err := os.Stat(filepath.Join(w.root, id.Path, "a", "f")); err != nil {
		t.Fatalf("the ID's path does not hold the copy: %v", err)
	}
	for _, vol := range []string{a, b} {
		if err := m.Delete(ctx, snap.ID); !errors.Is(err, ErrInUse) {
			t.Fatalf("DeleteSnapshot with read-only volumes: %v, want ErrInUse", err)
		}
		if got, err := m.Get(ctx, snap.ID); err != nil || !got.Ready {
			t.Fatalf("after a refused delete the snapshot is %+v, %v; want it ready", got, err)
		}
		id, _ := volume.ParseID(vol)
		if err := m.RemoveReader(ctx, id, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Delete(ctx, snap.ID); err != nil {
		t.Fatalf("DeleteSnapshot once its volumes are gone: %v", err)
	}
	if _, err := m.AddReader(ctx, "pvc-c", snap.ID, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("read-only volume of a deleted snapshot: %v, want ErrNotFound", err)
	}
}

// TestAReadOnlyVolumeAndADeleteAtOnceNeverLeaveAVolumeWithoutItsCopy:
// whichever of AddReader's entry write and DeleteSnapshot's Deleting write
// comes first, either the volume is refused or the snapshot stays.
func TestAReadOnlyVolumeAndADeleteAtOnceNeverLeaveAVolumeWithoutItsCopy(t *testing.T) {
	t.Run("the delete runs whole between the add's read and its entry write", func(t *testing.T) {
		w, m, hs, snap := hookedWorld(t)
		ctx := context.Background()
		var delErr error
		// The hook runs once the entry is written; to run the delete
		// before the write, the entry is removed first and put back.
		hs.after = func() {
			e, _ := w.store.Get(ctx, readerKey(fs1, "pvc-a"))
			_ = w.store.Delete(ctx, e)
			delErr = m.Delete(ctx, snap.ID)
			e.Version = ""
			_, _ = w.store.Create(ctx, e)
		}
		_, err := m.AddReader(ctx, "pvc-a", snap.ID, "ns/c")
		if delErr != nil {
			t.Fatalf("DeleteSnapshot: %v", delErr)
		}
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("AddReader whose snapshot was deleted meanwhile: %v, want ErrNotFound", err)
		}
		// Its entry stays (it may be another call's, answered): the
		// orphan collector's once its claim is gone.
		if rs := readerEntries(t, m); len(rs) != 1 || rs[0].Claim != "ns/c" {
			t.Fatalf("read-only volume entries left: %v, want the one with its claim", rs)
		}
		if n, err := m.CollectReaders(ctx, func(string) bool { return false },
			func(context.Context, string, string) (bool, error) { return true, nil }, 0); err != nil || n != 1 {
			t.Errorf("CollectReaders: %d, %v; want the entry removed", n, err)
		}
	})
	t.Run("the delete runs whole after the add's entry write", func(t *testing.T) {
		w, m, hs, snap := hookedWorld(t)
		ctx := context.Background()
		var delErr error
		hs.after = func() { delErr = m.Delete(ctx, snap.ID) }
		id, err := m.AddReader(ctx, "pvc-a", snap.ID, "")
		if !errors.Is(delErr, ErrInUse) {
			t.Fatalf("DeleteSnapshot after the entry: %v, want ErrInUse", delErr)
		}
		if err != nil {
			t.Fatalf("AddReader: %v", err)
		}
		got, err := m.Get(ctx, snap.ID)
		if err != nil || got.Deleting || got.Removing {
			t.Fatalf("snapshot after the refused delete: %+v, %v; want it whole", got, err)
		}
		v, _ := volume.ParseID(id)
		if _, err := os.Stat(filepath.Join(w.root, v.Path, "a", "f")); err != nil {
			t.Fatalf("the volume's copy: %v", err)
		}
	})
}

// TestCollectReadersRemovesOnlyThoseGivenUp: an entry goes once its claim
// is gone, no PV names it and it is older than the grace period; one with
// no claim recorded stays.
func TestCollectReadersRemovesOnlyThoseGivenUp(t *testing.T) {
	w, _, snap := readyWorld(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	m := New(Config{Store: w.store, Mount: dirMount(w.root), Copy: w.cp.copy, Wait: time.Minute, Now: func() time.Time { return now },
		VolumeLive: func(context.Context, string, string, string) (bool, error) { return false, nil }})
	ids := map[string]string{}
	for _, v := range []struct{ name, claim string }{
		{"pvc-gone", "ns/gone"}, {"pvc-named", "ns/gone2"}, {"pvc-live-claim", "ns/here"}, {"pvc-no-claim", ""},
	} {
		id, err := m.AddReader(ctx, v.name, snap.ID, v.claim)
		if err != nil {
			t.Fatal(err)
		}
		ids[v.name] = id
	}
	named := func(id string) bool { return id == ids["pvc-named"] }
	claimGone := func(_ context.Context, ns, name string) (bool, error) { return name != "here", nil }
	if n, err := m.CollectReaders(ctx, named, claimGone, time.Hour); err != nil || n != 0 {
		t.Fatalf("within the grace period: %d collected, %v; want 0", n, err)
	}
	now = now.Add(2 * time.Hour)
	if n, err := m.CollectReaders(ctx, named, claimGone, time.Hour); err != nil || n != 1 {
		t.Fatalf("past the grace period: %d collected, %v; want 1", n, err)
	}
	left := map[string]bool{}
	for _, r := range readerEntries(t, m) {
		left[r.Name] = true
	}
	if left["pvc-gone"] || !left["pvc-named"] || !left["pvc-live-claim"] || !left["pvc-no-claim"] {
		t.Errorf("entries left: %v; want all but pvc-gone", left)
	}
}
