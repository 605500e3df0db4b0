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
		{"read-only many (mounted read-only; upstream refuses it)", []*csi.VolumeCapability{mountCap("", csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)}, true},
		{"single-node read-only", []*csi.VolumeCapability{mountCap("", csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)}, true},
		{"multi-node single writer", []*csi.VolumeCapability{mountCap("", csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER)}, false},
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

// TestReaderOnly: only a request whose every capability reads only is
// served from a snapshot with no copy.
func TestReaderOnly(t *testing.T) {
	rox, rwx := csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	tests := []struct {
		name string
		caps []*csi.VolumeCapability
		want bool
	}{
		{"none", nil, false},
		{"read-only many", []*csi.VolumeCapability{mountCap("", rox)}, true},
		{"both reader modes", []*csi.VolumeCapability{mountCap("", rox), mountCap("", csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)}, true},
		{"a reader and a writer", []*csi.VolumeCapability{mountCap("", rox), mountCap("", rwx)}, false},
		{"a writer", []*csi.VolumeCapability{mountCap("", rwx)}, false},
	}
	for _, tt := range tests {
		if got := ReaderOnly(tt.caps); got != tt.want {
			t.Errorf("%s: ReaderOnly = %v, want %v", tt.name, got, tt.want)
		}
	}
}
