package core

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Errors a create adds to the sentinels of pkg/efs, pkg/gid, pkg/journal
// and pkg/keylock.
var (
	// ErrGIDContention: another writer took every GID this call tried; retry.
	ErrGIDContention = errors.New("GID contention with another writer")
	// ErrNotYetVisible: EFS says the token's access point exists but does not show it yet; retry.
	ErrNotYetVisible = errors.New("access point not yet visible")
)

// The effects of a create, besides Answer, Lock, ReadRecord,
// DeleteAccessPoint and Finish. Every record write updates its Record in
// place (its version, and what it wrote), as pkg/journal does, so the
// machine's record is the one written.
type (
	// Refresh lists the file system for this process's allocator view
	// (pkg/gid) and its memory (FS.Listed), or waits for the listing
	// under way, unless one completed since the allocator's count of
	// listings was Since (Result.Err).
	Refresh struct {
		FileSystem string
		Since      uint64
	}
	// Begin makes the volume's record, or finds it (Result.Record;
	// Result.Yes: made now), with its id held in the same write where the
	// record can (journal.BeginHeld; Result.Held).
	Begin struct{ Volume journal.Volume }
	// Hold holds the record's id in the id table (Result.Yes: its token
	// held it already; Result.Err: journal.ErrIDTaken by another volume).
	Hold struct{ Record *journal.Record }
	// HoldID holds the record's id, without the touch of Hold
	// (Result.Err).
	HoldID struct{ Record *journal.Record }
	// Touch writes the record again at the version read, re-reading it on
	// a conflict (journal.Touch; Result.Err).
	Touch struct{ Record *journal.Record }
	// SetIDs moves the record from the id From to these (Result.Err:
	// journal.ErrConflict when another writer changed them first). Move:
	// a move off an id no create of the volume may have sent under, which
	// conflicts too if From is held for the record's token by then
	// (journal.MoveID).
	SetIDs struct {
		Record             *journal.Record
		From, UID, GID, ID int64
		ClientToken        string
		Probe              int
		Move               bool
	}
	// ReleaseUnsentID releases ID, which Record held but this call never
	// sent, or sent to be told another writer's access point holds its
	// token: only the entry this call's Hold wrote, if it held ID (another
	// create of the volume may hold it again since, and send under it;
	// journal.ReleaseUnsentID) (Result.Err).
	ReleaseUnsentID struct {
		Record *journal.Record
		ID     int64
		// OnlyMade: only if this call's Hold made the entry, not wrote
		// again one the volume held already.
		OnlyMade bool
	}
	// ReleaseMovedID releases ID, held for the volume of token Holder,
	// unless that volume's record holds it and is not being deleted; past
	// the call's own context (Result.Err).
	ReleaseMovedID struct {
		FileSystem string
		ID         int64
		Holder     string
	}
	// HoldForSweep holds ID for the deletion of AccessPoint, under a holder
	// no volume has (journal.HoldForSweep): no create sends the id's GID
	// token while it is held (Result.Err: journal.ErrIDTaken, with
	// Result.Token the volume that holds it).
	HoldForSweep struct {
		FileSystem  string
		ID          int64
		AccessPoint string
	}
	// ReleaseSweep releases that hold (Result.Err).
	ReleaseSweep struct {
		FileSystem  string
		ID          int64
		AccessPoint string
	}
	// SetAccessPoint records the access point the record's create made or
	// found (Result.Err: journal.ErrDeleting, journal.ErrStaleToken).
	SetAccessPoint struct {
		Record  *journal.Record
		Made    journal.Made
		Replace bool
	}
	// SetClaim records the claim a reuseAccessPoint record serves.
	SetClaim struct {
		Record          *journal.Record
		Name, Namespace string
	}
	// Describe is one access point (Result.AP, or
	// efs.ErrAccessPointNotFound); FollowUp: before new work (a create was
	// applied).
	Describe struct {
		AccessPoint string
		FollowUp    bool
	}
	// List is a listing of the file system that starts after this call
	// asked, before new work (Result.APs).
	List struct{ FileSystem string }
	// CreateAccessPoint sends Input (Result.AP, or Result.Err: an
	// *efs.AlreadyExistsError for a token already bound).
	CreateAccessPoint struct{ Input efs.CreateAccessPointInput }
	// Detach runs the rest of the call past its own context, within the
	// cleanup budget: what must follow what the call did. No result.
	Detach struct{}
)

func (Refresh) effect()           {}
func (Begin) effect()             {}
func (Hold) effect()              {}
func (HoldID) effect()            {}
func (Touch) effect()             {}
func (SetIDs) effect()            {}
func (ReleaseUnsentID) effect()   {}
func (ReleaseMovedID) effect()    {}
func (SetAccessPoint) effect()    {}
func (HoldForSweep) effect()      {}
func (ReleaseSweep) effect()      {}
func (SetClaim) effect()          {}
func (Describe) effect()          {}
func (List) effect()              {}
func (CreateAccessPoint) effect() {}
func (Detach) effect()            {}

// MaxIDAttempts bounds how many ids one call tries when other volumes hold
// the ones it picked (in the record, or on access points carrying their
// GID tokens: another controller's creates at the same moment).
const MaxIDAttempts = 8

