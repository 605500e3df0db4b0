package controller

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// TestScenarios replays testdata/scenarios/*.txt: interleavings of several
// controllers of one cluster (one emulator, one record), lost answers,
// restarts and access points made by hand, written as data and run step by
// step, so that each ordering is the same on every run (no sleeps: a held
// call is waited for at its hook). The language:
//
//	controllers a b              controllers of one cluster on one emulator
//	class NAME k=v ...           StorageClass parameters (class "default": the test class)
//	hold CTL OP                  CTL's next OP blocks before it is sent
//	holdanswer CTL OP            CTL's next OP is sent, its answer held
//	loseanswer CTL OP            CTL's next OP is sent, its answer lost (UNAVAILABLE)
//	arrive CTL OP                wait until CTL's held OP is at its hook
//	release CTL OP               let it go on
//	go CTL create VOL [CLASS]    start a call in the background (one per CTL)
//	go CTL delete VOL
//	done CTL => RESULT           wait for CTL's background call
//	create CTL VOL [CLASS] => RESULT
//	delete CTL VOL|ap:NAME|id:ID => RESULT
//	restart CTL                  a new process for CTL (same emulator and record)
//	forge NAME token=T path=P gid=G [tag:K=V ...]   an access point made by hand
//	expect live N | unique-gids | answered-live | exists ap:NAME | gone ap:NAME
//
// RESULT is ok, busy (ABORTED), unavailable, incompatible, foreign or
// error. answered-live: every volume whose last create answered ok, and
// that no delete answered ok since, still has its access point.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScenario(t, f) })
	}
}

type scenario struct {
	t       *testing.T
	url     string
	emu     *emulator.Emulator
	beds    map[string]*bed
	classes map[string]map[string]string
	gates   map[string]*gate // CTL/OP
	calls   map[string]<-chan error
	ids     map[string]string // volume or forged name -> volume ID
	live    map[string]bool   // volumes answered and not deleted
	forged  map[string]string // name -> access point ID
}

