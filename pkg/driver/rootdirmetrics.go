package driver

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
)

var (
	rootDirsKeptDesc = prometheus.NewDesc("efs_csi_root_dirs_kept_total",
		"Deletes with root-directory removal that kept the directory: reason shared (another live access point reaches it) or not_csi (no CSI driver made the access point).",
		[]string{"reason"}, nil)
	pendingUnmountsDesc = prometheus.NewDesc("efs_csi_pending_unmounts",
		"Temporary mount points of root-directory removal whose unmount failed and is retried.", nil, nil)
)

// rootDirCollector reads root-directory removal's counters at scrape time.
type rootDirCollector struct{ c *controller.Service }

func (r rootDirCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rootDirsKeptDesc
	ch <- pendingUnmountsDesc
}

func (r rootDirCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(rootDirsKeptDesc, prometheus.CounterValue, float64(r.c.RootDirsKept()), "shared")
	ch <- prometheus.MustNewConstMetric(rootDirsKeptDesc, prometheus.CounterValue, float64(r.c.RootDirsNotOwned()), "not_csi")
	ch <- prometheus.MustNewConstMetric(pendingUnmountsDesc, prometheus.GaugeValue, float64(r.c.PendingUnmounts()))
}
