package audit

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	stressaudit "github.com/efs-csi/efs-csi-driver/internal/stress/audit"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// clockSkew is how far the controller's clock (a record's Created) and the
// API server's (the Lease's creation) may disagree (tests shorten it).
var clockSkew = time.Minute

// pv is a PersistentVolume of the driver with its handle parsed.
type pv struct {
	kube.PersistentVolume
	id volume.ID
}

func (p *pv) claim() string { return claimName(p.ClaimNamespace, p.ClaimName) }

func claimName(ns, name string) string {
	if ns == "" && name == "" {
		return ""
	}
	return ns + "/" + name
}

// proof is whether an orphan collector has been watching PVs, and since
// when: only for a volume created after that does the record's bound mark
// say whether a PV ever named it.
type proof struct {
	watching bool
	since    time.Time
	why      string // why not, when not
}

// fsInput is what the audit knows of one file system when it judges it.
type fsInput struct {
	aps       []efs.AccessPoint
	records   map[string]*journal.Record // this file system's, by client token
	pvs       []*pv                      // the PVs whose handle names this file system
	claims    map[string]bool            // namespace/name of every claim of the cluster
	cluster   string                     // this cluster's ID; "" unknown
	collector proof
	now       time.Time
	grace     time.Duration
	fixedGIDs map[int64]bool // gid parameters of this file system's classes
}

// candidate is a record the plan may act on.
type candidate struct {
	rec    *journal.Record
	action Action
}

// judgement is what judge found besides the FileSystem's figures.
type judgement struct {
	leaks []candidate
	// missing are the PVs naming an access point the listing does not
	// show: phantoms unless DescribeAccessPoint finds it (EFS lists with a
	// lag).
	missing []*pv
}

// recordOf is the record that proves ap this cluster's, or nil: the
// record of its file system and client token, naming it (or, before the
// create's answer was recorded, its root directory). The controller's
// agrees() is the same rule.
func recordOf(ap *efs.AccessPoint, records map[string]*journal.Record) *journal.Record {
	if rec := records[ap.ClientToken]; ap.ClientToken != "" && ownership.Agrees(rec, ap) {
		return rec
	}
	return nil
}

// ownerOf says whose ap is, by pkg/ownership's rule (the controller's),
// with this cluster's ID told from others'.
func ownerOf(ap *efs.AccessPoint, rec *journal.Record, cluster string) (Owner, string) {
	if rec != nil {
		return OwnerThisCluster, "this cluster's record names it (volume " + rec.Name + ")"
	}
	id, other := ownership.OtherCluster(ap, cluster)
	switch kind, _ := ownership.Of(ap, nil); {
	case other && cluster == "":
		return OwnerOtherCluster, fmt.Sprintf("tagged with cluster ID %q; this cluster's ID is unknown (--cluster-id)", id)
	case other:
		return OwnerOtherCluster, fmt.Sprintf("tagged with another cluster's ID %q", id)
	case kind == ownership.Tagged && id != "":
		return OwnerUnrecorded, "this driver's tags with this cluster's ID, but no record: an earlier release's, or forged (tags prove nothing)"
	case kind == ownership.Tagged:
		return OwnerUnrecorded, "this driver's tags without a cluster ID, and no record: a release before cluster IDs or the record, a controller without an ID, or forged"
	case kind == ownership.TokenOnly:
		return OwnerUnrecorded, "this driver's GID token and cluster tag (its default tags say no more), but no record of this cluster: another cluster's on a shared file system, or made for a record that is gone"
	case kind == ownership.Upstream:
		return OwnerUpstream, "the upstream driver's: its cluster tag, a provisioner volume name as client token, no record"
	case kind == ownership.UpstreamReuse:
		return OwnerUpstream, "the upstream driver's reuseAccessPoint: its cluster tag, a claim-name hash as client token, no record"
	case kind == ownership.Untagged:
		return OwnerUpstream, "untagged, with a provisioner volume name as client token and a root made for it: the upstream driver's (enableTagging false), or this driver's before the record"
	case ap.Tags[ownership.TagCluster] == "true":
		return OwnerOther, "the driver's cluster tag, but neither a volume-name tag nor a provisioner's token: not a CSI volume's"
	}
	return OwnerOther, "no CSI driver's tags or token: made by hand, by tooling, or another provisioner"
}

