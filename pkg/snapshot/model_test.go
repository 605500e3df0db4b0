package snapshot

// A model checker of the snapshot protocols: two calls (actors) run with
// every interleaving of their steps (each Get, Create, Update, Delete and
// List of the record, and each file a copy reads, is a step; one actor
// runs at a time, so its other file system work is atomic between
// steps), explored depth first by replaying prefixes of choices (under
// the race detector, those of at most 2 preemptions). After each schedule the invariants of
// docs/snapshots.md are checked: no read-only volume or finished restore
// without its whole data, no copy left behind by a finished delete, no
// snapshot stuck (what failed succeeds when run again alone).
//
// Where it differs from a cluster: file system steps of two actors
// interleave only at the files a copy reads (a rename, a removal of a
// tree, are one step); copies run in the actor's goroutine,
// not as background jobs (m.start), so Delete's stop finds none and
// refuseInUse relies on VolumeLive, as on another controller.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

type actorKey struct{}

// actor is one call of a schedule; its context carries it to the store.
type actor struct {
	name    string
	wake    chan fault // what strikes its next step (proceed: nothing)
	err     error
	done    bool
	faultAt int   // the step at which fault strikes (0: never)
	fault   fault // what strikes then
	steps   int
	killed  bool
	faulted bool
}

// fault is what strikes an actor at a step.
type fault int

const (
	proceed  fault = iota // nothing
	kill                  // the process is killed before the step
	fail                  // the record's operation fails, not applied
	lostWord              // the record's operation is applied, its answer lost
)

func (f fault) String() string { return [...]string{"none", "killed", "failed", "answer lost"}[f] }

var errInjected = errors.New("injected: the API server's answer did not arrive")

type report struct {
	a    *actor
	done bool
}

// sched lets one actor run at a time: an actor reports at each record
// step (and at its start) and waits to be woken.
type sched struct{ reports chan report }

// gate is a step: it returns the fault that strikes the step's record
// operation, if any (fail or lostWord; a killed actor never returns).
func (s *sched) gate(ctx context.Context) (fault, bool) {
	a, _ := ctx.Value(actorKey{}).(*actor)
	if a == nil {
		return 0, false // set-up and checks: not an actor's
	}
	a.steps++
	s.reports <- report{a: a}
	switch f := <-a.wake; f {
	case proceed:
		return proceed, false
	case kill:
		// Killed: nothing after this point runs, not even deferred
		// calls; the goroutine stays parked until the test's end.
		a.killed = true
		s.reports <- report{a: a, done: true}
		select {}
	default:
		a.faulted = true
		return f, true
	}
}

// gatedStore makes every record operation a step of the schedule.
type gatedStore struct {
	journal.Store
	s *sched
}

// do runs a record operation as the step's fault says.
func do[T any](g gatedStore, ctx context.Context, op func() (T, error)) (T, error) {
	var zero T
	f, struck := g.s.gate(ctx)
	if struck && f == fail {
		return zero, errInjected
	}
	v, err := op()
	if struck && f == lostWord {
		return zero, errInjected
	}
	return v, err
}

func (g gatedStore) Get(ctx context.Context, k journal.Key) (journal.Entry, error) {
	return do(g, ctx, func() (journal.Entry, error) { return g.Store.Get(ctx, k) })
}

func (g gatedStore) Create(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	return do(g, ctx, func() (journal.Entry, error) { return g.Store.Create(ctx, e) })
}

func (g gatedStore) Update(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	return do(g, ctx, func() (journal.Entry, error) { return g.Store.Update(ctx, e) })
}

func (g gatedStore) Delete(ctx context.Context, e journal.Entry) error {
	_, err := do(g, ctx, func() (struct{}, error) { return struct{}{}, g.Store.Delete(ctx, e) })
	return err
}

func (g gatedStore) List(ctx context.Context, kind journal.Kind, fsID, index string, fn func([]journal.Entry) error) error {
	_, err := do(g, ctx, func() (struct{}, error) { return struct{}{}, g.Store.List(ctx, kind, fsID, index, fn) })
	return err
}

// copy copies a tree in process (the model's copier: quick; the copy's
// fidelity is pkg/treecopy's tests'), each file a step of the schedule,
// so that a delete can run in the middle of a copy; like pkg/treecopy,
// it skips what vanished while it walked.
func (s *sched) copy(ctx context.Context, src, dst string, _ func(uid, gid int) (int, int)) (int64, error) {
	var n int64
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if f, struck := s.gate(ctx); struck && f != kill {
			return errInjected // a file copy is no record operation: the step fails
		}
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		n += int64(len(b))
		return os.WriteFile(to, b, 0o644)
	})
	return n, err
}

