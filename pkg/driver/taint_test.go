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

	"github.com/efs-csi/efs-csi-driver/internal/testutil"
	"github.com/efs-csi/efs-csi-driver/pkg/efsutils"
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
				Kube: kubeConfig(k, "node"), Logger: slog.New(logs), EFSUtils: tempEFSUtils(t)})
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
			// The loop logs its outcome once the Node is as it wants it; a
			// driver that stops first fails the test instead of hanging it.
		wait:
			for {
				select {
				case msg := <-logs.ch:
					if msg == "startup taint" {
						break wait
					}
				case err := <-done:
					done <- err
					t.Fatalf("driver stopped before the taint was handled: %v", err)
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
	d, err := New(context.Background(), Config{Endpoint: filepath.Join(t.TempDir(), "csi.sock"), Mode: ModeNode, NodeID: "n",
		EFSUtils: tempEFSUtils(t)})
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

// tempEFSUtils is an efs-utils runtime in the test's own directories (a node
// plugin mounting with mount -t efs writes its configuration at Run), with
// no watchdog binary.
func tempEFSUtils(t *testing.T) EFSUtilsConfig {
	return EFSUtilsConfig{Dirs: efsutils.Dirs{ConfigDir: filepath.Join(t.TempDir(), "efs")},
		Watchdog: efsutils.Watchdog{Path: filepath.Join(t.TempDir(), "no-watchdog")}}
}

// Without patch on Nodes (RBAC, as with the chart's disableMutation) every attempt fails
// the same way: the first failure is a warning naming the switch that stops the
// attempts, its repeats are Debug records, not a warning a minute forever.
func TestForbiddenTaintRemovalWarnsOnce(t *testing.T) {
	k := kubetest.Start(t)
	k.SetNode("node-1", corev1.Taint{Key: AgentNotReadyTaint, Effect: corev1.TaintEffectNoSchedule})
	const attempts = 6
	var patches atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k.Fail(func(r kubetest.Request) int {
		if r.Method != "PATCH" {
			return 0
		}
		if patches.Add(1) == attempts {
			cancel()
		}
		return 403
	})
	kc, err := kube.New(kubeConfig(k, "node"))
	if err != nil {
		t.Fatal(err)
	}
	logs := testutil.NewLogs()
	st := newStartupTaint(kc, "node-1", "", logs.Logger())
	st.minBackoff, st.maxBackoff = time.Millisecond, time.Millisecond
	if st.retry(ctx, "remove taint", func(ctx context.Context) error {
		_, err := kc.RemoveNodeTaint(ctx, "node-1", AgentNotReadyTaint)
		return err
	}) {
		t.Fatal("removal succeeded through a 403")
	}
	if n := logs.Count(slog.LevelWarn, "DISABLE_TAINT_WATCHER"); n != 1 {
		t.Errorf("%d warnings naming DISABLE_TAINT_WATCHER, want 1: %v", n, logs.Records())
	}
	if n := logs.Count(slog.LevelWarn, ""); n != 1 {
		t.Errorf("%d warnings over %d failed attempts, want 1: %v", n, attempts, logs.Records())
	}
	if n := logs.Count(slog.LevelDebug, "failed again"); n < attempts-2 {
		t.Errorf("%d Debug records of the repeats, want at least %d", n, attempts-2)
	}
}

// $DISABLE_TAINT_WATCHER (the chart's node.serviceAccount.disableMutation) is upstream's
// switch: the node plugin never touches its Node's taints, even with an API.
func TestDisableTaintWatcherLeavesTheTaint(t *testing.T) {
	k := kubetest.Start(t)
	k.SetNode("node-7", corev1.Taint{Key: AgentNotReadyTaint, Effect: corev1.TaintEffectNoSchedule})
	t.Setenv("NODE_NAME", "node-7")
	d, err := New(context.Background(), Config{Endpoint: filepath.Join(t.TempDir(), "csi.sock"), Mode: ModeNode, NodeID: "node-7",
		Kube: kubeConfig(k, "node"), DisableTaintWatcher: true, EFSUtils: tempEFSUtils(t)})
	if err != nil {
		t.Fatal(err)
	}
	if d.taint != nil {
		t.Fatal("a taint remover with DISABLE_TAINT_WATCHER set")
	}
}
