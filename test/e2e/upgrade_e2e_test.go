//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	efstypes "github.com/aws/aws-sdk-go-v2/service/efs/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/efs-csi/efs-csi-driver/test/e2e/manifests"
)

// unnamedLeftBy matches an access point that made says who (a replica whose record
// this cluster no longer has) made and left: it carries its claim's tags and no PV
// names it (its claim is gone, or bound to another volume). Each is logged once.
func unnamedLeftBy(ctx context.Context, t *testing.T, s *suite, who string, made func(efstypes.AccessPointDescription) bool) func(efstypes.AccessPointDescription) bool {
	logged := map[string]bool{}
	core := s.cluster.Client.CoreV1()
	named := func(id, ns, claim string) bool {
		pvc, err := core.PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil || pvc.Spec.VolumeName == "" {
			return err != nil && !apierrors.IsNotFound(err) // unsure: not a leak
		}
		pv, err := core.PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil || pv.Spec.CSI == nil {
			return true // unsure: not a leak
		}
		return strings.HasSuffix(pv.Spec.CSI.VolumeHandle, "::"+id)
	}
	return func(ap efstypes.AccessPointDescription) bool {
		tags := tagMap(ap.Tags)
		id := aws.ToString(ap.AccessPointId)
		if !made(ap) || tags["efs.csi.aws.com/pvc-name"] == "" ||
			named(id, tags["efs.csi.aws.com/pvc-namespace"], tags["efs.csi.aws.com/pvc-name"]) {
			return false
		}
		if !logged[id] {
			logged[id] = true
			t.Logf("access point %s left by %s for claim %s/%s; no PV names it",
				id, who, tags["efs.csi.aws.com/pvc-namespace"], tags["efs.csi.aws.com/pvc-name"])
		}
		return true
	}
}

const (
	upstreamVolumes = 60  // provisioned as the upstream driver does, before the upgrade
	upstreamDelete  = 30  // of those, deleted during the storm
	upstreamNew     = 100 // PVCs created during the storm
)

