// Package volume parses what the CO hands the driver: volume IDs,
// StorageClass parameters, and sub paths that must stay inside a base
// directory. Every parsing error wraps ErrInvalidID, ErrInvalidParameter or
// ErrUnsafePath (pkg/driver maps them to InvalidArgument) and names the
// offending value.
package volume

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Sentinel errors.
var (
	// ErrInvalidID: a volume ID that is not one of the forms ParseID accepts.
	ErrInvalidID = errors.New("invalid volume ID")
	// ErrInvalidParameter: a StorageClass parameter (or the request values a
	// parameter combines with) that cannot be honoured. The error is a
	// *ParamError naming the parameter.
	ErrInvalidParameter = errors.New("invalid parameter")
	// ErrUnsafePath: a path that would leave the directory it must stay in.
	ErrUnsafePath = errors.New("unsafe path")
)

// MaxIDLength is the CSI limit on volume IDs (and names), in bytes.
const MaxIDLength = 128

// provisionedPrefix marks IDs returned by CreateVolume since upstream v2.
const provisionedPrefix = "efs:"

// DirPrefix marks the IDs of directory volumes (provisioningMode efs-dir):
// "efsdir:fs-X:/path". A static "fs-X:/path" names a directory too, but
// one nobody provisioned: DeleteVolume never removes it. The prefix tells
// the two apart; the node mounts both alike (the path of the file system).
const DirPrefix = "efsdir:"

// ReaderPrefix marks the IDs of read-only volumes served straight from a
// VolumeSnapshot's copy, with no copy of their own:
// "efsrox:fs-X:<snapshot key>:<volume key>", the keys 32 hex digits each
// (pkg/snapshot: the snapshot's, and sha256 of the CO's volume name, so
// that every such volume has an ID of its own). The node mounts the
// snapshot's directory of the file system read-only.
const ReaderPrefix = "efsrox:"

// S3FilesPrefix marks the IDs of S3 Files volumes: S3FilesPrefix and any
// of the EFS forms after "efs:" (fs-X::fsap-Y as provisioned). ParseID
// takes it and says so in ID.API.
const S3FilesPrefix = "s3files:"

// API names the service a volume lives in. Its values are pkg/controller's
// API values.
type API string

const (
	APIEFS     API = ""        // Amazon EFS: every ID without S3FilesPrefix
	APIS3Files API = "s3files" // Amazon S3 Files: S3FilesPrefix IDs
)

// EFS resource ID syntax, as the EFS API validates it.
var (
	fileSystemIDRe  = regexp.MustCompile(`^fs-[0-9a-f]{8,40}$`)
	accessPointIDRe = regexp.MustCompile(`^fsap-[0-9a-f]{8,40}$`)
)

// ValidFileSystemID reports whether s looks like an EFS file system ID.
func ValidFileSystemID(s string) bool { return fileSystemIDRe.MatchString(s) }

// ValidAccessPointID reports whether s looks like an EFS access point ID.
func ValidAccessPointID(s string) bool { return accessPointIDRe.MatchString(s) }

// ID is a parsed volume ID.
type ID struct {
	// API is APIS3Files for an ID with S3FilesPrefix, else APIEFS.
	API          API
	FileSystemID string
	// Path is "" (the root of the file system, or of the access point) or
	// an absolute, cleaned path without ".." components.
	Path string
	// AccessPointID is "" for a volume on the bare file system.
	AccessPointID string
	// Dir: a directory volume (DirPrefix), provisioned by CreateVolume;
	// Path is then never "" and AccessPointID always "".
	Dir bool
	// Snapshot and Reader are the keys of a read-only volume from a
	// snapshot (ReaderPrefix); Path is then the snapshot's copy.
	Snapshot, Reader string
}

