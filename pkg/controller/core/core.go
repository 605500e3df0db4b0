// Package core is the controller's protocol without its I/O: each call is a
// machine that decides, and its caller (pkg/controller) does. The caller
// asks Next for an effect (read this record entry, send this request, take
// these locks, answer the call), executes it, and passes its outcome to
// Step; then Next again, until the effect is an Answer. etcd-io/raft's
// Node/Ready split is the model: the protocol is a pure function of the
// outcomes it is given and of its file system's memory (FS), so a table of
// outcomes drives it in a test with no server and no clock, and the
// simulator (internal/sim), which runs the production controller, runs
// this code. Each machine is a plain function read top to bottom (proc),
// run as a coroutine inside Next and Step.
//
// Nothing here does I/O, reads a clock or blocks: times come in with the
// call (NewDelete's now) and with each outcome (Result.Now), and a machine
// logs through the logger its config gives it, not by an effect: every
// effect is I/O or what the process holds for its caller.
// TestCoreDoesNoIO holds the imports to that.
package core

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"slices"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Effect is what a machine asks its caller to do next. Each effect's
// comment says which fields of the Result it expects back.
type Effect interface{ effect() }

// Result is the outcome of an effect, passed to Step.
type Result struct {
	AP     *efs.AccessPoint
	APs    []efs.AccessPoint
	Record *journal.Record
	Yes    bool
	Held   bool   // Begin: the record was made with its id held in the same write
	ID     int64  // an id (a scripted FS.Candidate or FS.Reserve)
	N      int    // a place in a volume's sequence of ids (a scripted FS.Candidate)
	Token  string // a client token (HoldForSweep: the holder)
	Err    error
	// Now is when the outcome came: a machine that reads time reads it
	// here (Create's window), never from a clock.
	Now time.Time
}

// Answer ends the call with Err (nil: success), and for a create the
// access point it answers (for Record, the record). Nothing is passed back.
type Answer struct {
	AP     *efs.AccessPoint
	Record *journal.Record // Record's answer
	Err    error
}

// Lock takes the volume locks Keys without waiting (pkg/keylock), held
// until the call ends. Result.Err: keylock.ErrBusy when another call holds
// one.
type Lock struct{ Keys []string }

func (Answer) effect() {}
func (Lock) effect()   {}

// ErrStuck is the answer of a machine stepped past its end or given no
// next effect: a defect of this package, answered rather than panicked.
var ErrStuck = errors.New("controller protocol has no next step")

// proc runs a protocol written as a plain Go function, read top to bottom
// in the order its effects happen: the function calls do with each effect
// and gets its outcome back, and returns its final effect (an Answer or a
// Handoff). Next and Step drive it from outside, as raft's RawNode is
// driven: not safe for concurrent use, the caller serializes. The function
// runs as an iter.Pull coroutine, only inside Next and Step (never beside
// its caller), so it reads and changes what it is given with no lock of
// its own. Its final effect ends the coroutine; a proc abandoned before
// it must be stopped (Stop), or its coroutine waits forever.
type proc struct {
	pull  func() (Effect, bool)
	stop  func()
	yield func(Effect) bool
	cur   Effect       // the effect Next returns; nil past the end
	in    Result       // the outcome Step passed, for do to return
	now   time.Time    // when the last outcome came (Result.Now), or the call began
	begun bool         // the function has run to its first effect
	log   *slog.Logger // the machine's, from its config (run)
}

// stopped unwinds a protocol whose proc was stopped mid-way.
type stopped struct{}

// run makes body the protocol, logging to log (nil: nowhere). It begins
// at the first Next, under the caller's lock as every later step is.
func (p *proc) run(log *slog.Logger, body func() Effect) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p.log = log
	p.pull, p.stop = iter.Pull(func(yield func(Effect) bool) {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(stopped); !ok {
					panic(r)
				}
			}
		}()
		p.yield = yield
		yield(body())
	})
}

// advance runs the protocol to its next effect. Its final effect ends the
// coroutine at once: nothing runs after it, so a caller that stops at the
// answer leaves nothing waiting.
func (p *proc) advance() {
	e, ok := p.pull()
	switch e.(type) {
	case Answer, Handoff:
		p.stop()
	}
	if !ok {
		p.stop()
		e = nil
	}
	p.cur = e
}

// do yields e to the caller and returns the outcome the caller steps with.
// Only the protocol's function calls it.
func (p *proc) do(e Effect) Result {
	if !p.yield(e) {
		panic(stopped{})
	}
	if !p.in.Now.IsZero() {
		p.now = p.in.Now
	}
	return p.in
}

// logAttrs writes one line to the machine's logger. It runs inside Next
// or Step: its caller's lock is held, as for every read of the memory.
// No machine is given a context: the line carries none.
func (p *proc) logAttrs(level slog.Level, msg string, attrs ...slog.Attr) {
	p.log.LogAttrs(context.Background(), level, msg, attrs...)
}

// Next is the effect to execute now.
func (p *proc) Next() Effect {
	if !p.begun {
		p.begun = true
		p.advance()
	}
	if p.cur == nil {
		return Answer{Err: ErrStuck}
	}
	return p.cur
}

// Step passes the outcome of the effect Next returned. After the final
// effect the protocol has ended, and Next answers ErrStuck.
func (p *proc) Step(r Result) {
	switch p.cur.(type) {
	case nil:
		return
	case Answer, Handoff:
		p.cur = nil
		return
	}
	p.in = r
	p.advance()
}

// Stop ends the protocol where it stands: a caller that abandons it before
// its final effect (its call killed, an effect that could not be done)
// stops it. Stopping an ended protocol does nothing.
func (p *proc) Stop() {
	p.cur, p.begun = nil, true
	if p.stop != nil {
		p.stop()
	}
}

// Handoff is an effect that ends the machine and hands the call to a
// protocol the caller runs itself (DeleteOrphan).
type Handoff interface {
	Effect
	handoff()
}

// join is err with extra added, if any.
func join(err, extra error) error {
	if extra == nil {
		return err
	}
	return errors.Join(err, extra)
}

// NameKey is the volume lock of a volume name or client token: every
// create of it holds both (its name's and its token's), every delete of its
// access point those its record or tags name.
func NameKey(name string) string { return "name/" + name }

// APKey is the lock of an access point ID, held by its delete.
func APKey(apID string) string { return "ap/" + apID }

// RecordLocks are the name locks of rec's volume: its key's and its
// name's, which every create of it holds.
func RecordLocks(rec *journal.Record) []string {
	if rec.Name == "" || rec.Name == rec.Token {
		return []string{NameKey(rec.Token)}
	}
	return []string{NameKey(rec.Name), NameKey(rec.Token)}
}

// isSubset reports whether every lock of want is in held.
func isSubset(want, held []string) bool {
	for _, k := range want {
		if !slices.Contains(held, k) {
			return false
		}
	}
	return true
}

// VolumeKeyOf is the key of ap's volume in the record and in its creates'
// name locks (the create's client token): its client token, or for a GID
// token the name token of its volume-name tag.
func VolumeKeyOf(ap *efs.AccessPoint) string {
	if name := ap.Tags[ownership.TagVolumeName]; volume.IsGIDToken(ap.ClientToken) && name != "" {
		return volume.NameToken(name)
	}
	return ap.ClientToken
}