// modelWorld is one schedule's world: a file system with a volume "vol"
// holding a/f, the record, a Manager whose store is gated.
type modelWorld struct {
	root  string
	store *journal.Memory
	m     *Manager // gated
	snap  *Snapshot
	s     *sched
	bound int // preemptions a schedule may have
}

func newModelWorld(t *testing.T, ready bool, bound int) *modelWorld {
	t.Helper()
	w := &modelWorld{root: modelDir(t), store: journal.NewMemory(), s: &sched{reports: make(chan report)}, bound: bound}
	must(t, os.MkdirAll(filepath.Join(w.root, "vol", "a"), 0o755))
	must(t, os.WriteFile(filepath.Join(w.root, "vol", "a", "f"), []byte("hello"), 0o644))
	must(t, os.MkdirAll(filepath.Join(w.root, "vol", "b"), 0o755))
	must(t, os.WriteFile(filepath.Join(w.root, "vol", "b", "g"), []byte("world"), 0o644))
	cfg := Config{Store: w.store, Mount: dirMount(w.root), Copy: w.s.copy, Wait: time.Minute,
		Now:        func() time.Time { return time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC) },
		VolumeLive: func(context.Context, string, string, string) (bool, error) { return true, nil }}
	ungated := New(cfg)
	ctx := context.Background()
	if ready {
		snap, err := ungated.Create(ctx, "snap-1", src)
		must(t, err)
		w.snap = snap
	} else {
		// Recorded, its copy not made: an actor makes it.
		snap := &Snapshot{Name: "snap-1", Source: src.VolumeID, FileSystem: fs1, SourcePath: src.Path, UID: -1, GID: -1, Created: cfg.Now()}
		e, err := w.store.Create(ctx, journal.Entry{Key: snapshotKey(fs1, KeyOf("snap-1")), Value: mustJSON(t, snap), Index: indexOf(src.VolumeID)})
		must(t, err)
		snap.entry, snap.ID = e, ID(fs1, KeyOf("snap-1"))
		w.snap = snap
	}
	cfg.Store = gatedStore{Store: w.store, s: w.s}
	w.m = New(cfg)
	return w
}

