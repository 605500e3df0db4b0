package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// stepper is a protocol of pkg/controller/core: it decides, effects does.
type stepper interface {
	Next() core.Effect
	Step(core.Result)
	Stop()
}

// effects executes one call's core effects with this Service's clients:
// the machine decides, this does each effect and passes back its outcome,
// with the time it came. What an effect takes (volume locks,
// reservations in the allocator, a delete counted under way, a context
// detached from the call's) is held until release.
type effects struct {
	s    *Service
	ctx  context.Context
	st   *fsState  // the file system whose memory the machine reads (nil: none); locked around its steps
	p    *plan     // a create's plan (Candidate)
	view *rootView // a delete's: the listing LookUp used, for RemoveRoot
	res  []*gid.Reservation
	held []func()
	// lines: what the machine logged in its step under way (logger).
	lines []heldLine
	// dirsRead: foundHeld has read the record's directory volumes of
	// these file systems in this call.
	dirsRead map[string]bool
}

// run executes m's effects until its answer (a core.Answer) or a hand-off
// to a protocol the caller runs (a core.Handoff). The caller releases
// what the call still holds.
func (x *effects) run(m stepper) core.Effect {
	defer func() { // ended, or abandoned at an effect that could not be done
		x.lock() // stopped mid-way, the machine's function unwinds: its steps run under the lock
		m.Stop()
		x.unlock()
		x.flushLog()
	}()
	for {
		x.lock()
		e := m.Next()
		x.unlock()
		x.flushLog()
		switch e.(type) {
		case core.Answer, core.Handoff:
			return e
		}
		r, err := x.do(e)
		if err != nil {
			return core.Answer{Err: err}
		}
		r.Now = x.s.now()
		x.lock()
		m.Step(r)
		x.unlock()
		x.flushLog()
	}
}

// logger is the machine's logger (its config's Logger): the Service's,
// with each line held until its step ends and the file system's lock is
// let go (flushLog), so that a slow log sink never holds the lock, and
// written with the call's context.
func (x *effects) logger() *slog.Logger {
	return slog.New(heldLines{next: x.s.log.Handler(), x: x})
}

// flushLog writes the lines the machine logged during its last step.
func (x *effects) flushLog() {
	for _, l := range x.lines {
		_ = l.h.Handle(x.ctx, l.r) // a line that cannot be written is not the call's failure
	}
	clear(x.lines)
	x.lines = x.lines[:0]
}

// heldLines is a slog.Handler that keeps each record for flushLog.
type heldLines struct {
	next slog.Handler
	x    *effects
}

// heldLine is a record and the handler that writes it.
type heldLine struct {
	h slog.Handler
	r slog.Record
}

func (h heldLines) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h heldLines) Handle(_ context.Context, r slog.Record) error {
	h.x.lines = append(h.x.lines, heldLine{h.next, r.Clone()})
	return nil
}

func (h heldLines) WithAttrs(as []slog.Attr) slog.Handler {
	return heldLines{next: h.next.WithAttrs(as), x: h.x}
}

func (h heldLines) WithGroup(name string) slog.Handler {
	return heldLines{next: h.next.WithGroup(name), x: h.x}
}

// lock and unlock hold the machine's file system's lock around its steps,
// where it reads and changes that file system's core.FS (which never
// blocks): the protocol's own code, never an effect or a log write, runs
// under it.
func (x *effects) lock() {
	if x.st != nil {
		x.st.mu.Lock()
	}
}

func (x *effects) unlock() {
	if x.st != nil {
		x.st.mu.Unlock()
	}
}

// release lets go of what the call's effects took, last first.
func (x *effects) release() {
	for i := len(x.held) - 1; i >= 0; i-- {
		x.held[i]()
	}
	x.held = nil
	for _, r := range x.res {
		r.Release() // idempotent: those the machine released stay released
	}
	x.res = nil
}

