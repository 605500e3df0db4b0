package stress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/internal/stress/audit"
	"github.com/efs-csi/efs-csi-driver/internal/stress/report"
)

var driverBuild struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if driverBuild.dir != "" {
		os.RemoveAll(driverBuild.dir)
	}
	os.Exit(code)
}

// buildDriver compiles the real driver once per test binary: bin/ may be
// stale, and the build cache makes this cheap.
func buildDriver(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the driver")
	}
	b := &driverBuild
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "stress-driver-"); b.err != nil {
			return
		}
		b.bin = filepath.Join(b.dir, "efs-csi-driver")
		cmd := exec.Command("go", "build", "-o", b.bin, "github.com/efs-csi/efs-csi-driver/cmd/efs-csi-driver")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build driver: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

func embedded(t *testing.T, bin string) Config {
	cfg := Default()
	cfg.Embedded = true
	cfg.DriverBinary = bin
	cfg.OutDir = t.TempDir()
	cfg.Progress = Off
	cfg.Stdout, cfg.Stderr = io.Discard, io.Discard
	cfg.Volumes, cfg.Concurrency = 40, 8
	cfg.DuplicateRate, cfg.DeleteDuringCreateRate = 0.25, 0.25
	cfg.FaultProfile, cfg.FaultRate = ProfileLostAnswers, 0.1
	cfg.Settle = 10 * time.Second
	cfg.MaxDuration = time.Minute
	return cfg
}

// The tool end to end with the real driver and emulator: duplicates,
// deletes during provisioning and lost answers, and the promise that a
// correct driver comes out with every audit figure at zero and every report
// written.
func TestEmbeddedRunWithLostAnswersIsCleanAndReported(t *testing.T) {
	cfg := embedded(t, buildDriver(t))
	cfg.Chaos = Off
	var summary strings.Builder
	cfg.Stdout = &summary
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, summary.String())
	}
	if rep.Outcome != "clean" || rep.Findings() != 0 || len(rep.Audits) != 2 {
		t.Fatalf("outcome %s with %d findings in %d audits\n%s", rep.Outcome, rep.Findings(), len(rep.Audits), summary.String())
	}
	v := rep.Volumes
	if v.Requested != 40 || v.Created+v.Failed != 40 || v.Deleted != v.Created || v.Undeleted != 0 {
		t.Errorf("volumes %+v: want all 40 answered and every created one deleted", v)
	}
	if v.Duplicated == 0 || v.DeleteDuringCreate == 0 {
		t.Errorf("volumes %+v: the workload drew no duplicates or deletes during provisioning", v)
	}
	checkpoint := rep.Audits[0].Report
	if checkpoint.LiveVolumes != v.Created-v.DeleteDuringCreate && v.Failed == 0 {
		t.Errorf("checkpoint saw %d live volumes, want %d", checkpoint.LiveVolumes, v.Created-v.DeleteDuringCreate)
	}
	if checkpoint.Markers != checkpoint.LiveVolumes {
		t.Errorf("%d markers checked for %d live volumes", checkpoint.Markers, checkpoint.LiveVolumes)
	}
	if rep.Emulator.Counts["CreateAccessPoint"] == 0 || !rep.Driver.Scraped {
		t.Errorf("emulator counts %v, driver scraped %v", rep.Emulator.Counts, rep.Driver.Scraped)
	}
	b, err := os.ReadFile(rep.Files.JSON)
	if err != nil {
		t.Fatal(err)
	}
	var back report.Report
	if err := json.Unmarshal(b, &back); err != nil || back.Outcome != "clean" {
		t.Errorf("JSON report: %v, outcome %q", err, back.Outcome)
	}
	if html, err := os.ReadFile(rep.Files.HTML); err != nil || !strings.Contains(string(html), "<svg") {
		t.Errorf("HTML report: %v", err)
	}
	if !strings.Contains(summary.String(), "result: CLEAN") {
		t.Errorf("summary:\n%s", summary.String())
	}
}

