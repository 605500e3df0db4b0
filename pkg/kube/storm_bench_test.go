package kube_test

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

// TestStormBenchmark (make bench) runs issue 47's three storms against
// this driver with the record in Leases (default flags, kubetest's API
// server in this process, answering at once), with --journal=file, and
// against upstream's driver v3.4.1 (EFS_BENCH_UPSTREAM, its binary: make
// bench builds it from ../shared/fixtures as make e2e does), each storm
// EFS_BENCH_RUNS times (3) per driver, the drivers in turn, and writes
// the medians to EFS_BENCH_DOC (docs/benchmarks.md), newest first.
//
// Every driver meets the same emulator (the stress tool's: in-process for
// this driver, efs-emulator for upstream's, which takes its EFS endpoint
// from the environment; neither evaluates IAM) and the same workload
// (seed r+1 in run r). Both drivers run without root directory removal,
// their default and the charts'. EFS_BENCH_BIN: the built binaries;
// EFS_BENCH_VOLUMES (200), EFS_BENCH_BUCKET_VOLUMES (200) and
// EFS_BENCH_FAULT_VOLUMES (60): the storms' sizes.
func TestStormBenchmark(t *testing.T) {
	bins, doc := os.Getenv("EFS_BENCH_BIN"), os.Getenv("EFS_BENCH_DOC")
	if bins == "" || doc == "" {
		t.Skip("EFS_BENCH_BIN=<dir of built binaries> EFS_BENCH_DOC=<file> run it (make bench)")
	}
	atoi := func(name string, def int) int {
		if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
			return n
		}
		return def
	}
	runs := atoi("EFS_BENCH_RUNS", 3)
	plain, bucket, faulty := atoi("EFS_BENCH_VOLUMES", 200), atoi("EFS_BENCH_BUCKET_VOLUMES", 200), atoi("EFS_BENCH_FAULT_VOLUMES", 60)
	storms := []storm{
		{fmt.Sprintf("%d volumes, 100 workers, no faults", plain),
			[]string{"--volumes=" + strconv.Itoa(plain), "--concurrency=100", "--fault-profile=none"}},
		{fmt.Sprintf("token bucket, Create/DeleteAccessPoint 20/s; %d volumes, 100 workers", bucket),
			[]string{"--volumes=" + strconv.Itoa(bucket), "--concurrency=100", "--fault-profile=token-bucket"}},
		{fmt.Sprintf("15%% lost answers, 5%% 429, 3%% 500, 3 callers a volume; %d volumes, 60 workers", faulty),
			[]string{"--volumes=" + strconv.Itoa(faulty), "--concurrency=60", "--fault-profile=fault-mix",
				"--duplicate-rate=1", "--duplicate-callers=3", "--timeout=10s"}},
	}
	srv := kubetest.Start(t)
	drivers := benchDrivers(srv)
	if up := os.Getenv("EFS_BENCH_UPSTREAM"); up != "" {
		drivers = append(drivers, benchDriver{name: "upstream", upstream: up})
	} else {
		t.Log("EFS_BENCH_UPSTREAM unset: no upstream column")
	}
	b := &stormBench{t: t, bins: bins, srv: srv, ecs: ecsTaskMetadata(t)}
	// A record passes the handover fence once (its creates wait about
	// 17 s): not what a storm measures.
	b.run(drivers[0], storm{"warm-up", []string{"--volumes=20", "--concurrency=20", "--fault-profile=none"}}, 0)
	began, startLoad := time.Now(), loadAverage()
	var results [][][]stormRun // storm, driver, run
	for _, s := range storms {
		byDriver := make([][]stormRun, len(drivers))
		for r := range runs {
			for i, d := range drivers {
				byDriver[i] = append(byDriver[i], b.run(d, s, r))
			}
		}
		results = append(results, byDriver)
	}
	section := stormTable(storms, drivers, results, runs, time.Since(began), startLoad)
	t.Log("\n" + section)
	old, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	head, rest, _ := strings.Cut(string(old), "\n")
	if err := os.WriteFile(doc, []byte(head+"\n\n"+section+rest), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, byDriver := range results {
		for j, d := range drivers[:2] {
			for r, run := range byDriver[j] {
				if run.findings != 0 || run.outcome != "clean" {
					t.Errorf("%s, %s, run %d: outcome %s, %d findings (%s)", storms[i].name, d.name, r, run.outcome, run.findings, run.out)
				}
			}
		}
	}
}

