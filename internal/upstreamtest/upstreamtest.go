// Package upstreamtest makes access points through the EFS API exactly as
// the upstream driver's controller (kubernetes-sigs/aws-efs-csi-driver
// v3.4.1) does, for the tests that prove this driver takes over its volumes.
package upstreamtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	sdk "github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/efs/types"
)

// Volume is an access point as upstream's CreateVolume makes it: client
// token the volume name, or with reuseAccessPoint the hex sha256 of the
// claim name; root basePath/<volume name> or the subPathPattern's
// expansion, with ensureUniqueDirectory "-" and a random UUID appended;
// uid = gid from its range (default 50000..60000); directoryPerms as
// CreationInfo; the tags efs.csi.aws.com/cluster=true and --tags, nothing
// else.
type Volume struct {
	Name  string // the CreateVolume name (PV name); "" for reuseAccessPoint
	Token string
	Path  string
	GID   int64
}

// UUID is a random version-4 UUID, as a claim's UID.
func UUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// SHA256 is upstream's reuseAccessPoint token of a claim name.
func SHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// PVName is a volume name as external-provisioner makes it.
func PVName() string { return "pvc-" + UUID() }

// Volumes are the shapes of upstream's StorageClasses, one each.
func Volumes() map[string]Volume {
	old, base, pattern := PVName(), PVName(), PVName()
	return map[string]Volume{
		"an old release's /<pv name>":                  {old, old, "/" + old, 50000},
		"basePath and ensureUniqueDirectory":           {base, base, "/dynamic_provisioning/" + base + "-" + UUID(), 50001},
		"subPathPattern namespace/name, unique suffix": {pattern, pattern, "/dynamic_provisioning/team-a/data-" + UUID(), 50002},
		"reuseAccessPoint without unique suffix":       {"", SHA256("logs"), "/dynamic_provisioning/team-a/logs", 50003},
	}
}

// Client is a bare SDK client, as upstream's controller uses.
func Client(url string) *sdk.Client {
	return sdk.New(sdk.Options{Region: "us-east-1", BaseEndpoint: aws.String(url),
		Credentials: credentials.NewStaticCredentialsProvider("upstream", "upstream", "")})
}

// Create makes v's access point on fsID as upstream's controller does, with
// the user's --tags "team:storage", and returns its ID.
func Create(t testing.TB, c *sdk.Client, fsID string, v Volume) string {
	t.Helper()
	out, err := c.CreateAccessPoint(context.Background(), &sdk.CreateAccessPointInput{
		ClientToken:  aws.String(v.Token),
		FileSystemId: aws.String(fsID),
		PosixUser:    &types.PosixUser{Uid: aws.Int64(v.GID), Gid: aws.Int64(v.GID)},
		RootDirectory: &types.RootDirectory{Path: aws.String(v.Path), CreationInfo: &types.CreationInfo{
			OwnerUid: aws.Int64(v.GID), OwnerGid: aws.Int64(v.GID), Permissions: aws.String("700")}},
		Tags: []types.Tag{
			{Key: aws.String("efs.csi.aws.com/cluster"), Value: aws.String("true")},
			{Key: aws.String("team"), Value: aws.String("storage")},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.AccessPointId)
}
