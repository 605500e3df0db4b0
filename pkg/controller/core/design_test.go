package core

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

var updateDesign = flag.Bool("update-design", false, "TestDesignStepTablesAreTheMachines: rewrite docs/design.md's effect tables from the machines")

// designDoc is the design document whose step tables the machines are
// checked against.
const designDoc = "../../../docs/design.md"

// happy answers each effect as a world where nothing fails and nothing
// was there before: no answer remembered, no record, no access point;
// the record in Leases, as the chart runs it, which makes a record with
// its id held in one write (journal.BeginHeld).
func happy(e Effect) Result {
	switch e := e.(type) {
	case Begin:
		return Result{Record: &journal.Record{Volume: e.Volume}, Yes: true, Held: e.Volume.Allocated != journal.NoID}
	case CreateAccessPoint:
		return Result{AP: accessPoint(apID, e.Input)}
	case MakeDir:
		return Result{Yes: true}
	}
	return Result{}
}

// effectsOf runs the machine start makes against world until its answer,
// and names its effects, its calls of its file system's memory (FS.*) and
// the lines it logs (log.Info, log.Warn), in order.
func effectsOf(t *testing.T, start func(Memory, *slog.Logger) stepper, world func(Effect) Result) []string {
	t.Helper()
	var names []string
	log := slog.New(lineHandler(func(r slog.Record) {
		level := strings.ToLower(r.Level.String())
		names = append(names, "log."+strings.ToUpper(level[:1])+level[1:])
	}))
	fs := NewFS(fsID)
	m := start(recordingMemory{fs, &names}, log)
	for range 100 {
		e := m.Next()
		names = append(names, strings.TrimPrefix(fmt.Sprintf("%T", e), "core."))
		if a, ok := e.(Answer); ok {
			if a.Err != nil {
				t.Fatalf("answered %v after %v", a.Err, names)
			}
			return names
		}
		r := world(e)
		if e, ok := e.(Refresh); ok {
			r.Err = refresh(fs, e) // no access point yet
		}
		m.Step(r)
	}
	t.Fatalf("no answer after %v", names)
	return nil
}

