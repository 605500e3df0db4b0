package controller

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/internal/upstreamtest"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/keylock"
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

// makeGeneration1 creates name's volume so that its generation 0 yields:
// right after EFS made it, an access point made by hand takes its GID (a
// rival), so the controller makes generation 1 with another GID and deletes
// generation 0. The rival is then removed. b must verify (start-up window).
func makeGeneration1(t *testing.T, b *bed, name string, class map[string]string) string {
	t.Helper()
	var once sync.Once
	var rival string
	b.hook.set("CreateAccessPoint", nil, func(arg any, err error) error {
		in := arg.(efs.CreateAccessPointInput)
		once.Do(func() {
			ap, rerr := b.client.CreateAccessPoint(b.ctx(), efs.CreateAccessPointInput{FileSystemID: testFS,
				ClientToken: "rival-" + name, Path: "/rival", PosixUser: &efs.PosixUser{UID: in.PosixUser.UID, GID: in.PosixUser.GID}})
			must(t, rerr)
			rival = ap.ID
		})
		return err
	})
	r, err := b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, class))
	b.hook.set("CreateAccessPoint", nil, nil)
	must(t, err)
	must(t, b.client.DeleteAccessPoint(b.ctx(), rival))
	ap, err := b.client.DescribeAccessPoint(b.ctx(), apOf(t, r.Volume.VolumeId))
	must(t, err)
	if want := name + "~1"; ap.ClientToken != want || len(ap.Tags) != 0 {
		t.Fatalf("generation 1 has token %q and tags %v, want %q and none", ap.ClientToken, ap.Tags, want)
	}
	b.wantAccessPoints(1)
	return r.Volume.VolumeId
}

// untaggedVolumes make, on bed b, an access point without tags whose volume
// a create of the returned name would make or find.
var untaggedVolumes = []struct {
	name string
	make func(t *testing.T, b *bed) (volName, volID string)
}{
	{"this driver's, generation 0", func(t *testing.T, b *bed) (string, string) {
		name := upstreamtest.PVName()
		r, err := b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, untagged()))
		must(t, err)
		return name, r.Volume.VolumeId
	}},
	{"this driver's, generation 1", func(t *testing.T, b *bed) (string, string) {
		name := upstreamtest.PVName()
		return name, makeGeneration1(t, b, name, untagged())
	}},
	{"upstream's with enableTagging false", func(t *testing.T, b *bed) (string, string) {
		name := upstreamtest.PVName()
		ap, err := b.client.CreateAccessPoint(b.ctx(), efs.CreateAccessPointInput{FileSystemID: testFS, ClientToken: name,
			Path: "/dynamic_provisioning/" + name + "-" + upstreamtest.UUID(), PosixUser: &efs.PosixUser{UID: 50000, GID: 50000}})
		must(t, err)
		return name, volume.ProvisionedID(testFS, ap.ID)
	}},
}

// A create and a delete of one untagged volume cannot interleave: DeleteVolume
// recovers the name from the client token alone (a restarted controller,
// nothing in memory), in either order the second call is ABORTED, with
// root removal on or off, for every generation. Without the lock, the
// create could answer an access point the delete is removing.
func TestDeleteOfAnUntaggedAccessPointTakesTheNameLock(t *testing.T) {
	for _, vol := range untaggedVolumes {
		for _, delRoot := range []bool{false, true} {
			for _, first := range []string{"delete", "create"} {
				t.Run(fmt.Sprintf("%s/delete-access-point-root-dir=%v/%s first", vol.name, delRoot, first), func(t *testing.T) {
					var a, c *bed
					if delRoot {
						a = newRootBed(t).bed
					} else {
						a = newBed(t)
					}
					name, volID := vol.make(t, a)
					c = newBedOn(t, a.url, a.emu, func(cfg *Config) { cfg.DeleteRootDir, cfg.Mounter = a.svc.delRoot, a.svc.mounter })
					g := newGate()
					switch first {
					case "delete":
						c.hook.set("DeleteAccessPoint", g.hold, nil)
						deleted := async(func() error { return c.delete(volID) })
						<-g.arrived
						if _, err := c.svc.CreateVolume(c.ctx(), createReq(name, 1<<30, untagged())); !errors.Is(err, keylock.ErrBusy) {
							t.Errorf("create during the delete of its volume: %v, want ErrBusy", err)
						}
						g.open()
						must(t, <-deleted)
					case "create":
						c.hook.set("CreateAccessPoint", g.hold, nil)
						created := async(func() error {
							_, err := c.svc.CreateVolume(c.ctx(), createReq(name, 1<<30, untagged()))
							return err
						})
						<-g.arrived
						if err := c.delete(volID); !errors.Is(err, keylock.ErrBusy) {
							t.Errorf("delete during a create of its volume: %v, want ErrBusy", err)
						}
						g.open()
						<-created // answered, waiting, or refused: either way, done
						c.hook.set("CreateAccessPoint", nil, nil)
						must(t, c.delete(volID))
						// What the create made (a new generation 0, if its
						// token was free again) is a volume of its own.
						for _, ap := range c.accessPoints() {
							must(t, c.delete(volume.ProvisionedID(testFS, ap.ID)))
						}
					}
					c.wantAccessPoints(0)
				})
			}
		}
	}
}