type storm struct {
	name string
	args []string
}

// benchDriver is a driver under test: this one embedded with args, or
// upstream's binary.
type benchDriver struct {
	name     string
	args     []string
	upstream string
}

// benchDrivers are this driver with the record in srv's Leases (default
// flags, as the chart runs it) and with --journal=file, both without root
// directory removal (the default).
func benchDrivers(srv *kubetest.Server) []benchDriver {
	return []benchDriver{
		{name: "leases", args: []string{"--journal=kubernetes", "--kube-api-url=" + srv.URL, "--kube-token-file=" + srv.TokenFile("controller"),
			"--kube-ca-file=" + srv.CAFile, "--leader-election-namespace=default", "--delete-access-point-root-dir=false"}},
		{name: "file", args: []string{"--journal=file", "--delete-access-point-root-dir=false"}},
	}
}

type stormRun struct {
	pairs    float64 // create+delete pairs per second
	outcome  string
	findings int
	requests int     // Lease requests
	gets     int     // of which reads (GET, list)
	bytes    int64   // their bodies
	peak     int     // Lease requests in the busiest second
	peakKB   float64 // and their bodies' KB
	answered int64   // the bodies of their answers
	created  int     // volumes created
	out      string  // the run's reports
	seconds  float64 // the phases'
	// CPU time of the run: the stress tool's process and what it waited
	// for (the driver, the emulator in it), and this process's (the API
	// server, while the run lasted).
	toolCPU, apiCPU time.Duration
}

type stormBench struct {
	t    *testing.T
	bins string
	srv  *kubetest.Server
	ecs  string
}