// CreateConfig is what a create needs of its controller.
type CreateConfig struct {
	API           string // the backend's API, recorded with the volume
	Cluster       string // --cluster-id: another cluster's access points hold no volume's token here (TokenHolder)
	DeleteRootDir bool   // --delete-access-point-root-dir: this process's deletes see its creates
	// Near is the record's test of whether an id's entry is kept with
	// the record of a volume (journal.Journal.Near), which a volume's
	// sequence tries first (FS.Candidate); nil: any id is.
	Near func(fs, token string) func(id int64) bool
	// Logger is where the create logs what it decided (nil: nowhere).
	Logger *slog.Logger
}

// Create is steps 4-7 of a CreateVolume (docs/design.md, "Create"), under
// the volume's name locks. The record comes first: the volume's entry
// (token, path, ids) and its id, held in the record, before any
// CreateAccessPoint, so that every later step (a retry, a restart, another
// controller, DeleteVolume, the orphan collector) knows what this create
// may have made. The client token sent is the record's (a GID token for
// allocating classes): EFS binds it to one access point, so no two writers
// using GID tokens ever put one id on two access points, whatever record
// each keeps. Nothing is deleted on this path but an access point nobody
// answered: withdrawn, or made for a record being deleted or moved off
// its token. The answer is the access point (Answer.AP).
//
// Each step below is a method that returns what the next needs, or the
// error the call is answered with: the protocol reads top to bottom from
// protocol.
type Create struct {
	proc
	cfg CreateConfig
	p   *Plan
	mem Memory // the file system's
	rec *journal.Record
	// res is the call's reservation in this process's allocator, nil for
	// none: it keeps this process's other creates off the id until the
	// allocator has the access point (FS.Seen) or the create failed; the
	// record holds it for every process. held is every reservation the
	// call holds, released when the machine ends or is stopped (run).
	res  *gid.Reservation
	held []*gid.Reservation
}

// NewCreate starts the protocol of p at now.
func NewCreate(cfg CreateConfig, p *Plan, mem Memory, now time.Time) *Create {
	c := &Create{cfg: cfg, p: p, mem: mem}
	c.now = now
	c.run(cfg.Logger, func() Effect {
		defer c.releaseAll()
		return c.protocol()
	})
	return c
}

// protocol runs steps 4-7: the record, then the recorded access point or a
// send.
func (c *Create) protocol() Answer {
	if err := c.record(); err != nil {
		return Answer{Err: err}
	}
	var ap *efs.AccessPoint
	var err error
	if c.rec.AccessPoint == "" {
		ap, err = c.send(1)
	} else {
		ap, err = c.recorded()
	}
	if err != nil {
		return Answer{Err: err}
	}
	return Answer{AP: ap}
}

// release ends the current reservation, if any.
func (c *Create) release() {
	c.drop(c.res)
	c.res = nil
}

// releaseAll ends every reservation the call made: deferred by the
// machine's function, so it runs at its end or when it is stopped, under
// its file system's lock as every step.
func (c *Create) releaseAll() {
	for _, r := range c.held {
		c.mem.Release(r)
	}
	c.held, c.res = nil, nil
}

// reserve reserves an id of [lo, hi] for key in this process's allocator
// (FS.Reserve), after a listing of the file system (Refresh) if its view
// is old or looks full. The reservation is held until release or the
// machine's end.
func (c *Create) reserve(lo, hi int64, key string) (*gid.Reservation, error) {
	since := c.mem.Listings()
	for listed := false; ; listed = true {
		res, err := c.mem.Reserve(lo, hi, key, since, c.now, c.fits())
		switch {
		case err == nil:
			c.held = append(c.held, res)
			return res, nil
		case !errors.Is(err, gid.ErrStale):
			return nil, err
		case listed:
			// A listing completed since: the allocator never asks twice.
			return nil, fmt.Errorf("%w: the allocator asked for a second listing", ErrStuck)
		}
		if r := c.do(Refresh{FileSystem: c.p.Params.FileSystemID, Since: since}); r.Err != nil {
			return nil, r.Err
		}
	}
}

// record finds or makes the volume's record (with an id reserved in the
// allocator for a new one) and makes its id held in the record, with c.rec
// set.
func (c *Create) record() error {
	rec, held, err := c.begin()
	if err != nil {
		return err
	}
	c.rec = rec
	if rec.Deleting {
		return fmt.Errorf("%w: %w: %s/%q", keylock.ErrBusy, journal.ErrDeleting, rec.FileSystem, rec.Token)
	}
	if why := c.p.recordMismatch(rec); why != "" {
		return fmt.Errorf("%w: volume %q: %s", ErrIncompatible, c.p.Name, why)
	}
	if held {
		// Made with its id held in one write: no other writer saw the
		// record before its id was held, so none moved it off the id,
		// which is the volume's until a delete marks the record (step 5).
		return nil
	}
	// A record naming its access point is confirmed after the Describe
	// that finds it, or before the send that makes it again (recorded):
	// not here.
	return c.hold(1, rec.AccessPoint != "")
}