// modelDir is a schedule's file system: in memory (/dev/shm) where there
// is one, as thousands of schedules create and remove trees; else a test
// directory.
func modelDir(t *testing.T) string {
	d, err := os.MkdirTemp("/dev/shm", "efs-csi-model-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// run runs the actors with the choices of prefix, then the first ready
// actor at each step; it returns the choices made and, per step, how many
// actors were ready.
func (w *modelWorld) run(prefix []int, calls map[string]func(ctx context.Context) error, faultAt int, f fault) (choices, width []int, actors map[string]*actor) {
	actors = map[string]*actor{}
	names := slices.Sorted(maps.Keys(calls))
	for _, n := range names {
		a := &actor{name: n, wake: make(chan fault), faultAt: faultAt, fault: f}
		actors[n] = a
		call := calls[n]
		go func() {
			ctx := context.WithValue(context.Background(), actorKey{}, a)
			w.s.reports <- report{a: a}
			<-a.wake
			a.err = call(ctx)
			w.s.reports <- report{a: a, done: true}
		}()
	}
	waiting := map[string]bool{}
	for range names {
		r := <-w.s.reports
		waiting[r.a.name] = true
	}
	last, switches := "", 0
	for len(waiting) > 0 {
		ready := slices.Sorted(maps.Keys(waiting))
		if waiting[last] && switches >= w.bound {
			ready = []string{last} // no preemption left: the running actor goes on
		}
		c := 0
		if i := len(choices); i < len(prefix) {
			c = prefix[i]
		}
		choices, width = append(choices, c), append(width, len(ready))
		a := actors[ready[c]]
		if waiting[last] && a.name != last {
			switches++
		}
		last = a.name
		delete(waiting, a.name)
		verdict := proceed
		if a.steps > 0 && a.steps == a.faultAt {
			verdict = a.fault
		}
		a.wake <- verdict
		r := <-w.s.reports
		if r.done {
			r.a.done = true
		} else {
			waiting[r.a.name] = true
		}
	}
	return choices, width, actors
}

// next is the prefix of the next schedule depth first; false when every
// schedule ran.
func next(choices, width []int) ([]int, bool) {
	for i := len(choices) - 1; i >= 0; i-- {
		if choices[i]+1 < width[i] {
			return append(slices.Clone(choices[:i]), choices[i]+1), true
		}
	}
	return nil, false
}

// holdsHello reports whether dir holds the source's whole tree.
func holdsHello(dir string) bool {
	a, err := os.ReadFile(filepath.Join(dir, "a", "f"))
	b, err2 := os.ReadFile(filepath.Join(dir, "b", "g"))
	return err == nil && err2 == nil && string(a) == "hello" && string(b) == "world"
}

// areaNames lists the snapshot area.
func areaNames(root string) []string {
	entries, _ := os.ReadDir(filepath.Join(root, Area))
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

var modelTarget = Target{Name: "pvc-new", VolumeID: "efs:" + fs1 + "::fsap-00000000000000009", FileSystem: fs1, Path: "/base/new", UID: -1, GID: -1}

// TestModelSnapshotProtocols explores every interleaving of the record
// steps (and copied files) of each pair of calls below, and checks the
// invariants after each.
func TestModelSnapshotProtocols(t *testing.T) {
	// Every interleaving; under the race detector (ten times slower),
	// those of at most 2 preemptions (make test runs them all without).
	bound := math.MaxInt
	if raceEnabled {
		bound = 2
	}
	key := KeyOf("snap-1")
	tests := []struct {
		name  string
		ready bool // the snapshot is whole before the calls
		calls func(w *modelWorld) map[string]func(ctx context.Context) error
		check func(t *testing.T, w *modelWorld, actors map[string]*actor)
	}{{
		name: "a read-only volume and a DeleteSnapshot", ready: true,
		calls: func(w *modelWorld) map[string]func(ctx context.Context) error {
			return map[string]func(ctx context.Context) error{
				"add": func(ctx context.Context) error {
					_, err := w.m.AddReader(ctx, "pvc-rox", w.snap.ID, "ns/c")
					return err
				},
				"delete": func(ctx context.Context) error { return w.m.Delete(ctx, w.snap.ID) },
			}
		},
		check: func(t *testing.T, w *modelWorld, actors map[string]*actor) {
			add, del := actors["add"].err, actors["delete"].err
			if add == nil && !holdsHello(filepath.Join(w.root, DataDir(w.snap.CopyKey()))) {
				t.Errorf("a read-only volume was answered and its copy is gone (delete: %v)", del)
			}
			if add == nil && del == nil {
				t.Errorf("both the read-only volume and the delete succeeded")
			}
		},
	}, {
		name: "a read-only volume made and deleted, and a DeleteSnapshot", ready: true,
		calls: func(w *modelWorld) map[string]func(ctx context.Context) error {
			return map[string]func(ctx context.Context) error{
				"add": func(ctx context.Context) error {
					id, err := w.m.AddReader(ctx, "pvc-rox", w.snap.ID, "ns/c")
					if err != nil {
						return err
					}
					v, _ := volume.ParseID(id)
					return w.m.RemoveReader(ctx, v, "model")
				},
				"delete": func(ctx context.Context) error { return w.m.Delete(ctx, w.snap.ID) },
			}
		},
	}, {
		name: "a restore from the snapshot and a DeleteSnapshot", ready: true,
		calls: func(w *modelWorld) map[string]func(ctx context.Context) error {
			from := Source{SnapshotID: w.snap.ID, SnapshotLife: w.snap.Life, FileSystem: fs1, Path: DataDir(w.snap.CopyKey()), UID: -1, GID: -1}
			return map[string]func(ctx context.Context) error{
				"restore": func(ctx context.Context) error {
					if err := w.m.BeginRestore(ctx, modelTarget, from); err != nil {
						return err
					}
					return w.m.copyRestore(ctx, modelTarget, from)
				},
				"delete": func(ctx context.Context) error { return w.m.Delete(ctx, w.snap.ID) },
			}
		},
		check: func(t *testing.T, w *modelWorld, actors map[string]*actor) {
			target := filepath.Join(w.root, modelTarget.Path)
			if actors["restore"].err == nil && !holdsHello(target) {
				t.Errorf("a restore succeeded and its volume is not whole")
			}
			if actors["restore"].err != nil {
				if entries, err := os.ReadDir(target); err == nil && len(entries) > 0 {
					t.Errorf("a failed restore (%v) left data in its volume: %d entries", actors["restore"].err, len(entries))
				}
			}
		},
	}, {
		name: "a snapshot's copy and a DeleteSnapshot", ready: false,
		calls: func(w *modelWorld) map[string]func(ctx context.Context) error {
			return map[string]func(ctx context.Context) error{
				"copy":   func(ctx context.Context) error { return w.m.copySnapshot(ctx, w.snap) },
				"delete": func(ctx context.Context) error { return w.m.Delete(ctx, w.snap.ID) },
			}
		},
	}, {
		name: "two controllers copying one snapshot", ready: false,
		calls: func(w *modelWorld) map[string]func(ctx context.Context) error {
			copyOf := func(ctx context.Context) error {
				snap, err := w.m.read(ctx, fs1, key)
				if err != nil {
					return err
				}
				return w.m.copySnapshot(ctx, snap)
			}
			return map[string]func(ctx context.Context) error{"copy-1": copyOf, "copy-2": copyOf}
		},
		check: func(t *testing.T, w *modelWorld, actors map[string]*actor) {
			if actors["copy-1"].err != nil && actors["copy-2"].err != nil {
				t.Errorf("neither copy succeeded: %v; %v", actors["copy-1"].err, actors["copy-2"].err)
			}
		},
	}}
	total := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var prefix []int
			n := 0
			for {
				w := newModelWorld(t, tt.ready, bound)
				choices, width, actors := w.run(prefix, tt.calls(w), 0, kill)
				n++
				failed := t.Failed()
				if tt.check != nil {
					tt.check(t, w, actors)
				}
				checkSettles(t, w, actors)
				if !failed && t.Failed() {
					t.Fatalf("schedule %v (%s)", choices, describe(actors))
				}
				var more bool
				if prefix, more = next(choices, width); !more {
					break
				}
			}
			total += n
			t.Logf("%d schedules", n)
		})
	}
	t.Logf("%d schedules in all", total)
}

