package node

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/mount"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// TestPublishRejectsBadInput: every malformed request is refused with a
// pkg/volume sentinel (INVALID_ARGUMENT) before anything is mounted.
func TestPublishRejectsBadInput(t *testing.T) {
	target := filepath.Join(t.TempDir(), "mount")
	withCap := func(c *csi.VolumeCapability) func(*csi.NodePublishVolumeRequest) {
		return func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability = c }
	}
	withCtx := func(kv ...string) func(*csi.NodePublishVolumeRequest) {
		return func(r *csi.NodePublishVolumeRequest) {
			r.VolumeContext = map[string]string{}
			for i := 0; i < len(kv); i += 2 {
				r.VolumeContext[kv[i]] = kv[i+1]
			}
		}
	}
	tests := []struct {
		name   string
		change func(*csi.NodePublishVolumeRequest)
		want   error
	}{
		{"no volume ID", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "" }, volume.ErrInvalidID},
		{"unparsable volume ID", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "vol-1" }, volume.ErrInvalidID},
		{"volume ID with ..", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = fsID + ":/a/../../b" }, volume.ErrInvalidID},
		{"no target", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "" }, volume.ErrInvalidParameter},
		{"relative target", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "some/path" }, volume.ErrUnsafePath},
		{"target with ..", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = target + "/../../etc" }, volume.ErrUnsafePath},
		{"target /", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "/" }, volume.ErrUnsafePath},
		{"target with NUL", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = target + "\x00x" }, volume.ErrUnsafePath},
		{"no capability", withCap(nil), volume.ErrInvalidParameter},
		{"block capability", withCap(&csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}), volume.ErrInvalidParameter},
		{"unsupported access mode", withCap(&csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER},
		}), volume.ErrInvalidParameter},
		{"fsType ext4", withCap(&csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}), volume.ErrInvalidParameter},
		{"unknown context key", withCtx("subPath", "/x"), volume.ErrInvalidParameter},
		{"encryptInTransit not a boolean", withCtx("encryptInTransit", "maybe"), volume.ErrInvalidParameter},
		{"crossaccount not a boolean", withCtx("crossaccount", "yes please"), volume.ErrInvalidParameter},
		{"gid not a number", withCtx("gid", "wheel"), volume.ErrInvalidParameter},
		{"mounttargetip not an IP", withCtx("mounttargetip", "10.0.0.300"), volume.ErrInvalidParameter},
		{"mounttargetip option injection", withCtx("mounttargetip", "10.0.0.1,iam"), volume.ErrInvalidParameter},
		{"mounttargetip without this zone", withCtx("mounttargetip", "us-east-1b:10.0.0.1,us-east-1c:10.0.0.2"), volume.ErrInvalidParameter},
		{"relative context path", withCtx("path", "a/b"), volume.ErrInvalidParameter},
		{"context path with ..", withCtx("path", "/a/../.."), volume.ErrInvalidParameter},
		{"tls with encryptInTransit=false", func(r *csi.NodePublishVolumeRequest) {
			withCtx("encryptInTransit", "false")(r)
			withCap(mountCap("tls"))(r)
		}, volume.ErrInvalidParameter},
		{"accesspoint option that is not an ID", withCap(mountCap("accesspoint=x")), volume.ErrInvalidParameter},
		{"accesspoint option conflicting with the ID", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeId = fsID + "::" + apID
			withCap(mountCap("accesspoint=" + apID2))(r)
		}, volume.ErrInvalidParameter},
		{"mount option with a space", withCap(mountCap("nfsvers=4.1 x")), volume.ErrInvalidParameter},
		{"crossaccount in mountOptions, refused by upstream since v3.0.0", withCap(mountCap("tls", "crossaccount")), volume.ErrInvalidParameter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recordingMounter{}
			s := newService(t, Config{Mounter: rec, Zone: "us-east-1a"})
			req := publishReq(fsID, target)
			tt.change(req)
			_, err := s.NodePublishVolume(context.Background(), req)
			expectIs(t, "publish", err, tt.want)
			if rec.called {
				t.Error("the mounter was called for an invalid request")
			}
		})
	}
}

// TestFIPSRefusesStunnel: in FIPS mode stunnel would need OpenSSL's FIPS
// provider, which the image lacks (stunnel exits "FIPS PROVIDER: could not
// load the shared library" and the mount fails after its timeout): a volume
// asking for stunnel is refused at once, saying why; efs-proxy volumes mount.
func TestFIPSRefusesStunnel(t *testing.T) {
	tests := []struct {
		name  string
		fips  bool
		flags []string
		ok    bool
	}{
		{"FIPS with efs-proxy", true, []string{"tls"}, true},
		{"FIPS with stunnel", true, []string{"stunnel"}, false},
		{"FIPS with stunnel among other options", true, []string{"iam,stunnel"}, false},
		{"stunnel without FIPS", false, []string{"stunnel"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recordingMounter{}
			s := newService(t, Config{Mounter: rec, FIPS: tt.fips})
			req := publishReq(fsID+"::"+apID, filepath.Join(t.TempDir(), "mount"))
			req.VolumeCapability = mountCap(tt.flags...)
			_, err := s.NodePublishVolume(context.Background(), req)
			if tt.ok {
				must(t, err)
				return
			}
			expectIs(t, "publish", err, volume.ErrInvalidParameter)
			if err == nil || !strings.Contains(err.Error(), "FIPS") || !strings.Contains(err.Error(), "efs-proxy") || rec.called {
				t.Errorf("error %v (mounter called: %v); want a refusal naming FIPS and efs-proxy", err, rec.called)
			}
		})
	}
}