// A later generation of an untagged volume is found by its token by a
// restarted controller (whose predecessor's generation 0 yielded and is
// gone; EFS keeps its token taken) and deleted by it.
func TestLaterGenerationOfAnUntaggedVolumeIsFoundAndDeleted(t *testing.T) {
	a := newBed(t)
	name := upstreamtest.PVName()
	clk := newClock()
	c := newBedOn(t, a.url, a.emu, func(cfg *Config) { cfg.Now = clk.Now })
	keepTokens(a, c)
	volID := makeGeneration1(t, a, name, untagged())
	if got := createSettled(t, c, clk, name, untagged()).Volume.VolumeId; got != volID {
		t.Fatalf("restarted controller answered %q, want generation 1 %s", got, volID)
	}
	must(t, c.delete(volID))
	c.wantAccessPoints(0)
}

// With --delete-access-point-root-dir, the directory of an untagged access
// point is removed only when it is provably the volume's: a provisioner's
// volume name in its token and a root directory this driver makes for that
// name. Otherwise the access point is deleted (no PV stuck for good) and the
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
		{"ours, generation 1", func(t *testing.T, r *rootBed) string {
			return makeGeneration1(t, r.bed, upstreamtest.PVName(), untagged())
		}, true},
		{"ours, subPathPattern without unique suffix: the directory says nothing of the name", ours(untagged(append(pattern, "ensureUniqueDirectory", "false")...)), false},
		{"ours, reuseAccessPoint: the token is a claim hash", ours(untagged("reuseAccessPoint", "true", "csi.storage.k8s.io/pvc/name", "logs")), false},
		{"a name that is no provisioner's (csi-sanity's)", func(t *testing.T, r *rootBed) string { return r.mustCreateIn("sanity-1", untagged()) }, false},
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
		clk.Advance(settleAfter)
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

// An untagged access point names no creator. One found by its token (a
// create of the same name by another replica) may still be verified and
// yielded by its creator, so the finder waits: answered at once (as an
// access point without writer tag was before), it was deleted by its
// creator's yield right after, an answer of an access point that is gone.
func TestUntaggedAccessPointFoundByAnotherWriterWaitsForItsCreator(t *testing.T) {
	for _, mode := range []string{VerifyAuto, VerifyAlways} {
		t.Run(mode, func(t *testing.T) {
			clk := newClock()
			cfg := func(c *Config) { c.GIDVerify, c.Now = mode, clk.Now }
			a := newBed(t, cfg)
			b := newBedOn(t, a.url, a.emu, cfg)
			keepTokens(a, b)
			name := upstreamtest.PVName()
			g := newGate()
			var made efs.CreateAccessPointInput
			a.hook.set("CreateAccessPoint", nil, func(arg any, err error) error {
				made = arg.(efs.CreateAccessPointInput)
				g.hold(nil) // applied, a's verification not begun
				return err
			})
			created := async(func() error { _, err := a.svc.CreateVolume(a.ctx(), createReq(name, 1<<30, untagged())); return err })
			<-g.arrived
			if _, err := b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, untagged())); !errors.Is(err, ErrGIDContention) {
				t.Fatalf("b found a's fresh untagged access point: %v, want ErrGIDContention (wait for its creator)", err)
			}
			// Now someone takes the GID: a's verification yields.
			_, err := a.client.CreateAccessPoint(a.ctx(), efs.CreateAccessPointInput{FileSystemID: testFS, ClientToken: "rival",
				Path: "/rival", PosixUser: &efs.PosixUser{UID: made.PosixUser.UID, GID: made.PosixUser.GID}})
			must(t, err)
			g.open()
			must(t, <-created)
			r, err := a.svc.CreateVolume(a.ctx(), createReq(name, 1<<30, untagged()))
			must(t, err)
			// b converges on a's answer once it is settled.
			if got := createSettled(t, b, clk, name, untagged()).Volume.VolumeId; got != r.Volume.VolumeId {
				t.Errorf("b answered %q, a %q", got, r.Volume.VolumeId)
			}
			a.wantUniqueIDs(false)
		})
	}
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