// do executes one effect: a write or read of the record, a request to
// EFS or an operation on the file system's directories, or what this
// process holds for the call (its volume locks, its context). An effect
// of no known kind is a defect of the core, answered rather than
// panicked.
func (x *effects) do(e core.Effect) (core.Result, error) {
	for _, do := range []func(core.Effect) (core.Result, bool){x.record, x.request, x.local} {
		if r, ok := do(e); ok {
			return r, nil
		}
	}
	return core.Result{}, fmt.Errorf("%w: %T", core.ErrStuck, e)
}

// record executes an effect on the record (pkg/journal) with the core's
// executor (core.DoRecord): a moved id's release with a context of its
// own, within cleanupTimeout (the call's may have ended with the call, and
// the id would stay held for nobody), and a
// Hold that found the id taken tells this process's memory at once.
func (x *effects) record(e core.Effect) (core.Result, bool) {
	ctx := x.ctx
	if _, ok := e.(core.ReleaseMovedID); ok {
		var cancel context.CancelFunc
		ctx, cancel = cleanupContext(ctx)
		defer cancel()
	}
	r, ok := core.DoRecord(ctx, x.s.journal, e)
	if _, hold := e.(core.Hold); hold {
		if taken := (*journal.IDTakenError)(nil); errors.As(r.Err, &taken) {
			x.foundHeld(taken)
		}
	}
	return r, ok
}

// request executes a request to EFS, or an operation on the file system's
// directories through the controller's mount.
func (x *effects) request(e core.Effect) (r core.Result, ok bool) {
	s, ctx := x.s, x.ctx
	followUp := efs.WithPriority(ctx, efs.PriorityFollowUp) // what follows an applied request: before new work, never shed
	switch e := e.(type) {
	case core.CreateAccessPoint:
		// Remembered only where a delete looks it up there: with root
		// removal, the listing shows it (lookUp).
		if r.AP, r.Err = s.efs.CreateAccessPoint(ctx, e.Input); r.Err == nil && !s.delRoot {
			s.made.add(r.AP)
		}
	case core.Describe:
		dctx := ctx
		if e.FollowUp {
			dctx = followUp
		}
		r.AP, r.Err = s.efs.DescribeAccessPoint(dctx, e.AccessPoint)
	case core.List:
		r.APs, r.Err = s.listAfterNow(followUp, e.FileSystem)
	case core.Refresh:
		r.Err = s.gids.Refresh(ctx, s.gidSource(), e.FileSystem, e.Since)
	case core.LookUp:
		r.AP, x.view, r.Err = s.lookUp(ctx, e.ID)
	case core.Reachable:
		r.Err = s.reachable(ctx, e.FileSystem)
	case core.DeleteAccessPoint:
		r.Yes, r.Err = s.deleteAccessPoint(followUp, e.FileSystem, e.AccessPoint)
	case core.RemoveRoot:
		x.held = append(x.held, s.fs(e.AP.FileSystemID).deletingNow(e.AP.ID)) // through the DeleteAccessPoint
		// Handed over, not kept: a view is a whole listing and the
		// record's volumes, and the removal drops one it must fetch again
		// after the listing lag; kept here through that wait, 50 deletes
		// held 50 old views (the driver's peak heap went from 60 to 104
		// MB in efs-csi-stress --volumes=1000 --concurrency=50).
		view := x.view
		x.view = nil
		r.Err = s.removeRootDir(ctx, e.AP, e.Prov, view, e.Since)
	// Directory volumes (createdir.go).
	case core.MakeDir:
		r.Yes, r.Err = s.makeDir(ctx, e.Record, e.Perms)
	case core.UnmakeDir:
		r.Err = s.unmakeDir(ctx, e.Record)
	default:
		return r, false
	}
	return r, true
}

// local executes what this process holds for the call: its volume locks
// and its context.
func (x *effects) local(e core.Effect) (r core.Result, ok bool) {
	s, ctx := x.s, x.ctx
	switch e := e.(type) {
	case core.Lock:
		var unlock func()
		if unlock, r.Err = s.locks.TryLock(e.Keys...); r.Err == nil {
			x.held = append(x.held, unlock)
		}
	case core.Detach:
		var cancel context.CancelFunc
		x.ctx, cancel = cleanupContext(ctx)
		x.held = append(x.held, cancel)
	default:
		return r, false
	}
	return r, true
}
