package kube_test

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/journal/journaltest"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

const (
	journalNS = "kube-system"
	driver    = "efs.csi.aws.com"
	fs1       = journaltest.FS1
)

// Every verb of the Lease record answers ErrUnavailable when the API
// server does not answer, or answers that it cannot serve: the outcome is
// unknown, never a refusal the controller would act on.
func TestRecordUnavailable(t *testing.T) {
	e := journal.Entry{Key: journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: "pvc-1"}, Value: []byte("x"), Version: "1"}
	calls := func(ctx context.Context, s journal.Store) map[string]error {
		_, errGet := s.Get(ctx, e.Key)
		_, errCreate := s.Create(ctx, e)
		_, errUpdate := s.Update(ctx, e)
		id := journal.Entry{Key: journal.Key{Kind: journal.KindID, FileSystem: fs1}, Value: []byte("pvc-1")}
		for n, near := 50000, s.(journal.Pairer).Near(e.Key); ; n++ {
			if id.Key.Name = strconv.Itoa(n); near(id.Key) {
				break
			}
		}
		_, _, errBoth := s.(journal.Pairer).CreateBoth(ctx, e, id)
		return map[string]error{"get": errGet, "create": errCreate, "update": errUpdate, "delete": s.Delete(ctx, e),
			"create both": errBoth, "list": s.List(ctx, journal.KindVolume, "", "", func([]journal.Entry) error { return nil })}
	}
	check := func(t *testing.T, errs map[string]error) {
		t.Helper()
		for op, err := range errs {
			if !errors.Is(err, journal.ErrUnavailable) {
				t.Errorf("%s: %v, want ErrUnavailable", op, err)
			}
		}
	}
	for _, code := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable,
		http.StatusGatewayTimeout, http.StatusTooManyRequests} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			k := kubetest.Start(t)
			k.Fail(func(kubetest.Request) int { return code })
			check(t, calls(t.Context(), leaseStore(t, k, driver, 0)))
		})
	}
	t.Run("not an API server", func(t *testing.T) {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "<html>proxy error</html>", http.StatusInternalServerError)
		}))
		t.Cleanup(srv.Close)
		check(t, calls(t.Context(), plainClient(t, srv).LeaseJournalStore(journalNS, driver)))
	})
	t.Run("no answer", func(t *testing.T) {
		srv := httptest.NewTLSServer(http.NotFoundHandler())
		c := plainClient(t, srv)
		srv.Close()
		check(t, calls(t.Context(), c.LeaseJournalStore(journalNS, driver)))
	})
	t.Run("context ended", func(t *testing.T) {
		k := kubetest.Start(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		check(t, calls(ctx, leaseStore(t, k, driver, 0)))
	})
}

// plainClient is a client of srv, an HTTPS server that is no API server.
func plainClient(t *testing.T, srv *httptest.Server) *kube.Client {
	t.Helper()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	tok := filepath.Join(dir, "token")
	ca509 := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(ca, ca509, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tok, []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := kube.New(kube.Config{URL: srv.URL, TokenFile: tok, CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
