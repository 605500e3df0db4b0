package driver

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"

	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

// notReadyOnce answers the first Probe not ready, the later ones ready.
type notReadyOnce struct {
	csi.UnimplementedIdentityServer
	calls atomic.Int32
	ready atomic.Bool // set before the first ready answer leaves
}

func (p *notReadyOnce) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if p.calls.Add(1) == 1 {
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil
	}
	p.ready.Store(true)
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

func kubeConfig(k *kubetest.Server, caller string) kube.Config {
	return kube.Config{URL: k.URL, TokenFile: k.TokenFile(caller), CAFile: k.CAFile}
}

// The Node is not touched until the plugin's socket answers a Probe ready (a not-ready
// answer is waited out); then the startup taint goes and the other taint stays.
func TestStartupTaintWaitsForAReadyProbe(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "csi.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	probe := &notReadyOnce{}
	csi.RegisterIdentityServer(srv, probe)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)

	k := kubetest.Start(t)
	other := corev1.Taint{Key: "dedicated", Value: "storage", Effect: corev1.TaintEffectNoSchedule}
	k.SetNode("node-1", corev1.Taint{Key: AgentNotReadyTaint, Effect: corev1.TaintEffectNoExecute}, other)
	var early atomic.Int32
	k.OnRequest(func(kubetest.Request) {
		if !probe.ready.Load() {
			early.Add(1)
		}
	})
	kc, err := kube.New(kubeConfig(k, "node"))
	if err != nil {
		t.Fatal(err)
	}
	st := newStartupTaint(kc, "node-1", socket, slog.New(slog.DiscardHandler))
	st.minBackoff = time.Millisecond
	st.run(context.Background()) // returns once the taint is gone

	if n := early.Load(); n != 0 {
		t.Errorf("%d API requests before the socket answered ready", n)
	}
	if n := probe.calls.Load(); n < 2 {
		t.Errorf("%d probes; the not-ready answer was not waited out", n)
	}
	node, _ := k.Node("node-1")
	if len(node.Spec.Taints) != 1 || !node.Spec.Taints[0].MatchTaint(&other) || node.Spec.Taints[0].Value != "storage" {
		t.Errorf("taints %v, want only %v", node.Spec.Taints, other)
	}
}

// The node plugin, started with a Kubernetes API, removes the startup taint of its own
// Node once it serves; a Node without it is read and never written.
func TestNodePluginRemovesItsStartupTaint(t *testing.T) {
	cases := []struct {
		name    string
		taints  []corev1.Taint
		patches int
	}{
		{"tainted", []corev1.Taint{{Key: AgentNotReadyTaint, Effect: corev1.TaintEffectNoSchedule}}, 1},
		{"not tainted", nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NODE_NAME", "") // the Node's name is then the node ID
			t.Setenv("CSI_NODE_NAME", "")
			k := kubetest.Start(t)
			k.SetNode("node-7", tc.taints...)
			logs := &messages{ch: make(chan string, 100)}
			socket := filepath.Join(t.TempDir(), "csi.sock")
			d, err := New(context.Background(), Config{Endpoint: "unix://" + socket, Mode: ModeNode, NodeID: "node-7",
				Kube: kubeConfig(k, "node"), Logger: slog.New(logs)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- d.run(ctx, nil) }()
			stop := sync.OnceValue(func() error { cancel(); return <-done })
			t.Cleanup(func() {
				if err := stop(); err != nil {
					t.Errorf("driver: %v", err)
				}
			})
			// The loop logs its outcome once the Node is as it wants it.
			for msg := range logs.ch {
				if msg == "startup taint" {
					break
				}
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if n, _ := k.Node("node-7"); len(n.Spec.Taints) != 0 {
				t.Errorf("taints left: %v", n.Spec.Taints)
			}
			patches := k.Count("PATCH")
			if patches != tc.patches {
				t.Errorf("%d PATCH requests, want %d", patches, tc.patches)
			}
		})
	}
}

// Outside a cluster the node plugin starts and does not try to remove a taint.
func TestNodePluginWithoutKubernetesLeavesTaintsAlone(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	d, err := New(context.Background(), Config{Endpoint: filepath.Join(t.TempDir(), "csi.sock"), Mode: ModeNode, NodeID: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if d.taint != nil {
		t.Fatal("a taint remover without a Kubernetes API")
	}
}

// messages passes each log message to ch.
type messages struct{ ch chan string }

func (m *messages) Enabled(context.Context, slog.Level) bool { return true }
func (m *messages) Handle(_ context.Context, r slog.Record) error {
	m.ch <- r.Message
	return nil
}
func (m *messages) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m *messages) WithGroup(string) slog.Handler      { return m }
