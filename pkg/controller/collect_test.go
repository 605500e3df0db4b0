package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
)

// recordOf is the record of volume name, nil if none.
func (b *bed) recordOf(name string) *journal.Record {
	b.t.Helper()
	var found *journal.Record
	if err := b.svc.journal.Volumes(b.ctx(), "", func(rs []*journal.Record) error {
		for _, r := range rs {
			if r.Name == name {
				found = r
			}
		}
		return nil
	}); err != nil {
		b.t.Fatal(err)
	}
	return found
}

// orphanParams is a class's parameters with the claim the provisioner
// names (--extra-create-metadata).
func orphanParams(extra ...string) map[string]string {
	return params(append([]string{"csi.storage.k8s.io/pvc/name", "gone", "csi.storage.k8s.io/pvc/namespace", "ns"}, extra...)...)
}

// failCreate makes a create of name whose CreateAccessPoint EFS never
// applies: its record stays, naming no access point.
func (b *bed) failCreate(name string, p map[string]string, secrets map[string]string) *journal.Record {
	b.t.Helper()
	// Held past the call's deadline and dropped with the connection, not
	// 500s until it: a retry sent just before the deadline could reach the
	// emulator after the faults are reset and be applied (make test on a
	// loaded machine: the other-directory case found its token taken; the
	// same fix as pkg/orphans' failedCreate).
	b.emu.SetFault(emulator.OpCreateAccessPoint, emulator.Fault{Latency: time.Hour})
	defer b.emu.ResetFaults()
	ctx, cancel := context.WithTimeout(b.ctx(), 200*time.Millisecond)
	defer cancel()
	if _, err := b.svc.CreateVolume(ctx, withSecrets(createReq(name, 1<<30, p), secrets)); err == nil {
		b.t.Fatal("CreateVolume succeeded through a failing EFS")
	}
	rec := b.recordOf(name)
	if rec == nil || rec.AccessPoint != "" {
		b.t.Fatalf("record of a failed create: %+v", rec)
	}
	return rec
}

// CollectOrphan acts only on what it proves under the volume's locks: a
// record that changed since the collector read it, or whose create or
// delete is running, is left as it is; a recorded access point is deleted
// with its record and id.
func TestCollectOrphan(t *testing.T) {
	for _, tt := range []struct {
		name string
		// prepare returns the record the collector read, after changing
		// what the controller then finds; release ends what it started.
		prepare func(t *testing.T, b *bed, volID string, rec *journal.Record) (seen *journal.Record, release func())
		want    error  // nil: collected
		after   string // what is left: "kept" (access point and record), "gone" (neither)
	}{
		{"collected", func(t *testing.T, b *bed, _ string, rec *journal.Record) (*journal.Record, func()) {
			return rec, func() {}
		}, nil, "gone"},
		{"bound since it was read", func(t *testing.T, b *bed, _ string, rec *journal.Record) (*journal.Record, func()) {
			seen := *rec
			if err := b.svc.journal.MarkBound(b.ctx(), rec); err != nil {
				t.Fatal(err)
			}
			return &seen, func() {}
		}, ErrNotOrphan, "kept"},
		{"its claim changed since it was read", func(t *testing.T, b *bed, _ string, rec *journal.Record) (*journal.Record, func()) {
			seen := *rec
			seen.ClaimName = "another"
			return &seen, func() {}
		}, ErrNotOrphan, "kept"},
		{"its record is gone", func(t *testing.T, b *bed, _ string, rec *journal.Record) (*journal.Record, func()) {
			seen := *rec
			seen.Token = "pvc-never-recorded"
			return &seen, func() {}
		}, ErrNotOrphan, "kept"},
		{"a create of its name is running", func(t *testing.T, b *bed, _ string, rec *journal.Record) (*journal.Record, func()) {
			unlock, err := b.svc.locks.TryLock(core.NameKey(rec.Name))
			if err != nil {
				t.Fatal(err)
			}
			return rec, unlock
		}, keylock.ErrBusy, "kept"},
		{"a delete of it is running", func(t *testing.T, b *bed, volID string, rec *journal.Record) (*journal.Record, func()) {
			g := newGate()
			b.hook.set("DeleteAccessPoint", g.hold, nil)
			done := async(func() error { return b.delete(volID) })
			<-g.arrived
			return rec, func() {
				g.open()
				if err := <-done; err != nil {
					t.Errorf("the delete: %v", err)
				}
			}
		}, keylock.ErrBusy, "gone"}, // by that delete
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBed(t)
			r, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-1", 1<<30, orphanParams()))
			if err != nil {
				t.Fatal(err)
			}
			volID := r.Volume.VolumeId
			rec := b.recordOf("pvc-1")
			seen, release := tt.prepare(t, b, volID, rec)
			err = b.svc.CollectOrphan(b.ctx(), seen)
			release()
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("CollectOrphan: %v, want %v", err, tt.want)
			}
			if tt.after == "kept" {
				b.wantAccessPoints(1)
				if b.recordOf("pvc-1") == nil {
					t.Error("record released")
				}
				return
			}
			b.wantAccessPoints(0)
			if r := b.recordOf("pvc-1"); r != nil {
				t.Errorf("record stays: %+v", r)
			}
			if h, err := b.svc.journal.IDHolder(b.ctx(), testFS, rec.Allocated); err != nil || h != "" {
				t.Errorf("id %d held by %q (%v)", rec.Allocated, h, err)
			}
		})
	}
}

