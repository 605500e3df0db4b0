// Package metrics holds the driver's Prometheus metrics. One Registry per
// driver process (tests create their own, so nothing is global).
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Names the stress tool's audit reads back; keep them stable.
const (
	InFlightName  = "efs_csi_operations_in_flight"
	LocksHeldName = "efs_csi_locks_held"
)

// Metrics is the set of collectors. All methods are safe for concurrent use.
type Metrics struct {
	reg       *prometheus.Registry
	rpcs      *prometheus.CounterVec
	rpcTime   *prometheus.HistogramVec
	inFlight  prometheus.Gauge
	aborted   *prometheus.CounterVec
	apiCalls  *prometheus.CounterVec
	apiTime   *prometheus.HistogramVec
	apiRetry  *prometheus.CounterVec
	throttles *prometheus.CounterVec
	// The upstream driver's names, so its dashboards and alerts work.
	upTime      *prometheus.HistogramVec
	upErrors    *prometheus.CounterVec
	upThrottles *prometheus.CounterVec
	rpcRequests *prometheus.CounterVec
}

// New registers every collector on a fresh registry.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "efs_csi_rpc_total", Help: "CSI RPCs by method and gRPC code.",
		}, []string{"method", "code"}),
		rpcTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "efs_csi_rpc_duration_seconds", Help: "CSI RPC latency by method and gRPC code.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}, []string{"method", "code"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: InFlightName, Help: "CSI RPCs being served now.",
		}),
		aborted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "efs_csi_lock_contention_total", Help: "Calls answered ABORTED because another operation held the volume or target.",
		}, []string{"method"}),
		apiCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "efs_csi_api_calls_total", Help: "EFS API attempts by operation and outcome.",
		}, []string{"operation", "outcome"}),
		apiTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "efs_csi_api_call_duration_seconds", Help: "EFS API attempt latency by operation.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}, []string{"operation"}),
		apiRetry: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "efs_csi_api_retries_total", Help: "EFS API retries by operation.",
		}, []string{"operation"}),
		throttles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "efs_csi_api_throttles_total", Help: "EFS API throttling answers by operation.",
		}, []string{"operation"}),
		rpcRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: RPCRequestsName, Help: "EFS API requests sent on behalf of CSI RPCs, retries and shared listings included, by method.",
		}, []string{"method"}),
		upTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "aws_efs_csi_api_request_duration_seconds", Help: "EFS API request latency by operation (the upstream driver's name).",
			Buckets: prometheus.DefBuckets,
		}, []string{"request"}),
		upErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aws_efs_csi_api_request_errors_total", Help: "EFS API request errors by operation and error code (the upstream driver's name).",
		}, []string{"request", "code"}),
		upThrottles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aws_efs_csi_api_request_throttles_total", Help: "EFS API requests EFS throttled, by operation (the upstream driver's name).",
		}, []string{"request"}),
	}
	m.reg.MustRegister(m.rpcs, m.rpcTime, m.inFlight, m.aborted, m.apiCalls, m.apiTime, m.apiRetry, m.throttles,
		m.upTime, m.upErrors, m.upThrottles, m.rpcRequests,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// RPCRequestsName is the counter of EFS requests per CSI method.
const RPCRequestsName = "efs_csi_rpc_api_requests_total"

// RPCRequests adds the EFS requests one RPC of method sent.
func (m *Metrics) RPCRequests(method string, n int64) {
	if n > 0 {
		m.rpcRequests.WithLabelValues(method).Add(float64(n))
	}
}

// RPCStarted counts a call in flight; call the returned func with its code when it ends.
func (m *Metrics) RPCStarted(method string) func(code string) {
	start := time.Now()
	m.inFlight.Inc()
	return func(code string) {
		m.inFlight.Dec()
		m.rpcs.WithLabelValues(method, code).Inc()
		m.rpcTime.WithLabelValues(method, code).Observe(time.Since(start).Seconds())
		if code == "Aborted" {
			m.aborted.WithLabelValues(method).Inc()
		}
	}
}

// APICall implements efs.Observer.
func (m *Metrics) APICall(op, outcome string, d time.Duration) {
	m.apiCalls.WithLabelValues(op, outcome).Inc()
	m.apiTime.WithLabelValues(op).Observe(d.Seconds())
	m.upTime.WithLabelValues(op).Observe(d.Seconds())
	if outcome == "throttled" {
		m.throttles.WithLabelValues(op).Inc()
		m.upThrottles.WithLabelValues(op).Inc()
	}
}

// APIError implements efs.ErrorObserver.
func (m *Metrics) APIError(op, code string) { m.upErrors.WithLabelValues(op, code).Inc() }

// Retry implements efs.Observer.
func (m *Metrics) Retry(op string) { m.apiRetry.WithLabelValues(op).Inc() }

// GaugeFunc registers a gauge whose value is read at scrape time.
func (m *Metrics) GaugeFunc(name, help string, f func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// Register adds a custom collector (the GID allocator's per-file-system gauges).
func (m *Metrics) Register(c prometheus.Collector) { m.reg.MustRegister(c) }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