// begin finds the volume's record or makes it with a freshly reserved id
// (the reservation kept in c.res; held: made with its id held in the same
// write). A retry whose record exists needs no new id: when the
// range is full (it may be full of this very volume's id) the record is
// looked up before giving up.
func (c *Create) begin() (rec *journal.Record, held bool, err error) {
	p := c.p
	if !p.Params.NeedsGIDAllocation() {
		return c.beginWith(p.Params.UID, p.Params.GID, journal.NoID, false, 0)
	}
	res, err := c.reserve(p.Params.GIDRangeStart, p.Params.GIDRangeEnd, p.Name)
	exhausted := errors.Is(err, gid.ErrExhausted)
	switch {
	case exhausted:
	case err != nil:
		return nil, false, err
	default:
		c.res = res
	}
	// The listing the reservation made or trusted shows what upstream made
	// for this volume, if anything: that access point is the volume's
	// (upstream).
	if up := c.upstream(); up != nil {
		c.release()
		return c.beginWith(p.Params.UID, p.Params.GID, AllocatedID(p.Params.GID, up), false, 0)
	}
	if exhausted {
		return c.exhausted(err)
	}
	if !p.usesGIDToken() {
		return c.beginWith(p.Params.UID, p.Params.GID, res.GID(), false, 0)
	}
	// The allocator only refreshed the view and said the range is not
	// full: the volume's own sequence chooses.
	c.release()
	id, n, err := c.candidate(0)
	if err != nil {
		return nil, false, err
	}
	return c.beginWith(p.Params.UID, p.Params.GID, id, true, n)
}

// candidate is the first id of the volume's own sequence from its place
// from on that the file system's memory does not skip (FS.Candidate), and
// its place.
func (c *Create) candidate(from int) (int64, int, error) {
	p := c.p
	return c.mem.Candidate(p.Name, p.Input.Path, p.Params.GIDRangeStart, p.Params.GIDRangeEnd, from, c.fits())
}

// fits is the record's test of whether an id's entry is kept with the
// volume's record (CreateConfig.Near), which FS.Candidate and FS.Reserve
// try first; nil: any id is.
func (c *Create) fits() func(int64) bool {
	if c.cfg.Near == nil {
		return nil
	}
	return c.cfg.Near(c.p.Params.FileSystemID, c.p.Input.ClientToken)
}

// exhausted ends a create whose range the allocator saw full with err,
// unless the volume's record exists: a retry needs no new id (the range
// may be full of this very volume's id).
func (c *Create) exhausted(err error) (*journal.Record, bool, error) {
	p := c.p
	r := c.do(ReadRecord{FileSystem: p.Params.FileSystemID, Key: p.Input.ClientToken})
	switch {
	case r.Err == nil:
		return r.Record, false, nil
	case !errors.Is(r.Err, journal.ErrNotFound):
		return nil, false, r.Err
	}
	return nil, false, err
}

// upstream is the access point upstream's driver made for this volume, as
// the allocator's last listing showed it (its ids; nil if none): one under
// the volume name's token, made before the handover fence
// (pkg/controller/handover.go), after which upstream makes none. The
// record then sends that token and records that GID, and the create
// adopts it, as upstream would have answered it, instead of making a
// second one. Every listing since the fence showed it, so no volume of
// this driver carries its GID.
func (c *Create) upstream() *efs.AccessPoint {
	tok := c.p.Input.ClientToken
	if tok == "" || volume.IsGIDToken(tok) || c.p.Dir {
		return nil
	}
	return c.mem.Upstream(tok)
}

// beginWith writes the record with the id alloc (journal.NoID: the class
// fixes both), under its GID token if gidToken (at place probe of the
// volume's sequence).
func (c *Create) beginWith(uid, g, alloc int64, gidToken bool, probe int) (*journal.Record, bool, error) {
	p := c.p
	fsID := p.Params.FileSystemID
	if alloc != journal.NoID {
		uid, g = p.Params.Identity(alloc)
	}
	v := journal.Volume{
		FileSystem: fsID, Token: p.Input.ClientToken, Name: p.Name, API: c.cfg.API, Path: p.Input.Path,
		UID: uid, GID: g, Allocated: alloc, ClaimNamespace: p.Params.PVCNamespace, ClaimName: p.Params.PVCName,
	}
	// The capacity asked: a repeat with another is incompatible
	// (recordMismatch), which no tag need say.
	v.Dir, v.Capacity = p.Dir, p.Capacity
	v.Placed = p.Placed
	if gidToken {
		v.ClientToken, v.Probe = volume.GIDToken(fsID, alloc), probe
	}
	r := c.do(Begin{Volume: v})
	switch {
	case r.Err != nil:
		return nil, false, r.Err
	case !r.Yes:
		c.release() // the record has its own
		return r.Record, false, nil
	}
	return r.Record, r.Held, nil
}

