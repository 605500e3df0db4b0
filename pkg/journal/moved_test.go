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
