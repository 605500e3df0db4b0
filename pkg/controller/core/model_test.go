package core

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/journal/journaltest"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// The model checker: the production machines of this package, several at
// once on two replicas of one cluster, every interleaving of their effects
// up to a bound on preemptions (a switch away from a call that could go
// on), each effect one atomic step. The record is pkg/journal over one
// Memory store shared by the replicas (each with its own Journal); EFS is
// a map with EFS's client-token rule (a token names the access point made
// under it while that exists); each replica has its own memory of answers,
// finished deletes and locks, as processes do. Nothing here is a mock of
// the protocol: the decisions are the machines', the record's rules
// pkg/journal's. A replica may be killed between two steps (its calls
// end, its memory is gone; its callers retry), and the orphan collector's
// sweep may run beside the callers. What it does not do, the goroutine
// simulator (internal/sim) does: faults, lost answers, listing lag,
// requests that interleave inside one journal verb, other clusters and
// writers.
//
// After every step it checks that no two live access points carry one
// GID, that an answer names a live access point whose record is not being
// deleted, and that an answered access point stays until a DeleteVolume
// names it; once every claim is created and deleted, that nothing is
// left: no access point, no record entry.

var (
	modelPreemptions = flag.Int("core.preemptions", 3, "TestModel: preemptions per run")
	modelVerbose     = flag.Bool("core.modelv", false, "TestModel: log every run's trace")
)

// modelWorld is one file system of one cluster.
type modelWorld struct {
	now     time.Time
	store   *journal.Memory
	aps     map[string]*efs.AccessPoint
	byToken map[string]string
	made    int
	trace   []string
	errs    []string
	// answered holds the access points answered to a create; deleting,
	// those a DeleteVolume was called for.
	answered, deleting map[string]bool
	swept              int // live access points the sweep deleted
	// outside: access points a writer outside the protocol made (by hand:
	// no tag of this driver, a token of its own).
	outside map[string]bool
	// claimGone: the claim was deleted before its volume was answered
	// (abandon): its callers forgot their creates, whose calls go on.
	claimGone bool
}

func (w *modelWorld) clock() time.Time { return w.now }

func (w *modelWorld) violate(format string, args ...any) {
	w.errs = append(w.errs, fmt.Sprintf(format, args...))
}

// modelReplica is one controller process.
type modelReplica struct {
	name  string
	j     *journal.Journal
	locks map[string]bool
	mem   *FS // its memory of the file system
}

// restart is r's process starting again: its memory, locks and cached
// hints are gone; the record and EFS are not.
func (r *modelReplica) restart(w *modelWorld) {
	// With hints of its own, as the Lease store keeps: stale by whatever
	// the schedule made them.
	r.j = journal.NewClocked(journaltest.NewHinting(w.store), w.clock)
	r.locks, r.mem = map[string]bool{}, NewFS(fsID)
	// Every create's first reservation lists the file system (Refresh),
	// as if the view were always older than MaxAge: the pick is as of a
	// listing taken then.
	r.mem.alloc.DistrustBefore(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC))
}

// memory is r's memory as its machines are given it (modelMemory).
func (r *modelReplica) memory(w *modelWorld) Memory { return modelMemory{r.mem, w} }

// modelMemory is a replica's memory whose Gone of a directory volume's
// stand-in (its delete's) also ends the directory's stand-in in the world:
// the gid check counts it from its MakeDir until then or its UnmakeDir
// (root removal is off here; a directory kept by its delete holds no
// volume's id), as the controller's allocator forgets it then.
type modelMemory struct {
	*FS
	w *modelWorld
}

func (m modelMemory) Gone(apID string, now time.Time) {
	m.FS.Gone(apID, now)
	delete(m.w.aps, apID)
}

// modelActor is a caller: a provisioner that creates a claim's volume
// until answered, then deletes it until done; or a duplicate caller of the
// same claim on the other replica, which deletes what it was answered
// once the provisioner is done.
//
// Or the orphan collector's sweep (sweeper): rounds of one read of the
// sweep's holds and one listing, each followed by a sweep machine per hold
// and per access point listed, with no grace and no PersistentVolume
// naming anything: its safety may rest on the record alone.
type modelActor struct {
	name     string
	plan     *Plan
	replicas []*modelReplica // tried in turn
	dupOf    *modelActor
	attempts int
	volID    string
	apID     string
	done     bool
	call     *modelCall

	sweeper bool
	collect bool      // the sweeper's rounds collect orphaned records too
	noSweep bool      // ...and do not sweep (a record per host: no Config.Sweep)
	rounds  int       // left to begin
	queue   []stepper // sweeps to run in this round
}

