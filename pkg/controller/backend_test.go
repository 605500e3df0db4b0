package controller

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdkefs "github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
)

const otherFS = "fs-0aaaaaaaaaaaaaaa1" // in the other account

// otherAccount is a second emulator standing for another account, reached
// through a role: the Backends a test gives the controller. Opens counts
// what the controller opened, by backend.
type otherAccount struct {
	client *efs.Client
	mu     sync.Mutex
	opens  map[Backend]int
	ips    map[string]string // zone -> mount target IP
}

func (o *otherAccount) Open(_ context.Context, b Backend) (EFS, FileSystemMounter, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.opens[b]++
	if b.API != APIEFS {
		return nil, nil, ErrNotSupported
	}
	return o.client, nil, nil
}

// newOtherAccount starts the other account's emulator with a mount target
// in each of two zones.
func newOtherAccount(t *testing.T) *otherAccount {
	t.Helper()
	url, _ := emulatortest.Start(t, emulator.Config{FileSystems: []string{otherFS}})
	client, err := efs.New(context.Background(), efs.Config{Region: "us-east-1", Endpoint: url, RateLimits: unlimited, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	raw := sdkefs.New(sdkefs.Options{Region: "us-east-1", BaseEndpoint: aws.String(url), Credentials: aws.AnonymousCredentials{}})
	o := &otherAccount{client: client, opens: map[Backend]int{}, ips: map[string]string{}}
	for i, ip := range []string{"10.0.1.10", "10.0.2.10"} {
		if _, err := raw.CreateMountTarget(context.Background(), &sdkefs.CreateMountTargetInput{
			FileSystemId: aws.String(otherFS), SubnetId: aws.String("subnet-" + string(rune('a'+i))), IpAddress: aws.String(ip)}); err != nil {
			t.Fatal(err)
		}
	}
	// Every mount target, the one the emulator seeds the file system with too.
	mts, err := client.DescribeMountTargets(context.Background(), otherFS)
	if err != nil {
		t.Fatal(err)
	}
	for _, mt := range mts {
		o.ips[mt.AvailabilityZoneName] = mt.IPAddress
	}
	return o
}

func (o *otherAccount) accessPoints(t *testing.T) []efs.AccessPoint {
	t.Helper()
	aps, err := efs.Collect(context.Background(), o.client.ListAccessPoints, otherFS)
	if err != nil {
		t.Fatal(err)
	}
	return aps
}

var role = map[string]string{SecretRoleARN: "arn:aws:iam::210987654321:role/efs-csi", SecretExternalID: "ext-1"}

func withSecrets(r *csi.CreateVolumeRequest, secrets map[string]string) *csi.CreateVolumeRequest {
	r.Secrets = secrets
	return r
}

// A class whose provisioner secret names a role is provisioned, and
// deleted, in that role's account: nothing is created in the controller's
// own, the volume context says how the node reaches the other account's
// mount targets, and a delete without the secret is an error, not an OK over
// a leaked access point.
func TestARoleSecretProvisionsAndDeletesInTheRolesAccount(t *testing.T) {
	b := newBed(t)
	other := newOtherAccount(t)
	b.svc.backends = other
	otherParams := func(extra ...string) map[string]string {
		p := params(extra...)
		p["fileSystemId"] = otherFS
		return p
	}
	zones := make([]string, 0, len(other.ips))
	for z := range other.ips {
		zones = append(zones, z)
	}
	cases := []struct {
		name    string
		secrets map[string]string
		params  map[string]string
		check   func(t *testing.T, volCtx map[string]string)
	}{
		{"role: every zone's mount target", role, otherParams(), func(t *testing.T, vc map[string]string) {
			var m map[string]string
			if err := json.Unmarshal([]byte(vc[CtxMountTargetIPMap]), &m); err != nil || len(vc) != 1 {
				t.Fatalf("volume context %v: want only %s (%v)", vc, CtxMountTargetIPMap, err)
			}
			for z, ip := range other.ips {
				if m[z] != ip {
					t.Errorf("%s: zone %s maps to %q, want %q", CtxMountTargetIPMap, z, m[z], ip)
				}
			}
		}},
		{"role and az: that zone's mount target", role, otherParams("az", zones[1]), func(t *testing.T, vc map[string]string) {
			if len(vc) != 1 || vc[CtxMountTargetIP] != other.ips[zones[1]] {
				t.Errorf("volume context %v, want %s=%s", vc, CtxMountTargetIP, other.ips[zones[1]])
			}
		}},
		{"role and an az without mount target: another zone's", role, otherParams("az", "us-east-1z"), func(t *testing.T, vc map[string]string) {
			ip := vc[CtxMountTargetIP]
			if len(vc) != 1 || !slices.Contains(slices.Collect(maps.Values(other.ips)), ip) {
				t.Errorf("volume context %v, want %s of some zone", vc, CtxMountTargetIP)
			}
		}},
		{"role and crossaccount: no IP", map[string]string{SecretRoleARN: role[SecretRoleARN], SecretCrossAccount: "true"}, otherParams(),
			func(t *testing.T, vc map[string]string) {
				if len(vc) != 1 || vc[CtxCrossAccount] != "true" {
					t.Errorf("volume context %v, want only %s=true", vc, CtxCrossAccount)
				}
			}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := "pvc-role-" + string(rune('a'+i))
			resp, err := b.svc.CreateVolume(b.ctx(), withSecrets(createReq(name, 1<<30, c.params), c.secrets))
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, resp.GetVolume().GetVolumeContext())
			volID := resp.GetVolume().GetVolumeId()
			if !strings.HasPrefix(volID, "efs:"+otherFS+"::") {
				t.Fatalf("volume ID %s, want one on %s", volID, otherFS)
			}
			if got := other.accessPoints(t); len(got) != 1 {
				t.Fatalf("other account holds %d access points, want 1", len(got))
			}
			b.wantAccessPoints(0)

			_, err = b.svc.DeleteVolume(b.ctx(), &csi.DeleteVolumeRequest{VolumeId: volID})
			if !errors.Is(err, ErrNotReachable) {
				t.Errorf("DeleteVolume without the secret: %v, want ErrNotReachable", err)
			}
			if got := other.accessPoints(t); len(got) != 1 {
				t.Fatalf("after a delete without the secret the other account holds %d access points, want 1", len(got))
			}
			if _, err := b.svc.DeleteVolume(b.ctx(), &csi.DeleteVolumeRequest{VolumeId: volID, Secrets: c.secrets}); err != nil {
				t.Fatalf("DeleteVolume with the secret: %v", err)
			}
			if got := other.accessPoints(t); len(got) != 0 {
				t.Fatalf("after the delete the other account holds %d access points", len(got))
			}
		})
	}
	other.mu.Lock()
	defer other.mu.Unlock()
	for bk, n := range other.opens {
		if n != 1 {
			t.Errorf("backend %s opened %d times, want once", bk, n)
		}
	}
	if len(other.opens) != 2 {
		t.Errorf("%d backends opened, want 2 (with and without the external ID): %v", len(other.opens), other.opens)
	}
}

