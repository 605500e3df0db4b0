package core

import (
	"errors"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
)

// RepeatFresh is how long this process answers a repeated CreateVolume
// from memory alone. A delete through this process drops the memory under
// the volume's locks, so within the process the memory is exact; the
// bound covers what it cannot see (an access point deleted behind its
// back, by hand or by another replica), which an older answer is checked
// against with one Describe. Provisioner retries and duplicate callers
// come within seconds.
const RepeatFresh = time.Minute

// NewCreateVolume starts a whole CreateVolume of p at now, after its
// validation (docs/design.md, "Create", steps 2-8): the name locks, a
// repeat answered from what this process answered before, else the
// record's protocol (Create); a directory volume's (createDir) answers
// its record (Answer.Record).
func NewCreateVolume(cfg CreateConfig, p *Plan, mem Memory, now time.Time) *Create {
	c := &Create{cfg: cfg, p: p, mem: mem}
	c.now = now
	c.run(cfg.Logger, func() Effect {
		defer c.releaseAll()
		return c.createVolume()
	})
	return c
}

// createVolume is CreateVolume's plan, steps 2-8 (docs/design.md,
// "Create"), top to bottom.
func (c *Create) createVolume() Effect {
	p := c.p
	// 2. The volume's locks: its name's and its token's.
	if r := c.do(Lock{Keys: p.Locks()}); r.Err != nil {
		return Answer{Err: r.Err}
	}
	// 3. Whatever this create answers, a delete of it must go the whole
	// way. A repeat of what this process answered is answered again.
	c.mem.ForgetFinished(p.Locks())
	if p.Dir {
		return c.createDir()
	}
	if ap := c.repeat(); ap != nil {
		return Answer{AP: ap}
	}
	// 4-7. The record's protocol (Create), seen by this process's deletes
	// with root removal on from before its record is written. Its
	// reservation ends first: the allocator has the access point by then
	// (FS.Seen), or the create failed.
	if c.cfg.DeleteRootDir {
		c.mem.Creating(p.Input.ClientToken, p.Name, p.Input.Path)
	}
	a := c.protocol()
	c.release()
	if c.cfg.DeleteRootDir {
		c.mem.CreateEnded(p.Input.ClientToken, a.AP, c.now)
	}
	// 8. Remembered, for repeats; the locks go with the call.
	if a.Err == nil {
		c.mem.RememberAnswer(p.Name, a.AP, true, c.now)
	}
	return a
}

// repeat is the access point this process answered before for a repeated
// CreateVolume, answered again without a mutation and without
// verification (it was verified when first answered): from memory if the
// answer is fresh, else from one Describe; and in both cases only once a
// read of the record, the last step before the answer, shows the volume
// still recorded and not being deleted. A delete through this process
// drops the memory, but one through another replica marks only the
// record (before it deletes anything), so no memory alone can say the
// access point is not being deleted now. nil: anything else (unknown,
// gone, changed, being deleted, a read failed), which goes the whole way.
func (c *Create) repeat() *efs.AccessPoint {
	p := c.p
	known, at := c.mem.Answered(p.Name)
	switch {
	case known == nil:
		return nil
	case c.now.Sub(at) < RepeatFresh && p.Check(known) == nil:
		return c.confirmAnswer(known)
	}
	r := c.do(Describe{AccessPoint: known.ID})
	switch {
	case errors.Is(r.Err, efs.ErrAccessPointNotFound):
		c.mem.DropAnswer(known.ID)
		return nil
	case r.Err != nil || p.Check(r.AP) != nil:
		return nil
	}
	ap := r.AP
	c.seen(ap)
	c.mem.RememberAnswer(p.Name, ap, false, c.now)
	return c.confirmAnswer(ap)
}

// confirmAnswer is ap, which this process answered for the volume, if the
// record still names it and is not being deleted; else nil. Names it, not
// merely agrees with it (ownership.Agrees also takes a record that names
// no access point yet and has ap's path): every answer was recorded
// first, so the record of an answered access point names it, and one that
// names none is the volume's next life, begun after another replica's
// delete removed ap. Before, a repeat from memory answered that deleted
// access point (TestCreateEveryOutcome: a record of the same token and
// path, naming no access point). A record the request does not match
// (another capacity) goes the whole way too, which answers why.
func (c *Create) confirmAnswer(ap *efs.AccessPoint) *efs.AccessPoint {
	r := c.do(ReadRecord{FileSystem: ap.FileSystemID, Key: c.p.Input.ClientToken})
	if r.Err != nil || r.Record.Deleting || !ownership.Agrees(r.Record, ap) || r.Record.AccessPoint != ap.ID ||
		c.p.recordMismatch(r.Record) != "" {
		return nil
	}
	return ap
}
