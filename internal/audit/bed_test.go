package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	efssdk "github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/efs/types"
	"github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/internal/upstreamtest"
	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
	"github.com/efs-csi/efs-csi-driver/pkg/orphans"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

const (
	testFS     = "fs-0123456789abcdef0"
	driverName = "efs.csi.aws.com"
	testNS     = "kube-system"
	classDyn   = "efs-dynamic"
	classFixed = "efs-fixed-gid"
	fixedGID   = 1234
)

var unlimited = map[string]efs.RateLimit{"*": {}}

// bed is a cluster with this driver: an emulator, a fake Kubernetes API,
// a controller on the cluster's record (Leases, through the real
// client), and optionally the orphan collector under its Lease.
type bed struct {
	t       testing.TB
	url     string
	emu     *emulator.Emulator
	data    string // the emulator's data directory
	k       *kubetest.Server
	kc      *kube.Client
	store   journal.Store
	ctl     *controller.Service
	sdk     *efssdk.Client
	kubecfg string // a kubeconfig for the audit
}

func newBed(t testing.TB, emuCfg ...func(*emulator.Config)) *bed {
	t.Helper()
	old := clockSkew
	clockSkew = 0
	t.Cleanup(func() { clockSkew = old })
	b := &bed{t: t, data: t.TempDir()}
	cfg := emulator.Config{DataDir: b.data, FileSystems: []string{testFS}, NoFsync: true}
	for _, f := range emuCfg {
		f(&cfg)
	}
	b.url, b.emu = emulatortest.Start(t, cfg)
	b.k = kubetest.Start(t)
	var err error
	if b.kc, err = kube.New(kube.Config{URL: b.k.URL, TokenFile: b.k.TokenFile("controller"), CAFile: b.k.CAFile}); err != nil {
		t.Fatal(err)
	}
	b.useJournal(b.kc.LeaseJournalStore(testNS, driverName))
	b.sdk = upstreamtest.Client(b.url)
	b.k.AddStorageClass(classDyn, driverName, map[string]string{"provisioningMode": "efs-ap", "fileSystemId": testFS, "basePath": "/dynamic"})
	b.k.AddStorageClass(classFixed, driverName, map[string]string{"provisioningMode": "efs-ap", "fileSystemId": testFS, "basePath": "/fixed",
		"gid": fmt.Sprint(fixedGID)})
	b.kubecfg = filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: auditor
  user:
    tokenFile: %s
contexts:
- name: test
  context:
    cluster: test
    user: auditor
current-context: test
`, b.k.URL, b.k.CAFile, b.k.TokenFile("auditor"))
	if err := os.WriteFile(b.kubecfg, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

// auditClient is the audit's Kubernetes client, as the command makes it.
func (b *bed) auditClient() *kube.Client {
	b.t.Helper()
	c, _, err := kubeClient(b.kubecfg, "")
	if err != nil {
		b.t.Fatal(err)
	}
	return c
}

// useJournal makes store the cluster's record, with a controller on it.
func (b *bed) useJournal(store journal.Store) {
	b.t.Helper()
	client, err := efs.New(context.Background(), efs.Config{Region: "us-east-1", Endpoint: b.url, RateLimits: unlimited})
	if err != nil {
		b.t.Fatal(err)
	}
	b.store = store
	if b.ctl, err = controller.New(controller.Config{DescriptiveTags: true, EFS: client, Journal: store, ClusterID: kubetest.KubeSystemUID}); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bed) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	b.t.Cleanup(cancel)
	return ctx
}

// startCollector runs the driver's orphan collector (a grace period that
// never ends: it only marks the volumes PVs name bound) under its Lease,
// until the test ends, and waits until it holds the Lease.
func (b *bed) startCollector() {
	b.t.Helper()
	c, err := orphans.New(orphans.Config{Driver: driverName, Interval: 50 * time.Millisecond, Grace: 24 * time.Hour,
		Cluster: b.kc, Journal: b.ctl.Journal(), Collector: b.ctl})
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.t.Cleanup(func() { cancel(); wg.Wait() })
	e := kube.Election{Namespace: testNS, Name: CollectorLease(driverName), LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second, RetryPeriod: 100 * time.Millisecond}
	wg.Go(func() {
		_ = b.kc.RunWhileLeader(ctx, e, func(ctx context.Context) {
			var inner sync.WaitGroup
			defer inner.Wait()
			inner.Go(func() { b.kc.WatchVolumeHandles(ctx, driverName, c.Observe) })
			c.Run(ctx)
		})
	})
	b.eventually("the collector holds its Lease", func() bool {
		st, ok, err := b.kc.Lease(b.ctx(), testNS, CollectorLease(driverName))
		return err == nil && ok && st.Held(time.Now())
	})
}

func (b *bed) eventually(what string, cond func() bool) {
	b.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// create provisions name through the real controller for the claim
// ns/claim of class, as external-provisioner with --extra-create-metadata
// calls it, and returns the volume ID.
func (b *bed) create(name, ns, claim, class string) string {
	b.t.Helper()
	p := map[string]string{"provisioningMode": "efs-ap", "fileSystemId": testFS, "basePath": "/dynamic",
		volume.ParamPVCName: claim, volume.ParamPVCNamespace: ns, volume.ParamPVName: name}
	if class == classFixed {
		p["basePath"], p["gid"] = "/fixed", fmt.Sprint(fixedGID)
	}
	resp, err := b.ctl.CreateVolume(b.ctx(), newCreateRequest(name, p))
	if err != nil {
		b.t.Fatalf("CreateVolume(%s): %v", name, err)
	}
	return resp.GetVolume().GetVolumeId()
}

// newCreateRequest is a CreateVolume request as external-provisioner sends it.
func newCreateRequest(name string, p map[string]string) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{Name: name, Parameters: p, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		}}}
}

// bind adds the PV of handle, bound to the claim ns/claim, and the claim.
func (b *bed) bind(pvName, handle, ns, claim, class string) {
	b.addPV(pvName, handle, ns, claim, class)
	b.k.AddClaim(corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim},
		Spec:   corev1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeName: pvName},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}})
}

func (b *bed) addPV(pvName, handle, ns, claim, class string) {
	b.k.AddPVObject(corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{StorageClassName: class, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:               &corev1.ObjectReference{Namespace: ns, Name: claim},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: handle}}},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound}})
}

// record is the record of volume name on testFS, nil if none (the tests'
// names are their own client tokens).
func (b *bed) record(name string) *journal.Record {
	b.t.Helper()
	r, err := journal.New(b.store).Volume(b.ctx(), testFS, name)
	if errors.Is(err, journal.ErrNotFound) {
		return nil
	}
	if err != nil {
		b.t.Fatal(err)
	}
	return r
}

func (b *bed) records() int {
	b.t.Helper()
	n := 0
	if err := journal.New(b.store).Volumes(b.ctx(), "", func(rs []*journal.Record) error { n += len(rs); return nil }); err != nil {
		b.t.Fatal(err)
	}
	return n
}

// accessPoints lists testFS as EFS holds it now.
func (b *bed) accessPoints() map[string]types.AccessPointDescription {
	b.t.Helper()
	out := map[string]types.AccessPointDescription{}
	p := efssdk.NewDescribeAccessPointsPaginator(b.sdk, &efssdk.DescribeAccessPointsInput{FileSystemId: aws.String(testFS)})
	for p.HasMorePages() {
		page, err := p.NextPage(b.ctx())
		if err != nil {
			b.t.Fatal(err)
		}
		for _, d := range page.AccessPoints {
			out[aws.ToString(d.AccessPointId)] = d
		}
	}
	return out
}

// handMade creates an access point through the bare API, as anyone with
// the account's credentials can: token, path, gid and tags of the caller's
// choosing.
func (b *bed) handMade(token, path string, gid int64, tags map[string]string) string {
	b.t.Helper()
	in := &efssdk.CreateAccessPointInput{ClientToken: aws.String(token), FileSystemId: aws.String(testFS),
		PosixUser: &types.PosixUser{Uid: aws.Int64(gid), Gid: aws.Int64(gid)},
		RootDirectory: &types.RootDirectory{Path: aws.String(path), CreationInfo: &types.CreationInfo{
			OwnerUid: aws.Int64(gid), OwnerGid: aws.Int64(gid), Permissions: aws.String("700")}}}
	for k, v := range tags {
		in.Tags = append(in.Tags, types.Tag{Key: aws.String(k), Value: aws.String(v)})
	}
	out, err := b.sdk.CreateAccessPoint(b.ctx(), in)
	if err != nil {
		b.t.Fatal(err)
	}
	return aws.ToString(out.AccessPointId)
}

func (b *bed) deleteAP(id string) {
	b.t.Helper()
	if _, err := b.sdk.DeleteAccessPoint(b.ctx(), &efssdk.DeleteAccessPointInput{AccessPointId: aws.String(id)}); err != nil {
		b.t.Fatal(err)
	}
}

// audit runs the command as a user would, on the bed's kubeconfig and
// emulator, and decodes its JSON report.
func (b *bed) audit(args ...string) (*Report, int, string) {
	b.t.Helper()
	args = append([]string{"--kubeconfig", b.kubecfg, "--efs-endpoint", b.url, "--region", "us-east-1",
		"--sts-endpoint", b.url, "--grace", "0s", "--local-root", b.data, "--progress", "false", "--output", "json"}, args...)
	var stdout, stderr bytes.Buffer
	status := run(b.ctx(), args, &stdout, &stderr)
	var r Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		b.t.Fatalf("audit %q: status %d, stderr %s, JSON: %v\n%s", args, status, stderr.String(), err, stdout.String())
	}
	return &r, status, stderr.String()
}

// apOf is the access point of a provisioned volume ID.
func apOf(t *testing.T, volumeID string) string {
	t.Helper()
	_, ap, ok := strings.Cut(volumeID, "::")
	if !ok || !volume.ValidAccessPointID(ap) {
		t.Fatalf("volume ID %q names no access point", volumeID)
	}
	return ap
}