// TestPublishTranslatesTheRequest: the volume ID, context keys and mount
// flags become the mount.Volume the back end gets, as upstream reads them.
func TestPublishTranslatesTheRequest(t *testing.T) {
	tests := []struct {
		name     string
		id       string
		ctx      map[string]string
		flags    []string
		readOnly bool
		want     mount.Volume
	}{
		{name: "provisioned", id: "efs:" + fsID + "::" + apID,
			want: mount.Volume{FileSystemID: fsID, AccessPointID: apID}},
		{name: "old provisioned form", id: fsID + "::" + apID,
			want: mount.Volume{FileSystemID: fsID, AccessPointID: apID}},
		{name: "static path and access point", id: fsID + ":/a/b:" + apID,
			want: mount.Volume{FileSystemID: fsID, Path: "/a/b", AccessPointID: apID}},
		{name: "read-only request", id: fsID, readOnly: true,
			want: mount.Volume{FileSystemID: fsID, ReadOnly: true}},
		{name: "a volume from a snapshot with no copy: its copy, read-only, even asked rw",
			id:    volume.ReaderID(fsID, "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"),
			flags: []string{"rw"},
			want:  mount.Volume{FileSystemID: fsID, Path: "/.efs-csi-snapshots/0123456789abcdef0123456789abcdef/data", ReadOnly: true}},
		{name: "context keys, any case; provisioner identity ignored", id: fsID,
			ctx: map[string]string{"encryptInTransit": "false", "MountTargetIP": "10.1.2.3", "crossAccount": "true",
				"storage.kubernetes.io/csiProvisionerIdentity": "1234-efs.csi.aws.com"},
			want: mount.Volume{FileSystemID: fsID, NoTLS: true, MountTargetIP: "10.1.2.3", CrossAccount: true}},
		{name: "multi-zone mount target IP picks this node's zone", id: fsID,
			ctx:  map[string]string{"mounttargetip": "us-east-1b:10.0.0.2, us-east-1a:10.0.0.1"},
			want: mount.Volume{FileSystemID: fsID, MountTargetIP: "10.0.0.1"}},
		{name: "a directory volume's uid and gid ignored", id: fsID + ":/dyn/pvc-1",
			ctx:  map[string]string{"uid": "51000", "gid": "51000"},
			want: mount.Volume{FileSystemID: fsID, Path: "/dyn/pvc-1"}},
		{name: "deprecated path key when the ID has none", id: fsID, ctx: map[string]string{"path": "/legacy/"},
			want: mount.Volume{FileSystemID: fsID, Path: "/legacy"}},
		{name: "the ID's path wins over the path key", id: fsID + ":/new", ctx: map[string]string{"path": "/legacy"},
			want: mount.Volume{FileSystemID: fsID, Path: "/new"}},
		{name: "flags: tls and ro folded, comma lists split, awscredsuri dropped, rw dropped under ro", id: fsID,
			flags: []string{"tls", "rw", "iam,noresvport", "ro", "awscredsuri=/v2/creds", "iam"},
			want:  mount.Volume{FileSystemID: fsID, ReadOnly: true, Options: []string{"iam", "noresvport"}}},
		{name: "accesspoint flag names the access point", id: fsID, flags: []string{"accesspoint=" + apID},
			want: mount.Volume{FileSystemID: fsID, AccessPointID: apID}},
		{name: "accesspoint flag repeating the ID's", id: fsID + "::" + apID, flags: []string{"accesspoint=" + apID},
			want: mount.Volume{FileSystemID: fsID, AccessPointID: apID}},
		{name: "encryptInTransit=false with an access point (TLS kept by the back end)", id: fsID + "::" + apID,
			ctx:  map[string]string{"encryptInTransit": "false"},
			want: mount.Volume{FileSystemID: fsID, AccessPointID: apID, NoTLS: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recordingMounter{}
			s := newService(t, Config{Mounter: rec, Zone: "us-east-1a"})
			req := publishReq(tt.id, filepath.Join(t.TempDir(), "mount"))
			req.VolumeContext = tt.ctx
			req.VolumeCapability = mountCap(tt.flags...)
			req.Readonly = tt.readOnly
			if _, err := s.NodePublishVolume(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if rec.got == nil || !reflect.DeepEqual(*rec.got, tt.want) {
				t.Errorf("mounted %+v\n    want %+v", rec.got, tt.want)
			}
		})
	}
}

func TestUnpublishAndStatsRejectBadInput(t *testing.T) {
	s := newService(t, Config{Mounter: &recordingMounter{}})
	ctx := context.Background()
	unpub := func(id, target string) error {
		_, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
		return err
	}
	stats := func(id, path string) error {
		_, err := s.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: path})
		return err
	}
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"unpublish without volume ID", unpub("", "/tmp/x"), volume.ErrInvalidParameter},
		{"unpublish without target", unpub(fsID, ""), volume.ErrInvalidParameter},
		{"unpublish of a relative target", unpub(fsID, "a/b"), volume.ErrUnsafePath},
		{"unpublish of a target with ..", unpub(fsID, "/tmp/../etc"), volume.ErrUnsafePath},
		// An ID this version cannot parse must still unpublish.
		{"unpublish with an ID from elsewhere", unpub("fake-vol-id", "/tmp/not-a-target-dir"), nil},
		{"stats without volume ID", stats("", "/tmp"), volume.ErrInvalidParameter},
		{"stats without path", stats(fsID, ""), volume.ErrInvalidParameter},
		// csi-sanity: a path that is not a published volume is NOT_FOUND,
		// relative ones included.
		{"stats of a relative path", stats(fsID, "some/path"), ErrVolumeNotFound},
		{"stats of a directory that is not a mount", stats("fake-vol-id", t.TempDir()), ErrVolumeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectIs(t, "call", tt.err, tt.want)
			if tt.want == ErrVolumeNotFound {
				for _, e := range []error{volume.ErrUnsafePath, volume.ErrInvalidParameter} {
					if errors.Is(tt.err, e) {
						t.Errorf("%v also wraps %v, which pkg/driver would map first", tt.err, e)
					}
				}
			}
		})
	}
}

