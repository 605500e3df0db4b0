package orphans

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
	"github.com/efs-csi/efs-csi-driver/pkg/mount"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

const (
	fsID   = "fs-0123456789abcdef0"
	driver = "efs.csi.aws.com"
	grace  = 5 * time.Minute
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// bed is one cluster: the EFS emulator through the real SDK, this cluster's
// controller with its record, and a fake Kubernetes API read through the
// real client.
type bed struct {
	emu  *emulator.Emulator
	data string // the emulator's data: DATA/<fs-id>/<path>
	efs  *efs.Client
	ctl  *controller.Service
	kube *kubetest.Server
	kc   *kube.Client
	clk  *clock
}

// newBed starts a cluster; rootDirs: the controller runs with
// --delete-access-point-root-dir (bind mounts of the emulator's data: root).
func newBed(t *testing.T, rootDirs bool) *bed { return newBedTags(t, rootDirs, false) }

// newBedTags is newBed with the controller's --descriptive-tags set or not.
func newBedTags(t *testing.T, rootDirs, descriptive bool) *bed {
	t.Helper()
	if rootDirs && os.Geteuid() != 0 {
		t.Skip("root-directory removal needs bind mounts (root)")
	}
	data := t.TempDir()
	url, emu := emulatortest.Start(t, emulator.Config{DataDir: data, FileSystems: []string{fsID}})
	client, err := efs.New(context.Background(), efs.Config{Endpoint: url, RateLimits: map[string]efs.RateLimit{"*": {}},
		MaxBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cfg := controller.Config{EFS: client, ClusterID: kubetest.KubeSystemUID, Journal: journal.NewMemory(), TempDir: t.TempDir(),
		DescriptiveTags: descriptive}
	if rootDirs {
		m, err := mount.NewLocal(data, client)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DeleteRootDir, cfg.Mounter = true, m
	}
	ctl, err := controller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	k := kubetest.Start(t)
	kc, err := kube.New(kube.Config{URL: k.URL, TokenFile: k.TokenFile("collector"), CAFile: k.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n := ctl.LocksHeld(); n != 0 {
			t.Errorf("%d locks held at rest", n)
		}
	})
	return &bed{emu: emu, data: data, efs: client, ctl: ctl, kube: k, kc: kc, clk: &clock{t: time.Now()}}
}

// collector is a fresh collector, as after a restart or a change of leader:
// it remembers nothing of earlier rounds.
func (b *bed) collector(t *testing.T) *Collector {
	t.Helper()
	c, err := New(Config{Driver: driver, Interval: time.Minute, Grace: grace,
		Cluster: b.kc, Journal: b.ctl.Journal(), Collector: b.ctl, Now: b.clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func createRequest(uid, ns, claim string, extra ...string) *csi.CreateVolumeRequest {
	p := map[string]string{
		"provisioningMode": "efs-ap", "fileSystemId": fsID, "directoryPerms": "700",
		"csi.storage.k8s.io/pvc/name": claim, "csi.storage.k8s.io/pvc/namespace": ns,
		"csi.storage.k8s.io/pv/name": "pvc-" + uid,
	}
	for i := 0; i+1 < len(extra); i += 2 {
		p[extra[i]] = extra[i+1]
	}
	return &csi.CreateVolumeRequest{
		Name:       "pvc-" + uid,
		Parameters: p,
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		}},
	}
}

// create provisions pvc-<uid> for claim ns/name through the controller, as
// csi-provisioner does, and creates the claim. extra are class parameters.
func (b *bed) create(t *testing.T, uid, ns, claim string, extra ...string) string {
	t.Helper()
	b.kube.SetClaim(ns, claim, uid)
	r, err := b.ctl.CreateVolume(context.Background(), createRequest(uid, ns, claim, extra...))
	if err != nil {
		t.Fatal(err)
	}
	return r.Volume.VolumeId
}

// failedCreate is a CreateVolume of pvc-<uid> for claim ns/name that EFS
// never applied (its request held past the call's deadline, then dropped
// with the connection): the record it wrote stays, naming no access point,
// as after a create whose claim was deleted before it succeeded. The claim
// does not exist. Not 500s until the deadline: a retry sent just before it
// could reach the emulator after the faults are reset and be applied (seen
// once under -race on a loaded machine: the other-directory case's own
// access point then found its token taken).
func (b *bed) failedCreate(t *testing.T, uid, ns, claim string) *journal.Record {
	t.Helper()
	b.emu.SetFault(emulator.OpCreateAccessPoint, emulator.Fault{Latency: time.Hour})
	defer b.emu.ResetFaults()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := b.ctl.CreateVolume(ctx, createRequest(uid, ns, claim)); err == nil {
		t.Fatal("CreateVolume succeeded through a failing EFS")
	}
	rec := b.record(t, "pvc-"+uid)
	if rec == nil || rec.AccessPoint != "" {
		t.Fatalf("record of a failed create: %+v", rec)
	}
	return rec
}

// record is the record of volume name, nil if there is none.
func (b *bed) record(t *testing.T, name string) *journal.Record {
	t.Helper()
	var found *journal.Record
	if err := b.ctl.Journal().Volumes(context.Background(), "", func(rs []*journal.Record) error {
		for _, r := range rs {
			if r.Name == name {
				found = r
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return found
}

// idHolder is the token holding id on the file system, "" if none.
func (b *bed) idHolder(t *testing.T, id int64) string {
	t.Helper()
	h, err := b.ctl.Journal().IDHolder(context.Background(), fsID, id)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// rawAccessPoint creates an access point directly through the EFS API, as a
// person with the console or another tool would: nothing is recorded.
func (b *bed) rawAccessPoint(t *testing.T, token, path string, tags map[string]string) string {
	t.Helper()
	ap, err := b.efs.CreateAccessPoint(context.Background(), efs.CreateAccessPointInput{
		FileSystemID: fsID, ClientToken: token, Path: path, Tags: tags,
		PosixUser:    &efs.PosixUser{UID: 1000, GID: 1000},
		CreationInfo: &efs.CreationInfo{OwnerUID: 1000, OwnerGID: 1000, Permissions: "755"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return volume.ProvisionedID(fsID, ap.ID)
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

// accessPoints lists the file system's access points, bypassing the controller.
func (b *bed) accessPoints(t *testing.T) []efs.AccessPoint {
	t.Helper()
	aps, err := efs.Collect(context.Background(), b.efs.ListAccessPoints, fsID)
	if err != nil {
		t.Fatal(err)
	}
	return aps
}

// staticVolume makes an access point with token and tags at
// /static-volume, holding data (the file's path) that is not the
// collector's.
func (b *bed) staticVolume(t *testing.T, token string, tags map[string]string) (id, data string) {
	t.Helper()
	id = b.rawAccessPoint(t, token, "/static-volume", tags)
	data = filepath.Join(b.dir("/static-volume"), "keep.txt")
	if err := os.WriteFile(data, []byte("not the collector's"), 0o600); err != nil {
		t.Fatal(err)
	}
	return id, data
}

// wantUncollected runs c's rounds and checks that access point id and the
// data file in its directory are still there.
func (b *bed) wantUncollected(t *testing.T, c *Collector, id, data string) {
	t.Helper()
	// A record whose access point its tags do not prove may be released
	// (an orphan's, or a forged one): the access point and its data stay.
	if n := b.rounds(t, c, 3); !b.exists(t, id) {
		t.Fatalf("collected %d; %s exists: %v", n, id, b.exists(t, id))
	}
	if got, err := os.ReadFile(data); err != nil || string(got) != "not the collector's" {
		t.Errorf("the directory's data: %q, %v", got, err)
	}
}

// dir is the path of a root directory in the emulator's data.
func (b *bed) dir(path string) string { return filepath.Join(b.data, fsID, filepath.FromSlash(path)) }

// A recorded volume whose claim is gone and that no PV ever named is
// collected once it stayed so for the grace period, through the controller's
// DeleteVolume: access point, root directory, record and id. Its
// neighbours (a PV's, one still provisioning) are kept.
func TestRecordedOrphansAreCollectedAfterGrace(t *testing.T) {
	for _, tt := range []struct {
		name        string
		extra       []string // the forgotten volume's class parameters
		descriptive bool
	}{
		{"default tags: the record's GID token proves it", nil, false},
		{"descriptive tags", nil, true},
		// A claim-name token proves nothing without the tags (upstream
		// sends it too): docs/iam.md.
		{"reuseAccessPoint, descriptive tags", []string{"reuseAccessPoint", "true"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBedTags(t, os.Geteuid() == 0, tt.descriptive)
			bound := b.create(t, "1", "ns", "bound")          // claim and PV exist
			provisioning := b.create(t, "2", "ns", "pending") // claim exists, no PV yet
			forgotten := b.create(t, "3", "ns", "deleted", tt.extra...)
			b.kube.SetClaim("ns", "deleted", "") // claim gone, no PV
			b.kube.AddPV("pvc-1", driver, bound)
			rec := b.record(t, "pvc-3")
			if rec == nil || rec.Allocated < 0 || b.idHolder(t, rec.Allocated) != rec.Token {
				t.Fatalf("record of the forgotten volume: %+v", rec)
			}
			root := b.describe(t, forgotten).Path
			if _, err := os.Stat(b.dir(root)); err != nil {
				t.Fatal(err)
			}
			c := b.collector(t)
			for _, step := range []struct {
				advance time.Duration
				want    int
			}{{0, 0}, {4 * time.Minute, 0}, {2 * time.Minute, 1}, {10 * time.Minute, 0}} {
				b.clk.t = b.clk.t.Add(step.advance)
				n, err := c.Round(context.Background())
				if err != nil || n != step.want {
					t.Fatalf("after %v: collected %d (%v), want %d", step.advance, n, err, step.want)
				}
			}
			for id, want := range map[string]bool{bound: true, provisioning: true, forgotten: false} {
				if got := b.exists(t, id); got != want {
					t.Errorf("%s exists: %v, want %v", id, got, want)
				}
			}
			if r := b.record(t, "pvc-3"); r != nil {
				t.Errorf("the collected volume's record stays: %+v", r)
			}
			if h := b.idHolder(t, rec.Allocated); h != "" {
				t.Errorf("id %d of the collected volume still held by %q", rec.Allocated, h)
			}
			if _, err := os.Stat(b.dir(root)); os.Geteuid() == 0 && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("root directory %s of the collected volume: %v", root, err)
			}
			if r := b.record(t, "pvc-1"); r == nil || !r.Bound {
				t.Errorf("the PV's volume is not marked bound: %+v", r)
			}
			if r := b.record(t, "pvc-2"); r == nil || r.Bound {
				t.Errorf("the provisioning volume: %+v", r)
			}
			if st := c.Stats(); st.Own != 2 || st.OwnBound != 1 || st.Candidates != 0 || st.Deleted != 1 || st.Rounds != 4 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// Access points that only look like an orphan of this cluster are never
// collected, whatever they carry: nothing recorded them. Their directories
// stay, with --delete-access-point-root-dir too.
func TestAccessPointsNotRecordedAreNeverCollected(t *testing.T) {
	forged := func(cluster string) map[string]string {
		tags := map[string]string{controller.TagCluster: "true", controller.TagVolumeName: "pvc-9",
			controller.TagClaimName: "gone", controller.TagClaimNamespace: "ns", controller.TagCapacity: "5368709120"}
		if cluster != "" {
			tags[controller.TagClusterID] = cluster
		}
		return tags
	}
	for _, tt := range []struct {
		name, token string
		tags        map[string]string
	}{
		// The forgery the record is for: this cluster's ID copied, the
		// token CreateVolume derives from the volume-name tag, the claim
		// tags of a claim that does not exist, over a directory of data.
		{"forged: this cluster's ID and the derived token", (volume.Params{}).ClientToken("pvc-9"), forged(kubetest.KubeSystemUID)},
		{"another cluster's, same file system", "pvc-9", forged("other-cluster-uid")},
		{"an earlier release's, before cluster IDs", "pvc-9", forged("")},
		{"tagged by hand with this cluster's ID", "console-77aa", forged(kubetest.KubeSystemUID)},
		{"upstream's, untagged", "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBed(t, true)
			id, data := b.staticVolume(t, tt.token, tt.tags)
			c := b.collector(t)
			b.wantUncollected(t, c, id, data)
			if st := c.Stats(); st.Own != 0 || st.Candidates != 0 {
				t.Errorf("stats %+v: an unrecorded access point counted", st)
			}
		})
	}
}

// A forged record entry (anyone who may write the controller's Leases can
// write one) naming an access point that does not carry this
// cluster's tags for it deletes nothing: upstream's, one made by hand, an
// untagged one (an enableTagging "false" class's orphan is left to the
// audit for the same reason), or another volume's. Each entry is as the
// controller would write it: key, token, path and ids agree with the
// access point, so only the tags tell it from this driver's.
func TestForgedRecordsDeleteNothing(t *testing.T) {
	ours := func(name string) map[string]string {
		return map[string]string{controller.TagCluster: "true", controller.TagVolumeName: name,
			controller.TagClusterID: kubetest.KubeSystemUID}
	}
	for _, tt := range []struct {
		name, token string
		tags        map[string]string
	}{
		{"upstream's", "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f", map[string]string{controller.TagCluster: "true"}},
		{"untagged", "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f", nil},
		{"made by hand", "terraform-1", map[string]string{"Name": "shared"}},
		{"another volume's", "pvc-other", ours("pvc-other")},
		{"another claim's", "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f", map[string]string{controller.TagCluster: "true",
			controller.TagVolumeName: "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f", controller.TagClusterID: kubetest.KubeSystemUID,
			controller.TagClaimName: "real", controller.TagClaimNamespace: "ns"}},
		{"another cluster's", "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f", map[string]string{controller.TagCluster: "true",
			controller.TagVolumeName: "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f", controller.TagClusterID: "other-cluster-uid"}},
		// Name and claim tags can be read off the cluster's volumes; the
		// record life (TagRecordLife) is in EFS alone. Before it, both
		// were collected.
		{"an earlier release's without a cluster ID, named by its own name and claim", "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f",
			map[string]string{controller.TagCluster: "true", controller.TagVolumeName: "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f",
				controller.TagClaimName: "forged", controller.TagClaimNamespace: "ns"}},
		{"this cluster's, made for another record's life", "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f",
			map[string]string{controller.TagCluster: "true", controller.TagVolumeName: "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f",
				controller.TagClusterID: kubetest.KubeSystemUID, controller.TagRecordLife: "2001-02-03T04:05:06Z"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBed(t, true)
			id, data := b.staticVolume(t, tt.token, tt.tags)
			ap := b.describe(t, id)
			j := b.ctl.Journal()
			name := "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f"
			rec, _, err := j.Begin(context.Background(), journal.Volume{FileSystem: fsID, Token: tt.token, Name: name,
				Path: ap.Path, UID: 1000, GID: 1000, Allocated: journal.NoID, ClaimNamespace: "ns", ClaimName: "forged"})
			if err != nil {
				t.Fatal(err)
			}
			if err := j.SetAccessPoint(context.Background(), rec, journal.Made{ID: ap.ID, Path: ap.Path, Token: ap.ClientToken,
				UID: 1000, GID: 1000, Allocated: journal.NoID}, false); err != nil {
				t.Fatal(err)
			}
			c := b.collector(t)
			b.wantUncollected(t, c, id, data)
		})
	}
}

// A Retain PV whose claim was deleted and which an administrator then deleted
// by hand, to keep the data, keeps its volume: once a PV named it, its
// record is bound and no collector ever collects it, not even a new one that
// never saw the PV.
func TestBoundVolumesAreNeverCollected(t *testing.T) {
	for _, tt := range []struct {
		name string
		seen func(t *testing.T, b *bed, c *Collector, id string) // the collector sees the PV
	}{
		{"seen by a round", func(t *testing.T, b *bed, c *Collector, id string) {
			b.kube.AddPV("pvc-5", driver, id)
			b.rounds(t, c, 1)
		}},
		{"seen by the watch only", func(t *testing.T, b *bed, c *Collector, id string) {
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
			b.kube.AddPV("pvc-5", driver, id) // the whole PV's life between two rounds
			b.kube.DeletePV("pvc-5")
			if h := <-seen; h != id {
				t.Fatalf("watch saw %s, want %s", h, id)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBed(t, false)
			id := b.create(t, "5", "ns", "data")
			c := b.collector(t)
			tt.seen(t, b, c, id)
			b.kube.SetClaim("ns", "data", "")
			b.kube.DeletePV("pvc-5") // Released, Retain: the administrator deletes it by hand
			if n := b.rounds(t, c, 3); n != 0 || !b.exists(t, id) {
				t.Fatalf("collected %d; %s exists: %v", n, id, b.exists(t, id))
			}
			if r := b.record(t, "pvc-5"); r == nil || !r.Bound {
				t.Fatalf("record not marked bound: %+v", r)
			}
			if n := b.rounds(t, b.collector(t), 3); n != 0 || !b.exists(t, id) {
				t.Fatalf("a fresh collector collected %d; %s exists: %v", n, id, b.exists(t, id))
			}
		})
	}
}

// A PV created for an orphan after the round read the PVs, but before the
// deletion (its provisioner saved it late), saves the volume: the PVs are
// read again right before collecting.
func TestPVCreatedDuringTheRoundSavesTheOrphan(t *testing.T) {
	b := newBed(t, false)
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
	// A record whose access point its tags do not prove may be released
	// (an orphan's, or a forged one): the access point and its data stay.
	if n := b.rounds(t, c, 3); !b.exists(t, id) {
		t.Fatalf("collected %d; %s exists: %v", n, id, b.exists(t, id))
	}
	if r := b.record(t, "pvc-6"); r == nil || !r.Bound {
		t.Errorf("not marked bound: %+v", r)
	}
}

// A create whose outcome was never recorded (it failed, or its answer was
// lost) leaves a record naming no access point. Once its claim is gone for
// the grace period: an access point with its token at its root directory is
// the create's, and is deleted; none with its token means the create made
// none, and the record and its id are released; one with its token at
// another directory is not the record's, and is left alone.
func TestOrphanRecordsWithoutAccessPoint(t *testing.T) {
	for _, tt := range []struct {
		name string
		// after makes EFS's side: the access point that carries the token,
		// if any ("" for none).
		after       func(t *testing.T, b *bed, rec *journal.Record) string
		wantDeleted bool // the access point after made
		wantRecord  bool
	}{
		{"no access point carries the token", func(*testing.T, *bed, *journal.Record) string { return "" }, false, false},
		{"the create's access point, answer lost", func(t *testing.T, b *bed, rec *journal.Record) string {
			// The request as the controller sent it, applied by EFS after
			// the call gave up.
			ap, err := b.efs.CreateAccessPoint(context.Background(), efs.CreateAccessPointInput{
				FileSystemID: rec.FileSystem, ClientToken: rec.SentToken(), Path: rec.Path,
				PosixUser:    &efs.PosixUser{UID: rec.UID, GID: rec.GID},
				CreationInfo: &efs.CreationInfo{OwnerUID: rec.UID, OwnerGID: rec.GID, Permissions: "700"},
				Tags: map[string]string{controller.TagCluster: "true", controller.TagVolumeName: rec.Name,
					controller.TagClusterID: kubetest.KubeSystemUID, controller.TagCapacity: "5368709120"},
			})
			if err != nil {
				t.Fatal(err)
			}
			return volume.ProvisionedID(rec.FileSystem, ap.ID)
		}, true, false},
		{"the token on an access point at another directory", func(t *testing.T, b *bed, rec *journal.Record) string {
			id := b.rawAccessPoint(t, rec.SentToken(), "/static-volume", map[string]string{controller.TagCluster: "true",
				controller.TagVolumeName: rec.Name, controller.TagClusterID: kubetest.KubeSystemUID,
				controller.TagClaimName: rec.ClaimName, controller.TagClaimNamespace: rec.ClaimNamespace})
			if err := os.WriteFile(filepath.Join(b.dir("/static-volume"), "keep.txt"), []byte("data"), 0o600); err != nil {
				t.Fatal(err)
			}
			return id
		}, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBed(t, os.Geteuid() == 0)
			rec := b.failedCreate(t, "7", "ns", "gone")
			if b.idHolder(t, rec.Allocated) != rec.Token {
				t.Fatalf("id %d of the failed create not held", rec.Allocated)
			}
			id := tt.after(t, b, rec)
			c := b.collector(t)
			want := 0
			if !tt.wantRecord {
				want = 1
			}
			if n := b.rounds(t, c, 3); n != want {
				t.Fatalf("collected %d, want %d", n, want)
			}
			if id != "" && b.exists(t, id) == tt.wantDeleted {
				t.Errorf("%s exists: %v", id, b.exists(t, id))
			}
			if r := b.record(t, rec.Name); (r != nil) != tt.wantRecord {
				t.Errorf("record: %+v, want kept %v", r, tt.wantRecord)
			}
			if h := b.idHolder(t, rec.Allocated); (h != "") != tt.wantRecord {
				t.Errorf("id %d held by %q, want held %v", rec.Allocated, h, tt.wantRecord)
			}
			if tt.wantRecord {
				if _, err := os.Stat(filepath.Join(b.dir("/static-volume"), "keep.txt")); err != nil {
					t.Errorf("the other directory's data: %v", err)
				}
				if st := c.Stats(); st.Kept != 1 || st.Candidates != 0 {
					t.Errorf("stats %+v, want the orphan kept", st)
				}
			}
		})
	}
}

// A create of the orphan's name being retried holds its name locks: the
// collector leaves the volume alone while it runs (keylock.ErrBusy), and the
// retry's volume, once its PV is saved, is never collected.
func TestOrphanWithACreateInFlightIsSkipped(t *testing.T) {
	b := newBed(t, false)
	rec := b.failedCreate(t, "8", "ns", "gone")
	c := b.collector(t)
	b.rounds(t, c, 1) // orphan from now on, due at the next round
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b.emu.SetHook(func(op emulator.Op, phase emulator.Phase, _ any) {
		if op == emulator.OpCreateAccessPoint && phase == emulator.BeforeApply {
			once.Do(func() { close(arrived); <-release })
		}
	})
	retry := make(chan error, 1)
	var volID string
	go func() {
		r, err := b.ctl.CreateVolume(context.Background(), createRequest("8", "ns", "gone"))
		if err == nil {
			volID = r.Volume.VolumeId
		}
		retry <- err
	}()
	<-arrived
	n, err := c.Round(context.Background())
	if err != nil || n != 0 {
		t.Fatalf("round during the create: collected %d, %v", n, err)
	}
	if st := c.Stats(); st.Candidates != 1 {
		t.Errorf("stats %+v: the busy orphan is not a candidate any more", st)
	}
	if r := b.record(t, rec.Name); r == nil {
		t.Fatal("the record of a create in flight was released")
	}
	close(release)
	if err := <-retry; err != nil {
		t.Fatalf("the retried create: %v", err)
	}
	b.kube.AddPV("pvc-8", driver, volID) // its provisioner saves the PV
	if n := b.rounds(t, c, 3); n != 0 || !b.exists(t, volID) {
		t.Fatalf("collected %d; %s exists: %v", n, volID, b.exists(t, volID))
	}
	if r := b.record(t, rec.Name); r == nil || !r.Bound || r.AccessPoint == "" {
		t.Errorf("record after the retry: %+v", r)
	}
	if aps := b.accessPoints(t); len(aps) != 1 {
		t.Errorf("access points: %+v", aps)
	}
}

// A volume whose record names no claim (a provisioner without
// --extra-create-metadata) is never collected: nothing can be asked about it.
func TestVolumesWithoutClaimAreNeverCollected(t *testing.T) {
	b := newBed(t, false)
	r, err := b.ctl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name:       "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f",
		Parameters: map[string]string{"provisioningMode": "efs-ap", "fileSystemId": fsID, "directoryPerms": "700"},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := b.collector(t)
	if n := b.rounds(t, c, 3); n != 0 || !b.exists(t, r.Volume.VolumeId) {
		t.Fatalf("collected %d; %s exists: %v", n, r.Volume.VolumeId, b.exists(t, r.Volume.VolumeId))
	}
	if st := c.Stats(); st.Own != 1 || st.Candidates != 0 {
		t.Errorf("stats %+v", st)
	}
}

// A round that cannot read a claim collects nothing and starts that
// volume's grace period over: only rounds that saw the claim gone count.
func TestUnreadClaimRestartsTheOrphanGracePeriod(t *testing.T) {
	b := newBed(t, false)
	id := b.create(t, "4", "ns", "flaky")
	b.kube.SetClaim("ns", "flaky", "")
	c := b.collector(t)
	b.rounds(t, c, 1)
	b.kube.Fail(func(r kubetest.Request) int {
		if strings.Contains(r.Path, "/persistentvolumeclaims/") {
			return 500
		}
		return 0
	})
	if _, err := c.Round(context.Background()); err == nil {
		t.Fatal("a round that could not read the claim reported no error")
	}
	b.kube.Fail(nil)
	if n := b.rounds(t, c, 1); n != 0 || !b.exists(t, id) {
		t.Fatalf("collected %d right after a failed claim read", n)
	}
	if n := b.rounds(t, c, 1); n != 1 || b.exists(t, id) {
		t.Fatalf("collected %d after a whole grace period", n)
	}
}

// Directory volumes (efs-dir): a PV naming one (efsdir:fs-X:/path) marks
// it bound, never collected, claim gone or not; one whose claim is gone
// and that no PV ever named is collected like any orphan, its directory
// removed with --delete-access-point-root-dir.
func TestDirectoryVolumeOrphans(t *testing.T) {
	b := newBed(t, true)
	bound := b.create(t, "1", "ns", "bound", "provisioningMode", "efs-dir")
	forgotten := b.create(t, "3", "ns", "deleted", "provisioningMode", "efs-dir")
	b.kube.AddPV("pvc-1", driver, bound)
	b.kube.SetClaim("ns", "deleted", "")
	c := b.collector(t)
	b.rounds(t, c, 1)
	b.kube.SetClaim("ns", "bound", "") // Released, Retain: its claim gone too
	b.clk.t = b.clk.t.Add(2 * grace)
	if n := b.rounds(t, c, 2); n != 1 {
		t.Errorf("collected %d, want the forgotten one", n)
	}
	for id, want := range map[string]bool{bound: true, forgotten: false} {
		vid, err := volume.ParseID(id)
		if err != nil || !vid.Dir {
			t.Fatalf("%s: %v", id, err)
		}
		if _, err := os.Stat(b.dir(vid.Path)); (err == nil) != want {
			t.Errorf("directory of %s exists: %v, want %v", id, err == nil, want)
		}
	}
	if r := b.record(t, "pvc-1"); r == nil || !r.Bound {
		t.Errorf("the PV's directory volume is not marked bound: %+v", r)
	}
	if r := b.record(t, "pvc-3"); r != nil {
		t.Errorf("the collected volume's record stays: %+v", r)
	}
}

// TestReadOnlyVolumesOfSnapshotsAreJudgedWithThePVsAndClaims: each round
// hands the controller's read-only volume collection the PVs' handles as
// they are now, the claims as they are now, and the grace period.
func TestReadOnlyVolumesOfSnapshotsAreJudgedWithThePVsAndClaims(t *testing.T) {
	b := newBed(t, false)
	const named, unnamed = "efsrox:" + fsID + ":0123456789abcdef0123456789abcdef:fedcba9876543210fedcba9876543210",
		"efsrox:" + fsID + ":0123456789abcdef0123456789abcdef:00000000000000000000000000000000"
	b.kube.AddPV("pvc-rox", driver, named)
	b.kube.SetClaim("ns", "here", "uid-here")
	type call struct {
		named, unnamed, here, gone bool
		grace                      time.Duration
	}
	var calls []call
	c, err := New(Config{Driver: driver, Interval: time.Minute, Grace: grace, Cluster: b.kc, Journal: b.ctl.Journal(),
		Collector: b.ctl, Now: b.clk.now,
		Readers: func(ctx context.Context, isNamed func(string) bool, claimGone func(context.Context, string, string) (bool, error), g time.Duration) (int, error) {
			hereGone, err := claimGone(ctx, "ns", "here")
			if err != nil {
				return 0, err
			}
			goneGone, err := claimGone(ctx, "ns", "gone")
			if err != nil {
				return 0, err
			}
			calls = append(calls, call{isNamed(named), isNamed(unnamed), !hereGone, goneGone, g})
			return 1, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if n := b.rounds(t, c, 1); n != 1 {
		t.Errorf("a round counts %d deletions, want the read-only volume collection's 1", n)
	}
	want := call{named: true, unnamed: false, here: true, gone: true, grace: grace}
	if len(calls) != 1 || calls[0] != want {
		t.Errorf("the collection saw %+v, want [%+v]", calls, want)
	}
}