// hold makes the record's id held in the id table, taking another id while
// other volumes hold the ones it has. Then the record is confirmed, the
// last step before the send: a delete, or another create's move to
// another id, may have overtaken what this call read or wrote, and a
// delete marks the record before it deletes anything. A send under a
// token that delete freed would make an access point nobody answers
// (leak-dup-create-after-delete); one under an id the record moved from,
// an id held for nobody (record-id-left-after-stale-drop), or an access
// point no record names once its cleanup is cut short
// (leak-maker-sends-unconfirmed-after-move: a record this call made,
// moved by a duplicate while another volume held its id, whose hold then
// found the id free). Only a record made with its id held in the same
// write is sent with no confirm (record). later: the caller confirms it
// itself, after a Describe (recorded).
func (c *Create) hold(attempt int, later bool) error {
	for ; ; attempt++ {
		rec := c.rec
		r := c.do(Hold{Record: rec})
		switch {
		case r.Err == nil && later:
			return nil
		case r.Err == nil:
			return c.confirm()
		case !errors.Is(r.Err, journal.ErrIDTaken):
			return r.Err
		case rec.AccessPoint != "" || !c.p.Params.NeedsGIDAllocation() || attempt >= MaxIDAttempts:
			// An access point already carries the id (adopted from a
			// release before the record, which shared it), or the class
			// changed to fixed ids: nothing this call may change.
			return fmt.Errorf("%w: %w", ErrGIDContention, r.Err)
		}
		// Another volume holds the id: this record's id was never sent (a
		// create sends only a held id), so it may take another. Nothing
		// is released: the entry was not this volume's when this Hold
		// read it, and if it is by now, another create of this volume
		// holds it, and may have sent under it (TestModel's id check,
		// four preemptions: a duplicate released the id its retry had
		// just held, sent and recorded).
		if err := c.moveID(attempt, false); err != nil {
			return err
		}
	}
}

// moveID gives the record another id, and the GID token that goes with
// it, once no access point of the record's can carry the one it has
// (never sent, or EFS answered that another writer's holds its token).
// For a GID token it is the next of the volume's own sequence, as every
// writer of it takes, if the allocator's view says the range is not full;
// else one reserved now, which replaces c.res. The old id's entry is
// released first, if this call held it (held): a crash in between leaves a
// record naming an id it no longer holds, which its retry holds again or
// moves from, never an id held for nobody. Another writer that changed
// the record's ids first wins: the next hold holds what it chose. So does
// another create of the volume that holds the old id by the time of the
// move (journal.MoveID): it may have sent under it.
func (c *Create) moveID(attempt int, held bool) error {
	p, rec := c.p, c.rec
	fsID := p.Params.FileSystemID
	lo, hi := p.Params.GIDRangeStart, p.Params.GIDRangeEnd
	var next int64
	token, probe := "", 0
	var handle *gid.Reservation
	if !volume.IsGIDToken(rec.SentToken()) {
		res, err := c.reserve(lo, hi, p.Name+"#"+strconv.Itoa(attempt))
		if err != nil {
			return err
		}
		next, handle = res.GID(), res
	} else {
		res, err := c.reserve(lo, hi, p.Name)
		if err != nil {
			return err
		}
		c.drop(res)
		id, n, err := c.candidate(rec.Probe + 1)
		switch {
		case err != nil:
			return err
		case id == rec.Allocated:
			return fmt.Errorf("%w in [%d, %d] on %s: volume %q's sequence came round to %d, which another volume holds",
				gid.ErrExhausted, lo, hi, fsID, p.Name, id)
		}
		next, token, probe = id, volume.GIDToken(fsID, id), n
	}
	if held {
		if r := c.do(ReleaseUnsentID{Record: rec, ID: rec.Allocated}); r.Err != nil {
			c.drop(handle)
			return r.Err
		}
	}
	nu, ng := p.Params.Identity(next)
	r := c.do(SetIDs{Record: rec, From: rec.Allocated, UID: nu, GID: ng, ID: next, ClientToken: token, Probe: probe, Move: true})
	switch {
	case errors.Is(r.Err, journal.ErrConflict):
		// Another create of the volume moved the record, or holds the id
		// again: the next hold's confirm shows what it did.
		c.drop(handle)
		return nil
	case r.Err != nil:
		c.drop(handle)
		return r.Err
	case handle != nil:
		c.release()
		c.res = handle
	}
	return nil
}

// seen tells this process of ap, which exists: the allocator's view
// (FS.Seen), and the file system's memory of the GID token it holds, which
// the volumes' sequences skip for other volumes (FS.SawToken).
func (c *Create) seen(ap *efs.AccessPoint) {
	c.mem.Seen(*ap, c.now)
	c.mem.SawToken(ap, c.cfg.Cluster)
}

// drop ends the reservation r, unless it is nil (none).
func (c *Create) drop(r *gid.Reservation) {
	if i := slices.Index(c.held, r); i >= 0 {
		c.held = slices.Delete(c.held, i, i+1)
		c.mem.Release(r)
	}
}