// Secrets that cannot name a backend are INVALID_ARGUMENT before any call;
// a backend no client serves is ErrNotSupported. Values are not repeated.
func TestBackendSecretsAreValidated(t *testing.T) {
	b := newBed(t)
	cases := []struct {
		name    string
		secrets map[string]string
		want    error
		// onDelete: DeleteVolume reads this secret too (crossaccount
		// only shapes a new volume's context).
		onDelete bool
	}{
		{"not a role ARN", map[string]string{SecretRoleARN: "arn:aws:iam::12:user/x"}, ErrInvalidRequest, true},
		{"external ID without a role", map[string]string{SecretExternalID: "abc"}, ErrInvalidRequest, true},
		{"external ID with a newline", map[string]string{SecretRoleARN: role[SecretRoleARN], SecretExternalID: "a\nb"}, ErrInvalidRequest, true},
		{"crossaccount not a boolean", map[string]string{SecretCrossAccount: "yes please"}, ErrInvalidRequest, false},
		{"a role and no client for other accounts", role, ErrNotSupported, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := b.svc.CreateVolume(b.ctx(), withSecrets(createReq("pvc-bad", 1<<30, params()), c.secrets))
			if !errors.Is(err, c.want) {
				t.Fatalf("CreateVolume: %v, want %v", err, c.want)
			}
			for k, v := range c.secrets {
				// The role ARN is named (it says which account); the
				// external ID and the rest never are.
				if k != SecretRoleARN && len(v) > 3 && strings.Contains(err.Error(), v) {
					t.Errorf("error %q repeats a secret value", err)
				}
			}
			_, err = b.svc.DeleteVolume(b.ctx(), &csi.DeleteVolumeRequest{VolumeId: "efs:" + testFS + "::fsap-0123456789abcdef0", Secrets: c.secrets})
			if c.onDelete && !errors.Is(err, c.want) {
				t.Errorf("DeleteVolume: %v, want %v", err, c.want)
			}
		})
	}
	if n := b.emu.Counts()[emulator.OpCreateAccessPoint]; n != 0 {
		t.Errorf("%d CreateAccessPoint requests reached EFS", n)
	}
}