// TestModelSnapshotCallsFaultedAtEveryStep: each call, struck at each of
// its steps in turn, leaves what the call alone leaves once made again:
// its process killed before the step (nothing after runs, not even its
// deferred cleanup; a new process makes the call again), or the step's
// record operation failing or applied with its answer lost (a file copy
// failing), the call made again by the same process.
func TestModelSnapshotCallsFaultedAtEveryStep(t *testing.T) {
	key := KeyOf("snap-1")
	from := func(w *modelWorld) Source {
		return Source{SnapshotID: w.snap.ID, SnapshotLife: w.snap.Life, FileSystem: fs1, Path: DataDir(w.snap.CopyKey()), UID: -1, GID: -1}
	}
	tests := []struct {
		name  string
		ready bool
		call  func(w *modelWorld, m *Manager) func(ctx context.Context) error
		check func(t *testing.T, w *modelWorld, err error)
	}{{
		name: "a snapshot's copy", ready: false,
		call: func(w *modelWorld, m *Manager) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				snap, err := m.read(ctx, fs1, key)
				if err != nil {
					return err
				}
				return m.copySnapshot(ctx, snap)
			}
		},
	}, {
		name: "a restore", ready: true,
		call: func(w *modelWorld, m *Manager) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				if err := m.BeginRestore(ctx, modelTarget, from(w)); err != nil {
					return err
				}
				return m.copyRestore(ctx, modelTarget, from(w))
			}
		},
		check: func(t *testing.T, w *modelWorld, err error) {
			r, rerr := m0(w).readRestore(context.Background(), fs1, modelTarget.VolumeID)
			if err != nil || rerr != nil || !r.Done || !holdsHello(filepath.Join(w.root, modelTarget.Path)) {
				t.Errorf("the restore made again: %v; entry read %v (done %v); want done and whole", err, rerr, r != nil && r.Done)
			}
			for _, n := range areaNames(w.root) {
				if strings.HasPrefix(n, ".restore-") {
					t.Errorf("the area keeps %s after the restore is done", n)
				}
			}
		},
	}, {
		name: "a read-only volume", ready: true,
		call: func(w *modelWorld, m *Manager) func(ctx context.Context) error {
			return func(ctx context.Context) error { _, err := m.AddReader(ctx, "pvc-rox", w.snap.ID, "ns/c"); return err }
		},
		check: func(t *testing.T, w *modelWorld, err error) {
			rs, lerr := m0(w).Readers(context.Background())
			if err != nil || lerr != nil || len(rs) != 1 {
				t.Errorf("the read-only volume made again: %v; %d entries, %v; want 1", err, len(rs), lerr)
			}
		},
	}, {
		name: "a DeleteSnapshot", ready: true,
		call: func(w *modelWorld, m *Manager) func(ctx context.Context) error {
			return func(ctx context.Context) error { return m.Delete(ctx, w.snap.ID) }
		},
	}}
	total := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, f := range []fault{kill, fail, lostWord} {
				for at := 1; ; at++ {
					w := newModelWorld(t, tt.ready, math.MaxInt)
					_, _, actors := w.run(nil, map[string]func(ctx context.Context) error{"call": tt.call(w, w.m)}, at, f)
					total++
					a := actors["call"]
					if !a.killed && !a.faulted {
						break // it ran whole: every step was struck
					}
					// Made again: by a new process after a kill, by the
					// same one (the CO's retry) after a failure.
					m := w.m
					if a.killed {
						m = m0(w)
					}
					err := a.err
					for try := 0; try < 3 && (a.killed || err != nil); try++ {
						err = tt.call(w, m)(context.Background())
						if err == nil {
							break
						}
					}
					if tt.check != nil {
						tt.check(t, w, err)
					} else if err != nil {
						t.Errorf("%s at step %d, the call made again: %v", f, at, err)
					}
					settled := map[string]*actor{}
					if tt.name == "a DeleteSnapshot" {
						settled["delete"] = &actor{}
					}
					checkSettles(t, w, settled)
					if t.Failed() {
						t.Fatalf("%s at step %d (the call's first answer: %v)", f, at, a.err)
					}
				}
			}
		})
	}
	t.Logf("%d schedules", total)
}

