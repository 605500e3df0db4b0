package report

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/internal/stress/audit"
)

// comparedPair is two runs of 10 volumes: the default one in 1 s per phase
// with 12 CreateAccessPoint requests, the compared one in 2 s per phase with
// 30 and two UNAVAILABLE creates, and one audit finding.
func comparedPair(dir string) (def, compared *Report) {
	run := func(seconds float64, creates int64, unavailable int, leaked []audit.Finding, name string) *Report {
		r := &Report{Outcome: "clean", Seconds: 2 * seconds,
			Volumes: Volumes{Requested: 10, Created: 10, Deleted: 10},
			Phases:  []Phase{{Name: "create", Seconds: seconds, Volumes: 10, Throughput: 10 / seconds}, {Name: "delete", Seconds: seconds, Volumes: 10, Throughput: 10 / seconds}},
			RPCs: []Latency{{Name: "CreateVolume", Count: 10 + unavailable, OK: 10, Retries: unavailable, ByCode: map[string]int{"OK": 10, "Unavailable": unavailable}},
				{Name: "DeleteVolume", Count: 10, OK: 10, ByCode: map[string]int{"OK": 10}}},
			Emulator: Emulator{Counts: map[string]int64{"CreateAccessPoint": creates, "DeleteAccessPoint": 10}},
			Driver:   Driver{Scraped: true, RequestsByRPC: map[string]float64{"CreateVolume": float64(creates)}},
			Audits:   []Audit{{Name: "final", Report: &audit.Report{Leaked: leaked}}},
			Files:    Files{JSON: filepath.Join(dir, name, "report.json"), HTML: filepath.Join(dir, name, "report.html")},
		}
		if len(leaked) > 0 {
			r.Outcome = "findings"
		}
		return r
	}
	return run(1, 12, 0, nil, "."), run(2, 30, 2, []audit.Finding{{}}, "compared")
}

func TestCompareSetsEachFigureOfBothRunsSideBySideWithTheirRatio(t *testing.T) {
	def, compared := comparedPair(t.TempDir())
	c := Compare(def, compared, []string{"--adaptive-retry-mode=false"})
	if c.Outcomes != [2]string{"clean", "findings"} || c.Findings != [2]int{0, 1} {
		t.Errorf("outcomes %v, findings %v", c.Outcomes, c.Findings)
	}
	byName := map[string]Figure{}
	for _, f := range c.Figures {
		byName[f.Name] = f
	}
	for _, tc := range []struct {
		name          string
		def, compared float64
		ratio         float64 // -1: none (the compared figure is 0)
	}{
		{"create+delete vol/s", 10, 5, 2},
		{"duration (s)", 2, 4, 0.5},
		{"CreateAccessPoint requests/volume", 1.2, 3, 0.4},
		{"DeleteAccessPoint requests/volume", 1, 1, 1},
		{"driver's EFS requests/volume for CreateVolume", 1.2, 3, 0.4},
		{"CSI calls Unavailable", 0, 2, 0},
		{"CSI calls not OK", 0, 2, 0},
		{"volumes failed", 0, 0, -1},
	} {
		f, ok := byName[tc.name]
		switch {
		case !ok:
			t.Errorf("no figure %q in %+v", tc.name, c.Figures)
		case f.Default != tc.def || f.Compared != tc.compared:
			t.Errorf("%s: %v vs %v, want %v vs %v", tc.name, f.Default, f.Compared, tc.def, tc.compared)
		case tc.ratio < 0 && f.Ratio != nil:
			t.Errorf("%s: ratio %v, want none", tc.name, *f.Ratio)
		case tc.ratio >= 0 && (f.Ratio == nil || math.Abs(*f.Ratio-tc.ratio) > 1e-9):
			t.Errorf("%s: ratio %v, want %v", tc.name, ratio(f.Ratio), tc.ratio)
		}
	}
}

// The comparison reaches every output: the JSON object, the summary's
// table and result, and an HTML table that links the compared run's page.
func TestComparisonIsInTheJSONTheSummaryAndTheHTML(t *testing.T) {
	dir := t.TempDir()
	def, compared := comparedPair(dir)
	def.Comparison = Compare(def, compared, []string{"--adaptive-retry-mode=false"})
	if err := def.WriteJSON(filepath.Join(dir, "report.json")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "report.json"))
	var back struct {
		Comparison struct {
			DriverArgs []string `json:"driverArgs"`
			Figures    []Figure `json:"figures"`
		} `json:"comparison"`
	}
	if err := json.Unmarshal(b, &back); err != nil || len(back.Comparison.Figures) != len(def.Comparison.Figures) ||
		back.Comparison.DriverArgs[0] != "--adaptive-retry-mode=false" {
		t.Errorf("JSON comparison %+v (%v)", back.Comparison, err)
	}

	var sb strings.Builder
	def.Summary(&sb)
	for _, want := range []string{
		`comparison: default driver flags vs --adaptive-retry-mode=false added`,
		`\nCreateAccessPoint requests/volume +1\.20 +3\.00 +0\.40\n`,
		`\nresult: default CLEAN, 0 findings; compared FINDINGS, 1 findings\n`,
	} {
		if !regexp.MustCompile(want).MatchString(sb.String()) {
			t.Errorf("summary lacks %q:\n%s", want, sb.String())
		}
	}

	if err := def.WriteHTML(filepath.Join(dir, "report.html")); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	for _, want := range []string{"<h2>Comparison</h2>", `<a href="compared/report.html">`,
		`<tr><td>CreateAccessPoint requests/volume</td><td class="num">1.20</td><td class="num">3.00</td><td class="num">0.40</td></tr>`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
}
