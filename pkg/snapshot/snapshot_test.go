package snapshot

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

const fs1 = "fs-0123456789abcdef0"

// dirMount is a file system as a directory: its root, never unmounted.
type dirMount string

func (d dirMount) Mount(context.Context, string) (string, func(), error) {
	return string(d), func() {}, nil
}

// cpCopier copies with cp -a (the real copier is pkg/treecopy's, tested
// there), counting its copies, and blocking on gate when set.
type cpCopier struct {
	n    atomic.Int32
	gate chan struct{}
	fail error
}

func (c *cpCopier) copy(ctx context.Context, src, dst string, mapIDs func(uid, gid int) (int, int)) (int64, error) {
	c.n.Add(1)
	if c.gate != nil {
		select {
		case <-c.gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if c.fail != nil {
		return 0, c.fail
	}
	if out, err := exec.Command("cp", "-a", src+"/.", dst).CombinedOutput(); err != nil {
		return 0, errors.New(string(out))
	}
	if mapIDs != nil {
		err := filepath.Walk(dst, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			uid, gid := mapIDs(0, 0)
			return os.Lchown(p, uid, gid)
		})
		if err != nil {
			return 0, err
		}
	}
	return 5, nil
}

type world struct {
	root  string
	store *journal.Memory
	cp    *cpCopier
	live  map[string]bool // volume names whose record lives
}

func newWorld(t *testing.T) *world {
	w := &world{root: t.TempDir(), store: journal.NewMemory(), cp: &cpCopier{}, live: map[string]bool{}}
	if err := os.MkdirAll(filepath.Join(w.root, "vol", "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.root, "vol", "a", "f"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *world) manager(wait time.Duration) *Manager {
	return New(Config{Store: w.store, Mount: dirMount(w.root), Copy: w.cp.copy, Wait: wait,
		VolumeLive: func(_ context.Context, _, name, _ string) (bool, error) { return w.live[name], nil }})
}

var src = Source{VolumeID: "efs:" + fs1 + "::fsap-0123456789abcdef0", FileSystem: fs1, Path: "/vol", UID: 0, GID: 0}

func TestCreateIsIdempotentByNameAndCopiesOnce(t *testing.T) {
	w := newWorld(t)
	m := w.manager(time.Minute)
	ctx := context.Background()
	a, err := m.Create(ctx, "snap-1", src)
	if err != nil || !a.Ready {
		t.Fatalf("Create: %+v, %v", a, err)
	}
	if b, err := m.Create(ctx, "snap-1", src); err != nil || b.ID != a.ID || !b.Created.Equal(a.Created) {
		t.Fatalf("repeat: %+v, %v; want %s at %v", b, err, a.ID, a.Created)
	}
	if n := w.cp.n.Load(); n != 1 {
		t.Errorf("%d copies, want 1", n)
	}
	if got, _ := os.ReadFile(filepath.Join(w.root, DataDir(a.CopyKey()), "a", "f")); string(got) != "hello" {
		t.Errorf("copy holds %q", got)
	}
	other := src
	other.VolumeID = "efs:" + fs1 + "::fsap-0123456789abcdef1"
	if _, err := m.Create(ctx, "snap-1", other); !errors.Is(err, ErrNameTaken) {
		t.Errorf("same name, other source: %v, want ErrNameTaken", err)
	}
}

func TestACopyPastTheWaitIsPendingThenReady(t *testing.T) {
	w := newWorld(t)
	w.cp.gate = make(chan struct{})
	m := w.manager(time.Millisecond)
	ctx := context.Background()
	snap, err := m.Create(ctx, "snap-1", src)
	if err != nil || snap.Ready {
		t.Fatalf("Create while copying: %+v, %v; want not ready", snap, err)
	}
	if _, err := os.Stat(filepath.Join(w.root, Area, snap.CopyKey())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a copy in progress is at its final name: %v", err)
	}
	close(w.cp.gate)
	m.stopWait(t, "snap-1")
	if snap, err = m.Create(ctx, "snap-1", src); err != nil || !snap.Ready {
		t.Fatalf("Create after the copy: %+v, %v", snap, err)
	}
}

// stopWait waits for the copy of the snapshot named name to end.
func (m *Manager) stopWait(t *testing.T, name string) {
	t.Helper()
	m.mu.Lock()
	var j *job
	for _, jj := range m.jobs {
		j = jj
	}
	m.mu.Unlock()
	if j != nil {
		<-j.done
	}
}

func TestACopyCutShortLeavesNothingThatLooksWhole(t *testing.T) {
	w := newWorld(t)
	w.cp.fail = errors.New("killed mid-copy")
	m := w.manager(time.Minute)
	ctx := context.Background()
	if snap, err := m.Create(ctx, "snap-1", src); err == nil {
		t.Fatalf("Create with a failing copy: %+v", snap)
	}
	entries, _ := os.ReadDir(filepath.Join(w.root, Area))
	if len(entries) != 0 {
		t.Errorf("left in the area: %v", entries)
	}
	w.cp.fail = nil
	if snap, err := m.Create(ctx, "snap-1", src); err != nil || !snap.Ready {
		t.Fatalf("Create again: %+v, %v", snap, err)
	}
}

func TestACopyInPlaceWithItsEntryNotReadyIsAdopted(t *testing.T) {
	w := newWorld(t)
	m := w.manager(time.Minute)
	ctx := context.Background()
	if _, err := m.Create(ctx, "snap-1", src); err != nil {
		t.Fatal(err)
	}
	// The entry write after the rename was lost.
	e, _ := w.store.Get(ctx, snapshotKey(fs1, KeyOf("snap-1")))
	snap, _ := decodeSnapshot(e)
	snap.Ready = false
	e.Value = mustJSON(t, snap)
	if _, err := w.store.Update(ctx, e); err != nil {
		t.Fatal(err)
	}
	again := w.manager(time.Minute) // a restarted controller
	if snap, err := again.Create(ctx, "snap-1", src); err != nil || !snap.Ready {
		t.Fatalf("Create: %+v, %v", snap, err)
	}
	if n := w.cp.n.Load(); n != 1 {
		t.Errorf("%d copies, want 1 (adopted)", n)
	}
}

func TestDeleteRemovesTheCopyThenTheEntry(t *testing.T) {
	w := newWorld(t)
	m := w.manager(time.Minute)
	ctx := context.Background()
	snap, err := m.Create(ctx, "snap-1", src)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{snap.ID, snap.ID, "efssnap:" + fs1 + ":00000000000000000000000000000000", "not-an-id", ""} {
		if err := m.Delete(ctx, id); err != nil {
			t.Errorf("Delete(%q): %v", id, err)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(w.root, Area)); len(entries) != 0 {
		t.Errorf("left in the area: %v", entries)
	}
	if _, err := m.Get(ctx, snap.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete: %v", err)
	}
}

func TestDeleteDuringTheCopyStopsIt(t *testing.T) {
	w := newWorld(t)
	w.cp.gate = make(chan struct{})
	m := w.manager(time.Millisecond)
	ctx := context.Background()
	snap, err := m.Create(ctx, "snap-1", src)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(w.root, Area)); len(entries) != 0 {
		t.Errorf("left in the area: %v", entries)
	}
	if list, _ := m.List(ctx, ""); len(list) != 0 {
		t.Errorf("listed after Delete: %v", list)
	}
}

func TestRestoreRenamesAWholeCopyOntoTheNewRoot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(root string) error
		want    error
	}{
		{"absent root", func(string) error { return nil }, nil},
		{"empty root", func(root string) error { return os.MkdirAll(filepath.Join(root, "base", "new"), 0o755) }, nil},
		{"root with data", func(root string) error {
			if err := os.MkdirAll(filepath.Join(root, "base", "new"), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(root, "base", "new", "old"), nil, 0o644)
		}, ErrNotEmpty},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			m := w.manager(time.Minute)
			ctx := context.Background()
			snap, err := m.Create(ctx, "snap-1", src)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.prepare(w.root); err != nil {
				t.Fatal(err)
			}
			from := Source{SnapshotID: snap.ID, SnapshotLife: snap.Life, FileSystem: fs1, Path: DataDir(snap.CopyKey()), UID: 0, GID: 0}
			to := Target{Name: "pvc-new", VolumeID: "efs:" + fs1 + "::fsap-00000000000000009", FileSystem: fs1, Path: "/base/new",
				UID: 1001, GID: 1002, Mode: 0o2750}
			if err := m.BeginRestore(ctx, to, from); err != nil {
				t.Fatal(err)
			}
			err = m.Restore(ctx, to, from)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Restore: %v, want %v", err, tc.want)
			}
			if tc.want != nil {
				return
			}
			fi, err := os.Stat(filepath.Join(w.root, "base", "new", "a", "f"))
			if err != nil {
				t.Fatal(err)
			}
			if st := fileOwner(fi); st != [2]int{1001, 1002} {
				t.Errorf("restored file owned by %v, want the new volume's ids", st)
			}
			root, _ := os.Stat(filepath.Join(w.root, "base", "new"))
			if root.Mode()&os.ModePerm != 0o750 || root.Mode()&os.ModeSetgid == 0 {
				t.Errorf("root mode %v", root.Mode())
			}
			// A repeat (the answer was lost) copies nothing again.
			n := w.cp.n.Load()
			if err := m.Restore(ctx, to, from); err != nil || w.cp.n.Load() != n {
				t.Errorf("repeat: %v, %d copies more", err, w.cp.n.Load()-n)
			}
			// DeleteSnapshot is refused while a restore from it is
			// unfinished, not after.
			if err := m.Delete(ctx, snap.ID); err != nil {
				t.Errorf("Delete after the restore: %v", err)
			}
		})
	}
}

