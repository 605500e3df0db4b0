package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// ErrIDTaken: the id is held by another volume of the record.
var ErrIDTaken = errors.New("journal: id held by another volume")

// IDTakenError is the ErrIDTaken of Hold: it names the token of the
// volume holding the id, so the caller can tell its allocator at once.
type IDTakenError struct {
	FileSystem string
	ID         int64
	Holder     string
}

func (e *IDTakenError) Error() string {
	return fmt.Sprintf("%v: id %d on %s is held by the volume of token %q", ErrIDTaken, e.ID, e.FileSystem, e.Holder)
}

func (e *IDTakenError) Unwrap() error { return ErrIDTaken }

// ErrStaleToken: the access point was made under a client token the
// record no longer sends (it moved to another id meanwhile): it is not the
// record's, and nobody answered it.
var ErrStaleToken = errors.New("journal: access point made under a token the record no longer sends")

// ErrDeleting: the volume's DeleteVolume has begun (MarkDeleting): no
// create may answer it or change its record any more.
var ErrDeleting = errors.New("journal: volume is being deleted")

// ErrPlacedElsewhere: the volume's place entry names another file system
// than the record's: another create placed the volume there after this
// one read where it was (Begin).
var ErrPlacedElsewhere = errors.New("journal: volume placed on another file system")

// NoID is Volume.Allocated of a volume whose class fixes both ids.
const NoID = -1

// Volume is what the record says of one volume: written before its access
// point is created, so that every later step (a retry, a restart, another
// controller, DeleteVolume, the orphan collector) acts on what is recorded,
// never on what a listing, a tag or a client token suggests.
type Volume struct {
	FileSystem string `json:"fileSystem"`
	// Token is the volume's key in the record: the client token of
	// releases before GID tokens (the volume name, as upstream's).
	Token string `json:"token"`
	// ClientToken is the client token the volume's CreateAccessPoint
	// sends and its access point carries, when it is not Token: a GID
	// token (volume.GIDToken), which makes EFS itself the
	// compare-and-swap of the allocated id across every writer using
	// GID tokens (replicas with records of their own, other clusters);
	// or the token of an access point adopted with another (an earlier
	// release's later generation). SentToken reads it.
	ClientToken string `json:"clientToken,omitempty"`
	// Probe is the index of Allocated in the volume's deterministic
	// sequence of ids (GID tokens: every writer of the volume tries the
	// same ids in the same order, so they send one token).
	Probe int    `json:"probe,omitempty"`
	Name  string `json:"name"` // the CO's volume name
	API   string `json:"api,omitempty"`
	Path  string `json:"path"`
	UID   int64  `json:"uid"`
	GID   int64  `json:"gid"`
	// Allocated is the id this volume holds in the id table (its GID, or
	// its UID when the class fixes the GID); NoID for fixed ids.
	Allocated int64 `json:"allocated"`
	// AccessPoint is set once an access point with Token is known to exist,
	// at Recorded: a listing that began later and does not show it lags
	// (or it was deleted behind the record's back).
	AccessPoint    string    `json:"accessPoint,omitempty"`
	Recorded       time.Time `json:"recorded,omitzero"`
	ClaimNamespace string    `json:"claimNamespace,omitempty"`
	ClaimName      string    `json:"claimName,omitempty"`
	Bound          bool      `json:"bound,omitempty"` // a PersistentVolume was seen naming it: never collected
	// Deleting: a DeleteVolume (or the collector) is deleting its access
	// point; set before DeleteAccessPoint, so that a create that read the
	// record before cannot answer it after.
	Deleting bool `json:"deleting,omitempty"`
	// DeletingSince is when Deleting was first set (zero for records
	// written before it was kept): a retry of the delete, after a restart
	// too, counts EFS's listing lag from there (--listing-lag).
	DeletingSince time.Time `json:"deletingSince,omitzero"`
	Created       time.Time `json:"created"`
	// Dir: a directory volume (provisioningMode efs-dir): no access point
	// ever; Token is the path's (DirToken), so one directory is one
	// volume; Recorded is when its directory was first known made
	// (SetDirMade).
	Dir bool `json:"dir,omitempty"`
	// Capacity is the capacity the volume was created with: a create of
	// the same name with another is refused (no tag needs to carry it;
	// records written before every volume's was kept have 0 but for
	// directory volumes).
	Capacity int64 `json:"capacity,omitempty"`
	// Placed: the volume's class names several file systems, and the
	// place entry of this key (Place) says this one holds it; Finish
	// removes it.
	Placed string `json:"placed,omitempty"`
}

// SentToken is the client token the volume's access point carries (or
// will): ClientToken, else Token.
func (v *Volume) SentToken() string {
	if v.ClientToken != "" {
		return v.ClientToken
	}
	return v.Token
}

// Record is a Volume as stored, with the version its next write compares.
type Record struct {
	Volume
	entry Entry
	// idSeen is the id entry of Allocated as this process knew it (a
	// hint) before its compare-and-swap write of entry succeeded: that
	// write proves the record this life then, so the entry was this
	// life's hold (or an earlier life's, left for the token), never a
	// later life's. Finish deletes the id at that version with no read
	// (TestFinishLeavesTheNextLifesID). Nil: unknown, or not proven.
	idSeen *Entry
	// held is the id entry this Record's last Hold wrote, at its version,
	// and heldNew whether that Hold made it (else it wrote again an entry
	// another create of the volume had made): ReleaseUnsentID deletes only
	// an entry the Hold made, at that version. One written again since is
	// another create's of the volume (HoldID writes it anew), which may
	// send under it. Nil: none, or a later read replaced the Record.
	held    *Entry
	heldNew bool
}

