// Package audit is `efs-csi-driver audit`: a read-only look at what any EFS
// CSI driver (this one, an earlier release, the upstream driver) left in a
// live cluster's file systems, and with --fix --yes the deletion of what is
// provably this cluster's leak.
//
// It reads the cluster's PersistentVolumes, claims and StorageClasses, this
// cluster's record (pkg/journal) and each file system's access points
// (paged and paced through pkg/efs, as the driver), and reports per file
// system: the access points no PV names and whose each is (the record
// proves this cluster's; tags and client tokens only hint at the rest,
// since anyone who may tag access points can forge them), the PVs whose
// access point is gone, GIDs carried by more than one access point, the
// directories under the classes' base paths that no access point reaches
// (with a mount of the file system, opt-in), other clusters' and the
// upstream driver's access points counted apart, and how close each file
// system is to the access point limit.
//
// A leak is provable only as the orphan collector proves one
// (docs/leaks.md, "The leak no driver can prevent alone"): this cluster's
// record has it, its claim is gone, no PersistentVolume names it and none
// ever did, which only an orphan collector that watched PVs for the
// volume's whole life can say (the record's bound mark); every deletion
// goes through the controller's own CollectOrphan, under the same
// ownership checks as DeleteVolume.
package audit

import (
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/plot"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
)

// Owner says whose an access point is: the record proves this cluster's;
// for one without a record, tags and the client token's shape say what
// made it, which anyone who may tag access points can forge.
type Owner string

const (
	// OwnerThisCluster: this cluster's record names it.
	OwnerThisCluster Owner = "this-cluster"
	// OwnerUnrecorded: this driver's tags, with this cluster's ID or none,
	// but no record: an earlier release's (before the record), or forged.
	OwnerUnrecorded Owner = "unrecorded"
	// OwnerOtherCluster: tagged with another cluster's ID.
	OwnerOtherCluster Owner = "other-cluster"
	// OwnerUpstream: the upstream driver's shape (its cluster tag and a
	// provisioner volume name or claim hash as client token; or no tag at
	// all, a provisioner volume name as token and a root made for it).
	OwnerUpstream Owner = "upstream"
	// OwnerOther: no CSI driver's (made by hand, Terraform, the console).
	OwnerOther Owner = "other"
)

// Owners lists every Owner in the order reports show them.
var Owners = []Owner{OwnerThisCluster, OwnerUnrecorded, OwnerOtherCluster, OwnerUpstream, OwnerOther}

// Report is everything one audit found: the schema of --output json.
type Report struct {
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	// Outcome is clean (no finding), findings, or error (something could
	// not be read: the figures are partial).
	Outcome     string        `json:"outcome"`
	Cluster     Cluster       `json:"cluster"`
	Totals      Totals        `json:"totals"`
	FileSystems []*FileSystem `json:"fileSystems"`
	// Plan is what --fix deletes (with --yes, each action's result).
	Plan     *Plan    `json:"plan,omitempty"`
	Requests Requests `json:"requests"`
	Errors   []string `json:"errors,omitempty"`
	Options  any      `json:"options"`
	// Omits says what this JSON leaves out; the table and the HTML page
	// say what they leave out, and both point here for the full lists.
	Omits string `json:"omits"`
}

// Cluster is what the audit read of Kubernetes and the record.
type Cluster struct {
	API      string `json:"api"` // where the Kubernetes API was found (kubeconfig context, in-cluster)
	Driver   string `json:"driver"`
	ID       string `json:"id"`
	IDSource string `json:"idSource"`
	// Journal says where the record was read; JournalError why it could
	// not be (then nothing is this cluster's by proof, and --fix plans
	// nothing).
	Journal           string    `json:"journal"`
	JournalError      string    `json:"journalError,omitempty"`
	Records           int       `json:"records"`
	Collector         Collector `json:"orphanCollector"`
	PersistentVolumes int       `json:"persistentVolumes"`
	Claims            int       `json:"claims"`
	StorageClasses    []Class   `json:"storageClasses"`
}

// Collector is what the orphan collector's Lease says: whether a
// collector has been watching PersistentVolumes, and since when. Only
// then does the record's "bound" mark say whether a PV ever named a
// volume created after that.
type Collector struct {
	Lease    string           `json:"lease"`
	State    *kube.LeaseState `json:"state,omitempty"`
	Watching bool             `json:"watching"`
	Why      string           `json:"why"`
}

