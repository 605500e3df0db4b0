package kube_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

// A kubeconfig, as kubectl reads it: the explicit file wins, the context
// picks the cluster and user; the client then reads PVs with their claims,
// claims, classes and a Lease, in pages.
func TestKubeconfigAndTheAuditsReads(t *testing.T) {
	k := kubetest.Start(t)
	cfg := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- {name: c, cluster: {server: %q, certificate-authority: %q}}
- {name: nowhere, cluster: {server: "https://127.0.0.1:1"}}
users:
- {name: u, user: {tokenFile: %q}}
contexts:
- {name: real, context: {cluster: c, user: u}}
- {name: broken, context: {cluster: nowhere, user: u}}
current-context: broken
`, k.URL, k.CAFile, k.TokenFile("me"))), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "not-this-one"))
	rc, from, err := kube.LoadConfig(cfg, "real")
	if err != nil || from != "kubeconfig context real" || rc.Host != k.URL {
		t.Fatalf("%+v %q %v", rc, from, err)
	}
	c, err := kube.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 5 {
		k.AddPVObject(corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pv-%d", i)},
			Spec: corev1.PersistentVolumeSpec{StorageClassName: "sc", ClaimRef: &corev1.ObjectReference{Namespace: "ns", Name: fmt.Sprintf("c-%d", i)},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "efs.csi.aws.com", VolumeHandle: fmt.Sprintf("h-%d", i)}}}})
		k.SetClaim("ns", fmt.Sprintf("c-%d", i), fmt.Sprintf("u-%d", i))
	}
	k.AddPV("ebs", "ebs.csi.aws.com", "x")
	var pvs []kube.PersistentVolume
	pages := 0
	if err := c.PersistentVolumes(ctx, "efs.csi.aws.com", func(p []kube.PersistentVolume) error { pages++; pvs = append(pvs, p...); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(pvs) != 5 || pages < 3 || pvs[4] != (kube.PersistentVolume{Name: "pv-4", Handle: "h-4", ClaimNamespace: "ns", ClaimName: "c-4", StorageClass: "sc"}) {
		t.Errorf("%d pages: %+v", pages, pvs)
	}
	var claims []string
	if err := c.Claims(ctx, func(p []kube.Claim) error {
		for _, cl := range p {
			claims = append(claims, cl.Namespace+"/"+cl.Name+"="+cl.UID)
		}
		return nil
	}); err != nil || !slices.Equal(claims, []string{"ns/c-0=u-0", "ns/c-1=u-1", "ns/c-2=u-2", "ns/c-3=u-3", "ns/c-4=u-4"}) {
		t.Errorf("claims %v, %v", claims, err)
	}
	if _, ok, err := c.Lease(ctx, "kube-system", "none"); ok || err != nil {
		t.Errorf("a missing Lease: %v %v", ok, err)
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.RunWhileLeader(lctx, kube.Election{Namespace: "kube-system", Name: "l", LeaseDuration: 15 * time.Second,
			RenewDeadline: 10 * time.Second, RetryPeriod: 100 * time.Millisecond}, func(ctx context.Context) { <-ctx.Done() })
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, ok, err := c.Lease(ctx, "kube-system", "l")
		if err == nil && ok && st.Held(time.Now()) {
			if st.Created.IsZero() || !strings.Contains(st.Holder, "_") || st.Duration != 15*time.Second {
				t.Errorf("lease %+v", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease never held: %+v %v %v", st, ok, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	if st, ok, _ := c.Lease(ctx, "kube-system", "l"); !ok || st.Held(time.Now()) {
		t.Errorf("a released Lease is held: %+v", st)
	}
}