// The invariant the name lock of untagged volumes rests on: for every name,
// class form and generation, the token fits EFS's 64 characters and
// DeleteVolume, reading only that token, locks a key the create holds.
func FuzzUntaggedTokenGivesTheCreatesLockBack(f *testing.F) {
	f.Add("pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f", false, 1)
	f.Add("a~1", false, 0)
	f.Add(strings.Repeat("x", 62), false, 15)
	f.Add(strings.Repeat("y", 128), true, 3)
	f.Fuzz(func(t *testing.T, name string, reuse bool, gen int) {
		if name == "" || gen < 0 || gen >= maxGenerations {
			t.Skip()
		}
		p := volume.Params{ReuseAccessPoint: reuse, PVCName: name}
		base := p.ClientToken(name)
		token := untaggedGenerationToken(base, gen)
		if len(token) > volume.MaxClientTokenLength {
			t.Fatalf("token %q of %q generation %d is %d characters", token, name, gen, len(token))
		}
		held := untaggedLockKeys(name, base)
		if !slices.ContainsFunc(tokenLockKeys(token), func(k string) bool { return slices.Contains(held, k) }) {
			t.Errorf("delete of token %q locks %v; the create of %q (generation %d) holds %v", token, tokenLockKeys(token), name, gen, held)
		}
	})
}

// The settle clock of an untagged access point another process made starts
// at this host's first sighting, whichever process saw it: a controller
// restarted after that answers it at once instead of waiting settleAfter
// again (a controller restarted more often would never answer it); one with
// another temporary directory, which has no sighting, still waits.
func TestFirstSightingOfAnUntaggedAccessPointOutlivesARestart(t *testing.T) {
	clk := newClock()
	cfg := func(c *Config) { c.GIDVerify, c.Now = VerifyAlways, clk.Now }
	dir := t.TempDir()
	inDir := func(c *Config) { c.TempDir = dir }
	a := newBed(t, cfg)
	name := upstreamtest.PVName()
	r, err := a.svc.CreateVolume(a.ctx(), createReq(name, 1<<30, untagged()))
	must(t, err)
	b := newBedOn(t, a.url, a.emu, cfg, inDir)
	if _, err := b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, untagged())); !errors.Is(err, ErrGIDContention) {
		t.Fatalf("b found a's untagged access point: %v, want ErrGIDContention (wait for its creator)", err)
	}
	clk.Advance(settleAfter + time.Second)
	restarted := newBedOn(t, a.url, a.emu, cfg, inDir)
	got, err := restarted.svc.CreateVolume(restarted.ctx(), createReq(name, 1<<30, untagged()))
	if err != nil || got.GetVolume().GetVolumeId() != r.GetVolume().GetVolumeId() {
		t.Fatalf("restarted b: %v, %v; want %s at once", got, err, r.GetVolume().GetVolumeId())
	}
	elsewhere := newBedOn(t, a.url, a.emu, cfg)
	if _, err := elsewhere.svc.CreateVolume(elsewhere.ctx(), createReq(name, 1<<30, untagged())); !errors.Is(err, ErrGIDContention) {
		t.Errorf("a process without the sighting: %v, want ErrGIDContention", err)
	}
}