// leakWhy applies the orphan collector's rule to rec, whose access point
// no PV names: a leak only if its claim is gone, its record is older than
// the grace period and says never bound, and a collector watched PVs for
// its whole life (else "never bound" is not proven: a Retain PV deleted
// by hand looks the same). finding says whether it counts as one when it
// is not a leak (false: on its way).
func (in *fsInput) leakWhy(rec *journal.Record) (leak, finding bool, why string) {
	claim := claimName(rec.ClaimNamespace, rec.ClaimName)
	age := in.now.Sub(rec.Created).Truncate(time.Second)
	switch {
	case rec.Bound:
		return false, true, "a PersistentVolume named it (the record is marked bound) and none does now: its PV was deleted by hand; a Retain volume's data may be wanted"
	case rec.ClaimNamespace == "" || rec.ClaimName == "":
		return false, true, "the record names no claim (a provisioner without --extra-create-metadata): never provable"
	case in.claims[claim]:
		return false, false, "its claim " + claim + " exists: provisioning, or its PV is on its way"
	case age < in.grace:
		return false, false, fmt.Sprintf("created %s ago, within the grace period (%s): its PV may be on its way", age, in.grace)
	case rec.AccessPoint == "":
		// The record names the access point before any create answers
		// it: none did, so no PV can have named it.
		return true, true, fmt.Sprintf("this cluster's record, claim %s gone, its create never answered (the record never learned the access point, which carries its token at its path): no PV can have named it; created %s ago",
			claim, age)
	case !in.collector.watching:
		return false, true, "claim " + claim + " is gone and the record says never bound, but " + in.collector.why + ": that no PV ever named it is not proven (a Retain PV deleted by hand looks the same)"
	case rec.Created.Before(in.collector.since.Add(clockSkew)):
		return false, true, fmt.Sprintf("claim %s is gone and the record says never bound, but it was created (%s) before the orphan collector began watching PVs (%s): that no PV ever named it is not proven",
			claim, rec.Created.Format(time.RFC3339), in.collector.since.Format(time.RFC3339))
	}
	return true, true, fmt.Sprintf("this cluster's record, claim %s gone, no PersistentVolume ever named it (the orphan collector has watched PVs since %s), created %s ago",
		claim, in.collector.since.Format(time.RFC3339), age)
}

