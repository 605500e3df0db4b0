package controller

import (
	"regexp"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// provenance is who made an access point, told from what it carries.
type provenance struct {
	// csi: made by a CSI driver's CreateVolume, this one's or upstream's
	// (kubernetes-sigs/aws-efs-csi-driver), so its root directory is the
	// volume's own and DeleteVolume may remove it.
	csi bool
	// volumeName is the CreateVolume name to lock while deleting it; ""
	// when it cannot be known (upstream's reuseAccessPoint token is a hash
	// of the claim name).
	volumeName string
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

// provenanceOf: this driver's access points carry the volume-name tag; the
// upstream driver's carry efs.csi.aws.com/cluster=true (and the user's
// --tags) and, as client token, the volume name or the claim-name hash.
// Anything else (made by hand, by Terraform, the AWS CLI's UUID tokens, a
// cluster tag an operator added for IAM) is no CSI volume's: its directory
// may hold anyone's data.
func provenanceOf(ap *efs.AccessPoint) provenance {
	if ap.Tags[TagCluster] != "true" {
		return provenance{}
	}
	if name := ap.Tags[TagVolumeName]; name != "" {
		return provenance{csi: true, volumeName: name}
	}
	switch {
	case upstreamVolumeName.MatchString(ap.ClientToken):
		return provenance{csi: true, volumeName: ap.ClientToken}
	case upstreamClaimHash.MatchString(ap.ClientToken):
		return provenance{csi: true}
	}
	return provenance{}
}
