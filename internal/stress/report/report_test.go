package report

import (
	"encoding/json"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/efs-csi/efs-csi-driver/internal/plot/browsertest"
	"github.com/efs-csi/efs-csi-driver/internal/stress/audit"
	"github.com/efs-csi/efs-csi-driver/internal/stress/workload"
)

// sample is 100 creates of 1..100 ms (the first 10 aborted and retried) and
// 50 deletes of 2 ms, spread over 10 seconds.
func sample() *Report {
	var calls []workload.Call
	var ops []workload.Op
	for i := 1; i <= 100; i++ {
		c := workload.Call{RPC: workload.RPCCreate, Start: time.Duration(i) * 100 * time.Millisecond,
			Latency: time.Duration(i) * time.Millisecond, Code: codes.OK, Attempt: 1}
		if i <= 10 {
			c.Code = codes.Aborted
			calls = append(calls, c)
			c.Code, c.Attempt = codes.OK, 2
		}
		calls = append(calls, c)
		ops = append(ops, workload.Op{RPC: workload.RPCCreate, Start: c.Start, Latency: c.Latency, Attempts: c.Attempt, Code: codes.OK})
	}
	for i := range 50 {
		calls = append(calls, workload.Call{RPC: workload.RPCDelete, Start: time.Duration(i) * 200 * time.Millisecond,
			Latency: 2 * time.Millisecond, Code: codes.OK, Attempt: 1})
	}
	r := &Report{Mode: "embedded", Outcome: "clean", Config: map[string]any{"volumes": 100}}
	r.FromCalls(calls, ops, []workload.Event{{At: 5 * time.Second, Kind: "kill", Note: "pid 1"}}, 10*time.Second)
	r.Audits = []Audit{{Name: "final", Report: audit.Check(audit.Inputs{})}}
	return r
}

func TestLatencyPercentilesHistogramAndRetries(t *testing.T) {
	r := sample()
	create := r.RPCs[0]
	if create.Count != 110 || create.OK != 100 || create.Retries != 10 || create.ByCode["Aborted"] != 10 {
		t.Errorf("create calls %+v", create)
	}
	// 110 calls: 1..10 ms twice, 11..100 ms once. p50 is the 55th: 45 ms.
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"p50", create.P50, 0.045}, {"p99", create.P99, 0.099}, {"max", create.Max, 0.1},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	sum := 0
	for _, b := range create.Histogram {
		sum += b.Count
	}
	if sum != create.Count {
		t.Errorf("histogram holds %d of %d calls", sum, create.Count)
	}
	if op := r.Ops[0]; op.Count != 100 || op.Retries != 10 {
		t.Errorf("create operations %+v: want 100 with 10 retries", op)
	}
	if r.Retries() != 10 {
		t.Errorf("Retries() = %d", r.Retries())
	}
}

func TestTimelineCountsEveryAnswerOnce(t *testing.T) {
	r := sample()
	if r.Timeline.BucketSeconds != 0.1 {
		t.Errorf("bucket %v for a 10 s run, want 0.1", r.Timeline.BucketSeconds)
	}
	want := map[string]int{"CreateVolume OK": 100, "DeleteVolume OK": 50, "retryable errors": 10, "final errors": 0}
	for _, s := range r.Timeline.Series {
		n := 0
		for _, c := range s.Counts {
			n += c
		}
		if n != want[s.Name] {
			t.Errorf("series %s counts %d, want %d", s.Name, n, want[s.Name])
		}
	}
}

// The HTML page must open offline: no script, no external resource; and its
// charts are SVG.
func TestHTMLIsSelfContainedWithSVGCharts(t *testing.T) {
	r := sample()
	path := filepath.Join(t.TempDir(), "r.html")
	if err := r.WriteHTML(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if n := strings.Count(page, "<svg"); n != 5 {
		t.Errorf("%d SVG charts, want 5 (timeline and four histograms)", n)
	}
	if strings.Contains(page, "<script") {
		t.Error("the page has a script")
	}
	for _, ref := range regexp.MustCompile(`(?:src|href)="[^"]*"|https?://[^"\s]*`).FindAllString(page, -1) {
		if ref != "http://www.w3.org/2000/svg" {
			t.Errorf("external reference %q", ref)
		}
	}
	for _, want := range []string{"driver killed", "CLEAN", "leaked access points"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

func TestJSONRoundTripsAndSummaryNamesEveryAuditFigure(t *testing.T) {
	r := sample()
	path := filepath.Join(t.TempDir(), "r.json")
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.RPCs[0].P99 != r.RPCs[0].P99 || len(back.Audits) != 1 {
		t.Errorf("JSON lost figures: %+v", back.RPCs[0])
	}
	var sb strings.Builder
	r.Summary(&sb)
	for _, f := range r.Audits[0].Report.Figures() {
		if !strings.Contains(sb.String(), f.Name) {
			t.Errorf("summary lacks %q:\n%s", f.Name, sb.String())
		}
	}
}

// The page, opened in a browser 1280 and 800 px wide, fits the window: no
// element reaches past its container (the timeline chart was a fixed 984
// px), numbers are right-aligned and text left-aligned; the configuration
// writes durations as durations.
func TestHTMLFitsTheWindowAt1280And800Pixels(t *testing.T) {
	r := sample()
	r.Config = struct {
		Volumes  int           `json:"volumes"`
		Timeout  time.Duration `json:"timeout"`
		Settle   time.Duration `json:"settle"`
		Backoffs []time.Duration
	}{100, 30 * time.Minute, 1500 * time.Millisecond, []time.Duration{time.Hour + 30*time.Minute}}
	path := filepath.Join(t.TempDir(), "stress-report.html")
	if err := r.WriteHTML(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"timeout": "30m"`, `"settle": "1.5s"`, `"1h30m"`} {
		if !strings.Contains(html.UnescapeString(string(b)), want) {
			t.Errorf("the configuration lacks %s", want)
		}
	}
	if strings.Contains(string(b), "1800000000000") {
		t.Error("the configuration writes 30 minutes in nanoseconds")
	}
	browsertest.Check(t, path, 1280, 800)
}
