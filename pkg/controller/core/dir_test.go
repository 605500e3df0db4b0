package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// dirPlan is a directory volume of a class that allocates GIDs in
// [60000, 60009].
func dirPlan(t *testing.T) *Plan { t.Helper(); return dirPlanOf(t, name) }

// dirPlanOf is dirPlan for the volume named n.
func dirPlanOf(t *testing.T, n string) *Plan {
	t.Helper()
	params, root := classOf(t, volume.ProvisioningModeDirectory, n)
	return &Plan{Name: n, Params: params, Capacity: 5 << 30, Cluster: "c1", Dir: true,
		Input: efs.CreateAccessPointInput{FileSystemID: fsID, ClientToken: volume.DirToken(root), Path: root}}
}

// dirRecord is the record of p's directory volume, holding id.
func dirRecord(p *Plan, id int64) *journal.Record {
	return &journal.Record{Volume: journal.Volume{FileSystem: fsID, Token: p.Input.ClientToken, Name: p.Name, Path: p.Input.Path,
		UID: id, GID: id, Allocated: id, Capacity: p.Capacity, Dir: true, Created: t0}}
}

func describeDir(e Effect) string {
	switch e := e.(type) {
	case MakeDir:
		return "make dir " + e.Perms
	case UnmakeDir:
		return "unmake dir"
	case SetDirMade:
		return "set dir made"
	case Answer:
		if e.Err == nil && e.Record != nil {
			return "answer record " + e.Record.Path
		}
	case ReadRecord:
		return "read record " + e.Key
	}
	return describeCreate(e)
}

// TestCreateDirSteps drives a directory volume's create through scripted
// outcomes: the record and its id before the directory, the directory
// before the record confirms it, and a directory made for a record a
// delete marked meanwhile is removed again, never answered.
func TestCreateDirSteps(t *testing.T) {
	p := dirPlan(t)
	rec := dirRecord(p, 60003)
	standIn := DirStandInID(p.Input.ClientToken)
	otherPath := dirRecord(p, 60003)
	otherPath.Path = "/elsewhere"
	recorded := []step{
		{"lock name/" + name + ",name/" + p.Input.ClientToken, Result{}}, {"core.ForgetFinished", Result{}},
		{"creating " + p.Input.Path, Result{}}, {"reserve " + name, Result{ID: 60003}},
		{"begin  gid=60003", Result{Record: rec, Yes: true}}, {"hold", Result{}}, {"touch", Result{}},
	}
	then := func(tail ...step) []step { return append(append([]step{}, recorded...), tail...) }
	busy := keylock.ErrBusy.Error() + ": " + journal.ErrDeleting.Error()
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"recorded, seen, made, confirmed, then answered", then(
			step{"dir seen", Result{}}, step{"make dir 700", Result{Yes: true}}, step{"set dir made", Result{}},
			step{"release", Result{}}, step{"create ended " + standIn, Result{}}, step{"answer record " + p.Input.Path, Result{}})},
		{"a directory that cannot be made leaves the record for the retry", then(
			step{"dir seen", Result{}}, step{"make dir 700", Result{Err: errAPI}},
			step{"release", Result{}}, step{"create ended", Result{}}, step{"answer " + errAPI.Error(), Result{}})},
		{"made for a record a delete marked: removed again, ABORTED", then(
			step{"dir seen", Result{}}, step{"make dir 700", Result{Yes: true}}, step{"set dir made", Result{Err: journal.ErrDeleting}},
			step{"unmake dir", Result{}}, step{"release", Result{}}, step{"create ended", Result{}}, step{"answer " + busy, Result{}})},
		{"a directory it did not make is not removed", then(
			step{"dir seen", Result{}}, step{"make dir 700", Result{}}, step{"set dir made", Result{Err: journal.ErrDeleting}},
			step{"release", Result{}}, step{"create ended", Result{}}, step{"answer " + busy, Result{}})},
		{"a record of another directory is another volume's", []step{
			recorded[0], recorded[1], recorded[2], recorded[3],
			{"begin  gid=60003", Result{Record: otherPath}}, {"release", Result{}}, {"hold", Result{}}, {"touch", Result{}}, {"create ended", Result{}},
			{"answer " + fmt.Sprintf("%s: volume %q: directory %q, want %q", ErrIncompatible, name, "/elsewhere", p.Input.Path), Result{}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drive(t, func(s *script) stepper {
				return NewCreateVolume(CreateConfig{DeleteRootDir: true, Logger: s.logger()}, p, s, t0)
			}, describeDir, tc.steps)
		})
	}
}