// confirm writes the record again, a compare-and-swap at the version this
// call read (journal.Touch): it proves the record unchanged since, or
// reads it again. It must still be the same life, naming the same access
// point and id, sending the same token, and not be being deleted; else
// keylock.ErrBusy (the volume's delete, or another create, is under way:
// retry), and the id this call holds for the record is released unless
// the record holds it: this call may have held it again after the record
// moved off it or its delete released it. Being deleted, the record still
// holds its id until its Finish (its access point may live), so only an
// entry this call's hold made is released (ReleaseUnsentID): one it wrote
// again was the volume's (the simulator's wide seed 676900: a directory
// volume took the id of an access point whose delete was under way). A write, not a read: the
// record's version moves, so a delete that read it before must read it
// again to mark it (the Lease store batches writes; a read is a request
// of its own).
func (c *Create) confirm() error {
	rec := c.rec
	held := *rec
	r := c.do(Touch{Record: rec})
	switch {
	case errors.Is(r.Err, journal.ErrDeleting):
		err := fmt.Errorf("%w: %w", keylock.ErrBusy, r.Err)
		return join(err, c.do(ReleaseUnsentID{Record: &held, ID: held.Allocated, OnlyMade: true}).Err)
	case r.Err != nil:
		return r.Err
	case rec.AccessPoint != held.AccessPoint || !rec.Created.Equal(held.Created) ||
		rec.Allocated != held.Allocated || rec.SentToken() != held.SentToken():
		err := fmt.Errorf("%w: the record of volume %q changed (another create)", keylock.ErrBusy, rec.Name)
		return join(err, c.do(ReleaseMovedID{FileSystem: held.FileSystem, ID: held.Allocated, Holder: held.Token}).Err)
	}
	return nil
}

// recorded answers the access point a create of this volume made and
// recorded, if it fits the plan, once the record, confirmed after the
// Describe that found it (the last step before the answer), still names
// it and is not being deleted: a delete marks the record before it
// deletes the access point, so a confirm after the Describe shows a
// delete that began before it. Confirmed before the Describe (in hold),
// a duplicate answered an access point whose delete had marked the
// record in between (TestModel, two preemptions: the delete then deleted
// it). Not visible: deleted behind the record's back, or Describe lags;
// the create sent next tells which (the token finds it, or it is free).
// But first the record again, for the same reason: a create sent now
// would make an access point under the token that delete freed, which
// nobody can answer (a kill before its cleanup leaks it).
func (c *Create) recorded() (*efs.AccessPoint, error) {
	r := c.do(Describe{AccessPoint: c.rec.AccessPoint, FollowUp: true})
	switch {
	case r.Err == nil:
		c.seen(r.AP)
		if err := c.p.Check(r.AP); err != nil {
			return nil, err
		}
		if err := c.confirm(); err != nil {
			return nil, err
		}
		return r.AP, nil
	case !errors.Is(r.Err, efs.ErrAccessPointNotFound):
		return nil, r.Err
	}
	if err := c.confirm(); err != nil {
		return nil, err
	}
	return c.send(1)
}

// send makes the record's access point: CreateAccessPoint with the
// record's token, ids and life; again with the next attempt while another
// writer's access point holds the token sent (taken), or upstream's is
// gone (adoptUpstream).
func (c *Create) send(attempt int) (*efs.AccessPoint, error) {
	for ; ; attempt++ {
		p, rec := c.p, c.rec
		if p.usesGIDToken() && !volume.IsGIDToken(rec.SentToken()) {
			// The record adopts upstream's access point (upstream):
			// never a create under its token, which, that access point
			// gone, would make one whose GID no token protects.
			if ap, again, err := c.adoptUpstream(); !again {
				return ap, err
			}
			continue
		}
		in := p.Input
		in.ClientToken = rec.SentToken()
		if in.Tags[ownership.TagVolumeName] != "" {
			// --descriptive-tags: the record's life, the collector's
			// proof against a forged record (TaggedFor).
			in.Tags = maps.Clone(in.Tags)
			in.Tags[ownership.TagRecordLife] = ownership.RecordLife(rec)
		}
		in.PosixUser = &efs.PosixUser{UID: rec.UID, GID: rec.GID}
		in.CreationInfo = &efs.CreationInfo{OwnerUID: rec.UID, OwnerGID: rec.GID, Permissions: p.Params.DirectoryPerms}
		sentID := rec.Allocated
		r := c.do(CreateAccessPoint{Input: in})
		if r.Err == nil && volume.IsGIDToken(in.ClientToken) && !p.ours(r.AP) {
			// A lenient server (S3 Files) answers a repeated token with
			// the access point holding it, as if created.
			r.Err = &efs.AlreadyExistsError{AccessPointID: r.AP.ID}
		}
		switch {
		case r.Err == nil:
			return c.made(r.AP, in.ClientToken, sentID)
		case !errors.Is(r.Err, efs.ErrAlreadyExists):
			// Unknown outcome (UNAVAILABLE, deadline) or refused: the
			// record and its id stay, so the retry sends the identical
			// request, and the id is on no other access point meanwhile.
			return nil, r.Err
		}
		found, err := c.holder(in.ClientToken, r.Err)
		if err != nil {
			return nil, err
		}
		if ap, again, err := c.taken(attempt, in.ClientToken, found); !again {
			return ap, err
		}
	}
}