// stepper is a machine of this package.
type stepper interface {
	Next() Effect
	Step(Result)
	Stop()
}

type modelCall struct {
	m     stepper
	r     *modelReplica
	locks []string
	del   bool
	ghost bool // a create its caller forgot (abandon): it goes on, its answer goes nowhere
}

const modelMaxAttempts = 4

// canStart reports whether the actor has a call to begin now.
func (a *modelActor) canStart() bool {
	switch {
	case a.call != nil:
		return false
	case a.sweeper:
		return len(a.queue) > 0 || a.rounds > 0
	case a.done || a.attempts >= modelMaxAttempts:
		return false
	}
	return a.volID == "" || a.dupOf == nil || a.dupOf.done // the duplicate deletes once the provisioner is done
}

// start begins the actor's next call, if it has one to make now.
func (a *modelActor) start(w *modelWorld, cfg CreateConfig) {
	if !a.canStart() {
		return
	}
	r := a.replicas[a.attempts%len(a.replicas)]
	switch {
	case a.sweeper && len(a.queue) > 0:
		r = a.replicas[(a.attempts-1)%len(a.replicas)] // its round's
		a.call = &modelCall{m: a.queue[0], r: r}
		a.queue = a.queue[1:]
	case a.sweeper:
		a.attempts++
		a.rounds--
		a.call = &modelCall{m: &modelRound{a: a, w: w}, r: r}
	case a.volID == "":
		a.attempts++
		a.call = &modelCall{m: NewCreateVolume(cfg, a.plan, r.memory(w), w.now), r: r}
	default:
		a.attempts++
		w.deleting[a.apID] = true
		a.call = &modelCall{m: NewDelete(DeleteConfig{Cluster: "c1"}, a.volID, r.memory(w), w.now), r: r, del: true}
	}
}

// over reports whether the actor has nothing left to do.
func (a *modelActor) over() bool {
	if a.sweeper {
		return a.call == nil && !a.canStart()
	}
	return a.done
}

// modelSweepCfg is the sweep's: this cluster, no grace, and no
// PersistentVolumes: the sweep must not need them.
var modelSweepCfg = SweepConfig{Cluster: "c1", Named: func(string) bool { return false }}

// modelRound is the collector's round: with collect, it reads the
// record's volumes and queues a collection of each orphan (pkg/orphans'
// rule: not bound, its claim gone, no PersistentVolume naming it; a
// volume a PersistentVolume names is marked bound); then it reads the
// sweep's holds, lists the file system, and queues a sweep for each.
type modelRound struct {
	a              *modelActor
	w              *modelWorld
	recs           []*journal.Record
	holds, orphans map[int64]string
	phase          int
}

// listRecords reads every volume of the record (journal.Volumes).
type listRecords struct{ Out *[]*journal.Record }

// markBound marks Record bound (journal.MarkBound), as the collector does
// once a PersistentVolume names its access point.
type markBound struct{ Record *journal.Record }

func (listRecords) effect() {}
func (markBound) effect()   {}

// modelMarkBound is the collector marking one record bound.
type modelMarkBound struct {
	rec  *journal.Record
	done bool
}

func (m *modelMarkBound) Next() Effect {
	if m.done {
		return Answer{}
	}
	return markBound{Record: m.rec}
}

func (m *modelMarkBound) Step(Result) { m.done = true }
func (m *modelMarkBound) Stop()       {}

// toSweep reads the ids the sweep holds and those held for volumes whose
// record is gone or being deleted (journal.ToSweep).
type toSweep struct{ Holds, Orphans *map[int64]string }

func (toSweep) effect() {}

func (m *modelRound) Next() Effect {
	if m.phase == 0 && !m.a.collect {
		m.phase = 1
	}
	if m.over() {
		return Answer{}
	}
	switch m.phase {
	case 0:
		return listRecords{Out: &m.recs}
	case 1:
		return toSweep{Holds: &m.holds, Orphans: &m.orphans}
	case 2:
		return List{FileSystem: fsID}
	}
	return Answer{}
}

// over reports whether the round has nothing left to read: with noSweep,
// once the records are read.
func (m *modelRound) over() bool { return m.a.noSweep && m.phase > 0 }

func (m *modelRound) Stop() {}