// Journal reads and writes Volumes and ids over a Store. Safe for
// concurrent use; every mutator compares versions, so two controllers
// writing one volume's record at once never lose a write.
type Journal struct {
	s   Store
	now func() time.Time

	// listed are the records Volumes decoded, by key, kept while their
	// version stays: root removal reads every volume of a file system for
	// each batch of deletes (10,000 records took 60 ms to decode), and few
	// change between two reads. A complete read drops those it did not
	// see.
	mu     sync.Mutex
	listed map[Key]listedRecord
	reads  uint64 // Volumes calls so far: the generation of listedRecord.seen
	// named: the token of the record this process last saw name each
	// access point (SetAccessPoint, ByAccessPoint), for ByAccessPointHint:
	// a record found by its access point without a volume-name tag costs
	// no read of the index. Dropped by Finish.
	named map[apKey]string
}

// apKey is an access point on a file system.
type apKey struct{ fs, ap string }

// listedRecord is a decoded record and the last Volumes call that saw it.
type listedRecord struct {
	r    Record
	seen uint64
}

// New returns a journal over s.
func New(s Store) *Journal { return NewClocked(s, time.Now) }

// NewClocked returns a journal over s whose times (Created, Recorded,
// DeletingSince) are now's.
func NewClocked(s Store, now func() time.Time) *Journal {
	return &Journal{s: s, now: now, listed: map[Key]listedRecord{}, named: map[apKey]string{}}
}

func volumeKey(fs, token string) Key { return Key{Kind: KindVolume, FileSystem: fs, Name: token} }
func idKey(fs string, id int64) Key {
	return Key{Kind: KindID, FileSystem: fs, Name: strconv.FormatInt(id, 10)}
}

func decode(e Entry) (*Record, error) {
	r := &Record{entry: e}
	if err := json.Unmarshal(e.Value, &r.Volume); err != nil {
		return nil, fmt.Errorf("journal: %s: %w", e.Key, err)
	}
	if r.FileSystem != e.Key.FileSystem || r.Token != e.Key.Name {
		return nil, fmt.Errorf("journal: %s holds the record of %s/%q", e.Key, r.FileSystem, r.Token)
	}
	return r, nil
}

func encode(v *Volume) (Entry, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Entry{}, err
	}
	index := v.AccessPoint
	if v.Dir {
		index = DirIndex
	}
	return Entry{Key: volumeKey(v.FileSystem, v.Token), Value: b, Index: index}, nil
}

// DirIndex is the index of every directory volume's entry (no access
// point ID is "dir"): DirVolumes lists them alone.
const DirIndex = "dir"

// DirVolumes calls fn with the records of the directory volumes of fs, by
// the store's index: a file system without any costs one List that
// answers nothing.
func (j *Journal) DirVolumes(ctx context.Context, fs string, fn func([]*Record) error) error {
	return j.s.List(ctx, KindVolume, fs, DirIndex, func(es []Entry) error {
		rs := make([]*Record, 0, len(es))
		for _, e := range es {
			if r, err := decode(e); err == nil && r.Dir {
				rs = append(rs, r)
			}
		}
		return fn(rs)
	})
}

// Volume reads the record of the volume whose access point has token on
// fs; ErrNotFound if there is none.
func (j *Journal) Volume(ctx context.Context, fs, token string) (*Record, error) {
	e, err := j.s.Get(ctx, volumeKey(fs, token))
	if err != nil {
		return nil, err
	}
	return decode(e)
}

// VolumeHint is the record of the volume whose access point has token on
// fs as this process last read or wrote it, when the store keeps that
// (Hinter), else as Volume reads it: possibly stale, so only for a caller
// that proves it before acting (a compare-and-swap, or a read under the
// volume's locks).
func (j *Journal) VolumeHint(ctx context.Context, fs, token string) (*Record, error) {
	if e, ok := j.hint(volumeKey(fs, token)); ok {
		if r, err := decode(e); err == nil {
			return r, nil
		}
	}
	return j.Volume(ctx, fs, token)
}

// hint is the store's hint of k (Hinter), if it has one.
func (j *Journal) hint(k Key) (Entry, bool) {
	if h, ok := j.s.(Hinter); ok {
		return h.Hint(k)
	}
	return Entry{}, false
}

// Begin records v unless a record of its token exists: it returns the
// record stored, and whether this call made it. The caller compares an
// existing record with what it wants.
//
// A placed volume (v.Placed: its class names several file systems) is the
// record's only while its place entry names the record's file system, and
// Begin makes sure of it, after the volume entry: a delete of the
// volume's previous life removes its place entry before its volume entry
// (Finish), so a create that read the place entry before that delete and
// made its record after it finds the entry gone here, and places it
// again. If another create placed the volume elsewhere meanwhile (it read
// the entry gone and chose anew), that one wins: a record this call made
// is withdrawn (nothing was sent under it), and the answer is
// ErrPlacedElsewhere, which the caller's retry plans on the file system
// placed.
func (j *Journal) Begin(ctx context.Context, v Volume) (*Record, bool, error) {
	if v.Created.IsZero() {
		v.Created = j.now().UTC()
	}
	e, err := encode(&v)
	if err != nil {
		return nil, false, err
	}
	var r *Record
	got, err := j.s.Create(ctx, e)
	made := err == nil
	switch {
	case made:
		r = &Record{Volume: v, entry: got}
	case errors.Is(err, ErrExists):
		if r, err = decode(got); err != nil {
			return nil, false, err
		}
	default:
		return nil, false, err
	}
	if r.Placed == "" || r.Deleting {
		return r, made, nil // a record being deleted: its delete unplaces it
	}
	won, err := j.Place(ctx, r.Placed, r.FileSystem)
	switch {
	case err != nil:
		return nil, false, err // a retry's Begin finds the record and places it
	case won == r.FileSystem:
		return r, made, nil
	case made:
		// A record of nothing: no id held, nothing sent. Withdrawn at the
		// version made; one that fails stays for the collector.
		_ = j.s.Delete(ctx, r.entry)
	}
	return nil, false, fmt.Errorf("%w: volume %q is on %s, not %s", ErrPlacedElsewhere, r.Placed, won, r.FileSystem)
}

