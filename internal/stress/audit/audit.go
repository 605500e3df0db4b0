// Package audit checks what a workload left behind against what the driver
// promised: every volume reported created exists, nothing else does, GIDs
// are unique, no temporary mount or directory is left, the driver is at rest
// and no live volume lost data. Check is a pure function over plain inputs;
// collect.go gathers those inputs from the EFS API, /proc and the driver's
// metrics.
package audit

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/metrics"
	"github.com/efs-csi/efs-csi-driver/pkg/ownership"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// Marker is a file the workload wrote into a live volume's root directory
// right after its create answered, and whether it is still there.
type Marker struct {
	Volume  string `json:"volume"`
	Path    string `json:"path"`
	Present bool   `json:"present"`
}

// Inputs is everything an audit looks at.
type Inputs struct {
	FileSystemID string
	// FileSystemIDs: the run's file systems when its class names several
	// (FileSystemID is then ""): every volume must be on one of them.
	FileSystemIDs []string
	AccessPoints  []efs.AccessPoint // every access point of the file system
	// Live maps each volume reported created and not deleted to its volume ID.
	Live map[string]string
	// RunNames holds every volume name the run used: an access point tagged
	// with one of them belongs to the run.
	RunNames map[string]bool
	// Exclusive: the file system belongs to the run, so every access point
	// on it must be owned by a live volume.
	Exclusive bool
	// Answers maps a name to every distinct volume ID the provisioners got
	// for it; more than one means two volumes for one claim.
	Answers map[string][]string
	Mounts  []string // temporary mount points still mounted
	TmpDirs []string // temporary mount directories still present
	// Gauges holds the driver's metrics samples; nil when not scraped.
	Gauges  map[string]float64
	Markers []Marker
	// RootDirsLeft lists root directories of deleted volumes still present
	// although the driver removes root directories on delete.
	RootDirsLeft []string
	// Dirs are the directories of the file systems that directory volumes
	// (efs-dir) of the run may be, by DirKey ("fs-X:/stress/x"):
	// each live one's, and every directory of the run's base directory.
	// Nil when the run has no directory volumes.
	Dirs map[string]Dir
	// DirsOwned: a directory of a run's volume name that no live volume
	// owns is a leak (the driver removes a deleted volume's directory).
	DirsOwned bool
}

// Dir is a directory of the file system as the audit sees it.
type Dir struct {
	Exists   bool  `json:"exists"`
	UID, GID int64 `json:"-"`
	// Name is the volume name it was made for (its last component's
	// prefix, as the stress tool names volumes), "" if none of the run's.
	Name string `json:"-"`
}

// Finding is one thing wrong, named so that a reader can look it up.
type Finding struct {
	Subject string `json:"subject"` // an access point, a volume, a GID, a path
	Detail  string `json:"detail"`
}

// Report is the outcome of one audit.
type Report struct {
	AccessPoints  int       `json:"accessPoints"`
	LiveVolumes   int       `json:"liveVolumes"`
	Leaked        []Finding `json:"leakedAccessPoints"`
	Missing       []Finding `json:"missingVolumes"`
	DuplicateGIDs []Finding `json:"duplicateGIDs"`
	Conflicts     []Finding `json:"conflictingAnswers"`
	Mounts        []Finding `json:"leftoverMounts"`
	TmpDirs       []Finding `json:"leftoverTempDirs"`
	GaugesChecked bool      `json:"gaugesChecked"`
	Gauges        []Finding `json:"gaugesNotAtRest"`
	Markers       int       `json:"markersChecked"`
	LostMarkers   []Finding `json:"lostMarkers"`
	RootDirsLeft  []Finding `json:"rootDirsLeft"`
}

// Figure is one audit number, for tables.
type Figure struct {
	Name  string
	Value int
}

// Figures lists every finding count in a fixed order.
func (r *Report) Figures() []Figure {
	return []Figure{
		{"leaked access points", len(r.Leaked)},
		{"volumes missing", len(r.Missing)},
		{"duplicate GIDs", len(r.DuplicateGIDs)},
		{"conflicting answers", len(r.Conflicts)},
		{"leftover temp mounts", len(r.Mounts)},
		{"leftover temp dirs", len(r.TmpDirs)},
		{"gauges not at rest", len(r.Gauges)},
		{"lost markers", len(r.LostMarkers)},
		{"root dirs left", len(r.RootDirsLeft)},
	}
}

// Total is the number of findings: zero means clean.
func (r *Report) Total() int {
	n := 0
	for _, f := range r.Figures() {
		n += f.Value
	}
	return n
}

