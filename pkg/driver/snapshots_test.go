package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// A snapshot of an access point volume, a volume restored from it and a
// clone of the volume, through the driver's gRPC socket, its controller's
// own (bind) mount of the emulator's file system and pkg/treecopy: the
// copies hold the source's files, owned by the new volumes' ids; the
// snapshot's copy stays untouched by the restore; DeleteSnapshot removes
// its copy; deleting the restored volume leaves the snapshot.
func TestSnapshotRestoreAndCloneCopyTheVolumeOnTheFileSystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the controller's mount is a bind mount: root")
	}
	var emuURL string
	socket, emu := startDriver(t, func(c *Config) { c.Mode = ModeController; emuURL = c.EFS.Endpoint })
	ctl := csi.NewControllerClient(dial(t, socket))
	ctx := t.Context()
	client, err := efs.New(ctx, efs.Config{Region: "us-east-1", Endpoint: emuURL, RateLimits: unlimited})
	if err != nil {
		t.Fatal(err)
	}
	fsRoot := emu.FileSystemDir(sanityFS)
	params := map[string]string{"provisioningMode": "efs-ap", "fileSystemId": sanityFS, "directoryPerms": "2750",
		"gidRangeStart": "7000", "gidRangeEnd": "7100", "basePath": "/dyn"}
	capability := []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}}
	create := func(name string, cs *csi.VolumeContentSource) (*csi.Volume, *efs.AccessPoint) {
		t.Helper()
		resp, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, Parameters: params, VolumeCapabilities: capability, VolumeContentSource: cs})
		if err != nil {
			t.Fatalf("CreateVolume %s: %v", name, err)
		}
		id, err := volume.ParseID(resp.Volume.VolumeId)
		if err != nil {
			t.Fatal(err)
		}
		ap, err := client.DescribeAccessPoint(ctx, id.AccessPointID)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Volume, ap
	}
	src, srcAP := create("pvc-src", nil)
	srcPath, srcGID := srcAP.Path, int(srcAP.PosixUser.GID)
	// What a pod wrote: the root as EFS makes it at the first mount, a
	// file and a symlink.
	root := filepath.Join(fsRoot, srcPath)
	if err := os.MkdirAll(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "sub", "data"), []byte("payload"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/data", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{root, filepath.Join(root, "sub"), filepath.Join(root, "sub", "data")} {
		if err := os.Lchown(p, srcGID, srcGID); err != nil {
			t.Fatal(err)
		}
	}

	snap, err := ctl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: src.VolumeId})
	if err != nil || !snap.Snapshot.ReadyToUse {
		t.Fatalf("CreateSnapshot: %v, %v", snap, err)
	}
	again, err := ctl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: src.VolumeId})
	if err != nil || again.Snapshot.SnapshotId != snap.Snapshot.SnapshotId || !again.Snapshot.CreationTime.AsTime().Equal(snap.Snapshot.CreationTime.AsTime()) {
		t.Fatalf("repeated CreateSnapshot: %v, %v; want %v", again, err, snap)
	}

	restored, restoredAP := create("pvc-restored", &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.Snapshot.SnapshotId}}})
	clone, cloneAP := create("pvc-clone", &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: src.VolumeId}}})
	for _, v := range []struct {
		vol  *csi.Volume
		path string
		gid  int
	}{{restored, restoredAP.Path, int(restoredAP.PosixUser.GID)}, {clone, cloneAP.Path, int(cloneAP.PosixUser.GID)}} {
		if v.vol.ContentSource == nil {
			t.Errorf("%s: no content source in the answer", v.vol.VolumeId)
		}
		got, err := os.ReadFile(filepath.Join(fsRoot, v.path, "sub", "data"))
		if err != nil || string(got) != "payload" {
			t.Errorf("%s: sub/data = %q, %v", v.path, got, err)
		}
		if target, err := os.Readlink(filepath.Join(fsRoot, v.path, "link")); err != nil || target != "sub/data" {
			t.Errorf("%s: link -> %q, %v", v.path, target, err)
		}
		if gid := ownerOf(t, filepath.Join(fsRoot, v.path, "sub", "data")); gid != v.gid || gid == srcGID {
			t.Errorf("%s: sub/data's gid %d, want the new volume's %d (the source's %d)", v.path, gid, v.gid, srcGID)
		}
		fi, err := os.Stat(filepath.Join(fsRoot, v.path))
		if err != nil || fi.Mode()&os.ModeSetgid == 0 || fi.Mode().Perm() != 0o750 {
			t.Errorf("%s: root mode %v, %v; want directoryPerms 2750", v.path, fi.Mode(), err)
		}
	}

	// A class with restoreOwnership "source": the files keep the
	// source's owner, the root is the new volume's.
	keep := map[string]string{"restoreOwnership": "source"}
	for k, v := range params {
		keep[k] = v
	}
	kept, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-kept", Parameters: keep, VolumeCapabilities: capability,
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: src.VolumeId}}}})
	if err != nil {
		t.Fatalf("clone keeping owners: %v", err)
	}
	kid, _ := volume.ParseID(kept.Volume.VolumeId)
	keptAP, err := client.DescribeAccessPoint(ctx, kid.AccessPointID)
	if err != nil {
		t.Fatal(err)
	}
	if gid := ownerOf(t, filepath.Join(fsRoot, keptAP.Path, "sub", "data")); gid != srcGID {
		t.Errorf("restoreOwnership source: sub/data's gid %d, want the source's %d", gid, srcGID)
	}
	if gid := ownerOf(t, filepath.Join(fsRoot, keptAP.Path)); gid != int(keptAP.PosixUser.GID) {
		t.Errorf("restoreOwnership source: the root's gid %d, want the new volume's %d", gid, keptAP.PosixUser.GID)
	}
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: kept.Volume.VolumeId}); err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{"restoreOwnership": "mine"}
	for k, v := range params {
		bad[k] = v
	}
	if _, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-bad", Parameters: bad, VolumeCapabilities: capability,
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: src.VolumeId}}}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("restoreOwnership mine: %v, want InvalidArgument", err)
	}

	// A ReadOnlyMany volume of the snapshot is its copy, with no copy of
	// its own; the snapshot stays while it lives.
	rox := []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
	}}
	fromSnap := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.Snapshot.SnapshotId}}}
	reader, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-rox", Parameters: params, VolumeCapabilities: rox, VolumeContentSource: fromSnap})
	if err != nil {
		t.Fatalf("CreateVolume ReadOnlyMany from the snapshot: %v", err)
	}
	rid, err := volume.ParseID(reader.Volume.VolumeId)
	if err != nil || rid.Reader == "" || reader.Volume.ContentSource == nil {
		t.Fatalf("read-only volume %v: %+v, %v", reader.Volume, rid, err)
	}
	if got, err := os.ReadFile(filepath.Join(fsRoot, rid.Path, "sub", "data")); err != nil || string(got) != "payload" {
		t.Errorf("the read-only volume's path holds %q, %v", got, err)
	}
	if gid := ownerOf(t, filepath.Join(fsRoot, rid.Path, "sub", "data")); gid != srcGID {
		t.Errorf("the read-only volume's sub/data has gid %d, want the source's %d", gid, srcGID)
	}
	if _, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-rox-empty", Parameters: params, VolumeCapabilities: rox}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("CreateVolume ReadOnlyMany of no snapshot: %v, want InvalidArgument", err)
	}
	v, err := ctl.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: reader.Volume.VolumeId, VolumeCapabilities: capability})
	if err != nil || v.Confirmed != nil {
		t.Errorf("ValidateVolumeCapabilities of a writer mode on the read-only volume: %v, %v; want not confirmed", v, err)
	}
	if _, err := ctl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.Snapshot.SnapshotId}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("DeleteSnapshot while a read-only volume is served from it: %v, want FailedPrecondition", err)
	}
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: reader.Volume.VolumeId}); err != nil {
		t.Fatalf("DeleteVolume of the read-only volume: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(fsRoot, rid.Path, "sub", "data")); err != nil || string(got) != "payload" {
		t.Errorf("deleting the read-only volume touched the snapshot: %q, %v", got, err)
	}

	// Deleting the restored volume leaves the snapshot; a snapshot with
	// no unfinished restore is deleted with its copy.
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: restored.VolumeId}); err != nil {
		t.Fatal(err)
	}
	list, err := ctl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SourceVolumeId: src.VolumeId})
	if err != nil || len(list.Entries) != 1 {
		t.Fatalf("ListSnapshots: %v, %v", list, err)
	}
	if _, err := ctl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.Snapshot.SnapshotId}); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(fsRoot, volume.SnapshotDir)); len(entries) != 0 {
		t.Errorf("left in the snapshot area: %v", entries)
	}
	_, err = ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-late", Parameters: params, VolumeCapabilities: capability,
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.Snapshot.SnapshotId}}}})
	if status.Code(err) != codes.NotFound {
		t.Errorf("CreateVolume from a deleted snapshot: %v, want NotFound", err)
	}
	if _, err := ctl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-s3", SourceVolumeId: "s3files:" + sanityS3FS + "::fsap-0123456789abcdef0"}); status.Code(err) != codes.Unimplemented {
		t.Errorf("CreateSnapshot of an S3 Files volume: %v, want Unimplemented", err)
	}
	for _, v := range []*csi.Volume{src, clone} {
		if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.VolumeId}); err != nil {
			t.Fatal(err)
		}
	}
}

