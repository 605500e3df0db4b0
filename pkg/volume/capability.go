package volume

import (
	"fmt"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// supportedModes are the access modes an EFS volume serves: upstream's
// two writer modes (shared file systems are multi-node by nature), and
// the reader-only modes (upstream refuses them), which the node mounts
// read-only and CreateVolume serves from a VolumeSnapshot with no copy.
var supportedModes = map[csi.VolumeCapability_AccessMode_Mode]bool{
	csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER:      true,
	csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER: true,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY: true,
	csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:  true,
}

// ReaderOnly reports whether every capability of caps (at least one) is
// of a reader-only access mode.
func ReaderOnly(caps []*csi.VolumeCapability) bool {
	for _, c := range caps {
		if !readerMode(c) {
			return false
		}
	}
	return len(caps) > 0
}

func readerMode(c *csi.VolumeCapability) bool {
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return true
	}
	return false
}

// ValidateCapabilities accepts mount access with fsType "efs" or empty and the
// supported access modes; anything else wraps ErrInvalidParameter, and so does
// the crossaccount mount option: upstream refuses it since v3.0.0 in
// CreateVolume, ValidateVolumeCapabilities and NodePublishVolume alike (the
// driver adds it itself from the provisioner secret or the volume context).
func ValidateCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return fmt.Errorf("%w: volume capabilities are required", ErrInvalidParameter)
	}
	for _, c := range caps {
		if err := validateCapability(c); err != nil {
			return err
		}
	}
	return nil
}

func validateCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return fmt.Errorf("%w: empty volume capability", ErrInvalidParameter)
	}
	if c.GetBlock() != nil {
		return fmt.Errorf("%w: block access is not supported", ErrInvalidParameter)
	}
	m := c.GetMount()
	if m == nil {
		return fmt.Errorf("%w: volume capability has no access type", ErrInvalidParameter)
	}
	if fs := m.GetFsType(); fs != "" && fs != "efs" {
		return fmt.Errorf("%w: fsType %q is not supported, use \"efs\"", ErrInvalidParameter, fs)
	}
	mode := c.GetAccessMode().GetMode()
	if !supportedModes[mode] {
		return fmt.Errorf("%w: access mode %s is not supported", ErrInvalidParameter, mode)
	}
	for _, f := range m.GetMountFlags() {
		for _, o := range strings.Split(f, ",") {
			if name, _, _ := strings.Cut(strings.TrimSpace(o), "="); strings.EqualFold(name, "crossaccount") {
				return fmt.Errorf("%w: mount option crossaccount cannot be set in mountOptions: the driver sets it from the "+
					"provisioner secret's crossaccount: \"true\" (a static PersistentVolume: volumeAttributes crossaccount: \"true\")",
					ErrInvalidParameter)
			}
		}
	}
	return nil
}
