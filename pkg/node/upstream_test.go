package node

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/mount"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// TestPublishPicksTheNodesZoneFromMountTargetIPMap: upstream's cross-account
// classes write mounttargetipmap (JSON zone -> IP) into the volume context;
// a node mounts from its own zone's IP and, when the map has none for it (or
// the node does not know its zone), from any IP of the map, saying so in a
// warning.
func TestPublishPicksTheNodesZoneFromMountTargetIPMap(t *testing.T) {
	tests := []struct {
		name    string
		zone    string
		ctx     map[string]string
		wantIPs []string // the IP mounted from is one of these
		warned  bool
	}{
		{name: "this node's zone", zone: "us-west-2b",
			ctx:     map[string]string{"mounttargetipmap": `{"us-west-2a":"10.0.1.1","us-west-2b":"10.0.2.1","us-west-2c":"10.0.3.1"}`},
			wantIPs: []string{"10.0.2.1"}},
		{name: "key in any case", zone: "us-west-2a",
			ctx:     map[string]string{"mountTargetIpMap": `{"us-west-2a":"10.0.1.1"}`},
			wantIPs: []string{"10.0.1.1"}},
		{name: "zone missing: the only IP, with a warning", zone: "us-west-2d",
			ctx:     map[string]string{"mounttargetipmap": `{"us-west-2a":"10.0.1.1"}`},
			wantIPs: []string{"10.0.1.1"}, warned: true},
		{name: "zone missing: one of the IPs, with a warning", zone: "us-west-2d",
			ctx:     map[string]string{"mounttargetipmap": `{"us-west-2a":"10.0.1.1","us-west-2b":"10.0.2.1"}`},
			wantIPs: []string{"10.0.1.1", "10.0.2.1"}, warned: true},
		{name: "node zone unknown: one of the IPs, with a warning", zone: "",
			ctx:     map[string]string{"mounttargetipmap": `{"us-west-2a":"10.0.1.1"}`},
			wantIPs: []string{"10.0.1.1"}, warned: true},
		{name: "IPv6", zone: "us-west-2a",
			ctx:     map[string]string{"mounttargetipmap": `{"us-west-2a":"2600:1f14:abc:1234::1"}`},
			wantIPs: []string{"2600:1f14:abc:1234::1"}},
		{name: "mounttargetip wins over the map", zone: "us-west-2a",
			ctx:     map[string]string{"mounttargetip": "10.9.9.9", "mounttargetipmap": `{"us-west-2a":"10.0.1.1"}`},
			wantIPs: []string{"10.9.9.9"}},
		{name: "every key upstream writes at once", zone: "us-west-2a",
			ctx: map[string]string{"encryptInTransit": "true", "crossaccount": "false",
				"mounttargetipmap": `{"us-west-2a":"10.0.1.1"}`,
				"storage.kubernetes.io/csiProvisionerIdentity": "1722000000000-8081-efs.csi.aws.com"},
			wantIPs: []string{"10.0.1.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			rec := &recordingMounter{}
			s := newService(t, Config{Mounter: rec, Zone: tt.zone, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			req := publishReq("efs:"+fsID+"::"+apID, filepath.Join(t.TempDir(), "mount"))
			req.VolumeContext = tt.ctx
			if _, err := s.NodePublishVolume(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if rec.got == nil || !slices.Contains(tt.wantIPs, rec.got.MountTargetIP) {
				t.Fatalf("mounted %+v, want the mount target IP to be one of %v", rec.got, tt.wantIPs)
			}
			warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "mounttargetipmap")
			if warned != tt.warned {
				t.Errorf("warning logged: %v, want %v; log:\n%s", warned, tt.warned, logs.String())
			}
		})
	}
}

// TestPublishRejectsBadMountTargetIPMap: every value of the map must be an
// IP address, the one this node would not pick included (a tampered map must
// not mount on some nodes and inject mount options on others); anything else
// is INVALID_ARGUMENT before the mounter is called.
func TestPublishRejectsBadMountTargetIPMap(t *testing.T) {
	for name, v := range map[string]string{
		"not JSON":                              `{invalid`,
		"a JSON array":                          `["10.0.1.1"]`,
		"a JSON string":                         `"10.0.1.1"`,
		"JSON null":                             `null`,
		"no entry":                              `{}`,
		"option injection in this zone's value": `{"us-west-2a":"10.0.1.1,uid=0,gid=0,port=12345"}`,
		"option injection in another zone's value":  `{"us-west-2a":"10.0.1.1","us-west-2b":"10.0.2.1,uid=0"}`,
		"unicode-escaped comma":                     `{"us-west-2a":"10.0.1.1\u002cuid=0"}`,
		"not an IP":                                 `{"us-west-2a":"not-an-ip"}`,
		"an IP out of range":                        `{"us-west-2a":"10.0.0.300"}`,
		"an IPv6 zone index":                        `{"us-west-2a":"fe80::1%eth0"}`,
		"empty value":                               `{"us-west-2a":""}`,
		"null value":                                `{"us-west-2a":null}`,
		"a number":                                  `{"us-west-2a":"10.0.1.1","us-west-2b":123}`,
		"a nested object":                           `{"us-west-2a":{"ip":"10.0.1.1"}}`,
		"trailing data after the object":            `{"us-west-2a":"10.0.1.1"} {"x":"y"}`,
		"a space around the IP":                     `{"us-west-2a":" 10.0.1.1"}`,
		"map invalid even with mounttargetip given": `{"us-west-2a":"10.0.1.1,iam"}`,
	} {
		t.Run(name, func(t *testing.T) {
			rec := &recordingMounter{}
			s := newService(t, Config{Mounter: rec, Zone: "us-west-2a"})
			req := publishReq(fsID, filepath.Join(t.TempDir(), "mount"))
			req.VolumeContext = map[string]string{"mounttargetipmap": v}
			if strings.HasPrefix(name, "map invalid even") {
				req.VolumeContext["mounttargetip"] = "10.9.9.9"
			}
			_, err := s.NodePublishVolume(context.Background(), req)
			expectIs(t, "publish", err, volume.ErrInvalidParameter)
			if err != nil && !strings.Contains(err.Error(), "mounttargetipmap") {
				t.Errorf("error %q does not name the key", err)
			}
			if rec.called {
				t.Error("the mounter was called for an invalid request")
			}
		})
	}
}

// TestPublishMountsFromTheChosenIP: the IP picked from the map reaches
// efs-utils as mounttargetip=, exactly like a mounttargetip key.
func TestPublishMountsFromTheChosenIP(t *testing.T) {
	var argv []string
	m, err := mount.NewEFS(mount.WithRunner(func(_ context.Context, name string, args ...string) ([]byte, error) {
		if name == "mount" {
			argv = args
		}
		return nil, nil
	}))
	must(t, err)
	s := newService(t, Config{Mounter: m, Zone: "us-west-2b"})
	target := filepath.Join(t.TempDir(), "mount")
	req := publishReq("efs:"+fsID+"::"+apID, target)
	req.VolumeContext = map[string]string{"mounttargetipmap": `{"us-west-2a":"10.0.1.1","us-west-2b":"10.0.2.1"}`}
	if _, err := s.NodePublishVolume(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	want := []string{"-t", "efs", "-o", "tls,accesspoint=" + apID + ",mounttargetip=10.0.2.1", fsID + ":/", target}
	if !slices.Equal(argv, want) {
		t.Errorf("mount %q\n want %q", argv, want)
	}
}

// FuzzMountTargetIPMap: whatever the map holds, what reaches the mounter is
// nothing or an IP address (no option separator, no space), the one of
// this node's zone when the map has it.
func FuzzMountTargetIPMap(f *testing.F) {
	f.Add(`{"us-west-2a":"10.0.1.1","us-west-2b":"10.0.2.1"}`, "us-west-2a")
	f.Add(`{"us-west-2a":"10.0.1.1\u002ciam"}`, "us-west-2a")
	f.Add(`{"a":"::1"}`, "")
	f.Fuzz(func(t *testing.T, v, zone string) {
		rec := &recordingMounter{}
		s := newService(t, Config{Mounter: rec, Zone: zone})
		req := publishReq(fsID, "/var/lib/kubelet/pods/x/mount")
		req.VolumeContext = map[string]string{"mounttargetipmap": v}
		vol, _, err := s.publishRequest(req)
		if err != nil {
			return
		}
		ip := vol.MountTargetIP
		if net.ParseIP(ip) == nil || strings.ContainsAny(ip, ", \t\n") {
			t.Fatalf("map %q gave mount target IP %q", v, ip)
		}
		var byZone map[string]string
		if json.Unmarshal([]byte(v), &byZone) != nil || !slices.Contains(slices.Collect(maps.Values(byZone)), ip) {
			t.Fatalf("map %q gave %q, which it does not hold", v, ip)
		}
		if want, ok := byZone[zone]; ok && zone != "" && ip != want {
			t.Fatalf("map %q, zone %q: got %q, want %q", v, zone, ip, want)
		}
	})
}
