package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// GID verification modes (--gid-verify).
const (
	VerifyAuto   = "auto"   // while another writer may be active (see verifier)
	VerifyAlways = "always" // after every create: safe with any number of active replicas
	VerifyNever  = "never"  // a single controller process per file system
)

// The verifier's clocks. Only durations measured by one process are
// compared, never two processes' clocks.
const (
	// startupVerifyWindow: a new process cannot know whether requests of a
	// killed predecessor are still on their way to EFS; they cannot be once
	// their attempt timeout (10 s by default) has passed.
	startupVerifyWindow = 30 * time.Second
	// foreignVerifyWindow: after a listing showed access points that some
	// other process created.
	foreignVerifyWindow = 10 * time.Minute
	// yieldDeadline: a creator yields (deletes) its own access point only
	// this long after its create returned; later, the access point is
	// settled for everyone.
	yieldDeadline = time.Minute
	// settleAfter: a process that found someone else's access point treats
	// it as settled (its creator can no longer yield it) once it has known
	// it this long: yieldDeadline plus a delete request's attempt timeout,
	// with a margin. A create's answer arrives within an attempt timeout of
	// its access point's creation, so the creator's deadline has passed.
	settleAfter       = 2 * time.Minute
	verifyListTimeout = time.Minute
)

// verifier closes the gap the per-process GID allocator leaves when two
// controller processes create on one file system at once (leader-election
// overlap, or a killed process whose last requests reach EFS after its
// successor listed): neither sees the other's reservations.
//
// After creating or finding an access point X with an allocated id, the
// controller lists the file system in a listing that starts after X is
// known to exist (one listing serves every create waiting at that moment)
// and collects X's rivals: other access points carrying the id as uid or
// gid. Then (verdict):
//
//   - X was answered by this process before: answer it (it had no rival
//     then; later rivals yield to it).
//   - X is fresh (created by this process less than yieldDeadline ago and
//     not answered): with no rival, answer; with one, yield: make the next
//     generation of the volume with another GID, then delete X.
//   - X is someone else's (found by its client token): its creator may be
//     verifying it right now and may yield it. Wait (ErrGIDContention, the
//     provisioner retries) until the creator is provably gone (writer tag)
//     or X is settled (known for settleAfter). Then, with no rival, answer;
//     with a rival that this process answered, or saw in a listing before
//     X first appeared, yield; otherwise keep waiting.
//
// Why two access points with one id are never both answered, without
// relying on any listing order or on clocks agreeing: say X and Y share an
// id and both were answered, and take X as the one whose verifying listing
// L_X started first. L_X showed no Y, so Y was created after L_X started
// (a listing started after a create returned shows it), and Y's listing
// started after Y existed, so after L_X, when X existed: Y had a rival.
// Fresh, Y would have yielded; settled, Y was answered only if X was
// answered by that process (then X's answer came first: fine, Y yields)
// or seen before Y appeared, which makes Y the later one: it yields.
//
// Why an answered access point is never deleted by a yield: a fresh X is
// yielded only by its creator, within yieldDeadline, and only while
// unanswered by it; anyone else answers X only once it is settled, after
// that deadline. A settled X is yielded only to a rival provably older
// (seen before X appeared) or answered: had X been answered clean, no such
// rival could exist.
//
// Listing per batch of creates costs API calls, so in the auto mode it runs
// only while another writer may be active: during a process's first
// seconds, and after a listing shows access points that appeared since the
// previous one and were not created or found by this process.
type verifier struct {
	listings  *freshFlight[string, []efs.AccessPoint] // fresh listings, observed
	mode      string
	now       func() time.Time
	me        writer
	procStart func(pid int) (uint64, bool)

	mu           sync.Mutex
	startupUntil time.Time
	fs           map[string]*fsVerify
	known        map[string]time.Time // access point ID -> when this process learned it exists
	createdHere  map[string]bool      // access points this process created (untagged ones carry no writer tag)
	seen         *sightings           // first sightings of creator-less access points, across restarts
	answered     map[string]bool      // access points this process answered
	contested    map[string]bool      // access points a verification did not answer
}

type fsVerify struct {
	prev         map[string]bool   // access point IDs of the last complete listing; nil before it
	mine         map[string]bool   // created or found by this process since then
	firstSeen    map[string]uint64 // access point ID -> the listing (seq) that first showed it
	seq          uint64            // complete listings observed
	foreignUntil time.Time
}

