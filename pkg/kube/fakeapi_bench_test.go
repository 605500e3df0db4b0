package kube_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

// TestRecordBenchmarkQuickAPI (make bench-record-quick) runs the quiet
// storm through the stress tool (100 workers, no faults, no kills) with
// the record in a file and in Leases of an API server that answers at
// once (kubetest's, in this process, JSON), alternating: pairs per second
// and Lease requests per pair. EFS_BENCH_BIN: the built binaries;
// EFS_BENCH_VOLUMES (default 200), EFS_BENCH_RUNS (default 2),
// EFS_BENCH_DRIVER_ARGS: more driver flags for both (e.g.
// --delete-access-point-root-dir=false: as root the stress tool turns root
// removal on, whose listing-lag wait bounds both records alike);
// EFS_BENCH_STRESS_ARGS: stress flags after the quiet defaults, which they
// override (e.g. --chaos=true --fault-profile=fault-mix --timeout=10s).
func TestRecordBenchmarkQuickAPI(t *testing.T) {
	bins := os.Getenv("EFS_BENCH_BIN")
	if bins == "" {
		t.Skip("EFS_BENCH_BIN=<dir of built binaries> runs it (make bench-record-quick)")
	}
	atoi := func(name string, def int) int {
		if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
			return n
		}
		return def
	}
	volumes, runs := atoi("EFS_BENCH_VOLUMES", 200), atoi("EFS_BENCH_RUNS", 2)
	srv := kubetest.Start(t)
	kubeArgs := []string{"--journal=kubernetes", "--kube-api-url=" + srv.URL, "--kube-token-file=" + srv.TokenFile("controller"),
		"--kube-ca-file=" + srv.CAFile, "--leader-election-namespace=default"}
	leaseRequests := func() int {
		n := 0
		for _, r := range srv.Requests() {
			if strings.Contains(r.Path, "/leases") {
				n++
			}
		}
		return n
	}
	for i := range runs {
		for _, rec := range []struct {
			name string
			args []string
		}{{"file", []string{"--journal=file"}}, {"leases", kubeArgs}} {
			out := t.TempDir()
			args := []string{"--embedded", "--driver-binary=" + filepath.Join(bins, "efs-csi-driver"),
				"--volumes=" + strconv.Itoa(volumes), "--concurrency=100", "--fault-profile=none", "--chaos=false",
				"--progress=false", "--seed=7", "--out-dir=" + out}
			args = append(args, strings.Fields(os.Getenv("EFS_BENCH_STRESS_ARGS"))...)
			for _, a := range append(rec.args, strings.Fields(os.Getenv("EFS_BENCH_DRIVER_ARGS"))...) {
				args = append(args, "--driver-arg="+a)
			}
			before := leaseRequests()
			if b, err := exec.CommandContext(t.Context(), filepath.Join(bins, "efs-csi-stress"), args...).CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			requests := leaseRequests() - before
			raw, err := os.ReadFile(filepath.Join(out, "report.json"))
			if err != nil {
				t.Fatal(err)
			}
			var r struct {
				Outcome string
				Volumes struct{ Created, Deleted int }
				Phases  []struct {
					Name       string
					Seconds    float64
					Throughput float64 `json:"volumesPerSecond"`
				}
			}
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatal(err)
			}
			secs, phases := 0.0, ""
			for _, p := range r.Phases {
				secs += p.Seconds
				phases += fmt.Sprintf(" %s %.1f vol/s", p.Name, p.Throughput)
			}
			t.Logf("BENCH record=%s run=%d volumes=%d workers=100 %s: %.1f pairs/s (%s), %.2f Lease requests/pair, outcome %s",
				rec.name, i, volumes, os.Getenv("EFS_BENCH_STRESS_ARGS"), float64(r.Volumes.Created)/secs, strings.TrimSpace(phases), float64(requests)/float64(r.Volumes.Created), r.Outcome)
			if r.Outcome != "clean" {
				t.Errorf("%s: outcome %s", rec.name, r.Outcome)
			}
		}
	}
}