func ownerOf(t *testing.T, p string) int {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Gid)
}

// BenchmarkVolumeFromSnapshot: the time from CreateVolume to a volume
// ready, of a ReadOnlyMany volume served from a snapshot's copy (no copy:
// the same at any size) and of a restore that copies, by the snapshot's
// files (each 4 KiB), over gRPC to the driver with the emulator (with
// DeleteVolume of each). docs/benchmarks.md, "Volumes from snapshots".
func BenchmarkVolumeFromSnapshot(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the controller's mount is a bind mount: root")
	}
	for _, bc := range []struct {
		mode  csi.VolumeCapability_AccessMode_Mode
		files int
	}{
		{csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, 0},
		{csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, 10000},
		{csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, 0},
		{csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, 1000},
		{csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, 10000},
	} {
		kind := "ReadOnlyMany"
		if bc.mode == csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER {
			kind = "restore"
		}
		b.Run(fmt.Sprintf("%s/files=%d", kind, bc.files), func(b *testing.B) {
			var emuURL string
			socket, emu := startDriver(b, func(c *Config) { c.Mode = ModeController; emuURL = c.EFS.Endpoint })
			ctl := csi.NewControllerClient(dial(b, socket))
			ctx := b.Context()
			params := map[string]string{"provisioningMode": "efs-ap", "fileSystemId": sanityFS, "directoryPerms": "700",
				"gidRangeStart": "7000", "gidRangeEnd": "7100", "basePath": "/dyn"}
			caps := func(m csi.VolumeCapability_AccessMode_Mode) []*csi.VolumeCapability {
				return []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
					AccessMode: &csi.VolumeCapability_AccessMode{Mode: m}}}
			}
			src, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-src", Parameters: params,
				VolumeCapabilities: caps(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)})
			if err != nil {
				b.Fatal(err)
			}
			if bc.files > 0 {
				id, _ := volume.ParseID(src.Volume.VolumeId)
				client, err := efs.New(ctx, efs.Config{Region: "us-east-1", Endpoint: emuURL, RateLimits: unlimited})
				if err != nil {
					b.Fatal(err)
				}
				ap, err := client.DescribeAccessPoint(ctx, id.AccessPointID)
				if err != nil {
					b.Fatal(err)
				}
				dir := filepath.Join(emu.FileSystemDir(sanityFS), ap.Path)
				page := make([]byte, 4096)
				for i := range bc.files {
					sub := filepath.Join(dir, fmt.Sprintf("d%03d", i/100))
					if i%100 == 0 {
						if err := os.MkdirAll(sub, 0o755); err != nil {
							b.Fatal(err)
						}
					}
					if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%02d", i%100)), page, 0o644); err != nil {
						b.Fatal(err)
					}
				}
			}
			snap, err := ctl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: src.Volume.VolumeId})
			if err != nil || !snap.Snapshot.ReadyToUse {
				b.Fatalf("CreateSnapshot: %v, %v", snap, err)
			}
			from := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
				Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.Snapshot.SnapshotId}}}
			i := 0
			for b.Loop() {
				i++
				vol, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: fmt.Sprintf("pvc-%d", i), Parameters: params,
					VolumeCapabilities: caps(bc.mode), VolumeContentSource: from})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: vol.Volume.VolumeId}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
