package volume

import (
	"errors"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

func mountCap(fsType string, mode csi.VolumeCapability_AccessMode_Mode, flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType, MountFlags: flags}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

// TestValidateCapabilities: what CreateVolume, ValidateVolumeCapabilities and
// NodePublishVolume accept, as upstream.
func TestValidateCapabilities(t *testing.T) {
	rwx, rwo := csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	tests := []struct {
		name string
		caps []*csi.VolumeCapability
		ok   bool
	}{
		{"multi-node writer", []*csi.VolumeCapability{mountCap("", rwx)}, true},
		{"single-node writer, fsType efs", []*csi.VolumeCapability{mountCap("efs", rwo)}, true},
		{"mount options passed to efs-utils", []*csi.VolumeCapability{mountCap("", rwx, "tls", "iam,noresvport")}, true},
		{"an option merely named like it", []*csi.VolumeCapability{mountCap("", rwx, "crossaccountx")}, true},
		{"none", nil, false},
		{"fsType nfs", []*csi.VolumeCapability{mountCap("nfs", rwx)}, false},
		{"read-only many", []*csi.VolumeCapability{mountCap("", csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)}, false},
		{"block", []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: rwx}}}, false},
		{"crossaccount in mountOptions (upstream refuses it since v3.0.0)", []*csi.VolumeCapability{mountCap("", rwx, "tls", "crossaccount")}, false},
		{"crossaccount among others of one option", []*csi.VolumeCapability{mountCap("", rwx, "tls, CrossAccount ,iam")}, false},
		{"crossaccount with a value", []*csi.VolumeCapability{mountCap("", rwx, "crossaccount=true")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateCapabilities(tt.caps)
			if tt.ok != (err == nil) || err != nil && !errors.Is(err, ErrInvalidParameter) {
				t.Fatalf("ValidateCapabilities: %v, want ok=%v (else ErrInvalidParameter)", err, tt.ok)
			}
		})
	}
}
