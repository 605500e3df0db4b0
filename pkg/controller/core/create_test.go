package core

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// gidPlan is a volume of a class that allocates GIDs in [60000, 60009]
// and tags its access points: its creates send GID tokens.
func gidPlan(t *testing.T) *Plan { t.Helper(); return gidPlanOf(t, name) }

// gidPlanOf is gidPlan for the volume named n.
func gidPlanOf(t *testing.T, name string) *Plan {
	t.Helper()
	params, root := classOf(t, volume.ProvisioningModeAccessPoint, name)
	return &Plan{Name: name, Params: params, Capacity: 5 << 30, Cluster: "c1", Input: efs.CreateAccessPointInput{
		FileSystemID: fsID, ClientToken: params.ClientToken(name), Path: root,
		Tags: map[string]string{ownership.TagCluster: "true", ownership.TagVolumeName: name, ownership.TagClusterID: "c1",
			ownership.TagCapacity: CapacityTag(5 << 30)},
	}}
}

// classOf is the parameters of a class of mode that allocates ids in
// [60000, 60009] on fsID, and the root directory of the volume named n.
func classOf(t *testing.T, mode, n string) (volume.Params, string) {
	t.Helper()
	params, err := volume.ParseParams(map[string]string{
		volume.ParamProvisioningMode: mode, volume.ParamFileSystemID: fsID,
		volume.ParamGIDRangeStart: "60000", volume.ParamGIDRangeEnd: "60009", volume.ParamDirectoryPerms: "700",
	})
	if err != nil {
		t.Fatal(err)
	}
	root, err := params.RootDir(n)
	if err != nil {
		t.Fatal(err)
	}
	return params, root
}

// newRecord is the record Begin makes for p with id.
func newRecord(p *Plan, id int64) *journal.Record {
	return &journal.Record{Volume: journal.Volume{FileSystem: fsID, Token: p.Input.ClientToken, ClientToken: volume.GIDToken(fsID, id),
		Name: p.Name, Path: p.Input.Path, UID: id, GID: id, Allocated: id, Created: t0}}
}

// accessPoint is what EFS makes for in.
func accessPoint(id string, in efs.CreateAccessPointInput) *efs.AccessPoint {
	return &efs.AccessPoint{ID: id, FileSystemID: in.FileSystemID, ClientToken: in.ClientToken, Path: in.Path, Tags: in.Tags, PosixUser: in.PosixUser}
}

func describeCreate(e Effect) string {
	switch e := e.(type) {
	case Answer:
		switch {
		case e.Err != nil:
			return "answer " + e.Err.Error()
		case e.AP != nil:
			return "answer " + e.AP.ID
		}
		return "answer ok"
	case Refresh:
		return "refresh"
	case Begin:
		return fmt.Sprintf("begin %s gid=%d", e.Volume.ClientToken, e.Volume.GID)
	case Hold:
		return "hold"
	case Touch:
		return "touch"
	case CreateAccessPoint:
		return fmt.Sprintf("create %s gid=%d", e.Input.ClientToken, e.Input.PosixUser.GID)
	case Detach:
		return "detach"
	case SetAccessPoint:
		return "record " + e.Made.ID
	case Describe:
		return "describe " + e.AccessPoint
	case ReleaseUnsentID:
		return fmt.Sprintf("release unsent %d", e.ID)
	case ReleaseMovedID:
		return fmt.Sprintf("release moved %d", e.ID)
	case SetIDs:
		return fmt.Sprintf("set ids %d -> %d", e.From, e.ID)
	case DeleteAccessPoint:
		return "delete " + e.AccessPoint
	case HoldForSweep:
		return fmt.Sprintf("hold for sweep %d", e.ID)
	case ReleaseSweep:
		return fmt.Sprintf("release sweep %d", e.ID)
	case List:
		return "list " + e.FileSystem
	}
	return describe(e)
}

