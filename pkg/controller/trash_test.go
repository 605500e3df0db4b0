package controller

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// readData is the content of the file "data" in dir, or the error.
func readData(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "data"))
	if err != nil {
		return "error: " + err.Error()
	}
	return string(b)
}

// Issue 44, item 6: an access point another writer made on a volume's
// directory just before its DeleteVolume, which EFS lists only 2 s later
// (more than --listing-lag says), is not seen by the delete's listing.
// Before the trash the directory was removed at once: that access point's
// data was gone. Now it waits in the trash, and the purge round after the
// window, whose listing shows the access point, moves it back whole.
func TestTrashRestoresADirectoryAnUnlistedAccessPointReaches(t *testing.T) {
	const delay = 2 * time.Second
	r := newRootBed(t, func(c *Config) { c.ListingLag = 100 * time.Millisecond })
	vol := r.mustCreate("pvc-a")
	root := r.rootOf(vol)
	write(t, filepath.Join(root, "data"), "live")
	write(t, filepath.Join(root, "sub/more"), "also live")
	r.emu.SetFault(emulator.OpCreateAccessPoint, emulator.Fault{VisibilityDelay: delay})
	made := time.Now()
	r.handMade("/pvc-a")
	if err := r.delete(vol); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if time.Since(made) >= delay {
		t.Skip("the delete took longer than the listing's lag: nothing was hidden")
	}
	if es := r.trash(); len(es) != 1 || es[0].Orig != "/pvc-a" {
		t.Fatalf("trash: %v, want /pvc-a waiting (its directory was removed, not moved)", es)
	}
	for len(r.listed()) < 1 { // until EFS lists the hand-made one
		time.Sleep(50 * time.Millisecond)
	}
	if err := r.purge(r.ctx()); err != nil {
		t.Fatalf("purge within the window: %v", err)
	}
	if es := r.trash(); len(es) != 1 {
		t.Fatalf("trash within the window: %v, want the entry waiting", es)
	}
	r.pastWindow()
	if err := r.purge(r.ctx()); err != nil {
		t.Fatalf("purge: %v", err)
	}
	if got := readData(t, root); got != "live" {
		t.Fatalf("data of the access point made before the delete: %q, want it restored", got)
	}
	if b, err := os.ReadFile(filepath.Join(root, "sub/more")); err != nil || string(b) != "also live" {
		t.Fatalf("restored tree: %q, %v", b, err)
	}
	if es := r.trash(); len(es) != 0 {
		t.Fatalf("trash after the restore: %v", es)
	}
	if r.svc.RootDirsKept() != 1 {
		t.Fatalf("RootDirsKept() = %d, want 1", r.svc.RootDirsKept())
	}
}

// With nothing else reaching it, a deleted volume's directory leaves its
// path at once, waits in the trash through the window (a purge round
// within it keeps it whole), and the first round after the window purges
// it. Before the trash the directory was destroyed within the delete.
func TestTrashPurgesAfterTheWindowAndNotBefore(t *testing.T) {
	r := newRootBed(t)
	vol := r.mustCreate("pvc-a")
	root := r.rootOf(vol)
	write(t, filepath.Join(root, "data"), "old")
	if err := r.delete(vol); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("deleted volume's directory still at its path: %v", err)
	}
	es := r.trash()
	if len(es) != 1 || es[0].Orig != "/pvc-a" || es[0].Purging {
		t.Fatalf("trash: %v, want /pvc-a waiting", es)
	}
	r.skew.Add(int64(r.svc.trashWindow() - 5*time.Second))
	if err := r.purge(r.ctx()); err != nil {
		t.Fatalf("purge within the window: %v", err)
	}
	if got := readData(t, r.trashOf(es[0])); got != "old" {
		t.Fatalf("trash entry within the window: %q, want it whole", got)
	}
	r.skew.Add(int64(10 * time.Second))
	if err := r.purge(r.ctx()); err != nil {
		t.Fatalf("purge: %v", err)
	}
	if es := r.trash(); len(es) != 0 {
		t.Fatalf("trash after the window: %v, want it purged", es)
	}
	if r.svc.RootDirsKept() != 0 {
		t.Fatalf("RootDirsKept() = %d, want 0", r.svc.RootDirsKept())
	}
}

// The next delete on the file system purges what waited past its window,
// without a round of the collector.
func TestNextDeletePurgesTheTrash(t *testing.T) {
	r := newRootBed(t)
	a, b := r.mustCreate("pvc-a"), r.mustCreate("pvc-b")
	if err := r.delete(a); err != nil {
		t.Fatal(err)
	}
	r.pastWindow()
	if err := r.delete(b); err != nil {
		t.Fatal(err)
	}
	if es := r.trash(); len(es) != 1 || es[0].Orig != "/pvc-b" {
		t.Fatalf("trash: %v, want only /pvc-b waiting", es)
	}
}

func TestTrashNameRoundTrips(t *testing.T) {
	at := time.Unix(1700000000, 123456789)
	for _, p := range []string{"/a", "/base/ns/pvc-x-0123", "/x/y.z"} {
		e, ok := ParseTrashName(TrashName(p, at))
		if !ok || e.Orig != p || !e.At.Equal(at) || e.Purging {
			t.Errorf("ParseTrashName(TrashName(%q)) = %+v, %v", p, e, ok)
		}
		if e, ok := ParseTrashName(purgePrefix + TrashName(p, at)); !ok || !e.Purging || e.Orig != p {
			t.Errorf("purging %q: %+v, %v", p, e, ok)
		}
	}
	for _, n := range []string{"", "x", "1.", "1.Lw", "1.Li4", "a.L2E", ".rmtree-1"} { // "/", "/..": never
		if e, ok := ParseTrashName(n); ok {
			t.Errorf("ParseTrashName(%q) = %+v", n, e)
		}
	}
	if n := TrashName("/"+string(make([]byte, 99)), at); len(purgePrefix+n) > 255 {
		t.Errorf("a 100-byte path makes a %d-byte name", len(n))
	}
}

// listed is what EFS lists now.
func (r *rootBed) listed() []efs.AccessPoint {
	r.t.Helper()
	aps, err := efs.Collect(r.ctx(), r.client.ListAccessPoints, testFS)
	if err != nil {
		r.t.Fatal(err)
	}
	return aps
}