// Every backend's Service shares one lock table: a create of a name in
// flight through one backend makes a call on the same name through another
// ABORTED, so a create and a delete of one volume exclude each other
// whatever credentials each came with.
func TestBackendsShareOneLockTable(t *testing.T) {
	b := newBed(t)
	other := newOtherAccount(t)
	b.svc.backends = other
	p := params()
	p["fileSystemId"] = otherFS
	g := newGate()
	svc, err := b.svc.backend(b.ctx(), Backend{RoleARN: role[SecretRoleARN], ExternalID: role[SecretExternalID]})
	if err != nil {
		t.Fatal(err)
	}
	hook := &hookEFS{EFS: other.client}
	hook.set("CreateAccessPoint", g.hold, nil)
	svc.efs = hook
	done := async(func() error {
		_, err := b.svc.CreateVolume(b.ctx(), withSecrets(createReq("pvc-shared", 1<<30, p), role))
		return err
	})
	<-g.arrived
	if _, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-shared", 1<<30, params())); !errors.Is(err, keylock.ErrBusy) {
		t.Errorf("a create of the same name through the default backend: %v, want ErrBusy", err)
	}
	g.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := b.svc.LocksHeld(); n != 0 {
		t.Errorf("%d locks held at rest", n)
	}
}

// FuzzProvisionerSecrets: whatever the secrets hold, choosing a backend does
// not panic, accepts only a role ARN and an external ID STS would take (the
// ID only with a role), and never repeats the external ID or the
// crossaccount value in its error.
func FuzzProvisionerSecrets(f *testing.F) {
	for _, s := range [][3]string{
		{role[SecretRoleARN], role[SecretExternalID], "true"},
		{"arn:aws-us-gov:iam::123456789012:role/a/b", "", "false"},
		{"arn:aws:iam::12:role/x", "e", "yes"},
		{"", "only-external", ""},
		{"arn:aws:iam::123456789012:role/\x00", "a\nb", "TRUE"},
	} {
		f.Add(s[0], s[1], s[2], true, true, true)
	}
	f.Fuzz(func(t *testing.T, roleARN, ext, cross string, hasRole, hasExt, hasCross bool) {
		secrets := map[string]string{}
		if hasRole {
			secrets[SecretRoleARN] = roleARN
		}
		if hasExt {
			secrets[SecretExternalID] = ext
		}
		if hasCross {
			secrets[SecretCrossAccount] = cross
		}
		b, err := secretsBackend(APIEFS, secrets)
		if err == nil {
			if hasRole && (!efs.ValidRoleARN(b.RoleARN) || b.RoleARN != roleARN) {
				t.Fatalf("accepted role %q", roleARN)
			}
			if hasExt && (!hasRole || len(ext) < 2 || len(ext) > 1224 || strings.ContainsFunc(ext, func(r rune) bool { return r < ' ' || r > '~' })) {
				t.Fatalf("accepted external ID %q (role %v)", ext, hasRole)
			}
		} else if !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("error %v is not ErrInvalidRequest", err)
		} else if hasExt && len(ext) > 3 && strings.Contains(err.Error(), ext) {
			t.Fatalf("error %q repeats the external ID", err)
		}
		_, err = crossAccountMode(secrets)
		if err != nil && len(cross) > 3 && strings.Contains(err.Error(), cross) {
			t.Fatalf("error %q repeats the crossaccount value", err)
		}
	})
}

// ListVolumes of a controller that never served an S3 Files volume does not
// open the S3 Files backend: an EFS-only cluster's listing must not depend
// on an API its credentials may not call or its region may not serve.
func TestListVolumesOpensNoBackend(t *testing.T) {
	b := newBed(t)
	other := newOtherAccount(t)
	svc, err := New(Config{EFS: b.client, Backends: other, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := svc.CreateVolume(b.ctx(), createReq("pvc-listed", 1<<30, params()))
	if err != nil {
		t.Fatal(err)
	}
	id := c.GetVolume().GetVolumeId()
	r, err := svc.ListVolumes(b.ctx(), &csi.ListVolumesRequest{})
	if err != nil || len(r.GetEntries()) != 1 || r.GetEntries()[0].GetVolume().GetVolumeId() != id {
		t.Fatalf("ListVolumes: %v, %v; want only %s", r, err, id)
	}
	other.mu.Lock()
	defer other.mu.Unlock()
	if len(other.opens) != 0 {
		t.Errorf("ListVolumes opened backends %v", other.opens)
	}
}