// adoptUpstream adopts the access point upstream's driver made for the
// volume, whose token and GID the record took (begin): as EFS describes it
// now. Gone since the listing (its volume deleted meanwhile, by a create
// that adopted it and its delete), the record moves to the volume's own
// sequence of GID tokens, as a new record starts, and holds its id: send
// again (again).
func (c *Create) adoptUpstream() (ap *efs.AccessPoint, again bool, err error) {
	rec := c.rec
	if up := c.mem.Upstream(rec.SentToken()); up != nil {
		d := c.do(Describe{AccessPoint: up.ID})
		switch {
		case d.Err == nil && d.AP.ClientToken == rec.SentToken():
			ap, err := c.adopt(d.AP)
			return ap, false, err
		case d.Err != nil && !errors.Is(d.Err, efs.ErrAccessPointNotFound):
			return nil, false, d.Err
		}
	}
	if err := c.toSequence(); err != nil {
		return nil, false, err
	}
	if err := c.hold(1, false); err != nil {
		return nil, false, err
	}
	return nil, true, nil
}

// toSequence moves the record, which sends a name token and was never
// sent, to the first id of the volume's own sequence and its GID token,
// releasing the id it held.
func (c *Create) toSequence() error {
	p, rec := c.p, c.rec
	fsID := p.Params.FileSystemID
	res, err := c.reserve(p.Params.GIDRangeStart, p.Params.GIDRangeEnd, p.Name)
	if err != nil {
		return err
	}
	c.drop(res)
	next, n, err := c.candidate(0)
	if err != nil {
		return err
	}
	if r := c.do(ReleaseUnsentID{Record: rec, ID: rec.Allocated}); r.Err != nil {
		return r.Err
	}
	nu, ng := p.Params.Identity(next)
	r := c.do(SetIDs{Record: rec, From: rec.Allocated, UID: nu, GID: ng, ID: next, ClientToken: volume.GIDToken(fsID, next), Probe: n})
	if errors.Is(r.Err, journal.ErrConflict) {
		return fmt.Errorf("%w: the record of volume %q changed (another create)", keylock.ErrBusy, rec.Name)
	}
	return r.Err
}

// made records the access point this call just made. From here on past
// the call's own context: cut short, this call would leave an access
// point that a retry adopts only while the record is not being deleted.
// One made after another replica's delete marked the record (a
// duplicate's send delayed past the mark) would be named by nothing, and
// that delete, which deletes the recorded access point, never sees it (the
// simulator's seed 27447: no fault, no kill, a provisioner's timeout).
// Recorded here, the write answers ErrDeleting and the access point is
// deleted.
func (c *Create) made(ap *efs.AccessPoint, token string, sentID int64) (*efs.AccessPoint, error) {
	rec := c.rec
	c.seen(ap) // before the local release: never free in between
	c.do(Detach{})
	made := journal.Made{ID: ap.ID, Path: ap.Path, Token: ap.ClientToken, UID: rec.UID, GID: rec.GID, Allocated: rec.Allocated,
		Sent: stale(token)}
	r := c.do(SetAccessPoint{Record: rec, Made: made, Replace: true})
	switch {
	case errors.Is(r.Err, journal.ErrDeleting) || errors.Is(r.Err, journal.ErrStaleToken) ||
		errors.Is(r.Err, journal.ErrNotFound):
		// The volume's delete began after this create read the record
		// and deleted the access point before this one was made: nobody
		// can answer this one (every create refuses a record being
		// deleted), so it goes. Or the record is gone (ErrNotFound): that
		// delete finished; no life of it names this one. Or a request
		// sent under a token the record has moved from (ErrStaleToken):
		// not the record's, never answered.
		return nil, c.dropUnanswered(ap, sentID, r.Err,
			"created while its volume was being deleted, or under a token its record moved from; never answered")
	case r.Err != nil:
		return nil, r.Err
	}
	return ap, nil
}

// burnAfter's stand-in: EFS keeps the token of an access point deleted
// long ago (it documents nothing either way), so the id is unusable under
// it. A stand-in that never shows in a listing keeps the id off this
// process's allocator for good.
func burnedStandIn(rec *journal.Record, token string) *efs.AccessPoint {
	return &efs.AccessPoint{ID: "burned:" + token, FileSystemID: rec.FileSystem,
		PosixUser: &efs.PosixUser{UID: rec.Allocated, GID: rec.Allocated}}
}

// holder describes the access point EFS named (err) as holding token; one
// EFS names but does not describe is not yet visible, or, for a GID token
// EFS has named so for long, burned.
func (c *Create) holder(token string, err error) (*efs.AccessPoint, error) {
	var ae *efs.AlreadyExistsError
	if !errors.As(err, &ae) || ae.AccessPointID == "" {
		return nil, fmt.Errorf("client token %q is taken but EFS named no access point: %w", token, err)
	}
	// The token's create was applied: its read is a follow-up.
	r := c.do(Describe{AccessPoint: ae.AccessPointID, FollowUp: true})
	switch {
	case r.Err == nil:
		return r.AP, nil
	case !errors.Is(r.Err, efs.ErrAccessPointNotFound):
		return nil, r.Err
	case volume.IsGIDToken(token) && c.mem.Burned(token, c.now):
		return burnedStandIn(c.rec, token), nil
	}
	return nil, fmt.Errorf("%w: %s holds client token %q", ErrNotYetVisible, ae.AccessPointID, token)
}

