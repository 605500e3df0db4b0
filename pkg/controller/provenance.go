package controller

import (
	"regexp"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// provenance is who made an access point, told from what it carries.
type provenance struct {
	// csi: made by a CSI driver's CreateVolume, this one's or upstream's
	// (kubernetes-sigs/aws-efs-csi-driver), so its root directory is the
	// volume's own and DeleteVolume may remove it.
	csi bool
	// volumeName is the CreateVolume name it was made for; "" when it
	// cannot be known (upstream's reuseAccessPoint token is a hash of the
	// claim name).
	volumeName string
	// locks are the name locks DeleteVolume holds so that no create of the
	// volume runs meanwhile: its name's, or for an access point without a
	// volume-name tag every name its client token can be read as
	// (tokenLockKeys).
	locks []string
}

var (
	// upstreamVolumeName is a CreateVolume name as external-provisioner
	// makes it (--volume-name-prefix, default "pvc", then the claim's UID),
	// which upstream sends as the client token.
	upstreamVolumeName = regexp.MustCompile(`^[A-Za-z0-9._-]+-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	// upstreamClaimHash is upstream's reuseAccessPoint token: the hex
	// SHA-256 of the claim name.
	upstreamClaimHash = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// provenanceOf: this driver's tagged access points carry the volume-name
// tag; the upstream driver's carry efs.csi.aws.com/cluster=true (and the
// user's --tags) and, as client token, the volume name or the claim-name
// hash. Untagged ones (enableTagging "false", this driver's or upstream's)
// carry no tag at all: one is a CSI volume's only if its token names a
// provisioner's volume name (generation 0, or the stem of an untagged later
// generation) and its root directory is one this driver makes for that
// name (volume.MadeForName). Anything else (made by hand, by Terraform, the
// AWS CLI's UUID tokens, a cluster tag an operator added for IAM, a console
// Name tag) is no CSI volume's: its directory may hold anyone's data.
func provenanceOf(ap *efs.AccessPoint) provenance {
	if name := ap.Tags[TagVolumeName]; name != "" && ap.Tags[TagCluster] == "true" {
		return provenance{csi: true, volumeName: name, locks: []string{nameKey(name)}}
	}
	p := provenance{locks: tokenLockKeys(ap.ClientToken)}
	if name := ap.Tags[TagVolumeName]; name != "" {
		p.locks = append(p.locks, nameKey(name)) // not proof, but locking is harmless
	}
	switch {
	case ap.Tags[TagCluster] == "true" && upstreamVolumeName.MatchString(ap.ClientToken):
		p.csi, p.volumeName = true, ap.ClientToken
	case ap.Tags[TagCluster] == "true" && upstreamClaimHash.MatchString(ap.ClientToken):
		p.csi = true
	case len(ap.Tags) == 0:
		if name := untaggedVolumeName(ap.ClientToken); volume.MadeForName(ap.Path, name) {
			p.csi, p.volumeName = true, name
		}
	}
	return p
}
