package metrics

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// scrape reads m's /metrics as a Prometheus text exposition.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, err := io.ReadAll(rec.Result().Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// upstreamLines are the scraped lines of the upstream driver's API series.
func upstreamLines(body string) []string {
	var out []string
	for line := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(line, "aws_efs_csi_api_request_") {
			out = append(out, line)
		}
	}
	return out
}

// The upstream driver's aws_efs_csi_api_request_* series, as its dashboards
// and alerts read them: request is the API's operation name and service
// "efs" or "s3files"; throttles are counted apart from errors; the duration
// histogram of each operation upstream instruments exists, at zero, from the
// start.
func TestUpstreamAPISeries(t *testing.T) {
	const (
		dur  = "aws_efs_csi_api_request_duration_seconds"
		errs = "aws_efs_csi_api_request_errors_total"
		thr  = "aws_efs_csi_api_request_throttles_total"
	)
	type call struct {
		op, outcome, code string // code "": no APIError
	}
	tests := []struct {
		name     string
		calls    []call
		want     []string // lines the scrape has
		unwanted []string // substrings no upstream line has
	}{
		{
			name: "at start: zero-valued histograms of upstream's operations",
			want: []string{
				dur + `_count{request="CreateAccessPoint",service="efs"} 0`,
				dur + `_count{request="DeleteAccessPoint",service="efs"} 0`,
				dur + `_count{request="DescribeAccessPoints",service="efs"} 0`,
				dur + `_count{request="DescribeFileSystems",service="efs"} 0`,
				dur + `_count{request="DescribeMountTargets",service="efs"} 0`,
				dur + `_count{request="CreateAccessPoint",service="s3files"} 0`,
				dur + `_count{request="DeleteAccessPoint",service="s3files"} 0`,
				dur + `_count{request="ListAccessPoints",service="s3files"} 0`,
				dur + `_count{request="ListFileSystems",service="s3files"} 0`,
				dur + `_sum{request="CreateAccessPoint",service="efs"} 0`,
			},
			// Upstream pre-registers neither TagResource nor the counters.
			unwanted: []string{`"TagResource"`, errs, thr},
		},
		{
			name:  "EFS success",
			calls: []call{{efs.OpCreateAccessPoint, efs.OutcomeOK, ""}},
			want: []string{
				dur + `_count{request="CreateAccessPoint",service="efs"} 1`,
				dur + `_count{request="CreateAccessPoint",service="s3files"} 0`,
				dur + `_bucket{request="CreateAccessPoint",service="efs",le="0.5"} 1`,
			},
		},
		{
			name:  "S3 Files operations under their own names and service s3files",
			calls: []call{{efs.OpS3CreateAccessPoint, efs.OutcomeOK, ""}, {efs.OpS3GetAccessPoint, efs.OutcomeOK, ""}},
			want: []string{
				dur + `_count{request="CreateAccessPoint",service="s3files"} 1`,
				dur + `_count{request="CreateAccessPoint",service="efs"} 0`,
				dur + `_count{request="GetAccessPoint",service="s3files"} 1`,
			},
			unwanted: []string{"S3Files."},
		},
		{
			name:  "an answered error counts in errors_total with its code",
			calls: []call{{efs.OpDescribeAccessPoints, efs.OutcomeClientError, "AccessPointNotFound"}},
			want: []string{
				errs + `{code="AccessPointNotFound",request="DescribeAccessPoints",service="efs"} 1`,
				dur + `_count{request="DescribeAccessPoints",service="efs"} 1`,
			},
			unwanted: []string{thr},
		},
		{
			name: "a throttle counts in throttles_total only",
			calls: []call{
				{efs.OpCreateAccessPoint, efs.OutcomeThrottled, "ThrottlingException"},
				{efs.OpS3ListAccessPoints, efs.OutcomeThrottled, "TooManyRequestsException"},
				// Upstream's throttle codes are the SDK's, this one included.
				{efs.OpDescribeMountTargets, efs.OutcomeClientError, "LimitExceededException"},
			},
			want: []string{
				thr + `{request="CreateAccessPoint",service="efs"} 1`,
				thr + `{request="ListAccessPoints",service="s3files"} 1`,
				thr + `{request="DescribeMountTargets",service="efs"} 1`,
				dur + `_count{request="CreateAccessPoint",service="efs"} 1`,
			},
			unwanted: []string{errs},
		},
		{
			name:  "S3 Files errors",
			calls: []call{{efs.OpS3DeleteAccessPoint, efs.OutcomeServerError, "InternalServerException"}},
			want: []string{
				errs + `{code="InternalServerException",request="DeleteAccessPoint",service="s3files"} 1`,
			},
		},
		{
			name: "no answer: timed, not an API error",
			calls: []call{
				{efs.OpDescribeFileSystems, efs.OutcomeNetworkError, efs.OutcomeNetworkError},
				{efs.OpDescribeFileSystems, efs.OutcomeTimeout, efs.OutcomeTimeout},
				{efs.OpDescribeFileSystems, efs.OutcomeCanceled, efs.OutcomeCanceled},
				{efs.OpDescribeFileSystems, efs.OutcomeServerError, "502"},
			},
			want:     []string{dur + `_count{request="DescribeFileSystems",service="efs"} 4`},
			unwanted: []string{errs, thr},
		},
		{
			name:     "paced: never sent, not a request",
			calls:    []call{{efs.OpCreateAccessPoint, efs.OutcomePaced, ""}},
			want:     []string{dur + `_count{request="CreateAccessPoint",service="efs"} 0`},
			unwanted: []string{errs, thr},
		},
	}
	// prometheus.DefBuckets, upstream's (it passes none), on each series.
	for _, le := range []string{"0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"} {
		tests[0].want = append(tests[0].want, fmt.Sprintf(`%s_bucket{request="DescribeFileSystems",service="efs",le=%q} 0`, dur, le))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New()
			for _, c := range tt.calls {
				d := 100 * time.Millisecond
				if c.outcome == efs.OutcomePaced {
					d = 0
				}
				m.APICall(c.op, c.outcome, d)
				if c.outcome != efs.OutcomeOK && c.outcome != efs.OutcomePaced {
					m.APIError(c.op, c.code)
				}
			}
			lines := upstreamLines(scrape(t, m))
			have := make(map[string]bool, len(lines))
			for _, l := range lines {
				have[l] = true
			}
			for _, w := range tt.want {
				if !have[w] {
					t.Errorf("no line %s", w)
				}
			}
			for _, l := range lines {
				for _, u := range tt.unwanted {
					if strings.Contains(l, u) {
						t.Errorf("unexpected %s", l)
					}
				}
			}
			if t.Failed() {
				t.Logf("upstream series:\n%s", strings.Join(lines, "\n"))
			}
		})
	}
}

