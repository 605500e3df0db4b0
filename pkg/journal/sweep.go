package journal

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The sweep (the orphan collector's, docs/leaks.md "Access points no
// record names"; its steps in docs/design.md) deletes an access point that
// this cluster's creates made under a GID token and that no record names: a
// duplicate create's request that reached EFS after the volume's delete had
// finished, whose caller died before deleting it. It holds the access
// point's id first, in the id table, under a holder no volume has
// (SweepToken): from then on no create sends that GID token (every create
// holds its id before it sends), so none can adopt the access point while
// the sweep decides and deletes. The hold is the sweep's intent, kept in
// the record: one a killed sweep left is resumed (ToSweep), never left held
// for nobody.

// sweepIndex is the Index of an id entry the sweep holds: what a store
// may select such entries by.
const sweepIndex = "sweep"

const sweepPrefix = "sweep:"

// SweepToken is the holder an id entry names while the sweep deletes the
// access point apID: no volume's token has its shape (tokens are volume
// names, claim hashes and GID tokens).
func SweepToken(apID string) string { return sweepPrefix + apID }

// HoldForSweep holds id on fs for the sweep of the access point apID. Held
// by that sweep already (a killed sweep's hold): nil. Held by a volume:
// that volume's token and ErrIDTaken (a create of it will send, or has
// sent, the GID token: the access point may be its own).
func (j *Journal) HoldForSweep(ctx context.Context, fs string, id int64, apID string) (holder string, err error) {
	want := Entry{Key: idKey(fs, id), Value: []byte(SweepToken(apID)), Index: sweepIndex}
	got, err := j.s.Create(ctx, want)
	switch {
	case err == nil:
		return "", nil
	case !errors.Is(err, ErrExists):
		return "", err
	case string(got.Value) == SweepToken(apID):
		return "", nil
	}
	return string(got.Value), fmt.Errorf("%w: id %d on %s is held by %q", ErrIDTaken, id, fs, got.Value)
}

// ReleaseSweep releases id on fs if the sweep of apID holds it.
func (j *Journal) ReleaseSweep(ctx context.Context, fs string, id int64, apID string) error {
	return j.releaseID(ctx, fs, id, SweepToken(apID))
}

// ToSweep reads fs's id table in one listing: the ids the sweep holds,
// with the access point each is held for (a killed sweep's intent, to
// resume), and the ids held for a volume whose record a listing of the
// volumes then shows being deleted or does not show, with their holders
// (what ReleaseOrphanID may release). Listings are hints: an entry or
// record written meanwhile may be missed, and the sweep and
// ReleaseOrphanID read each again before they act.
func (j *Journal) ToSweep(ctx context.Context, fs string) (holds, orphans map[int64]string, err error) {
	holds, orphans = map[int64]string{}, map[int64]string{}
	err = j.s.List(ctx, KindID, fs, "", func(es []Entry) error {
		for _, e := range es {
			id, err := strconv.ParseInt(e.Key.Name, 10, 64)
			if err != nil || e.Key.FileSystem != fs {
				continue // not an id entry of fs: never released here
			}
			if ap, ok := strings.CutPrefix(string(e.Value), sweepPrefix); ok {
				holds[id] = ap
			} else {
				orphans[id] = string(e.Value)
			}
		}
		return nil
	})
	if err != nil || len(orphans) == 0 {
		return holds, orphans, err
	}
	live := map[string]bool{}
	err = j.Volumes(ctx, fs, func(rs []*Record) error {
		for _, r := range rs {
			live[r.Token] = live[r.Token] || !r.Deleting
		}
		return nil
	})
	for id, token := range orphans {
		if live[token] {
			delete(orphans, id)
		}
	}
	return holds, orphans, err
}
