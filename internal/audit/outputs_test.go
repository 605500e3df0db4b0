package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/plot"
	"github.com/efs-csi/efs-csi-driver/internal/plot/browsertest"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// wantFigures are the summary's figures of fs, counted here from the JSON
// report's lists (not from Counts), by the labels the table and the page
// show.
func wantFigures(fs *FileSystem) map[string]string {
	w := map[string]string{
		"access points":      strconv.Itoa(len(fs.Unreferenced) + fs.Referenced),
		"of the limit":       fmt.Sprintf("%.1f%% of %d", 100*float64(fs.AccessPoints)/float64(fs.Limit), fs.Limit),
		"named by a PV":      strconv.Itoa(fs.Referenced),
		"no PV":              strconv.Itoa(len(fs.Unreferenced)),
		"phantom PVs":        strconv.Itoa(len(fs.Phantoms)),
		"stale records":      strconv.Itoa(len(fs.StaleRecords)),
		"orphan directories": "not scanned",
		"findings":           strconv.Itoa(fs.Findings),
	}
	for _, o := range Owners {
		w["owner "+string(o)] = strconv.Itoa(fs.ByOwner[o])
	}
	var findings, leaks, shared, intended, staleLeaks int
	for _, u := range fs.Unreferenced {
		if u.Finding {
			findings++
		}
		if u.Leak {
			leaks++
		}
	}
	for _, g := range fs.SharedGIDs {
		if g.Intended {
			intended++
		} else {
			shared++
		}
	}
	for _, s := range fs.StaleRecords {
		if s.Leak {
			staleLeaks++
		}
	}
	w["no PV: findings"], w["no PV: provable leaks"] = strconv.Itoa(findings), strconv.Itoa(leaks)
	w["shared GIDs"], w["shared GIDs a class fixes (not findings)"] = strconv.Itoa(shared), strconv.Itoa(intended)
	w["stale records: provable leaks"] = strconv.Itoa(staleLeaks)
	if d := fs.Directories; d != nil {
		w["orphan directories"] = strconv.Itoa(len(d.Orphans) + d.More)
	}
	return w
}

// tableFigures reads the summary of a table: the rows under the
// "figure" header, label and value split by tabwriter's gaps.
func tableFigures(t *testing.T, table string) map[string]string {
	t.Helper()
	out := map[string]string{}
	in := false
	for _, line := range strings.Split(table, "\n") {
		cells := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
		switch {
		case !in && cells[0] == "figure":
			in = true
		case in && strings.TrimSpace(line) == "":
			return out
		case in:
			if len(cells) != 2 {
				t.Fatalf("summary row %q: %d cells", line, len(cells))
			}
			out[cells[0]] = cells[1]
		}
	}
	t.Fatalf("no summary in the table:\n%s", table)
	return nil
}

// pageFigures reads the summary table of the HTML page.
func pageFigures(t *testing.T, page string) map[string]string {
	t.Helper()
	_, rest, ok := strings.Cut(page, `<table id="summary">`)
	if !ok {
		t.Fatal("no summary table in the page")
	}
	rest, _, _ = strings.Cut(rest, "</table>")
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`<tr><th>([^<]*)</th><td class="num">([^<]*)</td></tr>`).FindAllStringSubmatch(rest, -1) {
		out[html.UnescapeString(m[1])] = html.UnescapeString(m[2])
	}
	return out
}

func sameFigures(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s: %q is %q, want %q (the JSON's lists)", what, k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: figure %q is not checked", what, k)
		}
	}
}

