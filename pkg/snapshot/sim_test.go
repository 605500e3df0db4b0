package snapshot

// A simulator of the snapshot protocols: the model checker's worlds
// (model_test.go), with more calls than it can explore exhaustively, run
// on seeds. Two controller processes share the record and the file
// system; three clients (the CO) each make four random calls (a snapshot
// and its copy, DeleteSnapshot, a read-only volume made or deleted, a
// restore), each to a random process. The schedule is random, and so are
// faults: at each step a record operation may fail or lose its answer (a
// copied file may fail), and a process may be killed (every call it runs
// stops where it is, deferred cleanup included; the next calls go to a new
// process). After the calls, what the protocols promise is checked, then
// everything is deleted by a new process with no faults, which must leave
// nothing in the record or the snapshot area.
//
// A failing seed is replayed alone, logging its events, with
// -snapsim.seed=N.

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

var (
	snapSimSeeds = flag.Int("snapsim.seeds", 0, "TestSimSnapshotProtocols: seeds to run (0: 3000; 300 under the race detector)")
	snapSimFirst = flag.Int("snapsim.first", 1, "TestSimSnapshotProtocols: the first seed")
	snapSimSeed  = flag.Int("snapsim.seed", 0, "TestSimSnapshotProtocols: run this seed alone, logging its events")
)

// simCall is one call a client makes.
type simCall struct {
	op   string // snap, del, add, rm, restore
	name string // the snapshot's (snap, del, add, restore)
	vol  string // the volume's (add, rm, restore)
	proc int    // the process it goes to
}

func (c simCall) String() string {
	return strings.TrimSpace(fmt.Sprintf("%s %s %s @p%d", c.op, c.name, c.vol, c.proc))
}

// simProc is a controller process: its Manager, and its life (a kill
// starts a new one).
type simProc struct {
	m   *Manager
	gen int
}

type simWorld struct {
	*modelWorld
	rng    *rand.Rand
	procs  [2]*simProc
	events []string
}

func (w *simWorld) newProc(gen int) *simProc {
	return &simProc{gen: gen, m: New(Config{Store: gatedStore{Store: w.store, s: w.s}, Mount: dirMount(w.root), Copy: w.s.copy,
		Wait: time.Minute, VolumeLive: func(context.Context, string, string, string) (bool, error) { return true, nil }})}
}

func (w *simWorld) logf(format string, args ...any) {
	w.events = append(w.events, fmt.Sprintf(format, args...))
}

var (
	simSnaps = []string{"s1", "s2"}
	simVols  = []string{"r1", "r2"}
)

func simTarget(vol string) Target {
	return Target{Name: vol, VolumeID: "efs:" + fs1 + "::fsap-0000000000000000" + vol[1:], FileSystem: fs1, Path: "/base/" + vol, UID: -1, GID: -1}
}

// do runs c on m, as the controller's calls do (a copy in the call's
// goroutine instead of a background job).
func simDo(ctx context.Context, m *Manager, c simCall) error {
	id := ID(fs1, KeyOf(c.name))
	switch c.op {
	case "snap":
		unlock, err := m.locks.TryLock("snapshot/" + KeyOf(c.name))
		if err != nil {
			return err
		}
		defer unlock()
		snap, err := m.begin(ctx, c.name, src)
		if err != nil || snap.Ready {
			return err
		}
		return m.copySnapshot(ctx, snap)
	case "del":
		return m.Delete(ctx, id)
	case "add":
		_, err := m.AddReader(ctx, c.vol, id, "ns/"+c.vol)
		return err
	case "rm":
		return m.RemoveReader(ctx, volume.ID{FileSystemID: fs1, Reader: KeyOf(c.vol)}, "sim")
	case "restore":
		snap, err := m.Get(ctx, id)
		if err != nil {
			return err
		}
		if !snap.Ready {
			return ErrNotReady
		}
		from := Source{SnapshotID: id, SnapshotLife: snap.Life, FileSystem: fs1, Path: DataDir(snap.CopyKey()), UID: -1, GID: -1}
		t := simTarget(c.vol)
		if err := m.BeginRestore(ctx, t, from); err != nil {
			return err
		}
		return m.copyRestore(ctx, t, from)
	}
	panic(c.op)
}

func simPlan(rng *rand.Rand) [][]simCall {
	clients := make([][]simCall, 3)
	for i := range clients {
		for range 4 {
			c := simCall{name: simSnaps[rng.IntN(2)], proc: rng.IntN(2)}
			switch n := rng.IntN(10); {
			case n < 3:
				c.op = "snap"
			case n < 5:
				c.op = "del"
			case n < 7:
				c.op, c.vol = "add", simVols[rng.IntN(2)]
			case n < 8:
				c.op, c.vol = "rm", simVols[rng.IntN(2)]
			default:
				c.op, c.vol = "restore", []string{"v1", "v2"}[rng.IntN(2)]
			}
			clients[i] = append(clients[i], c)
		}
	}
	return clients
}