// judge classifies every access point of in and fills fs.
func judge(fs *FileSystem, in *fsInput) judgement {
	var j judgement
	fs.AccessPoints = len(in.aps)
	if fs.Limit > 0 {
		fs.LimitUsed = float64(len(in.aps)) / float64(fs.Limit)
	}
	fs.ByOwner = map[Owner]int{}
	named := map[string][]*pv{} // access point -> the PVs naming it
	for _, p := range in.pvs {
		if p.id.AccessPointID != "" {
			named[p.id.AccessPointID] = append(named[p.id.AccessPointID], p)
		}
	}
	byID := make(map[string]*efs.AccessPoint, len(in.aps))
	byToken := make(map[string]*efs.AccessPoint, len(in.aps))
	owners := make(map[string]Owner, len(in.aps))
	recs := make(map[string]*journal.Record, len(in.records))
	for i := range in.aps {
		ap := &in.aps[i]
		byID[ap.ID] = ap
		if ap.ClientToken != "" {
			byToken[ap.ClientToken] = ap
		}
		rec := recordOf(ap, in.records)
		owner, ownerWhy := ownerOf(ap, rec, in.cluster)
		owners[ap.ID], recs[ap.ID] = owner, rec
		fs.ByOwner[owner]++
		if len(named[ap.ID]) > 0 {
			fs.Referenced++
			continue
		}
		u := Unreferenced{AccessPoint: ap.ID, Path: ap.Path, Token: ap.ClientToken, Owner: owner, OwnerWhy: ownerWhy,
			Volume: ap.Tags[ownership.TagVolumeName], Claim: claimName(ap.Tags[ownership.TagClaimNamespace], ap.Tags[ownership.TagClaimName])}
		if ap.PosixUser != nil {
			u.GID = &ap.PosixUser.GID
		}
		switch {
		case ap.LifeCycleState == "deleting":
			u.Why = "being deleted"
		case rec != nil:
			u.Volume, u.Claim = rec.Name, claimName(rec.ClaimNamespace, rec.ClaimName)
			u.Leak, u.Finding, u.Why = in.leakWhy(rec)
			if other, ok := ap.Tags[ownership.TagClusterID]; u.Leak && ok && other != in.cluster {
				u.Leak, u.Why = false, fmt.Sprintf("recorded here but tagged with cluster ID %q: DeleteVolume refuses it; check by hand", other)
			}
			if u.Leak {
				j.leaks = append(j.leaks, candidate{rec, Action{Kind: ActionDeleteAccessPoint, FileSystem: rec.FileSystem, AccessPoint: ap.ID,
					Path: ap.Path, Volume: rec.Name, Token: rec.Token, Claim: u.Claim, Created: rec.Created, Why: u.Why}})
			}
		case owner == OwnerUnrecorded || owner == OwnerUpstream:
			u.Finding, u.Why = true, "no PersistentVolume of this cluster names it and no record proves it this cluster's: a leak if this cluster made it; check by hand"
		default:
			u.Why = "no PersistentVolume of this cluster names it; not this cluster's to judge"
		}
		if u.Finding {
			fs.Findings++
		}
		fs.Unreferenced = append(fs.Unreferenced, u)
	}

	// Leaks first, then the other findings, by owner, then the rest.
	rank := func(u *Unreferenced) int {
		switch {
		case u.Leak:
			return 0
		case u.Finding:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(fs.Unreferenced, func(a, b Unreferenced) int {
		return cmp.Or(cmp.Compare(rank(&a), rank(&b)), cmp.Compare(slices.Index(Owners, a.Owner), slices.Index(Owners, b.Owner)),
			cmp.Compare(a.Path, b.Path))
	})

	for _, p := range in.pvs {
		if p.id.AccessPointID != "" && byID[p.id.AccessPointID] == nil {
			j.missing = append(j.missing, p)
		}
	}

	// Records whose access point is gone, or was never made.
	for _, tok := range slices.Sorted(maps.Keys(in.records)) {
		rec := in.records[tok]
		if ap := byToken[tok]; ap != nil && recordOf(ap, in.records) == rec {
			continue
		}
		if rec.AccessPoint != "" && len(named[rec.AccessPoint]) > 0 {
			continue // a phantom: its PV is reported
		}
		st := StaleRecord{Volume: rec.Name, Token: rec.Token, AccessPoint: rec.AccessPoint, Claim: claimName(rec.ClaimNamespace, rec.ClaimName)}
		st.Leak, st.Why = in.staleWhy(rec, byToken[tok])
		if st.Leak {
			j.leaks = append(j.leaks, candidate{rec, Action{Kind: ActionReleaseRecord, FileSystem: rec.FileSystem, AccessPoint: rec.AccessPoint,
				Path: rec.Path, Volume: rec.Name, Token: rec.Token, Claim: st.Claim, Created: rec.Created, Why: st.Why}})
		}
		fs.StaleRecords = append(fs.StaleRecords, st)
		fs.Findings++
	}

	for _, g := range stressaudit.SharedGIDs(in.aps, nil) {
		sg := SharedGID{GID: g.GID, Intended: in.fixedGIDs[g.GID]}
		for _, id := range g.AccessPoints {
			ap := byID[id]
			h := GIDHolder{AccessPoint: id, Owner: owners[id], Volume: ap.Tags[ownership.TagVolumeName]}
			ns := map[string]bool{}
			for _, p := range named[id] {
				h.PVs = append(h.PVs, p.Name)
				ns[p.ClaimNamespace] = true
			}
			if rec := recs[id]; rec != nil {
				h.Volume = rec.Name
				ns[rec.ClaimNamespace] = true
			}
			ns[ap.Tags[ownership.TagClaimNamespace]] = true
			delete(ns, "")
			h.Namespaces = slices.Sorted(maps.Keys(ns))
			sg.Holders = append(sg.Holders, h)
		}
		if !sg.Intended {
			fs.Findings++
		}
		fs.SharedGIDs = append(fs.SharedGIDs, sg)
	}
	return j
}

// staleWhy applies the rule to a record whose access point the listing
// does not show: the record alone is released (CollectOrphan: the access
// point is described, or the file system listed, once more first), when
// its claim is gone, it was never marked bound (CollectOrphan refuses a
// bound one) and it is older than the grace period. No data is at stake,
// so no collector's watch is needed.
func (in *fsInput) staleWhy(rec *journal.Record, carrier *efs.AccessPoint) (bool, string) {
	claim := claimName(rec.ClaimNamespace, rec.ClaimName)
	age := in.now.Sub(rec.Created).Truncate(time.Second)
	gone := "its access point " + cmp.Or(rec.AccessPoint, "(none recorded)") + " is not listed"
	if rec.AccessPoint == "" {
		gone = "no access point carries its token: its create made none"
	}
	switch {
	case carrier != nil:
		return false, fmt.Sprintf("access point %s carries its token at %q, not the recorded %q: whose it is is unknown", carrier.ID, carrier.Path, rec.Path)
	case rec.Bound:
		return false, gone + "; the record is marked bound: check its PV's history by hand"
	case rec.ClaimNamespace == "" || rec.ClaimName == "":
		return false, gone + "; the record names no claim"
	case in.claims[claim]:
		return false, gone + "; its claim " + claim + " exists: its create may be under way"
	case age < in.grace:
		return false, fmt.Sprintf("%s; created %s ago, within the grace period (%s)", gone, age, in.grace)
	}
	return true, fmt.Sprintf("%s; claim %s gone, never bound, created %s ago: the record and its GID are released", gone, claim, age)
}

// phantomWhy says what a PV's missing access point is, from
// DescribeAccessPoint's answer (ap nil: not found).
func phantomWhy(p *pv, ap *efs.AccessPoint) (phantom bool, why string) {
	switch {
	case ap == nil:
		return true, "access point " + p.id.AccessPointID + " does not exist: the PV mounts nothing"
	case ap.FileSystemID != p.id.FileSystemID:
		return true, fmt.Sprintf("access point %s is on file system %s, the volume handle says %s", ap.ID, ap.FileSystemID, p.id.FileSystemID)
	}
	return false, "listed late (EFS lists with a lag)"
}

// fixedGIDs are the gid parameters of classes.
func fixedGIDs(classes []Class) map[int64]bool {
	out := map[int64]bool{}
	for _, c := range classes {
		if c.FixedGID != nil {
			out[*c.FixedGID] = true
		}
	}
	return out
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K { return slices.Sorted(maps.Keys(m)) }

// join writes a list for a table cell.
func join(ss []string) string {
	if len(ss) == 0 {
		return "-"
	}
	return strings.Join(ss, ", ")
}