func runScenario(t *testing.T, file string) {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	url, emu := emulatortest.Start(t, emulator.Config{DataDir: t.TempDir(), FileSystems: []string{testFS}})
	sc := &scenario{t: t, url: url, emu: emu, beds: map[string]*bed{}, classes: map[string]map[string]string{"default": params()},
		gates: map[string]*gate{}, calls: map[string]<-chan error{}, ids: map[string]string{}, live: map[string]bool{}, forged: map[string]string{}}
	sc.classes["untagged"] = params("enableTagging", "false")
	in := bufio.NewScanner(f)
	for n := 1; in.Scan(); n++ {
		line := strings.TrimSpace(in.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := sc.step(line); err != nil {
			t.Fatalf("%s:%d: %s: %v", filepath.Base(file), n, line, err)
		}
	}
	for ctl, c := range sc.calls {
		if err := <-c; err != nil {
			t.Logf("background call of %s ended: %v", ctl, err)
		}
	}
}

func (sc *scenario) step(line string) error {
	cmd, want, hasWant := strings.Cut(line, "=>")
	w := strings.Fields(cmd)
	want = strings.TrimSpace(want)
	switch w[0] {
	case "controllers":
		for _, name := range w[1:] {
			sc.beds[name] = newBedOn(sc.t, sc.url, sc.emu)
		}
		return nil
	case "class":
		p := params()
		for _, kv := range w[2:] {
			k, v, _ := strings.Cut(kv, "=")
			p[k] = v
		}
		sc.classes[w[1]] = p
		return nil
	case "hold", "holdanswer", "loseanswer":
		b, op := sc.bed(w[1]), w[2]
		g := newGate()
		sc.gates[w[1]+"/"+op] = g
		var once sync.Once
		first := func() bool { ok := false; once.Do(func() { ok = true }); return ok }
		switch w[0] {
		case "hold":
			b.hook.set(op, func(arg any) {
				if first() {
					g.hold(arg)
				}
			}, nil)
		case "holdanswer":
			b.hook.set(op, nil, func(arg any, err error) error {
				if first() {
					g.hold(arg)
				}
				return err
			})
		default:
			b.hook.set(op, nil, func(_ any, err error) error {
				if first() && err == nil {
					return fmt.Errorf("%w: answer lost (scenario)", efs.ErrUnavailable)
				}
				return err
			})
		}
		return nil
	case "arrive":
		<-sc.gate(w[1], w[2]).arrived
		return nil
	case "release":
		sc.gate(w[1], w[2]).open()
		return nil
	case "go":
		ctl := w[1]
		if _, busy := sc.calls[ctl]; busy {
			return fmt.Errorf("%s has a call in flight", ctl)
		}
		call, err := sc.call(w[1:])
		if err != nil {
			return err
		}
		sc.calls[ctl] = async(call)
		return nil
	case "done":
		c, ok := sc.calls[w[1]]
		if !ok {
			return fmt.Errorf("%s has no call in flight", w[1])
		}
		delete(sc.calls, w[1])
		return sc.result(<-c, want, hasWant)
	case "create", "delete":
		call, err := sc.call(w)
		if err != nil {
			return err
		}
		return sc.result(call(), want, hasWant)
	case "restart":
		old := sc.bed(w[1])
		sc.beds[w[1]] = newBedOn(sc.t, old.url, old.emu)
		return nil
	case "forge":
		return sc.forge(w[1], w[2:])
	case "expect":
		return sc.expect(w[1:])
	}
	return fmt.Errorf("unknown command %q", w[0])
}

func (sc *scenario) bed(name string) *bed {
	b, ok := sc.beds[name]
	if !ok {
		sc.t.Fatalf("no controller %q", name)
	}
	return b
}

func (sc *scenario) gate(ctl, op string) *gate {
	g, ok := sc.gates[ctl+"/"+op]
	if !ok {
		sc.t.Fatalf("nothing held for %s %s", ctl, op)
	}
	return g
}

// call returns the create or delete w names ("CTL create VOL [CLASS]").
func (sc *scenario) call(w []string) (func() error, error) {
	if len(w) < 3 {
		return nil, errors.New("want CTL create|delete VOL")
	}
	verb, ctl, vol := w[0], w[1], w[2]
	if verb != "create" && verb != "delete" {
		ctl, verb, vol = w[0], w[1], w[2]
	}
	b := sc.bed(ctl)
	switch verb {
	case "create":
		class := sc.classes["default"]
		if len(w) > 3 {
			if class = sc.classes[w[3]]; class == nil {
				return nil, fmt.Errorf("no class %q", w[3])
			}
		}
		return func() error {
			r, err := b.svc.CreateVolume(b.ctx(), createReq(vol, 1<<30, class))
			if err == nil {
				sc.record(vol, r.GetVolume().GetVolumeId(), true)
			}
			return err
		}, nil
	case "delete":
		id := sc.idOf(vol)
		return func() error {
			err := b.delete(id)
			if err == nil {
				sc.record(vol, "", false)
			}
			return err
		}, nil
	}
	return nil, fmt.Errorf("unknown call %q", verb)
}

var scenarioMu sync.Mutex

func (sc *scenario) record(vol, id string, live bool) {
	scenarioMu.Lock()
	defer scenarioMu.Unlock()
	if id != "" {
		sc.ids[vol] = id
	}
	sc.live[vol] = live
}

func (sc *scenario) idOf(ref string) string {
	scenarioMu.Lock()
	defer scenarioMu.Unlock()
	if name, ok := strings.CutPrefix(ref, "ap:"); ok && !strings.HasPrefix(ref, "crafted:") {
		return volume.ProvisionedID(testFS, sc.forged[name])
	}
	if id, ok := strings.CutPrefix(ref, "id:"); ok {
		return id
	}
	if name, ok := strings.CutPrefix(ref, "crafted:"); ok {
		// The ID of a forged access point under another file system's ID.
		return volume.ProvisionedID("fs-0000000000000000a", sc.forged[name])
	}
	return sc.ids[ref]
}

func (sc *scenario) result(err error, want string, hasWant bool) error {
	got := "ok"
	switch {
	case err == nil:
	case errors.Is(err, keylock.ErrBusy), errors.Is(err, journal.ErrDeleting):
		got = "busy"
	case errors.Is(err, ErrIncompatible):
		got = "incompatible"
	case errors.Is(err, ErrForeign):
		got = "foreign"
	case errors.Is(err, efs.ErrUnavailable), errors.Is(err, ErrNotYetVisible), errors.Is(err, ErrGIDContention), errors.Is(err, context.DeadlineExceeded):
		got = "unavailable"
	default:
		got = "error"
	}
	if !hasWant || want == "any" || want == got {
		return nil
	}
	return fmt.Errorf("answered %s (%v), want %s", got, err, want)
}

func (sc *scenario) forge(name string, kv []string) error {
	in := efs.CreateAccessPointInput{FileSystemID: testFS, Tags: map[string]string{}, PosixUser: &efs.PosixUser{UID: 50000, GID: 50000}}
	for _, f := range kv {
		k, v, _ := strings.Cut(f, "=")
		switch {
		case k == "token":
			in.ClientToken = v
		case k == "path":
			in.Path = v
		case k == "gid":
			var g int64
			fmt.Sscan(v, &g)
			in.PosixUser = &efs.PosixUser{UID: g, GID: g}
		case strings.HasPrefix(k, "tag:"):
			in.Tags[strings.TrimPrefix(k, "tag:")] = v
		default:
			return fmt.Errorf("forge: unknown %q", k)
		}
	}
	var b *bed
	for _, name := range slices.Sorted(mapsKeys(sc.beds)) {
		b = sc.beds[name]
		break
	}
	ap, err := b.client.CreateAccessPoint(context.Background(), in)
	if err != nil {
		return err
	}
	scenarioMu.Lock()
	sc.forged[name] = ap.ID
	scenarioMu.Unlock()
	return nil
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (sc *scenario) anyBed() *bed {
	for _, name := range slices.Sorted(mapsKeys(sc.beds)) {
		return sc.beds[name]
	}
	sc.t.Fatal("no controllers")
	return nil
}

func (sc *scenario) expect(w []string) error {
	b := sc.anyBed()
	aps := b.accessPoints()
	byID := map[string]efs.AccessPoint{}
	for _, ap := range aps {
		byID[ap.ID] = ap
	}
	switch w[0] {
	case "live":
		var n int
		fmt.Sscan(w[1], &n)
		if len(aps) != n {
			return fmt.Errorf("%d access points, want %d", len(aps), n)
		}
	case "unique-gids":
		seen := map[int64]string{}
		for _, ap := range aps {
			_, g := core.PosixIDs(&ap)
			if other, dup := seen[g]; dup {
				return fmt.Errorf("GID %d on %s and %s", g, other, ap.ID)
			}
			seen[g] = ap.ID
		}
	case "answered-live":
		scenarioMu.Lock()
		defer scenarioMu.Unlock()
		for vol, live := range sc.live {
			if !live {
				continue
			}
			id, err := volume.ParseID(sc.ids[vol])
			if err != nil {
				return err
			}
			if _, ok := byID[id.AccessPointID]; !ok {
				return fmt.Errorf("volume %s was answered with %s, which no longer exists", vol, id.AccessPointID)
			}
		}
	case "exists", "gone":
		id, err := volume.ParseID(strings.Replace(sc.idOf(w[1]), "fs-0000000000000000a", testFS, 1))
		if err != nil {
			return err
		}
		if _, ok := byID[id.AccessPointID]; ok != (w[0] == "exists") {
			return fmt.Errorf("%s: exists=%v", w[1], ok)
		}
	default:
		return fmt.Errorf("unknown expectation %q", w[0])
	}
	return nil
}