func (m *modelRound) Step(r Result) {
	switch m.phase {
	case 0:
		slices.SortFunc(m.recs, func(x, y *journal.Record) int { return strings.Compare(x.Token, y.Token) })
		for _, rec := range m.recs {
			switch {
			case rec.Bound:
			case rec.AccessPoint != "" && m.w.answered[rec.AccessPoint]:
				m.a.queue = append(m.a.queue, &modelMarkBound{rec: rec})
			case m.w.claimGone:
				m.a.queue = append(m.a.queue, NewCollect(CollectConfig{Cluster: "c1"}, rec))
			}
		}
	case 1:
		// In id order: a replayed prefix must queue them alike.
		for _, id := range slices.Sorted(maps.Keys(m.holds)) {
			m.a.queue = append(m.a.queue, NewResumeSweep(modelSweepCfg, fsID, id, m.holds[id]))
		}
		for _, id := range slices.Sorted(maps.Keys(m.orphans)) {
			m.a.queue = append(m.a.queue, NewFreeID(modelSweepCfg, fsID, id, m.orphans[id]))
		}
	case 2:
		slices.SortFunc(r.APs, func(x, y efs.AccessPoint) int { return strings.Compare(x.ID, y.ID) })
		for i := range r.APs {
			m.a.queue = append(m.a.queue, NewSweep(modelSweepCfg, fsID, &r.APs[i], r.Now))
		}
	}
	m.phase++
}

// local reports whether e touches only this process's memory: no other
// process sees it happen, so no other step need come between it and the
// one before. A schedule switches calls only before an effect on the
// record or on EFS; an answer goes with the effects before it (it
// linearizes at the last read, as the goroutine simulator's answer does).
func local(e Effect) bool {
	switch e.(type) {
	case Answer, Refresh, Detach:
		return true
	}
	return false
}

// step executes the call's next effect and every local one after it, up
// to the next effect others can see, or its answer.
func (a *modelActor) step(w *modelWorld) {
	for a.effect(w, false) && a.call != nil && local(a.call.m.Next()) {
	}
}

// lossy reports whether e is a request to the record or to EFS, whose
// answer can be lost once applied.
func lossy(e Effect) bool {
	switch e.(type) {
	case ReadRecord, Begin, Hold, HoldID, Touch, SetIDs, ReleaseUnsentID, ReleaseMovedID, SetAccessPoint, HoldForSweep,
		ReleaseSweep, SetClaim, Mark, Finish, CreateAccessPoint, Describe, LookUp, List, DeleteAccessPoint, toSweep,
		ReleaseOrphanID, listRecords, markBound, SetDirMade:
		return true
	}
	return false
}

// stepLost executes the call's next effect, a request, and loses its
// answer (applied; the caller sees the service unavailable), then every
// local effect after it.
func (a *modelActor) stepLost(w *modelWorld) {
	if a.effect(w, true) && a.call != nil && local(a.call.m.Next()) {
		a.step(w)
	}
}

// effect executes the call's next effect, or ends it at its answer
// (false); lost loses the effect's answer.
func (a *modelActor) effect(w *modelWorld, lost bool) bool {
	c := a.call
	e := c.m.Next()
	if h, ok := e.(DeleteOrphan); ok {
		// Its locks let go, the collection goes on as DeleteVolume of
		// the access point (not counted as a DeleteVolume a caller made:
		// one of an answered access point is a deleted violation).
		for _, k := range c.locks {
			delete(c.r.locks, k)
		}
		a.call = nil
		w.trace = append(w.trace, fmt.Sprintf("%s@%s hands %s to DeleteVolume", a.name, c.r.name, h.AccessPoint))
		a.queue = append([]stepper{NewDelete(DeleteConfig{Cluster: "c1"}, "efs:"+fsID+"::"+h.AccessPoint, c.r.memory(w), w.now)}, a.queue...)
		return false
	}
	if ans, ok := e.(Answer); ok {
		for _, k := range c.locks {
			delete(c.r.locks, k)
		}
		a.call = nil
		w.trace = append(w.trace, fmt.Sprintf("%s@%s answer %v %v", a.name, c.r.name, apIDOf(ans.AP), ans.Err))
		switch {
		case ans.Err != nil, a.sweeper, c.ghost:
		case c.del:
			a.done, a.attempts = true, 0
		case a.plan.Dir:
			// A directory volume: its stand-in is what the model counts.
			ap := DirStandIn(ans.Record)
			w.answeredCheck(a, ap)
			a.volID, a.apID, a.attempts = volume.DirID(fsID, ans.Record.Path), ap.ID, 0
			w.answered[ap.ID] = true
		default:
			w.answeredCheck(a, ans.AP)
			a.volID, a.apID, a.attempts = "efs:"+fsID+"::"+ans.AP.ID, ans.AP.ID, 0
			w.answered[ans.AP.ID] = true
		}
		return false
	}
	if !local(e) {
		w.now = w.now.Add(time.Millisecond) // a request takes time: lives of a record differ in their creation time
	}
	r := w.do(a, c, e)
	if lost {
		w.trace = append(w.trace, fmt.Sprintf("%s@%s %s -> %s, answer LOST", a.name, c.r.name, describeCreate(e), outcome(r)))
		r = Result{Err: efs.ErrUnavailable}
		if !slices.Contains([]string{"CreateAccessPoint", "Describe", "LookUp", "List", "DeleteAccessPoint"}, strings.TrimPrefix(fmt.Sprintf("%T", e), "core.")) {
			r.Err = journal.ErrUnavailable
		}
	}
	r.Now = w.now
	w.trace = append(w.trace, fmt.Sprintf("%s@%s %s -> %s", a.name, c.r.name, describeCreate(e), outcome(r)))
	c.m.Step(r)
	w.gidCheck()
	w.deletedCheck()
	w.idCheck(a)
	return true
}

