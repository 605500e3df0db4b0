package sim

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	findName = flag.String("sim.find", "", "search seeds for the named finding (findings, or \"all\") and write its shrunk scenario to testdata/scenarios/")
	findFrom = flag.Uint64("sim.findfrom", 1, "first seed -sim.find tries (it tries 20,000)")
)

// finding is a held-out finding to express as a scenario: a world where it
// can happen, and how to recognise it. TestFind searches seeds of the
// world, shrinks the first match, checks that the shrunk script still
// matches, and writes it to testdata/scenarios/<name>.txt.
type finding struct {
	name, about string
	world       string         // config fields, without the seed
	kind        string         // the invariant it breaks
	script      *regexp.Regexp // the shrunk script must hold such a decision (nil: any)
	violation   *regexp.Regexp // a violation must match (nil: any of kind)
}

// findTraces: a finding's trace must match too.
var findTraces = map[string]*regexp.Regexp{
	// The access point exists before the claim's DeleteVolume begins; only
	// the listing lag hides it.
	"rootdir-listing-lag": regexp.MustCompile(`(?s)creates pvc-up-0 .*delete claim pvc-0.*removed /pvc-0`),
}

// findEdits turn a run without faults into a finding's script (from its
// decisions and trace); a finding without one uses the run's own faults.
var findEdits = map[string]func(decisions, trace []string) []string{
	"gid-withdraw-500": failWithdraw,
}

// failWithdraw makes the record write of a Withdraw fail with a 500: the
// Update of a create's call whose previous op listed access points and
// whose next one deletes its access point.
func failWithdraw(decisions, trace []string) []string {
	type opLine struct{ id, desc string }
	calls := map[string][]opLine{}
	var order []string
	for _, l := range trace {
		f := strings.SplitN(l, " ", 3)
		if len(f) < 3 || f[0] != "ok" || !strings.Contains(f[1], ":") {
			continue
		}
		call := f[1][:strings.LastIndex(f[1], ".")]
		if _, ok := calls[call]; !ok {
			order = append(order, call)
		}
		calls[call] = append(calls[call], opLine{f[1], f[2]})
	}
	for _, c := range order {
		ops := calls[c]
		for i := 1; i+1 < len(ops); i++ {
			if strings.HasPrefix(ops[i].desc, "Update volume") && strings.HasPrefix(ops[i-1].desc, "ListAccessPoints") &&
				strings.HasPrefix(ops[i+1].desc, "DeleteAccessPoint") {
				if j := slices.Index(decisions, "ok "+ops[i].id); j >= 0 {
					out := slices.Clone(decisions[:j+1])
					out[j] = "fail " + ops[i].id
					return out
				}
			}
		}
	}
	return nil
}

