package orphans

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

const fsID = "fs-0123456789abcdef0"

// cluster is an in-memory Kubernetes: PV handles and claims by ns/name.
type cluster struct {
	mu      sync.Mutex
	handles []string
	claims  map[string]string // ns/name → uid
}

func (c *cluster) VolumeHandles(context.Context, string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.handles...), nil
}

func (c *cluster) ClaimUID(_ context.Context, ns, name string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.claims[ns+"/"+name], nil
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func create(t *testing.T, ctl *controller.Service, uid, ns, claim string) string {
	t.Helper()
	r, err := ctl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "pvc-" + uid,
		Parameters: map[string]string{
			"provisioningMode": "efs-ap", "fileSystemId": fsID, "directoryPerms": "700",
			"csi.storage.k8s.io/pvc/name": claim, "csi.storage.k8s.io/pvc/namespace": ns,
			"csi.storage.k8s.io/pv/name": "pvc-" + uid,
		},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r.Volume.VolumeId
}

// Only the access point whose claim is gone and that no PV refers to is
// deleted, and only after it stayed so for the grace period.
func TestOnlyForgottenAccessPointsAreDeletedAfterGrace(t *testing.T) {
	url, _ := emulatortest.Start(t, emulator.Config{FileSystems: []string{fsID}})
	client, err := efs.New(context.Background(), efs.Config{Endpoint: url, RateLimits: map[string]efs.RateLimit{"*": {}}})
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := controller.New(controller.Config{EFS: client})
	if err != nil {
		t.Fatal(err)
	}
	k := &cluster{claims: map[string]string{}}
	bound := create(t, ctl, "1", "ns", "bound")          // claim and PV exist
	provisioning := create(t, ctl, "2", "ns", "pending") // claim exists, no PV yet
	forgotten := create(t, ctl, "3", "ns", "deleted")    // claim gone, no PV
	released := create(t, ctl, "4", "ns", "released")    // claim gone, PV still there
	k.handles = []string{bound, released}
	k.claims["ns/bound"], k.claims["ns/pending"] = "1", "2"

	clk := &clock{t: time.Now()}
	c, err := New(Config{Driver: "efs.csi.aws.com", Interval: time.Minute, Grace: 5 * time.Minute,
		Tags: Tags{Cluster: controller.TagCluster, VolumeName: controller.TagVolumeName,
			ClaimName: controller.TagClaimName, ClaimNamespace: controller.TagClaimNamespace},
		Cluster: k, AccessPoints: client, Deleter: ctl, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		advance time.Duration
		want    int
	}{{0, 0}, {4 * time.Minute, 0}, {2 * time.Minute, 1}, {10 * time.Minute, 0}} {
		clk.t = clk.t.Add(step.advance)
		n, err := c.Round(context.Background())
		if err != nil || n != step.want {
			t.Fatalf("after %v: deleted %d (%v), want %d", step.advance, n, err, step.want)
		}
	}
	var left []string
	client.ListAccessPoints(context.Background(), fsID, func(p []efs.AccessPoint) error {
		for _, ap := range p {
			left = append(left, "efs:"+fsID+"::"+ap.ID)
		}
		return nil
	})
	want := map[string]bool{bound: true, provisioning: true, released: true}
	if len(left) != 3 {
		t.Fatalf("left %v, want %v (forgotten %s deleted)", left, want, forgotten)
	}
	for _, id := range left {
		if !want[id] {
			t.Errorf("%s should have been kept? left %v", id, left)
		}
	}
}