// idCheck: a record that names an access point, not being deleted, holds
// its id in the id table (what keeps a GID to one volume of the record).
func (w *modelWorld) idCheck(a *modelActor) {
	if a.plan == nil {
		return
	}
	ctx := context.Background()
	rec, err := journal.NewClocked(w.store, w.clock).Volume(ctx, fsID, a.plan.Input.ClientToken)
	if err != nil || rec.Deleting || rec.Allocated == journal.NoID {
		return
	}
	if rec.Dir {
		if w.aps[DirStandIn(rec).ID] == nil || rec.Recorded.IsZero() {
			return // not made and recorded made yet
		}
	} else if rec.AccessPoint == "" {
		return
	}
	e, err := w.store.Get(ctx, journal.Key{Kind: journal.KindID, FileSystem: fsID, Name: strconv.FormatInt(rec.Allocated, 10)})
	if err != nil || string(e.Value) != rec.Token {
		w.violate("id: the record names %s with id %d, which the id table does not hold for it (%q, %v)", rec.AccessPoint, rec.Allocated, e.Value, err)
	}
}

// deletedCheck: an access point answered to a create stays until a
// DeleteVolume of it is called (Invariant I5).
func (w *modelWorld) deletedCheck() {
	for id := range w.answered {
		if !w.deleting[id] && w.aps[id] == nil {
			w.violate("deleted: %s was answered and is gone, but no DeleteVolume named it", id)
		}
	}
}

func apIDOf(ap *efs.AccessPoint) string {
	if ap == nil {
		return "-"
	}
	return ap.ID
}

func outcome(r Result) string {
	switch {
	case r.Err != nil:
		return r.Err.Error()
	case r.AP != nil:
		return r.AP.ID
	case r.Record != nil:
		return fmt.Sprintf("record ap=%q gid=%d deleting=%v", r.Record.AccessPoint, r.Record.Allocated, r.Record.Deleting)
	}
	return "ok"
}

// answeredCheck: an answer names a live access point whose record is not
// being deleted (Invariant I2).
func (w *modelWorld) answeredCheck(a *modelActor, ap *efs.AccessPoint) {
	if w.aps[ap.ID] == nil {
		w.violate("phantom: %s answered %s, which does not exist", a.name, ap.ID)
		return
	}
	rec, err := journal.NewClocked(w.store, w.clock).Volume(context.Background(), fsID, a.plan.Input.ClientToken)
	switch {
	case err != nil:
		w.violate("phantom: %s answered %s, whose record is not found (%v)", a.name, ap.ID, err)
	case rec.Dir && (rec.Deleting || DirStandIn(rec).ID != ap.ID):
		w.violate("phantom: %s answered directory volume %s, whose record is of %s and is being deleted: %v", a.name, ap.ID, rec.Path, rec.Deleting)
	case !rec.Dir && (rec.Deleting || rec.AccessPoint != ap.ID):
		w.violate("phantom: %s answered %s, whose record names %q and is being deleted: %v", a.name, ap.ID, rec.AccessPoint, rec.Deleting)
	}
	// The handover world: no answered access point shares its GID with
	// one made outside the protocol before the handover fence (which the
	// allocator's listing after the fence shows).
	for id := range w.outside {
		if o := w.aps[id]; o != nil && id < ap.ID && PosixGID(o) == PosixGID(w.aps[ap.ID]) {
			w.violate("gid: %s answered %s with GID %d, which %s, made outside the protocol before it, carries", a.name, ap.ID, PosixGID(o), id)
		}
	}
}