// taken goes on after EFS answered that found holds the token sent: this
// volume's (an earlier attempt whose answer was lost, and the like) is
// adopted; another writer's, holding the record's GID token, carries its
// id, and no attempt of ours made one with it (EFS binds the token to one
// access point): take another id and send again (again).
func (c *Create) taken(attempt int, token string, found *efs.AccessPoint) (ap *efs.AccessPoint, again bool, err error) {
	p, rec := c.p, c.rec
	if !volume.IsGIDToken(token) || p.ours(found) {
		ap, err := c.adopt(found)
		return ap, false, err
	}
	c.seen(found)
	c.logAttrs(slog.LevelInfo, "GID taken by another writer's access point; taking another",
		slog.String("name", p.Name), slog.Int64("gid", rec.Allocated), slog.String("other", found.ID))
	if attempt >= MaxIDAttempts {
		return nil, false, fmt.Errorf("%w: GID %d on %s is carried by access point %s (tried %d ids)", ErrGIDContention, rec.Allocated, rec.FileSystem, found.ID, attempt)
	}
	if err := c.moveID(attempt, true); err != nil {
		return nil, false, err
	}
	if err := c.hold(1, false); err != nil {
		return nil, false, err
	}
	return nil, true, nil
}

// adopt answers a create whose token EFS says is taken by found, this
// volume's: by an earlier attempt whose answer was lost, a killed process,
// another controller of this cluster, the upstream driver before the
// handover (adoptUpstream), or with reuseAccessPoint a claim's
// earlier volume. It is the volume's if it matches the plan, and the
// record then names it, the ids and the token it carries.
func (c *Create) adopt(found *efs.AccessPoint) (*efs.AccessPoint, error) {
	c.seen(found)
	p, rec := c.p, c.rec
	if err := p.Check(found); err != nil {
		return nil, err
	}
	if p.Params.ReuseAccessPoint && rec.AccessPoint == "" && !p.claimProven(found) && !madeWith(rec, found) {
		return nil, fmt.Errorf("%w: access point %s for volume %q: made for claim %q by an earlier driver, and nothing records its namespace (tag it %s=<namespace> to adopt it)",
			ErrIncompatible, found.ID, p.Name, p.Params.PVCName, ownership.TagClaimNamespace)
	}
	uid, g := PosixIDs(found)
	alloc := int64(journal.NoID)
	if p.Params.NeedsGIDAllocation() {
		alloc = AllocatedID(p.Params.GID, found)
	}
	made := journal.Made{ID: found.ID, Path: found.Path, Token: found.ClientToken, UID: uid, GID: g, Allocated: alloc,
		Sent: stale(rec.SentToken())}
	// The token is bound to found, so no attempt of ours made another
	// access point: the id the record planned is on none of ours, and is
	// released once found's is held. Released, and the claim recorded,
	// before the record names found: that write is the confirm, the last
	// before the answer. A write after it let a delete mark the record
	// and delete found before this call answered it (the simulator's seed
	// 20006567 of -sim.fs=3: a duplicate's release of its planned id).
	planned, moved := rec.Allocated, alloc != rec.Allocated
	if moved {
		adopted := *rec
		adopted.Allocated = alloc
		r := c.do(HoldID{Record: &adopted})
		switch {
		case errors.Is(r.Err, journal.ErrIDTaken):
			// Two access points of this file system already carry it
			// (the upstream driver shared it, before the handover):
			// answering changes nothing, refusing would not fix it.
			made.Allocated = journal.NoID
			c.logAttrs(slog.LevelWarn, "adopted access point shares its GID with another recorded volume",
				slog.String("accessPoint", found.ID), slog.Int64("gid", alloc), slog.String("error", r.Err.Error()))
		case r.Err != nil:
			return nil, r.Err
		}
		if r := c.do(ReleaseUnsentID{Record: rec, ID: planned}); r.Err != nil {
			return nil, r.Err
		}
	}
	if p.Params.ReuseAccessPoint {
		if r := c.do(SetClaim{Record: rec, Name: p.Name, Namespace: p.Params.PVCNamespace}); r.Err != nil {
			return nil, r.Err
		}
	}
	if r := c.do(SetAccessPoint{Record: rec, Made: made}); r.Err != nil {
		return nil, c.dropStale(found, alloc, r.Err)
	}
	return found, nil
}

// keptForNextLife reports whether ap, whose id this volume's key holds in
// the id table, is kept: if the volume's record (a retry of this life, or
// its next life) sends ap's token and names no other access point (its
// create adopts ap), or is gone since the hold was refused (a next life
// may begin at any moment: the collector's sweep decides). Otherwise the
// record sends another token (it moved to another id, or to the token of
// a writer outside the protocol) and its create does not find ap: it goes.
func (c *Create) keptForNextLife(ap *efs.AccessPoint) (bool, error) {
	rec := c.rec
	r := c.do(ReadRecord{FileSystem: ap.FileSystemID, Key: rec.Token})
	switch {
	case errors.Is(r.Err, journal.ErrNotFound):
	case r.Err != nil:
		return false, r.Err
	case r.Record.SentToken() == ap.ClientToken && !r.Record.Deleting && (r.Record.AccessPoint == "" || r.Record.AccessPoint == ap.ID):
	default:
		return false, nil
	}
	c.logAttrs(slog.LevelInfo, "access point kept: the volume's next create adopts it, or the collector's sweep deletes it",
		slog.String("accessPoint", ap.ID), slog.String("name", rec.Name))
	return true, nil
}

