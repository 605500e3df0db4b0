// Package journal is the record of this cluster's volumes and the ids
// (GIDs) they hold: ownership written down before any access point is
// created, in a store with compare-and-swap, so that no controller has to
// infer from listings, tags or timing what another one made (as ceph-csi's
// journal in RADOS). Two controllers of one cluster agree through it; a
// forged tag or client token proves nothing, since only the record does.
//
// Two kinds of entry, both keyed by file system:
//
//	volume  <fs>/<client token> -> Volume (name, path, ids, access point, claim, bound)
//	id      <fs>/<number>       -> the client token of the volume holding it
//
// The id entry is the uniqueness of a GID: created (atomically, Create) by
// the one volume that may put it on an access point, deleted only once that
// volume's access point is proven gone. The volume entry names the id it
// holds, so each points at the other, and either alone proves nothing.
package journal

import (
	"context"
	"errors"
)

// Errors of a Store.
var (
	// ErrNotFound: no entry at the key.
	ErrNotFound = errors.New("journal: no entry")
	// ErrExists: Create found an entry at the key.
	ErrExists = errors.New("journal: entry exists")
	// ErrConflict: the entry changed since the version given.
	ErrConflict = errors.New("journal: entry changed")
	// ErrUnavailable: the store did not answer; the operation may or may
	// not have been applied. Retry.
	ErrUnavailable = errors.New("journal: store unavailable")
)

// Kind is the kind of an entry.
type Kind string

const (
	KindVolume Kind = "volume"
	KindID     Kind = "id"
	// KindPlace: which file system of a class over several holds a
	// volume (Journal.Place).
	KindPlace Kind = "place"
	// KindHandover: the cluster's controllers took provisioning over
	// from whatever ran before them (Journal.HandedOver).
	KindHandover Kind = "handover"
)

// Key names an entry. FileSystem and Name are at most 64 bytes of
// [A-Za-z0-9._~:-]... anything: stores must accept any bytes in Name
// (client tokens are any ASCII) and never derive a path from them.
type Key struct {
	Kind       Kind
	FileSystem string
	Name       string
}

// Entry is one stored value and its version.
type Entry struct {
	Key   Key
	Value []byte
	// Index is a secondary key the store can List by (a volume entry's
	// access point ID); "" for none.
	Index string
	// Version changes on every write; Update and Delete compare it.
	Version string
}

// Store keeps entries with compare-and-swap. Implementations: Memory (one
// process), File (processes of one host, a local file), and pkg/kube's
// Leases and ConfigMaps (every replica of a cluster). Contract:
//   - Create stores the entry if the key is free, else ErrExists with the
//     entry found (its Value and Version); exactly one of any number of
//     concurrent Creates of a key succeeds.
//   - Update replaces e's value and index if e.Version is still current:
//     ErrConflict if not, ErrNotFound if the entry is gone.
//   - Delete removes the entry if e.Version is still current: ErrConflict if
//     not, nil if it is gone already.
//   - Get answers the latest write (linearizable, as etcd's reads are).
//   - List calls fn with every entry of kind on fileSystem ("" = every file
//     system) whose Index is index ("" = any), in pages, in no order. An
//     entry written or deleted during a List may or may not be seen.
//   - ErrUnavailable means the outcome is unknown; every other error is
//     definitive. Errors wrap these sentinels.
//
// A store kept where others may write it (the Lease store: anyone who may
// delete Leases in its namespace) notices its objects deleted or rewritten
// by hand, logs what they held and restores it (docs/record.md,
// Damage): the contract holds for every write it made, not for
// what others do to its objects.
type Store interface {
	Get(ctx context.Context, key Key) (Entry, error)
	Create(ctx context.Context, e Entry) (Entry, error)
	Update(ctx context.Context, e Entry) (Entry, error)
	Delete(ctx context.Context, e Entry) error
	List(ctx context.Context, kind Kind, fileSystem, index string, fn func([]Entry) error) error
}

// ErrApart: CreateBoth's two keys are not kept together (the store's
// layout changed since Near said they were); nothing was written.
var ErrApart = errors.New("journal: entries not stored together")

// Pairer is a Store that can create two entries in one atomic write when
// its layout keeps them together: the journal makes a volume's record and
// holds its id in one write (Journal.BeginHeld), so that no create sees a
// record whose id its volume does not hold yet, and a create waits for
// one write, not two. Contract:
//   - CreateBoth stores a and b if neither key holds an entry, and neither
//     otherwise: ErrExists if either exists (nothing written), ErrApart if
//     the two are not kept together (nothing written), ErrUnavailable if
//     the outcome is unknown (as of a Create of a and then one of b, either
//     of which may have been written). It answers both entries as stored.
//   - Near(k) is a test of whether another key is kept with k, as far as
//     this process knows the layout (a hint: CreateBoth decides), or nil
//     when every two keys are.
type Pairer interface {
	Near(k Key) func(Key) bool
	CreateBoth(ctx context.Context, a, b Entry) (Entry, Entry, error)
}

// Hinter is a Store that can also answer from what this process last read
// or wrote of an entry, without a request: Hint returns that entry, or
// false when it knows none. A hint may be stale (another replica may have
// written since) and says nothing about absence, so the journal uses one
// only where being stale costs nothing: as the version of a
// compare-and-swap, which then fails and is followed by a Get, or in place
// of a read that is read again under the volume's locks (docs/design.md,
// The record: hints).
type Hinter interface {
	Hint(key Key) (Entry, bool)
}
