package journal_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// A write for a record that was finished and begun again under the same
// key (the volume's next life) never lands on the next life: what the
// caller made or planned was for the old one. Before, SetAccessPoint
// re-read the key on its conflict and wrote the old life's (deleted)
// access point into the new life's record, and SetIDs moved the new
// life's ids.
func TestWritesForAFinishedRecordLeaveItsNextLifeAlone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(j *journal.Journal, old *journal.Record) error
	}{
		{"SetAccessPoint", func(j *journal.Journal, old *journal.Record) error {
			return j.SetAccessPoint(context.Background(), old, journal.Made{ID: "fsap-old", Path: old.Path, Token: old.Token,
				UID: old.UID, GID: old.GID, Allocated: old.Allocated}, true)
		}},
		{"SetIDs", func(j *journal.Journal, old *journal.Record) error {
			return j.SetIDs(context.Background(), old, old.Allocated, 60002, 60002, 60002, "", 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			now := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
			clock := func() time.Time { now = now.Add(time.Millisecond); return now }
			store := journal.NewMemory()
			a, b := journal.NewClocked(store, clock), journal.NewClocked(store, clock)
			v := journal.Volume{FileSystem: "fs-1", Token: "pvc-1", Name: "pvc-1", Path: "/pvc-1", UID: 60001, GID: 60001, Allocated: 60001}
			old, _, err := a.Begin(ctx, v)
			if err != nil {
				t.Fatal(err)
			}
			// Another replica deletes the volume and a create of it begins
			// its next life.
			gone, err := b.Volume(ctx, "fs-1", "pvc-1")
			if err != nil {
				t.Fatal(err)
			}
			if err := b.MarkDeleting(ctx, gone); err != nil {
				t.Fatal(err)
			}
			if err := b.Finish(ctx, gone); err != nil {
				t.Fatal(err)
			}
			next, made, err := b.Begin(ctx, v)
			if err != nil || !made {
				t.Fatalf("next life: made %v, %v", made, err)
			}
			if err := tc.write(a, old); !errors.Is(err, journal.ErrDeleting) {
				t.Errorf("the old life's write: %v, want ErrDeleting", err)
			}
			now2, err := b.Volume(ctx, "fs-1", "pvc-1")
			if err != nil {
				t.Fatal(err)
			}
			if now2.AccessPoint != "" || now2.Allocated != next.Allocated || !now2.Created.Equal(next.Created) {
				t.Errorf("the next life was written: access point %q, id %d", now2.AccessPoint, now2.Allocated)
			}
		})
	}
}

// A delete's mark names the access point it is for when the record names
// none yet (it agreed by its path: the volume's next life, or a create
// not yet recorded), so that a retry finds the record by that access
// point once it is gone; a record that names one keeps it. Before, such a
// mark named nothing, the retry found no record by the access point and
// answered OK, and the mark stayed for ever (the simulator's seed
// 10747546, testdata/scenarios/liveness-retry-marks-next-life.txt).
func TestAMarkNamesTheAccessPointItIsFor(t *testing.T) {
	for _, tc := range []struct {
		name, recorded, markFor, want string
	}{
		{"names none: named", "", "fsap-old", "fsap-old"},
		{"names one: kept", "fsap-own", "fsap-old", "fsap-own"},
		{"a mark for no access point names none", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			j := journal.New(journal.NewMemory())
			v := journal.Volume{FileSystem: "fs-1", Token: "pvc-1", Name: "pvc-1", Path: "/pvc-1", UID: 60001, GID: 60001, Allocated: 60001}
			r, _, err := j.Begin(ctx, v)
			if err != nil {
				t.Fatal(err)
			}
			if tc.recorded != "" {
				if err := j.SetAccessPoint(ctx, r, journal.Made{ID: tc.recorded, Path: r.Path, Token: r.Token, UID: r.UID, GID: r.GID, Allocated: r.Allocated}, false); err != nil {
					t.Fatal(err)
				}
			}
			marked, err := j.MarkDeletingFor(ctx, r, tc.markFor, func(*journal.Record) bool { return true })
			if err != nil || marked == nil {
				t.Fatalf("MarkDeletingFor = %v, %v", marked, err)
			}
			got, err := j.Volume(ctx, "fs-1", "pvc-1")
			if err != nil {
				t.Fatal(err)
			}
			if !got.Deleting || got.AccessPoint != tc.want {
				t.Errorf("marked record: deleting %v, access point %q; want deleting, %q", got.Deleting, got.AccessPoint, tc.want)
			}
			if tc.want == "" {
				return
			}
			byAP, err := j.ByAccessPoint(ctx, "fs-1", tc.want)
			if err != nil || byAP.Token != "pvc-1" {
				t.Errorf("ByAccessPoint(%s) = %v, %v; want the record", tc.want, byAP, err)
			}
		})
	}
}
