package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/efs-csi/efs-csi-driver/pkg/driver"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/efsutils"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
)

// minutes is a flag.Value in upstream's syntax for
// --vol-metrics-refresh-period: a (fractional) number of minutes, such as
// "240" or "0.5". A Go duration ("4h") is accepted too.
type minutes time.Duration

func (m *minutes) String() string {
	return strconv.FormatFloat(time.Duration(*m).Minutes(), 'g', -1, 64)
}

func (m *minutes) Set(s string) error {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f <= 0 {
			return fmt.Errorf("%q minutes: must be positive", s)
		}
		*m = minutes(time.Duration(f * float64(time.Minute)))
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return fmt.Errorf("%q: want a positive number of minutes (or a duration such as 4h)", s)
	}
	*m = minutes(d)
	return nil
}

// qps is a flag.Value of a positive rate (requests per second).
type qps float32

func (q *qps) String() string { return strconv.FormatFloat(float64(*q), 'g', -1, 32) }

func (q *qps) Set(s string) error {
	f, err := strconv.ParseFloat(s, 32)
	if err != nil || f <= 0 {
		return fmt.Errorf("%q: want a positive number of requests per second", s)
	}
	*q = qps(f)
	return nil
}

// options are the flags that main turns into driver.Config fields, or acts
// on, after parsing.
type options struct {
	tags, rateLimits                         string
	logFormat, logFormatAlias                string
	metricsAlias                             string
	version, debugLogs                       bool
	volMetricsRefresh                        minutes
	volMetricsFSRateLimit                    int
	inflightOptIn, attachOptIn               bool
	inflightLimit, attachLimit               int
	forceUnmount, adaptive                   bool
	efsUtilsOverrides, s3filesUtilsOverrides string
	portUpper                                int
}

// flagGroups are the command's flags as docs/reference.md's tables show them: the
// driver's, the node plugin's efs-utils ones, and klog's (which owns the log
// flags, as in the sidecars of the same pods).
type flagGroups struct{ driver, efsUtils, klog *flag.FlagSet }

// newFlagSet builds the command's flags, which set cfg and o when parsed,
// and the same flags in their groups. docs/reference.md's flag tables are rendered
// from these usage strings (make readme), so what a flag means is said once,
// here, for --help and the reference alike.
func newFlagSet(cfg *driver.Config, o *options) (*flag.FlagSet, flagGroups) {
	g := flagGroups{
		driver:   flag.NewFlagSet("driver", flag.ContinueOnError),
		efsUtils: flag.NewFlagSet("efs-utils", flag.ContinueOnError),
		klog:     flag.NewFlagSet("klog", flag.ContinueOnError),
	}
	klog.InitFlags(g.klog) // -v, --logtostderr, --vmodule, --stderrthreshold, ...
	driverFlags(g.driver, cfg, o)
	efsUtilsFlags(g.efsUtils, &cfg.EFSUtils, o)
	fs := flag.NewFlagSet("efs-csi-driver", flag.ContinueOnError)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: efs-csi-driver [flags]\n       efs-csi-driver COMMAND [flags]")
		fmt.Fprintln(w, "\nServes the CSI Identity, Controller and Node services (--mode) on --endpoint.\n\nCommands:")
		for _, c := range subcommands {
			fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
		}
		fmt.Fprintln(w, "\nFlags:")
		fs.PrintDefaults()
	}
	for _, part := range []*flag.FlagSet{g.klog, g.driver, g.efsUtils} {
		part.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	}
	return fs, g
}