// The held-out state, seen three ways: the table (--output table), the
// JSON and the HTML page say the same figures (each counted here from the
// JSON's lists); the table and the page list the same lines; the "not
// found" that proves the phantom is not an error; and the page, laid out
// in a browser 1280 and 800 px wide, fits its window.
func TestTableJSONAndHTMLAgreeOnEveryCount(t *testing.T) {
	p := plant(t, true)
	b := p.bed
	r, _, _ := b.audit()
	fs := onlyFS(t, r)
	want := wantFigures(fs)
	if want["phantom PVs"] != "1" || want["shared GIDs"] != "1" || want["shared GIDs a class fixes (not findings)"] != "1" || want["orphan directories"] != "3" {
		t.Fatalf("the planted state is not what this test expects: %v", want)
	}

	htmlPath := filepath.Join(t.TempDir(), "audit.html")
	args := []string{"--kubeconfig", b.kubecfg, "--efs-endpoint", b.url, "--region", "us-east-1", "--sts-endpoint", b.url,
		"--grace", "0s", "--local-root", b.data, "--progress", "false", "--output", "table", "--html", htmlPath, "--fix"}
	var stdout, stderr bytes.Buffer
	if status := run(b.ctx(), args, &stdout, &stderr); status != ExitFindings {
		t.Fatalf("status %d: %s", status, stderr.String())
	}
	table := stdout.String()
	raw, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)
	sameFigures(t, "table", tableFigures(t, table), want)
	sameFigures(t, "page", pageFigures(t, page), want)
	if !strings.Contains(table, fmt.Sprintf("result: FINDINGS, %d findings", fs.Findings)) || !strings.Contains(page, fmt.Sprintf("FINDINGS: %d findings", fs.Findings)) {
		t.Errorf("the table's or the page's result does not say %d findings", fs.Findings)
	}

	// Every line listed: each access point without a PV, in the table and
	// the page alike.
	for _, u := range fs.Unreferenced {
		for what, out := range map[string]string{"table": table, "page": page} {
			if !strings.Contains(out, u.AccessPoint) {
				t.Errorf("the %s does not list %s (owner %s, finding %v)", what, u.AccessPoint, u.Owner, u.Finding)
			}
		}
	}
	// The plan, in both: every action.
	for what, out := range map[string]string{"table": table, "page": page} {
		for _, a := range []string{"delete access point " + p.leak, "delete access point " + p.unanswered, "release the record of pvc-never", "release the record of pvc-gone"} {
			if !strings.Contains(out, a) {
				t.Errorf("the %s's plan lacks %q", what, a)
			}
		}
	}
	// Each says what it leaves out.
	for what, out := range map[string]string{"table": table, "page": page} {
		if !strings.Contains(out, "--output json lists every one") {
			t.Errorf("the %s does not say what it leaves out", what)
		}
	}
	if r.Omits == "" {
		t.Error("the JSON does not say what it leaves out")
	}

	// The phantom's "not found" is an expected answer, not an error.
	if n := r.Requests.ByOutcome[outcomeExpectedNotFound]; n != 1 || r.Requests.ByOutcome[efs.OutcomeClientError] != 0 {
		t.Errorf("requests by outcome %v: want the phantom's one not found as expected, no client error", r.Requests.ByOutcome)
	}
	if strings.Contains(table, "client_error") || !strings.Contains(table, "not found as expected 1") {
		t.Errorf("the table's requests line: %s", regexp.MustCompile(`EFS requests: .*`).FindString(table))
	}

	// Progress off a terminal (--progress true): however short the audit,
	// a final line with its counts and rates.
	r, _, progressOut := b.audit("--progress", "true")
	final := regexp.MustCompile(`(?m)^audit done, 1 of 1 file systems listed: (\d+) access points in (\d+) pages? \(\d+/s\), EFS requests (\d+) \([\d.]+/s, 0 throttled\), [\d.]+m?s$`).FindStringSubmatch(progressOut)
	if final == nil || final[1] != strconv.Itoa(onlyFS(t, r).AccessPoints) || final[3] != strconv.Itoa(r.Requests.Total) {
		t.Errorf("no final progress line with %d access points and %d requests in stderr:\n%s", onlyFS(t, r).AccessPoints, r.Requests.Total, progressOut)
	}

	browsertest.Check(t, htmlPath, 1280, 800)
}

