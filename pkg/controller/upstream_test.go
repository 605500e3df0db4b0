package controller

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/efs-csi/efs-csi-driver/internal/upstreamtest"
	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
)

// TestDeleteRemovesTheRootOfUpstreamAccessPoints: with root removal on, an
// access point the upstream driver provisioned is deleted with its data,
// whatever its class's shape, and nothing else is touched: not the base
// path, not the namespace directory, not another volume's data.
func TestDeleteRemovesTheRootOfUpstreamAccessPoints(t *testing.T) {
	for name, v := range upstreamtest.Volumes() {
		t.Run(name, func(t *testing.T) {
			r := newRootBed(t)
			apID := upstreamtest.Create(t, upstreamtest.Client(r.url), testFS, v)
			ours := r.mustCreate("pvc-ours")
			write(t, filepath.Join(r.inFS(v.Path), "a/b/data"), "x")
			write(t, filepath.Join(r.rootOf(ours), "data"), "ours")
			write(t, r.inFS("/dynamic_provisioning/team-a/other-volume/data"), "released, kept")
			for _, id := range []string{testFS + "::" + apID, "efs:" + testFS + "::" + apID} {
				if err := r.delete(id); err != nil { // the second: a retry, gone already
					t.Fatalf("DeleteVolume(%s): %v", id, err)
				}
			}
			if _, err := os.Stat(r.inFS(v.Path)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("root directory %s still there: %v", v.Path, err)
			}
			for _, p := range []string{filepath.Join(r.rootOf(ours), "data"), r.inFS("/dynamic_provisioning/team-a/other-volume/data")} {
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%s: %v", p, err)
				}
			}
			if aps := r.wantAccessPoints(1); aps[0].ID != apOf(t, ours) {
				t.Errorf("left %v, want only %s", aps, ours)
			}
		})
	}
}

// TestDeleteOfUpstreamAccessPointLocksItsVolumeName: the volume name of an
// upstream access point is its client token; a CreateVolume of that name
// in flight makes the delete ABORTED, as for this driver's own volumes,
// with root removal on or off.
func TestDeleteOfUpstreamAccessPointLocksItsVolumeName(t *testing.T) {
	for _, delRoot := range []bool{false, true} {
		t.Run(fmt.Sprintf("delete-access-point-root-dir=%v", delRoot), func(t *testing.T) {
			var b *bed
			if delRoot {
				b = newRootBed(t).bed
			} else {
				b = newBed(t)
			}
			pv := upstreamtest.PVName()
			apID := upstreamtest.Create(t, upstreamtest.Client(b.url), testFS, upstreamtest.Volume{Name: pv, Token: pv, Path: "/" + pv, GID: 50000})
			g := newGate()
			// The create adopts upstream's access point: it describes it,
			// and sends nothing under its token. Its first Describe waits.
			var held atomic.Bool
			b.hook.set("DescribeAccessPoint", func(arg any) {
				if !held.Swap(true) {
					g.hold(arg)
				}
			}, nil)
			created := async(func() error { _, err := b.create(pv); return err })
			<-g.arrived
			if err := b.delete("efs:" + testFS + "::" + apID); !errors.Is(err, keylock.ErrBusy) {
				t.Errorf("delete during a create of its volume name: %v, want ErrBusy", err)
			}
			g.open()
			<-created // adopting or refusing upstream's access point: either way, done
			if err := b.delete("efs:" + testFS + "::" + apID); err != nil {
				t.Fatal(err)
			}
			b.wantAccessPoints(0)
		})
	}
}

// TestDeleteOfAnAccessPointNoCSIDriverMadeKeepsItsData: an access point
// without the marks of a CSI driver (made by hand, by Terraform, or tagged
// for IAM by an operator) is deleted, as without root removal, but its
// directory is kept and counted: whose data it holds is unknown, and a
// volume stuck in FAILED_PRECONDITION forever helps nobody.
func TestDeleteOfAnAccessPointNoCSIDriverMadeKeepsItsData(t *testing.T) {
	for name, in := range map[string]efs.CreateAccessPointInput{
		"no tags, a CLI's UUID token": {ClientToken: upstreamtest.UUID(), Path: "/shared/app"},
		"cluster tag, a token that is no volume name": {ClientToken: "terraform-app", Path: "/shared/app",
			Tags: map[string]string{TagCluster: "true"}},
		"a volume-name token, but no cluster tag": {ClientToken: "pvc-" + upstreamtest.UUID(), Path: "/shared/app"},
		"cluster tag false":                       {ClientToken: "pvc-" + upstreamtest.UUID(), Path: "/shared/app", Tags: map[string]string{TagCluster: "false"}},
		"an upper-case hash token":                {ClientToken: "A" + upstreamtest.SHA256("x")[1:], Path: "/shared/app", Tags: map[string]string{TagCluster: "true"}},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRootBed(t)
			in.FileSystemID, in.PosixUser = testFS, &efs.PosixUser{UID: 1000, GID: 1000}
			ap, err := r.client.CreateAccessPoint(r.ctx(), in)
			must(t, err)
			write(t, filepath.Join(r.inFS(in.Path), "data"), "someone's")
			if err := r.delete("efs:" + testFS + "::" + ap.ID); err != nil {
				t.Fatalf("delete: %v", err)
			}
			r.wantAccessPoints(0)
			if b, err := os.ReadFile(filepath.Join(r.inFS(in.Path), "data")); err != nil || string(b) != "someone's" {
				t.Errorf("data of an access point no CSI driver made: %q, %v", b, err)
			}
			if n := r.svc.RootDirsNotOwned(); n != 1 {
				t.Errorf("RootDirsNotOwned() = %d, want 1", n)
			}
			if len(r.mounter.targets) != 0 {
				t.Errorf("the file system was mounted for a directory that is kept: %v", r.mounter.targets)
			}
		})
	}
}