func (b *stormBench) run(d benchDriver, s storm, r int) stormRun {
	t := b.t
	out := t.TempDir()
	args := append([]string{"--chaos=false", "--progress=false", "--iam-policy=none", "--seed=" + strconv.Itoa(r+1),
		"--out-dir=" + out}, s.args...)
	var env []string
	if d.upstream == "" {
		args = append(args, "--embedded", "--driver-binary="+filepath.Join(b.bins, "efs-csi-driver"))
		for _, a := range d.args {
			args = append(args, "--driver-arg="+a)
		}
	} else {
		more, e, stop := b.upstream(d.upstream, out)
		defer stop()
		args, env = append(args, more...), e
	}
	before, connsBefore := len(b.srv.Requests()), b.srv.Connections()
	selfBefore := cpuSelf()
	cmd := exec.CommandContext(t.Context(), filepath.Join(b.bins, "efs-csi-stress"), args...)
	cmd.Env = env
	// Exit 1 is findings, 3 claims without a volume: the report says.
	if o, err := cmd.CombinedOutput(); err != nil {
		if code := cmd.ProcessState.ExitCode(); code != 1 && code != 3 {
			t.Fatalf("%s, %s: %v\n%s", s.name, d.name, err, o)
		}
	}
	apiCPU := cpuSelf() - selfBefore
	toolCPU := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	raw, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if keep := os.Getenv("EFS_PROBE_KEEP"); keep != "" { // TestStormProbe's
		_ = os.WriteFile(filepath.Join(keep, fmt.Sprintf("%s-%d.json", d.name, r)), raw, 0o644)
		if log, err := os.ReadFile(filepath.Join(out, "driver.log")); err == nil {
			_ = os.WriteFile(filepath.Join(keep, fmt.Sprintf("%s-%d.log", d.name, r)), log, 0o644)
		}
	}
	var rep struct {
		Outcome string
		Volumes struct{ Created int }
		Phases  []struct {
			Name    string
			Seconds float64
		}
		Audits []struct {
			Report map[string]json.RawMessage
		}
		Started time.Time
		Events  []struct {
			Seconds    float64
			Kind, Note string
		}
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	run := stormRun{outcome: rep.Outcome, created: rep.Volumes.Created, out: out, toolCPU: toolCPU, apiCPU: apiCPU}
	var phases []string
	for _, p := range rep.Phases {
		run.seconds += p.Seconds
		phases = append(phases, fmt.Sprintf("%s %.2f s", p.Name, p.Seconds))
	}
	run.pairs = float64(run.created) / run.seconds
	for _, a := range rep.Audits {
		for _, v := range a.Report {
			var list []json.RawMessage
			if json.Unmarshal(v, &list) == nil {
				run.findings += len(list)
			}
		}
	}
	type second struct {
		n     int
		bytes int64
	}
	perSecond := map[int64]second{}
	// The phases' spans (each from its start to the next event's), to
	// count each one's Lease requests: a create makes its record writes
	// one by one, a delete too, but creates are spread over a longer
	// phase, so their writes batch less.
	phaseOf := func(at time.Time) string {
		name := ""
		for _, e := range rep.Events {
			if at.Before(rep.Started.Add(time.Duration(e.Seconds * float64(time.Second)))) {
				break
			}
			if name = ""; e.Kind == "phase" {
				name = e.Note
			}
		}
		return name
	}
	byPhase := map[string]int{}
	for _, q := range b.srv.Requests()[before:] {
		if strings.Contains(q.Path, "/leases") {
			byPhase[phaseOf(q.At)]++
			run.requests++
			if q.Method == http.MethodGet {
				run.gets++
			}
			run.bytes += max(q.Bytes, 0)
			run.answered += q.Answered
			c := perSecond[q.At.Unix()]
			perSecond[q.At.Unix()] = second{c.n + 1, c.bytes + max(q.Bytes, 0)}
		}
	}
	for _, c := range perSecond {
		if c.n > run.peak {
			run.peak, run.peakKB = c.n, float64(c.bytes)/1024
		}
	}
	t.Logf("BENCH %s | %s | run %d: %.1f pairs/s, %d created in %.1f s (%s), %s, %d findings, %d Lease requests (%d reads, %d KB, %d KB answered, peak %d/s; create phase %d, delete phase %d; %d connections), CPU %.2f ms a volume (tool and driver %.2f, API server %.2f)",
		s.name, d.name, r, run.pairs, run.created, run.seconds, strings.Join(phases, ", "), run.outcome, run.findings, run.requests, run.gets, run.bytes>>10, run.answered>>10, run.peak, byPhase["create"], byPhase["delete"], b.srv.Connections()-connsBefore,
		perVolumeMS(run.toolCPU+run.apiCPU, run.created), perVolumeMS(run.toolCPU, run.created), perVolumeMS(run.apiCPU, run.created))
	return run
}

// upstream is the stress tool's flags and environment for a run of
// upstream's driver bin: an efs-emulator of its own (one file system, the
// run's data directory) and the driver started by the tool, in a mount
// namespace whose /etc/amazon and /var/amazon are empty (its image's
// layout: the configuration it writes stays there), with the ECS task
// metadata stub as its instance identity.
func (b *stormBench) upstream(bin, out string) (args, env []string, stop func()) {
	t := b.t
	work := t.TempDir()
	port := freePort(t)
	fsID := "fs-" + randomHex(17)
	emu := exec.Command(filepath.Join(b.bins, "efs-emulator"), "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--data-dir", filepath.Join(work, "data"), "--file-system", fsID)
	logf, err := os.Create(filepath.Join(out, "emulator.log"))
	if err != nil {
		t.Fatal(err)
	}
	emu.Stdout, emu.Stderr = logf, logf
	if err := emu.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() {
		_ = emu.Process.Kill()
		_ = emu.Wait()
		logf.Close()
	}
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if i == 100 {
			stop()
			t.Fatalf("efs-emulator does not listen: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sock, tmp := filepath.Join(work, "csi.sock"), filepath.Join(work, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		stop()
		t.Fatal(err)
	}
	driver := fmt.Sprintf(`exec unshare -m --propagation private sh -c 'mkdir -p /etc/amazon && mount -t tmpfs none /etc/amazon && `+
		`mkdir /etc/amazon/efs /etc/amazon/efs-static-files && { ! [ -d /var/amazon ] || mount -t tmpfs none /var/amazon; } && `+
		`exec %s --endpoint=unix://%s --delete-access-point-root-dir=false --vol-metrics-opt-in=false'`, bin, sock)
	env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "AWS_") })
	env = append(env, "AWS_ENDPOINT_URL_EFS="+endpoint, "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=bench",
		"AWS_SECRET_ACCESS_KEY=bench", "AWS_EC2_METADATA_DISABLED=true", "ECS_CONTAINER_METADATA_URI_V4="+b.ecs)
	return []string{"--endpoint=unix://" + sock, "--efs-endpoint=" + endpoint, "--file-system=" + fsID, "--exclusive",
		"--tmp-dir=" + tmp, "--driver-cmd=" + driver}, env, stop
}