// carriedOutside reports whether an access point made outside the
// protocol carries id.
func (w *modelWorld) carriedOutside(id int64) bool {
	for apID := range w.outside {
		if ap := w.aps[apID]; ap != nil && PosixGID(ap) == id {
			return true
		}
	}
	return false
}

// gidCheck: no two live access points this driver made carry one GID
// (Invariant I3). One made outside the protocol may share a GID with one
// this driver answered before it was made: nothing can prevent that; the
// audit finds it.
//
// A directory volume (its stand-in) is kept off an id by the id table
// alone, not by EFS: an access point a late create makes under a GID
// token its record's delete freed may carry a directory volume's id for a
// while, but nobody answers it (its record write fails, and it is
// dropped). So a pair with a directory volume counts once both are
// answered.
func (w *modelWorld) gidCheck() {
	seen := map[int64][]string{}
	for _, id := range slices.Sorted(maps.Keys(w.aps)) {
		ap := w.aps[id]
		if w.outside[ap.ID] {
			continue
		}
		g := PosixGID(ap)
		for _, other := range seen[g] {
			dir := strings.HasPrefix(ap.ID, "dir:") || strings.HasPrefix(other, "dir:")
			if !dir || w.answered[ap.ID] && w.answered[other] {
				w.violate("gid: %d on %s and %s", g, ap.ID, other)
			}
		}
		seen[g] = append(seen[g], ap.ID)
	}
}

// do executes one effect against the model's EFS, record and process
// memory: the record's verbs by the production executor (DoRecord), the
// rest as the service does.
func (w *modelWorld) do(a *modelActor, c *modelCall, e Effect) Result {
	ctx := context.Background()
	r, j := c.r, c.r.j
	if out, ok := DoRecord(ctx, j, e); ok {
		return out
	}
	var out Result
	switch e := e.(type) {
	case Lock:
		for _, k := range e.Keys {
			if r.locks[k] {
				out.Err = keylock.ErrBusy
				return out
			}
		}
		for _, k := range e.Keys {
			r.locks[k] = true
			c.locks = append(c.locks, k)
		}
	case toSweep:
		*e.Holds, *e.Orphans, out.Err = j.ToSweep(ctx, fsID)
	case listRecords:
		*e.Out = nil
		out.Err = j.Volumes(ctx, fsID, func(rs []*journal.Record) error { *e.Out = append(*e.Out, rs...); return nil })
	case markBound:
		out.Err = j.MarkBound(ctx, e.Record)
	case CreateAccessPoint:
		if id, ok := w.byToken[e.Input.ClientToken]; ok {
			out.Err = &efs.AlreadyExistsError{AccessPointID: id}
			break
		}
		w.made++
		ap := &efs.AccessPoint{ID: fmt.Sprintf("fsap-%017d", w.made), FileSystemID: e.Input.FileSystemID, ClientToken: e.Input.ClientToken,
			Path: e.Input.Path, Tags: e.Input.Tags, PosixUser: e.Input.PosixUser}
		w.aps[ap.ID], w.byToken[ap.ClientToken] = ap, ap.ID
		cp := *ap
		out.AP = &cp
	case Describe:
		out.AP, out.Err = w.describe(e.AccessPoint)
	case LookUp:
		out.AP, out.Err = w.describe(e.ID.AccessPointID)
	case List:
		for _, ap := range w.aps {
			out.APs = append(out.APs, *ap)
		}
	case DeleteAccessPoint:
		if ap := w.aps[e.AccessPoint]; ap != nil {
			if a.sweeper {
				w.swept++
			}
			delete(w.byToken, ap.ClientToken)
			delete(w.aps, e.AccessPoint)
		}
	case Refresh:
		// The listing tells the replica's memory which ids access points
		// outside the protocol carry: its volumes' sequences
		// (FS.Candidate) skip them. The allocator's view is the listing
		// (live access points and directory volumes), taken now.
		var aps []efs.AccessPoint
		for _, apID := range slices.Sorted(maps.Keys(w.aps)) {
			aps = append(aps, *w.aps[apID])
			if w.outside[apID] {
				c.r.mem.AddOutside(PosixIDs(w.aps[apID]))
			}
		}
		out.Err = refresh(c.r.mem, e, aps...)
	case MakeDir:
		// The directory: a stand-in the gid check counts, from its making
		// until its delete's FS.Gone (modelMemory) or UnmakeDir.
		ap := DirStandIn(e.Record)
		if w.aps[ap.ID] == nil {
			w.aps[ap.ID], out.Yes = ap, true
		}
	case UnmakeDir:
		delete(w.aps, DirStandIn(e.Record).ID)
	case Reachable, RemoveRoot, Detach:
		// Nothing this model keeps: no root directories, no allocator
		// view, no other writers, no listing lag.
	default:
		w.violate("effect %T not modelled", e)
	}
	return out
}

