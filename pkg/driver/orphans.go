package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/orphans"
)

// orphanElection are the collector's Lease timings: the csi-provisioner's
// defaults. A standby takes over within RetryPeriod of a graceful stop (the
// lease is released) and within LeaseDuration of a crash; nothing is urgent
// about collecting, so there is no reason to renew more often. Tests shorten them.
var orphanElection = kube.Election{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 5 * time.Second}

// clusterIDTimeout bounds reading the kube-system namespace at start.
const clusterIDTimeout = 30 * time.Second

// clusterID is --cluster-id, or else the UID of the kube-system namespace
// when a Kubernetes API is configured, or else "" (none is known: the
// controller writes no cluster ID tag). The returned client is nil without a
// Kubernetes API; failing to build one is fatal only when the orphan
// collector needs it. Failing to read the UID is never fatal: the orphan
// collector acts on the record (pkg/journal), which is this cluster's
// already, and needs no cluster ID.
func clusterID(ctx context.Context, cfg Config) (string, *kube.Client, error) {
	if !cfg.Kube.Configured() {
		return cfg.ClusterID, nil, nil
	}
	kc, err := kube.New(cfg.Kube)
	if err != nil {
		if cfg.OrphanInterval > 0 {
			return "", nil, fmt.Errorf("orphan collection: %w", err)
		}
		cfg.Logger.Warn("no Kubernetes API client", slog.String("error", err.Error()))
		return cfg.ClusterID, nil, nil
	}
	kc.SetLogger(cfg.Logger) // the record's damage (kube.LeaseJournalStore)
	if cfg.ClusterID != "" {
		return cfg.ClusterID, kc, nil
	}
	ctx, cancel := context.WithTimeout(ctx, clusterIDTimeout)
	defer cancel()
	for {
		uid, err := kc.NamespaceUID(ctx, "kube-system")
		if err == nil {
			return uid, kc, nil
		}
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || ctx.Err() != nil {
			err = fmt.Errorf("cluster ID: %w (set --cluster-id, or allow get on namespaces/kube-system)", err)
			cfg.Logger.Warn("no cluster ID: access points get no cluster ID tag", slog.String("error", err.Error()))
			return "", kc, nil
		}
		cfg.Logger.Info("reading the cluster ID", slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

// orphanCollector builds the collector and the election it runs under.
type orphanCollector struct {
	*orphans.Collector
	kube     *kube.Client
	driver   string
	election kube.Election
	log      *slog.Logger
	leading  atomic.Bool
}

// newOrphanCollector collects from ctl's record through ctl; with the
// cluster's one record (clusterRecord: Leases, ConfigMaps) it also sweeps,
// through ctl, this cluster's access points that no record names
// (controller.Service.SweepUnrecorded).
func newOrphanCollector(cfg Config, clusterID string, kc *kube.Client, clusterRecord bool, ctl *controller.Service) (*orphanCollector, error) {
	if kc == nil {
		return nil, errors.New("orphan collection needs the Kubernetes API: run in a pod or set --kube-api-url")
	}
	ns := cfg.LeaseNamespace
	if ns == "" {
		ns = kube.PodNamespace()
	}
	if ns == "" {
		return nil, errors.New("orphan collection: --leader-election-namespace is required outside a pod")
	}
	oCfg := orphans.Config{
		Driver: cfg.DriverName, ClusterID: clusterID, Interval: cfg.OrphanInterval, Grace: cfg.OrphanGrace,
		Cluster: kc, Journal: ctl.Journal(), Collector: ctl, Logger: cfg.Logger,
		Purge: ctl.PurgeTrash, Restores: ctl.CollectRestores, Readers: ctl.CollectReaders,
	}
	if clusterRecord {
		oCfg.Sweep = ctl.SweepUnrecorded
		oCfg.FileSystems = func(ctx context.Context) ([]string, error) { return kc.FileSystemIDs(ctx, cfg.DriverName) }
	}
	c, err := orphans.New(oCfg)
	if err != nil {
		return nil, err
	}
	oc := &orphanCollector{Collector: c, kube: kc, driver: cfg.DriverName, election: orphanElection, log: cfg.Logger}
	oc.election.Namespace = ns
	oc.election.Name = strings.ReplaceAll(cfg.DriverName, ".", "-") + "-orphan-collector"
	oc.election.OnLeading = func(leading bool) {
		oc.leading.Store(leading)
		oc.log.Info("orphan collector", slog.Bool("leading", leading),
			slog.String("lease", oc.election.Namespace+"/"+oc.election.Name), slog.String("clusterID", clusterID))
	}
	return oc, nil
}

// run collects while this replica holds the Lease, until ctx ends, with a
// PV watch beside the rounds so that a PV that lives only between two of
// them is still seen.
func (oc *orphanCollector) run(ctx context.Context) {
	lead := func(ctx context.Context) {
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { oc.kube.WatchVolumeHandles(ctx, oc.driver, oc.Observe) })
		oc.Run(ctx)
	}
	if err := oc.kube.RunWhileLeader(ctx, oc.election, lead); err != nil {
		oc.log.Error("orphan collector election", slog.String("error", err.Error()))
	}
}

var (
	orphanAPDesc = prometheus.NewDesc("efs_csi_orphan_collector_access_points",
		"Volumes in this cluster's record at the last round, by owner: this_cluster (no PV named it yet), "+
			"this_cluster_bound (a PV named it: never collected). Access points without a record are never collected and not counted.",
		[]string{"owner"}, nil)
	orphanCandDesc  = prometheus.NewDesc("efs_csi_orphan_collector_candidates", "Orphans waiting out their grace period.", nil, nil)
	orphanKeptDesc  = prometheus.NewDesc("efs_csi_orphan_collector_kept", "Orphans past their grace period that are not collected: their access point cannot be proven theirs with the controller's own credentials (a class with an awsRoleArn secret), or carries their token at another root directory.", nil, nil)
	orphanDelDesc   = prometheus.NewDesc("efs_csi_orphan_collector_deleted_total", "Orphaned volumes collected: their access point deleted, or the record of a create that made none released.", nil, nil)
	orphanRndDesc   = prometheus.NewDesc("efs_csi_orphan_collector_rounds_total", "Collection rounds by result.", []string{"result"}, nil)
	orphanLeadDesc  = prometheus.NewDesc("efs_csi_orphan_collector_leader", "1 while this replica holds the collector's Lease.", nil, nil)
	orphanCollected = []*prometheus.Desc{orphanAPDesc, orphanCandDesc, orphanKeptDesc, orphanDelDesc, orphanRndDesc, orphanLeadDesc}
)

// Describe and Collect read the collector at scrape time.
func (oc *orphanCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range orphanCollected {
		ch <- d
	}
}

func (oc *orphanCollector) Collect(ch chan<- prometheus.Metric) {
	st := oc.Stats()
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	gauge(orphanAPDesc, st.Own-st.OwnBound, "this_cluster")
	gauge(orphanAPDesc, st.OwnBound, "this_cluster_bound")
	gauge(orphanCandDesc, st.Candidates)
	gauge(orphanKeptDesc, st.Kept)
	ch <- prometheus.MustNewConstMetric(orphanDelDesc, prometheus.CounterValue, float64(st.Deleted))
	ch <- prometheus.MustNewConstMetric(orphanRndDesc, prometheus.CounterValue, float64(st.Rounds-st.FailedRounds), "ok")
	ch <- prometheus.MustNewConstMetric(orphanRndDesc, prometheus.CounterValue, float64(st.FailedRounds), "error")
	leading := 0
	if oc.leading.Load() {
		leading = 1
	}
	gauge(orphanLeadDesc, leading)
}