// ecsTaskMetadata serves what upstream's driver asks the ECS task
// metadata endpoint v4 for: outside AWS, the one instance identity it
// takes without IMDS or a Node (as make e2e's stub).
func ecsTaskMetadata(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"Cluster": "bench",
			"TaskARN":          "arn:aws:ecs:us-east-1:111122223333:task/bench/0123456789abcdef0123456789abcdef",
			"AvailabilityZone": "us-east-1a"})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomHex(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// stormTable is the section make bench writes: the medians, each run's
// figures, the Lease record's cost to the API server, and the conditions.
func stormTable(storms []storm, drivers []benchDriver, results [][][]stormRun, runs int, took time.Duration, startLoad string) string {
	median := func(rs []stormRun, f func(stormRun) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v) == 0 {
			return 0
		}
		return v[len(v)/2]
	}
	pairs := func(r stormRun) float64 { return r.pairs }
	commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	dirty, _ := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output()
	state := ""
	if len(dirty) > 0 {
		state = " (with uncommitted changes)"
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "## make bench, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&sb, "Commit %s%s. Machine: %d cores (%s), load average (1, 5, 15 min) %s at the start, %s at the end. %d runs of each storm per driver, the drivers in turn; %s in all.\n\n",
		strings.TrimSpace(string(commit)), state, runtime.NumCPU(), cpuModel(), startLoad, loadAverage(), runs, took.Round(time.Second))
	sb.WriteString("Create+delete pairs/s, median (each run); \"Leases\" is this driver with default flags and the record in an API server that answers at once, \"file\" `--journal=file`, upstream v3.4.1 built from its source. Findings: the audit's, per run.\n\n")
	sb.WriteString("| storm |")
	for _, d := range drivers {
		fmt.Fprintf(&sb, " %s |", d.name)
	}
	sb.WriteString(" Leases / file | Leases / upstream | findings per run (Leases; file; upstream) |\n|---|")
	for range drivers {
		sb.WriteString("---|")
	}
	sb.WriteString("---|---|---|\n")
	for i, s := range storms {
		fmt.Fprintf(&sb, "| %s |", s.name)
		med := make([]float64, len(drivers))
		for j := range drivers {
			med[j] = median(results[i][j], pairs)
			var each []string
			for _, r := range results[i][j] {
				each = append(each, fmt.Sprintf("%.1f", r.pairs))
			}
			fmt.Fprintf(&sb, " %.1f (%s) |", med[j], strings.Join(each, ", "))
		}
		ratio := func(a, b int) string {
			if b >= len(med) || med[b] == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", med[a]/med[b])
		}
		var findings []string
		for j := range drivers {
			var each []string
			for _, r := range results[i][j] {
				each = append(each, strconv.Itoa(r.findings))
			}
			findings = append(findings, strings.Join(each, ", "))
		}
		fmt.Fprintf(&sb, " %s | %s | %s |\n", ratio(0, 1), ratio(0, 2), strings.Join(findings, "; "))
	}
	sb.WriteString("\nThe API server's cost of the Lease record (medians of the Leases runs): Lease requests and the bytes of their bodies (protobuf) per created volume, over the run and in its busiest second (and of their answers: a write's is a Table of about 1.4 KB; the client's rate flag, `--journal-kube-api-qps` 300 burst 600, bounds the rate however fast EFS answers). CPU per volume is over each run's processes' whole lives (start, storm, audit): the stress tool with the emulator and the driver it ran, and the API server's (kubetest's, HTTP/1.1 over TLS, in the benchmark's process while the run lasted), which on a cluster runs on other machines.\n\n")
	sb.WriteString("| storm | Lease requests per volume (of which reads) | KB sent per volume (answered) | busiest second: requests, KB sent | CPU ms per volume, Leases: stress tool and driver; API server | CPU ms per volume, file |\n|---|---|---|---|---|---|\n")
	for i, s := range storms {
		rs := results[i][0]
		perVol := median(rs, func(r stormRun) float64 { return float64(r.requests) / float64(max(r.created, 1)) })
		reads := median(rs, func(r stormRun) float64 { return float64(r.gets) / float64(max(r.created, 1)) })
		kb := median(rs, func(r stormRun) float64 { return float64(r.bytes) / 1024 / float64(max(r.created, 1)) })
		answered := median(rs, func(r stormRun) float64 { return float64(r.answered) / 1024 / float64(max(r.created, 1)) })
		peak := median(rs, func(r stormRun) float64 { return float64(r.peak) })
		peakKB := median(rs, func(r stormRun) float64 { return r.peakKB })
		tool := median(rs, func(r stormRun) float64 { return perVolumeMS(r.toolCPU, r.created) })
		api := median(rs, func(r stormRun) float64 { return perVolumeMS(r.apiCPU, r.created) })
		file := median(results[i][1], func(r stormRun) float64 { return perVolumeMS(r.toolCPU, r.created) })
		fmt.Fprintf(&sb, "| %s | %.2f (%.2f) | %.1f (%.1f) | %.0f, %.0f | %.2f; %.2f | %.2f |\n", s.name, perVol, reads, kb, answered, peak, peakKB, tool, api, file)
	}
	sb.WriteString("\n```sh\nmake bench   # EFS_BENCH_RUNS=3 EFS_BENCH_VOLUMES=200 EFS_BENCH_BUCKET_VOLUMES=200 EFS_BENCH_FAULT_VOLUMES=60\n```\n\n")
	return sb.String()
}