func (w *modelWorld) describe(id string) (*efs.AccessPoint, error) {
	ap := w.aps[id]
	if ap == nil {
		return nil, efs.ErrAccessPointNotFound
	}
	cp := *ap
	return &cp, nil
}

// modelRun runs one schedule: choices[i] picks, at step i, which enabled
// actor goes (0: the one that went last, if still enabled; a preemption
// otherwise). It returns the options at each step, and whether every
// actor finished.
func modelRun(t *testing.T, plan *Plan, world modelWorldConfig, choices []int, maxPreempt int) (w *modelWorld, counts []int, finished bool) {
	w = &modelWorld{now: t0, store: journal.NewMemory(), aps: map[string]*efs.AccessPoint{}, byToken: map[string]string{},
		answered: map[string]bool{}, deleting: map[string]bool{}, outside: map[string]bool{}}
	replicas := []*modelReplica{}
	for _, n := range []string{"r0", "r1"} {
		r := &modelReplica{name: n}
		r.restart(w)
		replicas = append(replicas, r)
	}
	prov := &modelActor{name: "prov", plan: plan, replicas: replicas}
	all := []*modelActor{prov}
	for i := 1; i < world.actors; i++ {
		all = append(all, &modelActor{name: fmt.Sprintf("dup%d", i), plan: plan, dupOf: prov,
			replicas: []*modelReplica{replicas[i%2], replicas[(i+1)%2]}})
	}
	if world.other != nil {
		// Another claim's provisioner, on the other replica first: its
		// volume's sequence starts at the same id.
		all = append(all, &modelActor{name: "other", plan: world.other, replicas: []*modelReplica{replicas[1], replicas[0]}})
	}
	var sweeper *modelActor
	if world.rounds > 0 {
		// Its last round runs once every caller is done, as the
		// collector runs for the controller's life.
		sweeper = &modelActor{name: "sweep", sweeper: true, collect: world.collect, noSweep: world.noSweep, rounds: world.rounds - 1,
			replicas: []*modelReplica{replicas[1], replicas[0]}}
	}
	callersOver := func() bool {
		for _, a := range all {
			if a.call != nil || a.canStart() {
				return false
			}
		}
		return true
	}
	cfg := CreateConfig{}
	if world.outside {
		// Before the handover fence, by hand or by upstream's last
		// leader, on the volume sequence's first id: no tag of this
		// driver, a token of its own. Every create comes after it.
		first := SequenceAt(fsID, plan.Name, plan.Params.GIDRangeStart, plan.Params.GIDRangeEnd, 0)
		w.made++
		ap := &efs.AccessPoint{ID: fmt.Sprintf("fsap-%017d", w.made), FileSystemID: fsID, ClientToken: "console-1", Path: "/by-hand",
			PosixUser: &efs.PosixUser{UID: first, GID: first}}
		w.aps[ap.ID], w.byToken[ap.ClientToken], w.outside[ap.ID] = ap, ap.ID, true
		w.trace = append(w.trace, "outside writer made "+ap.ID+" with gid "+strconv.FormatInt(first, 10)+" before the handover fence")
	}
	ticked := !world.tick
	last, preempted, kills, losses, lastRound := -1, 0, 0, 0, true
	outsideOpt := len(all) + 2 + len(replicas)
	abandonOpt := outsideOpt + 1
	lostBase := abandonOpt + 1 // options: actors, the tick, the sweep, kills, the outside writer, abandon, then lost answers
	for depth := 0; ; depth++ {
		// Enabled: actors with a call under way, or one to start.
		var enabled []int
		for i, a := range all {
			if a.call != nil || a.canStart() {
				enabled = append(enabled, i)
			}
		}
		if sweeper != nil && sweeper.over() && callersOver() && lastRound {
			sweeper.rounds++ // the last round
			lastRound = false
		}
		if sweeper != nil && !sweeper.over() {
			enabled = append(enabled, len(all)+1)
		}
		if !ticked {
			enabled = append(enabled, len(all)) // the clock passes RepeatFresh
		}
		if world.abandon && !w.claimGone && prov.volID == "" && !prov.done {
			enabled = append(enabled, abandonOpt) // the claim is deleted
		}
		if kills < world.kills {
			for k, r := range replicas {
				if slices.ContainsFunc(append(all, sweeper), func(a *modelActor) bool { return a != nil && a.call != nil && a.call.r == r }) {
					enabled = append(enabled, len(all)+2+k) // r dies amid a call, and starts again
				}
			}
		}
		if len(enabled) == 0 {
			break
		}
		// The one that went last goes first among the options, so that
		// choice 0 never preempts; past the bound it is the only one.
		if k := slices.Index(enabled, last); k > 0 {
			enabled[0], enabled[k] = enabled[k], enabled[0]
		}
		if slices.Contains(enabled, last) && preempted >= maxPreempt {
			enabled = enabled[:1]
		}
		if losses < world.losses {
			// An answer lost: the actor's next request is applied and
			// its caller sees the service unavailable.
			for j, a := range all {
				if a.call != nil && lossy(a.call.m.Next()) && (j == last || !slices.Contains(enabled, last) || preempted < maxPreempt) {
					enabled = append(enabled, lostBase+j)
				}
			}
		}
		counts = append(counts, len(enabled))
		pick := 0
		if depth < len(choices) {
			pick = choices[depth]
		}
		i := enabled[pick]
		lose := i >= lostBase
		if lose {
			i -= lostBase
		}
		if i != last && slices.Contains(enabled, last) {
			preempted++
		}
		last = i
		if lose {
			losses++
			all[i].stepLost(w)
			if len(w.errs) > 0 {
				break
			}
			continue
		}
		if i == abandonOpt {
			// The claim deleted before its volume was answered, and its
			// provisioners restarted: they forget their creates, which
			// go on in the controllers; a duplicate already answered
			// deletes its volume as before.
			w.claimGone = true
			w.trace = append(w.trace, "claim deleted: its callers forget their creates")
			for _, a := range all {
				if a.plan != plan {
					continue
				}
				if a.call != nil && !a.call.del {
					a.call.ghost = true
				}
				if a.volID == "" {
					a.done = true
				}
			}
			continue
		}
		if i == len(all) {
			w.now = w.now.Add(2 * RepeatFresh)
			w.trace = append(w.trace, "tick")
			ticked = true
			continue
		}
		if i >= len(all)+2 {
			kills++
			r := replicas[i-len(all)-2]
			w.trace = append(w.trace, "kill "+r.name)
			for _, a := range append(all, sweeper) {
				if a != nil && a.call != nil && a.call.r == r {
					a.call.m.Stop()
					a.call = nil
					a.queue = nil // a sweep's round ends with it
				}
			}
			r.restart(w)
			lastRound = true // the collector runs again once restarted
			continue
		}
		a := sweeper
		if i < len(all) {
			a = all[i]
		}
		if a.call == nil {
			a.start(w, cfg)
		}
		a.step(w)
		if len(w.errs) > 0 || depth > 2000 {
			break
		}
	}
	finished = true
	for _, a := range all {
		finished = finished && a.done
	}
	return w, counts, finished && (sweeper == nil || sweeper.over())
}

