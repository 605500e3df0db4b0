package core

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// ErrIncompatible: an access point exists for this name with other parameters.
var ErrIncompatible = errors.New("volume exists with incompatible parameters")

// Plan is everything a CreateVolume sends to EFS, computed from the request
// alone, so that every retry of the same call sends identical parameters.
type Plan struct {
	Name     string
	Params   volume.Params
	Capacity int64
	Cluster  string                     // this controller's cluster ID (Config.ClusterID)
	Input    efs.CreateAccessPointInput // PosixUser is filled once a GID is reserved
	// Dir: a directory volume (provisioningMode efs-dir); Input.ClientToken
	// is then its record key (volume.DirToken), never sent.
	Dir bool
	// Placed: the class names several file systems, and the place entry
	// of this key says which holds the volume.
	Placed string
}

// CapacityTag is the value of ownership.TagCapacity for a size in bytes.
func CapacityTag(bytes int64) string { return strconv.FormatInt(bytes, 10) }

// Locks are the name locks a create of the volume holds: its name's, and
// its client token's when that is not the name (a long name's hash,
// reuseAccessPoint's claim hash), which a DeleteVolume of an access point
// without a record recovers from the token alone.
func (p *Plan) Locks() []string {
	if p.Input.ClientToken == p.Name {
		return []string{NameKey(p.Name)}
	}
	return []string{NameKey(p.Name), NameKey(p.Input.ClientToken)}
}

// usesGIDToken reports whether the plan's creates send a GID token
// (volume.GIDToken) rather than the name's: every class that allocates an
// id and tags its access points, when what EFS answers for the token says
// whose the access point is: its volume-name tag (--descriptive-tags), or
// else its root directory, for classes whose root directories tell
// volumes apart (volume.Params.RootDirNamesVolume). Any other class sends
// the name's token, as upstream: its GIDs are kept apart by the record's
// id table, not by EFS. reuseAccessPoint keeps upstream's claim-name
// token, by which a re-created claim finds its access point.
func (p *Plan) usesGIDToken() bool {
	return p.Params.NeedsGIDAllocation() && p.Params.EnableTagging && !p.Params.ReuseAccessPoint && !p.Dir &&
		(p.Input.Tags[ownership.TagVolumeName] != "" || p.Params.RootDirNamesVolume())
}

// ours reports whether ap, which holds the GID token this volume's record
// sends, was made for this volume: its volume-name tag, not another
// cluster's, or, without the tag (the default: the cluster tag alone), its
// root directory, which names this volume and no other (usesGIDToken).
// PV names carry the claim's UID, so no other volume of any cluster has
// the name, nor the root directory.
func (p *Plan) ours(ap *efs.AccessPoint) bool {
	if _, other := ownership.OtherCluster(ap, p.Cluster); other || ap.FileSystemID != p.Params.FileSystemID {
		return false
	}
	if name, tagged := ap.Tags[ownership.TagVolumeName]; tagged {
		return name == p.Name
	}
	return p.Params.RootDirNamesVolume() && ap.Path == p.Input.Path
}

// recordMismatch says why a record found for the plan's token serves
// another volume, or "".
func (p *Plan) recordMismatch(rec *journal.Record) string {
	if p.Params.ReuseAccessPoint {
		// The token is the claim name's hash: a claim of that name in
		// another namespace has the same token, and must not get it.
		if rec.ClaimNamespace != p.Params.PVCNamespace {
			return fmt.Sprintf("its access point token is recorded for a claim in namespace %q, not %q", rec.ClaimNamespace, p.Params.PVCNamespace)
		}
	} else if rec.Name != p.Name {
		return fmt.Sprintf("its access point token is recorded for volume %q", rec.Name)
	}
	if rec.Capacity != 0 && rec.Capacity != p.Capacity {
		// Records before the capacity of every volume was kept have 0.
		return fmt.Sprintf("recorded with capacity %d bytes, want %d", rec.Capacity, p.Capacity)
	}
	return ""
}

// stale is the token a GID-token create's SetAccessPoint must still find
// the record sending (journal.Made.Sent), "" for other tokens: another
// create of the volume may have moved the record to another id meanwhile,
// and an access point made under the old token (a request delayed past
// that move) is then nobody's answer.
func stale(token string) string {
	if volume.IsGIDToken(token) {
		return token
	}
	return ""
}

// madeWith reports whether found was made with rec's planned request: it
// carries the id rec holds in the record, which no other volume of this
// cluster can carry and which the allocator picked off every listed access
// point, at rec's root directory.
func madeWith(rec *journal.Record, found *efs.AccessPoint) bool {
	uid, g := PosixIDs(found)
	return rec.Allocated != journal.NoID && (uid == rec.Allocated || g == rec.Allocated) &&
		uid == rec.UID && g == rec.GID && found.Path == rec.Path
}

