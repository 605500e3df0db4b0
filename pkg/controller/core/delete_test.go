package core

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

const (
	fsID = "fs-0123456789abcdef0"
	apID = "fsap-00000000000000001"
	vid  = "efs:" + fsID + "::" + apID
	name = "pvc-6a7f4a8e-0e6b-4a4f-9a61-3b2f3f0a1c11"
)

var (
	t0     = time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	errAPI = errors.New("api: 500")
)

// ours is this cluster's access point for name under a GID token, and rec
// its record.
func ours() (*efs.AccessPoint, *journal.Record) {
	tok := volume.GIDToken(fsID, 60001)
	ap := &efs.AccessPoint{ID: apID, FileSystemID: fsID, ClientToken: tok, Path: "/" + name,
		Tags: map[string]string{ownership.TagCluster: "true", ownership.TagVolumeName: name, ownership.TagClusterID: "c1"}}
	rec := &journal.Record{Volume: journal.Volume{FileSystem: fsID, Token: volume.NameToken(name), ClientToken: tok, Name: name,
		Path: ap.Path, AccessPoint: apID, Allocated: 60001}}
	return ap, rec
}

// describe names an effect with what the tests assert of it.
func describe(e Effect) string {
	switch e := e.(type) {
	case Answer:
		if e.Err == nil {
			return "answer ok"
		}
		return "answer " + e.Err.Error()
	case Lock:
		return "lock " + strings.Join(e.Keys, ",")
	case LookUp:
		return "look up"
	case ReadRecord:
		if e.AccessPoint != "" {
			return "read record of access point"
		}
		return "read record hint=" + strconv.FormatBool(e.Hint)
	case Reachable:
		return "reachable"
	case Mark:
		return "mark if=" + strconv.FormatBool(e.IfAgrees != nil)
	case RemoveRoot:
		return "remove root since=" + e.Since.Sub(t0).String()
	case DeleteAccessPoint:
		return "delete access point"
	case Finish:
		return "finish"
	}
	return fmt.Sprintf("%T", e)
}