// A reuseAccessPoint volume's create holds its token's lock besides its
// name's: a create of another volume name of the same claim (the token is
// the claim's) makes the collection of the orphan wait too.
func TestCollectOrphanTakesTheTokensLock(t *testing.T) {
	b := newBed(t, descriptive) // a reuseAccessPoint token proves nothing without the tags
	if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-1", 1<<30, orphanParams("reuseAccessPoint", "true"))); err != nil {
		t.Fatal(err)
	}
	rec := b.recordOf("pvc-1")
	if rec.Token == rec.Name {
		t.Fatalf("token %q is the name", rec.Token)
	}
	unlock, err := b.svc.locks.TryLock(core.NameKey(rec.Token))
	if err != nil {
		t.Fatal(err)
	}
	err = b.svc.CollectOrphan(b.ctx(), rec)
	unlock()
	if !errors.Is(err, keylock.ErrBusy) {
		t.Fatalf("CollectOrphan with the token's lock held: %v, want ErrBusy", err)
	}
	if err := b.svc.CollectOrphan(b.ctx(), rec); err != nil {
		t.Fatal(err)
	}
	b.wantAccessPoints(0)
}

// A recorded access point that is gone already (deleted, and the record's
// release failed after) leaves a record the collector releases: its file
// system is visible, so "not found" is the proof.
func TestCollectOrphanWhoseAccessPointIsGone(t *testing.T) {
	b := newBed(t)
	r, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-1", 1<<30, orphanParams()))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.client.DeleteAccessPoint(b.ctx(), apOf(t, r.Volume.VolumeId)); err != nil {
		t.Fatal(err)
	}
	if err := b.svc.CollectOrphan(b.ctx(), b.recordOf("pvc-1")); err != nil {
		t.Fatal(err)
	}
	if rec := b.recordOf("pvc-1"); rec != nil {
		t.Errorf("record stays: %+v", rec)
	}
}

// Records the controller's own credentials cannot prove anything about are
// never collected: a volume of a class with a role secret (its access point
// is in another account, recorded or not), and records of a backend this
// controller has no client for.
func TestCollectOrphanOutOfReach(t *testing.T) {
	for _, tt := range []struct {
		name string
		make func(t *testing.T, b *bed, other *otherAccount) *journal.Record
	}{
		{"a role's volume", func(t *testing.T, b *bed, other *otherAccount) *journal.Record {
			p := orphanParams()
			p["fileSystemId"] = otherFS
			if _, err := b.svc.CreateVolume(b.ctx(), withSecrets(createReq("pvc-1", 1<<30, p), role)); err != nil {
				t.Fatal(err)
			}
			return b.recordOf("pvc-1")
		}},
		{"a role's failed create", func(t *testing.T, b *bed, _ *otherAccount) *journal.Record {
			rec, _, err := b.svc.journal.Begin(b.ctx(), journal.Volume{FileSystem: otherFS, Token: "pvc-1", Name: "pvc-1",
				Path: "/pvc-1", UID: 50000, GID: 50000, Allocated: 50000, ClaimNamespace: "ns", ClaimName: "gone"})
			if err != nil {
				t.Fatal(err)
			}
			return rec
		}},
		{"an S3 Files volume without an S3 Files client", func(t *testing.T, b *bed, _ *otherAccount) *journal.Record {
			rec, _, err := b.svc.journal.Begin(b.ctx(), journal.Volume{FileSystem: testFS, Token: "pvc-1", Name: "pvc-1",
				API: string(APIS3Files), Path: "/pvc-1", UID: 50000, GID: 50000, Allocated: journal.NoID, ClaimNamespace: "ns", ClaimName: "gone"})
			if err != nil {
				t.Fatal(err)
			}
			return rec
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBed(t)
			other := newOtherAccount(t)
			b.svc.backends = other
			rec := tt.make(t, b, other)
			if err := b.svc.CollectOrphan(b.ctx(), rec); !errors.Is(err, ErrNotCollectable) {
				t.Fatalf("CollectOrphan: %v, want ErrNotCollectable", err)
			}
			if b.recordOf("pvc-1") == nil {
				t.Error("record released")
			}
			if rec.AccessPoint != "" {
				if _, err := other.client.DescribeAccessPoint(b.ctx(), rec.AccessPoint); err != nil {
					t.Errorf("the role's access point: %v", err)
				}
			}
		})
	}
}

// A record naming no access point (its create failed) is released with its
// id when no access point carries its token, and kept when one carries it
// at another root directory.
func TestCollectOrphanWithoutRecordedAccessPoint(t *testing.T) {
	for _, tt := range []struct {
		name     string
		otherDir bool
	}{{"no access point with the token", false}, {"the token at another directory", true}} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBed(t)
			rec := b.failCreate("pvc-1", orphanParams(), nil)
			if tt.otherDir {
				if _, err := b.client.CreateAccessPoint(b.ctx(), efs.CreateAccessPointInput{FileSystemID: testFS,
					ClientToken: rec.SentToken(), Path: "/static-volume", PosixUser: &efs.PosixUser{UID: 1, GID: 1}}); err != nil {
					t.Fatal(err)
				}
			}
			err := b.svc.CollectOrphan(b.ctx(), rec)
			if tt.otherDir {
				if !errors.Is(err, ErrNotCollectable) {
					t.Fatalf("CollectOrphan: %v, want ErrNotCollectable", err)
				}
				b.wantAccessPoints(1)
				if b.recordOf("pvc-1") == nil {
					t.Error("record released")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r := b.recordOf("pvc-1"); r != nil {
				t.Errorf("record stays: %+v", r)
			}
			if h, err := b.svc.journal.IDHolder(b.ctx(), testFS, rec.Allocated); err != nil || h != "" {
				t.Errorf("id %d held by %q (%v)", rec.Allocated, h, err)
			}
		})
	}
}