func newVerifier(mode string, list func(context.Context, string) ([]efs.AccessPoint, error), now func() time.Time, me writer) (*verifier, error) {
	switch mode {
	case "":
		mode = VerifyAuto
	case VerifyAuto, VerifyAlways, VerifyNever:
	default:
		return nil, fmt.Errorf("GID verification mode %q: want auto, always or never", mode)
	}
	v := &verifier{mode: mode, now: now, me: me, procStart: procStartTime,
		startupUntil: now().Add(startupVerifyWindow), fs: map[string]*fsVerify{},
		known: map[string]time.Time{}, createdHere: map[string]bool{}, answered: map[string]bool{}, contested: map[string]bool{},
		seen: &sightings{}}
	v.listings = newFreshFlight(verifyListTimeout, func(ctx context.Context, fsID string) ([]efs.AccessPoint, error) {
		aps, err := list(ctx, fsID)
		if err == nil {
			v.observe(fsID, aps)
		}
		return aps, err
	})
	return v, nil
}

func (v *verifier) get(fsID string) *fsVerify {
	f := v.fs[fsID]
	if f == nil {
		f = &fsVerify{mine: map[string]bool{}, firstSeen: map[string]uint64{}}
		v.fs[fsID] = f
	}
	return f
}

// needed says whether ap, just created or found, must be verified before it
// is answered. In the auto mode: while another writer may be active on its
// file system, and always for an access point that a verification did not
// answer (it had a rival): the mode's window closing proves nothing about
// that rival.
func (v *verifier) needed(ap *efs.AccessPoint) bool {
	switch v.mode {
	case VerifyAlways:
		return true
	case VerifyNever:
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	return now.Before(v.startupUntil) || now.Before(v.get(ap.FileSystemID).foreignUntil) || v.contested[ap.ID]
}

// learned records that this process knows ap exists (it created it, or
// found it by its token), so that a later listing does not count it as
// someone else's, and starts its clock for settleAfter / yieldDeadline.
//
// An access point another process wrote, found by its token, is evidence of
// another writer on the file system, as a listing showing it would be.
func (v *verifier) learned(ap *efs.AccessPoint, created bool) {
	v.mu.Lock()
	if created {
		v.createdHere[ap.ID] = true
	}
	v.mu.Unlock()
	live := v.writerOf(ap)
	foreign := live == writerAlive || live == writerUnknown
	v.mu.Lock()
	defer v.mu.Unlock()
	f := v.get(ap.FileSystemID)
	f.mine[ap.ID] = true
	if _, ok := v.known[ap.ID]; !ok {
		v.known[ap.ID] = v.now()
		if !created && live == writerUnknown {
			// Its creator's liveness cannot be known (no writer tag, or
			// one of another host): an earlier process's sighting starts
			// the settle clock as well (sightings.go).
			v.known[ap.ID] = v.seen.first(ap, v.known[ap.ID])
		}
	}
	if foreign {
		f.foreignUntil = v.now().Add(foreignVerifyWindow)
	}
}

// markAnswered records that CreateVolume answered ap.
func (v *verifier) markAnswered(apID string) {
	v.mu.Lock()
	v.answered[apID] = true
	v.mu.Unlock()
}

// forget drops what the verifier knows of a deleted access point.
func (v *verifier) forget(apID string) {
	v.mu.Lock()
	delete(v.answered, apID)
	delete(v.known, apID)
	v.seen.forget(apID)
	delete(v.createdHere, apID)
	delete(v.contested, apID)
	v.mu.Unlock()
}

// observe is fed every complete listing of fsID (the allocator's and the
// verifier's own) and detects other writers.
func (v *verifier) observe(fsID string, aps []efs.AccessPoint) {
	v.mu.Lock()
	defer v.mu.Unlock()
	f := v.get(fsID)
	f.seq++
	ids := make(map[string]bool, len(aps))
	foreign := false
	for _, ap := range aps {
		ids[ap.ID] = true
		if _, ok := f.firstSeen[ap.ID]; !ok {
			f.firstSeen[ap.ID] = f.seq
		}
		if f.prev != nil && !f.prev[ap.ID] && !f.mine[ap.ID] {
			foreign = true
		}
	}
	if foreign {
		f.foreignUntil = v.now().Add(foreignVerifyWindow)
	}
	f.prev = ids
	for id := range f.mine {
		if ids[id] {
			delete(f.mine, id)
		}
	}
	for id := range f.firstSeen {
		if !ids[id] {
			delete(f.firstSeen, id)
		}
	}
}

// verdict is what the controller does with a verified access point.
type verdict int

const (
	answerIt  verdict = iota
	yieldIt           // delete it once the next generation stands
	waitForIt         // ErrGIDContention: its creator may still decide
)

// rivals lists fsID (a listing that starts after this call) and returns the
// access points other than ap that carry id as uid or gid, and the whole
// listing.
func (v *verifier) rivals(ctx context.Context, ap *efs.AccessPoint, id int64) (rivals, all []efs.AccessPoint, err error) {
	all, err = v.listAfterNow(ctx, ap.FileSystemID)
	if err != nil {
		return nil, nil, err
	}
	seen := false
	for _, other := range all {
		switch {
		case other.ID == ap.ID:
			seen = true
		case other.PosixUser != nil && (other.PosixUser.GID == id || other.PosixUser.UID == id):
			rivals = append(rivals, other)
		}
	}
	if !seen {
		return nil, nil, fmt.Errorf("%w: %s is not listed yet", ErrNotYetVisible, ap.ID)
	}
	return rivals, all, nil
}

// verdict applies the rule of the type comment to ap, which this call
// created (created) or found, given its rivals.
func (v *verifier) verdict(ap *efs.AccessPoint, created bool, rivals []efs.AccessPoint) (vd verdict) {
	live := v.writerOf(ap)
	v.mu.Lock()
	defer v.mu.Unlock()
	defer func() {
		if vd != answerIt {
			v.contested[ap.ID] = true
		}
	}()
	if v.answered[ap.ID] {
		return answerIt
	}
	age := v.now().Sub(v.known[ap.ID])
	if created || live == writerMe {
		if age < yieldDeadline {
			if len(rivals) == 0 {
				return answerIt
			}
			return yieldIt
		}
		live = writerDead // our own deadline passed: settled
	}
	if (live == writerAlive || live == writerUnknown) && age < settleAfter {
		return waitForIt
	}
	if len(rivals) == 0 {
		return answerIt
	}
	f := v.get(ap.FileSystemID)
	mine, ok := f.firstSeen[ap.ID]
	for _, r := range rivals {
		theirs, seen := f.firstSeen[r.ID]
		if v.answered[r.ID] || (ok && seen && theirs < mine) {
			return yieldIt
		}
	}
	return waitForIt
}

// writerOf tells how ap's creator is doing. Its writer tag says so; an
// access point with no tag at all (enableTagging "false": this driver's
// or upstream's, they cannot be told apart) names no creator, which may be
// a replica verifying it right now: unless this process created it, its
// creator is unknown (it may be running), never legacy (settled at once).
// An access point with the cluster tag but no writer tag is the upstream
// driver's or a release's before writer tags: legacy.
func (v *verifier) writerOf(ap *efs.AccessPoint) liveness {
	v.mu.Lock()
	mine := v.createdHere[ap.ID]
	v.mu.Unlock()
	switch tag := ap.Tags[TagWriter]; {
	case mine:
		return writerMe
	case tag == "" && len(ap.Tags) == 0:
		return writerUnknown
	default:
		return v.me.livenessOf(tag, v.procStart)
	}
}

// mayRetire reports whether this process may delete ap, which yielded or
// was superseded by a later generation: never one it answered.
func (v *verifier) mayRetire(ap *efs.AccessPoint) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return !v.answered[ap.ID]
}

// listAfterNow joins the next listing of fsID that starts after the call:
// every create (and root-directory removal) waiting at that moment shares it.
func (v *verifier) listAfterNow(ctx context.Context, fsID string) ([]efs.AccessPoint, error) {
	return v.listings.Do(ctx, fsID)
}

// observingSource is the allocator's view of EFS: its listings also feed the
// verifier's detection of other writers.
type observingSource struct {
	EFS
	v *verifier
}

func (o observingSource) ListAccessPoints(ctx context.Context, fsID string, fn func([]efs.AccessPoint) error) error {
	var all []efs.AccessPoint
	err := o.EFS.ListAccessPoints(ctx, fsID, func(page []efs.AccessPoint) error {
		all = append(all, page...)
		return fn(page)
	})
	if err == nil {
		o.v.observe(fsID, all)
	}
	return err
}
