// Package driver wires the CSI services into one gRPC server on a unix socket:
// configuration and its validation, logging and error-code interceptors,
// metrics, and graceful shutdown.
package driver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/efsutils"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/metrics"
	"github.com/efs-csi/efs-csi-driver/pkg/mount"
	"github.com/efs-csi/efs-csi-driver/pkg/node"
	"github.com/efs-csi/efs-csi-driver/pkg/reaper"
)

// Modes the driver runs in.
const (
	ModeController = "controller"
	ModeNode       = "node"
	ModeAll        = "all"
)

// Config is everything the command line sets.
type Config struct {
	Endpoint        string // unix:///path/csi.sock or a plain path
	DriverName      string
	Mode            string
	NodeID          string
	Zone            string            // --zone, reported by NodeGetInfo; "": discovered (zone.go), maybe unknown
	Tags            map[string]string // parsed --tags
	DescriptiveTags bool              // --descriptive-tags: see controller.Config.DescriptiveTags
	DeleteRootDir   bool
	ListingLag      time.Duration // --listing-lag: see controller.Config.ListingLag
	LocalRoot       string        // emulator data directory: bind mounts instead of mount -t efs
	TempDir         string        // parent of the controller's temporary mount points
	MetricsAddress  string        // "" = no metrics server
	MetricsCertFile string        // with MetricsKeyFile: serve metrics over TLS
	MetricsKeyFile  string
	VolMetricsOptIn bool

	// AccessPointLimit (--access-point-limit): access points per file
	// system; a class over several places no volume on one at it.
	AccessPointLimit int

	// VolMetricsRefresh and VolMetricsFSRateLimit are upstream's per-volume
	// usage settings (--vol-metrics-refresh-period, --vol-metrics-fs-rate-limit).
	VolMetricsRefresh     time.Duration
	VolMetricsFSRateLimit int
	VolumeAttachLimit     int // MaxVolumesPerNode in NodeGetInfo; 0 = none
	// MemoryLimit is the node plugin's memory limit in bytes (upstream's
	// CSI_NODE_MEMORY_LIMIT); under node.S3FilesReadCacheMinMemory (30
	// GiB), or unknown (0), S3 Files mounts go without the read cache
	// (nos3readcache), as upstream.
	MemoryLimit         int64
	UnmountTimeout      time.Duration
	ShutdownTimeout     time.Duration // how long calls in flight may run after SIGTERM
	MaxInflightMounts   int
	AbortInflightMounts bool          // over MaxInflightMounts: ABORTED at once, not queued (--max-inflight-mount-calls-opt-in)
	GIDVerify           string        // accepted for compatibility: controller.VerifyAuto, VerifyAlways or VerifyNever
	HandoverFence       time.Duration // --handover-fence: controller.Config.HandoverFence, with the record in Leases
	// Journal is where the record of this cluster's volumes and GIDs is
	// kept (--journal): "auto" or "" (Leases when the Kubernetes API and
	// the controller's namespace are known, else a file in TempDir),
	// "kubernetes" (= "leases"), "configmaps", "file" or "file:DIR".
	Journal        string
	OrphanInterval time.Duration // 0: no orphan collection
	OrphanGrace    time.Duration
	ClusterID      string      // --cluster-id; "": the kube-system namespace's UID when Kubernetes is reachable
	LeaseNamespace string      // the orphan collector's Lease; "": the pod's namespace
	Kube           kube.Config // where the cluster ID, PVs, claims, StorageClasses and the Lease are read
	EFS            efs.Config
	// EFSUtils is the efs-utils runtime of a node plugin that mounts with
	// mount -t efs: efs-utils.conf and the watchdog.
	EFSUtils EFSUtilsConfig
	// NodeBackend "efs" mounts node volumes with mount -t efs even with a
	// LocalRoot (a stand-in mount.efs over the emulator's data, in tests);
	// "" mounts them like the controller: bind mounts with a LocalRoot,
	// mount -t efs otherwise.
	NodeBackend string
	// MountTypes are file system types an efs-utils mount may show besides
	// nfs4 (mount.WithMountTypes; a stand-in helper's bind mounts).
	MountTypes []string
	Logger     *slog.Logger
	// DisableTaintWatcher is upstream's $DISABLE_TAINT_WATCHER (the chart's
	// node.serviceAccount.disableMutation, which also drops patch on
	// Nodes): the node plugin leaves the startup taint alone.
	DisableTaintWatcher bool

	noStartupTaint bool // tests of other Node reads: no taint remover
}

