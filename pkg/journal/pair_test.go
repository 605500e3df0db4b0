package journal_test

import (
	"errors"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/journal/journaltest"
)

// The test store of pairs keeps the contract the Lease store does.
func TestPairedConformance(t *testing.T) {
	open := func(t *testing.T) journal.Store {
		return &journaltest.Paired{Memory: journal.NewMemory(), Apart: func(a, b journal.Key) bool { return b.Name == "50001" }}
	}
	journaltest.Conformance(t, open)
	journaltest.PairConformance(t, open)
}

// BeginHeld makes the record with its id held in one write where the
// store can; else, and where either entry exists, it is Begin, and the
// caller's Hold decides (what a create did before pairs).
func TestBeginHeldIsBeginAndHoldInOneWrite(t *testing.T) {
	const fs = journaltest.FS1
	v := journal.Volume{FileSystem: fs, Token: "pvc-1", Name: "pvc-1", Path: "/pvc-1", UID: 50000, GID: 50000, Allocated: 50000}
	for _, tc := range []struct {
		name           string
		store          journal.Store
		before         func(t *testing.T, j *journal.Journal, s journal.Store)
		made, held     bool
		holdAfter      error // the caller's Hold when not held
		holdAgainAfter bool
	}{
		{name: "kept together: one write", store: &journaltest.Paired{Memory: journal.NewMemory()}, made: true, held: true},
		{name: "no pairs: Begin", store: journal.NewMemory(), made: true},
		{name: "apart: Begin", store: &journaltest.Paired{Memory: journal.NewMemory(), Apart: func(a, b journal.Key) bool { return true }}, made: true},
		{name: "the record exists: Begin finds it", store: &journaltest.Paired{Memory: journal.NewMemory()},
			before: func(t *testing.T, j *journal.Journal, _ journal.Store) {
				if _, _, err := j.Begin(t.Context(), v); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "another volume holds the id: Begin, and the Hold finds it taken", store: &journaltest.Paired{Memory: journal.NewMemory()},
			before: func(t *testing.T, j *journal.Journal, _ journal.Store) {
				o := v
				o.Token, o.Name, o.Path = "pvc-2", "pvc-2", "/pvc-2"
				r, _, err := j.Begin(t.Context(), o)
				if err == nil {
					err = j.HoldID(t.Context(), r)
				}
				if err != nil {
					t.Fatal(err)
				}
			}, made: true, holdAfter: journal.ErrIDTaken},
		{name: "the volume's token holds the id: Begin, and the Hold is again", store: &journaltest.Paired{Memory: journal.NewMemory()},
			before: func(t *testing.T, j *journal.Journal, s journal.Store) {
				if _, err := s.Create(t.Context(), journal.Entry{Key: journal.Key{Kind: journal.KindID, FileSystem: fs, Name: "50000"}, Value: []byte("pvc-1")}); err != nil {
					t.Fatal(err)
				}
			}, made: true, holdAgainAfter: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := journal.New(tc.store)
			if tc.before != nil {
				tc.before(t, j, tc.store)
			}
			r, made, held, err := j.BeginHeld(t.Context(), v)
			if err != nil {
				t.Fatal(err)
			}
			if made != tc.made || held != tc.held {
				t.Fatalf("made %v held %v, want %v %v", made, held, tc.made, tc.held)
			}
			holder, err := j.IDHolder(t.Context(), fs, 50000)
			if err != nil {
				t.Fatal(err)
			}
			if held {
				if holder != "pvc-1" {
					t.Fatalf("held, and the id is held for %q", holder)
				}
				// As after a Hold that made the entry: a release of the
				// unsent id releases it.
				if err := j.ReleaseUnsentID(t.Context(), r, 50000, true); err != nil {
					t.Fatal(err)
				}
				if holder, _ := j.IDHolder(t.Context(), fs, 50000); holder != "" {
					t.Fatalf("the unsent id is still held for %q", holder)
				}
				return
			}
			again, err := j.Hold(t.Context(), r)
			if !errors.Is(err, tc.holdAfter) || again != tc.holdAgainAfter {
				t.Fatalf("the caller's Hold: again %v, %v; want %v, %v", again, err, tc.holdAgainAfter, tc.holdAfter)
			}
		})
	}
}

// The file record keeps the Store contract, and the Pairer's: its two
// appends are under one lock.
func TestFileConformance(t *testing.T) {
	open := func(t *testing.T) journal.Store {
		s, err := journal.OpenFile(t.TempDir() + "/journal")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	journaltest.Conformance(t, open)
	journaltest.PairConformance(t, open)
}