// TestCreateSteps drives the create protocol through scripted outcomes and
// checks each effect it asks for, in order.
func TestCreateSteps(t *testing.T) {
	p := gidPlan(t)
	g1, g2 := volume.GIDToken(fsID, 60001), volume.GIDToken(fsID, 60002)
	rec := func() *journal.Record { return newRecord(p, 60001) }
	other := &efs.AccessPoint{ID: "fsap-0000000000000000a", FileSystemID: fsID, ClientToken: g1,
		Tags: map[string]string{ownership.TagVolumeName: "pvc-other"}, PosixUser: &efs.PosixUser{UID: 60001, GID: 60001}}
	type step struct {
		want string
		give func(e Effect) Result
	}
	ok := func(Effect) Result { return Result{} }
	give := func(r Result) func(Effect) Result { return func(Effect) Result { return r } }
	made := func(e Effect) Result { return Result{AP: accessPoint(apID, e.(CreateAccessPoint).Input)} }
	setIDs := func(e Effect) Result { // the record moves as asked
		s := e.(SetIDs)
		s.Record.Allocated, s.Record.UID, s.Record.GID, s.Record.ClientToken = s.ID, s.UID, s.GID, s.ClientToken
		return Result{}
	}
	begun := func(r *journal.Record, made bool) func(Effect) Result {
		return func(e Effect) Result { return Result{Record: r, Yes: made} }
	}
	fresh := []step{
		{"reserve " + name, ok},
		{"release", ok}, // the volume's own sequence chooses
		{"candidate from 0", give(Result{ID: 60001, N: 0})},
	}
	// made while its volume was being deleted: the record write says so.
	madeWhileDeleting := func() []step {
		return append(append([]step{}, fresh...),
			step{"begin " + g1 + " gid=60001", begun(rec(), true)}, step{"hold", ok}, step{"touch", ok},
			step{"create " + g1 + " gid=60001", made}, step{"seen " + apID, ok}, step{"detach", ok},
			step{"record " + apID, give(Result{Err: journal.ErrDeleting})}, step{"detach", ok})
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a new volume: record, hold, send, record the access point, answer", append(append([]step{}, fresh...),
			step{"begin " + g1 + " gid=60001", begun(rec(), true)}, step{"hold", ok}, step{"touch", ok},
			step{"create " + g1 + " gid=60001", made}, step{"seen " + apID, ok}, step{"detach", ok},
			step{"record " + apID, ok}, step{"answer " + apID, ok})},
		{"a new volume whose record the store made with its id held: no Hold of its own", append(append([]step{}, fresh...),
			step{"begin " + g1 + " gid=60001", func(Effect) Result { return Result{Record: rec(), Yes: true, Held: true} }},
			step{"create " + g1 + " gid=60001", made}, step{"seen " + apID, ok}, step{"detach", ok},
			step{"record " + apID, ok}, step{"answer " + apID, ok})},
		{"a retry whose record exists confirms it before its send", append(append([]step{}, fresh...),
			step{"begin " + g1 + " gid=60001", begun(rec(), false)}, step{"hold", ok}, step{"touch", ok},
			step{"create " + g1 + " gid=60001", give(Result{Err: &efs.AlreadyExistsError{AccessPointID: apID}})},
			step{"describe " + apID, func(Effect) Result {
				return Result{AP: accessPoint(apID, efs.CreateAccessPointInput{
					FileSystemID: fsID, ClientToken: g1, Path: p.Input.Path, Tags: p.Input.Tags, PosixUser: &efs.PosixUser{UID: 60001, GID: 60001}})}
			}},
			step{"seen " + apID, ok},
			step{"record " + apID, ok}, step{"answer " + apID, ok})},
		{"a record being deleted is ABORTED before anything is sent", append(append([]step{}, fresh...),
			step{"begin " + g1 + " gid=60001", func(Effect) Result { r := rec(); r.Deleting = true; return Result{Record: r} }},
			step{"answer " + keylock.ErrBusy.Error() + ": " + journal.ErrDeleting.Error() + ": " + fsID + "/\"" + name + "\"", ok})},
		{"an id another holds is moved from without releasing it: a create of this volume may hold it by now", append(append([]step{}, fresh...),
			step{"begin " + g1 + " gid=60001", begun(rec(), true)},
			step{"hold", give(Result{Err: journal.ErrIDTaken})},
			step{"reserve " + name, ok}, step{"release", ok},
			step{"candidate from 1", give(Result{ID: 60002, N: 1})},
			step{"set ids 60001 -> 60002", setIDs},
			step{"hold", ok}, step{"touch", ok}, step{"create " + g2 + " gid=60002", made}, step{"seen " + apID, ok}, step{"detach", ok},
			step{"record " + apID, ok}, step{"answer " + apID, ok})},
		{"another writer's access point holds the GID token: the next id of the sequence", append(append([]step{}, fresh...),
			step{"begin " + g1 + " gid=60001", begun(rec(), true)}, step{"hold", ok}, step{"touch", ok},
			step{"create " + g1 + " gid=60001", give(Result{Err: &efs.AlreadyExistsError{AccessPointID: other.ID}})},
			step{"describe " + other.ID, give(Result{AP: other})}, step{"seen " + other.ID, ok},
			step{"log GID taken by another writer's access point; taking another", ok},
			step{"reserve " + name, ok}, step{"release", ok},
			step{"candidate from 1", give(Result{ID: 60002, N: 1})},
			step{"release unsent 60001", ok}, step{"set ids 60001 -> 60002", setIDs},
			step{"hold", ok}, step{"touch", ok}, step{"create " + g2 + " gid=60002", made}, step{"seen " + apID, ok}, step{"detach", ok},
			step{"record " + apID, ok}, step{"answer " + apID, ok})},
		{"made while its volume was being deleted: deleted, never answered", append(madeWhileDeleting(),
			step{"release moved 60001", ok}, step{"hold for sweep 60001", ok}, // no create sends its token now
			step{"delete " + apID, ok}, step{"log access point deleted", ok}, step{"release sweep 60001", ok},
			step{"answer " + keylock.ErrBusy.Error() + ": " + journal.ErrDeleting.Error(), ok})},
		{"a cleanup write the store failed is sent again: the access point still goes", append(madeWhileDeleting(),
			step{"release moved 60001", give(Result{Err: journal.ErrUnavailable})},
			step{"release moved 60001", ok},
			step{"hold for sweep 60001", give(Result{Err: journal.ErrUnavailable})},
			step{"hold for sweep 60001", give(Result{Err: journal.ErrUnavailable})},
			step{"hold for sweep 60001", ok},
			step{"delete " + apID, ok}, step{"log access point deleted", ok}, step{"release sweep 60001", ok},
			step{"answer " + keylock.ErrBusy.Error() + ": " + journal.ErrDeleting.Error(), ok})},
		{"a cleanup gives up after three writes the store failed: the sweep's then", append(madeWhileDeleting(),
			step{"release moved 60001", give(Result{Err: journal.ErrUnavailable})},
			step{"release moved 60001", give(Result{Err: journal.ErrUnavailable})},
			step{"release moved 60001", give(Result{Err: journal.ErrUnavailable})},
			step{"answer " + keylock.ErrBusy.Error() + ": " + journal.ErrDeleting.Error() + "\n" + journal.ErrUnavailable.Error(), ok})},
		{"made for a life whose next one holds its id: kept, for that life to adopt", append(madeWhileDeleting(),
			step{"release moved 60001", ok}, step{"hold for sweep 60001", give(Result{Err: journal.ErrIDTaken, Token: name})},
			step{"read record hint=false", begun(rec(), false)}, // the next life, sending the same GID token
			step{"log access point kept: the volume's next create adopts it, or the collector's sweep deletes it", ok},
			step{"answer " + keylock.ErrBusy.Error() + ": " + journal.ErrDeleting.Error(), ok})},
		{"an unknown outcome keeps the record and its id for the identical retry", append(append([]step{}, fresh...),
			step{"begin " + g1 + " gid=60001", begun(rec(), true)}, step{"hold", ok}, step{"touch", ok},
			step{"create " + g1 + " gid=60001", give(Result{Err: errAPI})}, step{"answer " + errAPI.Error(), ok})},
		{"a full range finds a retry's record before giving up", []step{
			{"reserve " + name, give(Result{Err: gid.ErrExhausted})},
			{"read record hint=false", begun(func() *journal.Record { r := rec(); r.AccessPoint = apID; return r }(), false)},
			{"hold", ok}, {"describe " + apID, func(Effect) Result {
				return Result{AP: accessPoint(apID, efs.CreateAccessPointInput{FileSystemID: fsID, ClientToken: g1, Path: p.Input.Path,
					Tags: p.Input.Tags, PosixUser: &efs.PosixUser{UID: 60001, GID: 60001}})}
			}},
			{"seen " + apID, ok}, {"touch", ok}, {"answer " + apID, ok}}}, // confirmed after the Describe: the last step before the answer
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := 0
			take := func(want string, e Effect) Result {
				t.Helper()
				if i >= len(tc.steps) {
					t.Fatalf("step %d: %q past the script's end", i, want)
				}
				if s := tc.steps[i]; s.want != want {
					t.Fatalf("step %d: %q, want %q", i, want, s.want)
				}
				r := tc.steps[i].give(e)
				r.Now = t0
				i++
				return r
			}
			// The volume's sequence is the memory's: each call is a step.
			mem := &sequenceMemory{FS: listedFS(), take: take}
			// So is each line it logs.
			log := slog.New(lineHandler(func(r slog.Record) { take("log "+r.Message, nil) }))
			c := NewCreate(CreateConfig{Logger: log}, p, mem, t0)
			for i < len(tc.steps) {
				e := c.Next()
				c.Step(take(describeCreate(e), e))
			}
			if a, ok := c.Next().(Answer); !ok || !errors.Is(a.Err, ErrStuck) {
				t.Fatalf("after its end the machine asks for %s", describeCreate(c.Next()))
			}
		})
	}
}

