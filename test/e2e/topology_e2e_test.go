//go:build e2e

package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A One Zone file system's claim with WaitForFirstConsumer and
// enforceZoneAffinity: once the scheduler (here, the test) selects a node of
// that zone, the real csi-provisioner passes the node's topology, the driver
// answers the file system's zone, and the PV gets nodeAffinity for it. The
// Node and its CSINode are what kubelet would register for a node plugin
// that reported the zone in NodeGetInfo.
func TestOneZoneClaimWithWaitForFirstConsumerGetsItsZonesNodeAffinity(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const zone, zoneKey, node = "us-east-1b", "topology.kubernetes.io/zone", "e2e-zone-node"
	// Made by the emulator at start, as an administrator makes it: the controller's
	// policy (AWS's managed one) allows no CreateFileSystem.
	const fsID = "fs-0b0e0a0e1b1e1b1e1"
	st := startControllerStack(ctx, t, s, stackOptions{replicas: 1, leaderElection: true,
		emulatorArgs: []string{"--one-zone-file-system=" + fsID + "=" + zone}})
	efsc := efsClient(st.endpoint)

	registerZonalNode(ctx, t, s, node, zoneKey, zone)
	class := "efs-sc-one-zone"
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	newClass(ctx, t, s, class, map[string]string{"provisioningMode": "efs-ap", "directoryPerms": "700",
		"fileSystemId": fsID, "enforceZoneAffinity": "true"}, &wffc)
	ns := newNamespace(ctx, t, s, "e2e-one-zone")
	// What the scheduler writes once it picked a node for the claim's pod.
	pv := ns.boundClaim(ctx, t, "zonal", class, map[string]string{"volume.kubernetes.io/selected-node": node})
	if !nodeAffinityIs(pv, zoneKey, zone) {
		t.Errorf("PV %s nodeAffinity %+v, want %s In [%s]", pv.Name, pv.Spec.NodeAffinity, zoneKey, zone)
	}

	ns.deleteAll(ctx, t)
	waitFor(ctx, t, "the One Zone file system's access point deleted", func() (bool, error) {
		out, err := efsc.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsID)})
		return err == nil && len(out.AccessPoints) == 0, err
	})
	waitNoLeaks(ctx, t, s, efsc)
	st.checkAlive()
}

// nodeAffinityIs: the PV's required node affinity is exactly key In [value].
func nodeAffinityIs(pv *corev1.PersistentVolume, key, value string) bool {
	na := pv.Spec.NodeAffinity
	if na == nil || na.Required == nil || len(na.Required.NodeSelectorTerms) != 1 {
		return false
	}
	exprs := na.Required.NodeSelectorTerms[0].MatchExpressions
	return len(exprs) == 1 && exprs[0].Key == key && exprs[0].Operator == corev1.NodeSelectorOpIn &&
		slices.Equal(exprs[0].Values, []string{value})
}

// registerZonalNode makes Node node labelled zoneKey=zone and its CSINode with the
// driver and that topology key, as the kubelet registers them for a node plugin whose
// NodeGetInfo reports the zone; the test's cleanup deletes them.
func registerZonalNode(ctx context.Context, t *testing.T, s *suite, node, zoneKey, zone string) {
	t.Helper()
	kc := s.cluster.Client
	if _, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{zoneKey: zone}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{
			Name: "efs.csi.aws.com", NodeID: node, TopologyKeys: []string{zoneKey}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		_ = kc.StorageV1().CSINodes().Delete(bg, node, metav1.DeleteOptions{})
		_ = kc.CoreV1().Nodes().Delete(bg, node, metav1.DeleteOptions{})
	})
}