// BeginHeld is Begin, and Hold of the record it makes, in one write when
// the store keeps the two entries together (Pairer): held says the record
// was made with its id held (as a Hold that made the id's entry). Else,
// and when either entry exists already, it is Begin alone (held false),
// and the caller holds the id itself. A placed volume (Begin's Place
// comes between the two) and a volume of fixed ids are Begin alone.
//
// The one write refines Begin followed at once by Hold: no other write
// comes between them, and the outcomes are those of the two in turn
// (both written, or neither; unknown: either, as a Begin written and a
// Hold unknown, or a Begin unknown), so every schedule of it is one of
// theirs (docs/design.md, Create step 4).
func (j *Journal) BeginHeld(ctx context.Context, v Volume) (r *Record, made, held bool, err error) {
	p, ok := j.s.(Pairer)
	if !ok || v.Allocated == NoID || v.Placed != "" {
		r, made, err = j.Begin(ctx, v)
		return r, made, false, err
	}
	if v.Created.IsZero() {
		v.Created = j.now().UTC()
	}
	e, err := encode(&v)
	if err != nil {
		return nil, false, false, err
	}
	idEntry := Entry{Key: idKey(v.FileSystem, v.Allocated), Value: []byte(v.Token)}
	if near := p.Near(e.Key); near != nil && !near(idEntry.Key) {
		r, made, err = j.Begin(ctx, v) // apart as far as this process knows: no write would take both
		return r, made, false, err
	}
	got, id, err := p.CreateBoth(ctx, e, idEntry)
	switch {
	case err == nil:
		return &Record{Volume: v, entry: got, held: &id, heldNew: true}, true, true, nil
	case errors.Is(err, ErrExists), errors.Is(err, ErrApart):
		r, made, err = j.Begin(ctx, v)
		return r, made, false, err
	}
	return nil, false, false, err
}

// Near is a test of whether the id entry of an id on fs is kept with the
// record of token's volume (Pairer.Near), for a create that chooses its
// volume's id: nil when any id is, or the store makes no pairs.
func (j *Journal) Near(fs, token string) func(id int64) bool {
	p, ok := j.s.(Pairer)
	if !ok {
		return nil
	}
	near := p.Near(volumeKey(fs, token))
	if near == nil {
		return nil
	}
	return func(id int64) bool { return near(idKey(fs, id)) }
}

// HoldID makes r's allocated id r's in the id table. Held by r already:
// the entry is written again (a new version), so that a ReleaseMovedID
// that read it before fails its compare-and-swap and reads r's record
// again. Held by another volume: ErrIDTaken, naming its token. Until
// HoldID returned nil, no access point may be created with the id.
func (j *Journal) HoldID(ctx context.Context, r *Record) error {
	_, err := j.Hold(ctx, r)
	return err
}

// Hold is HoldID, and says whether r's token held the id before this call
// (again): another create of r's volume has been at work (a retry, a
// duplicate), whose record writes may have overtaken what the caller read.
func (j *Journal) Hold(ctx context.Context, r *Record) (again bool, err error) {
	if r.Allocated == NoID {
		return false, nil
	}
	want := Entry{Key: idKey(r.FileSystem, r.Allocated), Value: []byte(r.Token)}
	for range maxConflicts {
		got, err := j.s.Create(ctx, want)
		if err == nil {
			r.held, r.heldNew = &got, true
		}
		if !errors.Is(err, ErrExists) {
			return again, err
		}
		if string(got.Value) != r.Token {
			return false, &IDTakenError{FileSystem: r.FileSystem, ID: r.Allocated, Holder: string(got.Value)}
		}
		again = true
		upd, err := j.s.Update(ctx, got)
		if err == nil {
			r.held, r.heldNew = &upd, false
		}
		if !errors.Is(err, ErrConflict) && !errors.Is(err, ErrNotFound) {
			return true, err
		}
	}
	return false, fmt.Errorf("%w: id %d on %s: %d conflicting writes", ErrUnavailable, r.Allocated, r.FileSystem, maxConflicts)
}

// ReleaseMovedID releases id, held for token's volume, once that volume's
// record holds another id, is being deleted, or is gone: a create of it that made, under
// the id's GID token, an access point it then deleted because the record
// had moved to another id meanwhile (ErrStaleToken) left the id held for
// nobody. The entry is read, then the record, and the entry deleted at
// the version read: a create that moves the record back to id holds it
// after its record write (HoldID writes the entry), so either this read of
// the record sees that write, or the delete's compare-and-swap fails and
// both are read again.
//
// A record being deleted uses its id no more for this caller, a create of
// the volume that knows what it made under it (no create sends under a
// record being deleted), and its Finish may have released it already: an
// entry held since would be nobody's (seed 66453). The caller holds it for
// the sweep next (HoldForSweep), or made it under a token of the volume's
// own, bound to the one access point it deleted.
func (j *Journal) ReleaseMovedID(ctx context.Context, fs string, id int64, token string) error {
	_, err := j.releaseUnless(ctx, fs, id, token, func(cur *Record) bool { return !cur.Deleting && cur.Allocated == id })
	return err
}