// runSeed runs one seed; it returns the violations found.
func runSimSeed(t *testing.T, seed int) (violations []string, w *simWorld) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	w = &simWorld{modelWorld: newModelWorld(t, false, 0), rng: rng}
	// The model's own snapshot is not this world's.
	must(t, w.store.Delete(context.Background(), mustGet(t, w.store, snapshotKey(fs1, KeyOf("snap-1")))))
	w.procs = [2]*simProc{w.newProc(0), w.newProc(0)}
	plan := simPlan(rng)
	w.logf("seed %d: %v", seed, plan)

	type running struct {
		a      *actor
		client int
		call   simCall
		gen    int
	}
	next := make([]int, len(plan))
	waiting := map[string]*running{}
	var ok []simCall // the calls that succeeded, in the order they answered
	tried := map[string]bool{}
	start := func(client int) {
		if next[client] == len(plan[client]) {
			return
		}
		c := plan[client][next[client]]
		next[client]++
		p := w.procs[c.proc]
		a := &actor{name: fmt.Sprintf("c%d.%d", client, next[client]), wake: make(chan fault)}
		m := p.m
		go func() {
			ctx := context.WithValue(context.Background(), actorKey{}, a)
			w.s.reports <- report{a: a}
			if <-a.wake == kill {
				a.killed = true
				w.s.reports <- report{a: a, done: true}
				select {}
			}
			a.err = simDo(ctx, m, c)
			w.s.reports <- report{a: a, done: true}
		}()
		<-w.s.reports
		waiting[a.name] = &running{a: a, client: client, call: c, gen: p.gen}
		tried[c.op+" "+c.vol] = true
	}
	for i := range plan {
		start(i)
	}
	for len(waiting) > 0 {
		names := slices.Sorted(maps.Keys(waiting))
		r := waiting[names[rng.IntN(len(names))]]
		delete(waiting, r.a.name)
		verdict := proceed
		p := w.procs[r.call.proc]
		switch x := rng.Float64(); {
		case r.gen != p.gen:
			verdict = kill // its process died
		case x < 0.01:
			verdict = kill
			w.procs[r.call.proc] = w.newProc(p.gen + 1)
			w.logf("p%d killed at %s's step %d (%s)", r.call.proc, r.a.name, r.a.steps, r.call)
		case r.a.steps == 0:
			// A call's start is no record operation: only a kill strikes it.
		case x < 0.05:
			verdict = fail
		case x < 0.09:
			verdict = lostWord
		}
		if verdict == fail || verdict == lostWord {
			w.logf("%s (%s) step %d: %s", r.a.name, r.call, r.a.steps, verdict)
		}
		r.a.wake <- verdict
		rep := <-w.s.reports
		if !rep.done {
			waiting[r.a.name] = r
			continue
		}
		switch {
		case r.a.killed:
			w.logf("%s (%s): killed", r.a.name, r.call)
		case r.a.err != nil:
			w.logf("%s (%s): %v", r.a.name, r.call, r.a.err)
		default:
			w.logf("%s (%s): ok", r.a.name, r.call)
			ok = append(ok, r.call)
		}
		start(r.client)
	}
	return w.check(t, ok, tried), w
}

func mustGet(t *testing.T, st journal.Store, k journal.Key) journal.Entry {
	e, err := st.Get(context.Background(), k)
	must(t, err)
	return e
}

