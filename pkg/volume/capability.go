package volume

import (
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// supportedModes are the access modes an EFS volume serves, as upstream:
// shared file systems are multi-node by nature.
var supportedModes = map[csi.VolumeCapability_AccessMode_Mode]bool{
	csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER:      true,
	csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER: true,
}

// ValidateCapabilities accepts mount access with fsType "efs" or empty and the
// supported access modes; anything else wraps ErrInvalidParameter.
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
	return nil
}
