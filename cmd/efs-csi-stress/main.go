// Command efs-csi-stress plays Kubernetes' provisioner against an EFS CSI
// driver: many concurrent CreateVolume and DeleteVolume calls with retries,
// duplicates, deletes during provisioning, emulator faults and driver kills;
// then it audits the backend for leaks, lost volumes, duplicate GIDs and
// leftovers, and writes a summary, a JSON and an HTML report.
//
// Exit status: see exitStatus.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/efs-csi/efs-csi-driver/internal/cli"
	"github.com/efs-csi/efs-csi-driver/internal/logging"
	"github.com/efs-csi/efs-csi-driver/internal/stress"
	"github.com/efs-csi/efs-csi-driver/pkg/version"
)

// exitStatus is the exit statuses, as --help lists them.
var exitStatus = `Exit status:
  0  clean: every claim got a volume (or was deleted while provisioning) and the audits found nothing
  1  the audits found something (leaks, lost volumes, duplicate GIDs, leftovers): see the report
  2  bad usage, or the run could not complete
  3  claims never got a volume: any claim; with a --fault-profile whose faults may end a create
     (` + strings.Join(stress.FailingProfiles(), ", ") + `), every claim
`

func main() {
	flag.CommandLine.Init("efs-csi-stress", flag.ContinueOnError)
	flag.Usage = func() {
		w := flag.CommandLine.Output()
		fmt.Fprint(w, "usage: efs-csi-stress [flags]\n\n", exitStatus, "\nFlags:\n")
		flag.PrintDefaults()
	}
	cfg := stress.Default()
	var params, logFormat string
	var verbose bool
	flag.BoolVar(&cfg.Embedded, "embedded", false, "start the EFS emulator and the driver here (temporary directories, loopback)")
	flag.StringVar(&cfg.Endpoint, "endpoint", "", "CSI endpoint of a running driver, unix:///path/csi.sock")
	flag.StringVar(&cfg.DriverBinary, "driver-binary", "", "embedded: efs-csi-driver to run (default: next to this binary, else PATH)")
	flag.Func("driver-arg", "embedded: one more flag for the driver (repeatable), e.g. --driver-arg=--tags=team:storage", func(s string) error {
		cfg.DriverArgs = append(cfg.DriverArgs, s)
		return nil
	})
	flag.Func("compare-driver-arg", "embedded: run the workload twice (same seed, fresh emulator and driver each), the second time with this driver flag added (repeatable), and compare, e.g. --compare-driver-arg=--adaptive-retry-mode=false", func(s string) error {
		cfg.CompareDriverArgs = append(cfg.CompareDriverArgs, s)
		return nil
	})
	flag.StringVar(&cfg.DriverCmd, "driver-cmd", "", "shell command that runs the driver serving --endpoint; the tool starts, kills and restarts it")
	flag.StringVar(&cfg.EFSEndpoint, "efs-endpoint", "", "EFS API URL for the audit and, for an emulator, its fault control (default: the AWS SDK's resolution)")
	flag.StringVar(&cfg.Region, "region", cfg.Region, "AWS region of the EFS API")
	flag.StringVar(&cfg.FileSystemID, "file-system", "", "file system the volumes are carved from (remote runs); several comma-separated: a class over them")
	flag.IntVar(&cfg.FileSystems, "file-systems", 0, "embedded: file systems of the emulator, all named by the class (fileSystemId: fs-a,fs-b) (default 1)")
	flag.IntVar(&cfg.AccessPointLimit, "access-point-limit", 0, "embedded: access points per file system, in the emulator and the driver's --access-point-limit (default: the emulator's 10,000)")
	flag.StringVar(&cfg.IAMPolicy, "iam-policy", cfg.IAMPolicy, "embedded: the IAM policy the emulator enforces on every request: managed (AWS's AmazonEFSCSIDriverPolicy, as EKS users attach; with docs/iam/s3files.json for s3files-ap), none (allow all), or a policy FILE")
	flag.StringVar(&cfg.MetricsURL, "metrics-url", "", "driver's Prometheus endpoint, http://HOST:PORT/metrics, for the at-rest gauges")
	flag.StringVar(&cfg.TmpDir, "tmp-dir", "", "driver's --tmp-dir, scanned for leftover temporary mounts (default: the system temp dir)")
	flag.StringVar(&cfg.DataDir, "data-dir", "", "emulator data directory, if local: enables the lost-data markers")
	flag.BoolVar(&cfg.Exclusive, "exclusive", false, "every access point of the file system belongs to this run (any other is a leak)")
	flag.BoolVar(&cfg.KeepWorkDir, "keep-work-dir", false, "embedded: keep the emulator data and driver temp directory")

	flag.IntVar(&cfg.Volumes, "volumes", cfg.Volumes, "number of volumes (claims)")
	flag.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "provisioner workers")
	flag.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "per-call timeout; a call cut short is retried while the driver may still run it")
	flag.DurationVar(&cfg.BackoffInitial, "backoff-initial", cfg.BackoffInitial, "first retry delay (doubles per failure)")
	flag.DurationVar(&cfg.BackoffMax, "backoff-max", cfg.BackoffMax, "longest retry delay")
	flag.Float64Var(&cfg.DuplicateRate, "duplicate-rate", cfg.DuplicateRate, "fraction of claims provisioned by two provisioners at once")
	flag.IntVar(&cfg.DuplicateCallers, "duplicate-callers", 2, "provisioners calling at once for a duplicated claim (2 or more)")
	flag.Float64Var(&cfg.DeleteDuringCreateRate, "delete-during-create-rate", cfg.DeleteDuringCreateRate, "fraction of claims deleted while being provisioned")
	flag.DurationVar(&cfg.CancelWindow, "cancel-window", cfg.CancelWindow, "a claim deleted during provisioning cancels its first call within this time")
	flag.StringVar(&params, "parameters", "", "extra StorageClass parameters, k=v,k=v (fileSystemId is set by the tool)")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "seed for the workload's choices and, embedded, the emulator's fault draws (0: random); names are always random")
	flag.DurationVar(&cfg.MaxDuration, "max-duration", cfg.MaxDuration, "give up after this long")

	flag.StringVar(&cfg.FaultProfile, "fault-profile", "", "emulator faults: "+stress.ProfileUsage()+" (default: lost-answers embedded, none otherwise)")
	flag.Float64Var(&cfg.FaultRate, "fault-rate", cfg.FaultRate, "probability used by the errors, lost-answers, random-throttle and throttle-mix profiles")
	flag.Var(&cfg.Chaos, "chaos", "kill the driver (SIGKILL) at random moments and restart it (default: on when embedded)")
	flag.DurationVar(&cfg.ChaosInterval, "chaos-interval", cfg.ChaosInterval, "mean time between driver kills")

	flag.DurationVar(&cfg.Settle, "settle", cfg.Settle, "how long the driver may take to come to rest before an audit")
	flag.StringVar(&cfg.OutDir, "out-dir", "", "directory for the reports and logs (default: a new temporary directory)")
	flag.StringVar(&cfg.ReportJSON, "report-json", "", "JSON report path (default: OUT-DIR/report.json)")
	flag.StringVar(&cfg.ReportHTML, "report-html", "", "HTML report path (default: OUT-DIR/report.html)")
	flag.Var(&cfg.Progress, "progress", "progress display: true (bar), false, or auto (bar on a terminal, else a line every 5s)")
	flag.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	flag.BoolVar(&verbose, "v", false, "log more")
	showVersion := flag.Bool("version", false, "print the version, commit and build date, and exit")
	if code, ok := cli.Parse(flag.CommandLine, os.Args[1:], os.Stdout, os.Stderr); !ok {
		os.Exit(code)
	}
	if *showVersion {
		fmt.Println(version.JSON())
		return
	}

	level := slog.LevelWarn
	if verbose {
		level = slog.LevelDebug
	}
	log, err := logging.New(os.Stderr, logFormat, level)
	if err != nil {
		fail(err)
	}
	cfg.Logger = log
	if params != "" {
		for _, kv := range strings.Split(params, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				fail(fmt.Errorf("--parameters: %q is not k=v", kv))
			}
			cfg.Parameters[k] = v
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err = stress.Run(ctx, cfg)
	switch {
	case err == nil:
	case errors.Is(err, stress.ErrFindings):
		os.Exit(1)
	case errors.Is(err, stress.ErrCreatesFailed):
		fmt.Fprintln(os.Stderr, "efs-csi-stress:", err)
		os.Exit(3)
	default:
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "efs-csi-stress:", err)
	os.Exit(2)
}