// ReleaseOrphanID releases id, held for token's volume, once that
// volume's record is gone, or is being deleted and holds another id; it
// says whether it did. A live record that holds another id keeps it: a
// create of it may be moving to id (it holds id before its record write),
// and only its own ReleaseMovedID knows it has moved off. The collector's
// sweep uses it on the ids ToSweep lists, which a call cut short (its
// cleanup past its budget) left held for nobody.
//
// A record being deleted keeps its own id until its Finish releases it
// (the id first, then the record): until then its access point, or its
// directory, may still be live with that id. Only a GID token protects an
// access point's id without the table; a directory volume, or an access
// point under another token, has nothing else, and releasing the id on
// the mark let another volume of the record take it while the first was
// live (the simulator's wide seed 934: the collector released a deleting
// access point volume's id, and a directory volume took it).
func (j *Journal) ReleaseOrphanID(ctx context.Context, fs string, id int64, token string) (bool, error) {
	return j.releaseUnless(ctx, fs, id, token, func(cur *Record) bool { return !cur.Deleting || cur.Allocated == id })
}

// releaseUnless deletes the entry of id on fs held for token unless the
// volume's record, read after the entry, exists and keep says so; it says
// whether it deleted. The entry is deleted at the version read: a create
// that holds the id again writes the entry (Hold), so either the read of
// the record sees what that create wrote before, or the delete's
// compare-and-swap fails and both are read again.
func (j *Journal) releaseUnless(ctx context.Context, fs string, id int64, token string, keep func(cur *Record) bool) (bool, error) {
	for range maxConflicts {
		e, err := j.heldFor(ctx, fs, id, token, false)
		if err != nil || e == nil {
			return false, err
		}
		cur, err := j.Volume(ctx, fs, token)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return false, err
		case keep(cur):
			return false, nil
		}
		switch err := j.s.Delete(ctx, *e); {
		case err == nil:
			return true, nil
		case !errors.Is(err, ErrConflict):
			return false, err
		}
	}
	return false, fmt.Errorf("%w: id %d on %s: %d conflicting writes", ErrUnavailable, id, fs, maxConflicts)
}

// IDHolder is the token of the volume holding id on fs, "" if none.
func (j *Journal) IDHolder(ctx context.Context, fs string, id int64) (string, error) {
	e, err := j.s.Get(ctx, idKey(fs, id))
	if errors.Is(err, ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return string(e.Value), nil
}

// releaseID deletes the id entry of r if it names r's token.
func (j *Journal) releaseID(ctx context.Context, fs string, id int64, token string) error {
	// A hint that the entry is ours is proven by the compare-and-swap of
	// the Delete; any other hint is read again (a stale "another's" or
	// none would leave ours held for nobody).
	for hinted := true; ; hinted = false {
		e, err := j.heldFor(ctx, fs, id, token, hinted)
		if err != nil || e == nil {
			return err // none, or another volume's now: ours was released before
		}
		if err := j.s.Delete(ctx, *e); !errors.Is(err, ErrConflict) {
			return err
		}
	}
}

// heldFor is fs's entry of id if it names token, nil if none does: as
// this process's hint says, if hint and it says so, else read.
func (j *Journal) heldFor(ctx context.Context, fs string, id int64, token string, hint bool) (*Entry, error) {
	if id == NoID {
		return nil, nil
	}
	if e, ok := j.hint(idKey(fs, id)); hint && ok && string(e.Value) == token {
		return &e, nil
	}
	e, err := j.s.Get(ctx, idKey(fs, id))
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case string(e.Value) != token:
		return nil, nil
	}
	return &e, nil
}

// maxConflicts bounds the re-reads of a mutator racing other writers.
const maxConflicts = 16

// mutate applies change to r and writes it, re-reading r on a conflict
// and applying change again: change says whether it changed anything (no
// change, no write) and may refuse with an error.
func (j *Journal) mutate(ctx context.Context, r *Record, change func(*Volume) (bool, error)) error {
	return j.write(ctx, r, false, change)
}

// write is mutate; deleting allows a change of a record being deleted.
func (j *Journal) write(ctx context.Context, r *Record, deleting bool, change func(*Volume) (bool, error)) error {
	for range maxConflicts {
		v := r.Volume
		if v.Deleting && !deleting {
			return fmt.Errorf("%w: %s/%q", ErrDeleting, v.FileSystem, v.Token)
		}
		changed, err := change(&v)
		if err != nil || !changed {
			return err
		}
		e, err := encode(&v)
		if err != nil {
			return err
		}
		e.Version = r.entry.Version
		seen, known := j.idHint(&v)
		got, err := j.s.Update(ctx, e)
		if err == nil {
			r.Volume, r.entry, r.idSeen = v, got, nil
			if known {
				r.idSeen = &seen
			}
			return nil
		}
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("%w: %w: %s/%q", ErrDeleting, errGone, r.FileSystem, r.Token)
		}
		if !errors.Is(err, ErrConflict) {
			return err
		}
		fresh, err := j.Volume(ctx, r.FileSystem, r.Token)
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("%w: %w: %s/%q", ErrDeleting, errGone, r.FileSystem, r.Token)
		}
		if err != nil {
			return err
		}
		*r = *fresh
	}
	return fmt.Errorf("%w: %s/%q kept changing", ErrUnavailable, r.FileSystem, r.Token)
}