// cpuSelf is this process's CPU time so far.
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func perVolumeMS(d time.Duration, volumes int) float64 {
	return float64(d) / float64(time.Millisecond) / float64(max(volumes, 1))
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return cmp.Or(runtime.GOARCH, "unknown")
}

func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b) + " - - -")[:3], " ")
}

// TestStormProbe runs one storm against one configuration of this driver,
// for a question make bench does not ask (another concurrency, a driver
// flag): EFS_PROBE_BIN (the built binaries) runs it, EFS_PROBE_RECORD
// "leases" (default) or "file", EFS_PROBE_ARGS the stress tool's flags
// after "--volumes=200 --concurrency=100 --fault-profile=none",
// EFS_PROBE_DRIVER_ARGS the driver's after its record's, EFS_PROBE_RUNS
// (3) the runs after the warm-up. It logs each run as make bench does and
// writes nothing but, when EFS_PROBE_KEEP names a directory, each run's
// stress report there (<record>-<run>.json: latencies, codes, timeline).
func TestStormProbe(t *testing.T) {
	bins := os.Getenv("EFS_PROBE_BIN")
	if bins == "" {
		t.Skip("EFS_PROBE_BIN=<dir of built binaries> runs it")
	}
	runs, err := strconv.Atoi(cmp.Or(os.Getenv("EFS_PROBE_RUNS"), "3"))
	if err != nil {
		t.Fatal(err)
	}
	srv := kubetest.Start(t)
	d := benchDrivers(srv)[0]
	if os.Getenv("EFS_PROBE_RECORD") == "file" {
		d = benchDrivers(srv)[1]
	}
	d.args = append(d.args, strings.Fields(os.Getenv("EFS_PROBE_DRIVER_ARGS"))...)
	b := &stormBench{t: t, bins: bins, srv: srv}
	b.run(d, storm{"warm-up", []string{"--volumes=20", "--concurrency=20", "--fault-profile=none"}}, 0)
	s := storm{"probe", append([]string{"--volumes=200", "--concurrency=100", "--fault-profile=none"},
		strings.Fields(os.Getenv("EFS_PROBE_ARGS"))...)}
	for r := range runs {
		b.run(d, s, r)
	}
}
