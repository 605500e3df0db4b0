package mount

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

const (
	fsID = "fs-0123456789abcdef0"
	apID = "fsap-0123456789abcdef0"
)

// TestEFSMountArgv pins the exact command line handed to the efs-utils
// mount helper for every kind of volume.
func TestEFSMountArgv(t *testing.T) {
	const target = "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv/mount"
	tests := []struct {
		name string
		vol  Volume
		want string
	}{
		{"whole file system", Volume{FileSystemID: fsID},
			"-t efs -o tls fs-0123456789abcdef0:/ " + target},
		{"static sub path", Volume{FileSystemID: fsID, Path: "/a/b"},
			"-t efs -o tls fs-0123456789abcdef0:/a/b " + target},
		{"provisioned access point", Volume{FileSystemID: fsID, AccessPointID: apID},
			"-t efs -o tls,accesspoint=fsap-0123456789abcdef0 fs-0123456789abcdef0:/ " + target},
		{"path below an access point root", Volume{FileSystemID: fsID, Path: "/sub", AccessPointID: apID},
			"-t efs -o tls,accesspoint=fsap-0123456789abcdef0 fs-0123456789abcdef0:/sub " + target},
		{"read-only", Volume{FileSystemID: fsID, AccessPointID: apID, ReadOnly: true},
			"-t efs -o tls,accesspoint=fsap-0123456789abcdef0,ro fs-0123456789abcdef0:/ " + target},
		{"encryptInTransit=false without access point drops tls", Volume{FileSystemID: fsID, NoTLS: true},
			"-t efs fs-0123456789abcdef0:/ " + target},
		{"encryptInTransit=false with access point keeps tls", Volume{FileSystemID: fsID, AccessPointID: apID, NoTLS: true},
			"-t efs -o tls,accesspoint=fsap-0123456789abcdef0 fs-0123456789abcdef0:/ " + target},
		{"mount target IP and cross account", Volume{FileSystemID: fsID, MountTargetIP: "10.0.1.7", CrossAccount: true},
			"-t efs -o tls,mounttargetip=10.0.1.7,crossaccount fs-0123456789abcdef0:/ " + target},
		{"user options follow, deduplicated", Volume{FileSystemID: fsID, AccessPointID: apID, ReadOnly: true,
			Options: []string{"iam", "noresvport", "ro", "iam"}},
			"-t efs -o tls,accesspoint=fsap-0123456789abcdef0,ro,iam,noresvport fs-0123456789abcdef0:/ " + target},
		// S3 Files, as upstream: mount -t s3files, always TLS.
		{"S3 Files access point", Volume{API: volume.APIS3Files, FileSystemID: fsID, AccessPointID: apID},
			"-t s3files -o tls,accesspoint=fsap-0123456789abcdef0 fs-0123456789abcdef0:/ " + target},
		{"S3 Files whole file system, encryptInTransit=false still TLS", Volume{API: volume.APIS3Files, FileSystemID: fsID, NoTLS: true},
			"-t s3files -o tls fs-0123456789abcdef0:/ " + target},
		{"S3 Files path below an access point, read cache off, read-only", Volume{API: volume.APIS3Files, FileSystemID: fsID,
			Path: "/data/shared", AccessPointID: apID, NoS3ReadCache: true, ReadOnly: true},
			"-t s3files -o tls,accesspoint=fsap-0123456789abcdef0,nos3readcache,ro fs-0123456789abcdef0:/data/shared " + target},
		{"nos3readcache is S3 Files only", Volume{FileSystemID: fsID, NoS3ReadCache: true},
			"-t efs -o tls fs-0123456789abcdef0:/ " + target},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := efsMountArgs(tt.vol, target)
			want := strings.Split(tt.want, " ")
			if !reflect.DeepEqual(got, want) {
				t.Errorf("argv\n got %q\nwant %q", got, want)
			}
		})
	}
}

// TestEFSMounterRunsMountHelper runs MountVolume through the injected
// runner: the command is `mount` with the argv above, and its output is in
// the error when it fails.
func TestEFSMounterRunsMountHelper(t *testing.T) {
	target := t.TempDir()
	var gotName string
	var gotArgs []string
	fail := false
	m, err := NewEFS(WithRunner(func(_ context.Context, name string, args ...string) ([]byte, error) {
		gotName, gotArgs = name, args
		if fail {
			return []byte("mount.nfs4: Connection timed out\n"), errors.New("exit status 32")
		}
		return nil, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	vol := Volume{FileSystemID: fsID, AccessPointID: apID}
	if err := m.MountVolume(context.Background(), vol, target); err != nil {
		t.Fatal(err)
	}
	if gotName != "mount" || !reflect.DeepEqual(gotArgs, efsMountArgs(vol, target)) {
		t.Errorf("ran %s %q", gotName, gotArgs)
	}
	fail = true
	err = m.MountVolume(context.Background(), vol, target)
	if err == nil || !strings.Contains(err.Error(), "Connection timed out") {
		t.Errorf("failed mount: error %v does not carry the helper's output", err)
	}
}

func TestEFSClassify(t *testing.T) {
	nfs := func(source string, opts ...string) mountInfo {
		return mountInfo{FSType: "nfs4", Source: source, Options: append([]string{"rw"}, opts...)}
	}
	tests := []struct {
		name string
		vol  Volume
		m    mountInfo
		want State
	}{
		{"TLS mount of the access point root", Volume{FileSystemID: fsID, AccessPointID: apID}, nfs("127.0.0.1:/"), Mounted},
		{"plain mount of a sub path", Volume{FileSystemID: fsID, Path: "/a"}, nfs("10.0.0.1:/a"), Mounted},
		{"other sub path", Volume{FileSystemID: fsID, Path: "/a"}, nfs("127.0.0.1:/b"), Conflict},
		{"not NFS", Volume{FileSystemID: fsID}, mountInfo{FSType: "tmpfs", Source: "tmpfs", Options: []string{"rw"}}, Conflict},
		{"read-only wanted, read-write found", Volume{FileSystemID: fsID, ReadOnly: true}, nfs("127.0.0.1:/"), Conflict},
		{"read-write wanted, read-only found", Volume{FileSystemID: fsID},
			mountInfo{FSType: "nfs4", Source: "127.0.0.1:/", Options: []string{"ro"}}, Conflict},
		{"read-only as wanted", Volume{FileSystemID: fsID, ReadOnly: true},
			mountInfo{FSType: "nfs4", Source: "127.0.0.1:/", Options: []string{"ro"}}, Mounted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := (&efsBackend{}).classify(context.Background(), tt.vol, tt.m, nil)
			if err != nil || got != tt.want {
				t.Errorf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}