func (c modelWorldConfig) String() string {
	s := fmt.Sprintf("%d callers of a claim", c.actors)
	if c.other != nil {
		s += ", another claim"
	}
	if c.tick {
		s += ", the clock past RepeatFresh"
	}
	if c.rounds > 0 {
		s += fmt.Sprintf(", %d sweep rounds", c.rounds)
	}
	if c.kills > 0 {
		s += fmt.Sprintf(", %d kill", c.kills)
	}
	if c.losses > 0 {
		s += fmt.Sprintf(", %d lost answer", c.losses)
	}
	if c.outside {
		s += ", an outside writer"
	}
	if c.abandon {
		s += ", the claim abandoned"
	}
	if c.collect {
		s += ", orphans collected"
	}
	if c.noSweep {
		s += " (no sweep)"
	}
	return s + fmt.Sprintf(", %d fewer preemptions", c.fewer)
}

// modelWorldConfig is who runs: a provisioner and actors-1 duplicate
// callers; the clock passing RepeatFresh once (tick); the collector's
// sweep for rounds rounds, the last once every caller is done.
type modelWorldConfig struct {
	actors int
	tick   bool
	rounds int
	kills  int   // replicas killed amid a call (each one choice at any step)
	other  *Plan // another claim, provisioned beside the first
	// outside: a writer outside the protocol made an access point on the
	// claim's first id before the handover fence: before any create.
	outside bool
	// abandon: the claim is deleted at any step before its provisioner is
	// answered (one choice), and its callers forget their creates, which
	// go on; collect: the collector's rounds collect orphaned records.
	abandon, collect bool
	noSweep          bool // the collector's rounds do not sweep
	losses           int  // answers lost after their request applied (each one choice at any request)
	// fewer is how many fewer preemptions than -core.preemptions this
	// world's schedules make: a kill is a choice more at every step.
	fewer int
}

