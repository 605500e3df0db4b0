//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/efs-csi/efs-csi-driver/test/e2e/manifests"
)

// A StorageClass that names its file system by a ConfigMap key
// (fileSystemIdConfigRef), with the read granted by the chart's
// controller.fileSystemIdRefs.enabled: a claim is provisioned on that file
// system and its volume deleted. The grant is taken back afterwards, so the
// other scenarios run with the default least privilege.
func TestClaimOfAClassNamingItsFileSystemByConfigMap(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st := startControllerStack(ctx, t, s, stackOptions{replicas: 1, leaderElection: true})
	grantReferenceReads(ctx, t, s)
	ns := newNamespace(ctx, t, s, "e2e-fsref")
	if _, err := s.cluster.Client.CoreV1().ConfigMaps(ns.name).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "efs", Namespace: ns.name},
		Data:       map[string]string{"fileSystemId": fileSystemID + "\n"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	class := "efs-sc-configmap"
	newClass(ctx, t, s, class, map[string]string{"provisioningMode": "efs-ap", "directoryPerms": "700",
		"fileSystemIdConfigRef": ns.name + "/efs/fileSystemId"}, nil)
	pv := ns.boundClaim(ctx, t, "by-ref", class, nil)
	if h := pv.Spec.CSI.VolumeHandle; !strings.Contains(h, fileSystemID+"::fsap-") {
		t.Errorf("volume %s is not on the referenced file system %s", h, fileSystemID)
	}
	ns.deleteAll(ctx, t)
	waitNoLeaks(ctx, t, s, efsClient(st.endpoint))
	st.checkAlive()
}

// grantReferenceReads applies the controller ClusterRole of the chart rendered
// with controller.fileSystemIdRefs.enabled, and puts the base's back when the
// test ends.
func grantReferenceReads(ctx context.Context, t *testing.T, s *suite) {
	t.Helper()
	chart := filepath.Join(s.repo, "charts", "efs-csi-driver")
	granted, err := manifests.RenderChart(s.comps.Helm, chart, releaseNamespace, filepath.Join(chart, "ci", "full-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	base, err := manifests.Kustomization(filepath.Join(s.repo, "deploy", "kubernetes", "base"))
	if err != nil {
		t.Fatal(err)
	}
	role := func(objs []*unstructured.Unstructured) *unstructured.Unstructured {
		for _, o := range objs {
			if o.GetKind() == "ClusterRole" && o.GetName() == "efs-csi-controller" {
				return o
			}
		}
		t.Fatal("no ClusterRole efs-csi-controller")
		return nil
	}
	a := newApplier(t, s)
	if err := a.apply(ctx, role(granted), false); err != nil {
		t.Fatal(err)
	}
	original := role(base)
	t.Cleanup(func() {
		if err := a.apply(context.Background(), original, false); err != nil {
			t.Errorf("restore the ClusterRole: %v", err)
		}
	})
}

// newClass creates StorageClass name of the driver (reclaim policy Delete) with params
// and binding mode (nil: Immediate), deleted when the test ends.
func newClass(ctx context.Context, t *testing.T, s *suite, name string, params map[string]string, mode *storagev1.VolumeBindingMode) {
	t.Helper()
	reclaim := corev1.PersistentVolumeReclaimDelete
	if _, err := s.cluster.Client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name},
		Provisioner:       "efs.csi.aws.com",
		ReclaimPolicy:     &reclaim,
		VolumeBindingMode: mode,
		Parameters:        params,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.cluster.Client.StorageV1().StorageClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// boundClaim creates a 1Gi ReadWriteMany claim name of class (with annotations) in the
// namespace, waits until it is bound and returns its PV.
func (ns *namespace) boundClaim(ctx context.Context, t *testing.T, name, class string, annotations map[string]string) *corev1.PersistentVolume {
	t.Helper()
	pvc, err := ns.pvcs().Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.name, Annotations: annotations},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: aws.String(class),
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "claim "+name+" bound", func() (bool, error) {
		p, err := ns.pvcs().Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pvc = p
		return p.Status.Phase == corev1.ClaimBound, nil
	})
	pv, err := ns.s.cluster.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pv
}
