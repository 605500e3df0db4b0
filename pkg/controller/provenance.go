package controller

import (
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
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

// Agrees reports whether rec is the record of ap (ownership.Agrees).
func Agrees(rec *journal.Record, ap *efs.AccessPoint) bool { return ownership.Agrees(rec, ap) }

// provenanceOf applies pkg/ownership's rule (an access point its record
// names is this driver's; without a record, what its tags and token say),
// and adds the locks a delete of it holds.
func provenanceOf(ap *efs.AccessPoint, rec *journal.Record) provenance {
	p := provenance{}
	if Agrees(rec, ap) {
		p.recorded, p.csi, p.volumeName, p.locks = true, true, rec.Name, recordLocks(rec)
		return p
	}
	if ap.ClientToken != "" {
		p.locks = []string{nameKey(ap.ClientToken)}
	}
	kind, name := ownership.Of(ap, rec)
	p.recorded, p.csi, p.volumeName = kind == ownership.Recorded, kind.CSI(), name
	if name == "" {
		name = ap.Tags[TagVolumeName] // not proof, but locking is harmless
	}
	if name != "" && name != ap.ClientToken {
		p.locks = append(p.locks, nameKey(name))
	}
	return p
}