// TestCreateEveryOutcome runs the create protocol through every sequence
// of outcomes its effects can have (each effect from a small set:
// success, not found, a record made or found, found withdrawn, being
// deleted or of another volume, an id taken, a lost compare-and-swap, a
// token another writer's access point holds, a rival in a listing, an API
// error; an effect's outcomes other than success are explored on its first
// two occurrences in a run, which bounds the id moves), in and past the
// controller's first minutes, and checks on each run what CreateVolume
// promises (docs/design.md, Invariants I2, I3, I5; Create):
//   - it ends in an answer;
//   - every CreateAccessPoint sends an id only under that id's own GID
//     token, only once the record holds the id (a Hold since the record
//     last changed ids), and, for a record this call found or an id its
//     token held already, only once a Touch proved the record unchanged
//     after that (also after the recorded access point was not found);
//   - an answered access point is the one the record names: recorded by
//     this call, or the record's own as Describe shows it;
//   - nothing is deleted that this call recorded or answered, and only
//     what a record write said nobody can answer (withdrawn, being
//     deleted, moved off its token);
//   - no reservation of this process's allocator outlives the call.
var exploreRepeats = flag.Int("core.repeats", 1, "TestCreateEveryOutcome: explore each effect's failing outcomes on this many of its occurrences in a run")

