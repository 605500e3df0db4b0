package journal_test

import (
	"context"
	"errors"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// onVolumeRead runs hook once, right after the first Get of a volume
// entry: a writer that acts between two reads of another.
type onVolumeRead struct {
	journal.Store
	hook func()
}

func (o *onVolumeRead) Get(ctx context.Context, k journal.Key) (journal.Entry, error) {
	e, err := o.Store.Get(ctx, k)
	if k.Kind == journal.KindVolume && o.hook != nil {
		h := o.hook
		o.hook = nil
		h()
	}
	return e, err
}

// A create that made an access point under a GID token its record had
// moved off (ErrStaleToken) deleted it and releases the id it held for
// it, unless the record holds that id again, however the record's move
// back interleaves with the release: the move's HoldID writes the entry,
// so a release that read the record before it fails its compare-and-swap
// and reads again. Before HoldID wrote an entry it found held, the
// release deleted the id of a record that sent it (kept-held case).
func TestReleaseMovedIDKeepsWhatTheRecordHoldsAgain(t *testing.T) {
	ctx := context.Background()
	const fs, token = "fs-1", "pvc-1"
	stale := journal.Key{Kind: journal.KindID, FileSystem: fs, Name: "60002"}
	for _, tc := range []struct {
		name     string
		before   func(t *testing.T, j *journal.Journal, rec *journal.Record) // before the release
		during   func(t *testing.T, j *journal.Journal, rec *journal.Record) // between the release's reads
		wantHeld string
	}{
		{"the record holds another id: released", nil, nil, ""},
		{"the record is gone: released", nil, func(t *testing.T, j *journal.Journal, rec *journal.Record) {
			must(t, j.MarkDeleting(ctx, rec))
			must(t, j.Finish(ctx, rec))
		}, ""},
		// Its delete's Finish may have released the id already: an entry
		// held since would be left for nobody (seed 66453).
		{"the record holds the id but is being deleted: released", func(t *testing.T, j *journal.Journal, rec *journal.Record) {
			must(t, j.SetIDs(ctx, rec, 60001, 60002, 60002, 60002, "", 0))
			must(t, j.MarkDeleting(ctx, rec))
		}, nil, ""},
		{"the record is being deleted and holds another id: released", func(t *testing.T, j *journal.Journal, rec *journal.Record) {
			must(t, j.MarkDeleting(ctx, rec))
		}, nil, ""},
		{"the record moves back to the id meanwhile: kept", nil, func(t *testing.T, j *journal.Journal, rec *journal.Record) {
			must(t, j.SetIDs(ctx, rec, 60001, 60002, 60002, 60002, "", 0))
			must(t, j.HoldID(ctx, rec))
		}, token},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hooked := &onVolumeRead{Store: journal.NewMemory()}
			j := journal.New(hooked)
			rec, _, err := j.Begin(ctx, journal.Volume{FileSystem: fs, Token: token, Name: token, Path: "/" + token, Allocated: 60001})
			must(t, err)
			must(t, j.HoldID(ctx, rec))
			// The stale create's hold, from a read of the record at 60002.
			staleView := *rec
			staleView.Allocated = 60002
			must(t, j.HoldID(ctx, &staleView))
			if tc.before != nil {
				tc.before(t, j, rec)
			}
			if tc.during != nil {
				hooked.hook = func() { tc.during(t, j, rec) }
			}
			must(t, j.ReleaseMovedID(ctx, fs, 60002, token))
			e, err := hooked.Store.Get(ctx, stale)
			switch {
			case tc.wantHeld == "" && !errors.Is(err, journal.ErrNotFound):
				t.Fatalf("id 60002 still held (%q, %v): left for nobody", e.Value, err)
			case tc.wantHeld != "" && (err != nil || string(e.Value) != tc.wantHeld):
				t.Fatalf("id 60002 = %q, %v; want held for %q: the record sends it", e.Value, err, tc.wantHeld)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A move off an id because another volume held it (MoveID) does not
// move a record whose id is held for its own volume by the time of the
// move: another create of the volume (a retry, a duplicate) held it once
// the other volume freed it, and may have sent under it. Before, the move
// read the record again on the conflict with that create's confirm and
// moved it all the same, and an access point that create made under the
// id's token was named by nothing (the simulator's seed 10070537,
// testdata/scenarios/leak-move-off-an-id-held-again.txt).
func TestAMoveOffAnIDLeavesOneItsVolumeHoldsAgain(t *testing.T) {
	for _, tc := range []struct {
		name    string
		holder  string // the id's entry when the move is made ("": none)
		confirm bool   // the holder confirms the record (Touch) first
		moved   bool
	}{
		{"free: moved", "", false, true},
		{"another volume's: moved", "pvc-2", false, true},
		{"its own volume's: kept", "pvc-1", false, false},
		{"its own volume's, confirmed: kept", "pvc-1", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := journal.NewMemory()
			j, other := journal.New(store), journal.New(store)
			v := journal.Volume{FileSystem: "fs-1", Token: "pvc-1", Name: "pvc-1", Path: "/pvc-1", UID: 60001, GID: 60001, Allocated: 60001}
			r, _, err := j.Begin(ctx, v)
			if err != nil {
				t.Fatal(err)
			}
			if tc.holder != "" {
				held := &journal.Record{Volume: journal.Volume{FileSystem: "fs-1", Token: tc.holder, Allocated: 60001}}
				if err := other.HoldID(ctx, held); err != nil {
					t.Fatal(err)
				}
			}
			if tc.confirm {
				cur, err := other.Volume(ctx, "fs-1", "pvc-1")
				if err != nil {
					t.Fatal(err)
				}
				if err := other.Touch(ctx, cur); err != nil {
					t.Fatal(err)
				}
			}
			err = j.MoveID(ctx, r, 60001, 60002, 60002, 60002, "csi-gid:fs-1:60002", 1)
			got, rerr := j.Volume(ctx, "fs-1", "pvc-1")
			if rerr != nil {
				t.Fatal(rerr)
			}
			switch {
			case tc.moved && (err != nil || got.Allocated != 60002):
				t.Errorf("MoveID: %v, record on %d; want moved to 60002", err, got.Allocated)
			case !tc.moved && (!errors.Is(err, journal.ErrConflict) || got.Allocated != 60001):
				t.Errorf("MoveID: %v, record on %d; want ErrConflict, kept on 60001", err, got.Allocated)
			}
		})
	}
}
