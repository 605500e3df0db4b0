package controller

import (
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// provenance is who made an access point. The record (pkg/journal) is the
// proof for this driver's volumes; for access points without one (an
// earlier release's, the upstream driver's) what they carry is the best
// that can be known, and is never enough for the orphan collector.
type provenance struct {
	// recorded: the record names this access point (same file system,
	// token, and the access point's ID or, before the create's answer was
	// recorded, the record's root directory).
	recorded bool
	// csi: made by a CSI driver's CreateVolume, this one's or upstream's
	// (kubernetes-sigs/aws-efs-csi-driver), so its root directory is the
	// volume's own and DeleteVolume may remove it.
	csi bool
	// volumeName is the CreateVolume name it was made for; "" when it
	// cannot be known (upstream's reuseAccessPoint token is a hash of the
	// claim name).
	volumeName string
	// locks are the name locks DeleteVolume holds so that no create of the
	// volume runs meanwhile: its token's, which every create of the token
	// holds (plan.locks), and its name's when known.
	locks []string
}

// Agrees reports whether rec is the record of ap: same file system and
// token, and the access point it names (or, before it names one, the path).
func Agrees(rec *journal.Record, ap *efs.AccessPoint) bool { return agrees(rec, ap) }

func agrees(rec *journal.Record, ap *efs.AccessPoint) bool {
	if rec == nil || rec.FileSystem != ap.FileSystemID || rec.Token != ap.ClientToken {
		return false
	}
	if rec.AccessPoint != "" {
		return rec.AccessPoint == ap.ID
	}
	return rec.Path == ap.Path
}

// provenanceOf: an access point its record names is this driver's. Without
// a record: this driver's earlier releases' tagged access points carry the
// volume-name tag; the upstream driver's carry efs.csi.aws.com/cluster=true
// (and the user's --tags) and, as client token, the volume name or the
// claim-name hash. Untagged ones (enableTagging "false") carry no tag at
// all: one is a CSI volume's only if its token is a provisioner's volume
// name and its root directory is one this driver makes for that name
// (volume.MadeForName). Anything else (made by hand, by Terraform, the AWS
// CLI's UUID tokens, a console Name tag) is no CSI volume's: its directory
// may hold anyone's data.
func provenanceOf(ap *efs.AccessPoint, rec *journal.Record) provenance {
	p := provenance{}
	if ap.ClientToken != "" {
		p.locks = []string{nameKey(ap.ClientToken)}
	}
	lockName := func(name string) {
		if name != "" && name != ap.ClientToken {
			p.locks = append(p.locks, nameKey(name))
		}
	}
	if agrees(rec, ap) {
		p.recorded, p.csi, p.volumeName = true, true, rec.Name
		lockName(rec.Name)
		return p
	}
	name := ap.Tags[TagVolumeName]
	lockName(name) // not proof, but locking is harmless
	switch {
	case name != "" && ap.Tags[TagCluster] == "true":
		p.csi, p.volumeName = true, name
	case ap.Tags[TagCluster] == "true" && volume.IsProvisionerVolumeName(ap.ClientToken):
		p.csi, p.volumeName = true, ap.ClientToken
	case ap.Tags[TagCluster] == "true" && volume.IsClaimNameHash(ap.ClientToken):
		p.csi = true
	case len(ap.Tags) == 0 && volume.IsProvisionerVolumeName(ap.ClientToken) && volume.MadeForName(ap.Path, ap.ClientToken):
		p.csi, p.volumeName = true, ap.ClientToken
	}
	return p
}