func TestCreateEveryOutcome(t *testing.T) {
	p := gidPlan(t)
	g1 := volume.GIDToken(fsID, 60001)
	other := &efs.AccessPoint{ID: "fsap-0000000000000000a", FileSystemID: fsID, ClientToken: g1,
		Tags: map[string]string{ownership.TagVolumeName: "pvc-other"}, PosixUser: &efs.PosixUser{UID: 60001, GID: 60001}}
	outside := &efs.AccessPoint{ID: "fsap-0000000000000000b", FileSystemID: fsID, ClientToken: name, Path: "/outside",
		PosixUser: &efs.PosixUser{UID: 60001, GID: 60001}}
	runs := 0
	for _, mode := range []struct{ whole, delRoot bool }{{false, false}, {true, true}, {true, false}} {
		var choices []int
		for {
			var (
				k      int // the next choice of the run
				counts []int
				seen   = map[string]int{}
			)
			// pick is the run's next choice of n outcomes: explored on the
			// first *exploreRepeats occurrences of its kind in a run.
			pick := func(kind string, n int) int {
				if seen[kind]++; seen[kind] > *exploreRepeats {
					n = 1
				}
				if k == len(counts) {
					counts = append(counts, n)
				}
				if k >= len(choices) {
					choices = append(choices, 0)
				}
				k++
				return choices[k-1]
			}
			mine := accessPoint(apID, efs.CreateAccessPointInput{FileSystemID: fsID, ClientToken: g1, Path: p.Input.Path,
				Tags: p.Input.Tags, PosixUser: &efs.PosixUser{UID: 60001, GID: 60001}})
			mem := &branchingMemory{FS: NewFS(fsID), pick: pick, answer: mine, upstream: outside}
			cfg := CreateConfig{DeleteRootDir: mode.delRoot}
			c := NewCreate(cfg, p, mem, t0)
			if mode.whole {
				c = NewCreateVolume(cfg, p, mem, t0)
			}
			var (
				sweepHeld    bool // the id of an access point nobody answered is held against creates
				ownHold      bool // refused: the volume's own key holds that id
				lastReadGone bool // a read of the record found none
				tokenOf      = map[string]string{}
				trace        []string
				rec          *journal.Record
				held         bool // the record's current id is held
				mustConfirm  bool // a Touch must come before the next send
				recorded     = map[string]bool{}
				droppable    = map[string]bool{}
				answer       *Answer
				madeN        int
				lastOutcomes string
			)
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("mode %v, choices %v:\n  %s\n"+format, append([]any{mode, choices, strings.Join(trace, "\n  ")}, args...)...)
			}
			for depth := 0; answer == nil; depth++ {
				if depth > 300 {
					fail("no answer after 300 effects")
				}
				e := c.Next()
				trace = append(trace, describeCreate(e))
				var opts []func() Result
				one := func(r Result) func() Result { return func() Result { return r } }
				okr := one(Result{})
				errr := one(Result{Err: errAPI})
				switch e := e.(type) {
				case Answer:
					answer = &e
					continue
				case Lock:
					opts = []func() Result{okr, one(Result{Err: keylock.ErrBusy})}
				case MakeDir:
					fail("a volume of access points made a directory")
				case Refresh:
					if mode.delRoot && !mem.creating {
						fail("reserved before this process's deletes see the create")
					}
					opts = []func() Result{func() Result { return Result{Err: refresh(mem.FS, e)} }, errr}
				case Begin, ReadRecord:
					var v journal.Volume
					if b, ok := e.(Begin); ok {
						v = b.Volume
					} else {
						v = newRecord(p, 60001).Volume
					}
					mk := func(edit func(*journal.Record), made bool) func() Result {
						return func() Result {
							v.Created = t0
							r := &journal.Record{Volume: v}
							if edit != nil {
								edit(r)
							}
							// Made or found, a record is confirmed before
							// the send: another create may move a record it
							// made before its hold (but one made with its id
							// held, below).
							rec, held, mustConfirm, lastReadGone = r, false, true, false
							return Result{Record: r, Yes: made}
						}
					}
					opts = []func() Result{
						mk(nil, true), mk(nil, false),
						mk(func(r *journal.Record) { r.AccessPoint = apID }, false),
						mk(func(r *journal.Record) { r.Deleting = true }, false),
						mk(func(r *journal.Record) { r.Name = "pvc-other" }, false),
						func() Result { lastReadGone = true; return Result{Err: journal.ErrNotFound} },
						errr,
					}
					if _, ok := e.(Begin); ok {
						// Made with its id held in the same write
						// (journal.BeginHeld): a Hold that made the entry.
						opts = append(opts, func() Result {
							r := mk(nil, true)()
							held, mustConfirm, r.Held = true, false, true
							return r
						})
					}
				case Hold:
					opts = []func() Result{
						func() Result { held = true; return Result{} },
						func() Result { held, mustConfirm = true, true; return Result{Yes: true} },
						one(Result{Err: journal.ErrIDTaken}), errr,
					}
				case Touch:
					opts = []func() Result{
						func() Result { mustConfirm = false; return Result{} },
						func() Result { e.Record.Allocated++; return Result{} }, // another create moved it
						one(Result{Err: journal.ErrDeleting}), errr,
					}
				case SetIDs:
					opts = []func() Result{
						func() Result {
							e.Record.Allocated, e.Record.UID, e.Record.GID, e.Record.ClientToken, e.Record.Probe = e.ID, e.UID, e.GID, e.ClientToken, e.Probe
							held, mustConfirm = false, true // the next hold's id: another create may move it off before that hold
							return Result{}
						},
						one(Result{Err: journal.ErrConflict}), errr,
					}
				case Describe:
					cur := rec
					if cur == nil { // a repeat's, before any record read
						cur = newRecord(p, 60001)
					}
					opts = []func() Result{
						one(Result{AP: accessPoint(e.AccessPoint, efs.CreateAccessPointInput{FileSystemID: fsID, ClientToken: cur.SentToken(),
							Path: p.Input.Path, Tags: p.Input.Tags, PosixUser: &efs.PosixUser{UID: cur.UID, GID: cur.GID}})}),
						one(Result{AP: other}),
						func() Result {
							if madeN == 0 && rec != nil && e.AccessPoint == rec.AccessPoint {
								mustConfirm = true // the record's own is gone: confirm before making another
							}
							return Result{Err: efs.ErrAccessPointNotFound}
						},
						errr,
					}
				case CreateAccessPoint:
					in := e.Input
					if !held || mustConfirm {
						fail("sent with its id held %v and the record confirmed %v", held, !mustConfirm)
					}
					if volume.IsGIDToken(in.ClientToken) && (in.ClientToken != volume.GIDToken(fsID, in.PosixUser.GID) || in.PosixUser.GID != rec.GID) {
						fail("sent GID %d under token %s (the record's GID %d)", in.PosixUser.GID, in.ClientToken, rec.GID)
					}
					madeN++
					id := fmt.Sprintf("fsap-%017d", 100+madeN)
					opts = []func() Result{
						one(Result{AP: accessPoint(id, in)}),
						one(Result{Err: &efs.AlreadyExistsError{AccessPointID: apID}}),
						one(Result{Err: &efs.AlreadyExistsError{AccessPointID: other.ID}}),
						errr,
					}
					droppable[id] = false
					tokenOf[id] = in.ClientToken
				case List:
					opts = []func() Result{one(Result{}), one(Result{APs: []efs.AccessPoint{*other}}), one(Result{APs: []efs.AccessPoint{*outside}}), errr}
				case SetAccessPoint:
					opts = []func() Result{
						func() Result { e.Record.AccessPoint = e.Made.ID; recorded[e.Made.ID] = true; return Result{} },
						func() Result { droppable[e.Made.ID] = true; return Result{Err: journal.ErrDeleting} },
						func() Result { droppable[e.Made.ID] = true; return Result{Err: journal.ErrStaleToken} },
						errr,
					}
				case HoldForSweep:
					opts = []func() Result{
						func() Result { sweepHeld = true; return Result{} },
						func() Result { ownHold = false; return Result{Err: journal.ErrIDTaken, Token: "pvc-other"} },
						func() Result { ownHold = true; return Result{Err: journal.ErrIDTaken, Token: p.Input.ClientToken} },
						errr,
					}
				case HoldID:
					opts = []func() Result{okr, one(Result{Err: journal.ErrIDTaken}), errr}
				case DeleteAccessPoint:
					if recorded[e.AccessPoint] {
						fail("deleted %s, which this call recorded", e.AccessPoint)
					}
					if !droppable[e.AccessPoint] {
						fail("deleted %s, which no record write said nobody can answer", e.AccessPoint)
					}
					// Made under a GID token: deleted only once no create
					// of this volume can adopt it: its id held against
					// creates, or held by another volume (whose create
					// finds it another writer's), or by this volume's
					// record that now sends another token.
					if droppable[e.AccessPoint] && volume.IsGIDToken(tokenOf[e.AccessPoint]) && !sweepHeld &&
						ownHold && (lastReadGone || rec != nil && rec.SentToken() == tokenOf[e.AccessPoint] && !rec.Deleting && rec.AccessPoint == "") {
						fail("deleted %s, which the volume's record (sending its token) may adopt", e.AccessPoint)
					}
					opts = []func() Result{okr, errr}
				case ReleaseUnsentID, ReleaseMovedID, SetClaim, Finish, ReleaseSweep:
					opts = []func() Result{okr, errr}
				default:
					opts = []func() Result{okr}
				}
				kind := fmt.Sprintf("%T", e)
				r := opts[pick(kind, len(opts))]()
				r.Now = t0
				lastOutcomes = kind
				c.Step(r)
			}
			_ = lastOutcomes
			if answer.AP != nil {
				if answer.Err != nil {
					fail("answered both an access point and an error")
				}
				if !recorded[answer.AP.ID] && (rec == nil || rec.AccessPoint != answer.AP.ID || rec.Deleting) {
					fail("answered %s, which the record does not name (or is deleting)", answer.AP.ID)
				}
			} else if answer.Err == nil {
				fail("answered success without an access point")
			}
			if mem.creating && !mem.ended {
				fail("a create seen by this process's deletes never ended")
			}
			if n := mem.FS.alloc.Stats()[fsID].Reserved; n != 0 {
				fail("%d reservations held past the answer", n)
			}
			runs++
			var more bool
			if choices, more = nextPath(choices, counts); !more {
				break
			}
		}
	}
	t.Logf("%d runs", runs)
	if runs < 10000 {
		t.Fatalf("only %d runs: the options do not branch", runs)
	}
}

