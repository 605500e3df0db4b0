package controller

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/internal/upstreamtest"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// untagged is a class with enableTagging "false".
func untagged(extra ...string) map[string]string {
	return params(append([]string{"enableTagging", "false"}, extra...)...)
}

// An untagged class sends no tag at all (not even the cluster tag upstream's
// IAM policies test), and a retry after a lost answer sends exactly what the
// first attempt sent, so it finds that attempt's access point by its token.
func TestUntaggedClassSendsNoTagsAndTheSameInputOnRetry(t *testing.T) {
	for _, tc := range []struct {
		name  string
		class map[string]string
	}{
		{"default", untagged()},
		{"subPathPattern with unique suffix", untagged("subPathPattern", "${.PVC.namespace}/${.PVC.name}",
			"csi.storage.k8s.io/pvc/name", "data", "csi.storage.k8s.io/pvc/namespace", "team-a")},
		{"reuseAccessPoint", untagged("reuseAccessPoint", "true", "csi.storage.k8s.io/pvc/name", "data")},
		{"fixed uid and gid", untagged("uid", "1000", "gid", "1000")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			b := newBed(t, func(c *Config) { c.ClusterID, c.Now = "this-cluster", clk.Now })
			loseFirstAnswer(b)
			name := upstreamtest.PVName()
			if _, err := b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, tc.class)); !errors.Is(err, efs.ErrUnavailable) {
				t.Fatalf("first attempt: %v, want its answer lost", err)
			}
			r := createSettled(t, b, clk, name, tc.class)
			b.hook.mu.Lock()
			inputs := slices.Clone(b.hook.inputs)
			b.hook.mu.Unlock()
			// The retry after the unknown outcome sends exactly what the
			// first attempt sent. The ones after it (waiting until the
			// access point found by its token settles) send the same token,
			// directory and tags; their GID, reserved anew once the token's
			// access point is known, is never applied by EFS.
			if len(inputs) < 2 || !reflect.DeepEqual(inputs[0], inputs[1]) {
				t.Errorf("the retry sent other input:\n%+v\n%+v", inputs[0], inputs[1:])
			}
			for _, in := range inputs[1:] {
				if in.ClientToken != inputs[0].ClientToken || in.Path != inputs[0].Path || !reflect.DeepEqual(in.Tags, inputs[0].Tags) {
					t.Errorf("a retry sent other input:\n%+v\n%+v", inputs[0], in)
				}
			}
			for _, in := range inputs {
				if len(in.Tags) != 0 {
					t.Errorf("CreateAccessPoint sent tags %v", in.Tags)
				}
			}
			aps := b.wantAccessPoints(1)
			if aps[0].ID != apOf(t, r.Volume.VolumeId) || len(aps[0].Tags) != 0 {
				t.Errorf("access point %+v, want %s without tags", aps[0], r.Volume.VolumeId)
			}
		})
	}
}

// enableTagging "false" with the controller's --tags is INVALID_ARGUMENT, as
// upstream, before anything is sent; either alone is fine.
func TestUntaggedClassWithControllerTagsIsInvalidArgument(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tagging string
		tags    map[string]string
		invalid bool
	}{
		{"false with --tags", "false", map[string]string{"team": "storage"}, true},
		{"false without --tags", "false", nil, false},
		{"true with --tags", "true", map[string]string{"team": "storage"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBed(t, func(c *Config) { c.Tags = tc.tags })
			_, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-1", 1<<30, params("enableTagging", tc.tagging)))
			if got := errors.Is(err, volume.ErrInvalidParameter); got != tc.invalid || !tc.invalid && err != nil {
				t.Fatalf("CreateVolume: %v, want invalid=%v", err, tc.invalid)
			}
			if sent := len(b.hook.inputs); tc.invalid && sent != 0 {
				t.Errorf("%d CreateAccessPoint calls for an invalid request", sent)
			}
		})
	}
}

