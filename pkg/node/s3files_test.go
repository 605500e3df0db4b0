package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/mount"
	"github.com/efs-csi/efs-csi-driver/pkg/mount/mounttest"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// S3 Files volumes are published as upstream publishes them: the
// s3files: forms of the volume ID, TLS always, nos3readcache when the node
// plugin's memory limit is under 30 GiB or unknown; encryptInTransit=false,
// crossaccount and stunnel are refused.
func TestS3FilesPublishRequestAsUpstream(t *testing.T) {
	const big = 64 << 30 // a node plugin with room for the read cache
	target := filepath.Join(t.TempDir(), "mount")
	tests := []struct {
		name     string
		id       string
		ctx      map[string]string
		flags    []string
		memory   int64
		want     mount.Volume
		wantErr  error
		wantText string
	}{
		{name: "access point", id: "s3files:" + fsID + "::" + apID, memory: big,
			want: mount.Volume{API: volume.APIS3Files, FileSystemID: fsID, AccessPointID: apID}},
		{name: "whole file system", id: "s3files:" + fsID, memory: big,
			want: mount.Volume{API: volume.APIS3Files, FileSystemID: fsID}},
		{name: "path and access point", id: "s3files:" + fsID + ":/data/shared:" + apID, memory: big,
			want: mount.Volume{API: volume.APIS3Files, FileSystemID: fsID, Path: "/data/shared", AccessPointID: apID}},
		{name: "low memory turns the read cache off", id: "s3files:" + fsID + "::" + apID, memory: 1 << 30,
			want: mount.Volume{API: volume.APIS3Files, FileSystemID: fsID, AccessPointID: apID, NoS3ReadCache: true}},
		{name: "under upstream's 30 GiB turns it off", id: "s3files:" + fsID + "::" + apID, memory: 30<<30 - 1,
			want: mount.Volume{API: volume.APIS3Files, FileSystemID: fsID, AccessPointID: apID, NoS3ReadCache: true}},
		{name: "30 GiB keeps it", id: "s3files:" + fsID + "::" + apID, memory: 30 << 30,
			want: mount.Volume{API: volume.APIS3Files, FileSystemID: fsID, AccessPointID: apID}},
		{name: "an unknown limit turns it off, as upstream", id: "s3files:" + fsID + "::" + apID,
			want: mount.Volume{API: volume.APIS3Files, FileSystemID: fsID, AccessPointID: apID, NoS3ReadCache: true}},
		{name: "encryptInTransit true is fine", id: "s3files:" + fsID, ctx: map[string]string{"encryptInTransit": "true"}, memory: big,
			want: mount.Volume{API: volume.APIS3Files, FileSystemID: fsID}},
		{name: "encryptInTransit false is refused", id: "s3files:" + fsID, ctx: map[string]string{"encryptInTransit": "false"},
			wantErr: volume.ErrInvalidParameter, wantText: "encryption in transit cannot be disabled"},
		{name: "crossaccount is refused", id: "s3files:" + fsID, ctx: map[string]string{"crossaccount": "true"},
			wantErr: volume.ErrInvalidParameter, wantText: "cross-account"},
		{name: "stunnel is refused", id: "s3files:" + fsID, flags: []string{"stunnel"},
			wantErr: volume.ErrInvalidParameter, wantText: "stunnel"},
		{name: "invalid file system", id: "s3files:invalid-id", wantErr: volume.ErrInvalidID},
		{name: "invalid access point", id: "s3files:" + fsID + "::invalid-id", wantErr: volume.ErrInvalidID},
		{name: "an EFS volume keeps the EFS API", id: "efs:" + fsID + "::" + apID, memory: 1 << 30,
			want: mount.Volume{FileSystemID: fsID, AccessPointID: apID}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newService(t, Config{Mounter: &recordingMounter{}, MemoryLimit: tt.memory})
			req := publishReq(tt.id, target)
			req.VolumeContext = tt.ctx
			req.VolumeCapability = mountCap(tt.flags...)
			vol, _, err := s.publishRequest(req)
			if tt.wantErr != nil {
				expectIs(t, "publishRequest", err, tt.wantErr)
				if tt.wantText != "" && (err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tt.wantText))) {
					t.Errorf("error %v does not say %q", err, tt.wantText)
				}
				return
			}
			must(t, err)
			if vol.API != tt.want.API || vol.FileSystemID != tt.want.FileSystemID || vol.Path != tt.want.Path ||
				vol.AccessPointID != tt.want.AccessPointID || vol.NoS3ReadCache != tt.want.NoS3ReadCache || vol.NoTLS {
				t.Errorf("volume %+v, want %+v", vol, tt.want)
			}
		})
	}
}

// The local back end bind-mounts an S3 Files access point's root, looked up
// through the S3 Files API of the emulator (the real SDK); the same access
// point ID under the EFS API names nothing.
func TestS3FilesPublishBindMountsTheAccessPointRoot(t *testing.T) {
	const s3FS = "fs-0123456789abcdef01"
	mounttest.RequireRoot(t)
	dataDir := t.TempDir()
	url, _ := emulatortest.Start(t, emulator.Config{DataDir: dataDir, FileSystems: []string{fsID}, S3FilesFileSystems: []string{s3FS}})
	ctx := context.Background()
	cfg := efs.Config{Region: "us-east-1", Endpoint: url}
	s3c, err := efs.NewS3Files(ctx, cfg)
	must(t, err)
	efsc, err := efs.New(ctx, cfg)
	must(t, err)
	ap, err := s3c.CreateAccessPoint(ctx, efs.CreateAccessPointInput{FileSystemID: s3FS, ClientToken: "pvc-s3", Path: "/vol",
		CreationInfo: &efs.CreationInfo{OwnerUID: 0, OwnerGID: 0, Permissions: "755"}})
	must(t, err)
	m, err := mount.NewLocal(dataDir, efsc, mount.WithS3FilesAccessPoints(s3c))
	must(t, err)
	s := newService(t, Config{Mounter: m})

	target := newTarget(t)
	id := volume.ProvisionedS3FilesID(s3FS, ap.ID)
	must(t, publish(s, id, target))
	must(t, os.WriteFile(filepath.Join(target, "f"), []byte("through S3 Files"), 0o644))
	if b, err := os.ReadFile(filepath.Join(dataDir, s3FS, "vol", "f")); err != nil || string(b) != "through S3 Files" {
		t.Fatalf("the file in the access point root: %q, %v", b, err)
	}
	must(t, publish(s, id, target)) // idempotent
	must(t, unpublish(s, id, target))

	other := newTarget(t)
	err = publish(s, volume.ProvisionedID(s3FS, ap.ID), other)
	if !errors.Is(err, efs.ErrAccessPointNotFound) {
		t.Fatalf("the S3 Files access point under the EFS API: %v, want ErrAccessPointNotFound", err)
	}
}