// Class is a StorageClass of the driver, as the audit resolved it.
type Class struct {
	Name string `json:"name"`
	// FileSystem is the file system the class names, or its several
	// comma-separated (fileSystems holds them apart).
	FileSystem  string `json:"fileSystem,omitempty"`
	API         string `json:"api"`
	Credentials string `json:"credentials"` // "own", or the role of its provisioner secret
	BasePath    string `json:"basePath,omitempty"`
	FixedGID    *int64 `json:"fixedGID,omitempty"`
	Error       string `json:"error,omitempty"`

	fileSystems []string
}

// Totals add up every file system (and, as a FileSystem's Counts, one).
type Totals struct {
	AccessPoints int           `json:"accessPoints"`
	ByOwner      map[Owner]int `json:"byOwner"`
	Referenced   int           `json:"referenced"`
	Unreferenced int           `json:"unreferenced"`
	// UnreferencedFindings are the unreferenced access points that count
	// as findings (not another cluster's, no one's, nor on their way).
	UnreferencedFindings int `json:"unreferencedFindings"`
	Leaks                int `json:"provableLeaks"` // unreferenced access points in the plan
	Phantoms             int `json:"phantoms"`
	SharedGIDs           int `json:"sharedGIDs"` // those no class fixes: findings
	// IntendedSharedGIDs are shared GIDs a class's gid parameter fixes:
	// shared on purpose, not findings.
	IntendedSharedGIDs int `json:"intendedSharedGIDs"`
	StaleRecords       int `json:"staleRecords"`
	StaleLeaks         int `json:"staleRecordLeaks"` // stale records in the plan
	OrphanDirs         int `json:"orphanDirectories"`
	// Findings counts what is wrong: provable leaks, the other unreferenced
	// access points of this cluster, this driver or upstream that are not
	// on their way (provisioning, being deleted), phantoms, shared GIDs that
	// no class fixes, stale records and orphan directories.
	Findings int `json:"findings"`
	// Fixed counts the findings --fix --yes fixed (each a plan's action
	// done): the findings above are the audit's, before the fix.
	Fixed int `json:"fixed"`
}

// FileSystem is what one file system holds.
type FileSystem struct {
	ID          string   `json:"id"`
	API         string   `json:"api"`
	Credentials string   `json:"credentials"`
	Classes     []string `json:"storageClasses,omitempty"`
	Error       string   `json:"error,omitempty"`

	AccessPoints int            `json:"accessPoints"`
	Limit        int            `json:"limit"`
	LimitUsed    float64        `json:"limitUsed"` // fraction of Limit
	ByOwner      map[Owner]int  `json:"byOwner"`
	Referenced   int            `json:"referenced"` // named by a PV
	Unreferenced []Unreferenced `json:"unreferenced"`
	Phantoms     []Phantom      `json:"phantoms"`
	SharedGIDs   []SharedGID    `json:"sharedGIDs"`
	StaleRecords []StaleRecord  `json:"staleRecords"`
	Directories  *DirScan       `json:"directories,omitempty"`
	Findings     int            `json:"findings"`
	// Counts add up the lists above, as the table and the HTML page show
	// them.
	Counts Totals `json:"counts"`
}

// Unreferenced is an access point no PersistentVolume names.
type Unreferenced struct {
	AccessPoint string `json:"accessPoint"`
	Path        string `json:"path"`
	Token       string `json:"clientToken,omitempty"`
	GID         *int64 `json:"gid,omitempty"`
	Owner       Owner  `json:"owner"`
	OwnerWhy    string `json:"ownerWhy"`
	Volume      string `json:"volume,omitempty"` // the record's volume name, else the volume-name tag
	Claim       string `json:"claim,omitempty"`  // namespace/name, the record's else the tags'
	// Leak: provably this cluster's leak, in the --fix plan.
	Leak bool `json:"provableLeak"`
	// Finding: counted as one (not another cluster's, no one's, nor on
	// its way: provisioning, being deleted).
	Finding bool   `json:"finding"`
	Why     string `json:"why"`
}

// Phantom is a PersistentVolume whose access point is gone.
type Phantom struct {
	PV          string `json:"pv"`
	Claim       string `json:"claim,omitempty"`
	Class       string `json:"storageClass,omitempty"`
	Handle      string `json:"volumeHandle"`
	AccessPoint string `json:"accessPoint"`
	Why         string `json:"why"`
}