// Help texts and label names of the upstream series, which recording rules
// and dashboards may match on.
func TestUpstreamAPISeriesHelpAndLabels(t *testing.T) {
	m := New()
	m.APICall(efs.OpDeleteAccessPoint, efs.OutcomeClientError, time.Millisecond)
	m.APIError(efs.OpDeleteAccessPoint, "AccessPointNotFound")
	m.APICall(efs.OpDeleteAccessPoint, efs.OutcomeThrottled, time.Millisecond)
	m.APIError(efs.OpDeleteAccessPoint, "ThrottlingException")
	body := scrape(t, m)
	for _, want := range []string{
		"# HELP aws_efs_csi_api_request_duration_seconds AWS SDK API request duration by request type in seconds",
		"# TYPE aws_efs_csi_api_request_duration_seconds histogram",
		"# HELP aws_efs_csi_api_request_errors_total Total number of AWS SDK API errors by error code and request type",
		"# TYPE aws_efs_csi_api_request_errors_total counter",
		"# HELP aws_efs_csi_api_request_throttles_total Total number of throttled AWS SDK API requests per request type",
		"# TYPE aws_efs_csi_api_request_throttles_total counter",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("no line %q", want)
		}
	}
	// Exactly upstream's buckets: 11 and +Inf.
	if n := strings.Count(body, `aws_efs_csi_api_request_duration_seconds_bucket{request="DeleteAccessPoint",service="efs",`); n != 12 {
		t.Errorf("%d buckets, want 12", n)
	}
	// Our own series keep their names and labels.
	for _, want := range []string{
		`efs_csi_api_calls_total{operation="DeleteAccessPoint",outcome="throttled"} 1`,
		`efs_csi_api_calls_total{operation="DeleteAccessPoint",outcome="client_error"} 1`,
		`efs_csi_api_throttles_total{operation="DeleteAccessPoint"} 1`,
		fmt.Sprintf(`efs_csi_api_call_duration_seconds_count{operation=%q} 2`, efs.OpDeleteAccessPoint),
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("no line %s", want)
		}
	}
}

// Every S3 Files operation efs observes maps to service s3files, and every
// other one to efs.
func TestUpstreamRequestCoversEveryOperation(t *testing.T) {
	for _, op := range efs.S3FilesOps {
		if req, svc := upstreamRequest(op); svc != "s3files" || strings.Contains(req, ".") {
			t.Errorf("%s: request %q service %q", op, req, svc)
		}
	}
	for _, op := range efs.Ops {
		if req, svc := upstreamRequest(op); svc != "efs" || req != op {
			t.Errorf("%s: request %q service %q", op, req, svc)
		}
	}
}