func TestNodeGetInfoAndCapabilities(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		topology map[string]string
		caps     []csi.NodeServiceCapability_RPC_Type
	}{
		{name: "no zone, no metrics", cfg: Config{NodeID: "i-1"}},
		{name: "zone and metrics", cfg: Config{NodeID: "i-1", Zone: "us-east-1a", VolMetricsOptIn: true},
			topology: map[string]string{TopologyZoneKey: "us-east-1a"},
			caps:     []csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_GET_VOLUME_STATS}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Mounter = &recordingMounter{}
			s := newService(t, tt.cfg)
			info, err := s.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
			must(t, err)
			if info.GetNodeId() != "i-1" || info.GetMaxVolumesPerNode() != 0 ||
				!reflect.DeepEqual(info.GetAccessibleTopology().GetSegments(), tt.topology) {
				t.Errorf("NodeGetInfo = %v", info)
			}
			caps, err := s.NodeGetCapabilities(context.Background(), &csi.NodeGetCapabilitiesRequest{})
			must(t, err)
			var got []csi.NodeServiceCapability_RPC_Type
			for _, c := range caps.GetCapabilities() {
				got = append(got, c.GetRpc().GetType())
			}
			if !reflect.DeepEqual(got, tt.caps) {
				t.Errorf("capabilities %v, want %v", got, tt.caps)
			}
		})
	}
}

func TestNewValidatesConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no node ID":               {Mounter: &recordingMounter{}},
		"no mounter":               {NodeID: "n"},
		"negative unmount timeout": {NodeID: "n", Mounter: &recordingMounter{}, UnmountTimeout: -1},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// FuzzPublishRequest: whatever the CO sends, publishing never panics, and
// what reaches the mounter is a clean absolute target and a volume path that
// is "" or absolute without "..".
func FuzzPublishRequest(f *testing.F) {
	f.Add("efs:"+fsID+"::"+apID, "/var/lib/kubelet/pods/x/mount", "path", "/a", "ro,iam")
	f.Add(fsID+":/a/b", "/t/../t", "mounttargetip", "us-east-1a:10.0.0.1", "accesspoint="+apID)
	f.Add(fsID, "rel", "encryptInTransit", "false", "tls")
	f.Fuzz(func(t *testing.T, id, target, key, value, flags string) {
		rec := &recordingMounter{}
		s := newService(t, Config{Mounter: rec, Zone: "us-east-1a"})
		req := publishReq(id, target)
		req.VolumeContext = map[string]string{key: value}
		req.VolumeCapability = mountCap(strings.Split(flags, ";")...)
		vol, got, err := s.publishRequest(req)
		if err != nil {
			return
		}
		if !filepath.IsAbs(got) || filepath.Clean(got) != got || got == "/" {
			t.Fatalf("target %q accepted as %q", target, got)
		}
		for _, p := range []string{got, vol.Path} {
			for _, c := range strings.Split(p, "/") {
				if c == ".." {
					t.Fatalf("%q has a .. component", p)
				}
			}
		}
		if vol.Path != "" && (!strings.HasPrefix(vol.Path, "/") || filepath.Clean(vol.Path) != vol.Path) {
			t.Fatalf("volume path %q", vol.Path)
		}
	})
}
