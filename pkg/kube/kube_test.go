package kube_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

func client(t *testing.T, k *kubetest.Server, caller string) *kube.Client {
	t.Helper()
	c, err := kube.New(kube.Config{URL: k.URL, TokenFile: k.TokenFile(caller), CAFile: k.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The client pages through PVs, keeps only the driver's handles, tells a
// missing claim from a present one, reads the file systems of the driver's
// StorageClasses (named directly or by reference) and the cluster's identity.
func TestClientReadsTheCluster(t *testing.T) {
	k := kubetest.Start(t)
	for i, h := range []string{"h1", "h2", "h3"} {
		k.AddPV("pv-"+h, "efs.csi.aws.com", h)
		if i == 0 {
			k.AddPV("other", "ebs.csi.aws.com", "x")
		}
	}
	k.SetClaim("ns", "c1", "u-1")
	k.AddStorageClass("a", "efs.csi.aws.com", map[string]string{"fileSystemId": "fs-1"})
	k.AddStorageClass("b", "efs.csi.aws.com", map[string]string{"fileSystemId": "fs-1", "basePath": "/b"})
	k.AddStorageClass("c", "ebs.csi.aws.com", map[string]string{"fileSystemId": "fs-2"})
	k.AddStorageClass("d", "efs.csi.aws.com", map[string]string{"fileSystemId": "fs-3"})
	k.AddStorageClass("static", "efs.csi.aws.com", nil)
	// Several file systems in one class: each is listed, spaces trimmed.
	k.AddStorageClass("several", "efs.csi.aws.com", map[string]string{"fileSystemId": "fs-3, fs-6 ,fs-1"})
	// By reference: read (trimmed); a reference to nothing or to no ID adds nothing.
	k.SetObject("configmaps", "storage", "efs", map[string]string{"fs": "fs-0000000a\n", "junk": "x"})
	k.AddStorageClass("e", "efs.csi.aws.com", map[string]string{"fileSystemIdConfigRef": "storage/efs/fs"})
	k.AddStorageClass("f", "efs.csi.aws.com", map[string]string{"fileSystemIdConfigRef": "storage/efs/junk"})
	k.AddStorageClass("g", "efs.csi.aws.com", map[string]string{"fileSystemIdSecretRef": "storage/none/fs"})
	// Classes whose volumes another backend holds (a role in the
	// provisioner secret, S3 Files) are not this account's EFS: not listed.
	k.AddStorageClass("h", "efs.csi.aws.com", map[string]string{"fileSystemId": "fs-4",
		"csi.storage.k8s.io/provisioner-secret-name": "x-account", "csi.storage.k8s.io/provisioner-secret-namespace": "kube-system"})
	k.AddStorageClass("i", "efs.csi.aws.com", map[string]string{"fileSystemId": "fs-5", "provisioningMode": "s3files-ap"})
	c := client(t, k, "driver")
	ctx := context.Background()
	if h, err := c.VolumeHandles(ctx, "efs.csi.aws.com"); err != nil || !slices.Equal(h, []string{"h1", "h2", "h3"}) {
		t.Errorf("handles %v, %v", h, err)
	}
	if uid, err := c.ClaimUID(ctx, "ns", "c1"); uid != "u-1" || err != nil {
		t.Errorf("claim c1: %q, %v", uid, err)
	}
	if uid, err := c.ClaimUID(ctx, "ns", "gone"); uid != "" || err != nil {
		t.Errorf("missing claim: %q, %v", uid, err)
	}
	if ids, err := c.FileSystemIDs(ctx, "efs.csi.aws.com"); err != nil || !slices.Equal(ids, []string{"fs-1", "fs-3", "fs-6", "fs-0000000a"}) {
		t.Errorf("file systems %v, %v", ids, err)
	}
	if uid, err := c.NamespaceUID(ctx, "kube-system"); uid != kubetest.KubeSystemUID || err != nil {
		t.Errorf("kube-system: %q, %v", uid, err)
	}
	if _, err := c.NamespaceUID(ctx, "nope"); err == nil {
		t.Error("a missing namespace has a UID")
	}
}

// An answer that is not "not found" (here: unauthorized) is an error, never
// taken for a missing claim: that would make every access point an orphan.
func TestUnauthorizedIsNotAMissingClaim(t *testing.T) {
	k := kubetest.Start(t)
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte("not-issued"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := kube.New(kube.Config{URL: k.URL, TokenFile: f, CAFile: k.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	if uid, err := c.ClaimUID(context.Background(), "ns", "c1"); err == nil {
		t.Fatalf("unauthorized answer taken for a claim %q", uid)
	}
}

var fast = kube.Election{Namespace: "kube-system", Name: "efs-orphans",
	LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}

// Two candidates: only the one holding the Lease runs; when its context
// ends it releases the Lease and the other one runs, after the first
// returned.
func TestOnlyOneCandidateLeadsAndHandsOver(t *testing.T) {
	k := kubetest.Start(t)
	type event struct {
		who     string
		leading bool
	}
	events := make(chan event, 8)
	ctxs := map[string]context.CancelFunc{}
	done := map[string]chan error{}
	for _, who := range []string{"a", "b"} {
		c := client(t, k, who)
		ctx, cancel := context.WithCancel(context.Background())
		finished := make(chan error, 1)
		ctxs[who], done[who] = cancel, finished
		e := fast
		e.Identity = who
		go func() {
			finished <- c.RunWhileLeader(ctx, e, func(ctx context.Context) {
				events <- event{who, true}
				<-ctx.Done()
				events <- event{who, false}
			})
		}()
	}
	first := <-events
	if !first.leading || k.LeaseHolder("kube-system", "efs-orphans") != first.who {
		t.Fatalf("first event %+v, lease holder %q", first, k.LeaseHolder("kube-system", "efs-orphans"))
	}
	other := map[string]string{"a": "b", "b": "a"}[first.who]
	ctxs[first.who]()
	if ev := <-events; ev != (event{first.who, false}) {
		t.Fatalf("after cancelling the leader: %+v, want it to stop first", ev)
	}
	if err := <-done[first.who]; err != nil {
		t.Fatal(err)
	}
	if ev := <-events; ev != (event{other, true}) {
		t.Fatalf("after the leader left: %+v, want %s to lead", ev, other)
	}
	ctxs[other]()
	<-events
	if err := <-done[other]; err != nil {
		t.Fatal(err)
	}
}

// The watch reports the driver's PVs created after it started, also one
// deleted again before any list could have seen it, and nothing of other
// drivers.
func TestWatchSeesShortLivedVolumes(t *testing.T) {
	k := kubetest.Start(t)
	k.AddPV("before", "efs.csi.aws.com", "h0")
	watching := make(chan struct{})
	var once sync.Once
	k.OnRequest(func(r kubetest.Request) {
		if r.Watch {
			once.Do(func() { close(watching) })
		}
	})
	c := client(t, k, "driver")
	ctx, cancel := context.WithCancel(context.Background())
	seen := make(chan string, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.WatchVolumeHandles(ctx, "efs.csi.aws.com", func(h string) { seen <- h })
	}()
	<-watching
	k.AddPV("other", "ebs.csi.aws.com", "x")
	k.AddPV("short", "efs.csi.aws.com", "h1")
	k.DeletePV("short")
	k.AddPV("late", "efs.csi.aws.com", "h2")
	for _, want := range []string{"h1", "h2"} {
		if got := <-seen; got != want {
			t.Errorf("watch reported %q, want %q", got, want)
		}
	}
	cancel()
	<-done
}