// TestDesignStepTablesAreTheMachines: each machine's effects on its path
// where nothing fails are those docs/design.md's effect table for it
// lists, in order (its "effects: NAME" block). A machine changed without
// its table fails here; -update-design rewrites the tables.
func TestDesignStepTablesAreTheMachines(t *testing.T) {
	ap, rec := ours()
	dir := dirPlan(t)
	dirRec := dirRecord(dir, 60003)
	deleteWorld := func(e Effect) Result {
		switch e.(type) {
		case LookUp:
			return Result{AP: ap}
		case ReadRecord:
			return Result{Record: rec}
		case Mark:
			return Result{Record: rec}
		}
		return Result{}
	}
	dirDeleteWorld := func(e Effect) Result {
		if _, ok := e.(ReadRecord); ok {
			return Result{Record: dirRec}
		}
		return Result{}
	}
	on, delCfg := CreateConfig{DeleteRootDir: true}, DeleteConfig{Cluster: "c1", DeleteRootDir: true}
	create := func(p *Plan) func(Memory, *slog.Logger) stepper {
		return func(m Memory, log *slog.Logger) stepper {
			cfg := on
			cfg.Logger = log
			return NewCreateVolume(cfg, p, m, t0)
		}
	}
	del := func(id string) func(Memory, *slog.Logger) stepper {
		return func(m Memory, log *slog.Logger) stepper {
			cfg := delCfg
			cfg.Logger = log
			return NewDelete(cfg, id, m, t0)
		}
	}
	paths := []struct{ name, what string }{
		{"create", "CreateVolume of a new efs-ap volume of a class that allocates GIDs, root removal on"},
		{"delete", "DeleteVolume of a recorded access point, root removal on"},
		{"create-dir", "CreateVolume of a new directory volume, root removal on"},
		{"delete-dir", "DeleteVolume of a recorded directory volume, root removal on"},
	}
	got := map[string][]string{
		"create":     effectsOf(t, create(gidPlan(t)), happy),
		"delete":     effectsOf(t, del("efs:"+fsID+"::"+apID), deleteWorld),
		"create-dir": effectsOf(t, create(dir), happy),
		"delete-dir": effectsOf(t, del(volume.DirID(fsID, dir.Input.Path)), dirDeleteWorld),
	}
	src, err := os.ReadFile(designDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(src)
	for _, p := range paths {
		block := regexp.MustCompile("(?s)<!-- effects: " + p.name + " -->\n```text\n(.*?)```\n")
		m := block.FindStringSubmatchIndex(doc)
		if m == nil {
			t.Errorf("%s has no block <!-- effects: %s --> with a ```text fence; it should hold:\n%s", designDoc, p.name, strings.Join(got[p.name], "\n"))
			continue
		}
		// A line is an effect, then what the step is (free text); a line
		// beginning with # says what the block shows.
		var listed []string
		for _, line := range strings.Split(doc[m[2]:m[3]], "\n") {
			if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
				listed = append(listed, f[0])
			}
		}
		switch {
		case slices.Equal(listed, got[p.name]):
		case *updateDesign:
			doc = doc[:m[2]] + "# " + p.what + ", where nothing fails\n" + strings.Join(got[p.name], "\n") + "\n" + doc[m[3]:]
		default:
			t.Errorf("%s's effects of %s differ from the machine's (go test -run %s ./pkg/controller/core -update-design, then say each step again):\n  doc: %v\nmachine: %v",
				designDoc, p.name, t.Name(), listed, got[p.name])
		}
	}
	if *updateDesign {
		if err := os.WriteFile(designDoc, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// recordingMemory is an FS whose every call is named in log, as FS.<method>.
type recordingMemory struct {
	*FS
	log *[]string
}

func (m recordingMemory) note(method string) { *m.log = append(*m.log, "FS."+method) }

func (m recordingMemory) Answered(name string) (*efs.AccessPoint, time.Time) {
	m.note("Answered")
	return m.FS.Answered(name)
}
func (m recordingMemory) RememberAnswer(name string, ap *efs.AccessPoint, made bool, now time.Time) {
	m.note("RememberAnswer")
	m.FS.RememberAnswer(name, ap, made, now)
}
func (m recordingMemory) DropAnswer(apID string) { m.note("DropAnswer"); m.FS.DropAnswer(apID) }
func (m recordingMemory) DeleteFinished(apID string, now time.Time) bool {
	m.note("DeleteFinished")
	return m.FS.DeleteFinished(apID, now)
}
func (m recordingMemory) FinishDelete(apID string, names []string, now time.Time) {
	m.note("FinishDelete")
	m.FS.FinishDelete(apID, names, now)
}
func (m recordingMemory) ForgetFinished(names []string) {
	m.note("ForgetFinished")
	m.FS.ForgetFinished(names)
}
func (m recordingMemory) Burned(token string, now time.Time) bool {
	m.note("Burned")
	return m.FS.Burned(token, now)
}
func (m recordingMemory) Upstream(token string) *efs.AccessPoint {
	m.note("Upstream")
	return m.FS.Upstream(token)
}
func (m recordingMemory) Candidate(name, root string, lo, hi int64, from int, fits func(int64) bool) (int64, int, error) {
	m.note("Candidate")
	return m.FS.Candidate(name, root, lo, hi, from, fits)
}
func (m recordingMemory) SawToken(ap *efs.AccessPoint, cluster string) {
	m.note("SawToken")
	m.FS.SawToken(ap, cluster)
}
func (m recordingMemory) AddOutside(ids ...int64) { m.note("AddOutside"); m.FS.AddOutside(ids...) }
func (m recordingMemory) Reserve(lo, hi int64, key string, since uint64, now time.Time, fits func(int64) bool) (*gid.Reservation, error) {
	m.note("Reserve")
	return m.FS.Reserve(lo, hi, key, since, now, fits)
}
func (m recordingMemory) Release(r *gid.Reservation) { m.note("Release"); m.FS.Release(r) }
func (m recordingMemory) Seen(ap efs.AccessPoint, now time.Time) {
	m.note("Seen")
	m.FS.Seen(ap, now)
}
func (m recordingMemory) RootNotOwned() { m.note("RootNotOwned"); m.FS.RootNotOwned() }
func (m recordingMemory) Creating(token, name, root string) {
	m.note("Creating")
	m.FS.Creating(token, name, root)
}
func (m recordingMemory) CreateEnded(token string, ap *efs.AccessPoint, now time.Time) {
	m.note("CreateEnded")
	m.FS.CreateEnded(token, ap, now)
}
func (m recordingMemory) Gone(apID string, now time.Time) { m.note("Gone"); m.FS.Gone(apID, now) }
