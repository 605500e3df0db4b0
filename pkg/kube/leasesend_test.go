package kube

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// A write's answer is read as client-go reads it: a 2xx is the body; the
// API server's Status, in protobuf or JSON, is its error; anything else
// an error of its HTTP code. A 429 with Retry-After is sent again (the
// API server did not serve it); a 5xx is not, whatever it carries (its
// write's outcome is unknown: the store answers that).
func TestLeaseWriterAnswers(t *testing.T) {
	status := func(code int32, reason metav1.StatusReason) *metav1.Status {
		return &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Code: code, Reason: reason, Message: "from the API server"}
	}
	protobufOf := func(st *metav1.Status) []byte {
		b, err := runtime.Encode(scheme.Codecs.EncoderForVersion(leaseSerializer, metav1.SchemeGroupVersion), st)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	jsonOf := func(st *metav1.Status) []byte {
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	type answer struct {
		code        int
		contentType string
		retryAfter  string
		body        []byte
	}
	ok := answer{http.StatusOK, runtime.ContentTypeProtobuf, "", []byte("k8s\x00 the Lease")}
	throttled := answer{http.StatusTooManyRequests, runtime.ContentTypeJSON, "0", jsonOf(status(429, metav1.StatusReasonTooManyRequests))}
	for _, tc := range []struct {
		name    string
		answers []answer // in turn; the last again
		sends   int
		check   func(error) bool
	}{
		{"ok", []answer{ok}, 1, func(err error) bool { return err == nil }},
		{"conflict in protobuf", []answer{{http.StatusConflict, runtime.ContentTypeProtobuf, "", protobufOf(status(409, metav1.StatusReasonConflict))}},
			1, apierrors.IsConflict},
		{"forbidden in JSON", []answer{{http.StatusForbidden, runtime.ContentTypeJSON, "", jsonOf(status(403, metav1.StatusReasonForbidden))}},
			1, apierrors.IsForbidden},
		{"throttled twice, then served", []answer{throttled, throttled, ok}, 3, func(err error) bool { return err == nil }},
		{"throttled past the retries", []answer{throttled}, leaseWriteRetries, apierrors.IsTooManyRequests},
		{"throttled without Retry-After", []answer{{http.StatusTooManyRequests, runtime.ContentTypeJSON, "", jsonOf(status(429, metav1.StatusReasonTooManyRequests))}},
			1, apierrors.IsTooManyRequests},
		{"unavailable with Retry-After", []answer{{http.StatusServiceUnavailable, runtime.ContentTypeJSON, "0", jsonOf(status(503, metav1.StatusReasonServiceUnavailable))}},
			1, func(err error) bool { return apierrors.IsServiceUnavailable(err) && unavailable(err) }},
		{"a proxy's page", []answer{{http.StatusBadGateway, "text/html", "", []byte("<html>bad gateway</html>")}},
			1, func(err error) bool {
				return unavailable(err) && strings.Contains(err.Error(), "bad gateway")
			}},
		{"no API server's 404", []answer{{http.StatusNotFound, "text/plain", "", []byte("404 page not found")}},
			1, apierrors.IsNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sends atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := int(sends.Add(1))
				if r.Method != http.MethodPut || r.URL.Path != "/apis/coordination.k8s.io/v1/namespaces/ns/leases/shard" ||
					r.URL.RawQuery != "includeObject=None" || r.Header.Get("Content-Type") != runtime.ContentTypeProtobuf ||
					r.Header.Get("Accept") != writeAccept {
					t.Errorf("%s %s?%s as %s, answer as %s", r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), r.Header.Get("Accept"))
				}
				if b := new(bytes.Buffer); func() bool { _, _ = b.ReadFrom(r.Body); return b.String() != "body" }() {
					t.Errorf("send %d: another body", n)
				}
				a := tc.answers[min(n, len(tc.answers))-1]
				w.Header().Set("Content-Type", a.contentType)
				if a.retryAfter != "" {
					w.Header().Set("Retry-After", a.retryAfter)
				}
				w.WriteHeader(a.code)
				_, _ = w.Write(a.body)
			}))
			t.Cleanup(srv.Close)
			w := leaseWriter{client: srv.Client(), collection: srv.URL + "/apis/coordination.k8s.io/v1/namespaces/ns/leases"}
			var got bytes.Buffer
			err := w.send(t.Context(), false, "shard", []byte("body"), &got)
			if !tc.check(err) {
				t.Errorf("error %v (%T)", err, err)
			}
			if err == nil && got.String() != string(ok.body) {
				t.Errorf("answer %q", got.String())
			}
			if int(sends.Load()) != tc.sends {
				t.Errorf("%d sends, want %d", sends.Load(), tc.sends)
			}
		})
	}
}