// SharedGID is a GID more than one access point carries.
type SharedGID struct {
	GID     int64       `json:"gid"`
	Holders []GIDHolder `json:"holders"`
	// Intended: a class of the file system fixes this gid parameter, so
	// its volumes share it on purpose (not a finding).
	Intended bool `json:"intended"`
}

// GIDHolder is one access point carrying a shared GID.
type GIDHolder struct {
	AccessPoint string   `json:"accessPoint"`
	Owner       Owner    `json:"owner"`
	PVs         []string `json:"pvs,omitempty"`
	Namespaces  []string `json:"namespaces,omitempty"`
	Volume      string   `json:"volume,omitempty"`
}

// StaleRecord is a record of this cluster whose access point is gone (or
// was never made) and that no PersistentVolume names.
type StaleRecord struct {
	Volume      string `json:"volume"`
	Token       string `json:"clientToken"`
	AccessPoint string `json:"accessPoint,omitempty"`
	Claim       string `json:"claim,omitempty"`
	Leak        bool   `json:"provableLeak"` // in the --fix plan: the record is released
	Why         string `json:"why"`
}

// DirScan is the scan of the directories under a file system's base
// paths (opt-in: it needs the file system mounted).
type DirScan struct {
	Root      string   `json:"root"` // where the file system's root was read
	BasePaths []string `json:"basePaths"`
	Read      int      `json:"directoriesRead"`
	// Orphans are directories no access point (nor static PV) reaches:
	// no root directory is one, inside one, or contains one.
	Orphans []string `json:"orphans"`
	More    int      `json:"more,omitempty"` // orphans beyond the listed ones
	// Trash are the directories root removal moved aside, waiting for
	// their purge (or their restore), oldest first: not orphans, not
	// findings (pkg/controller/trash.go).
	Trash []TrashWait `json:"trash"`
	// Snapshots are the copies in the snapshot area (pkg/snapshot) that
	// the record names; SnapshotsLeft, findings, the directories there
	// that no snapshot or unfinished restore of the record accounts for.
	Snapshots     int      `json:"snapshots,omitempty"`
	SnapshotsLeft []string `json:"snapshotsLeft,omitempty"`
	Error         string   `json:"error,omitempty"`
}

// TrashWait is one directory in root removal's trash.
type TrashWait struct {
	Path    string    `json:"path"`    // where it was
	Entry   string    `json:"entry"`   // where it is
	MovedAt time.Time `json:"movedAt"` // by the clock of the controller that moved it
	// Purging: a purge of it began (it is removed, never restored).
	Purging bool `json:"purging,omitempty"`
}

// Plan is what --fix deletes, and with --yes what came of each action.
type Plan struct {
	Applied bool     `json:"applied"`
	Actions []Action `json:"actions"`
	// Note says what the plan leaves out, and why, when it is empty.
	Note string `json:"note,omitempty"`
}

// Action kinds.
const (
	// ActionDeleteAccessPoint: the record's access point is deleted
	// (CollectOrphan: DeleteVolume's checks), its record and GID released.
	ActionDeleteAccessPoint = "delete-access-point"
	// ActionReleaseRecord: the record's access point is gone (or was
	// never made): the record and its GID are released.
	ActionReleaseRecord = "release-record"
)

// Action is one step of the plan.
type Action struct {
	Kind        string    `json:"kind"`
	FileSystem  string    `json:"fileSystem"`
	AccessPoint string    `json:"accessPoint,omitempty"`
	Path        string    `json:"path,omitempty"`
	Volume      string    `json:"volume"`
	Token       string    `json:"clientToken"`
	Claim       string    `json:"claim"`
	Created     time.Time `json:"created"`
	Why         string    `json:"why"`
	// Result, with --yes: done, skipped (why) or failed (why).
	Result string `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Requests are the EFS API requests the audit made.
type Requests struct {
	Total int `json:"total"`
	// ByOutcome counts them by pkg/efs's outcome, except the answers the
	// audit expects: "not_found_expected" are DescribeAccessPoints' "not
	// found" for a PV's access point missing from the listing, each the
	// proof of a phantom, not an error.
	ByOutcome  map[string]int `json:"byOutcome"`
	Retries    int            `json:"retries"`
	Latency    []plot.Latency `json:"latency"` // per operation, every attempt
	Timeline   plot.Timeline  `json:"timeline"`
	Events     []plot.Event   `json:"events"` // when each file system's listing began
	NotSampled int            `json:"notSampled,omitempty"`
}