func driverFlags(fs *flag.FlagSet, cfg *driver.Config, o *options) {
	fs.StringVar(&cfg.Endpoint, "endpoint", "unix://tmp/csi.sock", "CSI endpoint: unix:///path, unix:/path or a path (the default, upstream's as written, is /tmp/csi.sock); a stale socket of a killed driver is replaced")
	fs.StringVar(&cfg.DriverName, "driver-name", "efs.csi.aws.com", "CSI driver name")
	fs.StringVar(&cfg.Mode, "mode", driver.ModeAll, "services to run: controller, node or all")
	fs.StringVar(&cfg.NodeID, "node-id", "", "node ID reported by NodeGetInfo, needed in node and all modes, accepted in every mode (default: the EC2 instance ID from IMDSv2, else $NODE_NAME or $CSI_NODE_NAME)")
	fs.StringVar(&cfg.Zone, "zone", "", "availability zone reported as topology (topology.kubernetes.io/zone) by NodeGetInfo (default: the label of that name on this node's Node ($NODE_NAME or $CSI_NODE_NAME), read through the Kubernetes API, else instance metadata; unknown is not fatal)")
	fs.StringVar(&o.tags, "tags", "", `space-separated key:value tags added to every access point, parsed as upstream: \ escapes a space, a colon or itself (--tags='tag\:name:tag\:value' is the tag tag:name=tag:value, key\ with\ space:v has a key with spaces); key alone has an empty value; a tag with two unescaped colons is dropped with a warning, as upstream drops it; a tag EFS would refuse (characters other than letters, digits, spaces and _.:/=+-@, a key over 128 or a value over 256 characters, the aws: prefix, more than 42 tags) stops the start instead of failing every CreateVolume`)
	fs.BoolVar(&cfg.DescriptiveTags, "descriptive-tags", false, "also tag every access point with this driver's efs.csi.aws.com/volume-name, capacity, pvc-name, pvc-namespace, base-path, cluster-id and record-life (default: efs.csi.aws.com/cluster alone, as upstream). AWS's managed policy AmazonEFSCSIDriverPolicy denies every create with them: attach docs/iam/controller.json in its place. Without them the orphan collector does not sweep access points no record names (a create's request that reached EFS after its volume's delete, its caller killed: left to efs-csi-driver audit), has no proof against a forged record entry, and another cluster's access points are not told apart (docs/iam.md)")
	fs.BoolVar(&cfg.DeleteRootDir, "delete-access-point-root-dir", false, "remove an access point's root directory and its data on DeleteVolume (and a directory volume's directory, provisioningMode efs-dir)")
	fs.IntVar(&cfg.AccessPointLimit, "access-point-limit", 10000, "access points a file system may have (EFS's quota; raise it with the quota): a class over several file systems (fileSystemId: fs-a,fs-b) places no new volume on one at it (0: no limit known)")
	fs.DurationVar(&cfg.ListingLag, "listing-lag", time.Second, "how long EFS may take to list a new access point: with --delete-access-point-root-dir a root directory is removed only after a listing that began this long after the DeleteVolume's first attempt (docs/design.md, Delete step 6), so that another writer's access point made on it just before is seen and the directory kept; the orphan collector releases a record naming no access point only after a listing that began this long after it marked the record; the GID allocator frees the ids of an access point this process made once a listing that began this long after does not show it (another replica deleted it) (0: no wait)")
	fs.StringVar(&cfg.LocalRoot, "local-root", "", "emulator data directory: mount file systems with bind mounts from DIR/<fs-id>/... instead of mount -t efs")
	fs.StringVar(&cfg.TempDir, "tmp-dir", "", "parent directory of temporary mount points, the per-call efs-csi-delete-* ones (default: the system temp dir)")
	fs.StringVar(&cfg.MetricsAddress, "http-endpoint", "", "address of the Prometheus /metrics and /healthz endpoint, e.g. 127.0.0.1:3301 (empty: none); --metrics-address is its deprecated alias (both set is an error)")
	fs.StringVar(&o.metricsAlias, "metrics-address", "", "deprecated alias of --http-endpoint (both set is an error)")
	fs.StringVar(&cfg.MetricsCertFile, "metrics-cert-file", "", "TLS certificate for the metrics endpoint (with --metrics-key-file)")
	fs.StringVar(&cfg.MetricsKeyFile, "metrics-key-file", "", "TLS key for the metrics endpoint (with --metrics-cert-file)")
	fs.BoolVar(&cfg.VolMetricsOptIn, "vol-metrics-opt-in", false, "report volume usage in NodeGetVolumeStats: advertise GET_VOLUME_STATS, so kubelet asks for every volume's own usage (a cached walk, docs/node.md)")
	o.volMetricsRefresh = minutes(240 * time.Minute)
	fs.Var(&o.volMetricsRefresh, "vol-metrics-refresh-period", "how often a volume's usage is walked again (recomputed), in minutes, fractional or a Go duration such as 4h")
	fs.IntVar(&o.volMetricsFSRateLimit, "vol-metrics-fs-rate-limit", 5, "usage walks (computations) running at once per file system")
	fs.DurationVar(&cfg.UnmountTimeout, "unmount-timeout", 30*time.Second, "with --force-unmount-after-timeout: how long an unmount may be blocked before it is forced (umount -f -l)")
	fs.BoolVar(&o.forceUnmount, "force-unmount-after-timeout", false, "force an unmount still running after --unmount-timeout (upstream's default: never force)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long calls in flight may run after SIGTERM")
	fs.IntVar(&cfg.MaxInflightMounts, "max-inflight-mounts", 16, "bound on concurrent NodePublishVolume calls on the node; calls over it wait for a slot within their deadline (--max-inflight-mount-calls-opt-in replaces it)")
	fs.BoolVar(&o.inflightOptIn, "max-inflight-mount-calls-opt-in", false, "upstream's bound instead of --max-inflight-mounts: use --max-inflight-mount-calls (when over 0) as the bound on concurrent NodePublishVolume calls, answering ABORTED at once over it")
	fs.IntVar(&o.inflightLimit, "max-inflight-mount-calls", 0, "with --max-inflight-mount-calls-opt-in: concurrent NodePublishVolume calls, over which NodePublishVolume is ABORTED at once")
	fs.BoolVar(&o.attachOptIn, "volume-attach-limit-opt-in", false, "report --volume-attach-limit as the node's MaxVolumesPerNode in NodeGetInfo (without the opt-in: no limit)")
	fs.IntVar(&o.attachLimit, "volume-attach-limit", 0, "with --volume-attach-limit-opt-in: MaxVolumesPerNode in NodeGetInfo (without the opt-in: no limit)")
	fs.StringVar(&o.rateLimits, "api-rate-limits", "", `ceilings on the EFS API request rate over the adaptive rate, for an account other clients share: Operation=perSecond[:burst],... ("*" for the rest, 0 = none; default none: pacing adapts to EFS's throttles)`)
	fs.BoolVar(&o.adaptive, "adaptive-retry-mode", true, "adapt each EFS operation's request rate to EFS's throttles: unpaced until throttles follow this driver's own rate (20% of its last 100 requests, at least 12), then paced at 1.1 x what EFS lets through (docs/pacing.md); false: throttles are only retried")
	fs.IntVar(&cfg.EFS.MaxInFlight, "api-max-inflight", efs.DefaultMaxInFlight, "bound on EFS API requests in flight per operation (-1: unbounded)")
	fs.StringVar(&cfg.GIDVerify, "gid-verify", "auto", "accepted and ignored (auto, always or never): GIDs are unique by construction across every controller and cluster running this release (each access point's client token is its file system and GID: EFS binds it to one access point)")
	fs.DurationVar(&cfg.HandoverFence, "handover-fence", 15*time.Second, "with the record in Leases: how long the calls of the controller this one takes over from (upstream's, in an in-place upgrade) may still run after the handover, its csi-provisioner's --timeout; the cluster's first creates wait this long, plus --listing-lag, after a controller's first CreateVolume or DeleteVolume, once per record (docs/design.md, \"The handover from upstream\"; 0: no wait)")
	fs.StringVar(&cfg.Journal, "journal", "auto", `where the record of this cluster's volumes and GIDs (ownership: each volume's token, path, GID, access point, claim; each GID's holder) is kept, before any access point is made: kubernetes or leases (Leases efs-csi-journal-* in the controller's namespace, shared by every replica; upstream's RBAC grants them as the chart's does), file[:DIR] (the controllers of one host; default DIR: --tmp-dir/efs-csi-journal, mode 0700), auto (leases when the Kubernetes API and the controller's namespace are known, else file); docs/design.md, "The record"`)
	cfg.Kube.JournalQPS = kube.DefaultJournalQPS
	fs.Var((*qps)(&cfg.Kube.JournalQPS), "journal-kube-api-qps", "requests per second the record (--journal leases) may send the Kubernetes API; with Leases each request carries every operation queued on its shard meanwhile, so above this rate requests grow fuller, not more numerous")
	fs.IntVar(&cfg.Kube.JournalBurst, "journal-kube-api-burst", kube.DefaultJournalBurst, "requests the record may send the Kubernetes API at once above --journal-kube-api-qps")
	fs.DurationVar(&cfg.OrphanInterval, "orphan-gc-interval", 0, "delete the volumes this cluster's record holds that never had a PersistentVolume and whose claim is gone (docs/design.md), checking this often, in the replica holding the collector's Lease (0: off; needs the Kubernetes API)")
	fs.DurationVar(&cfg.OrphanGrace, "orphan-gc-grace", 10*time.Minute, "how long an access point must stay orphaned before it is deleted")
	fs.StringVar(&cfg.ClusterID, "cluster-id", "", "this cluster's identity, written as the efs.csi.aws.com/cluster-id tag with --descriptive-tags (default: the UID of the kube-system namespace when the Kubernetes API is reachable; without either no tag is written and nothing is swept)")
	fs.StringVar(&cfg.LeaseNamespace, "leader-election-namespace", "", "namespace of the orphan collector's Lease <driver-name>-orphan-collector, which makes one replica collect (default: the pod's namespace)")
	const kubeReads = "where the cluster ID, PVs, claims, StorageClasses and the orphan collector's Lease are read"
	fs.StringVar(&cfg.Kube.URL, "kube-api-url", "", "Kubernetes API server URL, "+kubeReads+" (default: in-cluster)")
	fs.StringVar(&cfg.Kube.TokenFile, "kube-token-file", "", "bearer token file of the Kubernetes API server, "+kubeReads+" (default: the pod's service account token)")
	fs.StringVar(&cfg.Kube.CAFile, "kube-ca-file", "", "CA bundle of the Kubernetes API server, "+kubeReads+" (default: the pod's service account CA)")
	fs.StringVar(&o.logFormat, "logging-format", "text", "log format: text (klog) or json")
	fs.StringVar(&o.logFormatAlias, "log-format", "", "alias of --logging-format: text or json")
	fs.BoolVar(&o.debugLogs, "debug-logs", false, "debug logging (as -v=5), and efs-utils', stunnel's and efs-proxy's")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
}

