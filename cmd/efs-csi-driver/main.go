// Command efs-csi-driver serves the CSI Identity, Controller and Node services
// for Amazon EFS access points on a unix socket.
//
// It takes every flag of the upstream aws-efs-csi-driver (v3.4), so that its
// manifests and chart arguments run unchanged; klog owns the log flags and
// the output format, as in the sidecars of the same pods.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/efs-csi/efs-csi-driver/internal/audit"
	"github.com/efs-csi/efs-csi-driver/internal/cli"
	"github.com/efs-csi/efs-csi-driver/internal/logging"
	"github.com/efs-csi/efs-csi-driver/pkg/driver"
	"github.com/efs-csi/efs-csi-driver/pkg/efsutils"
)

func main() {
	if len(os.Args) > 1 {
		for _, c := range subcommands {
			if os.Args[1] == c.name {
				os.Exit(c.main(os.Args[2:]))
			}
		}
	}
	var (
		cfg driver.Config
		o   options
	)
	fs, _ := newFlagSet(&cfg, &o)
	eu := &cfg.EFSUtils
	if code, ok := cli.Parse(fs, os.Args[1:], os.Stdout, os.Stderr); !ok {
		os.Exit(code)
	}

	if o.version {
		// Upstream's JSON (driverVersion, gitCommit, buildDate, ...).
		fmt.Println(driver.VersionJSON())
		return
	}
	if o.logFormatAlias != "" {
		o.logFormat = o.logFormatAlias
	}
	if o.debugLogs {
		_ = fs.Set("v", "5")
	}
	log, err := logging.NewKlog(os.Stderr, o.logFormat)
	if err != nil {
		fail(err)
	}
	cfg.Logger = log
	if o.metricsAlias != "" {
		if cfg.MetricsAddress != "" {
			fail(fmt.Errorf("--http-endpoint and its deprecated alias --metrics-address are both set"))
		}
		cfg.MetricsAddress = o.metricsAlias
		log.Warn("--metrics-address is deprecated: use --http-endpoint")
	}
	if !o.forceUnmount {
		cfg.UnmountTimeout = 0 // never force, as upstream by default
	}
	if o.inflightOptIn && o.inflightLimit > 0 {
		// Upstream's semantics: over the limit is ABORTED at once.
		cfg.MaxInflightMounts, cfg.AbortInflightMounts = o.inflightLimit, true
	}
	if o.attachOptIn {
		cfg.VolumeAttachLimit = o.attachLimit
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
	cfg.VolMetricsRefresh, cfg.VolMetricsFSRateLimit = time.Duration(o.volMetricsRefresh), o.volMetricsFSRateLimit
	eu.Settings.Debug, eu.Settings.PortRangeUpper = o.debugLogs, o.portUpper
	if eu.Settings.Overrides, err = efsutils.ParseOverrides(o.efsUtilsOverrides); err != nil {
		fail(fmt.Errorf("--efs-utils-conf-overrides: %w", err))
	}
	if eu.Settings.S3FilesOverrides, err = efsutils.ParseOverrides(o.s3filesUtilsOverrides); err != nil {
		fail(fmt.Errorf("--s3files-utils-conf-overrides: %w", err))
	}
	var dropped []string
	if cfg.Tags, dropped, err = driver.ParseTags(o.tags); err != nil {
		fail(err)
	}
	for _, t := range dropped {
		log.Warn("--tags: tag dropped, as upstream drops it: it has two unescaped colons (escape a colon in a key or value as \\:)", "tag", t)
	}
	if cfg.EFS.RateLimits, err = driver.ParseRateLimits(o.rateLimits); err != nil {
		fail(err)
	}
	cfg.EFS.DisableAdaptive = !o.adaptive

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

// subcommands are the commands efs-csi-driver runs instead of serving, by
// their first argument; --help lists them.
var subcommands = []struct {
	name, summary string
	main          func(args []string) int
}{
	{"audit", "report a cluster's leaked and lost volumes, duplicate GIDs and leftover directories; --fix deletes the provable leaks (efs-csi-driver audit --help)", audit.Main},
}

func fail(err error) {
	klog.Flush()
	fmt.Fprintln(os.Stderr, "efs-csi-driver:", err)
	os.Exit(1)
}