// EFSUtilsConfig configures efs-utils on a node.
type EFSUtilsConfig struct {
	Dirs efsutils.Dirs
	// Settings; an empty Region is the EFS client's (EFS.Region, else
	// $AWS_REGION, else $AWS_DEFAULT_REGION, else efs-utils asks the
	// instance metadata).
	Settings efsutils.Settings
	// Watchdog is efs-utils' watchdog (Path "" = its installed path). Its
	// Logger is the driver's.
	Watchdog efsutils.Watchdog
}

// Driver is a configured, not yet serving, CSI plugin.
type Driver struct {
	cfg        Config
	log        *slog.Logger
	metrics    *metrics.Metrics
	controller *controller.Service
	node       *node.Service
	identity   *identity
	health     *efsHealth // nil in node mode
	orphans    *orphanCollector
	taint      *startupTaint // nil: not removing the startup taint (no Kubernetes API, or controller mode)
	socketPath string
	// efsConf is the efs-utils configuration a node mounting with mount -t
	// efs writes at Run (nil: no efs-utils runtime); reap is set when the
	// driver starts mount.efs at all, whose tunnels it must reap.
	efsConf *efsutils.Conf
	reap    bool
}

// ParseRateLimits parses --api-rate-limits: comma-separated
// Operation=perSecond[:burst] pairs, ceilings over the adaptive pacing; "*"
// names every operation not listed and a rate of 0 means no ceiling. ""
// sets none (the default).
func ParseRateLimits(s string) (map[string]efs.RateLimit, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]efs.RateLimit{}
	for _, kv := range strings.Split(s, ",") {
		op, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || op == "" {
			return nil, fmt.Errorf("--api-rate-limits: %q is not Operation=rate[:burst]", kv)
		}
		if op != "*" && !slices.Contains(efs.Ops, op) {
			return nil, fmt.Errorf("--api-rate-limits: unknown operation %q (want * or one of %s)", op, strings.Join(efs.Ops, ", "))
		}
		rs, bs, hasBurst := strings.Cut(v, ":")
		r, err := strconv.ParseFloat(rs, 64)
		if err != nil || r < 0 {
			return nil, fmt.Errorf("--api-rate-limits: %s: rate %q is not a non-negative number", op, rs)
		}
		b := int(math.Ceil(r))
		if hasBurst {
			if b, err = strconv.Atoi(bs); err != nil || b < 1 {
				return nil, fmt.Errorf("--api-rate-limits: %s: burst %q is not a positive integer", op, bs)
			}
		}
		out[op] = efs.RateLimit{PerSecond: r, Burst: b}
	}
	return out, nil
}

