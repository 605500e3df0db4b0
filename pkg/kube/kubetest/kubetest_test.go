package kubetest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

// Large writes sent at once on one HTTP/2 connection, as client-go sends
// them, are all answered. A server that read a body under its lock, while
// the bodies of the requests waiting for the lock filled the connection's
// flow-control window, waited for data that could not come until the
// client gave up.
func TestLargeWritesAtOnceAreAllAnswered(t *testing.T) {
	k := kubetest.Start(t)
	raw, err := os.ReadFile(k.TokenFile("controller"))
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(raw))
	c, err := kubernetes.NewForConfig(&rest.Config{Host: k.URL, BearerToken: tok,
		TLSClientConfig: rest.TLSClientConfig{CAFile: k.CAFile},
		ContentConfig:   rest.ContentConfig{ContentType: runtime.ContentTypeProtobuf}, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	// Bounded by the test's deadline, not by time: a stall never ends.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	big := strings.Repeat("x", 200<<10)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", i),
				Annotations: map[string]string{"a": big}}}
			if _, err := c.CoordinationV1().Leases("default").Create(ctx, l, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A Lease is answered in the first form the Accept header names that the
// API server serves: a Table in JSON (with ?includeObject=None no object
// in its row, by default the Lease's metadata), not a Table in protobuf
// (which kube-apiserver does not serve either: the next form), protobuf,
// JSON. The Table's resourceVersion is the Lease's, and the request log
// counts the answer's bytes.
func TestLeaseAnsweredInTheFormAsked(t *testing.T) {
	k := kubetest.Start(t)
	raw, err := os.ReadFile(k.TokenFile("controller"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := rest.HTTPClientFor(&rest.Config{Host: k.URL, BearerToken: strings.TrimSpace(string(raw)),
		TLSClientConfig: rest.TLSClientConfig{CAFile: k.CAFile}})
	if err != nil {
		t.Fatal(err)
	}
	const table = "application/json;as=Table;v=v1;g=meta.k8s.io"
	lease := `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l","annotations":{"entries":"the shard"}}}`
	url := k.URL + "/apis/coordination.k8s.io/v1/namespaces/default/leases"
	for i, tc := range []struct {
		query, accept string
		contentType   string
		has, hasNot   []string
	}{
		{"?includeObject=None", table + ",application/vnd.kubernetes.protobuf", "application/json",
			[]string{`"kind":"Table"`, `"resourceVersion":"`}, []string{"the shard"}},
		{"", table, "application/json", []string{`"kind":"Table"`, `"PartialObjectMetadata"`, "the shard"}, nil},
		{"?includeObject=None", "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/vnd.kubernetes.protobuf",
			"application/vnd.kubernetes.protobuf", []string{"the shard"}, []string{"Table"}},
		{"", "application/json", "application/json", []string{`"kind":"Lease"`, "the shard"}, nil},
	} {
		method, u := http.MethodPost, url+tc.query
		if i > 0 {
			l, ok := k.Lease("default", "l")
			if !ok {
				t.Fatal("no Lease l")
			}
			method, u = http.MethodPut, url+"/l"+tc.query
			lease = `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l","resourceVersion":"` + l.ResourceVersion +
				`","annotations":{"entries":"the shard","n":"` + fmt.Sprint(i) + `"}}}`
		}
		req, _ := http.NewRequestWithContext(t.Context(), method, u, strings.NewReader(lease))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", tc.accept)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 || resp.Header.Get("Content-Type") != tc.contentType {
			t.Fatalf("%s %s, Accept %s: %d %s %q", method, u, tc.accept, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		for _, s := range tc.has {
			if !strings.Contains(string(body), s) {
				t.Errorf("%s %s, Accept %s: no %s in %q", method, u, tc.accept, s, body)
			}
		}
		for _, s := range tc.hasNot {
			if strings.Contains(string(body), s) {
				t.Errorf("%s %s, Accept %s: %s in %q", method, u, tc.accept, s, body)
			}
		}
		if rs := k.Requests(); rs[len(rs)-1].Answered != int64(len(body)) {
			t.Errorf("%s %s: %d bytes answered, the log says %d", method, u, len(body), rs[len(rs)-1].Answered)
		}
		if l, _ := k.Lease("default", "l"); strings.Contains(tc.contentType, "json") && !strings.Contains(string(body), `"resourceVersion":"`+l.ResourceVersion+`"`) {
			t.Errorf("%s %s: not the Lease's resourceVersion %s in %q", method, u, l.ResourceVersion, body)
		}
	}
}
