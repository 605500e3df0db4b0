// Command efs-csi-driver serves the CSI Identity, Controller and Node services
// for Amazon EFS access points on a unix socket.
//
// It takes every flag of the upstream aws-efs-csi-driver (v3.4), so that its
// manifests and chart arguments run unchanged; klog owns the log flags and
// the output format, as in the sidecars of the same pods.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/efs-csi/efs-csi-driver/internal/audit"
	"github.com/efs-csi/efs-csi-driver/internal/logging"
	"github.com/efs-csi/efs-csi-driver/pkg/driver"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/efsutils"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "audit" {
		os.Exit(audit.Main(os.Args[2:]))
	}
	var (
		cfg                        driver.Config
		tags, rateLimits           string
		logFormat, logFormatAlias  string
		metricsAlias               string
		version, debugLogs         bool
		volMetricsRefresh          minutes
		volMetricsFSRateLimit      int
		inflightOptIn, attachOptIn bool
		inflightLimit, attachLimit int
		forceUnmount, adaptive     bool
		efsUtilsOverrides          string
		s3filesUtilsOverrides      string
		portUpper                  int
	)
	fs := flag.CommandLine
	klog.InitFlags(fs) // -v, --logtostderr, --vmodule, --stderrthreshold, ...

	fs.StringVar(&cfg.Endpoint, "endpoint", "unix://tmp/csi.sock", "CSI endpoint: unix:///path, unix:/path or a path")
	fs.StringVar(&cfg.DriverName, "driver-name", "efs.csi.aws.com", "CSI driver name")
	fs.StringVar(&cfg.Mode, "mode", driver.ModeAll, "services to run: controller, node or all")
	fs.StringVar(&cfg.NodeID, "node-id", "", "node ID reported by NodeGetInfo (default: the EC2 instance ID from IMDSv2, else $NODE_NAME)")
	fs.StringVar(&cfg.Zone, "zone", "", "availability zone reported as topology by NodeGetInfo (default: the Node's topology.kubernetes.io/zone label, else instance metadata)")
	fs.StringVar(&tags, "tags", "", "space-separated key:value tags added to every access point; \\ escapes a space, a colon or itself, as upstream")
	fs.BoolVar(&cfg.DeleteRootDir, "delete-access-point-root-dir", false, "remove an access point's root directory and its data on DeleteVolume")
	fs.StringVar(&cfg.LocalRoot, "local-root", "", "emulator data directory: mount file systems with bind mounts from DIR/<fs-id> instead of mount -t efs")
	fs.StringVar(&cfg.TempDir, "tmp-dir", "", "parent directory of temporary mount points (default: the system temp dir)")
	fs.StringVar(&cfg.MetricsAddress, "http-endpoint", "", "address of the Prometheus /metrics and /healthz endpoint, e.g. 127.0.0.1:3301 (empty: none)")
	fs.StringVar(&metricsAlias, "metrics-address", "", "deprecated alias of --http-endpoint")
	fs.StringVar(&cfg.MetricsCertFile, "metrics-cert-file", "", "TLS certificate for the metrics endpoint (with --metrics-key-file)")
	fs.StringVar(&cfg.MetricsKeyFile, "metrics-key-file", "", "TLS key for the metrics endpoint (with --metrics-cert-file)")
	fs.BoolVar(&cfg.VolMetricsOptIn, "vol-metrics-opt-in", false, "report volume usage in NodeGetVolumeStats")
	volMetricsRefresh = minutes(240 * time.Minute)
	fs.Var(&volMetricsRefresh, "vol-metrics-refresh-period", "how often per-volume usage is recomputed, in minutes (a Go duration is accepted too)")
	fs.IntVar(&volMetricsFSRateLimit, "vol-metrics-fs-rate-limit", 5, "concurrent usage computations per file system")
	fs.DurationVar(&cfg.UnmountTimeout, "unmount-timeout", 30*time.Second, "with --force-unmount-after-timeout: how long an unmount may take before it is forced (umount -f -l)")
	fs.BoolVar(&forceUnmount, "force-unmount-after-timeout", false, "force an unmount still running after --unmount-timeout (upstream's default: never force)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long calls in flight may run after SIGTERM")
	fs.IntVar(&cfg.MaxInflightMounts, "max-inflight-mounts", 16, "bound on concurrent NodePublishVolume calls on the node; calls over it wait for a slot within their deadline (--max-inflight-mount-calls-opt-in replaces it)")
	fs.BoolVar(&inflightOptIn, "max-inflight-mount-calls-opt-in", false, "use --max-inflight-mount-calls as the bound on concurrent NodePublishVolume calls, answering ABORTED at once over it")
	fs.IntVar(&inflightLimit, "max-inflight-mount-calls", 0, "with --max-inflight-mount-calls-opt-in: concurrent NodePublishVolume calls")
	fs.BoolVar(&attachOptIn, "volume-attach-limit-opt-in", false, "report --volume-attach-limit as the node's MaxVolumesPerNode")
	fs.IntVar(&attachLimit, "volume-attach-limit", 0, "with --volume-attach-limit-opt-in: MaxVolumesPerNode in NodeGetInfo")
	fs.StringVar(&rateLimits, "api-rate-limits", "", "ceilings on the EFS API request rate, for an account other clients share: Operation=perSecond[:burst],... (\"*\" for the rest, 0 = none; default none: pacing adapts to EFS's throttles)")
	fs.BoolVar(&adaptive, "adaptive-retry-mode", true, "adapt each operation's request rate to EFS's throttles (cut at once, grow back along a CUBIC curve); false: throttles are only retried")
	fs.IntVar(&cfg.EFS.MaxInFlight, "api-max-inflight", efs.DefaultMaxInFlight, "bound on EFS API requests in flight per operation (-1: none)")
	fs.StringVar(&cfg.GIDVerify, "gid-verify", "auto", "deprecated, no effect: GIDs are unique by the record (--journal); auto, always or never are accepted")
	fs.StringVar(&cfg.Journal, "journal", "auto", "where the record of this cluster's volumes and GIDs is kept: kubernetes (ConfigMaps in the controller's namespace), file[:DIR] (one host's controllers; default DIR: --tmp-dir/efs-csi-journal), auto (kubernetes when the API is reachable and its ConfigMaps may be listed, else file)")
	fs.DurationVar(&cfg.OrphanInterval, "orphan-gc-interval", 0, "delete the volumes this cluster's record holds that never had a PersistentVolume and whose claim is gone, checking this often, in the replica holding the collector's Lease (0: off; needs the Kubernetes API)")
	fs.DurationVar(&cfg.OrphanGrace, "orphan-gc-grace", 10*time.Minute, "how long an access point must stay orphaned before it is deleted")
	fs.StringVar(&cfg.ClusterID, "cluster-id", "", "this cluster's identity, written as the efs.csi.aws.com/cluster-id tag on every access point (default: the UID of the kube-system namespace when the Kubernetes API is reachable; without either no tag is written and nothing is collected)")
	fs.StringVar(&cfg.LeaseNamespace, "leader-election-namespace", "", "namespace of the orphan collector's Lease (default: the pod's namespace)")
	fs.StringVar(&cfg.Kube.URL, "kube-api-url", "", "Kubernetes API server URL for the orphan collector (default: in-cluster)")
	fs.StringVar(&cfg.Kube.TokenFile, "kube-token-file", "", "bearer token file (default: the pod's service account token)")
	fs.StringVar(&cfg.Kube.CAFile, "kube-ca-file", "", "API server CA bundle (default: the pod's service account CA)")
	fs.StringVar(&logFormat, "logging-format", "text", "log format: text (klog) or json")
	fs.StringVar(&logFormatAlias, "log-format", "", "alias of --logging-format")
	fs.BoolVar(&debugLogs, "debug-logs", false, "debug logging (as -v=5)")
	fs.BoolVar(&version, "version", false, "print the version and exit")

	// efs-utils (node plugin): upstream's flags, and the chart's useFIPS and
	// portRangeUpperBound, which upstream's chart passes as environment.
	// Both efs-utils.conf and s3files-utils.conf are written from them.
	eu := &cfg.EFSUtils
	fs.StringVar(&eu.Dirs.ConfigDir, "efs-utils-config-dir-path", "/var/amazon/efs", "efs-utils configuration directory (a host directory)")
	fs.StringVar(&eu.Dirs.LegacyDir, "efs-utils-config-legacy-dir-path", "/etc/amazon/efs-legacy", "the host's old /etc/amazon/efs: used instead when it holds an efs-utils.conf")
	fs.StringVar(&eu.Dirs.StaticFilesDir, "efs-utils-static-files-path", "/etc/amazon/efs-static-files/", "efs-utils static files of the image, copied into the configuration directory at start (efs-utils.crt replaced, others when missing)")
	fs.StringVar(&eu.Dirs.EtcDir, "efs-utils-etc-dir", "/etc/amazon/efs", "where efs-utils reads its configuration: linked to the configuration directory")
	fs.BoolVar(&eu.Settings.CloudWatchLog, "efs-cloudwatch-log-enabled", false, "efs-utils.conf [cloudwatch-log] enabled")
	fs.StringVar(&efsUtilsOverrides, "efs-utils-conf-overrides", "", "comma-separated section:key=value settings of efs-utils.conf (each must name a key the file has, with a value efs-utils can read)")
	fs.BoolVar(&eu.Settings.S3FilesCloudWatchLog, "s3files-cloudwatch-log-enabled", true, "s3files-utils.conf [cloudwatch-log] enabled")
	fs.BoolVar(&eu.Settings.S3FilesCloudWatchMetrics, "s3files-cloudwatch-metrics-enabled", true, "s3files-utils.conf [proxy] metrics_enabled")
	fs.StringVar(&s3filesUtilsOverrides, "s3files-utils-conf-overrides", "", "comma-separated section:key=value settings of s3files-utils.conf (each must name a key the file has, with a value efs-utils can read)")
	fs.BoolVar(&eu.Settings.FIPS, "efs-utils-fips", envBool("FIPS_ENABLED"), "efs-utils fips_mode_enabled (default: $FIPS_ENABLED, the chart's useFIPS); the stunnel mount option is then refused")
	fs.IntVar(&portUpper, "efs-utils-port-range-upper-bound", envInt("PORT_RANGE_UPPER_BOUND"), "upper bound of efs-utils' TLS tunnel ports (default: $PORT_RANGE_UPPER_BOUND, the chart's portRangeUpperBound; below 21049, efs-utils' own, it is raised to 21049 as upstream does)")
	fs.StringVar(&eu.Watchdog.Path, "efs-utils-watchdog-path", "amazon-efs-mount-watchdog", "efs-utils' watchdog, supervised by the node plugin (not installed: a log line)")

	fs.Parse(os.Args[1:])

	if version {
		// Upstream's JSON (driverVersion, gitCommit, buildDate, ...).
		fmt.Println(driver.VersionJSON())
		return
	}
	if logFormatAlias != "" {
		logFormat = logFormatAlias
	}
	if debugLogs {
		_ = fs.Set("v", "5")
	}
	log, err := logging.NewKlog(os.Stderr, logFormat)
	if err != nil {
		fail(err)
	}
	cfg.Logger = log
	if metricsAlias != "" {
		if cfg.MetricsAddress != "" {
			fail(fmt.Errorf("--http-endpoint and its deprecated alias --metrics-address are both set"))
		}
		cfg.MetricsAddress = metricsAlias
		log.Warn("--metrics-address is deprecated: use --http-endpoint")
	}
	if !forceUnmount {
		cfg.UnmountTimeout = 0 // never force, as upstream by default
	}
	if inflightOptIn && inflightLimit > 0 {
		// Upstream's semantics: over the limit is ABORTED at once.
		cfg.MaxInflightMounts, cfg.AbortInflightMounts = inflightLimit, true
	}
	if attachOptIn {
		cfg.VolumeAttachLimit = attachLimit
	}
	// Upstream's chart, and this one, give the node plugin its memory
	// limit through the downward API as CSI_NODE_MEMORY_LIMIT (bytes).
	if v := os.Getenv("CSI_NODE_MEMORY_LIMIT"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			fail(fmt.Errorf("CSI_NODE_MEMORY_LIMIT %q is not a number of bytes", v))
		}
		cfg.MemoryLimit = n
	} else if cfg.Mode != driver.ModeController {
		log.Info("CSI_NODE_MEMORY_LIMIT is not set: S3 Files volumes are mounted without efs-proxy's read cache (nos3readcache), as upstream")
	}
	// Upstream's switch (the chart's node.serviceAccount.disableMutation):
	// any value.
	cfg.DisableTaintWatcher = os.Getenv("DISABLE_TAINT_WATCHER") != ""
	// efs-utils reads this one itself, as a second switch to FIPS mode.
	eu.Settings.FIPSEndpoint = strings.EqualFold(os.Getenv("AWS_USE_FIPS_ENDPOINT"), "true")
	cfg.VolMetricsRefresh, cfg.VolMetricsFSRateLimit = time.Duration(volMetricsRefresh), volMetricsFSRateLimit
	eu.Settings.Debug, eu.Settings.PortRangeUpper = debugLogs, portUpper
	if eu.Settings.Overrides, err = efsutils.ParseOverrides(efsUtilsOverrides); err != nil {
		fail(fmt.Errorf("--efs-utils-conf-overrides: %w", err))
	}
	if eu.Settings.S3FilesOverrides, err = efsutils.ParseOverrides(s3filesUtilsOverrides); err != nil {
		fail(fmt.Errorf("--s3files-utils-conf-overrides: %w", err))
	}
	var dropped []string
	if cfg.Tags, dropped, err = driver.ParseTags(tags); err != nil {
		fail(err)
	}
	for _, t := range dropped {
		log.Warn("--tags: tag dropped, as upstream drops it: it has two unescaped colons (escape a colon in a key or value as \\:)", "tag", t)
	}
	if cfg.EFS.RateLimits, err = driver.ParseRateLimits(rateLimits); err != nil {
		fail(err)
	}
	cfg.EFS.DisableAdaptive = !adaptive

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	d, err := driver.New(ctx, cfg)
	if err != nil {
		fail(err)
	}
	if err := d.Run(ctx); err != nil {
		fail(err)
	}
	klog.Flush()
}

// envBool and envInt read the environment upstream's chart sets; a value
// that does not parse is the zero value, which Render then rejects or
// replaces by efs-utils' default.
func envBool(name string) bool { b, _ := strconv.ParseBool(os.Getenv(name)); return b }
func envInt(name string) int   { i, _ := strconv.Atoi(os.Getenv(name)); return i }

func fail(err error) {
	klog.Flush()
	fmt.Fprintln(os.Stderr, "efs-csi-driver:", err)
	os.Exit(1)
}
