// Package ownership says whose an access point is: the names of the tags
// this driver writes, and the one rule, shared by CreateVolume,
// DeleteVolume, ListVolumes, the orphan collector and both audits, that
// tells a recorded volume from what an access point merely carries.
//
// The record (pkg/journal) is the only proof of ownership. Tags and client
// tokens can be written by anyone who may create and tag access points in
// the account; they are read here only for access points without a record
// (an earlier release's, the upstream driver's), and only to decide what is
// safe for a CSI volume of unknown origin: never to delete on their word.
// The shape of a provisioner's volume name and of upstream's claim-name
// token are pkg/volume's (names.go), which this rule uses.
package ownership

import (
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Tags written on every access point this driver creates (none with
// enableTagging "false").
const (
	TagCluster    = "efs.csi.aws.com/cluster"     // "true", as the upstream driver
	TagVolumeName = "efs.csi.aws.com/volume-name" // the CO's volume name: how Delete finds the Create to exclude
	TagCapacity   = "efs.csi.aws.com/capacity"    // requested bytes: a repeat with another size is incompatible
	TagBasePath   = "efs.csi.aws.com/base-path"   // the class's basePath: never removed as a root directory
	// TagClusterID is the identity of the cluster whose controller created
	// the access point (--cluster-id). Only access points carrying this
	// cluster's ID are listed by it.
	TagClusterID = "efs.csi.aws.com/cluster-id"
	// TagBound ("true") was set by releases before the record on access
	// points a PersistentVolume referred to; the record's Bound replaces it
	// and nothing writes it any more.
	TagBound = "efs.csi.aws.com/bound"
	// The claim the volume was provisioned for (--extra-create-metadata).
	TagClaimName      = "efs.csi.aws.com/pvc-name"
	TagClaimNamespace = "efs.csi.aws.com/pvc-namespace"
	// TagRecordLife is when the record the access point was created for
	// was made (RecordLife): written in EFS, which a writer of the record
	// (the controller's namespace) cannot reach, it proves to the orphan
	// collector that a record entry is the one the access point was made
	// for, not one forged to name it.
	TagRecordLife = "efs.csi.aws.com/record-life"
)

// RecordLife is the value of TagRecordLife for rec: its creation time,
// which a record keeps for its life (a record removed and made again is a
// new life).
func RecordLife(rec *journal.Record) string {
	return rec.Created.UTC().Format(time.RFC3339Nano)
}

// Kind is what is known of who made an access point.
type Kind int

const (
	// NotCSI: no CSI driver's record, tags or token (made by hand, by
	// Terraform, the AWS CLI's UUID tokens, a console Name tag): its
	// directory may hold anyone's data.
	NotCSI Kind = iota
	// Recorded: this cluster's record names it. The only proof.
	Recorded
	// Tagged: this driver's tags (cluster and volume name) without a
	// record: an earlier release's, or forged.
	Tagged
	// Upstream: the upstream driver's cluster tag with a provisioner
	// volume name as client token.
	Upstream
	// TokenOnly: the cluster tag and a GID token (volume.GIDToken),
	// without a record or a volume-name tag: this driver's, made with its
	// default tags (the cluster tag alone, as AWS's managed policy
	// allows), for a volume whose name, and whose cluster, only a record
	// knows.
	TokenOnly
	// UpstreamReuse: the upstream driver's cluster tag with its
	// reuseAccessPoint token (a claim-name hash): the volume name is not
	// known.
	UpstreamReuse
	// Untagged: no tag at all, a provisioner volume name as token and a
	// root directory this driver makes for that name (enableTagging
	// "false", upstream's or this driver's before the record).
	Untagged
)

// CSI reports whether a CSI driver's CreateVolume made it, as far as can be
// known: its root directory is then the volume's own.
func (k Kind) CSI() bool { return k != NotCSI }

// Agrees reports whether rec is the record of ap: same file system and
// token, and the access point it names (or, before it names one, the path).
func Agrees(rec *journal.Record, ap *efs.AccessPoint) bool {
	if rec == nil || rec.FileSystem != ap.FileSystemID || rec.SentToken() != ap.ClientToken {
		return false
	}
	if rec.AccessPoint != "" {
		return rec.AccessPoint == ap.ID
	}
	return rec.Path == ap.Path
}

// Of classifies ap, whose record by (file system, token) is rec (nil for
// none), and returns the CreateVolume name it was made for ("" when that
// cannot be known).
func Of(ap *efs.AccessPoint, rec *journal.Record) (Kind, string) {
	if Agrees(rec, ap) {
		return Recorded, rec.Name
	}
	csiTag := ap.Tags[TagCluster] == "true"
	switch name := ap.Tags[TagVolumeName]; {
	case csiTag && name != "":
		return Tagged, name
	case csiTag && volume.IsGIDToken(ap.ClientToken):
		return TokenOnly, ""
	case csiTag && volume.IsProvisionerVolumeName(ap.ClientToken):
		return Upstream, ap.ClientToken
	case csiTag && volume.IsClaimNameHash(ap.ClientToken):
		return UpstreamReuse, ""
	case len(ap.Tags) == 0 && volume.IsProvisionerVolumeName(ap.ClientToken) && volume.MadeForName(ap.Path, ap.ClientToken):
		return Untagged, ap.ClientToken
	}
	return NotCSI, ""
}

// OtherCluster returns the cluster ID ap is tagged with when it is not
// cluster ("" = this cluster's is unknown: any ID is another's). Only
// --descriptive-tags writes the ID: an access point without it is of no
// known cluster.
func OtherCluster(ap *efs.AccessPoint, cluster string) (string, bool) {
	id, ok := ap.Tags[TagClusterID]
	return id, ok && id != cluster
}
