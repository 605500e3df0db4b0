package driver

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
)

var (
	rootDirsKeptDesc = prometheus.NewDesc("efs_csi_root_dirs_kept_total",
		"Deletes that kept the root directory because another live access point reaches it.", nil, nil)
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
	ch <- prometheus.MustNewConstMetric(rootDirsKeptDesc, prometheus.CounterValue, float64(r.c.RootDirsKept()))
	ch <- prometheus.MustNewConstMetric(pendingUnmountsDesc, prometheus.GaugeValue, float64(r.c.PendingUnmounts()))
}