// claimProven: an access point found by a reuseAccessPoint token that the
// record does not name serves this claim only if it proves the claim's
// namespace: this driver's claim tags, or a root directory that this
// class's subPathPattern derives from the namespace.
func (p *Plan) claimProven(ap *efs.AccessPoint) bool {
	if ns, ok := ap.Tags[ownership.TagClaimNamespace]; ok {
		return ns == p.Params.PVCNamespace
	}
	return p.Params.RootDirHasNamespace(ap.Path)
}

// upstreamUniqueDir: ap, under the volume name's token (upstream's driver
// made it for this volume), has the planned root directory but for
// ensureUniqueDirectory's suffix, which upstream draws at random.
func (p *Plan) upstreamUniqueDir(ap *efs.AccessPoint) bool {
	return p.Params.SubPathPattern != "" && p.Params.EnsureUniqueDirectory && ap.ClientToken == p.Input.ClientToken &&
		!volume.IsGIDToken(ap.ClientToken) && volume.UniqueDirOf(p.Input.Path, ap.Path)
}

// Check returns ErrIncompatible unless ap can serve as the volume p describes.
func (p *Plan) Check(ap *efs.AccessPoint) error {
	if why := p.incompatibility(ap); why != "" {
		return fmt.Errorf("%w: access point %s for volume %q: %s", ErrIncompatible, ap.ID, p.Name, why)
	}
	return nil
}

// incompatibility says why ap cannot serve as the volume p describes, or "".
func (p *Plan) incompatibility(ap *efs.AccessPoint) string {
	if ap.FileSystemID != p.Params.FileSystemID {
		return fmt.Sprintf("file system %s, want %s", ap.FileSystemID, p.Params.FileSystemID)
	}
	// Client tokens are per account, not per cluster: another cluster's
	// claim of the same name (reuseAccessPoint) finds this token too. An
	// access point without the tag (upstream's, or of the release before
	// cluster IDs) is judged by the other checks.
	if id, ok := ownership.OtherCluster(ap, p.Cluster); ok {
		return fmt.Sprintf("made by cluster %q, not this one (%q)", id, p.Cluster)
	}
	if p.Params.ReuseAccessPoint {
		// The token is a hash of the claim name alone (as upstream, so its
		// access points are found): a claim of that name in another
		// namespace, class or cluster finds the same access point and must
		// not get it.
		if why := p.reuseMismatch(ap); why != "" {
			return why
		}
	} else if ap.Path != p.Input.Path && !p.upstreamUniqueDir(ap) {
		return fmt.Sprintf("root directory %q, want %q", ap.Path, p.Input.Path)
	}
	if c, ok := ap.Tags[ownership.TagCapacity]; ok && c != CapacityTag(p.Capacity) {
		return fmt.Sprintf("capacity %s bytes, want %d", c, p.Capacity)
	}
	uid, g := PosixIDs(ap)
	switch {
	case p.Params.GID >= 0 && g != p.Params.GID:
		return fmt.Sprintf("gid %d, want %d", g, p.Params.GID)
	case p.Params.UID >= 0 && uid != p.Params.UID:
		return fmt.Sprintf("uid %d, want %d", uid, p.Params.UID)
	}
	if p.Params.NeedsGIDAllocation() {
		// The allocated GID went to whichever of uid/gid the class leaves open.
		alloc := g
		if p.Params.GID >= 0 {
			alloc = uid
		}
		if alloc < p.Params.GIDRangeStart || alloc > p.Params.GIDRangeEnd {
			return fmt.Sprintf("allocated id %d outside [%d, %d]", alloc, p.Params.GIDRangeStart, p.Params.GIDRangeEnd)
		}
	}
	return ""
}

// reuseMismatch says why ap, found by the reuseAccessPoint token, belongs to
// another claim than p's, or "". Access points without our tags (made by the
// upstream driver) are judged by their root directory alone.
func (p *Plan) reuseMismatch(ap *efs.AccessPoint) string {
	if ns, ok := ap.Tags[ownership.TagClaimNamespace]; ok && ns != p.Params.PVCNamespace {
		return fmt.Sprintf("made for a claim in namespace %q, not %q", ns, p.Params.PVCNamespace)
	}
	if name, ok := ap.Tags[ownership.TagClaimName]; ok && name != p.Params.PVCName {
		return fmt.Sprintf("made for claim %q, not %q", name, p.Params.PVCName)
	}
	if !p.Params.RootDirFits(ap.Path) {
		return fmt.Sprintf("root directory %q is not one this class makes (it makes %q)", ap.Path, p.Input.Path)
	}
	return ""
}

func PosixIDs(ap *efs.AccessPoint) (uid, gid int64) {
	if ap.PosixUser == nil {
		return -1, -1
	}
	return ap.PosixUser.UID, ap.PosixUser.GID
}

func PosixGID(ap *efs.AccessPoint) int64 {
	_, g := PosixIDs(ap)
	return g
}

// AllocatedID is the id the allocator handed out for ap: its gid, or its uid
// when the class fixed the gid.
func AllocatedID(fixedGID int64, ap *efs.AccessPoint) int64 {
	uid, g := PosixIDs(ap)
	if fixedGID >= 0 {
		return uid
	}
	return g
}
