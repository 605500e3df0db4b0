package driver

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
)

var gidDesc = prometheus.NewDesc("efs_csi_gid_allocator", "GIDs of the allocator's view per file system and state (used, reserved).",
	[]string{"file_system", "state"}, nil)

// gidCollector reads the allocator at scrape time.
type gidCollector struct{ c *controller.Service }

func (g gidCollector) Describe(ch chan<- *prometheus.Desc) { ch <- gidDesc }

func (g gidCollector) Collect(ch chan<- prometheus.Metric) {
	for fs, st := range g.c.GIDStats() {
		ch <- prometheus.MustNewConstMetric(gidDesc, prometheus.GaugeValue, float64(st.Used), fs, "used")
		ch <- prometheus.MustNewConstMetric(gidDesc, prometheus.GaugeValue, float64(st.Reserved), fs, "reserved")
	}
}