// A run whose every create is refused (the emulator's IAM policy denies
// CreateAccessPoint) is no clean run: before, it printed CLEAN (nothing
// leaked, nothing lost: nothing made) and exited 0. Without faults, one
// claim without a volume is enough; with a profile whose faults the driver
// may pass on as final errors, only every claim failing is.
func TestARunWhoseCreatesFailIsNotClean(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "deny-create.json")
	if err := os.WriteFile(policy, []byte(`{"Version": "2012-10-17", "Statement": [
		{"Effect": "Allow", "Action": "elasticfilesystem:*", "Resource": "*"},
		{"Effect": "Deny", "Action": "elasticfilesystem:CreateAccessPoint", "Resource": "*"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := buildDriver(t)
	for _, profile := range []string{ProfileNone, ProfileErrors} {
		t.Run(profile, func(t *testing.T) {
			cfg := embedded(t, bin)
			cfg.Chaos, cfg.IAMPolicy = Off, policy
			cfg.Volumes, cfg.DuplicateRate, cfg.DeleteDuringCreateRate = 8, 0, 0
			cfg.FaultProfile, cfg.FaultRate = profile, 0.01
			var summary strings.Builder
			cfg.Stdout = &summary
			rep, err := Run(context.Background(), cfg)
			if !errors.Is(err, ErrCreatesFailed) || rep.Outcome != "creates-failed" {
				t.Fatalf("run: %v, outcome %q; want %v\n%s", err, rep.Outcome, ErrCreatesFailed, summary.String())
			}
			if v := rep.Volumes; v.Unprovisioned != 8 || v.Created != 0 {
				t.Errorf("volumes %+v: want all 8 unprovisioned", v)
			}
			if !strings.Contains(summary.String(), "result: CREATES-FAILED") {
				t.Errorf("summary:\n%s", summary.String())
			}
		})
	}
}

// An s3files-ap class: the emulator serves the run's file system through
// the S3 Files API, the driver provisions through it (with lost answers),
// and the audit lists S3 Files access points: a correct driver comes out
// clean, and nothing went through EFS.
func TestEmbeddedS3FilesRunIsClean(t *testing.T) {
	cfg := embedded(t, buildDriver(t))
	cfg.Chaos = Off
	cfg.Parameters["provisioningMode"] = "s3files-ap"
	var summary strings.Builder
	cfg.Stdout = &summary
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, summary.String())
	}
	if rep.Outcome != "clean" || rep.Findings() != 0 || len(rep.Audits) != 2 {
		t.Fatalf("outcome %s with %d findings in %d audits\n%s", rep.Outcome, rep.Findings(), len(rep.Audits), summary.String())
	}
	if v := rep.Volumes; v.Created == 0 || v.Deleted != v.Created || v.Undeleted != 0 {
		t.Errorf("volumes %+v: want created ones all deleted", v)
	}
	if c := rep.Emulator.Counts; c["S3Files.CreateAccessPoint"] == 0 || c["CreateAccessPoint"] != 0 {
		t.Errorf("emulator counts %v: want S3 Files creates and no EFS ones", c)
	}
	if cp := rep.Audits[0].Report; cp.AccessPoints == 0 || cp.Markers != cp.LiveVolumes {
		t.Errorf("checkpoint audit saw %d access points, %d markers for %d live volumes", cp.AccessPoints, cp.Markers, cp.LiveVolumes)
	}
}

// An efs-dir class with driver kills, duplicates, deletes during
// provisioning: no directory without a volume (the final audit, with root
// removal on as root), no volume without its directory, no GID twice, and
// nothing through CreateAccessPoint.
func TestEmbeddedDirRunWithKillsIsClean(t *testing.T) {
	cfg := embedded(t, buildDriver(t))
	cfg.Chaos, cfg.ChaosInterval = On, 300*time.Millisecond
	cfg.Parameters["provisioningMode"] = "efs-dir"
	var summary strings.Builder
	cfg.Stdout = &summary
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, summary.String())
	}
	if rep.Outcome != "clean" || rep.Findings() != 0 || len(rep.Audits) != 2 {
		t.Fatalf("outcome %s with %d findings in %d audits\n%s", rep.Outcome, rep.Findings(), len(rep.Audits), summary.String())
	}
	if v := rep.Volumes; v.Created == 0 || v.Deleted != v.Created || v.Undeleted != 0 {
		t.Errorf("volumes %+v: want created ones all deleted", v)
	}
	if c := rep.Emulator.Counts; c["CreateAccessPoint"] != 0 {
		t.Errorf("emulator counts %v: want no CreateAccessPoint", c)
	}
	if cp := rep.Audits[0].Report; cp.LiveVolumes == 0 || cp.Markers != cp.LiveVolumes {
		t.Errorf("checkpoint audit saw %d markers for %d live volumes", cp.Markers, cp.LiveVolumes)
	}
}

// A class over two file systems, each with room for less than the run's
// volumes: the driver places volumes on both (past the first one's
// limit), the audit lists both and comes out clean. Room for 44 of the
// 40 volumes: placements that count at once are not reserved against each
// other (docs/placement.md, "Several file systems per class": the surplus
// answers RESOURCE_EXHAUSTED, which the tool does not retry), and with no
// room to spare one run in a loaded make test saw one.
func TestEmbeddedClassOverTwoFileSystemsIsClean(t *testing.T) {
	cfg := embedded(t, buildDriver(t))
	cfg.Chaos = Off
	cfg.FileSystems, cfg.AccessPointLimit = 2, 22
	var summary strings.Builder
	cfg.Stdout = &summary
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, summary.String())
	}
	if rep.Outcome != "clean" || rep.Findings() != 0 || len(rep.Audits) != 2 {
		t.Fatalf("outcome %s with %d findings in %d audits\n%s", rep.Outcome, rep.Findings(), len(rep.Audits), summary.String())
	}
	if v := rep.Volumes; v.Created != v.Requested || v.Failed != 0 {
		t.Errorf("volumes %+v: want all %d created", v, v.Requested)
	}
	if cp := rep.Audits[0].Report; cp.AccessPoints <= cfg.AccessPointLimit {
		t.Errorf("checkpoint saw %d access points: not past one file system's limit of %d", cp.AccessPoints, cfg.AccessPointLimit)
	}
}

// The remote mode, with the driver run by --driver-cmd so that chaos can
// kill it, faults set through the emulator's control endpoint, and markers
// through its data directory. Every retried create must find its access
// point and every retried delete finish: no leak, nothing missing, no GID
// twice, no lost data, no temporary mount left, the driver back at rest.
func TestRemoteRunUnderChaosLosesAndLeaksNothing(t *testing.T) {
	bin := buildDriver(t)
	const fsID = "fs-0123456789abcdef0"
	dataDir := t.TempDir()
	efsURL, _ := emulatortest.Start(t, emulator.Config{DataDir: dataDir, FileSystems: []string{fsID}})
	work, err := os.MkdirTemp("", "stress-remote-") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	tmp := filepath.Join(work, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before RemoveAll: never recurse into a mount a killed driver left
		mounts, _ := audit.ProcessTempMounts(tmp)
		for _, m := range mounts {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
	})
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(work, "csi.sock")
	cmd := fmt.Sprintf("AWS_ENDPOINT_URL_EFS=%s AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x "+
		"exec %s --endpoint unix://%s --mode controller --node-id stress --local-root %s --tmp-dir %s "+
		"--http-endpoint 127.0.0.1:%d", efsURL, bin, sock, dataDir, tmp, port)
	if os.Geteuid() == 0 {
		cmd += " --delete-access-point-root-dir"
	}

	cfg := embedded(t, "")
	cfg.Embedded, cfg.DriverBinary = false, ""
	cfg.Endpoint, cfg.DriverCmd, cfg.EFSEndpoint, cfg.FileSystemID = "unix://"+sock, cmd, efsURL, fsID
	cfg.MetricsURL, cfg.TmpDir, cfg.DataDir, cfg.Exclusive = fmt.Sprintf("http://127.0.0.1:%d/metrics", port), tmp, dataDir, true
	// The driver answers 40 volumes in well under a second: kill often
	// enough that the run sees several kills (each interval starts once the
	// restarted driver serves).
	cfg.Chaos, cfg.ChaosInterval = On, 100*time.Millisecond
	var summary strings.Builder
	cfg.Stdout = &summary
	rep, err := Run(context.Background(), cfg)
	if err != nil && !errors.Is(err, ErrFindings) {
		t.Fatalf("run: %v\n%s", err, summary.String())
	}
	if rep.Mode != "remote" || rep.Chaos.Kills == 0 || rep.Emulator.Counts["CreateAccessPoint"] == 0 {
		t.Fatalf("mode %s, %d kills, emulator counts %v\n%s", rep.Mode, rep.Chaos.Kills, rep.Emulator.Counts, summary.String())
	}
	if rep.Chaos.UnexpectedExits != 0 {
		t.Errorf("driver exited by itself: %v", rep.Incidents)
	}
	if len(rep.Audits) != 2 || rep.Audits[0].Report.Markers == 0 || !rep.Audits[1].Report.GaugesChecked {
		t.Fatalf("audits incomplete\n%s", summary.String())
	}
	for _, a := range rep.Audits {
		for _, f := range a.Report.Figures() {
			if f.Value != 0 {
				t.Errorf("%s audit: %s = %d", a.Name, f.Name, f.Value)
			}
		}
	}
	if t.Failed() {
		t.Logf("reproduce: go run ./cmd/efs-csi-stress --embedded --volumes 40 --concurrency 8 --chaos-interval 300ms\n%s", summary.String())
	}
}

func TestConfigRejectsContradictions(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"remote without endpoint", func(c *Config) { c.FileSystemID = "fs-1" }, "--endpoint"},
		{"remote without file system", func(c *Config) { c.Endpoint = "unix:///x" }, "--file-system"},
		{"chaos without a driver to kill", func(c *Config) {
			c.Endpoint, c.FileSystemID, c.Chaos = "unix:///x", "fs-1", On
		}, "--chaos"},
		{"faults without an emulator", func(c *Config) {
			c.Endpoint, c.FileSystemID, c.FaultProfile = "unix:///x", "fs-1", ProfileErrors
		}, "--efs-endpoint"},
		{"unknown profile", func(c *Config) { c.Embedded, c.FaultProfile = true, "gremlins" }, "--fault-profile"},
		{"embedded with an endpoint", func(c *Config) { c.Embedded, c.Endpoint = true, "unix:///x" }, "--embedded"},
		{"zero concurrency", func(c *Config) { c.Embedded, c.Concurrency = true, 0 }, "--concurrency"},
		{"comparison of a driver this tool does not start", func(c *Config) {
			c.Endpoint, c.FileSystemID, c.CompareDriverArgs = "unix:///x", "fs-1", []string{"--adaptive-retry-mode=false"}
		}, "--compare-driver-arg needs --embedded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Default()
			cfg.Stderr = io.Discard
			tc.change(&cfg)
			if err := cfg.resolve(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("resolve() = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestModeDecidesDefaultFaultsAndChaos(t *testing.T) {
	for _, tc := range []struct {
		name      string
		change    func(*Config)
		wantFault string
		wantChaos Toggle
	}{
		{"embedded", func(c *Config) { c.Embedded = true }, ProfileLostAnswers, On},
		{"embedded, chaos off", func(c *Config) { c.Embedded, c.Chaos = true, Off }, ProfileLostAnswers, Off},
		{"remote", func(c *Config) { c.Endpoint, c.FileSystemID = "unix:///x", "fs-1" }, ProfileNone, Off},
		{"remote with a driver command", func(c *Config) {
			c.Endpoint, c.FileSystemID, c.DriverCmd, c.Chaos = "unix:///x", "fs-1", "true", On
		}, ProfileNone, On},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Default()
			cfg.Stderr = io.Discard
			tc.change(&cfg)
			if err := cfg.resolve(); err != nil {
				t.Fatal(err)
			}
			if cfg.FaultProfile != tc.wantFault || cfg.Chaos != tc.wantChaos {
				t.Errorf("profile %s chaos %v, want %s %v", cfg.FaultProfile, cfg.Chaos.String(), tc.wantFault, tc.wantChaos.String())
			}
		})
	}
}

func TestConfigJSONShowsDurationsAndHidesWriters(t *testing.T) {
	cfg := Default()
	cfg.Stdout, cfg.Chaos = io.Discard, On
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["timeout"] != "10s" || m["chaos"] != "true" || m["volumes"] != 300.0 {
		t.Errorf("timeout %v chaos %v volumes %v", m["timeout"], m["chaos"], m["volumes"])
	}
	for _, k := range []string{"Stdout", "Logger", "endpoint"} { // endpoint is empty: omitted
		if _, ok := m[k]; ok {
			t.Errorf("%s is in the JSON", k)
		}
	}
}

// One controller without GID verification, a GID range barely wider than
// the volumes, lost answers: the allocator alone keeps every GID unique
// (verification cannot hide an allocator defect here).
func TestUnverifiedStormInANarrowGIDRangeHasNoDuplicateGIDs(t *testing.T) {
	cfg := embedded(t, buildDriver(t))
	cfg.Chaos = Off
	cfg.Volumes, cfg.Concurrency = 40, 16
	cfg.Parameters["gidRangeStart"], cfg.Parameters["gidRangeEnd"] = "50000", "50045"
	cfg.DriverArgs = []string{"--gid-verify=never"}
	var summary strings.Builder
	cfg.Stdout = &summary
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range rep.Audits {
		if len(a.Report.DuplicateGIDs) != 0 || rep.Findings() != 0 {
			t.Fatalf("%s audit: duplicate GIDs %v, %d findings in all", a.Name, a.Report.DuplicateGIDs, rep.Findings())
		}
	}
	if rep.Volumes.Failed != 0 {
		t.Errorf("%d volumes failed\n%s", rep.Volumes.Failed, summary.String())
	}
}

// --compare-driver-arg: the workload runs twice with one seed, each time on
// a fresh emulator and driver, the second time with the flag added; the
// first run's report sets both side by side (JSON, summary) and the second
// run's own report is in compared/. The fault-mix storm leaves a correct
// driver clean either way.
func TestComparisonRunsTheWorkloadTwiceAndReportsBothSideBySide(t *testing.T) {
	cfg := embedded(t, buildDriver(t))
	cfg.Chaos = Off
	cfg.Volumes, cfg.DeleteDuringCreateRate = 30, 0
	cfg.FaultProfile = ProfileFaultMix
	cfg.CompareDriverArgs = []string{"--adaptive-retry-mode=false"}
	var summary strings.Builder
	cfg.Stdout = &summary
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, summary.String())
	}
	c := rep.Comparison
	if c == nil || c.Outcomes != [2]string{"clean", "clean"} || rep.Label != "default" {
		t.Fatalf("comparison %+v of the %q run\n%s", c, rep.Label, summary.String())
	}
	figures := map[string]report.Figure{}
	for _, f := range c.Figures {
		figures[f.Name] = f
	}
	for _, name := range []string{"CreateAccessPoint requests/volume", "create+delete vol/s"} {
		if f := figures[name]; f.Default <= 0 || f.Compared <= 0 || f.Ratio == nil {
			t.Errorf("%s: %+v, want both runs measured", name, f)
		}
	}
	if c.Files[1].JSON != filepath.Join(cfg.OutDir, "compared", "report.json") {
		t.Errorf("compared run's report at %s, want under %s/compared", c.Files[1].JSON, cfg.OutDir)
	}
	configOf := func(path string) Config {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Label  string `json:"label"`
			Config struct {
				DriverArgs []string `json:"driverArgs"`
				Seed       uint64   `json:"seed"`
			} `json:"config"`
			Comparison *report.Comparison `json:"comparison"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if (r.Comparison != nil) != (r.Label == "default") {
			t.Errorf("%s: the %q run's report has comparison %v", path, r.Label, r.Comparison != nil)
		}
		return Config{DriverArgs: r.Config.DriverArgs, Seed: r.Config.Seed}
	}
	def, compared := configOf(c.Files[0].JSON), configOf(c.Files[1].JSON)
	if def.Seed == 0 || def.Seed != compared.Seed || len(def.DriverArgs) != 0 ||
		!slices.Equal(compared.DriverArgs, cfg.CompareDriverArgs) {
		t.Errorf("default run: seed %d, driver args %q; compared: seed %d, driver args %q", def.Seed, def.DriverArgs, compared.Seed, compared.DriverArgs)
	}
	if !strings.Contains(summary.String(), "(compared: --adaptive-retry-mode=false added)") ||
		!strings.Contains(summary.String(), "result: default CLEAN, 0 findings; compared CLEAN, 0 findings") {
		t.Errorf("summary:\n%s", summary.String())
	}
}
