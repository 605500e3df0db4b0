package kube

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// The client pages through PVs with the bearer token from its file, keeps
// only the driver's handles, and tells a missing claim from a present one.
func TestClientReadsVolumesAndClaims(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/api/v1/persistentvolumes":
			if r.URL.Query().Get("continue") == "" {
				w.Write([]byte(`{"metadata":{"continue":"p2"},"items":[{"spec":{"csi":{"driver":"efs.csi.aws.com","volumeHandle":"h1"}}},{"spec":{"csi":{"driver":"other","volumeHandle":"x"}}},{"spec":{}}]}`))
				return
			}
			w.Write([]byte(`{"metadata":{},"items":[{"spec":{"csi":{"driver":"efs.csi.aws.com","volumeHandle":"h2"}}}]}`))
		case "/api/v1/namespaces/ns/persistentvolumeclaims/c1":
			w.Write([]byte(`{"metadata":{"name":"c1","uid":"u-1"}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600)
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte("s3cret\n"), 0o600)
	c, err := New(Config{URL: srv.URL, TokenFile: token, CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, err := c.VolumeHandles(ctx, "efs.csi.aws.com")
	if err != nil || len(h) != 2 || h[0] != "h1" || h[1] != "h2" {
		t.Fatalf("handles %v, %v", h, err)
	}
	if uid, err := c.ClaimUID(ctx, "ns", "c1"); uid != "u-1" || err != nil {
		t.Fatalf("claim c1: %q, %v", uid, err)
	}
	if uid, err := c.ClaimUID(ctx, "ns", "gone"); uid != "" || err != nil {
		t.Fatalf("missing claim: %q, %v", uid, err)
	}
	os.WriteFile(token, []byte("wrong"), 0o600)
	if _, err := c.ClaimUID(ctx, "ns", "c1"); err == nil {
		t.Fatal("an unauthorized answer was taken for a missing claim")
	}
}