// The same storm from the start state that the upstream driver leaves: PVs, bound claims
// and access points as its controller makes them (its client tokens, tags, root
// directories and GIDs, data written by pods), then this driver installed with an
// upstream values.yaml (the chart rendered with ci/upstream-values.yaml: two replicas
// with leader election, root-directory removal on, upstream's timeouts). New claims
// arrive while upstream's are deleted: every new GID differs from upstream's, each
// deleted volume's directory goes and nothing else does, and at the end no access point
// is left and the data beside the volumes is intact.
func TestUpgradeFromUpstreamProvisionedVolumesWithUpstreamValues(t *testing.T) {
	s := env(t)
	if os.Geteuid() != 0 {
		t.Skip("root-directory removal bind-mounts the emulator's file system: needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	// Under upstream's example policy, which the users of upstream and of an earlier
	// release (more tag keys than the cluster's) attached.
	st := newControllerStack(ctx, t, s, s.policy(upstreamExamplePolicy))
	ns := newNamespace(ctx, t, s, "e2e-from-upstream")
	efsc := efsClient(st.endpoint)
	fsDir := filepath.Join(st.dataDir, fileSystemID)
	// Released data beside the volumes, in the same parent: no delete may touch it.
	keep := filepath.Join(fsDir, "dynamic_provisioning", ns.name, "released", "data")
	writeFile(t, keep, "kept")

	name := func(i int) string { return fmt.Sprintf("up-%03d", i) }
	ups := make([]upstreamVolume, upstreamVolumes)
	for i := range ups {
		// Upstream allocates GIDs from the class's range; spread them out so that
		// this driver's allocator must step around them.
		ups[i] = provisionAsUpstream(ctx, t, s, efsc, fsDir, ns.name, name(i), int64(50000+3*i))
	}
	waitFor(ctx, t, "upstream's claims bound", func() (bool, error) {
		n, err := ns.bound(ctx)
		return n == upstreamVolumes, err
	})
	upstreamGIDs := map[int32]bool{}
	for _, u := range ups {
		upstreamGIDs[int32(u.gid)] = true
	}

	deployment := chartDeployment(t, s, "upstream-values.yaml")
	for range 2 {
		st.addReplica(ctx, replicaSpec{bins: s.bins, deployment: deployment, leaderElection: true,
			driverArgs: []string{"--local-root=" + st.dataDir}})
	}
	fresh := func(i int) string { return fmt.Sprintf("new-%03d", i) }
	ns.create(ctx, t, upstreamNew, fresh)
	ns.delete(ctx, t, upstreamDelete, name)
	live := upstreamVolumes - upstreamDelete + upstreamNew
	ns.waitLive(ctx, t, live)
	seen := map[string]int32{}
	checkAccessPoints(ctx, t, s, efsc, seen, live)
	for ap, gid := range seen {
		if upstreamGIDs[gid] && !isUpstreamAP(ups, ap) {
			t.Errorf("access point %s got GID %d, which an upstream volume holds", ap, gid)
		}
	}
	for i, u := range ups {
		_, err := os.Stat(filepath.Join(fsDir, u.path, "written-by-a-pod"))
		switch deleted := i < upstreamDelete; {
		case deleted && !errors.Is(err, os.ErrNotExist):
			t.Errorf("deleted upstream volume %s: its directory %s is still there (%v)", u.pv, u.path, err)
		case !deleted && err != nil:
			t.Errorf("live upstream volume %s lost its data: %v", u.pv, err)
		}
	}

	ns.deleteAll(ctx, t)
	waitNoLeaks(ctx, t, s, efsc)
	for _, u := range ups {
		if _, err := os.Stat(filepath.Join(fsDir, u.path)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("upstream volume %s: its directory %s is still there after its deletion (%v)", u.pv, u.path, err)
		}
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "kept" {
		t.Errorf("data beside the volumes: %q, %v", b, err)
	}
	t.Logf("%d upstream volumes taken over and deleted, %d new ones provisioned and deleted, in %v",
		upstreamVolumes, upstreamNew, time.Since(start).Round(time.Millisecond))
	st.checkAlive()
}

// chartDeployment is the controller Deployment of this checkout's chart rendered with
// one of its ci/ values files.
func chartDeployment(t *testing.T, s *suite, values string) *unstructured.Unstructured {
	t.Helper()
	chart := filepath.Join(s.repo, "charts", "efs-csi-driver")
	objs, err := manifests.RenderChart(s.comps.Helm, chart, releaseNamespace, filepath.Join(chart, "ci", values))
	if err != nil {
		t.Fatal(err)
	}
	return findDeployment(t, objs)
}

func findDeployment(t *testing.T, objs []*unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			return o
		}
	}
	t.Fatal("no controller Deployment")
	return nil
}

// upstreamVolume is one volume as the upstream driver leaves it.
type upstreamVolume struct {
	pv, accessPoint, path string
	gid                   int64
}

func isUpstreamAP(ups []upstreamVolume, ap string) bool {
	for _, u := range ups {
		if u.accessPoint == ap {
			return true
		}
	}
	return false
}

// provisionAsUpstream leaves what upstream's controller and csi-provisioner leave for a
// claim of the example class: an access point made as upstream's CreateVolume makes it
// (client token the PV name; root basePath/<namespace>/<claim>-<uuid>; uid = gid from
// the range; directoryPerms as CreationInfo; the tag efs.csi.aws.com/cluster=true and
// the user's --tags, nothing else), its directory with a pod's data in it, and the PV
// and bound claim that csi-provisioner writes.
func provisionAsUpstream(ctx context.Context, t *testing.T, s *suite, c *efs.Client, fsDir, namespace, claim string, gid int64) upstreamVolume {
	t.Helper()
	pvName := "pvc-" + uuid()
	root := fmt.Sprintf("/dynamic_provisioning/%s/%s-%s", namespace, claim, uuid())
	out, err := c.CreateAccessPoint(ctx, &efs.CreateAccessPointInput{
		ClientToken:  aws.String(pvName),
		FileSystemId: aws.String(fileSystemID),
		PosixUser:    &efstypes.PosixUser{Uid: aws.Int64(gid), Gid: aws.Int64(gid)},
		RootDirectory: &efstypes.RootDirectory{Path: aws.String(root), CreationInfo: &efstypes.CreationInfo{
			OwnerUid: aws.Int64(gid), OwnerGid: aws.Int64(gid), Permissions: aws.String("700")}},
		Tags: []efstypes.Tag{
			{Key: aws.String("efs.csi.aws.com/cluster"), Value: aws.String("true")},
			{Key: aws.String("team"), Value: aws.String("storage")},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ap := aws.ToString(out.AccessPointId)
	writeFile(t, filepath.Join(fsDir, root, "written-by-a-pod"), claim)

	pvc, err := s.cluster.Client.CoreV1().PersistentVolumeClaims(namespace).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: namespace, Annotations: map[string]string{
			"pv.kubernetes.io/bind-completed":               "yes",
			"volume.kubernetes.io/storage-provisioner":      "efs.csi.aws.com",
			"volume.beta.kubernetes.io/storage-provisioner": "efs.csi.aws.com",
		}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: aws.String(storageClass),
			VolumeName:       pvName,
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.cluster.Client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName,
			Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": "efs.csi.aws.com"},
			Finalizers:  []string{"external-provisioner.volume.kubernetes.io/finalizer"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              storageClass,
			MountOptions:                  []string{"tls"},
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: namespace, Name: claim, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver:       "efs.csi.aws.com",
				VolumeHandle: fileSystemID + "::" + ap,
				VolumeAttributes: map[string]string{
					"storage.kubernetes.io/csiProvisionerIdentity": "1700000000000-8081-efs.csi.aws.com"},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return upstreamVolume{pv: pvName, accessPoint: ap, path: root, gid: gid}
}

// boundWithPrefix counts the bound claims whose name starts with prefix.
func (ns *namespace) boundWithPrefix(ctx context.Context, prefix string) (int, error) {
	list, err := ns.pvcs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range list.Items {
		if strings.HasPrefix(p.Name, prefix) && p.Status.Phase == corev1.ClaimBound {
			n++
		}
	}
	return n, nil
}

func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
