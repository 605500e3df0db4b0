package sim

import (
	"errors"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// The simulated EFS keeps the contract of controller.EFS that the real
// client has: a token binds one access point while it exists, the limit
// holds, and a new access point may be listed and described late.
func TestSimulatedEFSKeepsTheClientContract(t *testing.T) {
	now := time.Unix(0, 0)
	w := &efsWorld{fss: map[string]*fileSystem{FS: {id: FS, aps: map[string]*simAP{}, tokens: map[string]string{}, limit: 2}},
		lag: time.Second, rnd: func(int) int { return 2 }, now: func() time.Time { return now }}
	in := efs.CreateAccessPointInput{FileSystemID: FS, ClientToken: "pvc-1", Path: "/pvc-1", PosixUser: &efs.PosixUser{UID: 1, GID: 60000}}
	first, err := w.create(in, "c0", true)
	if err != nil {
		t.Fatal(err)
	}
	var ae *efs.AlreadyExistsError
	if _, err := w.create(in, "c0", true); !errors.As(err, &ae) || ae.AccessPointID != first.ID {
		t.Fatalf("repeated token: %v, want AlreadyExists naming %s", err, first.ID)
	}
	w.lenient = true
	if again, err := w.create(in, "c0", true); err != nil || again.ID != first.ID {
		t.Fatalf("lenient repeat: %v, %v; want %s", again, err, first.ID)
	}
	if aps, _ := w.list(FS); len(aps) != 0 {
		t.Fatalf("listed %d access points within the lag, want 0", len(aps))
	}
	if _, err := w.describe(first.ID); !errors.Is(err, efs.ErrAccessPointNotFound) {
		t.Fatalf("described within the describe lag: %v", err)
	}
	now = now.Add(time.Second)
	if aps, _ := w.list(FS); len(aps) != 1 {
		t.Fatalf("listed %d access points after the lag, want 1", len(aps))
	}
	other := in
	other.ClientToken, other.Path = "pvc-2", "/pvc-2"
	if _, err := w.create(other, "c0", true); err != nil {
		t.Fatal(err)
	}
	other.ClientToken = "pvc-3"
	if _, err := w.create(other, "c0", true); !errors.Is(err, efs.ErrLimitExceeded) {
		t.Fatalf("past the limit: %v", err)
	}
	if err := w.delete(first.ID); err != nil {
		t.Fatal(err)
	}
	if err := w.delete(first.ID); !errors.Is(err, efs.ErrAccessPointNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if again, err := w.create(in, "c0", true); err != nil || again.ID == first.ID {
		t.Fatalf("token after its access point is gone: %v, %v", again, err)
	}
}

// The simulated store keeps journal.Store's contract.
func TestSimulatedStoreKeepsTheStoreContract(t *testing.T) {
	s := newStore("x")
	k := journal.Key{Kind: journal.KindVolume, FileSystem: FS, Name: "pvc-1"}
	e, err := s.create(journal.Entry{Key: k, Value: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.create(journal.Entry{Key: k, Value: []byte("b")}); !errors.Is(err, journal.ErrExists) || string(got.Value) != "a" {
		t.Fatalf("second create: %q, %v", got.Value, err)
	}
	stale := e
	if e, err = s.update(journal.Entry{Key: k, Value: []byte("c"), Version: e.Version}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.update(journal.Entry{Key: k, Value: []byte("d"), Version: stale.Version}); !errors.Is(err, journal.ErrConflict) {
		t.Fatalf("stale update: %v", err)
	}
	if err := s.delete(stale); !errors.Is(err, journal.ErrConflict) {
		t.Fatalf("stale delete: %v", err)
	}
	if err := s.delete(e); err != nil {
		t.Fatal(err)
	}
	if err := s.delete(e); err != nil {
		t.Fatalf("delete of a deleted entry: %v", err)
	}
	if _, err := s.update(e); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("update of a deleted entry: %v", err)
	}
}
