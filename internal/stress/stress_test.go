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
	"strings"
	"sync"
	"testing"
	"time"

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

// Chaos kills the real driver during both phases; every retried create must
// find its access point and every retried delete finish: no leak, nothing
// missing, no GID twice, no lost data, and the driver back at rest.
func TestEmbeddedRunUnderChaosLosesAndLeaksNothing(t *testing.T) {
	cfg := embedded(t, buildDriver(t))
	cfg.Chaos = On
	cfg.ChaosInterval = 300 * time.Millisecond
	var summary strings.Builder
	cfg.Stdout = &summary
	rep, err := Run(context.Background(), cfg)
	if err != nil && !errors.Is(err, ErrFindings) {
		t.Fatalf("run: %v\n%s", err, summary.String())
	}
	if rep.Chaos.Kills == 0 {
		t.Fatalf("no driver was killed\n%s", summary.String())
	}
	if rep.Chaos.UnexpectedExits != 0 {
		t.Errorf("driver exited by itself: %v", rep.Incidents)
	}
	for _, a := range rep.Audits {
		for _, f := range a.Report.Figures() {
			if f.Value != 0 {
				t.Errorf("%s audit: %s = %d\n%s", a.Name, f.Name, f.Value, summary.String())
			}
		}
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