// efsUtilsFlags are the node plugin's efs-utils flags: upstream's, and the
// chart's useFIPS and portRangeUpperBound, which upstream's chart passes as
// environment. Both efs-utils.conf and s3files-utils.conf are written from
// them.
func efsUtilsFlags(fs *flag.FlagSet, eu *driver.EFSUtilsConfig, o *options) {
	fs.StringVar(&eu.Dirs.ConfigDir, "efs-utils-config-dir-path", "/var/amazon/efs", "efs-utils configuration directory (a host directory), where efs-utils.conf and s3files-utils.conf are written; --efs-utils-etc-dir links there")
	fs.StringVar(&eu.Dirs.LegacyDir, "efs-utils-config-legacy-dir-path", "/etc/amazon/efs-legacy", "the host's old /etc/amazon/efs: used instead of --efs-utils-config-dir-path when it holds an efs-utils.conf")
	fs.StringVar(&eu.Dirs.StaticFilesDir, "efs-utils-static-files-path", "/etc/amazon/efs-static-files/", "efs-utils static files of the image, restored into the configuration directory at every start (efs-utils.crt replaced, others when missing)")
	fs.StringVar(&eu.Dirs.EtcDir, "efs-utils-etc-dir", "/etc/amazon/efs", "where efs-utils reads its configuration: linked to the configuration directory")
	fs.BoolVar(&eu.Settings.CloudWatchLog, "efs-cloudwatch-log-enabled", false, "efs-utils.conf [cloudwatch-log] enabled")
	const overrides = " settings, comma-separated section:key=value: each must name a key efs-utils 3.2.0's file has, with a value efs-utils can read, else the node plugin does not start"
	fs.StringVar(&o.efsUtilsOverrides, "efs-utils-conf-overrides", "", "efs-utils.conf"+overrides)
	fs.BoolVar(&eu.Settings.S3FilesCloudWatchLog, "s3files-cloudwatch-log-enabled", true, "s3files-utils.conf [cloudwatch-log] enabled")
	fs.BoolVar(&eu.Settings.S3FilesCloudWatchMetrics, "s3files-cloudwatch-metrics-enabled", true, "s3files-utils.conf [proxy] metrics_enabled")
	fs.StringVar(&o.s3filesUtilsOverrides, "s3files-utils-conf-overrides", "", "s3files-utils.conf"+overrides)
	fs.BoolVar(&eu.Settings.FIPS, "efs-utils-fips", envBool("FIPS_ENABLED"), "efs-utils fips_mode_enabled (default: $FIPS_ENABLED, the chart's useFIPS); the stunnel mount option is then refused")
	fs.IntVar(&o.portUpper, "efs-utils-port-range-upper-bound", envInt("PORT_RANGE_UPPER_BOUND"), fmt.Sprintf("upper bound of efs-utils' TLS tunnel ports [%[1]d, bound) (default: $PORT_RANGE_UPPER_BOUND, the chart's portRangeUpperBound; 0: efs-utils' own, %[2]d; a lower bound is raised to %[2]d, as upstream does)", efsutils.DefaultPortRangeLower, efsutils.MinPortRangeUpper))
	fs.StringVar(&eu.Watchdog.Path, "efs-utils-watchdog-path", "amazon-efs-mount-watchdog", "efs-utils' watchdog, supervised by the node plugin (not installed: a log line)")
}

// envBool and envInt read the environment upstream's chart sets; a value
// that does not parse is the zero value, which Render then rejects or
// replaces by efs-utils' default.
func envBool(name string) bool { b, _ := strconv.ParseBool(os.Getenv(name)); return b }
func envInt(name string) int   { i, _ := strconv.Atoi(os.Getenv(name)); return i }
