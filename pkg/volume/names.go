package volume

import "regexp"

var (
	// provisionerVolumeName is a CreateVolume name as external-provisioner
	// makes it (--volume-name-prefix, default "pvc", then the claim's UID),
	// which the upstream driver sends as the client token.
	provisionerVolumeName = regexp.MustCompile(`^[A-Za-z0-9._-]+-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	// claimNameHash is the upstream driver's reuseAccessPoint client token:
	// the hex SHA-256 of the claim name.
	claimNameHash = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// IsProvisionerVolumeName reports whether s has the shape of a volume name
// external-provisioner gives CreateVolume (prefix, "-", the claim's UID):
// the client token of the upstream driver's access points, and of this
// driver's untagged ones.
func IsProvisionerVolumeName(s string) bool { return provisionerVolumeName.MatchString(s) }

// IsClaimNameHash reports whether s has the shape of the upstream driver's
// reuseAccessPoint client token (the hex SHA-256 of the claim name).
func IsClaimNameHash(s string) bool { return claimNameHash.MatchString(s) }
