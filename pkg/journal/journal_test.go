package journal_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// Volumes keeps what it decoded while a record's version stays: every read
// still answers what is stored now (a changed record's new content, a
// deleted one gone, one written by another journal over the same store),
// and each caller gets records of its own.
func TestVolumesAnswersWhatIsStoredNow(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) journal.Store
	}{
		{"memory", func(*testing.T) journal.Store { return journal.NewMemory() }},
		{"file", func(t *testing.T) journal.Store {
			s, err := journal.OpenFile(t.TempDir() + "/journal")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := tc.store(t)
			j, other := journal.New(store), journal.New(store)
			recs := map[string]*journal.Record{}
			for i := range 3 {
				token := fmt.Sprint("pvc-", i)
				r, _, err := j.Begin(ctx, journal.Volume{FileSystem: "fs-1", Token: token, Name: token, Path: "/" + token, Allocated: journal.NoID})
				if err != nil {
					t.Fatal(err)
				}
				recs[token] = r
			}
			read := func() map[string]string {
				t.Helper()
				got := map[string]string{}
				err := j.Volumes(ctx, "fs-1", func(rs []*journal.Record) error {
					for _, r := range rs {
						got[r.Token] = r.AccessPoint
						r.AccessPoint = "changed by the caller"
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			want := map[string]string{"pvc-0": "", "pvc-1": "", "pvc-2": ""}
			for _, step := range []struct {
				what   string
				change func()
			}{
				{"first read", func() {}},
				{"read again", func() {}},
				{"an access point recorded by another journal", func() {
					r, err := other.Volume(ctx, "fs-1", "pvc-1")
					if err != nil {
						t.Fatal(err)
					}
					if err := other.SetAccessPoint(ctx, r, journal.Made{ID: "fsap-1", Path: r.Path, Token: r.Token, UID: r.UID, GID: r.GID, Allocated: r.Allocated}, false); err != nil {
						t.Fatal(err)
					}
					want["pvc-1"] = "fsap-1"
				}},
				{"a record finished", func() {
					if err := j.Finish(ctx, recs["pvc-0"]); err != nil {
						t.Fatal(err)
					}
					delete(want, "pvc-0")
				}},
			} {
				step.change()
				if got := read(); !maps.Equal(got, want) {
					t.Errorf("%s: %v, want %v", step.what, got, want)
				}
			}
		})
	}
}

// The first MarkDeleting keeps its time; a retry's (another process's, after
// a restart) finds it and keeps it, so a delete counts EFS's listing lag
// from its first attempt.
func TestMarkDeletingKeepsTheFirstMarksTime(t *testing.T) {
	ctx := context.Background()
	store := journal.NewMemory()
	j := journal.New(store)
	r, _, err := j.Begin(ctx, journal.Volume{FileSystem: "fs-1", Token: "pvc-1", Name: "pvc-1", Path: "/pvc-1", Allocated: journal.NoID})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.MarkDeleting(ctx, r); err != nil {
		t.Fatal(err)
	}
	first := r.DeletingSince
	if first.IsZero() {
		t.Fatal("MarkDeleting kept no time")
	}
	again, err := journal.New(store).Volume(ctx, "fs-1", "pvc-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := journal.New(store).MarkDeleting(ctx, again); err != nil {
		t.Fatal(err)
	}
	if !again.DeletingSince.Equal(first) {
		t.Errorf("a second MarkDeleting moved the time from %v to %v", first, again.DeletingSince)
	}
}

// Place: the first file system recorded for a volume wins every later
// Place; Finish of the placed record removes the place entry, so that
// nothing of a deleted volume is left.
// TestBeginHoldsAPlacedRecordToItsPlaceEntry: a placed volume's record is
// the volume's only where its place entry points. A create that read the
// place entry before the previous life's delete removed it, and begins
// the next life after, places it again; one that finds the volume placed
// elsewhere withdraws the record it made (nothing is held or sent under
// it) and answers ErrPlacedElsewhere; a record it found stays.
func TestBeginHoldsAPlacedRecordToItsPlaceEntry(t *testing.T) {
	ctx := context.Background()
	vol := func(fs string) journal.Volume {
		return journal.Volume{FileSystem: fs, Token: "pvc-1", Name: "pvc-1", Path: "/p", Allocated: journal.NoID, Placed: "pvc-1"}
	}
	for _, tc := range []struct {
		name      string
		placed    string // the place entry before Begin ("" none)
		existing  bool   // a record of the volume on fs-a before Begin
		wantErr   error
		wantPlace string
		wantLen   int // entries after
	}{
		{"the place entry gone (the previous life's delete): placed again", "", false, nil, "fs-a", 2},
		{"placed here: begun", "fs-a", false, nil, "fs-a", 2},
		{"placed elsewhere: the record made is withdrawn", "fs-b", false, journal.ErrPlacedElsewhere, "fs-b", 1},
		{"placed elsewhere, a record found: it stays", "fs-b", true, journal.ErrPlacedElsewhere, "fs-b", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := journal.NewMemory()
			j := journal.New(store)
			if tc.existing {
				// Made before the place entry named fs-b (a Begin cut short).
				if _, _, err := j.Begin(ctx, vol("fs-a")); err != nil {
					t.Fatal(err)
				}
				if err := j.Unplace(ctx, "pvc-1", "fs-a"); err != nil {
					t.Fatal(err)
				}
			}
			if tc.placed != "" {
				if _, err := j.Place(ctx, "pvc-1", tc.placed); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := j.Begin(ctx, vol("fs-a"))
			if !errors.Is(err, tc.wantErr) || (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("Begin: %v, want %v", err, tc.wantErr)
			}
			if got, err := j.Placement(ctx, "pvc-1"); err != nil || got != tc.wantPlace {
				t.Errorf("place entry %q (%v), want %q", got, err, tc.wantPlace)
			}
			if store.Len() != tc.wantLen {
				t.Errorf("%d entries, want %d", store.Len(), tc.wantLen)
			}
		})
	}
}

func TestPlaceFirstWinsAndFinishRemovesIt(t *testing.T) {
	ctx := context.Background()
	store := journal.NewMemory()
	j := journal.New(store)
	if got, err := j.Place(ctx, "pvc-1", "fs-2"); err != nil || got != "fs-2" {
		t.Fatalf("first Place: %q, %v", got, err)
	}
	if got, err := j.Place(ctx, "pvc-1", "fs-1"); err != nil || got != "fs-2" {
		t.Fatalf("second Place: %q, %v; want the first's fs-2", got, err)
	}
	r, _, err := j.Begin(ctx, journal.Volume{FileSystem: "fs-2", Token: "pvc-1", Name: "pvc-1", Path: "/p", Allocated: journal.NoID, Placed: "pvc-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Finish(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Placement(ctx, "pvc-1"); err == nil {
		t.Error("place entry left after Finish")
	}
	if store.Len() != 0 {
		t.Errorf("%d entries left", store.Len())
	}
}
