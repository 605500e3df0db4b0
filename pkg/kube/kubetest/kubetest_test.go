package kubetest_test

import (
	"context"
	"fmt"
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
