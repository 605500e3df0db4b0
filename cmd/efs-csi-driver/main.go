// Command efs-csi-driver serves the CSI Identity, Controller and Node services
// for Amazon EFS access points on a unix socket.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/efs-csi/efs-csi-driver/internal/logging"
	"github.com/efs-csi/efs-csi-driver/pkg/driver"
)

func main() {
	var (
		cfg               driver.Config
		tags, logFormat   string
		rateLimits        string
		metricsAlias      string
		version           bool
		verbosity         int
		volMetricsRefresh time.Duration
	)
	flag.StringVar(&cfg.Endpoint, "endpoint", "unix:///tmp/csi.sock", "CSI endpoint (unix socket)")
	flag.StringVar(&cfg.DriverName, "driver-name", "efs.csi.aws.com", "CSI driver name")
	flag.StringVar(&cfg.Mode, "mode", driver.ModeAll, "services to run: controller, node or all")
	flag.StringVar(&cfg.NodeID, "node-id", "", "node ID reported by NodeGetInfo (required in node and all modes)")
	flag.StringVar(&cfg.Zone, "zone", "", "availability zone reported as topology by NodeGetInfo")
	flag.StringVar(&tags, "tags", "", "space-separated key:value tags added to every access point")
	flag.BoolVar(&cfg.DeleteRootDir, "delete-access-point-root-dir", false, "remove an access point's root directory and its data on DeleteVolume")
	flag.StringVar(&cfg.LocalRoot, "local-root", "", "emulator data directory: mount file systems with bind mounts from DIR/<fs-id> instead of mount -t efs")
	flag.StringVar(&cfg.TempDir, "tmp-dir", "", "parent directory of temporary mount points (default: the system temp dir)")
	flag.StringVar(&cfg.MetricsAddress, "metrics-address", "", "address of the Prometheus /metrics endpoint (empty: none)")
	flag.StringVar(&metricsAlias, "http-endpoint", "", "alias of --metrics-address, as the upstream driver names it")
	flag.BoolVar(&cfg.VolMetricsOptIn, "vol-metrics-opt-in", false, "report volume usage in NodeGetVolumeStats")
	flag.DurationVar(&volMetricsRefresh, "vol-metrics-refresh-period", 0, "accepted for upstream compatibility; stats are read on demand")
	flag.DurationVar(&cfg.UnmountTimeout, "unmount-timeout", 30*time.Second, "how long an unmount may take before it is forced (umount -f -l)")
	flag.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long calls in flight may run after SIGTERM")
	flag.IntVar(&cfg.MaxInflightMounts, "max-inflight-mounts", 16, "bound on concurrent mount operations on the node")
	flag.StringVar(&rateLimits, "api-rate-limits", "", "client-side EFS API rates: Operation=perSecond[:burst],... (\"*\" for the rest, 0 = unlimited; default CreateAccessPoint/DeleteAccessPoint 10/s, reads 20/s)")
	flag.StringVar(&cfg.GIDVerify, "gid-verify", "auto", "check allocated GIDs against other writers after each create: auto (while another controller may be active), always or never")
	flag.DurationVar(&cfg.OrphanInterval, "orphan-gc-interval", 0, "delete this cluster's access points that never had a PersistentVolume and whose claim is gone, checking this often, in the replica holding the collector's Lease (0: off; needs the Kubernetes API and a cluster ID)")
	flag.DurationVar(&cfg.OrphanGrace, "orphan-gc-grace", 10*time.Minute, "how long an access point must stay orphaned before it is deleted")
	flag.StringVar(&cfg.ClusterID, "cluster-id", "", "this cluster's identity, written as the efs.csi.aws.com/cluster-id tag on every access point (default: the UID of the kube-system namespace when the Kubernetes API is reachable; without either no tag is written and nothing is collected)")
	flag.StringVar(&cfg.LeaseNamespace, "leader-election-namespace", "", "namespace of the orphan collector's Lease (default: the pod's namespace)")
	flag.StringVar(&cfg.Kube.URL, "kube-api-url", "", "Kubernetes API server URL for the orphan collector (default: in-cluster)")
	flag.StringVar(&cfg.Kube.TokenFile, "kube-token-file", "", "bearer token file (default: the pod's service account token)")
	flag.StringVar(&cfg.Kube.CAFile, "kube-ca-file", "", "API server CA bundle (default: the pod's service account CA)")
	flag.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	flag.IntVar(&verbosity, "v", 0, "log verbosity (accepted for upstream compatibility; 5+ logs debug)")
	flag.BoolVar(&version, "version", false, "print the version and exit")
	flag.Parse()

	if version {
		fmt.Println(driver.Version)
		return
	}
	level := slog.LevelInfo
	if verbosity >= 5 {
		level = slog.LevelDebug
	}
	log, err := logging.New(os.Stderr, logFormat, level)
	if err != nil {
		fail(err)
	}
	if cfg.MetricsAddress == "" {
		cfg.MetricsAddress = metricsAlias
	}
	if cfg.Tags, err = driver.ParseTags(tags); err != nil {
		fail(err)
	}
	if cfg.EFS.RateLimits, err = driver.ParseRateLimits(rateLimits); err != nil {
		fail(err)
	}
	cfg.Logger = log
	klog.SetSlogLogger(log) // client-go's leader election logs through klog

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	d, err := driver.New(ctx, cfg)
	if err != nil {
		fail(err)
	}
	if err := d.Run(ctx); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "efs-csi-driver:", err)
	os.Exit(1)
}