func TestDeleteSnapshotWaitsForUnfinishedRestoresOfLiveVolumes(t *testing.T) {
	w := newWorld(t)
	m := w.manager(time.Minute)
	ctx := context.Background()
	snap, err := m.Create(ctx, "snap-1", src)
	if err != nil {
		t.Fatal(err)
	}
	from := Source{SnapshotID: snap.ID, SnapshotLife: snap.Life, FileSystem: fs1, Path: DataDir(snap.CopyKey()), UID: -1, GID: -1}
	to := Target{Name: "pvc-new", VolumeID: "efs:" + fs1 + "::fsap-00000000000000009", FileSystem: fs1, Path: "/base/new", UID: -1, GID: -1}
	if err := m.BeginRestore(ctx, to, from); err != nil {
		t.Fatal(err)
	}
	w.live["pvc-new"] = true
	if err := m.Delete(ctx, snap.ID); !errors.Is(err, ErrInUse) {
		t.Fatalf("Delete with a restore unfinished: %v, want ErrInUse", err)
	}
	w.live["pvc-new"] = false // its claim went, the collector removed its record
	if err := m.Delete(ctx, snap.ID); err != nil {
		t.Fatalf("Delete once the volume is gone: %v", err)
	}
}

func TestARenameWhoseDoneWasLostIsFinishedNotCopiedOver(t *testing.T) {
	w := newWorld(t)
	m := w.manager(time.Minute)
	ctx := context.Background()
	from := src
	to := Target{Name: "pvc-clone", VolumeID: "efs:" + fs1 + "::fsap-00000000000000009", FileSystem: fs1, Path: "/base/clone", UID: -1, GID: -1}
	if err := m.BeginRestore(ctx, to, from); err != nil {
		t.Fatal(err)
	}
	if err := m.Restore(ctx, to, from); err != nil {
		t.Fatal(err)
	}
	e, _ := w.store.Get(ctx, restoreKey(fs1, to.VolumeID))
	var r restore
	mustUnJSON(t, e.Value, &r)
	r.Done = false // lost with a restart, after the rename
	e.Value = mustJSON(t, r)
	if _, err := w.store.Update(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := w.manager(time.Minute).Restore(ctx, to, from); err != nil {
		t.Fatalf("Restore after a restart: %v", err)
	}
}

func TestCollectRestoresRemovesThoseOfVolumesGone(t *testing.T) {
	w := newWorld(t)
	m := w.manager(time.Minute)
	ctx := context.Background()
	for _, name := range []string{"kept", "gone"} {
		to := Target{Name: name, VolumeID: "efsdir:" + fs1 + ":/base/" + name, FileSystem: fs1, Path: "/base/" + name, UID: -1, GID: -1}
		if err := m.BeginRestore(ctx, to, src); err != nil {
			t.Fatal(err)
		}
	}
	w.live["kept"] = true
	// An attempt at the restore of the volume gone, cut short.
	stage := filepath.Join(w.root, Area, ".restore-"+KeyOf("efsdir:"+fs1+":/base/gone")+"-0123")
	if err := os.MkdirAll(filepath.Join(stage, "half"), 0o700); err != nil {
		t.Fatal(err)
	}
	if n, err := m.CollectRestores(ctx); err != nil || n != 1 {
		t.Fatalf("CollectRestores: %d, %v; want 1", n, err)
	}
	if _, err := m.readRestore(ctx, fs1, "efsdir:"+fs1+":/base/kept"); err != nil {
		t.Errorf("the live volume's restore: %v", err)
	}
	if _, err := os.Stat(stage); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the given-up restore's directory: %v", err)
	}
}