// TestUpstreamAccessPointsGetTheSafetyChecks: the checks of this driver's
// own access points hold for upstream's, which carry no base-path tag: the
// file system root is refused (FAILED_PRECONDITION, the access point kept),
// and a root that another live access point's root equals, contains or lies
// in is kept while the access point goes.
func TestUpstreamAccessPointsGetTheSafetyChecks(t *testing.T) {
	pv := upstreamtest.PVName
	for _, tc := range []struct {
		name  string
		path  string
		other string // root of another live access point, "" none
		err   error
	}{
		{name: "the file system root", path: "/", err: ErrUnsafeRootDir},
		{name: "the base path of another live volume", path: "/dynamic_provisioning", other: "/dynamic_provisioning/" + pv()},
		{name: "inside another live access point", path: "/shared/" + pv(), other: "/shared"},
		{name: "the same directory as a live one", path: "/data", other: "/data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRootBed(t)
			c := upstreamtest.Client(r.url)
			apID := upstreamtest.Create(t, c, testFS, upstreamtest.Volume{Token: pv(), Path: tc.path, GID: 50000})
			if tc.other != "" {
				upstreamtest.Create(t, c, testFS, upstreamtest.Volume{Token: pv(), Path: tc.other, GID: 50001})
			}
			marker := filepath.Join(r.inFS(tc.path), "precious")
			write(t, marker, "x")
			err := r.delete("efs:" + testFS + "::" + apID)
			if !errors.Is(err, tc.err) {
				t.Fatalf("delete: %v, want %v", err, tc.err)
			}
			if _, serr := os.Stat(marker); serr != nil {
				t.Errorf("data removed: %v", serr)
			}
			want := 0 // the other access point lives; a refused one is kept
			if tc.other != "" {
				want++
			}
			if tc.err != nil {
				want++
			}
			r.wantAccessPoints(want)
		})
	}
}

// TestProvenance: who made an access point, told from what it carries.
func TestProvenance(t *testing.T) {
	uuid := upstreamtest.UUID()
	for _, tc := range []struct {
		name  string
		token string
		tags  map[string]string
		csi   bool
		lock  string // a volume name DeleteVolume must lock
	}{
		{"ours, by its name tag", "anything", map[string]string{TagCluster: "true", TagVolumeName: "sanity-1"}, true, "sanity-1"},
		{"ours, a hashed token", upstreamtest.SHA256("x"), map[string]string{TagCluster: "true", TagVolumeName: "pvc-1"}, true, "pvc-1"},
		{"upstream, the volume name as token", "pvc-" + uuid, map[string]string{TagCluster: "true", "team": "x"}, true, "pvc-" + uuid},
		{"upstream, another provisioner prefix", "vol-" + uuid, map[string]string{TagCluster: "true"}, true, "vol-" + uuid},
		{"upstream reuseAccessPoint, a claim-name hash", upstreamtest.SHA256("data"), map[string]string{TagCluster: "true"}, true, ""},
		{"no tag, no root directory of that name", "pvc-" + uuid, nil, false, "pvc-" + uuid},
		{"cluster tag not true", "pvc-" + uuid, map[string]string{TagCluster: "True "}, false, ""},
		{"a bare UUID token (the AWS CLI's)", uuid, map[string]string{TagCluster: "true"}, false, ""},
		{"a volume name with an upper-case UUID", "pvc-" + "ABCDEF01" + uuid[8:], map[string]string{TagCluster: "true"}, false, ""},
		{"a volume name with a truncated UUID", "pvc-" + uuid[:20], map[string]string{TagCluster: "true"}, false, ""},
		{"a 63-character hash", upstreamtest.SHA256("x")[1:], map[string]string{TagCluster: "true"}, false, ""},
		{"a prefix with a slash", "a/b-" + uuid, map[string]string{TagCluster: "true"}, false, ""},
		{"an empty token", "", map[string]string{TagCluster: "true"}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := core.ProvenanceOf(&efs.AccessPoint{ClientToken: tc.token, Tags: tc.tags}, nil)
			if p.CSI != tc.csi || tc.lock != "" && !slices.Contains(p.Locks, core.NameKey(tc.lock)) {
				t.Errorf("provenanceOf = %+v, want csi=%v and the name %q locked", p, tc.csi, tc.lock)
			}
		})
	}
}
