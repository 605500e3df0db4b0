//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/efs-csi/efs-csi-driver/test/e2e/cluster"
	"github.com/efs-csi/efs-csi-driver/test/e2e/manifests"
)

var (
	volumeSnapshots        = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	volumeSnapshotClasses  = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotclasses"}
	volumeSnapshotContents = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
)

// VolumeSnapshots on a real control plane, with the real external-snapshotter: the
// chart rendered with controller.snapshots.enabled (its csi-snapshotter arguments and
// RBAC; csi-provisioner and csi-snapshotter run with the controller service account's
// token, so the RBAC is proven enough), the snapshot-controller and the release's CRDs. A
// claim's files are snapshotted; a claim restored from the VolumeSnapshot and a clone of
// the claim hold them; the driver is killed while a snapshot's copy runs and restarted,
// and the VolumeSnapshot becomes ready only once whole; deleting the VolumeSnapshot
// removes its copy from the file system.
func TestVolumeSnapshotsRestoresAndClonesThroughTheExternalSnapshotter(t *testing.T) {
	s := env(t)
	if os.Geteuid() != 0 {
		t.Skip("the controller mounts the file system (bind mounts): root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(s.cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	a := newApplier(t, s)
	crds, err := filepath.Glob(filepath.Join(s.comps.SnapshotCRDs, "*.yaml"))
	if err != nil || len(crds) != 3 {
		t.Fatalf("the VolumeSnapshot CRDs in %s: %v, %v", s.comps.SnapshotCRDs, crds, err)
	}
	crdObjs, err := manifests.Files(crds...)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range crdObjs {
		if err := a.apply(ctx, o, false); err != nil {
			t.Fatalf("apply CRD %s: %v", o.GetName(), err)
		}
	}
	waitFor(ctx, t, "the VolumeSnapshot CRDs served", func() (bool, error) {
		_, err := dyn.Resource(volumeSnapshotClasses).List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	a = newApplier(t, s) // discovery read before the CRDs: read it again

	// The chart with snapshots on (ci/snapshots-values.yaml): its RBAC and its
	// VolumeSnapshotClass applied, its Deployment's arguments run.
	values := filepath.Join(s.repo, "charts", "efs-csi-driver", "ci", "snapshots-values.yaml")
	objs, err := manifests.RenderChart(s.comps.Helm, filepath.Join(s.repo, "charts", "efs-csi-driver"), releaseNamespace, values)
	if err != nil {
		t.Fatal(err)
	}
	examples, err := manifests.Files(filepath.Join(s.repo, "deploy", "kubernetes", "examples", "storageclass.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	st := newEmulatorStack(ctx, t, s)
	for _, obj := range append(objs, examples...) {
		switch obj.GetKind() {
		case "CSIDriver", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "StorageClass", "VolumeSnapshotClass":
			if err := a.apply(ctx, obj, false); err != nil {
				t.Fatalf("apply %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
		case "Deployment":
			st.deployment = obj
		}
	}
	st.authenticate(ctx)
	r := st.addReplica(ctx, replicaSpec{bins: s.bins, deployment: st.deployment, leaderElection: true,
		driverArgs: []string{"--local-root=" + st.dataDir}})
	snapArgs := slices.DeleteFunc(containerArgs(t, st.deployment, "csi-snapshotter", map[string]string{"--csi-address=": r.socket}),
		func(a string) bool { return strings.HasPrefix(a, "--leader-election") })
	// csi-snapshotter exits when it loses the driver's socket, as in a pod, where kubelet
	// restarts it: startSnapshotter does.
	var snapshotter *cluster.Process
	startSnapshotter := func() {
		t.Helper()
		if snapshotter != nil {
			snapshotter.Stop(syscall.SIGTERM, 10*time.Second)
		}
		if snapshotter, err = cluster.StartProcess("csi-snapshotter", s.dir, s.comps.CSISnapshotter, nil,
			append(snapArgs, "--kubeconfig="+st.kubeconfig)...); err != nil {
			t.Fatal(err)
		}
	}
	startSnapshotter()
	controller, err := cluster.StartProcess("snapshot-controller", s.dir, s.comps.SnapshotController, nil,
		"--kubeconfig="+s.cluster.Kubeconfig, "--leader-election=false")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range []*cluster.Process{snapshotter, controller} { // the last snapshotter started
			p.Stop(syscall.SIGTERM, 10*time.Second)
			if t.Failed() {
				p.Tail(testWriter{t}, 40)
			}
		}
	})

	ns := newNamespace(ctx, t, s, "e2e-snapshots")
	if _, err := dyn.Resource(volumeSnapshotClasses).Get(ctx, "efs-snapshots", metav1.GetOptions{}); err != nil {
		t.Fatalf("the chart's VolumeSnapshotClass: %v", err)
	}
	efsc := efsClient(st.endpoint)
	// rootOf is the directory of the claim's volume in the emulator's file system.
	rootOf := func(claim string) string {
		t.Helper()
		pvc, err := ns.pvcs().Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pv, err := s.cluster.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		handle := pv.Spec.CSI.VolumeHandle
		ap := handle[strings.LastIndex(handle, ":")+1:]
		out, err := efsc.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{AccessPointId: aws.String(ap)})
		if err != nil || len(out.AccessPoints) != 1 {
			t.Fatalf("describe %s: %v", ap, err)
		}
		return filepath.Join(st.dataDir, fileSystemID, aws.ToString(out.AccessPoints[0].RootDirectory.Path))
	}
	claim := func(name string, source *corev1.TypedLocalObjectReference, modes ...corev1.PersistentVolumeAccessMode) {
		t.Helper()
		if len(modes) == 0 {
			modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		}
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.name},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: modes, StorageClassName: aws.String(ns.class),
				Resources:  corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				DataSource: source,
			},
		}
		if _, err := ns.pvcs().Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, "claim "+name+" bound", func() (bool, error) {
			p, err := ns.pvcs().Get(ctx, name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.ClaimBound, err
		})
	}

	claim("source", nil)
	src := rootOf("source")
	// What a pod wrote: many small files, so that the copy outlives a driver's kill.
	for d := range 40 {
		dir := filepath.Join(src, "d", string(rune('a'+d%26))+strings.Repeat("x", d/26))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dir, "f"+string(rune('0'+f%10))+strings.Repeat("y", f/10)), []byte("payload"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(src, "marker"), []byte("snapshotted"), 0o644); err != nil {
		t.Fatal(err)
	}

	snapshot := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": "snap", "namespace": ns.name},
		"spec": map[string]any{"volumeSnapshotClassName": "efs-snapshots",
			"source": map[string]any{"persistentVolumeClaimName": "source"}},
	}}
	if _, err := dyn.Resource(volumeSnapshots).Namespace(ns.name).Create(ctx, snapshot, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The driver is killed once the snapshot's copy has begun (an attempt's directory
	// in the area) or the snapshot is ready, whichever comes first; restarted, it
	// finishes or starts again.
	area := filepath.Join(st.dataDir, fileSystemID, ".efs-csi-snapshots")
	waitFor(ctx, t, "the snapshot's copy begun", func() (bool, error) {
		entries, _ := os.ReadDir(area)
		return len(entries) > 0, nil
	})
	r.driver.Kill()
	ready := func() (bool, error) {
		vs, err := dyn.Resource(volumeSnapshots).Namespace(ns.name).Get(ctx, "snap", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ok, _, _ := unstructured.NestedBool(vs.Object, "status", "readyToUse")
		return ok, nil
	}
	if ok, _ := ready(); ok {
		t.Log("the copy finished before the kill")
	}
	r.startDriver(ctx)
	startSnapshotter()
	waitFor(ctx, t, "the VolumeSnapshot ready", ready)
	entries, _ := os.ReadDir(area)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 1 || strings.HasPrefix(names[0], ".") {
		t.Errorf("the snapshot area holds %v once the snapshot is ready: want its one copy", names)
	}

	claim("restored", &corev1.TypedLocalObjectReference{APIGroup: aws.String("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "snap"})
	claim("clone", &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "source"})
	for _, c := range []string{"restored", "clone"} {
		root := rootOf(c)
		if got, err := os.ReadFile(filepath.Join(root, "marker")); err != nil || string(got) != "snapshotted" {
			t.Errorf("%s: marker = %q, %v", c, got, err)
		}
		n := 0
		_ = filepath.WalkDir(filepath.Join(root, "d"), func(_ string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				n++
			}
			return nil
		})
		if n != 4000 {
			t.Errorf("%s: %d files, want 4000", c, n)
		}
	}

	// A ReadOnlyMany claim of the snapshot is its copy, with no copy of its own.
	claim("rox", &corev1.TypedLocalObjectReference{APIGroup: aws.String("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "snap"},
		corev1.ReadOnlyMany)
	roxClaim, err := ns.pvcs().Get(ctx, "rox", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roxPV, err := s.cluster.Client.CoreV1().PersistentVolumes().Get(ctx, roxClaim.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := roxPV.Spec.CSI.VolumeHandle; !strings.HasPrefix(h, "efsrox:") {
		t.Errorf("the ReadOnlyMany claim's volume is %s, want a volume of the snapshot's copy (efsrox:)", h)
	}
	if got, err := os.ReadFile(filepath.Join(area, names[0], "data", "marker")); err != nil || string(got) != "snapshotted" {
		t.Errorf("the snapshot's copy: marker = %q, %v", got, err)
	}

	// Deleting the VolumeSnapshot while the ReadOnlyMany claim lives is refused
	// (the csi-snapshotter retries), and done once the claim is gone; the copy with it.
	if err := dyn.Resource(volumeSnapshots).Namespace(ns.name).Delete(ctx, "snap", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "DeleteSnapshot refused while the ReadOnlyMany claim lives", func() (bool, error) {
		evs, err := s.cluster.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=SnapshotDeleteError"})
		return err == nil && len(evs.Items) > 0, err
	})
	if got, err := os.ReadFile(filepath.Join(area, names[0], "data", "marker")); err != nil || string(got) != "snapshotted" {
		t.Fatalf("the copy a ReadOnlyMany claim reads was touched: marker = %q, %v", got, err)
	}
	if err := ns.pvcs().Delete(ctx, "rox", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the VolumeSnapshotContent and the copy gone", func() (bool, error) {
		list, err := dyn.Resource(volumeSnapshotContents).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		entries, _ := os.ReadDir(area)
		return len(list.Items) == 0 && len(entries) == 0, nil
	})
	ns.deleteAll(ctx, t)
	waitFor(ctx, t, "every PV deleted", func() (bool, error) {
		pvs, err := s.cluster.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		n := 0
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns.name {
				n++
			}
		}
		return n == 0, nil
	})
	if err := dyn.Resource(volumeSnapshotClasses).Delete(ctx, "efs-snapshots", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
}
