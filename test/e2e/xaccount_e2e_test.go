//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The other account of the cross-account scenario: its file system, the role the
// controller assumes there, and a static key of that account for the test's own reads.
const (
	otherAccount    = "210987654321"
	otherFileSystem = "fs-0aaaaaaaaaaaaaaa1"
	otherRole       = "arn:aws:iam::" + otherAccount + ":role/efs-csi-cross-account"
	otherExternalID = "e2e-external-id"
	otherKey        = "AKIDOTHERACCOUNT"
)

// A StorageClass whose provisioner Secret (upstream's x-account in the release
// namespace, which the chart grants csi-provisioner) names another account's role:
// the claim is provisioned in that account through the emulator's STS, its PV tells
// the node every zone's mount target (mounttargetipmap), and the delete, which gets
// the same Secret, removes the access point there. The emulator refuses the other
// account's file system to the controller's own credentials, so a volume made or
// deleted without the role fails instead of passing.
func TestCrossAccountClaimIsProvisionedAsTheRole(t *testing.T) {
	s := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st := newControllerStack(ctx, t, s, s.policy(crossAccountPolicy), "--role="+otherRole+"#"+otherExternalID,
		"--file-system-owner="+otherFileSystem+"="+otherAccount, "--access-key="+otherKey+"="+otherAccount)
	st.addReplica(ctx, replicaSpec{bins: s.bins, deployment: st.deployment, leaderElection: true})
	other := efs.New(efs.Options{Region: "us-east-1", BaseEndpoint: aws.String(st.endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: otherKey, SecretAccessKey: "x"}, nil
		})})
	if _, err := s.cluster.Client.CoreV1().Secrets(releaseNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "x-account", Namespace: releaseNamespace},
		StringData: map[string]string{"awsRoleArn": otherRole, "externalId": otherExternalID},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.cluster.Client.CoreV1().Secrets(releaseNamespace).Delete(context.Background(), "x-account", metav1.DeleteOptions{})
	})
	class := "efs-sc-cross-account"
	newClass(ctx, t, s, class, map[string]string{"provisioningMode": "efs-ap", "fileSystemId": otherFileSystem, "directoryPerms": "700",
		"csi.storage.k8s.io/provisioner-secret-name":      "x-account",
		"csi.storage.k8s.io/provisioner-secret-namespace": releaseNamespace}, nil)
	ns := newNamespace(ctx, t, s, "e2e-cross-account")
	pv := ns.boundClaim(ctx, t, "other-account", class, nil)
	if h := pv.Spec.CSI.VolumeHandle; !strings.Contains(h, otherFileSystem+"::fsap-") {
		t.Errorf("volume %s is not on the other account's file system %s", h, otherFileSystem)
	}
	var ips map[string]string
	if err := json.Unmarshal([]byte(pv.Spec.CSI.VolumeAttributes["mounttargetipmap"]), &ips); err != nil || len(ips) == 0 {
		t.Errorf("PV volume attributes %v: want mounttargetipmap of the other account's mount targets", pv.Spec.CSI.VolumeAttributes)
	}
	if aps, err := accessPointsOf(ctx, other, otherFileSystem); err != nil || len(aps) != 1 {
		t.Fatalf("the other account holds %d access points (%v), want 1", len(aps), err)
	}
	ns.deleteAll(ctx, t)
	waitFor(ctx, t, "the cross-account access point deleted", func() (bool, error) {
		aps, err := accessPointsOf(ctx, other, otherFileSystem)
		return len(aps) == 0, err
	})
	waitNoLeaks(ctx, t, s, efsClient(st.endpoint))
	st.checkAlive()
}
