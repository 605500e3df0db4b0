package orphans

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

const (
	fsID     = "fs-0123456789abcdef0"
	driver   = "efs.csi.aws.com"
	grace    = 5 * time.Minute
	otherFS  = "fs-0fedcba9876543210" // in the account, named by no StorageClass
	tagClsID = controller.TagClusterID
)

var tags = Tags{Cluster: controller.TagCluster, ClusterID: controller.TagClusterID, Bound: controller.TagBound,
	VolumeName: controller.TagVolumeName, ClaimName: controller.TagClaimName, ClaimNamespace: controller.TagClaimNamespace}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// bed is one cluster: the EFS emulator through the real SDK, this cluster's
// controller, and a fake Kubernetes API read through the real client.
type bed struct {
	efs  *efs.Client
	ctl  *controller.Service
	kube *kubetest.Server
	kc   *kube.Client
	clk  *clock
}

func newBed(t *testing.T) *bed {
	t.Helper()
	url, _ := emulatortest.Start(t, emulator.Config{FileSystems: []string{fsID, otherFS}})
	client, err := efs.New(context.Background(), efs.Config{Endpoint: url, RateLimits: map[string]efs.RateLimit{"*": {}}})
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := controller.New(controller.Config{EFS: client, ClusterID: kubetest.KubeSystemUID})
	if err != nil {
		t.Fatal(err)
	}
	k := kubetest.Start(t)
	k.AddStorageClass("efs-sc", driver, map[string]string{"provisioningMode": "efs-ap", "fileSystemId": fsID})
	k.AddStorageClass("other-driver", "ebs.csi.aws.com", map[string]string{"fileSystemId": otherFS})
	kc, err := kube.New(kube.Config{URL: k.URL, TokenFile: k.TokenFile("collector"), CAFile: k.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	return &bed{efs: client, ctl: ctl, kube: k, kc: kc, clk: &clock{t: time.Now()}}
}

// collector is a fresh collector, as after a restart or a change of leader:
// it remembers nothing of earlier rounds.
func (b *bed) collector(t *testing.T) *Collector {
	t.Helper()
	c, err := New(Config{Driver: driver, ClusterID: kubetest.KubeSystemUID, Interval: time.Minute, Grace: grace,
		TagsPerSecond: 1000, Tags: tags, Cluster: b.kc, AccessPoints: b.efs, Deleter: b.ctl, Now: b.clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// create provisions pvc-<uid> for claim ns/name through the controller, as
// csi-provisioner does, and creates the claim.
func (b *bed) create(t *testing.T, uid, ns, claim string) string {
	t.Helper()
	r, err := b.ctl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
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
	b.kube.SetClaim(ns, claim, uid)
	return r.Volume.VolumeId
}

// rawAccessPoint creates an access point directly through the EFS API, as
// another cluster's driver or a person with the console would.
func (b *bed) rawAccessPoint(t *testing.T, fs, token string, tags map[string]string) string {
	t.Helper()
	ap, err := b.efs.CreateAccessPoint(context.Background(), efs.CreateAccessPointInput{
		FileSystemID: fs, ClientToken: token, Path: "/" + token, Tags: tags,
		PosixUser: &efs.PosixUser{UID: 1000, GID: 1000},
	})
	if err != nil {
		t.Fatal(err)
	}
	return volume.ProvisionedID(fs, ap.ID)
}

// rounds runs n rounds, each a grace period after the previous one.
func (b *bed) rounds(t *testing.T, c *Collector, n int) int {
	t.Helper()
	deleted := 0
	for range n {
		k, err := c.Round(context.Background())
		if err != nil {
			t.Fatalf("round: %v", err)
		}
		deleted += k
		b.clk.t = b.clk.t.Add(grace + time.Second)
	}
	return deleted
}

func (b *bed) exists(t *testing.T, volID string) bool {
	t.Helper()
	return b.describe(t, volID) != nil
}

// describe returns the access point of volID, or nil when it is gone.
func (b *bed) describe(t *testing.T, volID string) *efs.AccessPoint {
	t.Helper()
	id, err := volume.ParseID(volID)
	if err != nil {
		t.Fatal(err)
	}
	ap, err := b.efs.DescribeAccessPoint(context.Background(), id.AccessPointID)
	if errors.Is(err, efs.ErrAccessPointNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

// Only the access point whose claim is gone and that no PV refers to is
// deleted, and only after it stayed so for the grace period.
func TestOnlyForgottenAccessPointsAreDeletedAfterGrace(t *testing.T) {
	b := newBed(t)
	bound := b.create(t, "1", "ns", "bound")          // claim and PV exist
	provisioning := b.create(t, "2", "ns", "pending") // claim exists, no PV yet
	forgotten := b.create(t, "3", "ns", "deleted")    // claim gone, no PV
	b.kube.SetClaim("ns", "deleted", "")
	b.kube.AddPV("pvc-1", driver, bound)
	c := b.collector(t)
	for _, step := range []struct {
		advance time.Duration
		want    int
	}{{0, 0}, {4 * time.Minute, 0}, {2 * time.Minute, 1}, {10 * time.Minute, 0}} {
		b.clk.t = b.clk.t.Add(step.advance)
		n, err := c.Round(context.Background())
		if err != nil || n != step.want {
			t.Fatalf("after %v: deleted %d (%v), want %d", step.advance, n, err, step.want)
		}
	}
	for id, want := range map[string]bool{bound: true, provisioning: true, forgotten: false} {
		if got := b.exists(t, id); got != want {
			t.Errorf("%s exists: %v, want %v", id, got, want)
		}
	}
	if ap := b.describe(t, bound); ap.Tags[controller.TagBound] != "true" {
		t.Errorf("the access point of a PV is not marked bound: %v", ap.Tags)
	}
	if st := c.Stats(); st.Own != 2 || st.OwnBound != 1 || st.Candidates != 0 || st.Deleted != 1 || st.Rounds != 4 {
		t.Errorf("stats %+v", st)
	}
}

// Access points that only look like an orphan of this cluster are never
// collected: another cluster's (same account, same file system), and ones a
// person made and tagged by hand, with or without this cluster's ID.
func TestAccessPointsNotCreatedByThisClusterAreNeverCollected(t *testing.T) {
	claimTags := func(extra map[string]string) map[string]string {
		tags := map[string]string{controller.TagCluster: "true", controller.TagVolumeName: "pvc-9",
			controller.TagClaimName: "gone", controller.TagClaimNamespace: "ns", controller.TagCapacity: "5368709120"}
		for k, v := range extra {
			tags[k] = v
		}
		return tags
	}
	for _, tt := range []struct {
		name, token string
		tags        map[string]string
	}{
		{"another cluster's, same file system", "pvc-9", claimTags(map[string]string{tagClsID: "other-cluster-uid"})},
		{"tagged by hand like the current release's", "console-4f1e", claimTags(nil)},
		{"tagged by hand with this cluster's ID", "console-77aa", claimTags(map[string]string{tagClsID: kubetest.KubeSystemUID})},
		{"this cluster's, on a file system no StorageClass names", "pvc-9", claimTags(map[string]string{tagClsID: kubetest.KubeSystemUID})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBed(t)
			fs := fsID
			if strings.Contains(tt.name, "no StorageClass") {
				fs = otherFS
			}
			id := b.rawAccessPoint(t, fs, tt.token, tt.tags)
			if n := b.rounds(t, b.collector(t), 3); n != 0 || !b.exists(t, id) {
				t.Fatalf("deleted %d; %s exists: %v", n, id, b.exists(t, id))
			}
		})
	}
}

// A Retain PV whose claim was deleted and which an administrator then deleted
// by hand, to keep the data, keeps its access point: once a PV referred to
// it, no collector ever deletes it, not even a new one that never saw the PV.
func TestRetainPVDeletedByHandKeepsItsAccessPoint(t *testing.T) {
	b := newBed(t)
	id := b.create(t, "5", "ns", "data")
	b.kube.AddPV("pvc-5", driver, id)
	b.rounds(t, b.collector(t), 1) // the collector sees the PV
	b.kube.SetClaim("ns", "data", "")
	b.kube.DeletePV("pvc-5") // Released, Retain: the administrator deletes it by hand
	if n := b.rounds(t, b.collector(t), 3); n != 0 || !b.exists(t, id) {
		t.Fatalf("deleted %d; %s exists: %v", n, id, b.exists(t, id))
	}
}

// A PV created for an orphan after the round read the PVs, but before the
// deletion (its provisioner saved it late), saves the access point: the PVs
// are read again right before deleting.
func TestPVCreatedDuringTheRoundSavesTheAccessPoint(t *testing.T) {
	b := newBed(t)
	id := b.create(t, "6", "ns", "late")
	b.kube.SetClaim("ns", "late", "")
	c := b.collector(t)
	b.rounds(t, c, 1) // orphan from now on
	var once sync.Once
	b.kube.OnRequest(func(r kubetest.Request) {
		if strings.Contains(r.Path, "/persistentvolumeclaims/") { // after the round's first read of the PVs
			once.Do(func() { b.kube.AddPV("pvc-6", driver, id) })
		}
	})
	if n := b.rounds(t, c, 3); n != 0 || !b.exists(t, id) {
		t.Fatalf("deleted %d; %s exists: %v", n, id, b.exists(t, id))
	}
	if ap := b.describe(t, id); ap.Tags[controller.TagBound] != "true" {
		t.Errorf("not marked bound: %v", ap.Tags)
	}
}

// Access points of the release before cluster IDs keep working: one that a
// PV of this cluster refers to is adopted (this cluster's ID, bound); one
// that never had a PV here is never collected, as nothing proves it ours.
func TestAccessPointsOfTheReleaseBeforeClusterIDs(t *testing.T) {
	b := newBed(t)
	old, err := controller.New(controller.Config{EFS: b.efs})
	if err != nil {
		t.Fatal(err)
	}
	prev := b.ctl
	b.ctl = old
	inUse := b.create(t, "7", "ns", "in-use")
	orphaned := b.create(t, "8", "ns", "gone")
	b.ctl = prev
	b.kube.AddPV("pvc-7", driver, inUse)
	b.kube.SetClaim("ns", "gone", "")
	c := b.collector(t)
	if n := b.rounds(t, c, 3); n != 0 || !b.exists(t, orphaned) {
		t.Fatalf("deleted %d; %s exists: %v", n, orphaned, b.exists(t, orphaned))
	}
	ap := b.describe(t, inUse)
	if ap.Tags[controller.TagClusterID] != kubetest.KubeSystemUID || ap.Tags[controller.TagBound] != "true" {
		t.Errorf("in-use access point not adopted: %v", ap.Tags)
	}
	if _, ok := b.describe(t, orphaned).Tags[controller.TagClusterID]; ok {
		t.Error("an access point no PV referred to was adopted")
	}
	if st := c.Stats(); st.Own != 1 || st.Legacy != 1 {
		t.Errorf("stats %+v", st)
	}
	// This cluster's controller lists the adopted one, and deletes it.
	r, err := b.ctl.ListVolumes(context.Background(), &csi.ListVolumesRequest{})
	if err != nil || len(r.Entries) != 1 || r.Entries[0].Volume.VolumeId != inUse {
		t.Fatalf("ListVolumes: %v, %v", r, err)
	}
	if _, err := b.ctl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: inUse}); err != nil || b.exists(t, inUse) {
		t.Fatalf("DeleteVolume: %v", err)
	}
}

// A Retain PV whose whole life fell between two rounds (provisioned, bound,
// released and deleted by hand with its claim) is seen by the PV watch, so
// its access point is kept and marked bound.
func TestPVThatLivedBetweenRoundsKeepsItsAccessPoint(t *testing.T) {
	b := newBed(t)
	c := b.collector(t)
	watching := make(chan struct{})
	var once sync.Once
	b.kube.OnRequest(func(r kubetest.Request) {
		if r.Watch {
			once.Do(func() { close(watching) })
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	seen := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.kc.WatchVolumeHandles(ctx, driver, func(h string) { c.Observe(h); seen <- h })
	}()
	defer func() { cancel(); <-done }()
	<-watching
	b.rounds(t, c, 1)
	id := b.create(t, "10", "ns", "brief")
	b.kube.AddPV("pvc-10", driver, id)
	b.kube.SetClaim("ns", "brief", "")
	b.kube.DeletePV("pvc-10")
	if h := <-seen; h != id {
		t.Fatalf("watch saw %s, want %s", h, id)
	}
	if n := b.rounds(t, c, 3); n != 0 || !b.exists(t, id) {
		t.Fatalf("deleted %d; %s exists: %v", n, id, b.exists(t, id))
	}
	if ap := b.describe(t, id); ap.Tags[controller.TagBound] != "true" {
		t.Errorf("not marked bound: %v", ap.Tags)
	}
}

// An untagged volume (enableTagging "false") carries no cluster ID and no
// claim tags: nothing proves this cluster made it, so no round ever
// collects it, though its claim is gone and no PV refers to it.
func TestUntaggedAccessPointsAreNeverCollected(t *testing.T) {
	b := newBed(t)
	r, err := b.ctl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f",
		Parameters: map[string]string{
			"provisioningMode": "efs-ap", "fileSystemId": fsID, "directoryPerms": "700", "enableTagging": "false",
			"csi.storage.k8s.io/pvc/name": "gone", "csi.storage.k8s.io/pvc/namespace": "ns",
		},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ap := b.describe(t, r.Volume.VolumeId); ap == nil || len(ap.Tags) != 0 {
		t.Fatalf("untagged volume's access point: %+v", ap)
	}
	c := b.collector(t)
	if n := b.rounds(t, c, 3); n != 0 || !b.exists(t, r.Volume.VolumeId) {
		t.Fatalf("deleted %d; %s exists: %v", n, r.Volume.VolumeId, b.exists(t, r.Volume.VolumeId))
	}
	if st := c.Stats(); st.Own != 0 || st.Candidates != 0 {
		t.Errorf("stats %+v: an untagged access point counted as this cluster's", st)
	}
}
