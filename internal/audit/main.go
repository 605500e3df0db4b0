package audit

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/cli"
	"github.com/efs-csi/efs-csi-driver/internal/progress"
	"github.com/efs-csi/efs-csi-driver/pkg/driver"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Exit statuses of Main.
const (
	ExitClean    = 0 // nothing found (with --fix --yes: every finding fixed)
	ExitFindings = 1 // findings (with --fix --yes: some left)
	ExitError    = 2 // bad usage, or something could not be read or fixed
)

// Options are the command line, as the report shows it.
type Options struct {
	Kubeconfig     string            `json:"kubeconfig,omitempty"`
	Context        string            `json:"context,omitempty"`
	Driver         string            `json:"driverName"`
	Namespace      string            `json:"namespace"`
	LeaseNamespace string            `json:"leaseNamespace,omitempty"`
	Journal        string            `json:"journal"`
	ClusterID      string            `json:"clusterID,omitempty"`
	FileSystems    []string          `json:"fileSystems,omitempty"`
	Region         string            `json:"region,omitempty"`
	Endpoint       string            `json:"efsEndpoint,omitempty"`
	STSEndpoint    string            `json:"stsEndpoint,omitempty"`
	RateLimits     string            `json:"apiRateLimits"`
	Limit          int               `json:"accessPointLimit"`
	Grace          time.Duration     `json:"grace"`
	Roots          map[string]string `json:"fsRoots,omitempty"`
	LocalRoot      string            `json:"localRoot,omitempty"`
	Output         string            `json:"output"`
	HTML           string            `json:"html,omitempty"`
	Progress       string            `json:"progress"`
	Fix            bool              `json:"fix"`
	Yes            bool              `json:"yes"`
	Timeout        time.Duration     `json:"timeout"`
}

// defaultRateLimits keep an audit a quiet neighbour of the driver and of
// every other client of the account: a 10,000-access-point file system is
// 10 pages, and PVs whose access point the listing misses are described
// one by one.
const defaultRateLimits = "DescribeAccessPoints=10:20,DescribeFileSystems=5:5,DeleteAccessPoint=5:5"

// Usage is the command's synopsis.
const Usage = `usage: efs-csi-driver audit [flags]

Reads the cluster's PersistentVolumes, claims and StorageClasses, this
cluster's record and every access point of the file systems they name, and
reports per file system: access points no PV names (and whose each is),
PVs whose access point is gone, GIDs carried by more than one access point,
records whose access point is gone, directories under the classes' base
paths that no access point reaches (with --fs-root or --local-root), other
clusters' and the upstream driver's access points, and the access point
limit. The table and --html list at most 20 of each kind per file system;
--output json lists every one.

Read-only; --fix prints the plan that deletes the provable leaks, --fix
--yes applies it. What --fix needs to prove a leak: an orphan collector
(the controller's --orphan-gc-interval, the chart's
controller.orphanCollection) holding its Lease
<namespace>/<driver-name>-orphan-collector (dots as dashes) now, and since
before the volume was created: only it can say that no PersistentVolume
ever named the volume. Without one, --fix plans only what needs no
such proof (records whose create never answered, with the access point
it made; records whose access point is gone) and lists the rest as
findings to check by hand; the report's "orphan collector" line says
whether one holds the Lease.

Exit status: 0 clean, 1 findings, 2 error (usage, or something could not
be read or fixed).

`

// Main runs the audit command with args (after "audit") and returns its
// exit status.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return run(ctx, args, os.Stdout, os.Stderr)
}

// roots is --fs-root fs-ID=DIR, repeatable.
type roots map[string]string