// branchingMemory is a file system's memory whose every read a run of
// TestCreateEveryOutcome chooses: an answer remembered or not (fresh or
// stale), a token burned or not, upstream's access point listed or not.
// It notes whether this process's deletes were told of the create
// (creating) and of its end (ended).
type branchingMemory struct {
	*FS
	pick            func(kind string, n int) int
	answer          *efs.AccessPoint
	upstream        *efs.AccessPoint
	creating, ended bool
}

func (m *branchingMemory) Creating(token, name, root string) {
	m.creating = true
	m.FS.Creating(token, name, root)
}

func (m *branchingMemory) CreateEnded(token string, ap *efs.AccessPoint, now time.Time) {
	m.ended = true
	m.FS.CreateEnded(token, ap, now)
}

func (m *branchingMemory) Answered(string) (*efs.AccessPoint, time.Time) {
	switch m.pick("Answered", 3) {
	case 1:
		return m.answer, t0
	case 2:
		return m.answer, t0.Add(-2 * RepeatFresh)
	}
	return nil, time.Time{}
}

func (m *branchingMemory) Burned(string, time.Time) bool { return m.pick("Burned", 2) == 1 }

// Reserve is the allocator's: it asks for a listing first (the view is
// cold), then gives an id or finds the range full.
func (m *branchingMemory) Reserve(lo, hi int64, key string, since uint64, now time.Time, fits func(int64) bool) (*gid.Reservation, error) {
	r, err := m.FS.Reserve(lo, hi, key, since, now, fits)
	if err != nil || m.pick("Reserve", 2) == 0 {
		return r, err
	}
	m.FS.Release(r)
	return nil, gid.ErrExhausted
}