// check checks what the calls left, then deletes everything with a new
// process and no faults, and checks that nothing is left.
func (w *simWorld) check(t *testing.T, ok []simCall, tried map[string]bool) []string {
	var v []string
	ctx := context.Background()
	fresh := m0(w.modelWorld)
	// A read-only volume answered, and never deleted, has its entry, and
	// its snapshot is whole. (An entry of a call answered no stays: it may
	// be another call's for the same volume; the orphan collector removes
	// those of claims gone.)
	readers, err := fresh.Readers(ctx)
	must(t, err)
	for _, c := range ok {
		if c.op != "add" || tried["rm "+c.vol] {
			continue
		}
		i := slices.IndexFunc(readers, func(r *Reader) bool { return r.Name == c.vol })
		if i < 0 {
			v = append(v, fmt.Sprintf("read-only volume %s was answered and has no entry", c.vol))
			continue
		}
		r := readers[i]
		_, key, _ := ParseID(r.Snapshot)
		snap, err := fresh.read(ctx, fs1, key)
		switch {
		case err != nil:
			v = append(v, fmt.Sprintf("read-only volume %s of %s: its snapshot's entry: %v", r.Name, r.Snapshot, err))
		case snap.Removing || !snap.Ready:
			v = append(v, fmt.Sprintf("read-only volume %s of %s: its snapshot is ready %v, removing %v (life %s)", r.Name, r.Snapshot,
				snap.Ready, snap.Removing, snap.Life))
		case r.Copy != snap.CopyKey():
			v = append(v, fmt.Sprintf("read-only volume %s of %s serves copy %s, not its snapshot's %s", r.Name, r.Snapshot, r.Copy, snap.CopyKey()))
		case !holdsHello(filepath.Join(w.root, DataDir(snap.CopyKey()))):
			v = append(v, fmt.Sprintf("read-only volume %s of %s: the snapshot's copy is not whole", r.Name, r.Snapshot))
		}
	}
	// Every ready snapshot is whole.
	for _, name := range simSnaps {
		if snap, err := fresh.read(ctx, fs1, KeyOf(name)); err == nil && snap.Ready && !snap.Removing &&
			!holdsHello(filepath.Join(w.root, DataDir(snap.CopyKey()))) {
			v = append(v, fmt.Sprintf("snapshot %s is ready and its copy is not whole (deleting %v; the area: %v)", name, snap.Deleting, areaNames(w.root)))
		}
	}
	// A volume restored is whole; one not restored is empty (or whole: a
	// rename whose Done write was lost).
	for _, vol := range []string{"v1", "v2"} {
		target := filepath.Join(w.root, "base", vol)
		done := false
		if r, err := fresh.readRestore(ctx, fs1, simTarget(vol).VolumeID); err == nil {
			done = r.Done
		}
		entries, err := os.ReadDir(target)
		whole := holdsHello(target)
		switch {
		case slices.ContainsFunc(ok, func(c simCall) bool { return c.op == "restore" && c.vol == vol }) && !whole:
			v = append(v, fmt.Sprintf("volume %s was restored and is not whole", vol))
		case done && !whole:
			v = append(v, fmt.Sprintf("volume %s's restore is done and it is not whole", vol))
		case err == nil && len(entries) > 0 && !whole:
			v = append(v, fmt.Sprintf("volume %s holds part of a copy: %d entries", vol, len(entries)))
		}
	}
	must(t, w.store.List(ctx, KindRestore, "", "", func(es []journal.Entry) error {
		for _, e := range es {
			w.logf("restore entry %s: %s", e.Key.Name, e.Value)
		}
		return nil
	}))
	w.logf("area before the deletes: %v", areaNames(w.root))
	// Everything deleted, by a new process: nothing left.
	gone := New(Config{Store: w.store, Mount: dirMount(w.root), Copy: w.s.copy, Wait: time.Minute,
		VolumeLive: func(context.Context, string, string, string) (bool, error) { return false, nil }})
	for _, r := range readers {
		id, _ := volume.ParseID(r.VolumeID)
		if err := gone.RemoveReader(ctx, id, "sim"); err != nil {
			v = append(v, fmt.Sprintf("removing read-only volume %s: %v", r.Name, err))
		}
	}
	for _, name := range simSnaps {
		if err := gone.Delete(ctx, ID(fs1, KeyOf(name))); err != nil {
			v = append(v, fmt.Sprintf("deleting snapshot %s alone: %v", name, err))
		}
	}
	if _, err := gone.CollectRestores(ctx); err != nil {
		v = append(v, fmt.Sprintf("collecting restores: %v", err))
	}
	// The collector's own round, which finds the file system by its area
	// entry (no snapshot is left to name it).
	if _, err := gone.CollectCopies(ctx); err != nil {
		v = append(v, fmt.Sprintf("collecting copies: %v", err))
	}
	// The area entry stays for good (KindArea).
	for _, kind := range []journal.Kind{KindSnapshot, KindReader, KindRestore} {
		must(t, w.store.List(ctx, kind, "", "", func(es []journal.Entry) error {
			for _, e := range es {
				v = append(v, fmt.Sprintf("left in the record: %s %s", kind, e.Key.Name))
			}
			return nil
		}))
	}
	for _, n := range areaNames(w.root) {
		v = append(v, fmt.Sprintf("left in the snapshot area: %s", n))
	}
	return v
}

// TestSimSnapshotProtocols runs the simulator's seeds.
func TestSimSnapshotProtocols(t *testing.T) {
	seeds, first := *snapSimSeeds, *snapSimFirst
	if seeds == 0 {
		seeds = 3000
		if raceEnabled {
			seeds = 300
		}
	}
	if *snapSimSeed != 0 {
		seeds, first = 1, *snapSimSeed
	}
	failed := 0
	for seed := first; seed < first+seeds; seed++ {
		v, w := runSimSeed(t, seed)
		if *snapSimSeed != 0 {
			for _, e := range w.events {
				t.Log(e)
			}
		}
		if len(v) > 0 {
			failed++
			t.Errorf("seed %d: %s (replay: go test ./pkg/snapshot -run TestSimSnapshotProtocols -snapsim.seed=%d -v)", seed, strings.Join(v, "; "), seed)
			if failed == 5 {
				t.FailNow()
			}
		}
	}
	t.Logf("%d seeds from %d", seeds, first)
}