// With --delete-access-point-root-dir, the directory of an untagged access
// point is removed only when it is provably the volume's: its record, or
// without one (the upstream driver's) a provisioner's volume name in its
// token and a root directory this driver makes for that name. Otherwise the access point is deleted (no PV stuck for good) and the
// directory kept and counted, as for access points no CSI driver made.
func TestRootRemovalOfUntaggedAccessPoints(t *testing.T) {
	pattern := []string{"subPathPattern", "${.PVC.namespace}/${.PVC.name}",
		"csi.storage.k8s.io/pvc/name", "data", "csi.storage.k8s.io/pvc/namespace", "team-a"}
	byHand := func(token, path string, tags map[string]string) func(t *testing.T, r *rootBed) string {
		return func(t *testing.T, r *rootBed) string {
			ap, err := r.client.CreateAccessPoint(r.ctx(), efs.CreateAccessPointInput{FileSystemID: testFS, ClientToken: token,
				Path: path, Tags: tags, PosixUser: &efs.PosixUser{UID: 50000, GID: 50000}})
			must(t, err)
			return volume.ProvisionedID(testFS, ap.ID)
		}
	}
	ours := func(class map[string]string) func(t *testing.T, r *rootBed) string {
		return func(t *testing.T, r *rootBed) string {
			return r.mustCreateIn(upstreamtest.PVName(), class)
		}
	}
	pv, other := upstreamtest.PVName(), upstreamtest.PVName()
	for _, tc := range []struct {
		name    string
		make    func(t *testing.T, r *rootBed) string
		removed bool
	}{
		{"ours, default class", ours(untagged()), true},
		{"ours, basePath", ours(untagged("basePath", "/dynamic_provisioning")), true},
		{"ours, subPathPattern with unique suffix", ours(untagged(pattern...)), true},
		// The record proves these, whatever their token and directory say.
		{"ours, subPathPattern without unique suffix", ours(untagged(append(pattern, "ensureUniqueDirectory", "false")...)), true},
		{"ours, reuseAccessPoint: the token is a claim hash", ours(untagged("reuseAccessPoint", "true", "csi.storage.k8s.io/pvc/name", "logs")), true},
		{"ours, a name that is no provisioner's (csi-sanity's)", func(t *testing.T, r *rootBed) string { return r.mustCreateIn("sanity-1", untagged()) }, true},
		{"upstream's, a random unique suffix", byHand(pv, "/dynamic_provisioning/"+pv+"-"+upstreamtest.UUID(), nil), false},
		{"by hand, a provisioner-name token, another directory", byHand(pv, "/shared/app", nil), false},
		{"by hand, a provisioner-name token, another volume's directory", byHand(pv, "/"+other, nil), false},
		{"by hand, a console Name tag", byHand(pv, "/"+pv, map[string]string{"Name": "app"}), false},
		{"by hand, a later-generation token of a name, another directory", byHand(pv+"~2", "/shared/app", nil), false},
		// Indistinguishable from this driver's (and upstream's old layout):
		// the residual risk docs/design.md names.
		{"by hand, exactly the token and directory of a volume", byHand(pv, "/"+pv, nil), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRootBed(t)
			volID := tc.make(t, r)
			data := filepath.Join(r.rootOf(volID), "data")
			write(t, data, "x")
			if err := r.delete(volID); err != nil {
				t.Fatalf("delete: %v", err)
			}
			r.wantAccessPoints(0)
			_, err := os.Stat(data)
			if gone := errors.Is(err, os.ErrNotExist); gone != tc.removed {
				t.Errorf("data removed = %v (%v), want %v", gone, err, tc.removed)
			}
			if n, want := r.svc.RootDirsNotOwned(), map[bool]int64{true: 0, false: 1}[tc.removed]; n != want {
				t.Errorf("RootDirsNotOwned() = %d, want %d", n, want)
			}
		})
	}
}

// createSettled retries a create as the provisioner does while it is
// retryable: an untagged access point found by its token, whose creator is
// unknown, is answered once it is settled (settleAfter after it was found).
func createSettled(t *testing.T, b *bed, clk *clock, name string, class map[string]string) *csi.CreateVolumeResponse {
	t.Helper()
	for range 4 {
		r, err := b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, class))
		if err == nil {
			return r
		}
		if !retryable(err) {
			t.Fatalf("create %s: %v", name, err)
		}
		clk.Advance(time.Minute)
	}
	t.Fatalf("create %s: not answered once settled", name)
	return nil
}

func (b *bed) mustCreateIn(name string, class map[string]string) string {
	b.t.Helper()
	r, err := b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, class))
	if err != nil {
		b.t.Fatalf("CreateVolume(%s): %v", name, err)
	}
	return r.Volume.VolumeId
}

// Two controller replicas creating untagged volumes at once, half of the
// names by both: one access point per name, no GID on two access points,
// none tagged. Verification is on (auto and always); without writer tags
// the finder of another's access point waits until it is settled.
func TestTwoWritersOfUntaggedVolumesNeverShareAGID(t *testing.T) {
	for _, mode := range []string{VerifyAuto, VerifyAlways} {
		t.Run(mode, func(t *testing.T) {
			clk := newClock()
			cfg := func(c *Config) { c.GIDVerify, c.Now = mode, clk.Now }
			a := newBed(t, cfg)
			b := newBedOn(t, a.url, a.emu, cfg)
			keepTokens(a, b)
			class := untagged("gidRangeStart", "50000", "gidRangeEnd", "50060")
			names := createFromBoth(t, a, b, clk, 20, class, 2000)
			aps := a.accessPoints()
			if len(aps) != names {
				t.Errorf("%d access points for %d volumes", len(aps), names)
			}
			for _, ap := range aps {
				if len(ap.Tags) != 0 {
					t.Errorf("%s tagged %v", ap.ID, ap.Tags)
				}
			}
			a.wantUniqueIDs(false)
		})
	}
}

// Untagged access points carry no cluster ID: they are outside every
// cluster's scope, and ListVolumes never lists them, with or without a
// cluster ID (the orphan collector's side is in pkg/orphans).
func TestListVolumesNeverListsUntaggedAccessPoints(t *testing.T) {
	for _, id := range []string{"uid-a", ""} {
		t.Run(fmt.Sprintf("cluster ID %q", id), func(t *testing.T) {
			b := newBed(t)
			svc, err := New(Config{EFS: b.client, ClusterID: id, TempDir: t.TempDir()}) // the SDK client lists file systems
			must(t, err)
			b.svc = svc
			tagged := b.mustCreateIn("pvc-tagged", params())
			b.mustCreateIn("pvc-untagged", untagged())
			b.wantAccessPoints(2)
			r, err := b.svc.ListVolumes(b.ctx(), &csi.ListVolumesRequest{})
			must(t, err)
			var got []string
			for _, e := range r.Entries {
				got = append(got, e.Volume.VolumeId)
			}
			if !slices.Equal(got, []string{tagged}) {
				t.Errorf("ListVolumes = %v, want only %s", got, tagged)
			}
		})
	}
}
