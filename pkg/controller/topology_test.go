package controller

import (
	"errors"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// oneZoneFS is a One Zone file system in oneZone; testFS is regional.
const (
	oneZoneFS = "fs-0123456789abcdef1"
	oneZone   = "us-east-1b"
)

// newZoneBed serves testFS (regional) and oneZoneFS, with the controller's
// FileSystemDescriber the real SDK client, as the driver wires it.
func newZoneBed(t *testing.T, mut ...func(*Config)) *bed {
	t.Helper()
	url, emu := emulatortest.Start(t, emulator.Config{DataDir: t.TempDir(), FileSystems: []string{testFS},
		OneZoneFileSystems: map[string]string{oneZoneFS: oneZone}})
	return newBedOn(t, url, emu, append([]func(*Config){func(c *Config) {
		client, err := efs.New(t.Context(), efs.Config{Region: "us-east-1", Endpoint: url, RateLimits: unlimited})
		if err != nil {
			t.Fatal(err)
		}
		c.Zones = client
	}}, mut...)...)
}

func zones(z ...string) []*csi.Topology {
	var out []*csi.Topology
	for _, zone := range z {
		out = append(out, &csi.Topology{Segments: map[string]string{volume.TopologyZoneKey: zone}})
	}
	return out
}

func TestEnforceZoneAffinityAnswersAOneZoneFileSystemsZone(t *testing.T) {
	cases := []struct {
		name      string
		fs        string
		affinity  string
		requisite []*csi.Topology // what the provisioner passes: none (Immediate), the selected node's zone (WFFC), every node's zone
		want      []*csi.Topology
		wantErr   error
		describes int64
	}{
		{"One Zone, Immediate: its zone", oneZoneFS, "true", nil, zones(oneZone), nil, 1},
		{"One Zone, WaitForFirstConsumer on a node of its zone", oneZoneFS, "true", zones(oneZone), zones(oneZone), nil, 1},
		{"One Zone, requisite of every node's zone", oneZoneFS, "true", zones("us-east-1a", oneZone, "us-east-1c"), zones(oneZone), nil, 1},
		{"One Zone, a requisite term without a zone admits it", oneZoneFS, "true", []*csi.Topology{{Segments: map[string]string{"other": "x"}}}, zones(oneZone), nil, 1},
		{"One Zone, WaitForFirstConsumer on a node of another zone: refused", oneZoneFS, "true", zones("us-east-1a"), nil, ErrTopologyConflict, 1},
		{"regional: no topology, requirements ignored", testFS, "true", zones("us-east-1a"), nil, nil, 1},
		{"enforceZoneAffinity false: no topology and no Describe", oneZoneFS, "false", zones("us-east-1a"), nil, nil, 0},
		{"no enforceZoneAffinity: no topology and no Describe", oneZoneFS, "", zones("us-east-1a"), nil, nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newZoneBed(t)
			p := params(volume.ParamFileSystemID, c.fs)
			if c.affinity != "" {
				p[volume.ParamEnforceZoneAffinity] = c.affinity
			}
			req := createReq("pvc-zone", 1<<30, p)
			if c.requisite != nil {
				req.AccessibilityRequirements = &csi.TopologyRequirement{Requisite: c.requisite, Preferred: c.requisite}
			}
			resp, err := b.svc.CreateVolume(b.ctx(), req)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("CreateVolume: %v, want %v", err, c.wantErr)
			}
			if got := resp.GetVolume().GetAccessibleTopology(); !sameTopology(got, c.want) {
				t.Errorf("AccessibleTopology %v, want %v", got, c.want)
			}
			if n := b.emu.Counts()[emulator.OpDescribeFileSystems]; n != c.describes {
				t.Errorf("%d DescribeFileSystems, want %d", n, c.describes)
			}
			aps, err := efs.Collect(b.ctx(), b.client.ListAccessPoints, c.fs)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 0, false: 1}[c.wantErr != nil]; len(aps) != want {
				// A refused volume is refused before anything is created.
				t.Errorf("%d access points on %s, want %d", len(aps), c.fs, want)
			}
		})
	}
}

// The zone of a file system never changes: a burst of claims of a One Zone
// class costs one Describe, and every retry of one CreateVolume answers the
// same topology (from the cache, or after it expired, from EFS again).
func TestZoneIsDescribedOncePerFileSystemAndRetriesAgree(t *testing.T) {
	clk := newClock()
	b := newZoneBed(t, func(c *Config) { c.Now = clk.Now })
	p := params(volume.ParamFileSystemID, oneZoneFS, volume.ParamEnforceZoneAffinity, "true")
	for _, name := range []string{"pvc-a", "pvc-b", "pvc-a", "pvc-c"} {
		resp, err := b.svc.CreateVolume(b.ctx(), createReq(name, 1<<30, p))
		if err != nil || !sameTopology(resp.GetVolume().GetAccessibleTopology(), zones(oneZone)) {
			t.Fatalf("CreateVolume(%s): %v %v, want zone %s", name, err, resp, oneZone)
		}
	}
	if n := b.emu.Counts()[emulator.OpDescribeFileSystems]; n != 1 {
		t.Errorf("%d DescribeFileSystems for 4 claims, want 1", n)
	}
	clk.Advance(zoneFresh + time.Second)
	resp, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-a", 1<<30, p))
	if err != nil || !sameTopology(resp.GetVolume().GetAccessibleTopology(), zones(oneZone)) {
		t.Fatalf("retry after the cache expired: %v %v", err, resp)
	}
	if n := b.emu.Counts()[emulator.OpDescribeFileSystems]; n != 2 {
		t.Errorf("%d DescribeFileSystems after the cache expired, want 2", n)
	}
}

func TestEnforceZoneAffinityWithoutADescriberOrFileSystemIsRefused(t *testing.T) {
	b := newBed(t) // no Zones
	_, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-x", 1<<30, params(volume.ParamEnforceZoneAffinity, "true")))
	if !errors.Is(err, ErrNotSupported) {
		t.Errorf("without a describer: %v, want ErrNotSupported", err)
	}
	z := newZoneBed(t)
	_, err = z.svc.CreateVolume(z.ctx(), createReq("pvc-y", 1<<30, params(volume.ParamFileSystemID, "fs-00000000000000bad", volume.ParamEnforceZoneAffinity, "true")))
	if !errors.Is(err, efs.ErrFileSystemNotFound) {
		t.Errorf("missing file system: %v, want ErrFileSystemNotFound", err)
	}
}

func sameTopology(a, b []*csi.Topology) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i].GetSegments()) != len(b[i].GetSegments()) {
			return false
		}
		for k, v := range b[i].GetSegments() {
			if a[i].GetSegments()[k] != v {
				return false
			}
		}
	}
	return true
}