var findings = []finding{
	{"retry-never-finishes", "A retry that can never finish: the write recording the access point ID fails once with the GID range full; every retry ends RESOURCE_EXHAUSTED.",
		"clusters=shared:1 volumes=2 gids=1 faults=2 faultpct=50 only=Update steps=60", "liveness", regexp.MustCompile(`^fail `), regexp.MustCompile(`no free GID`)},
	{"gid-two-clusters", "Two clusters on one file system answer one GID twice (the other-cluster check is off until a listing showed the other's tags).",
		"clusters=shared:1,shared:1 volumes=2 gids=1 faults=0", "gid", nil, nil},
	{"rootdir-listing-lag", "Root removal removes the directory of a live access point made before the delete began, hidden by EFS's listing lag, when this process has not seen a lagging listing (default --listing-lag 1s).",
		"clusters=shared:1 volumes=1 writers=1 share=true rootdir=true listinglag=1s lag=500ms faults=0", "data", nil, nil},
	{"rootdir-made-during-delete", "Root removal removes the directory of an access point made on it after the delete's listing began and before the removal.",
		"clusters=shared:1 volumes=1 writers=1 share=true rootdir=true listinglag=1s lag=500ms faults=0", "data", nil, nil},
	{"forged-record-collects-upstream", "A forged record entry makes the orphan collector delete an upstream-made access point (and its data).",
		"clusters=shared:1 volumes=1 writers=1 forge=1 faults=0", "foreign", nil, regexp.MustCompile(`made by upstream`)},
	{"forged-record-collects-untagged", "A forged record entry makes the orphan collector delete an untagged access point made by hand.",
		"clusters=shared:1 volumes=1 writers=2 forge=2 faults=0", "foreign", nil, regexp.MustCompile(`made by hand`)},
	{"phantom-dup-during-delete", "A duplicate CreateVolume on another replica answers an access point whose DeleteVolume (begun after the duplicate read the record) deleted it.",
		"clusters=shared:2 volumes=1 dups=1 faults=0", "phantom", nil, nil},
	{"liveness-withdraw-timeout", "A create whose Withdraw is interrupted (the call's deadline) leaves its record marked deleting: every retry of the volume ends ABORTED, for good.",
		"clusters=shared:1,shared:1 volumes=2 gids=1 faults=0", "liveness", nil, regexp.MustCompile(`being deleted`)},
	{"leak-dup-create-after-delete", "A duplicate CreateVolume on another replica, which read the record before the volume's DeleteVolume marked it, creates an access point after that delete finished the record: no record names it (a kill now leaks it for good).",
		"clusters=shared:2 volumes=1 dups=1 faults=0", "leak", nil, regexp.MustCompile(`named by no record`)},
	{"leak-create-after-forget", "One controller: a create whose call the provisioner abandoned (a restart that forgets, the claim deleted) made an access point; the orphan collector's listing, begun at once, did not show it yet (EFS's listing lag), and the collector released the record: no record names the access point.",
		"clusters=shared:1 volumes=1 dups=0 writers=0 gids=3 limit=1000 lag=100ms lenient=true faults=1 faultpct=20 kills=0 forgets=1 abandon=1 steps=49", "leak", nil, regexp.MustCompile(`named by no record`)},
	{"leak-dup-create-killed", "A duplicate CreateVolume on another replica reads the record before the volume's DeleteVolume marks it, and sends CreateAccessPoint after that delete finished it: EFS makes an access point under the freed token, and a kill before the create deletes it leaves it named by no record, for the collector's sweep of unrecorded access points.",
		"clusters=shared:2 volumes=3 dups=1 writers=1 gids=2 limit=1000 lag=0s lenient=false faults=0 kills=1 forgets=1 steps=75", "leak", regexp.MustCompile(`^kill `), regexp.MustCompile(`named by no record|left after every claim`)},
	{"record-id-left-after-stale-drop", "A duplicate CreateVolume holds the id its stale read of the record names and makes an access point under its GID token after another create moved the record to another id: it deletes that access point (never answered), but the id stays held for nobody, after every claim is deleted.",
		"clusters=shared:2 volumes=3 dups=1 writers=1 gids=2 limit=1000 lag=400ms lenient=false faults=0 kills=0 forgets=0 steps=36", "record", nil, regexp.MustCompile(`id .* left`)},
	{"gid-upgrade-adopts-upstream", "In an in-place upgrade, a create adopts (by its token) the access point upstream's controller made for the same claim, with a GID upstream picked outside the record: another volume of the record holds that GID too, and both are answered (docs/design.md, Known limits).",
		"clusters=shared:1 volumes=3 gids=1 upgrade=true faults=0", "gid", nil, nil},
	// Properties that hold on main: a run with faults that breaks nothing.
	{"ok-one-cluster-faults-and-kill", "One cluster, two controllers on one record: lost answers, 5xx, throttles, a kill and a provisioner restart lose nothing.",
		"clusters=shared:2 volumes=3 dups=1 gids=3 faults=6 faultpct=40 kills=1 forgets=1", "", regexp.MustCompile(`^kill `), nil},
	{"ok-rootdir-faults", "Root removal with lost answers and errors removes only the deleted volumes' directories.",
		"clusters=shared:1 volumes=2 gids=3 rootdir=true listinglag=1s faults=4 faultpct=40", "", regexp.MustCompile(`^(lost|fail) `), nil},
}

func TestFind(t *testing.T) {
	if *findName == "" {
		t.Skip("no -sim.find")
	}
	for _, f := range findings {
		if *findName != "all" && f.name != *findName {
			continue
		}
		t.Run(f.name, func(t *testing.T) { findOne(t, f) })
	}
}

func (f finding) matches(r *Result, script []string) bool {
	if r.Kind() != f.kind {
		return false
	}
	if f.violation != nil && !f.violation.MatchString(r.Violations[0]) {
		return false
	}
	return f.script == nil || slices.ContainsFunc(script, f.script.MatchString)
}

func findOne(t *testing.T, f finding) {
	for seed := *findFrom; seed < *findFrom+20000; seed++ {
		cfg, err := ParseConfig(append(strings.Fields(f.world), fmt.Sprintf("seed=%d", seed)))
		if err != nil {
			t.Fatal(err)
		}
		edit, tr := findEdits[f.name], findTraces[f.name]
		traced := func(r *Result) bool { return tr == nil || tr.MatchString(strings.Join(r.Trace, "\n")) }
		r := runOne(t, cfg, nil, edit != nil || tr != nil)
		if edit != nil {
			script := edit(r.Decisions, r.Trace)
			if script == nil {
				continue
			}
			r = runOne(t, cfg, script, tr != nil)
			r.Decisions = script
		}
		if !f.matches(r, r.Decisions) || !traced(r) {
			continue
		}
		c, script, final := cfg, r.Decisions, r
		if f.kind != "" {
			c, script = shrinkRun(t, cfg, r.Decisions, f.kind)
			final = runOne(t, c, script, tr != nil)
			if !f.matches(final, script) || !traced(final) {
				c, script, final = cfg, r.Decisions, r
			}
			// Every decision spelled out (the shrunk script's, then those
			// drawn once it ended): the same run, readable.
			script = final.Decisions
		}
		path := filepath.Join("testdata", "scenarios", f.name+".txt")
		text := scenarioText(fmt.Sprintf("%s\nFound by seed %d of world %q; on main f0c1d55:\n%s", f.about, seed, f.world, verdict(final)), c, script)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("seed %d: %s (%d decisions) -> %s", seed, verdict(final), len(script), path)
		return
	}
	t.Errorf("no seed of %q breaks %s as described", f.world, f.kind)
}