// m0 is a new process's Manager on w, ungated.
func m0(w *modelWorld) *Manager {
	return New(Config{Store: w.store, Mount: dirMount(w.root), Copy: w.s.copy, Wait: time.Minute,
		VolumeLive: func(context.Context, string, string, string) (bool, error) { return true, nil }})
}

// checkSettles: whatever the schedule, the record and the area settle
// once the calls are repeated alone: a snapshot deleted leaves nothing, a
// snapshot kept is whole, and nothing is stuck deleting.
func checkSettles(t *testing.T, w *modelWorld, actors map[string]*actor) {
	t.Helper()
	ctx := context.Background()
	key := KeyOf("snap-1")
	m := New(Config{Store: w.store, Mount: dirMount(w.root), Copy: w.s.copy, Wait: time.Minute,
		VolumeLive: func(context.Context, string, string, string) (bool, error) { return false, nil }})
	if _, deleting := actors["delete"]; deleting {
		if a := actors["delete"]; a.err != nil {
			// Refused: once its volumes are gone, it is done.
			rs, err := m.Readers(ctx)
			must(t, err)
			for _, r := range rs {
				v, _ := volume.ParseID(r.VolumeID)
				must(t, m.RemoveReader(ctx, v, "settle"))
			}
			if err := m.Delete(ctx, w.snap.ID); err != nil {
				t.Errorf("DeleteSnapshot alone, after %v: %v", a.err, err)
			}
		}
		if _, err := w.store.Get(ctx, snapshotKey(fs1, key)); !errors.Is(err, journal.ErrNotFound) {
			t.Errorf("the snapshot's entry outlives its delete: %v", err)
		}
		for _, n := range areaNames(w.root) {
			if !strings.HasPrefix(n, ".restore-") {
				t.Errorf("the snapshot area holds %s after the snapshot's delete", n)
			}
		}
		return
	}
	snap, err := m.read(ctx, fs1, key)
	if err != nil {
		t.Fatalf("the snapshot's entry: %v", err)
	}
	if !snap.Ready {
		if err := m.copySnapshot(ctx, snap); err != nil {
			t.Errorf("copy alone: %v", err)
		}
		if snap, err = m.read(ctx, fs1, key); err != nil || !snap.Ready {
			t.Fatalf("after a copy alone: %+v, %v", snap, err)
		}
	}
	if !holdsHello(filepath.Join(w.root, DataDir(snap.CopyKey()))) {
		t.Errorf("a ready snapshot whose copy is not whole")
	}
	if names := areaNames(w.root); len(names) != 1 || names[0] != snap.CopyKey() {
		t.Errorf("the snapshot area holds %v, want only %s", names, snap.CopyKey())
	}
}

func describe(actors map[string]*actor) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(actors)) {
		parts = append(parts, fmt.Sprintf("%s: %v", n, actors[n].err))
	}
	return strings.Join(parts, "; ")
}