func (r roots) String() string { return "" }
func (r roots) Set(s string) error {
	id, dir, ok := strings.Cut(s, "=")
	if !ok || !volume.ValidFileSystemID(id) || dir == "" {
		return fmt.Errorf("want fs-ID=DIR, got %q", s)
	}
	r[id] = dir
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := Options{Roots: map[string]string{}}
	var verbose bool
	fl := flag.NewFlagSet("efs-csi-driver audit", flag.ContinueOnError)
	fl.Usage = func() {
		fmt.Fprint(fl.Output(), Usage)
		fl.PrintDefaults()
	}
	fl.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: as kubectl: $KUBECONFIG, ~/.kube/config, else in-cluster)")
	fl.StringVar(&o.Context, "context", "", "kubeconfig context (default: the current one)")
	fl.StringVar(&o.Driver, "driver-name", "efs.csi.aws.com", "CSI driver name of the PVs and StorageClasses")
	fl.StringVar(&o.Namespace, "namespace", "", "the controller's namespace: the record's Leases (or ConfigMaps) and the orphan collector's Lease (default: this pod's namespace, else kube-system)")
	fl.StringVar(&o.LeaseNamespace, "leader-election-namespace", "", "the orphan collector's Lease namespace, when the controller sets --leader-election-namespace (default: --namespace)")
	fl.StringVar(&o.Journal, "journal", "kubernetes", "where the record is: kubernetes or leases (Leases efs-csi-journal-* of --namespace, the controller's default) or file:DIR (the controller's --journal file:DIR)")
	fl.StringVar(&o.ClusterID, "cluster-id", "", "this cluster's ID, as the controller's --cluster-id (default: the kube-system namespace's UID)")
	fl.Func("file-system", "audit this file system too (repeatable; default: those the StorageClasses, PVs and record name)", func(s string) error {
		if !volume.ValidFileSystemID(s) {
			return fmt.Errorf("%q is not a file system ID", s)
		}
		o.FileSystems = append(o.FileSystems, s)
		return nil
	})
	fl.StringVar(&o.Region, "region", "", "AWS region (default: the SDK's: $AWS_REGION, the shared config)")
	fl.StringVar(&o.Endpoint, "efs-endpoint", "", "EFS (and S3 Files) API URL (default: the SDK's: $AWS_ENDPOINT_URL_EFS, the region's)")
	fl.StringVar(&o.STSEndpoint, "sts-endpoint", "", "STS API URL, for provisioner secrets' roles (default: the SDK's: $AWS_ENDPOINT_URL_STS, the region's)")
	fl.StringVar(&o.RateLimits, "api-rate-limits", defaultRateLimits, "ceilings on the audit's EFS request rate, Operation=perSecond[:burst],... as the driver's flag (pacing also adapts to throttles)")
	fl.IntVar(&o.Limit, "access-point-limit", DefaultLimit, "access points a file system may have (EFS's quota)")
	fl.DurationVar(&o.Grace, "grace", 10*time.Minute, "how old a record must be to be a leak (the controller's --orphan-gc-grace)")
	fl.Var(roots(o.Roots), "fs-root", "fs-ID=DIR: the file system's root is mounted at DIR: scan the directories under its classes' base paths (repeatable)")
	fl.StringVar(&o.LocalRoot, "local-root", "", "scan every file system's directories at DIR/<fs-id> (the driver's --local-root layout, the emulator's data)")
	fl.StringVar(&o.Output, "output", "table", "table or json (stdout)")
	fl.StringVar(&o.HTML, "html", "", "also write the HTML report (charts of the EFS requests) to this file")
	fl.StringVar(&o.Progress, "progress", "auto", "progress on stderr: auto (on a terminal: a line redrawn in place), true (also off a terminal: a line every 5s), false; each a line of counts and rates, and a final line")
	fl.BoolVar(&o.Fix, "fix", false, "print the plan that deletes this cluster's provable leaks (nothing is changed without --yes); proving a leak needs an orphan collector holding its Lease since before the volume was created (see above)")
	fl.BoolVar(&o.Yes, "yes", false, "with --fix: apply the plan")
	fl.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "give up after this long")
	fl.BoolVar(&verbose, "v", false, "log the EFS client's and, with --fix --yes, the controller's lines to stderr")
	// --help: the usage on stdout, ExitClean; a bad flag or a stray
	// argument: one line, ExitError.
	if code, ok := cli.Parse(fl, args, stdout, stderr); !ok {
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "efs-csi-driver audit: "+format+"\n", a...)
		return ExitError
	}
	if o.Output != "table" && o.Output != "json" {
		return usage("--output %q: want table or json", o.Output)
	}
	if o.Yes && !o.Fix {
		return usage("--yes goes with --fix")
	}
	var show, bar bool
	switch o.Progress {
	case "auto":
		show = progress.IsTerminal(stderr)
		bar = show
	case "true":
		show, bar = true, progress.IsTerminal(stderr)
	case "false":
	default:
		return usage("--progress %q: want auto, true or false", o.Progress)
	}
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	limits, err := driver.ParseRateLimits(o.RateLimits)
	if err != nil {
		return usage("--api-rate-limits: %v", err)
	}
	o.Namespace = cmp.Or(o.Namespace, kube.PodNamespace(), "kube-system")

	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	kc, from, err := kubeClient(o.Kubeconfig, o.Context)
	if err != nil {
		return usage("%v", err)
	}
	src := Sources{Kube: kc, KubeAPI: from}
	switch mode, dir, _ := strings.Cut(o.Journal, ":"); mode {
	case "kubernetes", "leases":
		src.Journal, src.JournalName = kc.LeaseJournalStore(o.Namespace, o.Driver), "Leases efs-csi-journal-* of namespace "+o.Namespace
	case "file":
		s, err := journal.OpenFile(dir)
		if err != nil {
			src.JournalError = err.Error()
		} else {
			defer s.Close()
			src.Journal = s
		}
		src.JournalName = "file " + dir
	default:
		return usage("--journal %q: want kubernetes (= leases) or file:DIR", o.Journal)
	}
	var progressTo io.Writer
	if show {
		progressTo = stderr
	}
	a := New(Config{Driver: o.Driver, Namespace: o.Namespace, LeaseNamespace: o.LeaseNamespace, ClusterID: o.ClusterID,
		FileSystems: o.FileSystems, Grace: o.Grace, Limit: o.Limit, Roots: o.Roots, LocalRoot: o.LocalRoot,
		EFS: efsConfig(o, limits, log), Logger: log, Progress: progressTo, Bar: bar, Options: o}, src)
	rep, err := a.Run(ctx)
	if err != nil {
		return usage("%v", err)
	}
	status := ExitClean
	switch rep.Outcome {
	case "error":
		status = ExitError
	case "findings":
		status = ExitFindings
	}
	if o.Fix {
		a.Plan()
		if o.Yes {
			if err := a.Fix(ctx); err != nil {
				rep.Errors = append(rep.Errors, "--fix: "+err.Error())
				rep.Outcome, status = "error", ExitError
			} else if status == ExitFindings && rep.Totals.Fixed == rep.Totals.Findings {
				status = ExitClean
			}
		}
	}
	if o.Output == "json" {
		if err := rep.WriteJSON(stdout); err != nil {
			return usage("%v", err)
		}
	} else {
		rep.WriteTable(stdout)
	}
	if o.HTML != "" {
		if err := rep.WriteHTML(o.HTML); err != nil {
			return usage("--html: %v", err)
		}
		if o.Output == "table" {
			fmt.Fprintf(stdout, "HTML report: %s\n", o.HTML)
		}
	}
	return status
}

// kubeClient is the audit's Kubernetes client, found as kubectl finds it,
// and where it was found.
func kubeClient(kubeconfig, context string) (*kube.Client, string, error) {
	rc, from, err := kube.LoadConfig(kubeconfig, context)
	if err != nil {
		return nil, "", err
	}
	// An audit reads lists in pages: more than the driver's trickle.
	rc.QPS, rc.Burst = 20, 40
	kc, err := kube.NewForConfig(rc)
	return kc, from + " (" + rc.Host + ")", err
}

// efsConfig is the EFS clients' configuration: the SDK's standard chain
// and region, the endpoint override, the ceilings.
func efsConfig(o Options, limits map[string]efs.RateLimit, log *slog.Logger) efs.Config {
	return efs.Config{Region: o.Region, Endpoint: o.Endpoint, STSEndpoint: o.STSEndpoint, RateLimits: limits, Logger: log}
}