// All lists every finding with its category, for logs.
func (r *Report) All() []string {
	var out []string
	add := func(cat string, fs []Finding) {
		for _, f := range fs {
			out = append(out, fmt.Sprintf("%s: %s: %s", cat, f.Subject, f.Detail))
		}
	}
	add("leaked", r.Leaked)
	add("missing", r.Missing)
	add("duplicate GID", r.DuplicateGIDs)
	add("conflict", r.Conflicts)
	add("mount", r.Mounts)
	add("temp dir", r.TmpDirs)
	add("gauge", r.Gauges)
	add("lost marker", r.LostMarkers)
	add("root dir left", r.RootDirsLeft)
	return out
}

// ParseVolumeID splits a provisioned volume ID, `efs:fs-X::fsap-Y`, the
// older `fs-X::fsap-Y` or S3 Files' `s3files:fs-X::fsap-Y`, into its file
// system and access point.
func ParseVolumeID(id string) (fsID, apID string, ok bool) {
	rest, s3 := strings.CutPrefix(id, "s3files:")
	if !s3 {
		rest = strings.TrimPrefix(id, "efs:")
	}
	fsID, apID, ok = strings.Cut(rest, "::")
	if !ok || !strings.HasPrefix(fsID, "fs-") || !strings.HasPrefix(apID, "fsap-") {
		return "", "", false
	}
	return fsID, apID, true
}

// Check audits in.
func Check(in Inputs) *Report {
	r := &Report{AccessPoints: len(in.AccessPoints), LiveVolumes: len(in.Live), Markers: len(in.Markers)}
	byID := make(map[string]*efs.AccessPoint, len(in.AccessPoints))
	for i := range in.AccessPoints {
		byID[in.AccessPoints[i].ID] = &in.AccessPoints[i]
	}

	// Every live volume exists, on the right file system, and is its own.
	owned := map[string]string{}     // access point → live volume name
	dirGIDs := map[string][]string{} // by file system and GID (dirGID)
	for _, name := range sortedKeys(in.Live) {
		id := in.Live[name]
		if vid, err := volume.ParseID(id); err == nil && vid.Dir {
			r.checkDir(in, name, vid, owned, dirGIDs)
			continue
		}
		fsID, apID, ok := ParseVolumeID(id)
		switch ap := byID[apID]; {
		case !ok:
			r.Missing = append(r.Missing, Finding{name, fmt.Sprintf("volume ID %q is not a provisioned volume ID", id)})
		case !in.runFS(fsID):
			r.Missing = append(r.Missing, Finding{name, fmt.Sprintf("volume %s is on file system %s, not the run's", id, fsID)})
		case ap == nil:
			r.Missing = append(r.Missing, Finding{name, fmt.Sprintf("access point %s of volume %s does not exist", apID, id)})
		case ap.FileSystemID != fsID:
			r.Missing = append(r.Missing, Finding{name, fmt.Sprintf("access point %s is on file system %s, volume ID says %s", apID, ap.FileSystemID, fsID)})
		case owned[apID] != "":
			r.Missing = append(r.Missing, Finding{name, fmt.Sprintf("access point %s is also volume %s", apID, owned[apID])})
		default:
			owned[apID] = name
			if tag, ok := ap.Tags[ownership.TagVolumeName]; ok && tag != name {
				r.Missing = append(r.Missing, Finding{name, fmt.Sprintf("access point %s is tagged for volume %s", apID, tag)})
			}
		}
	}

	// Nothing of the run exists that no live volume owns.
	for _, ap := range in.AccessPoints {
		name := ap.Tags[ownership.TagVolumeName]
		if owned[ap.ID] != "" || !(in.Exclusive || in.RunNames[name]) {
			continue
		}
		r.Leaked = append(r.Leaked, Finding{ap.ID, fmt.Sprintf("volume name %q, path %s, no live volume owns it", name, ap.Path)})
	}
	// Nor a directory of the run's.
	for _, p := range sortedKeys(in.Dirs) {
		if d := in.Dirs[p]; in.DirsOwned && d.Exists && owned["dir:"+p] == "" && in.RunNames[d.Name] {
			r.Leaked = append(r.Leaked, Finding{p, fmt.Sprintf("directory of volume name %q, no live volume owns it", d.Name)})
		}
	}

	// GIDs are unique among the access points the driver created.
	for _, g := range SharedGIDs(in.AccessPoints, func(ap *efs.AccessPoint) bool {
		return ap.Tags[ownership.TagCluster] == "true" || in.RunNames[ap.Tags[ownership.TagVolumeName]]
	}) {
		r.DuplicateGIDs = append(r.DuplicateGIDs, Finding{strconv.FormatInt(g.GID, 10), "shared by " + strings.Join(g.AccessPoints, ", ")})
	}
	// And among the live directory volumes and the access points.
	if len(dirGIDs) > 0 {
		for _, ap := range in.AccessPoints {
			if k := dirGID(ap.FileSystemID, ap.PosixUser); ap.PosixUser != nil && len(dirGIDs[k]) > 0 {
				dirGIDs[k] = append(dirGIDs[k], ap.ID)
			}
		}
		for _, k := range sortedKeys(dirGIDs) {
			if who := dirGIDs[k]; len(who) > 1 {
				r.DuplicateGIDs = append(r.DuplicateGIDs, Finding{k, "shared by " + strings.Join(who, ", ")})
			}
		}
	}

	for _, name := range sortedKeys(in.Answers) {
		if ids := in.Answers[name]; len(ids) > 1 {
			r.Conflicts = append(r.Conflicts, Finding{name, "answered with " + strings.Join(ids, " and ")})
		}
	}
	for _, m := range slices.Sorted(slices.Values(in.Mounts)) {
		r.Mounts = append(r.Mounts, Finding{m, "temporary mount still mounted"})
	}
	for _, d := range slices.Sorted(slices.Values(in.TmpDirs)) {
		r.TmpDirs = append(r.TmpDirs, Finding{d, "temporary mount directory left behind"})
	}
	if in.Gauges != nil {
		r.GaugesChecked = true
		for _, g := range []string{metrics.LocksHeldName, metrics.InFlightName} {
			v, ok := in.Gauges[g]
			switch {
			case !ok:
				r.Gauges = append(r.Gauges, Finding{g, "not exported by the driver"})
			case v != 0:
				r.Gauges = append(r.Gauges, Finding{g, fmt.Sprintf("%g at rest, want 0", v)})
			}
		}
	}
	for _, m := range in.Markers {
		if !m.Present {
			r.LostMarkers = append(r.LostMarkers, Finding{m.Volume, "marker " + m.Path + " is gone: the volume lost data"})
		}
	}
	for _, d := range in.RootDirsLeft {
		r.RootDirsLeft = append(r.RootDirsLeft, Finding{d, "root directory of a deleted volume still exists"})
	}
	return r
}

