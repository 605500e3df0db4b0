//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/efs-csi/efs-csi-driver/test/e2e/cluster"
	"github.com/efs-csi/efs-csi-driver/test/e2e/manifests"
)

const agentNotReadyTaint = "efs.csi.aws.com/agent-not-ready"

// A node plugin started with the DaemonSet's arguments, as the chart's node service
// account (so its RBAC is what it runs with), removes the startup taint from its Node
// once its socket serves, through the real API server's JSON patch, and keeps the
// Node's other taint.
func TestNodePluginRemovesTheStartupTaint(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()

	base, err := manifests.Kustomization(filepath.Join(s.repo, "deploy", "kubernetes", "base"))
	if err != nil {
		t.Fatal(err)
	}
	a := newApplier(t, s)
	var daemonSet *unstructured.Unstructured
	for _, obj := range base {
		switch {
		case obj.GetKind() == "DaemonSet":
			daemonSet = obj
		case obj.GetName() == "efs-csi-node-sa" || obj.GetName() == "efs-csi-node-role" || obj.GetName() == "efs-csi-node-binding":
			if err := a.apply(ctx, obj, false); err != nil {
				t.Fatalf("apply %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
		}
	}
	if daemonSet == nil {
		t.Fatal("deploy/kubernetes/base has no node DaemonSet")
	}

	nodeName := "e2e-taint-node"
	other := corev1.Taint{Key: "e2e/dedicated", Value: "storage", Effect: corev1.TaintEffectNoExecute}
	nodes := s.cluster.Client.CoreV1().Nodes()
	created, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
		{Key: agentNotReadyTaint, Effect: corev1.TaintEffectNoSchedule}, other}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodes.Delete(context.Background(), nodeName, metav1.DeleteOptions{}) })
	// Admission adds taints of its own (node.kubernetes.io/not-ready): all but the startup
	// taint must stay.
	var keep []corev1.Taint
	for _, tn := range created.Spec.Taints {
		if tn.Key != agentNotReadyTaint {
			keep = append(keep, tn)
		}
	}

	tok, err := s.cluster.Client.CoreV1().ServiceAccounts(releaseNamespace).CreateToken(ctx, "efs-csi-node-sa",
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: aws.Int64(3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "node-sa.token")
	if err := os.WriteFile(tokenFile, []byte(tok.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	metricsPort, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "csi.sock")
	args := append(containerArgs(t, daemonSet, "efs-plugin", map[string]string{
		"--endpoint=":      "unix://" + socket,
		"--http-endpoint=": fmt.Sprintf("127.0.0.1:%d", metricsPort),
	}), "--kube-api-url="+s.cluster.Server, "--kube-token-file="+tokenFile,
		"--kube-ca-file="+filepath.Join(s.cluster.Dir, "ca.crt"))
	// The DaemonSet's downward API: the Node's name in $NODE_NAME.
	p, err := cluster.StartProcess("efs-csi-node", s.dir, filepath.Join(s.bins, "efs-csi-driver"),
		[]string{"NODE_NAME=" + nodeName, "AWS_EC2_METADATA_DISABLED=true"}, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(syscall.SIGTERM, 10*time.Second)
		if t.Failed() {
			p.Tail(testWriter{t}, 40)
		}
	})

	start := time.Now()
	if err := p.WaitReady(ctx, func(ctx context.Context) error {
		n, err := nodes.Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, tn := range n.Spec.Taints {
			if tn.Key == agentNotReadyTaint {
				return fmt.Errorf("still tainted: %v", n.Spec.Taints)
			}
		}
		if !slices.EqualFunc(n.Spec.Taints, keep, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) && a.Value == b.Value }) {
			t.Fatalf("taints %v, want %v", n.Spec.Taints, keep)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("startup taint removed %v after the node plugin started", time.Since(start).Round(time.Millisecond))
}
