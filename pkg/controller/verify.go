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

// Windows of the auto mode.
const (
	startupVerifyWindow = 2 * time.Minute  // a new process cannot know who else is creating
	foreignVerifyWindow = 10 * time.Minute // after seeing access points someone else created
	verifyListTimeout   = time.Minute
)

// verifier closes the gap the per-process GID allocator leaves when two
// controller processes create on one file system at once (leader-election
// overlap): neither sees the other's reservations. After creating or adopting
// an access point with an allocated GID, the controller lists the file system
// (one listing serves every create that finished before it started). Listings
// are in creation order, so all processes agree which of two access points
// sharing a GID came first: the first keeps it, and whoever verifies a later
// one deletes it and allocates again. Nobody can have answered the later one:
// whoever did would have verified it, after it existed, so after the earlier
// one existed too, and would have seen the earlier one first.
//
// Listing per batch of creates costs API calls, so in the auto mode it runs
// only while another writer may be active: during the first minutes of a
// process, and after any listing shows access points that appeared since the
// previous listing and were not created by this process.
type verifier struct {
	list func(ctx context.Context, fsID string) ([]efs.AccessPoint, error)
	mode string
	now  func() time.Time

	mu           sync.Mutex
	startupUntil time.Time
	fs           map[string]*fsVerify
}

type fsVerify struct {
	prev         map[string]bool // access point IDs of the last complete listing; nil before it
	mine         map[string]bool // created by this process since then
	foreignUntil time.Time
	running      bool
	waiting      []chan listResult
}

type listResult struct {
	aps []efs.AccessPoint
	err error
}

func newVerifier(mode string, list func(context.Context, string) ([]efs.AccessPoint, error), now func() time.Time) (*verifier, error) {
	switch mode {
	case "":
		mode = VerifyAuto
	case VerifyAuto, VerifyAlways, VerifyNever:
	default:
		return nil, fmt.Errorf("GID verification mode %q: want auto, always or never", mode)
	}
	return &verifier{list: list, mode: mode, now: now, startupUntil: now().Add(startupVerifyWindow), fs: map[string]*fsVerify{}}, nil
}

func (v *verifier) get(fsID string) *fsVerify {
	f := v.fs[fsID]
	if f == nil {
		f = &fsVerify{mine: map[string]bool{}}
		v.fs[fsID] = f
	}
	return f
}

// needed says whether creates on fsID must be verified now.
func (v *verifier) needed(fsID string) bool {
	switch v.mode {
	case VerifyAlways:
		return true
	case VerifyNever:
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	return now.Before(v.startupUntil) || now.Before(v.get(fsID).foreignUntil)
}

// created records an access point this process made, so that a later
// listing does not count it as someone else's.
func (v *verifier) created(fsID, apID string) {
	v.mu.Lock()
	v.get(fsID).mine[apID] = true
	v.mu.Unlock()
}

// observe is fed every complete listing of fsID (the allocator's and the
// verifier's own) and detects other writers.
func (v *verifier) observe(fsID string, aps []efs.AccessPoint) {
	v.mu.Lock()
	defer v.mu.Unlock()
	f := v.get(fsID)
	ids := make(map[string]bool, len(aps))
	foreign := false
	for _, ap := range aps {
		ids[ap.ID] = true
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
}

// collides lists fsID (a listing that starts after this call) and reports
// whether an access point listed before ap carries the GID id.
func (v *verifier) collides(ctx context.Context, ap *efs.AccessPoint, id int64) (bool, error) {
	aps, err := v.listAfterNow(ctx, ap.FileSystemID)
	if err != nil {
		return false, err
	}
	earlier := false
	for _, other := range aps {
		if other.ID == ap.ID {
			return earlier, nil
		}
		if other.PosixUser != nil && other.PosixUser.GID == id {
			earlier = true
		}
	}
	return false, fmt.Errorf("%w: %s is not listed yet", ErrNotYetVisible, ap.ID)
}

// listAfterNow joins the next listing of fsID that starts after the call:
// every create waiting at that moment shares it.
func (v *verifier) listAfterNow(ctx context.Context, fsID string) ([]efs.AccessPoint, error) {
	ch := make(chan listResult, 1)
	v.mu.Lock()
	f := v.get(fsID)
	f.waiting = append(f.waiting, ch)
	if !f.running {
		f.running = true
		go v.run(fsID, f)
	}
	v.mu.Unlock()
	select {
	case r := <-ch:
		return r.aps, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (v *verifier) run(fsID string, f *fsVerify) {
	for {
		v.mu.Lock()
		batch := f.waiting
		f.waiting = nil
		if len(batch) == 0 {
			f.running = false
			v.mu.Unlock()
			return
		}
		v.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), verifyListTimeout)
		aps, err := v.list(ctx, fsID)
		cancel()
		if err == nil {
			v.observe(fsID, aps)
		}
		for _, ch := range batch {
			ch <- listResult{aps, err}
		}
	}
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