// idHint is the hint of v's id entry if it names v's token.
func (j *Journal) idHint(v *Volume) (Entry, bool) {
	if v.Allocated == NoID {
		return Entry{}, false
	}
	e, ok := j.hint(idKey(v.FileSystem, v.Allocated))
	return e, ok && string(e.Value) == v.Token
}

// Touch writes r unchanged, so that its version moves: a create that
// found an existing record touches it before sending CreateAccessPoint,
// and a DeleteVolume that read the record before cannot mark it deleting
// without reading this create's write first. ErrDeleting if it is marked.
func (j *Journal) Touch(ctx context.Context, r *Record) error {
	return j.mutate(ctx, r, func(*Volume) (bool, error) { return true, nil })
}

// SetDirMade records, by a compare-and-swap write whatever the record
// holds, that the directory of r (a directory volume) exists: a create
// writes it after making (or finding) the directory and before answering,
// so that a delete that marked r deleting before (ErrDeleting here) is
// never answered past, and one that marks it after removes what this
// create made.
func (j *Journal) SetDirMade(ctx context.Context, r *Record) error {
	return j.mutate(ctx, r, func(v *Volume) (bool, error) {
		if v.Recorded.IsZero() {
			v.Recorded = j.now().UTC()
		}
		return true, nil
	})
}

// MarkDeleting records that r's access point is being deleted: from now
// on no create answers it (ErrDeleting), and only Finish removes it.
func (j *Journal) MarkDeleting(ctx context.Context, r *Record) error {
	return j.write(ctx, r, true, func(v *Volume) (bool, error) {
		if v.Deleting {
			return false, nil
		}
		v.Deleting, v.DeletingSince = true, j.now().UTC()
		return true, nil
	})
}

// errGone: the record a write was for is gone (wrapped with ErrDeleting).
var errGone = errors.New("record is gone")

// ofLife is nil if v, read again on a conflict, is still the life (the
// creation time) a write was for, else ErrDeleting wrapping errGone: the
// record the caller read was removed, and this is the volume's next
// life, made under the same key. What the caller made or planned for the
// old life (an access point, ids) is not the new one's: written there, a
// create that read the old life before its delete recorded the deleted
// access point in the new life's record and answered it (TestModel in
// pkg/controller/core: a phantom, and the new life's own access point
// named by nothing).
func ofLife(created time.Time, v *Volume) error {
	if v.Created.Equal(created) {
		return nil
	}
	return fmt.Errorf("%w: %w: %s/%q is a later life of the record", ErrDeleting, errGone, v.FileSystem, v.Token)
}

// errNotKept: MarkDeletingIf's condition no longer holds.
var errNotKept = errors.New("record no longer as required")

// MarkDeletingIf is MarkDeleting of r while keep holds for it, where r may
// be a hint (VolumeHint): the compare-and-swap at r's version proves it
// current, and a conflict reads it again and checks keep again. It
// answers the record marked, or nil if it is gone or keep no longer
// holds (nothing written). A hint already marked deleting would write
// nothing to prove it, so it is read first.
func (j *Journal) MarkDeletingIf(ctx context.Context, r *Record, keep func(*Record) bool) (*Record, error) {
	return j.MarkDeletingFor(ctx, r, "", keep)
}