// --help says what --fix needs to prove a leak: an orphan collector
// holding its Lease.
func TestHelpSaysWhatFixNeedsToProveALeak(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if status := run(t.Context(), []string{"--help"}, &stdout, &stderr); status != ExitClean {
		t.Fatalf("--help: status %d", status)
	}
	help := strings.Join(strings.Fields(stdout.String()), " ")
	for _, want := range []string{"What --fix needs to prove a leak: an orphan collector", "holding its Lease <namespace>/<driver-name>-orphan-collector",
		"--orphan-gc-interval", "--output json lists every one"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// capped is a file system at scale, as the issue saw it: 6,000 access
// points without a PV, a GID 1,000 access points share, 30 phantoms.
func capped() *Report {
	fs := &FileSystem{ID: testFS, API: "efs", Credentials: "own", Limit: DefaultLimit, ByOwner: map[Owner]int{OwnerUpstream: 7000}, Referenced: 1000}
	for i := range 6000 {
		gid := int64(50000 + i)
		fs.Unreferenced = append(fs.Unreferenced, Unreferenced{AccessPoint: fmt.Sprintf("fsap-%017x", i), Path: fmt.Sprintf("/dynamic_provisioning/pvc-%08d-1111-4000-8000-000000000000", i),
			GID: &gid, Owner: OwnerUpstream, OwnerWhy: "the upstream driver's", Volume: fmt.Sprintf("pvc-%08d-1111-4000-8000-000000000000", i),
			Finding: true, Why: "no PersistentVolume of this cluster names it and no record proves it this cluster's: a leak if this cluster made it; check by hand"})
	}
	g := SharedGID{GID: 50000}
	for i := range 1000 {
		g.Holders = append(g.Holders, GIDHolder{AccessPoint: fmt.Sprintf("fsap-%017x", 100000+i), Owner: OwnerUpstream,
			PVs: []string{fmt.Sprintf("pvc-%08d", i)}, Namespaces: []string{"legacy", "team-a"}})
	}
	fs.SharedGIDs = []SharedGID{g}
	for i := range 30 {
		fs.Phantoms = append(fs.Phantoms, Phantom{PV: fmt.Sprintf("pvc-phantom-%d", i), Claim: "team/c", AccessPoint: fmt.Sprintf("fsap-%017x", 200000+i), Why: "access point does not exist: the PV mounts nothing"})
	}
	fs.Directories = &DirScan{Root: "/mnt/efs", BasePaths: []string{"/dynamic", "/dynamic_provisioning"}, Read: 9000, More: 200,
		Error: "/dynamic_provisioning/x: permission denied"}
	for i := range maxOrphanDirs {
		fs.Directories.Orphans = append(fs.Directories.Orphans, fmt.Sprintf("/dynamic/abandoned-%04d", i))
	}
	fs.AccessPoints = 7000
	fs.LimitUsed = 0.7
	fs.Findings = 6000 + 1 + 30 + maxOrphanDirs + 200
	r := &Report{Started: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC), Seconds: 1.2, FileSystems: []*FileSystem{fs},
		Cluster: Cluster{Driver: driverName, API: "kubeconfig context test"}, Options: Options{Grace: 10 * time.Minute, Timeout: 30 * time.Minute},
		Requests: Requests{Total: 71, ByOutcome: map[string]int{"ok": 70, outcomeExpectedNotFound: 1}, Timeline: plot0()}}
	r.addUp()
	return r
}

// Long lists are capped the same way in the table and the page (listCap
// lines of a kind, holderCap holders of a GID, then how many more), every
// line of the table stays short, the JSON has every one, and durations
// read as durations.
func TestLongListsAreCappedAlikeAndJSONHasEveryOne(t *testing.T) {
	r := capped()
	var table bytes.Buffer
	r.WriteTable(&table)
	htmlPath := filepath.Join(t.TempDir(), "audit-capped.html")
	if err := r.WriteHTML(htmlPath); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatal(err)
	}
	page := html.UnescapeString(string(raw))
	for _, line := range strings.Split(table.String(), "\n") {
		if len(line) > 1000 {
			t.Errorf("a table line of %d characters: %.200s...", len(line), line)
		}
	}
	for _, more := range []string{"... and 5980 more access points without a PV: the full list is in --output json",
		"... and 10 more phantoms: the full list is in --output json", "; and 995 more: the full list is in --output json",
		"... and 1180 more orphan directories: the full list is in --output json", "then ERROR: /dynamic_provisioning/x: permission denied"} {
		if n := strings.Count(table.String(), more); n != 1 {
			t.Errorf("the table says %q %d times, want once", more, n)
		}
		// The page also carries the table, as its text summary.
		if n := strings.Count(page, more); n != 2 {
			t.Errorf("the page says %q %d times, want twice (its list and the text summary)", more, n)
		}
	}
	for i, u := range r.FileSystems[0].Unreferenced {
		listed := strings.Contains(table.String(), u.AccessPoint)
		if listed != (i < listCap) {
			t.Fatalf("access point %d of 6000 listed in the table: %v", i, listed)
		}
	}
	if n := strings.Count(page, `<tr class="why">`); n != listCap+listCap+1 {
		t.Errorf("the page lists %d lines, want %d (%d access points, %d phantoms, 1 GID)", n, 2*listCap+1, listCap, listCap)
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if fs := back.FileSystems[0]; len(fs.Unreferenced) != 6000 || len(fs.SharedGIDs[0].Holders) != 1000 || len(fs.Phantoms) != 30 {
		t.Errorf("the JSON lists %d, %d, %d", len(fs.Unreferenced), len(fs.SharedGIDs[0].Holders), len(fs.Phantoms))
	}
	for _, want := range []string{`"grace": "10m"`, `"timeout": "30m"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page's options lack %s", want)
		}
	}
	browsertest.Check(t, htmlPath, 800)
}

func plot0() plot.Timeline {
	tl := plot.NewTimeline(1200*time.Millisecond, timelineSeries...)
	for i := range 70 {
		tl.Add(0, time.Duration(i)*15*time.Millisecond)
	}
	tl.Add(1, time.Second)
	return tl
}