// TestModel checks every interleaving, up to -core.preemptions switches
// away from a call that could go on, of a claim's provisioner and one
// duplicate caller (and, in a second world, two), on two replicas, with
// the clock passing the repeat memory once at any point; and in a third,
// the collector's sweep running beside them, one replica killed amid any
// call (one preemption fewer).
func TestModel(t *testing.T) {
	plan := gidPlan(t)
	bound := *modelPreemptions
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "core.preemptions" })
	if raceEnabled && !set {
		bound = 2 // make test runs the bound of 3 without the race detector
	}
	// Another claim whose sequence starts on the claim's first id: the two
	// contend for it (the sequences are the volumes' own, FS.Candidate).
	var other *Plan
	for i := 0; other == nil; i++ {
		o := gidPlanOf(t, fmt.Sprintf("pvc-other-%d", i))
		lo, hi := plan.Params.GIDRangeStart, plan.Params.GIDRangeEnd
		if SequenceAt(fsID, o.Name, lo, hi, 0) == SequenceAt(fsID, plan.Name, lo, hi, 0) {
			other = o
		}
	}
	// A directory volume of the same class's range beside the claim: only
	// the id table keeps it off the claim's ids.
	dir := dirPlanOf(t, "pvc-dir")
	for _, world := range []modelWorldConfig{{actors: 2, other: other, fewer: 1}, {actors: 2, other: dir, fewer: 1},
		{actors: 1, other: dir, rounds: 2, kills: 1, fewer: 2}, {actors: 1, other: other, rounds: 2, kills: 1, fewer: 2}, {actors: 2, tick: true}, {actors: 3}, {actors: 2, rounds: 2, kills: 1, fewer: 1}, {actors: 2, rounds: 1, losses: 1, fewer: 1}, {actors: 2, outside: true},
		{actors: 2, rounds: 2, abandon: true, collect: true, fewer: 1}, {actors: 2, rounds: 2, abandon: true, collect: true, noSweep: true, fewer: 1},
		{actors: 2, rounds: 2, abandon: true, collect: true, kills: 1, fewer: 2}} {
		runs, unfinished, swept := 0, 0, 0
		var choices []int
		for {
			w, counts, finished := modelRun(t, plan, world, choices, bound-world.fewer)
			if len(w.errs) == 0 && finished {
				if n := len(w.aps) - len(w.outside); n > 0 {
					w.violate("leak: %d access points left after every claim was deleted", n)
				}
				n := 0
				_ = w.store.List(context.Background(), journal.KindVolume, "", "", func(es []journal.Entry) error { n += len(es); return nil })
				_ = w.store.List(context.Background(), journal.KindID, "", "", func(es []journal.Entry) error { n += len(es); return nil })
				if n > 0 {
					w.violate("record: %d entries left after every claim was deleted", n)
				}
			}
			if len(w.errs) > 0 || *modelVerbose {
				msg := fmt.Sprintf("actors %d, choices %v:\n  %s\n%s", world.actors, choices, strings.Join(w.trace, "\n  "), strings.Join(w.errs, "\n"))
				if len(w.errs) > 0 {
					t.Fatal(msg)
				}
				t.Log(msg)
			}
			runs++
			if w.swept > 0 {
				swept++
			}
			if !finished {
				unfinished++
			}
			var more bool
			if choices, more = nextPath(choices, counts); !more {
				break
			}
		}
		t.Logf("%v: %d schedules, %d with a caller out of attempts, %d with an access point swept",
			world, runs, unfinished, swept)
		if runs < 100 && bound > world.fewer || runs < 2 {
			t.Fatalf("only %d schedules: the scheduler does not branch", runs)
		}
	}
}