// cleanupTries is how many times a cleanup's record write is sent while
// the store is unavailable (journal.ErrUnavailable: a 5xx, a lost answer).
const cleanupTries = 3

// cleanup runs e, a write of dropUnanswered's that is idempotent
// (ReleaseMovedID, HoldForSweep, ReleaseSweep: each reads what it acts on,
// and is done if already done), again while the store is unavailable, up
// to cleanupTries in all. What the cleanup gives up on is left to the
// collector's sweep (the cluster's one record) or to nobody (a record per
// pod): the simulator's wide worlds, seeds 189518, 213611 and 219350,
// left access points named by nothing on one 5xx.
func (c *Create) cleanup(e Effect) Result {
	for n := 1; ; n++ {
		r := c.do(e)
		if n < cleanupTries && errors.Is(r.Err, journal.ErrUnavailable) {
			continue
		}
		return r
	}
}

// dropStale deletes found, an access point of this volume made under a
// GID token its record no longer sends (err wraps journal.ErrStaleToken):
// the record never named it, so nobody answered it (dropUnanswered).
// Other errors are answered.
func (c *Create) dropStale(found *efs.AccessPoint, id int64, err error) error {
	if !errors.Is(err, journal.ErrStaleToken) {
		return err
	}
	return c.dropUnanswered(found, id, err, "made under a GID token its volume's record moved from; never answered")
}

// dropUnanswered deletes ap, which this call made or found for the
// record's volume and which nobody can answer (why: the record is being
// deleted or gone, or sends another token by now), and releases id, held
// for it by this call, unless the record holds it: past the call's own
// context, since a call cut short here would leave them for nobody. The
// call ends keylock.ErrBusy (retry), wrapping why.
//
// Nobody can answer ap now, but under a GID token the volume's next life
// could: a create of it, begun once this life's delete finishes, sends
// the same token (its sequence starts at the same id), finds ap and
// adopts it. Deleted meanwhile, its answer was gone (TestModel, three
// preemptions). So the id is held first as the collector's sweep holds
// it (journal.HoldForSweep, Access points no record names): from then
// on no create sends that token. Held by a volume already (the next life,
// which may adopt ap, or another volume whose create finds ap another
// writer's), ap is kept: that create adopts it, or the collector's sweep
// deletes it once no record owns it. A class without allocated ids sends
// no GID token: its ap goes at once.
func (c *Create) dropUnanswered(ap *efs.AccessPoint, id int64, why error, reason string) error {
	rec := c.rec
	busy := func(err error) error { return fmt.Errorf("%w: %w", keylock.ErrBusy, join(why, err)) }
	c.do(Detach{})
	if !volume.IsGIDToken(ap.ClientToken) || id == journal.NoID {
		if err := c.deleteUnanswered(ap, why, reason); err != nil {
			return err
		}
		return busy(c.cleanup(ReleaseMovedID{FileSystem: rec.FileSystem, ID: id, Holder: rec.Token}).Err)
	}
	if r := c.cleanup(ReleaseMovedID{FileSystem: rec.FileSystem, ID: id, Holder: rec.Token}); r.Err != nil {
		return busy(r.Err)
	}
	r := c.cleanup(HoldForSweep{FileSystem: ap.FileSystemID, ID: id, AccessPoint: ap.ID})
	switch {
	case errors.Is(r.Err, journal.ErrIDTaken) && r.Token == rec.Token:
		if kept, err := c.keptForNextLife(ap); kept || err != nil {
			return busy(err)
		}
		if err := c.deleteUnanswered(ap, why, reason); err != nil {
			return err
		}
		return busy(nil)
	case errors.Is(r.Err, journal.ErrIDTaken):
		// Another volume's create finds ap another writer's (its
		// volume-name tag) and moves to another id: it never adopts ap.
		if err := c.deleteUnanswered(ap, why, reason); err != nil {
			return err
		}
		return busy(nil)
	case r.Err != nil:
		return busy(r.Err)
	}
	if err := c.deleteUnanswered(ap, why, reason); err != nil {
		return err
	}
	return busy(c.cleanup(ReleaseSweep{FileSystem: ap.FileSystemID, ID: id, AccessPoint: ap.ID}).Err)
}

// deleteUnanswered deletes ap for dropUnanswered, and logs it with its
// reason; a failure ends the call keylock.ErrBusy, wrapping why.
func (c *Create) deleteUnanswered(ap *efs.AccessPoint, why error, reason string) error {
	r := c.do(DeleteAccessPoint{FileSystem: ap.FileSystemID, AccessPoint: ap.ID})
	if r.Err != nil {
		return fmt.Errorf("%w: %w", keylock.ErrBusy, errors.Join(why, r.Err))
	}
	c.logAttrs(slog.LevelInfo, deletedMessage(r.Yes),
		slog.String("accessPoint", ap.ID), slog.String("name", c.rec.Name), slog.String("reason", reason))
	return nil
}
