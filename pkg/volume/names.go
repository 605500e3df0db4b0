package volume

import (
	"regexp"
	"strconv"
	"strings"
)

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

// gidTokenPrefix starts every GID token.
const gidTokenPrefix = "csi-gid:"

// GIDToken is the CreateAccessPoint client token of an access point that
// carries allocated id id on file system fsID. EFS binds a client token to
// one access point while it exists, account- and region-wide, so of any
// number of creates of one id on one file system (replicas with records of
// their own, other clusters, retries after lost answers) exactly one makes
// an access point and every other is answered AccessPointAlreadyExists
// naming it: the compare-and-swap of the id is EFS's, whatever record each
// writer keeps. Readable ("csi-gid:fs-0123456789abcdef0:50000", at most 62
// characters for the longest file system IDs); an ID too long for that is
// hashed.
func GIDToken(fsID string, id int64) string {
	tok := gidTokenPrefix + fsID + ":" + strconv.FormatInt(id, 10)
	if len(tok) <= MaxClientTokenLength {
		return tok
	}
	return gidTokenPrefix + sha256Hex(fsID + ":" + strconv.FormatInt(id, 10))[:MaxClientTokenLength-len(gidTokenPrefix)]
}

// IsGIDToken reports whether tok has the shape of a GID token.
func IsGIDToken(tok string) bool { return strings.HasPrefix(tok, gidTokenPrefix) }