// MarkDeletingFor is MarkDeletingIf for a delete of access point apID: a
// record that names no access point yet is marked naming it, so that the
// record is found by its access point (ByAccessPoint) once that access
// point is gone. A delete's retry looks for it there, and a mark no retry
// finds is left for ever: every create of the volume is ABORTED while it
// stands (the simulator's seed 10747546: a retry's mark, its answer lost,
// of the volume's next life, which agreed by its path).
func (j *Journal) MarkDeletingFor(ctx context.Context, r *Record, apID string, keep func(*Record) bool) (*Record, error) {
	r = &Record{Volume: r.Volume, entry: r.entry}
	if r.Deleting {
		fresh, err := j.Volume(ctx, r.FileSystem, r.Token)
		if errors.Is(err, ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		r = fresh
	}
	err := j.write(ctx, r, true, func(v *Volume) (bool, error) {
		if !keep(&Record{Volume: *v}) {
			return false, errNotKept
		}
		if v.Deleting {
			return false, nil // read by write (a conflict) or above: current
		}
		v.Deleting, v.DeletingSince = true, j.now().UTC()
		if v.AccessPoint == "" && apID != "" {
			v.AccessPoint, v.Recorded = apID, v.DeletingSince
		}
		return true, nil
	})
	switch {
	case errors.Is(err, errNotKept), errors.Is(err, errGone):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return r, nil
}

// SetIDs gives r other ids and the client token that goes with them, if
// it still holds from: only for a record none of whose creates can have
// made an access point with its ids (never sent, or EFS answered that
// another writer's access point holds the record's GID token).
// ErrConflict, with r re-read, if another writer changed them first.
func (j *Journal) SetIDs(ctx context.Context, r *Record, from, uid, gid, allocated int64, clientToken string, probe int) error {
	return j.setIDs(ctx, r, from, uid, gid, allocated, clientToken, probe, false)
}

// MoveID is SetIDs for a move off from that no create of r's volume may
// have sent under: another volume held it (HoldID's ErrIDTaken), or EFS
// answered that another writer's access point holds its GID token, and the
// caller released its own hold first (ReleaseUnsentID). Either premise
// may be stale by the time of the move: the other volume freed the id, or
// the other writer's access point was deleted, and another create of r's
// volume (a retry, a duplicate) held the id, confirmed the record and
// sent under it. So, after each read of the record it writes at, the
// id's entry is read: held for r's token, it is ErrConflict (the caller's
// next hold holds from again, and its send adopts what that create made).
// A create that confirms the record (Touch) holds before its confirm, and
// confirms before its send: either this read sees the hold, or the
// confirm comes after the read of the record and the move's
// compare-and-swap fails, or the move lands first and the confirm fails
// (the simulator's seeds 10070537 and 9324 of -sim.wide: a send under
// from, its maker killed or its cleanup cut short, left by the move to no
// record). A create that made the record and holds the id afresh sends
// with no confirm (core's hold), so a move that lands before its hold
// leaves its send stale: refused when it records it (ErrStaleToken) and
// deleted, unless its cleanup is cut short (docs/design.md, "Known
// limits").
func (j *Journal) MoveID(ctx context.Context, r *Record, from, uid, gid, allocated int64, clientToken string, probe int) error {
	return j.setIDs(ctx, r, from, uid, gid, allocated, clientToken, probe, true)
}

func (j *Journal) setIDs(ctx context.Context, r *Record, from, uid, gid, allocated int64, clientToken string, probe int, move bool) error {
	created := r.Created
	return j.mutate(ctx, r, func(v *Volume) (bool, error) {
		if err := ofLife(created, v); err != nil {
			return false, err
		}
		if v.Allocated != from || v.AccessPoint != "" {
			return false, fmt.Errorf("%w: ids of %s/%q changed", ErrConflict, v.FileSystem, v.Token)
		}
		if move {
			switch e, err := j.s.Get(ctx, idKey(v.FileSystem, from)); {
			case err == nil && string(e.Value) == v.Token:
				return false, fmt.Errorf("%w: id %d on %s is held for %q again", ErrConflict, from, v.FileSystem, v.Token)
			case err != nil && !errors.Is(err, ErrNotFound):
				return false, err
			}
		}
		if clientToken == v.Token {
			clientToken = ""
		}
		if v.UID == uid && v.GID == gid && v.Allocated == allocated && v.ClientToken == clientToken && v.Probe == probe {
			return false, nil
		}
		v.UID, v.GID, v.Allocated, v.ClientToken, v.Probe = uid, gid, allocated, clientToken, probe
		return true, nil
	})
}

// ReleaseUnsentID releases id of r's token, which the caller proves no
// access point of its own carries for r (its CreateAccessPoint with it was
// never sent, or EFS answered that the id's token is bound to another
// writer's access point, or r's token to one with other ids). If r's last
// Hold was of id, only the entry that Hold wrote is released, at its
// version: one written again since is another create's of the volume,
// which held it after that proof and may send under it while the other
// writer's access point goes. That create answers it or releases it
// itself; released here, the id was free while an access point of the
// volume carried it, and a directory volume, which only the id table
// keeps off an id, took it (the simulator's wide seed 188758). With
// onlyMade, the entry is released only if that Hold made it: one it wrote
// again was the volume's hold already (a record being deleted keeps its
// own until its Finish: wide seed 676900).
func (j *Journal) ReleaseUnsentID(ctx context.Context, r *Record, id int64, onlyMade bool) error {
	if h := r.held; h != nil && h.Key == idKey(r.FileSystem, id) {
		if onlyMade && !r.heldNew {
			return nil // the volume's hold before this caller's: not its to release
		}
		if err := j.s.Delete(ctx, *h); !errors.Is(err, ErrConflict) {
			return err
		}
		return nil // written again since: another create's now
	}
	return j.releaseID(ctx, r.FileSystem, id, r.Token)
}

// Made is an access point as the record names it.
type Made struct {
	ID, Path string
	// Token is the client token it carries.
	Token               string
	UID, GID, Allocated int64
	// Sent, if set, is the record's token the access point was found or
	// made under: SetAccessPoint refuses it (ErrStaleToken) if the record
	// sends another by now.
	Sent string
}

// SetAccessPoint records that access point ap is r's, with its ids (an
// access point found by the token may carry ids other than those r
// planned: an earlier release's, or upstream's; or another token: an
// earlier release's later generation). replace: ap was just created with
// the record's token, which proves the access point the record named
// before is gone (EFS binds a token to one access point); otherwise a
// record naming another access point is an error. It is always written,
// also when r names ap already: it is a create's last step before its
// answer, and its compare-and-swap confirms the record (ErrDeleting once
// a delete has marked it).
func (j *Journal) SetAccessPoint(ctx context.Context, r *Record, ap Made, replace bool) error {
	if ap.Token == r.Token {
		ap.Token = ""
	}
	created := r.Created
	err := j.mutate(ctx, r, func(v *Volume) (bool, error) {
		if err := ofLife(created, v); err != nil {
			return false, err
		}
		// Written even when the record names ap already: the write, at
		// the version read, is what proves the record of this life and
		// not being deleted when the create answers after it (a no-op
		// here answered an access point the volume's delete had marked
		// and deleted meanwhile: the simulator's wide seed 319061).
		if ap.Sent != "" && v.SentToken() != ap.Sent {
			return false, fmt.Errorf("%w: %s on %s, token %q, the record's is %q", ErrStaleToken, ap.ID, v.FileSystem, ap.Sent, v.SentToken())
		}
		if v.AccessPoint != "" && v.AccessPoint != ap.ID && !replace {
			return false, fmt.Errorf("journal: token %q on %s is recorded for %s, not %s", v.Token, v.FileSystem, v.AccessPoint, ap.ID)
		}
		if v.AccessPoint != ap.ID {
			v.Recorded = j.now().UTC()
		}
		v.AccessPoint, v.Path, v.ClientToken, v.UID, v.GID, v.Allocated = ap.ID, ap.Path, ap.Token, ap.UID, ap.GID, ap.Allocated
		return true, nil
	})
	if err == nil {
		j.noteNamed(r)
	}
	return err
}

// SetClaim records the claim r now serves (reuseAccessPoint: a re-created
// claim of the same namespace and name).
func (j *Journal) SetClaim(ctx context.Context, r *Record, name, namespace string) error {
	return j.mutate(ctx, r, func(v *Volume) (bool, error) {
		if v.Name == name && v.ClaimNamespace == namespace {
			return false, nil
		}
		v.Name, v.ClaimNamespace = name, namespace
		return true, nil
	})
}

// MarkBound records that a PersistentVolume named r's access point: the
// orphan collector never collects it after that. Only r's life, naming
// the access point r names: read again on a conflict, the record may be
// the volume's next life (the one the PersistentVolume named was deleted,
// and a create its caller forgot began another), which no
// PersistentVolume named; marked, it would never be collected (found by
// the model checker's abandoned claim). That is ErrNotFound, nothing
// written: the volume the PersistentVolume named is gone.
func (j *Journal) MarkBound(ctx context.Context, r *Record) error {
	created, ap := r.Created, r.AccessPoint
	return j.mutate(ctx, r, func(v *Volume) (bool, error) {
		switch {
		case !v.Created.Equal(created) || v.AccessPoint != ap:
			return false, fmt.Errorf("%w: %s/%q: the record now is another life of it, or names another access point, than the one read", ErrNotFound, v.FileSystem, v.Token)
		case v.Bound:
			return false, nil
		}
		v.Bound = true
		return true, nil
	})
}

// Finish removes r once its access point is proven gone (deleted, or
// proven never created): its id first, so that a crash in between leaves
// a volume record (retried) and never an id held for nobody... and never
// an id free while a record still names it as sent.
//
// Only r's life: the id table holds an id for a volume's token, not for
// one life of its record, so a Finish of a life that another caller
// finished already (a create's withdraw taken over by the volume's next
// create, two deletes of one volume) must not release the id that the
// record's next life holds again (TestModel's outside writer: a later
// life answered with an id nobody held). So the id entry is read first,
// then the record: the record still of r's life shows the entry read
// before is this life's hold (a later life holds the id only once this
// record is gone, under a version of its own, which the compare-and-swap
// of the entry's delete refuses).
func (j *Journal) Finish(ctx context.Context, r *Record) (err error) {
	named := apKey{r.FileSystem, r.AccessPoint}
	defer func() {
		if err == nil && named.ap != "" {
			j.mu.Lock()
			delete(j.named, named)
			j.mu.Unlock()
		}
	}()
	if done, err := j.finishSeen(ctx, r); done || err != nil {
		return err
	}
	life := r.Created
	hinted := true
	for range maxConflicts {
		held, err := j.heldFor(ctx, r.FileSystem, r.Allocated, r.Token, hinted)
		if err != nil {
			return err
		}
		hinted = false
		cur, err := j.Volume(ctx, r.FileSystem, r.Token)
		switch {
		case errors.Is(err, ErrNotFound):
			return nil // finished by another
		case err != nil:
			return err
		case !cur.Created.Equal(life):
			return nil // finished by another and made again since: the next life's
		case cur.Allocated != r.Allocated:
			*r = *cur // its id moved since r was read: release the one it has
			continue
		}
		if held != nil {
			if err := j.s.Delete(ctx, *held); errors.Is(err, ErrConflict) {
				*r = *cur
				continue
			} else if err != nil {
				return err
			}
		}
		if cur.Placed != "" {
			// Before the volume entry: a crash in between leaves the record,
			// whose delete is retried, never a place entry of nothing.
			if err := j.Unplace(ctx, cur.Placed, cur.FileSystem); err != nil {
				return err
			}
		}
		err = j.s.Delete(ctx, cur.entry)
		if !errors.Is(err, ErrConflict) {
			return err
		}
		*r = *cur
	}
	return fmt.Errorf("%w: %s/%q kept changing", ErrUnavailable, r.FileSystem, r.Token)
}

// finishSeen is Finish with no read, for a record whose last write by
// this process proved it current after the id entry was seen (idSeen):
// both deletes by compare-and-swap, at the versions known. False, with
// nothing wrong, when that does not settle it (a conflict: another wrote
// either since): Finish then reads.
func (j *Journal) finishSeen(ctx context.Context, r *Record) (bool, error) {
	seen := r.idSeen
	if seen == nil || seen.Key != idKey(r.FileSystem, r.Allocated) || string(seen.Value) != r.Token {
		return false, nil
	}
	switch err := j.s.Delete(ctx, *seen); {
	case errors.Is(err, ErrConflict):
		return false, nil
	case err != nil:
		return false, err
	}
	r.idSeen = nil
	if r.Placed != "" {
		if err := j.Unplace(ctx, r.Placed, r.FileSystem); err != nil {
			return false, err
		}
	}
	switch err := j.s.Delete(ctx, r.entry); {
	case errors.Is(err, ErrConflict):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// placeKey is the place entry of the volume named name. Its file system
// field is not one: the entry says which one.
func placeKey(name string) Key { return Key{Kind: KindPlace, FileSystem: "any", Name: name} }

// Place records that file system fs holds the volume named name, unless
// another is recorded already: it returns the one recorded (a retry's, a
// restart's, another controller's choice wins, so every create of a
// volume goes to one file system).
func (j *Journal) Place(ctx context.Context, name, fs string) (string, error) {
	got, err := j.s.Create(ctx, Entry{Key: placeKey(name), Value: []byte(fs)})
	switch {
	case err == nil:
		return fs, nil
	case errors.Is(err, ErrExists):
		return string(got.Value), nil
	}
	return "", err
}

// Placement is the file system Place recorded for the volume named name;
// ErrNotFound if none.
func (j *Journal) Placement(ctx context.Context, name string) (string, error) {
	e, err := j.s.Get(ctx, placeKey(name))
	if err != nil {
		return "", err
	}
	return string(e.Value), nil
}

// Unplace removes the place entry of the volume named name if it names
// fs.
func (j *Journal) Unplace(ctx context.Context, name, fs string) error {
	for range maxConflicts {
		e, err := j.s.Get(ctx, placeKey(name))
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if string(e.Value) != fs {
			return nil
		}
		if err := j.s.Delete(ctx, e); !errors.Is(err, ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("%w: place of %q kept changing", ErrUnavailable, name)
}

// ByAccessPoint is the record naming access point apID on fs; ErrNotFound
// if none does.
func (j *Journal) ByAccessPoint(ctx context.Context, fs, apID string) (*Record, error) {
	var found *Record
	err := j.s.List(ctx, KindVolume, fs, apID, func(es []Entry) error {
		for _, e := range es {
			if r, err := decode(e); err == nil && r.AccessPoint == apID {
				found = r
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, fmt.Errorf("%w: access point %s on %s", ErrNotFound, apID, fs)
	}
	j.noteNamed(found)
	return found, nil
}

// ByAccessPointHint is ByAccessPoint from what this process last read or
// wrote of the record naming apID (VolumeHint), when that still names it;
// else ByAccessPoint. Possibly stale, so only for a caller that proves it
// before acting (a compare-and-swap, or a read under the volume's locks);
// a record it does not find is always looked up.
func (j *Journal) ByAccessPointHint(ctx context.Context, fs, apID string) (*Record, error) {
	j.mu.Lock()
	token, ok := j.named[apKey{fs, apID}]
	j.mu.Unlock()
	if ok {
		if r, err := j.VolumeHint(ctx, fs, token); err == nil && r.AccessPoint == apID {
			return r, nil
		}
	}
	return j.ByAccessPoint(ctx, fs, apID)
}

// noteNamed remembers which record names r's access point.
func (j *Journal) noteNamed(r *Record) {
	if r.AccessPoint == "" {
		return
	}
	j.mu.Lock()
	j.named[apKey{r.FileSystem, r.AccessPoint}] = r.Token
	j.mu.Unlock()
}

// Volumes calls fn with every volume record of fs ("" = all), page by
// page. A record that cannot be decoded is skipped (and never acted on).
func (j *Journal) Volumes(ctx context.Context, fs string, fn func([]*Record) error) error {
	j.mu.Lock()
	j.reads++
	read := j.reads
	j.mu.Unlock()
	err := j.s.List(ctx, KindVolume, fs, "", func(es []Entry) error {
		return fn(j.decodeListed(es, read))
	})
	if err == nil {
		j.dropUnlisted(fs, read)
	}
	return err
}

// decodeListed decodes es, each only if its version is not the one decoded
// before. Each caller gets records of its own.
func (j *Journal) decodeListed(es []Entry, read uint64) []*Record {
	rs := make([]*Record, 0, len(es))
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range es {
		c, ok := j.listed[e.Key]
		if !ok || c.r.entry.Version != e.Version {
			r, err := decode(e)
			if err != nil {
				delete(j.listed, e.Key)
				continue
			}
			c.r = *r
		}
		c.seen = max(c.seen, read)
		j.listed[e.Key] = c
		r := c.r
		rs = append(rs, &r)
	}
	return rs
}

// dropUnlisted forgets the decoded records of fs ("": all) that the
// complete read numbered read did not see (deleted since, or seen only by
// an earlier read).
func (j *Journal) dropUnlisted(fs string, read uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for k, c := range j.listed {
		if (fs == "" || k.FileSystem == fs) && c.seen < read {
			delete(j.listed, k)
		}
	}
}

// handoverKey is the one entry of KindHandover.
var handoverKey = Key{Kind: KindHandover, FileSystem: "any", Name: "handover"}

// HandedOver reports whether a controller of this record has passed the
// handover fence (MarkHandedOver): whatever provisioned before this
// driver (upstream's controller, in an in-place upgrade) has had every
// call in flight end, and nothing it made can appear any more.
func (j *Journal) HandedOver(ctx context.Context) (bool, error) {
	_, err := j.s.Get(ctx, handoverKey)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotFound):
		return false, nil
	}
	return false, err
}

// MarkHandedOver records that the handover fence passed at at; once
// written it stays.
func (j *Journal) MarkHandedOver(ctx context.Context, at time.Time) error {
	_, err := j.s.Create(ctx, Entry{Key: handoverKey, Value: []byte(at.UTC().Format(time.RFC3339Nano))})
	if errors.Is(err, ErrExists) {
		return nil
	}
	return err
}