// checkDir audits the live directory volume name with ID id: its
// directory exists, is no other live volume's, and carries its GID.
func (r *Report) checkDir(in Inputs, name string, id volume.ID, owned map[string]string, gids map[string][]string) {
	key := DirKey(id.FileSystemID, id.Path)
	d := in.Dirs[key]
	switch {
	case !in.runFS(id.FileSystemID):
		r.Missing = append(r.Missing, Finding{name, fmt.Sprintf("volume %s is on file system %s, not the run's", id, id.FileSystemID)})
	case !d.Exists:
		r.Missing = append(r.Missing, Finding{name, fmt.Sprintf("directory %s of volume %s does not exist", id.Path, id)})
	case owned["dir:"+key] != "":
		r.Missing = append(r.Missing, Finding{name, fmt.Sprintf("directory %s is also volume %s", id.Path, owned["dir:"+key])})
	default:
		owned["dir:"+key] = name
		k := dirGID(id.FileSystemID, &efs.PosixUser{GID: d.GID})
		gids[k] = append(gids[k], key)
	}
}

// dirGID names a GID of a file system: "fs-X/50001".
func dirGID(fsID string, u *efs.PosixUser) string {
	if u == nil {
		return ""
	}
	return fsID + "/" + strconv.FormatInt(u.GID, 10)
}

// DirKey is the key of a directory in Inputs.Dirs.
func DirKey(fsID, path string) string { return fsID + ":" + path }

// runFS reports whether fsID is one of the run's file systems (any, when
// none is named).
func (in *Inputs) runFS(fsID string) bool {
	switch {
	case in.FileSystemID != "":
		return fsID == in.FileSystemID
	case len(in.FileSystemIDs) > 0:
		return slices.Contains(in.FileSystemIDs, fsID)
	}
	return true
}

// SharedGID is a GID that more than one access point carries.
type SharedGID struct {
	GID          int64
	AccessPoints []string // their IDs, in the order of the listing
}

// SharedGIDs returns, by GID, the GIDs that more than one of the access
// points counted (nil: all) carries; an access point without a POSIX user
// carries none.
//
// GIDs are per file system: one GID on access points of two file systems
// is not shared.
func SharedGIDs(aps []efs.AccessPoint, counted func(*efs.AccessPoint) bool) []SharedGID {
	type fsGID struct {
		fs  string
		gid int64
	}
	byGID := map[fsGID][]string{}
	for i := range aps {
		ap := &aps[i]
		if ap.PosixUser == nil || (counted != nil && !counted(ap)) {
			continue
		}
		k := fsGID{ap.FileSystemID, ap.PosixUser.GID}
		byGID[k] = append(byGID[k], ap.ID)
	}
	keys := slices.SortedFunc(maps.Keys(byGID), func(a, b fsGID) int {
		return cmp.Or(cmp.Compare(a.gid, b.gid), cmp.Compare(a.fs, b.fs))
	})
	var out []SharedGID
	for _, k := range keys {
		if ids := byGID[k]; len(ids) > 1 {
			out = append(out, SharedGID{k.gid, ids})
		}
	}
	return out
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K { return slices.Sorted(maps.Keys(m)) }