// New validates cfg and builds the services the mode asks for. It makes no
// EFS call: a driver whose EFS API is down still starts, and says so in its
// logs and metrics. A controller reads the cluster ID from Kubernetes (see
// clusterID).
func New(ctx context.Context, cfg Config) (*Driver, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DriverName == "" {
		cfg.DriverName = "efs.csi.aws.com"
	}
	switch cfg.Mode {
	case "":
		cfg.Mode = ModeAll
	case ModeController, ModeNode, ModeAll:
	default:
		return nil, fmt.Errorf("--mode %q: want controller, node or all", cfg.Mode)
	}
	sock, err := socketPath(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	if (cfg.MetricsCertFile == "") != (cfg.MetricsKeyFile == "") {
		return nil, errors.New("--metrics-cert-file and --metrics-key-file go together")
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	needEFS := cfg.Mode != ModeNode || cfg.LocalRoot != ""
	if needEFS || cfg.EFSUtils.Settings.Region == "" {
		// The node's efs-utils is given the region too, when one is known
		// (else it asks instance metadata itself).
		if err := resolveRegion(ctx, &cfg); err != nil && needEFS {
			return nil, err
		}
	}
	d := &Driver{cfg: cfg, log: cfg.Logger, metrics: metrics.New(), socketPath: sock}
	cfg.EFS.Observer = d.metrics
	if cfg.EFS.Logger == nil {
		cfg.EFS.Logger = cfg.Logger
	}

	var client *efs.Client
	if needEFS {
		if client, err = efs.New(ctx, cfg.EFS); err != nil {
			return nil, fmt.Errorf("EFS client: %w", err)
		}
	}
	var mounter *mount.Mounter
	efsOpts := []mount.Option{mount.WithLogger(cfg.Logger), mount.WithMountTypes(cfg.MountTypes...)}
	if cfg.LocalRoot != "" {
		// Against the emulator the node looks access points up, S3 Files'
		// through their own API.
		var s3 *efs.S3Files
		if s3, err = efs.NewS3Files(ctx, cfg.EFS); err != nil {
			return nil, fmt.Errorf("S3 Files client: %w", err)
		}
		mounter, err = mount.NewLocal(cfg.LocalRoot, client, mount.WithLogger(cfg.Logger), mount.WithS3FilesAccessPoints(s3))
	} else {
		mounter, err = mount.NewEFS(efsOpts...)
		d.reap = true
	}
	if err != nil {
		return nil, err
	}
	nodeMounter := mounter
	switch cfg.NodeBackend {
	case "":
	case "efs":
		if cfg.LocalRoot != "" {
			if nodeMounter, err = mount.NewEFS(efsOpts...); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("node back end %q: want efs or none", cfg.NodeBackend)
	}
	if cfg.Mode != ModeController && (cfg.LocalRoot == "" || cfg.NodeBackend == "efs") {
		s := cfg.EFSUtils.Settings
		if s.Region == "" {
			s.Region = cmp.Or(cfg.EFS.Region, os.Getenv("AWS_REGION"), os.Getenv("AWS_DEFAULT_REGION"))
		}
		conf, err := efsutils.Render(s)
		if err != nil {
			return nil, fmt.Errorf("efs-utils: %w", err)
		}
		for _, n := range conf.Notes {
			cfg.Logger.Warn("efs-utils: " + n)
		}
		if conf.FIPS {
			cfg.Logger.Warn("efs-utils in FIPS mode: TLS mounts go through efs-proxy (AWS-LC FIPS); the stunnel mount option is refused, the image has no OpenSSL FIPS provider for stunnel")
		}
		d.efsConf = &conf
		if cfg.EFSUtils.Dirs.ConfigDir == "" {
			return nil, errors.New("efs-utils: --efs-utils-config-dir-path is empty")
		}
		d.reap = true
	}

	d.identity = &identity{name: cfg.DriverName, controller: cfg.Mode != ModeNode, topology: cfg.Mode == ModeController}
	// clusterRecord: the record is the cluster's one (Leases, ConfigMaps),
	// not a file per host: the orphan collector sweeps what it does not
	// name (controller.Service.SweepUnrecorded).
	clusterRecord := false
	var kc *kube.Client
	if cfg.Mode != ModeNode {
		d.health = newEFSHealth(client, cfg.Logger)
		if cfg.ClusterID, kc, err = clusterID(ctx, cfg); err != nil {
			return nil, err
		}
		var refs controller.RefReader
		if kc != nil {
			refs = kubeRefs{kc}
		}
		store, err := journalStore(cfg, kc)
		if err != nil {
			return nil, err
		}
		_, perHost := store.(*journal.File)
		clusterRecord = !perHost
		fence := cfg.HandoverFence
		if perHost {
			fence = 0 // one process: no controller hands over to it (the handover is the Lease record's world)
		}
		d.controller, err = controller.New(controller.Config{
			Journal: store, EFS: client, Zones: client, Mounter: mounter, Refs: refs, Backends: backends{own: client, s3cfg: s3FilesConfig(cfg), mounter: mounter}, Tags: cfg.Tags, DescriptiveTags: cfg.DescriptiveTags, ClusterID: cfg.ClusterID, DeleteRootDir: cfg.DeleteRootDir, DirPreflight: controller.MountPrivileges, AccessPointLimit: cfg.AccessPointLimit,
			ListingLag: cfg.ListingLag, HandoverFence: fence, TempDir: cfg.TempDir, GIDVerify: cfg.GIDVerify, Logger: cfg.Logger,
			Copier: copyTree,
		})
		if err != nil {
			return nil, err
		}
	}
	if cfg.Mode != ModeController {
		if cfg.NodeID == "" {
			if cfg.NodeID, err = discoverNodeID(ctx); err != nil {
				return nil, err
			}
			cfg.Logger.Info("node ID discovered", slog.String("nodeID", cfg.NodeID))
		}
		zone, source, err := discoverZone(ctx, cfg)
		if zone != "" {
			cfg.Logger.Info("zone discovered", slog.String("zone", zone), slog.String("source", string(source)))
		} else {
			// Not fatal: regional file systems need no zone. But the provisioner
			// refuses WaitForFirstConsumer claims on a node without topology,
			// and One Zone volumes are never scheduled here.
			cfg.Logger.Warn("zone unknown: NodeGetInfo reports no topology", slog.String("why", err.Error()))
		}
		cfg.Zone = zone
		d.identity.topology = cfg.Mode == ModeAll && zone != ""
		if cfg.VolumeAttachLimit < 0 {
			return nil, fmt.Errorf("--volume-attach-limit %d is negative", cfg.VolumeAttachLimit)
		}
		d.node, err = node.New(node.Config{
			NodeID: cfg.NodeID, Zone: cfg.Zone, Mounter: nodeMounter, MaxConcurrentMounts: cfg.MaxInflightMounts,
			VolMetricsOptIn: cfg.VolMetricsOptIn, UnmountTimeout: cfg.UnmountTimeout, Logger: cfg.Logger,
			MaxVolumesPerNode: int64(cfg.VolumeAttachLimit), MemoryLimit: cfg.MemoryLimit, FIPS: d.efsConf != nil && d.efsConf.FIPS,
			VolMetricsRefresh: cfg.VolMetricsRefresh, VolMetricsFSRateLimit: cfg.VolMetricsFSRateLimit,
		})
		if err != nil {
			return nil, err
		}
		switch {
		case cfg.DisableTaintWatcher:
			cfg.Logger.Info("DISABLE_TAINT_WATCHER set: not removing the startup taint " + AgentNotReadyTaint)
		case !cfg.noStartupTaint:
			d.taint = startupTaintFor(cfg, kc, sock)
		}
	}
	if cfg.OrphanInterval > 0 && d.controller != nil {
		if d.orphans, err = newOrphanCollector(cfg, cfg.ClusterID, kc, clusterRecord, d.controller); err != nil {
			return nil, err
		}
	}
	d.registerGauges()
	return d, nil
}

func (d *Driver) registerGauges() {
	d.metrics.GaugeFunc(metrics.LocksHeldName, "Volume and target locks held now.", func() float64 {
		return float64(d.LocksHeld())
	})
	if d.controller != nil {
		d.metrics.Register(gidCollector{d.controller})
		d.metrics.Register(rootDirCollector{d.controller})
		d.metrics.GaugeFunc("efs_csi_efs_api_reachable", "1 when the last EFS API check got an answer, 0 after 3 checks in a row got none, -1 before either.", d.health.value)
	}
	if d.orphans != nil {
		d.metrics.Register(d.orphans)
	}
}

// s3FilesConfig is the S3 Files client's: the EFS client's, with its
// access point identities kept beside the controller's temporary mount
// points, so that a restarted controller lists without reading every access
// point again.
func s3FilesConfig(cfg Config) efs.Config {
	c := cfg.EFS
	if c.S3FilesStateDir == "" {
		c.S3FilesStateDir = filepath.Join(cmp.Or(cfg.TempDir, os.TempDir()), "efs-csi-s3files-identities")
	}
	return c
}

// LocksHeld counts the locks held by every service: zero at rest.
func (d *Driver) LocksHeld() int {
	n := 0
	if d.controller != nil {
		n += d.controller.LocksHeld()
	}
	if d.node != nil {
		n += d.node.LocksHeld()
	}
	return n
}

func socketPath(endpoint string) (string, error) {
	if endpoint == "" {
		return "", errors.New("--endpoint is required")
	}
	if p, ok := strings.CutPrefix(endpoint, "unix:"); ok && !strings.HasPrefix(p, "//") {
		// unix:/csi/csi.sock, as the upstream chart writes it.
		if p == "" {
			return "", fmt.Errorf("--endpoint %q has no path", endpoint)
		}
		return p, nil
	}
	if !strings.Contains(endpoint, "://") {
		return endpoint, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("--endpoint %q: %w", endpoint, err)
	}
	if u.Scheme != "unix" {
		return "", fmt.Errorf("--endpoint %q: only unix sockets are served", endpoint)
	}
	p := u.Path
	if u.Host != "" { // unix://tmp/csi.sock, as the upstream default is written
		p = "/" + u.Host + p
	}
	if p == "" {
		return "", fmt.Errorf("--endpoint %q has no path", endpoint)
	}
	return p, nil
}

// listen removes a stale socket left by a killed driver, but never one that a
// live driver still serves, then listens.
func listen(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s is served by a running process", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	return net.Listen("unix", path)
}

// Run serves until ctx is cancelled (SIGTERM), then stops taking new calls,
// lets calls in flight finish for up to ShutdownTimeout, cancels the rest and
// returns.
func (d *Driver) Run(ctx context.Context) error { return d.run(ctx, nil) }

// run closes ready, if given, once the socket accepts connections.
func (d *Driver) run(ctx context.Context, ready chan<- struct{}) error {
	if d.controller != nil {
		// A controller killed mid-delete leaves its temporary mount behind.
		if err := d.controller.CleanStaleMountPoints(ctx); err != nil {
			d.log.Warn("stale mount points", slog.String("error", err.Error()))
		}
	}
	if d.efsConf != nil {
		if _, err := efsutils.Setup(d.cfg.EFSUtils.Dirs, *d.efsConf, d.log); err != nil {
			return fmt.Errorf("efs-utils: %w", err)
		}
	}
	if d.reap {
		// mount.efs leaves its TLS tunnels to the driver; see pkg/reaper.
		if err := reaper.Enable(); err != nil {
			return err
		}
	}
	l, err := listen(d.socketPath)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(d.intercept))
	csi.RegisterIdentityServer(srv, d.identity)
	if d.controller != nil {
		csi.RegisterControllerServer(srv, d.controller)
	}
	if d.node != nil {
		csi.RegisterNodeServer(srv, d.node)
	}

	var httpSrv *http.Server
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	if d.cfg.MetricsAddress != "" {
		ml, err := net.Listen("tcp", d.cfg.MetricsAddress)
		if err != nil {
			l.Close()
			return fmt.Errorf("metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", d.metrics.Handler())
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
		httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		wg.Go(func() {
			serve := func() error { return httpSrv.Serve(ml) }
			if d.cfg.MetricsCertFile != "" {
				serve = func() error { return httpSrv.ServeTLS(ml, d.cfg.MetricsCertFile, d.cfg.MetricsKeyFile) }
			}
			if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		})
		d.log.Info("metrics serving", slog.String("address", ml.Addr().String()))
	}
	wg.Go(func() { errc <- srv.Serve(l) })
	// Background loops: Run returns only after they have (the collector
	// finishes its deletion in flight and releases its Lease).
	bctx, stopBackground := context.WithCancel(ctx)
	var background sync.WaitGroup
	defer stopBackground()
	if d.health != nil {
		background.Go(func() { d.health.run(bctx) })
	}
	if d.orphans != nil {
		background.Go(func() { d.orphans.run(bctx) })
	}
	if d.taint != nil {
		background.Go(func() { d.taint.run(bctx) })
	}
	if d.reap {
		background.Go(func() { reaper.Loop(bctx, 0, d.log, nil) })
	}
	if d.efsConf != nil {
		w := d.cfg.EFSUtils.Watchdog
		w.Logger, w.Disabled = d.log, !d.efsConf.WatchdogEnabled
		background.Go(func() { w.Run(bctx) })
	}
	if ready != nil {
		close(ready)
	}
	d.log.Info("driver serving", slog.String("endpoint", d.socketPath), slog.String("mode", d.cfg.Mode),
		slog.String("driver", d.cfg.DriverName), slog.String("version", Version))

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	d.log.Info("shutting down", slog.Duration("grace", d.cfg.ShutdownTimeout))
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(d.cfg.ShutdownTimeout):
		// Calls still running see their context cancelled and roll back.
		srv.Stop()
		<-stopped
	}
	if httpSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		httpSrv.Shutdown(sctx)
		cancel()
	}
	stopBackground()
	background.Wait()
	_ = os.Remove(d.socketPath)
	d.log.Info("stopped", slog.Int("locksHeld", d.LocksHeld()))
	return err
}
