package journal_test

import (
	"context"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// The sweep releases an id held for a volume only once that volume's
// record is gone or being deleted: a record that exists keeps every id
// held for it, even one it does not hold (a create of it may be moving to
// that id: it holds the id before its record write). ToSweep lists the
// candidates apart from the sweep's own holds; ReleaseOrphanID decides on a
// fresh read, whatever the listing saw.
func TestReleaseOrphanIDOnlyForAVolumeWhoseRecordIsGone(t *testing.T) {
	ctx := context.Background()
	const fs, token = "fs-1", "pvc-1"
	for _, tc := range []struct {
		name   string
		setup  func(t *testing.T, j *journal.Journal, rec *journal.Record)
		listed bool // ToSweep names 60002 held for nobody
		freed  bool
	}{
		{"the record holds another id: kept (a create may be moving to it)", nil, false, false},
		{"the record is gone: released", func(t *testing.T, j *journal.Journal, rec *journal.Record) {
			must(t, j.MarkDeleting(ctx, rec))
			must(t, j.Finish(ctx, rec))
		}, true, true},
		{"the record is being deleted: released", func(t *testing.T, j *journal.Journal, rec *journal.Record) {
			must(t, j.MarkDeleting(ctx, rec))
		}, true, true},
		{"a next life of the volume begun since the listing: kept", func(t *testing.T, j *journal.Journal, rec *journal.Record) {
			must(t, j.MarkDeleting(ctx, rec))
			must(t, j.Finish(ctx, rec))
		}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := journal.New(journal.NewMemory())
			rec, _, err := j.Begin(ctx, journal.Volume{FileSystem: fs, Token: token, Name: token, Path: "/" + token, Allocated: 60001})
			must(t, err)
			must(t, j.HoldID(ctx, rec))
			other := *rec
			other.Allocated = 60002
			must(t, j.HoldID(ctx, &other)) // held for the volume, the record at 60001
			if _, err := j.HoldForSweep(ctx, fs, 60003, "fsap-1"); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(t, j, rec)
			}
			holds, orphans, err := j.ToSweep(ctx, fs)
			must(t, err)
			if _, ok := orphans[60003]; ok || holds[60003] != "fsap-1" {
				t.Fatalf("ToSweep: holds %v, orphans %v; want the sweep's own hold among holds only", holds, orphans)
			}
			if got := orphans[60002] == token; got != tc.listed {
				t.Fatalf("ToSweep: orphans %v; listing 60002: %v, want %v", orphans, got, tc.listed)
			}
			if tc.listed && !tc.freed {
				_, _, err := j.Begin(ctx, journal.Volume{FileSystem: fs, Token: token, Name: token, Path: "/" + token, Allocated: 60002})
				must(t, err)
			}
			freed, err := j.ReleaseOrphanID(ctx, fs, 60002, token)
			must(t, err)
			holder, err := j.IDHolder(ctx, fs, 60002)
			must(t, err)
			if freed != tc.freed || (holder == "") != tc.freed {
				t.Fatalf("released %v (holder now %q), want %v", freed, holder, tc.freed)
			}
		})
	}
	if freed, err := journal.New(journal.NewMemory()).ReleaseOrphanID(ctx, fs, 60009, token); freed || err != nil {
		t.Fatalf("an id no entry holds: released %v, %v", freed, err)
	}
}

// A record being deleted keeps its own id until its Finish: its access
// point or directory may still be live with it, and for a directory volume
// (or an access point under a token other than its GID's) nothing but the
// id table keeps another volume off it (the simulator's wide seed 934).
func TestReleaseOrphanIDKeepsADeletingRecordsOwnID(t *testing.T) {
	ctx := context.Background()
	j := journal.New(journal.NewMemory())
	rec, _, err := j.Begin(ctx, journal.Volume{FileSystem: "fs-1", Token: "dir:1", Name: "pvc-1", Path: "/pvc-1", Allocated: 60001, Dir: true})
	must(t, err)
	must(t, j.HoldID(ctx, rec))
	must(t, j.MarkDeleting(ctx, rec))
	freed, err := j.ReleaseOrphanID(ctx, "fs-1", 60001, "dir:1")
	must(t, err)
	if holder, err := j.IDHolder(ctx, "fs-1", 60001); freed || err != nil || holder != "dir:1" {
		t.Fatalf("id 60001 released %v, held for %q (%v) while its record is being deleted, want dir:1 until its Finish", freed, holder, err)
	}
	must(t, j.Finish(ctx, rec))
	if holder, err := j.IDHolder(ctx, "fs-1", 60001); err != nil || holder != "" {
		t.Fatalf("id 60001 held for %q (%v) after Finish", holder, err)
	}
}

// ReleaseUnsentID releases only the id entry the caller's own Hold wrote:
// another create of the volume that held the id again since (a new
// version) may be sending under it, and keeps it (the simulator's wide
// seed 188758). Without a Hold of its own the caller releases what it
// reads. With onlyMade, an entry the caller's Hold wrote again (the
// volume held it before) is kept (wide seed 676900).
func TestReleaseUnsentIDLeavesAHoldWrittenAgain(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		before   bool // another create of the volume held the id before the caller
		again    bool // a duplicate holds the id again after the caller's Hold
		ownHold  bool // the caller's Record is the one that held it
		onlyMade bool
		wantHeld bool
	}{
		{"only the caller held it: released", false, false, true, false, false},
		{"a duplicate held it again since: kept", false, true, true, false, true},
		{"no Hold of the caller's: released as read", false, true, false, false, false},
		{"onlyMade, the caller made it: released", false, false, true, true, false},
		{"onlyMade, the caller wrote the volume's hold again: kept", true, false, true, true, true},
		{"without onlyMade, the caller's write of the volume's hold: released", true, false, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := journal.New(journal.NewMemory())
			rec, _, err := j.Begin(ctx, journal.Volume{FileSystem: "fs-1", Token: "pvc-1", Name: "pvc-1", Path: "/pvc-1", Allocated: 60001})
			must(t, err)
			if tc.before {
				first := *rec
				must(t, j.HoldID(ctx, &first))
			}
			caller := *rec
			must(t, j.HoldID(ctx, &caller))
			if tc.again {
				dup := *rec
				must(t, j.HoldID(ctx, &dup))
			}
			if !tc.ownHold {
				caller = *rec
			}
			must(t, j.ReleaseUnsentID(ctx, &caller, 60001, tc.onlyMade))
			holder, err := j.IDHolder(ctx, "fs-1", 60001)
			must(t, err)
			if (holder == "pvc-1") != tc.wantHeld {
				t.Fatalf("id 60001 held for %q, want held: %v", holder, tc.wantHeld)
			}
		})
	}
}