// ParseID accepts every volume ID form users of the upstream driver have:
//
//	efs:fs-X::fsap-Y          returned by CreateVolume (current)
//	fs-X::fsap-Y              returned by CreateVolume (older releases)
//	fs-X                      static: the whole file system
//	fs-X:/sub/path            static: a directory of it
//	fs-X:/sub/path:fsap-Y     static: a directory below an access point root
//
// and the "efs:" prefix on any of them; a directory volume
// (provisioningMode efs-dir) is
//
//	efsdir:fs-X:/sub/path     returned by CreateVolume (ID.Dir)
//
// and a read-only volume from a VolumeSnapshot
//
//	efsrox:fs-X:<32 hex>:<32 hex>   returned by CreateVolume (ID.Reader)
//
// with the "s3files:" prefix instead,
// the same forms name an S3 Files volume (API APIS3Files), as upstream:
//
//	s3files:fs-X::fsap-Y      returned by CreateVolume of an s3files-ap class
//	s3files:fs-X, s3files:fs-X:/sub/path, s3files:fs-X:/sub/path:fsap-Y
//
// S3 Files IDs are checked with EFS's patterns, as upstream does (the S3
// Files API itself draws 17 to 40 hex digits). Empty fields may be omitted or left
// empty ("fs-X:" and "fs-X::" mean "fs-X"). As upstream, a relative path is
// taken relative to the root; it is returned absolute. A path with a ".."
// component, a control character, or an ID longer than MaxIDLength bytes is
// rejected.
func ParseID(s string) (ID, error) {
	bad := func(format string, args ...any) (ID, error) {
		return ID{}, fmt.Errorf("%w %q: %s", ErrInvalidID, truncate(s, MaxIDLength), fmt.Sprintf(format, args...))
	}
	if s == "" {
		return bad("empty")
	}
	if len(s) > MaxIDLength {
		return bad("longer than %d bytes", MaxIDLength)
	}
	if r, ok := strings.CutPrefix(s, ReaderPrefix); ok {
		fields := strings.Split(r, ":")
		if len(fields) != 3 || !ValidFileSystemID(fields[0]) || !ValidKey(fields[1]) || !ValidKey(fields[2]) {
			return bad("a read-only volume from a snapshot is %sfs-X:<32 hex digits>:<32 hex digits>", ReaderPrefix)
		}
		return ID{FileSystemID: fields[0], Path: SnapshotData(fields[1]), Snapshot: fields[1], Reader: fields[2]}, nil
	}
	api, rest := APIEFS, strings.TrimPrefix(s, provisionedPrefix)
	if r, ok := strings.CutPrefix(s, S3FilesPrefix); ok {
		api, rest = APIS3Files, r
	}
	dir := false
	if r, ok := strings.CutPrefix(s, DirPrefix); ok {
		dir, rest = true, r
	}
	fields := strings.Split(rest, ":")
	if len(fields) > 3 {
		return bad("expected at most three fields separated by ':'")
	}
	id := ID{API: api, FileSystemID: fields[0]}
	if !ValidFileSystemID(id.FileSystemID) {
		return bad("file system ID %q is not of the form fs-<hex>", id.FileSystemID)
	}
	if len(fields) >= 2 && fields[1] != "" {
		p, err := cleanAbs(fields[1])
		if err != nil {
			return bad("path: %v", err)
		}
		id.Path = p
	}
	if len(fields) == 3 && fields[2] != "" {
		id.AccessPointID = fields[2]
		if !ValidAccessPointID(id.AccessPointID) {
			return bad("access point ID %q is not of the form fsap-<hex>", id.AccessPointID)
		}
	}
	if dir {
		if id.Path == "" || id.AccessPointID != "" {
			return bad("a directory volume is %sfs-X:/path", DirPrefix)
		}
		if InTrash(id.Path) {
			return bad("a directory volume cannot be in %s, where root removal keeps deleted directories", "/"+TrashDir)
		}
		if InSnapshots(id.Path) {
			return bad("a directory volume cannot be in %s, where the controller keeps snapshots", "/"+SnapshotDir)
		}
		id.Dir = true
	}
	return id, nil
}

// String returns the ID in the upstream static form ("fs-X", "fs-X:/p",
// "fs-X::fsap-Y", "fs-X:/p:fsap-Y"), behind S3FilesPrefix for an S3 Files
// volume; ParseID(id.String()) == id.
func (id ID) String() string {
	prefix := ""
	if id.API == APIS3Files {
		prefix = S3FilesPrefix
	}
	if id.Dir {
		return DirPrefix + id.FileSystemID + ":" + id.Path
	}
	if id.Reader != "" {
		return ReaderID(id.FileSystemID, id.Snapshot, id.Reader)
	}
	switch {
	case id.AccessPointID != "":
		return prefix + id.FileSystemID + ":" + id.Path + ":" + id.AccessPointID
	case id.Path != "":
		return prefix + id.FileSystemID + ":" + id.Path
	}
	return prefix + id.FileSystemID
}

// ProvisionedID is the volume ID CreateVolume returns: "efs:fs-X::fsap-Y".
func ProvisionedID(fsID, apID string) string {
	return provisionedPrefix + fsID + "::" + apID
}

// DirID is the volume ID CreateVolume returns for a directory volume:
// "efsdir:fs-X:/path".
func DirID(fsID, path string) string {
	return DirPrefix + fsID + ":" + path
}

// ReaderID is the volume ID CreateVolume returns for a read-only volume
// of the snapshot of key snapshot on fsID, its own key reader.
func ReaderID(fsID, snapshot, reader string) string {
	return ReaderPrefix + fsID + ":" + snapshot + ":" + reader
}

// SnapshotData is the directory of the copy of the snapshot of key, an
// absolute path of the file system (pkg/snapshot makes it).
func SnapshotData(key string) string { return "/" + SnapshotDir + "/" + key + "/data" }

// ValidKey reports whether k is 32 lowercase hex digits, as pkg/snapshot's
// keys are.
func ValidKey(k string) bool {
	if len(k) != 32 {
		return false
	}
	for _, c := range k {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ProvisionedS3FilesID is the volume ID CreateVolume returns for an S3
// Files access point.
func ProvisionedS3FilesID(fsID, apID string) string {
	return S3FilesPrefix + fsID + "::" + apID
}

// cleanAbs makes p absolute and clean. "/" and "" become "" (the root). It
// rejects ".." components (even ones Clean could fold away: they are never
// meant), NUL and other control characters.
func cleanAbs(p string) (string, error) {
	if i := strings.IndexFunc(p, isControl); i >= 0 {
		return "", fmt.Errorf("control character %q", p[i])
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", errors.New(`".." component`)
		}
	}
	p = path.Clean("/" + p)
	if p == "/" {
		return "", nil
	}
	return p, nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// truncate keeps error messages bounded when the input is hostile.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