// TestDeleteDirSteps drives a directory volume's delete: only the record's
// directory volume at the ID's path is deleted, under its name locks, the
// record marked before the directory goes and finished after.
func TestDeleteDirSteps(t *testing.T) {
	p := dirPlan(t)
	rec := dirRecord(p, 60003)
	token := p.Input.ClientToken
	id := volume.DirID(fsID, p.Input.Path)
	locks := "lock name/" + name + ",name/" + token
	notDir := dirRecord(p, 60003)
	notDir.Dir = false
	earlier := dirRecord(p, 60003)
	earlier.Deleting, earlier.DeletingSince = true, t0.Add(-time.Hour)
	head := []step{{"read record " + token, Result{Record: rec}}, {locks, Result{}}, {"read record " + token, Result{Record: rec}}}
	then := func(r *journal.Record, tail ...step) []step {
		s := append([]step{}, head...)
		s[2].give = Result{Record: r}
		return append(s, tail...)
	}
	finished := []step{{"gone " + DirStandInID(token), Result{}}, {"finish", Result{}}, {"log directory volume deleted", Result{}}, {"answer ok", Result{}}}
	for _, tc := range []struct {
		name    string
		delRoot bool
		steps   []step
	}{
		{"marked, removed, gone, finished, remembered", true, then(rec, append([]step{
			{"mark if=false", Result{}}, {"remove root since=0s", Result{}}}, finished...)...)},
		{"without root removal the directory stays", false, then(rec, append([]step{
			{"mark if=false", Result{}}, {"log directory kept: --delete-access-point-root-dir is off", Result{}}}, finished...)...)},
		{"an earlier attempt's mark is when the listing lag counts from", true, then(earlier,
			step{"mark if=false", Result{}}, step{"remove root since=-1h0m0s", Result{Err: errAPI}}, step{"answer " + errAPI.Error(), Result{}})},
		{"no record (never made, or a repeat of a finished delete): nothing removed", true, []step{
			{"read record " + token, Result{Err: journal.ErrNotFound}}, {"answer ok", Result{}}}},
		{"the record at its path is not a directory volume: nothing removed", true, []step{
			{"read record " + token, Result{Record: notDir}}, {"log volume not deleted: the record at its path is not this directory volume", Result{}},
			{"answer ok", Result{}}}},
		{"a create under way makes it ABORTED", true, []step{head[0], {locks, Result{Err: keylock.ErrBusy}},
			{"answer " + keylock.ErrBusy.Error(), Result{}}}},
		{"finished by another while it took the locks", true, []step{head[0], head[1],
			{"read record " + token, Result{Err: journal.ErrNotFound}}, {"answer ok", Result{}}}},
		{"a failed mark removes nothing", true, then(rec, step{"mark if=false", Result{Err: errAPI}}, step{"answer " + errAPI.Error(), Result{}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drive(t, func(s *script) stepper {
				return NewDelete(DeleteConfig{Cluster: "c1", DeleteRootDir: tc.delRoot, Logger: s.logger()}, id, s, t0)
			}, describeDir, tc.steps)
		})
	}
}

// TestStoppedCreateReleasesItsReservation: a create abandoned mid-way (its
// call killed, an effect its caller could not do) lets go of the id it
// reserved in this process's allocator when its caller stops it, as one
// that ends does.
func TestStoppedCreateReleasesItsReservation(t *testing.T) {
	fs := listedFS()
	reserved := func() int { return fs.alloc.Stats()[fsID].Reserved }
	c := NewCreateVolume(CreateConfig{}, dirPlan(t), fs, t0)
	for range 20 {
		e := c.Next()
		if _, ok := e.(MakeDir); ok {
			break
		}
		c.Step(happy(e))
	}
	if _, ok := c.Next().(MakeDir); !ok || reserved() != 1 {
		t.Fatalf("at %T with %d reservations, want MakeDir with one", c.Next(), reserved())
	}
	c.Stop()
	if n := reserved(); n != 0 {
		t.Fatalf("%d reservations held after Stop", n)
	}
}
