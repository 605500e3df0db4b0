//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	efstypes "github.com/aws/aws-sdk-go-v2/service/efs/types"
)

// The driver's tags and GID tokens, as an access point carries them (this module tests
// the binaries from outside).
const (
	tagCluster    = "efs.csi.aws.com/cluster"
	tagClusterID  = "efs.csi.aws.com/cluster-id"
	tagVolumeName = "efs.csi.aws.com/volume-name"
	tagRecordLife = "efs.csi.aws.com/record-life"
)

func gidToken(fsID string, gid int64) string { return fmt.Sprintf("csi-gid:%s:%d", fsID, gid) }

// The chart's controller, its record in Leases on a real kube-apiserver, sweeps
// what a duplicate create killed after its volume's delete leaves: an access point
// with this cluster's tags and a record life that no record names
// (docs/design.md, "Access points no record names"). It leaves every other writer's:
// another cluster's, and one without a record life (upstream's, an earlier
// release's). Two such access points are planted one after the other: the second is
// swept in a round that began after the first was gone, so that round passed over the
// others too.
func TestCollectorSweepsOnlyThisClustersUnrecordedAccessPoints(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The sweep's proof is the descriptive tags (docs/iam.md).
	st := startControllerStack(ctx, t, s, stackOptions{replicas: 1, leaderElection: true, driverArgs: []string{"--descriptive-tags"},
		emulatorArgs: []string{s.policy(controllerPolicy)}})
	ns := newNamespace(ctx, t, s, "e2e-sweep")
	efsc := efsClient(st.endpoint)
	name := func(i int) string { return fmt.Sprintf("s-%03d", i) }
	ns.create(ctx, t, 1, name)
	ns.waitLive(ctx, t, 1)
	aps, err := accessPoints(ctx, efsc)
	if err != nil || len(aps) != 1 {
		t.Fatalf("%d access points (%v), want the claim's", len(aps), err)
	}
	cluster := tagMap(aps[0].Tags)[tagClusterID]
	if cluster == "" {
		t.Fatal("the controller wrote no cluster ID: the sweep needs one")
	}
	live := aws.ToString(aps[0].AccessPointId)

	old := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	plant := func(gid int64, tags map[string]string) string {
		t.Helper()
		var ts []efstypes.Tag
		for k, v := range tags {
			ts = append(ts, efstypes.Tag{Key: aws.String(k), Value: aws.String(v)})
		}
		out, err := efsc.CreateAccessPoint(ctx, &efs.CreateAccessPointInput{
			ClientToken:  aws.String(gidToken(fileSystemID, gid)),
			FileSystemId: aws.String(fileSystemID),
			PosixUser:    &efstypes.PosixUser{Uid: aws.Int64(gid), Gid: aws.Int64(gid)},
			RootDirectory: &efstypes.RootDirectory{Path: aws.String(fmt.Sprintf("/planted-%d", gid)), CreationInfo: &efstypes.CreationInfo{
				OwnerUid: aws.Int64(gid), OwnerGid: aws.Int64(gid), Permissions: aws.String("700")}},
			Tags: ts,
		})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.AccessPointId)
	}
	ours := func(volumeName string) map[string]string {
		return map[string]string{tagCluster: "true", tagClusterID: cluster,
			tagVolumeName: volumeName, tagRecordLife: old}
	}
	theirs := ours("pvc-theirs")
	theirs[tagClusterID] = "another-cluster"
	noLife := ours("pvc-no-life")
	delete(noLife, tagRecordLife)
	kept := []string{plant(55001, theirs), plant(55002, noLife)}

	gone := func(id string) func() (bool, error) {
		return func() (bool, error) {
			all, err := accessPoints(ctx, efsc)
			for _, ap := range all {
				if aws.ToString(ap.AccessPointId) == id {
					return false, err
				}
			}
			return true, err
		}
	}
	waitFor(ctx, t, "the first unrecorded access point swept", gone(plant(55003, ours("pvc-ghost-1"))))
	waitFor(ctx, t, "the second unrecorded access point swept", gone(plant(55004, ours("pvc-ghost-2"))))

	all, err := accessPoints(ctx, efsc)
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	for _, ap := range all {
		left[aws.ToString(ap.AccessPointId)] = true
	}
	for _, id := range append(kept, live) {
		if !left[id] {
			t.Errorf("access point %s was deleted: only this cluster's unrecorded ones may be", id)
		}
	}
	if len(all) != 3 {
		t.Errorf("%d access points left, want the claim's and the two other writers'", len(all))
	}
	ns.deleteAll(ctx, t)
	for _, id := range kept {
		if _, err := efsc.DeleteAccessPoint(ctx, &efs.DeleteAccessPointInput{AccessPointId: aws.String(id)}); err != nil {
			t.Error(err)
		}
	}
	waitNoLeaks(ctx, t, s, efsc)
	st.checkAlive()
}