// Two controllers at once (a leader change with calls in flight): both
// copy the same snapshot, and both restore the same volume; the first
// rename wins, the other attempt's directory goes, and each answers the
// whole copy.
func TestTwoControllersCopyingAtOnceLeaveOneWholeCopy(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	gates := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	var ms [2]*Manager
	for i := range ms {
		cp := &cpCopier{gate: gates[i]}
		ms[i] = New(Config{Store: w.store, Mount: dirMount(w.root), Copy: cp.copy, Wait: time.Millisecond,
			VolumeLive: func(context.Context, string, string, string) (bool, error) { return true, nil }})
	}
	for i, m := range ms {
		if snap, err := m.Create(ctx, "snap-1", src); err != nil && !errors.Is(err, keylockBusy) || err == nil && snap.Ready {
			t.Fatalf("controller %d: %+v, %v; want a copy under way", i, snap, err)
		}
	}
	// Either order: the second rename finds the first's copy.
	close(gates[1])
	ms[1].stopWait(t, "snap-1")
	close(gates[0])
	ms[0].stopWait(t, "snap-1")
	for i, m := range ms {
		m.cfg.Wait = time.Minute
		if snap, err := m.Create(ctx, "snap-1", src); err != nil || !snap.Ready {
			t.Fatalf("controller %d after both copies: %+v, %v", i, snap, err)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(w.root, Area))
	snap, err := ms[0].Get(ctx, ID(fs1, KeyOf("snap-1")))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != snap.CopyKey() {
		t.Errorf("the area holds %v, want the one copy", entries)
	}
}

// TestStopRestoreEndsTheCopyBeforeItsRename: a restore given up (its
// volume deleted while it copies) is stopped before the delete goes on;
// after StopRestore its rename never lands on the volume's path.
func TestStopRestoreEndsTheCopyBeforeItsRename(t *testing.T) {
	w := newWorld(t)
	m := w.manager(time.Millisecond)
	ctx := context.Background()
	w.cp.gate = make(chan struct{})
	close(w.cp.gate) // the snapshot's copy runs
	snap, err := m.Create(ctx, "snap-1", src)
	if err != nil {
		t.Fatal(err)
	}
	m.stopWait(t, "snap-1")
	if snap, err = m.Create(ctx, "snap-1", src); err != nil || !snap.Ready {
		t.Fatalf("Create: %+v, %v", snap, err)
	}
	w.cp.gate = make(chan struct{}) // the restore's copy blocks
	from := Source{SnapshotID: snap.ID, SnapshotLife: snap.Life, FileSystem: fs1, Path: DataDir(snap.CopyKey()), UID: -1, GID: -1}
	to := Target{Name: "pvc-new", VolumeID: "efs:" + fs1 + "::fsap-00000000000000009", FileSystem: fs1, Path: "/base/new", UID: -1, GID: -1}
	if err := m.BeginRestore(ctx, to, from); err != nil {
		t.Fatal(err)
	}
	if err := m.Restore(ctx, to, from); !errors.Is(err, ErrPending) {
		t.Fatalf("Restore while copying: %v, want ErrPending", err)
	}
	m.StopRestore(fs1, to.VolumeID)
	close(w.cp.gate)
	if m.running(restoreKey(fs1, to.VolumeID)) {
		t.Fatal("the restore's copy still runs after StopRestore")
	}
	if _, err := os.Stat(filepath.Join(w.root, "base", "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the volume's path after StopRestore: %v, want nothing there", err)
	}
	for _, n := range areaNames(w.root) {
		if n != snap.CopyKey() {
			t.Errorf("the area keeps %s after the restore was stopped", n)
		}
	}
}

// TestCollectCopiesRemovesOnlyDeadLivesCopies: a copy renamed into place
// by an attempt that outlived its snapshot's delete (the snapshot since
// made again under its name) is removed, with a dead life's attempt; the
// live copy, a live copy's attempt while it is not ready, and restores'
// directories stay.
func TestCollectCopiesRemovesOnlyDeadLivesCopies(t *testing.T) {
	w := newWorld(t)
	m := w.manager(time.Minute)
	ctx := context.Background()
	old, err := m.Create(ctx, "snap-1", src)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, old.ID); err != nil {
		t.Fatal(err)
	}
	live, err := m.Create(ctx, "snap-1", src)
	if err != nil || !live.Ready || live.CopyKey() == old.CopyKey() {
		t.Fatalf("made again: %+v, %v; want ready, another copy than %s", live, err, old.CopyKey())
	}
	other, err := m.Create(ctx, "snap-2", src)
	if err != nil {
		t.Fatal(err)
	}
	// The pending one's attempt (as if copying), and the dead life's copy
	// and attempt.
	pending := snapshotKey(fs1, KeyOf("snap-3"))
	e, err := w.store.Create(ctx, journal.Entry{Key: pending, Value: mustJSON(t, Snapshot{Name: "snap-3", Source: src.VolumeID, Life: "abc"})})
	if err != nil {
		t.Fatal(err)
	}
	p, err := decodeSnapshot(e)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{old.CopyKey() + "/data/a", ".tmp-" + old.CopyKey() + "-x", ".tmp-" + p.CopyKey() + "-y", ".restore-" + KeyOf("v") + "-z"} {
		if err := os.MkdirAll(filepath.Join(w.root, Area, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	n, err := m.CollectCopies(ctx)
	if err != nil || n != 2 {
		t.Fatalf("CollectCopies: %d, %v; want the dead life's copy and attempt", n, err)
	}
	want := []string{".restore-" + KeyOf("v") + "-z", ".tmp-" + p.CopyKey() + "-y", live.CopyKey(), other.CopyKey()}
	slices.Sort(want)
	if got := areaNames(w.root); !slices.Equal(got, want) {
		t.Errorf("the area holds %v, want %v", got, want)
	}
	if !holdsCp(filepath.Join(w.root, DataDir(live.CopyKey()))) {
		t.Errorf("the live copy is not whole")
	}
}

// A dead life's copy on a file system whose last snapshot is gone (an
// attempt renamed into place, its process killed before it saw the
// snapshot deleted) is collected too: the file systems with a snapshot
// area are recorded, not inferred from the snapshots left.
func TestCollectCopiesOnAFileSystemWithNoSnapshotLeft(t *testing.T) {
	w := newWorld(t)
	m := w.manager(time.Minute)
	ctx := context.Background()
	snap, err := m.Create(ctx, "snap-1", src)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(w.root, DataDir(snap.CopyKey()), "a"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A new process: nothing in memory says the file system had snapshots.
	n, err := w.manager(time.Minute).CollectCopies(ctx)
	if err != nil || n != 1 {
		t.Fatalf("CollectCopies: %d, %v; want the dead life's copy", n, err)
	}
	if got := areaNames(w.root); len(got) != 0 {
		t.Errorf("the area holds %v, want nothing", got)
	}
}

// holdsCp: the cp copier's tree (vol/a/f).
func holdsCp(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "a", "f"))
	return err == nil && string(b) == "hello"
}
