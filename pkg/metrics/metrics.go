// Package metrics holds the driver's Prometheus metrics. One Registry per
// driver process (tests create their own, so nothing is global).
package metrics

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
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
			Name: APIRequestDurationName, Help: "AWS SDK API request duration by request type in seconds",
			Buckets: prometheus.DefBuckets,
		}, []string{"request", "service"}),
		upErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: APIRequestErrorsName, Help: "Total number of AWS SDK API errors by error code and request type",
		}, []string{"code", "request", "service"}),
		upThrottles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: APIRequestThrottlesName, Help: "Total number of throttled AWS SDK API requests per request type",
		}, []string{"request", "service"}),
	}
	// Upstream's series exist from the start for the operations it
	// instruments: its duration histograms at zero (its counters appear with
	// their first count).
	for _, op := range upstreamOps {
		m.upTime.WithLabelValues(upstreamRequest(op))
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

// The upstream driver's API series (docs/metrics.md upstream): per attempt
// sent, request is the API's operation name and service "efs" or "s3files".
const (
	APIRequestDurationName  = "aws_efs_csi_api_request_duration_seconds"
	APIRequestErrorsName    = "aws_efs_csi_api_request_errors_total"
	APIRequestThrottlesName = "aws_efs_csi_api_request_throttles_total"
)

// upstreamOps are the operations whose duration series upstream registers
// at start.
var upstreamOps = []string{
	efs.OpCreateAccessPoint, efs.OpDeleteAccessPoint, efs.OpDescribeAccessPoints,
	efs.OpDescribeFileSystems, efs.OpDescribeMountTargets,
	efs.OpS3CreateAccessPoint, efs.OpS3DeleteAccessPoint, efs.OpS3ListAccessPoints, efs.OpS3ListFileSystems,
}

// s3FilesPrefix is what efs puts before the S3 Files API's operation names.
const s3FilesPrefix = "S3Files."

// upstreamRequest splits an efs.Observer operation into upstream's request
// and service labels.
func upstreamRequest(op string) (request, service string) {
	if name, ok := strings.CutPrefix(op, s3FilesPrefix); ok {
		return name, "s3files"
	}
	return op, "efs"
}

// APICall implements efs.Observer.
func (m *Metrics) APICall(op, outcome string, d time.Duration) {
	m.apiCalls.WithLabelValues(op, outcome).Inc()
	m.apiTime.WithLabelValues(op).Observe(d.Seconds())
	if outcome == efs.OutcomeThrottled {
		m.throttles.WithLabelValues(op).Inc()
	}
	// A paced call was never sent: upstream times requests the SDK sends.
	if outcome != efs.OutcomePaced {
		request, service := upstreamRequest(op)
		m.upTime.WithLabelValues(request, service).Observe(d.Seconds())
	}
}

// APIError implements efs.ErrorObserver. As upstream, an error code the
// SDK calls a throttle counts as a throttle and not as an error, and only
// an API error code counts: an attempt that got no answer, or one without
// a code (code is then the outcome or the HTTP status), is in neither.
func (m *Metrics) APIError(op, code string) {
	request, service := upstreamRequest(op)
	if _, ok := retry.DefaultThrottleErrorCodes[code]; ok {
		m.upThrottles.WithLabelValues(request, service).Inc()
		return
	}
	if !isAPIErrorCode(code) {
		return
	}
	m.upErrors.WithLabelValues(code, request, service).Inc()
}

// isAPIErrorCode tells an AWS error code from what efs passes for errors
// without one: an outcome or an HTTP status.
func isAPIErrorCode(code string) bool {
	switch code {
	case "", efs.OutcomeOK, efs.OutcomeThrottled, efs.OutcomeServerError, efs.OutcomeClientError,
		efs.OutcomeNetworkError, efs.OutcomeTimeout, efs.OutcomeCanceled, efs.OutcomePaced:
		return false
	}
	if _, err := strconv.Atoi(code); err == nil {
		return false
	}
	return true
}

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