// Candidate is the id at place from of a sequence that starts at 60001, or
// an error.
func (m *branchingMemory) Candidate(_, _ string, _, _ int64, from int, _ func(int64) bool) (int64, int, error) {
	if m.pick("Candidate", 2) == 1 {
		return 0, 0, errAPI
	}
	return 60001 + int64(from), from, nil
}

func (m *branchingMemory) Upstream(string) *efs.AccessPoint {
	if m.pick("Upstream", 2) == 1 {
		return m.upstream
	}
	return nil
}

// sequenceMemory is an FS whose sequence and allocator a scripted test
// gives: each of those calls is a step (take).
type sequenceMemory struct {
	*FS
	take func(want string, e Effect) Result
}

func (m *sequenceMemory) Candidate(_, _ string, _, _ int64, from int, _ func(int64) bool) (int64, int, error) {
	r := m.take(fmt.Sprintf("candidate from %d", from), nil)
	return r.ID, r.N, r.Err
}

func (m *sequenceMemory) Reserve(lo, hi int64, key string, since uint64, now time.Time, fits func(int64) bool) (*gid.Reservation, error) {
	r := m.take("reserve "+key, nil)
	if r.Err != nil {
		return nil, r.Err
	}
	if r.ID != 0 { // the id the step gives
		lo, hi = r.ID, r.ID
	}
	return m.FS.Reserve(lo, hi, key, since, now, fits)
}

func (m *sequenceMemory) Release(r *gid.Reservation) {
	m.take("release", nil)
	m.FS.Release(r)
}

func (m *sequenceMemory) Seen(ap efs.AccessPoint, now time.Time) {
	m.take("seen "+ap.ID, nil)
	m.FS.Seen(ap, now)
}
