package driver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// runController runs a controller replica with orphan collection, reading
// the fake API with a token of its own, until the test ends or stop is
// called. socket is its CSI endpoint.
func runController(t *testing.T, name, efsURL string, k *kubetest.Server, mut ...func(*Config)) (socket string, stop func()) {
	t.Helper()
	socket = filepath.Join(t.TempDir(), "csi.sock")
	cfg := Config{
		Endpoint: "unix://" + socket, Mode: ModeController, TempDir: t.TempDir(),
		OrphanInterval: 20 * time.Millisecond, OrphanGrace: 0, LeaseNamespace: "kube-system",
		Kube: kube.Config{URL: k.URL, TokenFile: k.TokenFile(name), CAFile: k.CAFile},
		EFS:  efs.Config{Region: "us-east-1", Endpoint: efsURL, RateLimits: unlimited},
	}
	for _, m := range mut {
		m(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d, err := New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() { done <- d.run(ctx, ready) }()
	<-ready
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("replica %s: %v", name, err)
		}
	}
	t.Cleanup(stop)
	return socket, stop
}

// orphan provisions a volume through the replica at socket for a claim
// that does not exist and that no PV names: what the collector is for (a
// claim deleted while its CreateVolume was in flight). It returns the
// access point ID.
func orphan(t *testing.T, socket, name string) string {
	t.Helper()
	req := createReq(name)
	req.Parameters["csi.storage.k8s.io/pvc/name"] = "gone-" + name
	req.Parameters["csi.storage.k8s.io/pvc/namespace"] = "ns"
	r, err := csi.NewControllerClient(dial(t, socket)).CreateVolume(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	id, err := volume.ParseID(r.GetVolume().GetVolumeId())
	if err != nil {
		t.Fatal(err)
	}
	return id.AccessPointID
}

// forged creates an access point directly through EFS that carries all
// the tags and the token of an orphan of this cluster, but that the record
// does not have.
func forged(t *testing.T, c *efs.Client, name string) string {
	t.Helper()
	ap, err := c.CreateAccessPoint(context.Background(), efs.CreateAccessPointInput{
		FileSystemID: sanityFS, ClientToken: name, Path: "/" + name,
		PosixUser: &efs.PosixUser{UID: 1000, GID: 1000},
		Tags: map[string]string{"efs.csi.aws.com/cluster": "true", "efs.csi.aws.com/cluster-id": kubetest.KubeSystemUID,
			"efs.csi.aws.com/volume-name": name, "efs.csi.aws.com/pvc-name": "gone", "efs.csi.aws.com/pvc-namespace": "ns"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return ap.ID
}

// waitGone polls EFS until the access point is deleted (an outside state
// change: nothing of the test's own to order).
func waitGone(t *testing.T, c *efs.Client, id string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		_, err := c.DescribeAccessPoint(context.Background(), id)
		if errors.Is(err, efs.ErrAccessPointNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan %s still there: %v", id, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// collectors names the replicas that read PVs: the ones that ran rounds.
func collectors(k *kubetest.Server) []string {
	var who []string
	for _, r := range k.Requests() {
		if r.Path == "/api/v1/persistentvolumes" && !slices.Contains(who, r.Caller) {
			who = append(who, r.Caller)
		}
	}
	slices.Sort(who)
	return who
}

// Two controller replicas, both with the collector on: only the one holding
// the Lease collects, from the record both keep (ConfigMaps), whichever
// replica provisioned the orphan. When it stops, the other takes over. An
// access point forged to look like an orphan is never collected.
func TestOnlyTheLeaderCollects(t *testing.T) {
	saved := orphanElection
	orphanElection = kube.Election{LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 50 * time.Millisecond}
	t.Cleanup(func() { orphanElection = saved })
	url, _ := emulatortest.Start(t, emulator.Config{FileSystems: []string{sanityFS}})
	k := kubetest.Start(t)
	k.AddStorageClass("efs-sc", "efs.csi.aws.com", map[string]string{"fileSystemId": sanityFS})
	c, err := efs.New(context.Background(), efs.Config{Region: "us-east-1", Endpoint: url, RateLimits: unlimited})
	if err != nil {
		t.Fatal(err)
	}
	fake := forged(t, c, "pvc-forged")
	sockA, stopA := runController(t, "a", url, k)
	sockB, stopB := runController(t, "b", url, k)
	waitGone(t, c, orphan(t, sockA, "pvc-1"))
	leader := collectors(k)
	if len(leader) != 1 {
		t.Fatalf("replicas that collected: %v, want one", leader)
	}
	// The leader goes; the other replica collects the next orphan, made
	// by itself.
	stop := map[string]func(){"a": stopA, "b": stopB}
	other := map[string]string{"a": sockB, "b": sockA}
	stop[leader[0]]()
	waitGone(t, c, orphan(t, other[leader[0]], "pvc-2"))
	if got := collectors(k); len(got) != 2 {
		t.Fatalf("replicas that collected: %v, want both, one after the other", got)
	}
	if _, err := c.DescribeAccessPoint(context.Background(), fake); err != nil {
		t.Errorf("the forged access point: %v", err)
	}
}

// A controller whose EFS API cannot be reached is still alive: Probe says
// ready (the livenessprobe sidecar must not restart it), and the outage
// shows in the metrics instead.
func TestProbeIsReadyDuringAnEFSOutage(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close() // nothing listens there any more: connections are refused
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ml.Addr().String()
	ml.Close()
	socket := filepath.Join(t.TempDir(), "csi.sock")
	ctx, cancel := context.WithCancel(context.Background())
	d, err := New(ctx, Config{Endpoint: "unix://" + socket, Mode: ModeController, TempDir: t.TempDir(), MetricsAddress: addr,
		EFS: efs.Config{Region: "us-east-1", Endpoint: dead, RateLimits: unlimited}})
	if err != nil {
		t.Fatal(err)
	}
	done, ready := make(chan error, 1), make(chan struct{})
	go func() { done <- d.run(ctx, ready) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-ready
	r, err := csi.NewIdentityClient(dial(t, socket)).Probe(context.Background(), &csi.ProbeRequest{})
	if err != nil || !r.GetReady().GetValue() {
		t.Fatalf("Probe: ready %v, %v; want ready", r.GetReady(), err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) { // the background check is outside state
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "efs_csi_efs_api_reachable 0") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the outage is not in the metrics")
		}
	}
}
