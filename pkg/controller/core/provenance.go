package core

import (
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
)

// Provenance is who made an access point. The record (pkg/journal) is the
// proof for this driver's volumes; for access points without one (the
// upstream driver's) what they carry is the best
// that can be known, and is never enough for the orphan collector.
type Provenance struct {
	// Recorded: the record names this access point (same file system,
	// token, and the access point's ID or, before the create's answer was
	// recorded, the record's root directory).
	Recorded bool
	// CSI: made by a CSI driver's CreateVolume, this one's or upstream's
	// (kubernetes-sigs/aws-efs-csi-driver), so its root directory is the
	// volume's own and DeleteVolume may remove it.
	CSI bool
	// VolumeName is the CreateVolume name it was made for; "" when it
	// cannot be known (upstream's reuseAccessPoint token is a hash of the
	// claim name).
	VolumeName string
	// Locks are the name locks DeleteVolume holds so that no create of the
	// volume runs meanwhile: its token's, which every create of the token
	// holds, and its name's when known.
	Locks []string
}

// ProvenanceOf applies pkg/ownership's rule (an access point its record
// names is this driver's; without a record, what its tags and token say),
// and adds the locks a delete of it holds.
func ProvenanceOf(ap *efs.AccessPoint, rec *journal.Record) Provenance {
	p := Provenance{}
	if ownership.Agrees(rec, ap) {
		p.Recorded, p.CSI, p.VolumeName, p.Locks = true, true, rec.Name, RecordLocks(rec)
		return p
	}
	if ap.ClientToken != "" {
		p.Locks = []string{NameKey(ap.ClientToken)}
	}
	kind, name := ownership.Of(ap, rec)
	p.Recorded, p.CSI, p.VolumeName = kind == ownership.Recorded, kind.CSI(), name
	if name == "" {
		name = ap.Tags[ownership.TagVolumeName] // not proof, but locking is harmless
	}
	if name != "" && name != ap.ClientToken {
		p.Locks = append(p.Locks, NameKey(name))
	}
	return p
}