// TestDeleteSteps drives the delete protocol through scripted outcomes and
// checks each effect it asks for, in order.
func TestDeleteSteps(t *testing.T) {
	ap, rec := ours()
	nameLocks := "lock name/" + name // the name is its own token
	stale := *rec
	stale.AccessPoint = "fsap-0000000000000000f" // a hint from before the record adopted ap
	other := *ap
	other.FileSystemID = "fs-0000000000000000f"
	foreign := *ap
	foreign.Tags = map[string]string{ownership.TagClusterID: "c2"}
	handMade := &efs.AccessPoint{ID: apID, FileSystemID: fsID, Path: "/data"}
	earlier := *rec
	earlier.Deleting, earlier.DeletingSince = true, t0.Add(-time.Hour)
	otherName := *rec
	otherName.Name = "pvc-other"
	full := []step{
		{"recall", Result{}}, {"lock ap/" + apID, Result{}}, {"look up", Result{AP: ap}},
		{"read record hint=true", Result{Record: rec}}, {nameLocks, Result{}}, {"forget", Result{}},
		{"mark if=true", Result{Record: rec}}, {"remove root since=0s", Result{}}, {"delete access point", Result{}},
		{"log access point deleted", Result{}}, {"finish", Result{}}, {"remember", Result{}}, {"answer ok", Result{}},
	}
	for _, tc := range []struct {
		name    string
		id      string
		delRoot bool
		steps   []step
	}{
		{"an unparsable ID is done", "not-an-id", true, []step{{"answer ok", Result{}}}},
		{"a static volume owns no access point", fsID, true, []step{{"answer ok", Result{}}}},
		{"a directory volume goes to its own protocol (TestDeleteDirSteps)", "efsdir:" + fsID + ":/dirs/a", true, []step{
			{"read record hint=false", Result{Err: journal.ErrNotFound}}, {"answer ok", Result{}}}},
		{"a repeat of a finished delete is answered from memory", vid, true, []step{{"recall", Result{Yes: true}}, {"answer ok", Result{}}}},
		{"a delete of the access point under way makes this one ABORTED", vid, true, []step{
			{"recall", Result{}}, {"lock ap/" + apID, Result{Err: keylock.ErrBusy}}, {"answer " + keylock.ErrBusy.Error(), Result{}}}},
		{"a recorded volume: marked, root removed, deleted, then finished", vid, true, full},
		{"without root removal no directory is touched", vid, false, append(append([]step{}, full[:7]...), full[8:]...)},
		{"an earlier attempt's mark is when the listing lag counts from", vid, true, []step{
			{"recall", Result{}}, {"lock ap/" + apID, Result{}}, {"look up", Result{AP: ap}},
			{"read record hint=true", Result{Record: rec}}, {nameLocks, Result{}}, {"forget", Result{}},
			{"mark if=true", Result{Record: &earlier}}, {"remove root since=-1h0m0s", Result{Err: errAPI}}, {"answer " + errAPI.Error(), Result{}}}},
		{"a hint that does not agree is read again", vid, true, []step{
			{"recall", Result{}}, {"lock ap/" + apID, Result{}}, {"look up", Result{AP: ap}},
			{"read record hint=true", Result{Record: &stale}}, {"read record hint=false", Result{Record: rec}}, {nameLocks, Result{}},
			{"forget", Result{}}, {"mark if=true", Result{Err: errAPI}}, {"answer " + errAPI.Error(), Result{}}}},
		{"a record changed under other locks is left to a retry, nothing deleted", vid, true, []step{
			{"recall", Result{}}, {"lock ap/" + apID, Result{}}, {"look up", Result{AP: ap}},
			{"read record hint=true", Result{Record: rec}}, {nameLocks, Result{}}, {"forget", Result{}},
			{"mark if=true", Result{}}, {"read record hint=false", Result{Record: &otherName}},
			{"answer " + keylock.ErrBusy.Error() + ": the record of access point " + apID + " changed while its delete took its locks", Result{}}}},
		{"a record gone since the read: deleted as unrecorded, nothing to finish", vid, false, []step{
			{"recall", Result{}}, {"lock ap/" + apID, Result{}}, {"look up", Result{AP: ap}},
			{"read record hint=true", Result{Record: rec}}, {nameLocks, Result{}}, {"forget", Result{}},
			{"mark if=true", Result{}}, {"read record hint=false", Result{Err: journal.ErrNotFound}},
			{"read record of access point", Result{Err: journal.ErrNotFound}},
			{"delete access point", Result{}}, {"log access point deleted", Result{}}, {"remember", Result{}}, {"answer ok", Result{}}}},
		{"an access point gone before its DeleteAccessPoint is logged as gone, not deleted", vid, false, []step{
			{"recall", Result{}}, {"lock ap/" + apID, Result{}}, {"look up", Result{AP: ap}},
			{"read record hint=true", Result{Record: rec}}, {nameLocks, Result{}}, {"forget", Result{}},
			{"mark if=true", Result{Record: rec}}, {"delete access point", Result{Yes: true}},
			{"log access point already gone", Result{}}, {"finish", Result{}}, {"remember", Result{}}, {"answer ok", Result{}}}},
		{"a failed removal keeps the access point", vid, true, append(append([]step{}, full[:7]...),
			step{"remove root since=0s", Result{Err: errAPI}}, step{"answer " + errAPI.Error(), Result{}})},
		{"an access point on another file system is not this volume's", vid, true, []step{
			{"recall", Result{}}, {"lock ap/" + apID, Result{}}, {"look up", Result{AP: &other}},
			{"log volume not deleted: its access point is on another file system", Result{}}, {"answer ok", Result{}}}},
		{"another cluster's access point is never deleted", vid, true, []step{
			{"recall", Result{}}, {"lock ap/" + apID, Result{}}, {"look up", Result{AP: &foreign}},
			{`answer access point of another cluster: access point ` + apID + ` was made by cluster "c2", not this one ("c1"); it is not deleted here`, Result{}}}},
		{"an access point no CSI driver made keeps its directory", vid, true, []step{
			{"recall", Result{}}, {"lock ap/" + apID, Result{}}, {"look up", Result{AP: handMade}},
			{"lock ", Result{}}, {"forget", Result{}}, {"root not owned", Result{}},
			{"log root directory kept: the access point was not made by a CSI driver", Result{}}, {"delete access point", Result{}},
			{"log access point deleted", Result{}}, {"remember", Result{}}, {"answer ok", Result{}}}},
		{"not visible and not recorded: gone as far as can be proven", vid, true, []step{
			{"recall", Result{}}, {"lock ap/" + apID, Result{}}, {"look up", Result{Err: efs.ErrAccessPointNotFound}},
			{"read record of access point", Result{Err: journal.ErrNotFound}}, {"reachable", Result{}}, {"answer ok", Result{}}}},
		{"not visible with these credentials: the record stays", vid, true, []step{
			{"recall", Result{}}, {"lock ap/" + apID, Result{}}, {"look up", Result{Err: efs.ErrAccessPointNotFound}},
			{"read record of access point", Result{Record: rec}}, {"reachable", Result{Err: errAPI}}, {"answer " + errAPI.Error(), Result{}}}},
		{"not visible but recorded: marked, deleted, finished", vid, true, []step{
			{"recall", Result{}}, {"lock ap/" + apID, Result{}}, {"look up", Result{Err: efs.ErrAccessPointNotFound}},
			{"read record of access point", Result{Record: rec}}, {"reachable", Result{}}, {nameLocks, Result{}}, {"forget", Result{}},
			{"mark if=false", Result{}}, {"delete access point", Result{Yes: true}}, {"log access point already gone", Result{}},
			{"finish", Result{}}, {"remember", Result{}}, {"answer ok", Result{}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			drive(t, func(s *script) stepper {
				return NewDelete(DeleteConfig{Cluster: "c1", DeleteRootDir: tc.delRoot, Logger: s.logger()}, tc.id, s, t0)
			}, describe, tc.steps)
		})
	}
}

// TestDeleteEveryOutcome runs the delete protocol through every sequence of
// outcomes its effects can have (each effect from a small set: success,
// not found, a record that agrees or not, an API error, a lost
// compare-and-swap, a busy lock), replaying a prefix of choices to branch,
// and checks on each run what DeleteVolume promises (docs/design.md,
// Invariants I4, I5; Delete): it ends in an answer; nothing is deleted of
// an access point on another file system or of another cluster; a record
// that names the access point is marked before its directory or the access
// point goes; a directory goes only with root removal on, and only a CSI
// volume's; a record is finished only after its access point is gone; an
// error is answered at once; and success is answered only for a volume
// that is gone (or was never this controller's to delete).
func TestDeleteEveryOutcome(t *testing.T) {
	ap, rec := ours()
	stale := *rec
	stale.AccessPoint = "fsap-0000000000000000f"
	other := *ap
	other.FileSystemID = "fs-0000000000000000f"
	foreign := *ap
	foreign.Tags = map[string]string{ownership.TagClusterID: "c2"}
	handMade := &efs.AccessPoint{ID: apID, FileSystemID: fsID, Path: "/data"}
	options := func(e Effect) []Result {
		switch e := e.(type) {
		case Lock:
			return []Result{{}, {Err: keylock.ErrBusy}}
		case LookUp:
			return []Result{{AP: ap}, {AP: handMade}, {AP: &other}, {AP: &foreign}, {Err: efs.ErrAccessPointNotFound}, {Err: errAPI}}
		case ReadRecord:
			if e.AccessPoint != "" {
				return []Result{{Record: rec}, {Err: journal.ErrNotFound}, {Err: errAPI}}
			}
			return []Result{{Record: rec}, {Record: &stale}, {Err: journal.ErrNotFound}, {Err: errAPI}}
		case Mark:
			if e.IfAgrees == nil {
				return []Result{{}, {Err: errAPI}}
			}
			return []Result{{Record: e.Record}, {}, {Err: errAPI}}
		case Reachable, RemoveRoot, DeleteAccessPoint, Finish:
			return []Result{{}, {Err: errAPI}}
		}
		return []Result{{}}
	}
	runs := 0
	for _, mode := range []struct{ delRoot, finished bool }{{false, false}, {true, false}, {false, true}} {
		delRoot := mode.delRoot
		// choices is the current path; counts the options at each depth.
		var choices []int
		for {
			var counts []int
			mem := NewFS(fsID)
			if mode.finished { // a repeat of a delete this process finished
				mem.FinishDelete(apID, nil, t0)
			}
			var (
				trace            []string
				looked           *efs.AccessPoint
				marked, deleted  bool
				finished, logged bool
				lastErr          error
				answer           *Answer
			)
			log := slog.New(lineHandler(func(r slog.Record) {
				trace = append(trace, "logged "+r.Message)
				logged = logged || deleted && r.Message == "access point deleted"
			}))
			d := NewDelete(DeleteConfig{Cluster: "c1", DeleteRootDir: delRoot, Logger: log}, vid, mem, t0)
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("root removal %v, choices %v:\n  %s\n"+format, append([]any{delRoot, choices, strings.Join(trace, "\n  ")}, args...)...)
			}
			for depth := 0; answer == nil; depth++ {
				if depth > 40 {
					fail("no answer after 40 effects")
				}
				e := d.Next()
				trace = append(trace, describe(e))
				if lastErr != nil {
					if a, ok := e.(Answer); !ok || !errors.Is(a.Err, lastErr) {
						fail("an error (%v) went on to %s", lastErr, describe(e))
					}
				}
				switch e := e.(type) {
				case Answer:
					answer = &e
					continue
				case RemoveRoot:
					if !delRoot || !e.Prov.CSI || looked == nil || e.AP != looked {
						fail("removed a root it may not")
					}
					if e.Prov.Recorded && !marked {
						fail("removed a recorded volume's root before its record was marked")
					}
				case DeleteAccessPoint:
					if looked != nil && (looked.FileSystemID != fsID || looked.Tags[ownership.TagClusterID] == "c2") {
						fail("deleted another file system's or another cluster's access point")
					}
					if looked == nil && !marked {
						fail("deleted an access point it did not see before marking its record")
					}
				case Finish:
					if !deleted || !marked {
						fail("finished a record before its access point was gone (deleted %v, marked %v)", deleted, marked)
					}
				}
				opts := options(e)
				if depth == len(counts) {
					counts = append(counts, len(opts))
				}
				if depth >= len(choices) {
					choices = append(choices, 0)
				}
				r := opts[choices[depth]]
				lastErr = nil
				if r.Err != nil && !errors.Is(r.Err, efs.ErrAccessPointNotFound) && !errors.Is(r.Err, journal.ErrNotFound) {
					lastErr = r.Err
				}
				switch e.(type) {
				case LookUp:
					looked = r.AP
				case Mark:
					marked = marked || r.Err == nil && (e.(Mark).IfAgrees == nil || r.Record != nil)
				case DeleteAccessPoint:
					deleted = r.Err == nil
				case Finish:
					finished = r.Err == nil
				}
				d.Step(r)
			}
			if mem.RootDirsNotOwned() > 0 && !delRoot {
				fail("a directory kept without root removal")
			}
			if answer.Err == nil && deleted && !logged {
				fail("a deletion not logged")
			}
			if answer.Err == nil && marked && !finished {
				fail("answered success with its record left marked")
			}
			if answer.Err == nil && looked == ap && !deleted {
				fail("answered success with this volume's access point still there")
			}
			runs++
			var more bool
			if choices, more = nextPath(choices, counts); !more {
				break
			}
		}
	}
	t.Logf("%d runs", runs)
	if runs < 100 {
		t.Fatalf("only %d runs: the options do not branch", runs)
	}
}
