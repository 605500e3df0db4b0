package volume

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// StorageClass parameter keys, spelled as the upstream driver spells them.
const (
	ParamProvisioningMode      = "provisioningMode"
	ParamFileSystemID          = "fileSystemId"
	ParamDirectoryPerms        = "directoryPerms"
	ParamUID                   = "uid"
	ParamGID                   = "gid"
	ParamGIDRangeStart         = "gidRangeStart"
	ParamGIDRangeEnd           = "gidRangeEnd"
	ParamBasePath              = "basePath"
	ParamSubPathPattern        = "subPathPattern"
	ParamEnsureUniqueDirectory = "ensureUniqueDirectory"
	ParamReuseAccessPoint      = "reuseAccessPoint"
	ParamAZ                    = "az"
	// ParamEnableTagging "false": access points are created with no tag at
	// all, as upstream (see docs/design.md, "Access points without a record").
	ParamEnableTagging = "enableTagging"
	// ParamEnforceZoneAffinity "true": the volume of a One Zone file system
	// is accessible from its zone only (AccessibleTopology).
	ParamEnforceZoneAffinity = "enforceZoneAffinity"
	// ParamRestoreOwnership is whose uid and gid the files of a volume
	// restored from a snapshot or cloned from a volume get:
	// RestoreOwnershipVolume (the default) or RestoreOwnershipSource.
	ParamRestoreOwnership = "restoreOwnership"
	// Set by the external-provisioner when run with --extra-create-metadata.
	ParamPVCName      = "csi.storage.k8s.io/pvc/name"
	ParamPVCNamespace = "csi.storage.k8s.io/pvc/namespace"
	ParamPVName       = "csi.storage.k8s.io/pv/name"
)

// TopologyZoneKey is the topology segment of availability zones: the node
// plugin reports its zone in it (NodeGetInfo; kubelet labels the Node with
// it), and a One Zone file system's volume is constrained by it. It is the
// well-known label the cloud provider sets on every node.
const TopologyZoneKey = "topology.kubernetes.io/zone"

// Values and defaults.
const (
	// ProvisioningModeAccessPoint provisions EFS access points.
	ProvisioningModeAccessPoint = "efs-ap"
	// ProvisioningModeS3FilesAccessPoint provisions S3 Files access points,
	// through the same protocol.
	ProvisioningModeS3FilesAccessPoint = "s3files-ap"
	// ProvisioningModeDirectory provisions a directory of the file system,
	// made by the controller through its own mount, without an access
	// point (docs/directory-volumes.md).
	ProvisioningModeDirectory = "efs-dir"
	// DefaultGIDRangeStart and DefaultGIDRangeEnd are upstream's defaults:
	// 50000 plus the per-file-system access point limit (10,000).
	DefaultGIDRangeStart = 50000
	DefaultGIDRangeEnd   = 60000
	// DefaultDirectoryPerms applies when directoryPerms is absent. Upstream
	// sends an empty mode, which EFS rejects; a private directory is the
	// safe reading of "no opinion".
	DefaultDirectoryPerms = "700"
	// DefaultDirVolumePerms applies to an efs-dir volume's directory when
	// directoryPerms is absent: group-writable with setgid, so that a pod
	// holding the volume's gid (fsGroup or supplementalGroups; the gid is
	// in the volume context) writes whatever its uid, and what it makes
	// keeps the gid. No access point enforces an identity there.
	DefaultDirVolumePerms = "2770"
	// RestoreOwnershipVolume: a restored or cloned volume's files owned by
	// the source's uid and gid get the new volume's (its access point's
	// POSIX user), so that its pods, which run as that identity, own them.
	RestoreOwnershipVolume = "volume"
	// RestoreOwnershipSource: every file keeps its owner as in the source;
	// only the new root is the new volume's.
	RestoreOwnershipSource = "source"
	// MaxPosixID is the largest uid/gid EFS accepts.
	MaxPosixID = 1<<32 - 1
)

var knownParams = []string{
	ParamProvisioningMode, ParamFileSystemID, ParamDirectoryPerms, ParamUID, ParamGID,
	ParamGIDRangeStart, ParamGIDRangeEnd, ParamBasePath, ParamSubPathPattern,
	ParamEnsureUniqueDirectory, ParamReuseAccessPoint, ParamAZ,
	ParamPVCName, ParamPVCNamespace, ParamPVName,
	ParamFileSystemIDConfigRef, ParamFileSystemIDSecretRef,
	ParamEnableTagging, ParamEnforceZoneAffinity, ParamRestoreOwnership,
}

// ParamError names the parameter that cannot be honoured. It wraps
// ErrInvalidParameter.
type ParamError struct {
	Key    string // the parameter, e.g. "gidRangeEnd"
	Reason string
}

func (e *ParamError) Error() string {
	return fmt.Sprintf("%v %s: %s", ErrInvalidParameter, e.Key, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidParameter) true.
func (e *ParamError) Unwrap() error { return ErrInvalidParameter }

func paramErr(key, format string, args ...any) error {
	return &ParamError{Key: key, Reason: fmt.Sprintf(format, args...)}
}

// Params are the parsed StorageClass parameters of a CreateVolume call.
type Params struct {
	FileSystemID   string
	DirectoryPerms string // octal, 3 or 4 digits, e.g. "700"
	// UID and GID are -1 when not given. A missing one is allocated from
	// [GIDRangeStart, GIDRangeEnd] (see NeedsGIDAllocation and Identity).
	UID, GID                   int64
	GIDRangeStart, GIDRangeEnd int64
	// BasePath is "" or an absolute, cleaned directory (never "/").
	BasePath string
	// SubPathPattern is the template of the root directory below BasePath,
	// "" for the default (the volume name).
	SubPathPattern        string
	EnsureUniqueDirectory bool // default true
	ReuseAccessPoint      bool
	// EnforceZoneAffinity: the file system is described and a One Zone
	// file system's volume answers the topology of its zone.
	EnforceZoneAffinity bool
	// EnableTagging (default true): false creates access points without any
	// tag, not even efs.csi.aws.com/cluster, as upstream.
	EnableTagging bool
	// RestoreKeepsOwners: restoreOwnership "source".
	RestoreKeepsOwners bool
	AZ                 string
	PVCName            string
	PVCNamespace       string
	PVName             string

	// Mode is the provisioningMode: ProvisioningModeAccessPoint,
	// ProvisioningModeS3FilesAccessPoint or ProvisioningModeDirectory.
	Mode string
	// FileSystemIDs is the class's list when fileSystemId names several
	// ("fs-a,fs-b", as upstream PR #761 proposed), "" when it names one:
	// each CreateVolume places its volume on one of them (FileSystemID is
	// then the first until the controller chooses).
	FileSystemIDs string
}

var octalModeRe = regexp.MustCompile(`^[0-7]{3,4}$`)

// IgnoredParams are the keys of m that ParseParams does not know and
// ignores, sorted (nil: none).
func IgnoredParams(m map[string]string) []string {
	var ignored []string
	for k := range m {
		if !slices.Contains(knownParams, k) {
			ignored = append(ignored, k)
		}
	}
	slices.Sort(ignored)
	return ignored
}

// ParseParams validates the CreateVolume parameters and applies upstream's
// defaults. Unknown keys are ignored, as upstream ignores them (a stray key,
// such as mountOptions under parameters, must not stop provisioning): they
// are what IgnoredParams returns, for the caller to warn about. Every error
// is a *ParamError naming a known parameter, checked in a fixed order so the
// same input always yields the same message.
func ParseParams(m map[string]string) (Params, error) {
	p := Params{
		DirectoryPerms:        DefaultDirectoryPerms,
		UID:                   -1,
		GID:                   -1,
		GIDRangeStart:         DefaultGIDRangeStart,
		GIDRangeEnd:           DefaultGIDRangeEnd,
		EnsureUniqueDirectory: true,
		EnableTagging:         true,
	}
	mode, ok := m[ParamProvisioningMode]
	switch {
	case !ok:
		return Params{}, paramErr(ParamProvisioningMode, "missing; use %q", ProvisioningModeAccessPoint)
	case mode != ProvisioningModeAccessPoint && mode != ProvisioningModeS3FilesAccessPoint && mode != ProvisioningModeDirectory:
		return Params{}, paramErr(ParamProvisioningMode, "provisioning mode %q is not supported, only %q, %q and %q", mode, ProvisioningModeAccessPoint, ProvisioningModeS3FilesAccessPoint, ProvisioningModeDirectory)
	}
	p.Mode = mode

	// A reference must have been resolved into fileSystemId by the caller
	// (FileSystemRef), which also removes it.
	ref, isRef, err := FileSystemRef(m)
	switch {
	case err != nil:
		return Params{}, err
	case isRef:
		return Params{}, paramErr(ref.Param, "a reference needs the Kubernetes API, which this controller has no client for")
	}
	fsIDs := FileSystemIDList(m[ParamFileSystemID])
	for i, fsID := range fsIDs {
		switch {
		case fsID == "":
			return Params{}, paramErr(ParamFileSystemID, "cannot be empty")
		case !ValidFileSystemID(fsID):
			return Params{}, paramErr(ParamFileSystemID, "%q is not a file system ID of the form fs-<hex>", truncate(fsID, 64))
		case slices.Contains(fsIDs[:i], fsID):
			return Params{}, paramErr(ParamFileSystemID, "names %s twice", fsID)
		}
	}
	p.FileSystemID = fsIDs[0]
	if len(fsIDs) > 1 {
		p.FileSystemIDs = strings.Join(fsIDs, ",")
	}

	if v, ok := m[ParamDirectoryPerms]; ok {
		if !octalModeRe.MatchString(v) {
			return Params{}, paramErr(ParamDirectoryPerms, "%q is not an octal mode of 3 or 4 digits such as \"700\"", truncate(v, 64))
		}
		p.DirectoryPerms = v
	} else if mode == ProvisioningModeDirectory {
		p.DirectoryPerms = DefaultDirVolumePerms
	}

	if p.UID, err = posixID(m, ParamUID); err != nil {
		return Params{}, err
	}
	if p.GID, err = posixID(m, ParamGID); err != nil {
		return Params{}, err
	}
	if err := p.parseGIDRange(m); err != nil {
		return Params{}, err
	}

	if v, ok := m[ParamBasePath]; ok {
		if p.BasePath, err = parseBasePath(v); err != nil {
			return Params{}, err
		}
	}
	if v, ok := m[ParamSubPathPattern]; ok {
		if _, err := parsePattern(v); err != nil {
			return Params{}, err
		}
		p.SubPathPattern = v
	}
	if p.EnsureUniqueDirectory, err = boolParam(m, ParamEnsureUniqueDirectory, true); err != nil {
		return Params{}, err
	}
	if p.EnableTagging, err = boolParam(m, ParamEnableTagging, true); err != nil {
		return Params{}, err
	}
	if p.EnforceZoneAffinity, err = boolParam(m, ParamEnforceZoneAffinity, false); err != nil {
		return Params{}, err
	}
	switch v := m[ParamRestoreOwnership]; v {
	case "", RestoreOwnershipVolume:
	case RestoreOwnershipSource:
		p.RestoreKeepsOwners = true
	default:
		return Params{}, paramErr(ParamRestoreOwnership, "%q is neither %q (the new volume's uid and gid, the default) nor %q (the source's kept)",
			truncate(v, 64), RestoreOwnershipVolume, RestoreOwnershipSource)
	}
	if p.ReuseAccessPoint, err = boolParam(m, ParamReuseAccessPoint, false); err != nil {
		return Params{}, err
	}

	for _, f := range []struct {
		key string
		dst *string
	}{{ParamAZ, &p.AZ}, {ParamPVCName, &p.PVCName}, {ParamPVCNamespace, &p.PVCNamespace}, {ParamPVName, &p.PVName}} {
		v := m[f.key]
		if strings.ContainsFunc(v, isControl) {
			return Params{}, paramErr(f.key, "%q contains a control character", truncate(v, 64))
		}
		*f.dst = v
	}
	if p.ReuseAccessPoint && p.Mode == ProvisioningModeDirectory {
		// A directory volume has no access point, hence no client token by
		// which a re-created claim would find it.
		return Params{}, paramErr(ParamReuseAccessPoint, "needs access points; provisioning mode %q makes none", ProvisioningModeDirectory)
	}
	if p.ReuseAccessPoint && p.FileSystemIDs != "" {
		// The claim's token finds its earlier access point account-wide,
		// wherever it is: one file system per class keeps it findable.
		return Params{}, paramErr(ParamReuseAccessPoint, "needs a single file system, %s names several", ParamFileSystemID)
	}
	if p.ReuseAccessPoint && p.PVCName == "" {
		// Upstream hashes the empty string: every claim would share one token.
		return Params{}, paramErr(ParamReuseAccessPoint, "needs %s (run the external-provisioner with --extra-create-metadata)", ParamPVCName)
	}
	return p, nil
}

// posixID parses an optional uid or gid: -1 when absent.
func posixID(m map[string]string, key string) (int64, error) {
	v, ok := m[key]
	if !ok {
		return -1, nil
	}
	return boundedInt(key, v, 0, "greater than or equal to 0")
}

// boundedInt parses a decimal in [min, MaxPosixID]; minWhat says what min
// means in the error.
func boundedInt(key, v string, min int64, minWhat string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil:
		return 0, paramErr(key, "%q is not an integer", truncate(v, 64))
	case n < min:
		return 0, paramErr(key, "must be %s, got %d", minWhat, n)
	case n > MaxPosixID:
		return 0, paramErr(key, "must be at most %d, got %d", int64(MaxPosixID), n)
	}
	return n, nil
}

// parseGIDRange applies upstream's rules: both bounds or neither; start > 0;
// end > start.
func (p *Params) parseGIDRange(m map[string]string) error {
	startS, hasStart := m[ParamGIDRangeStart]
	endS, hasEnd := m[ParamGIDRangeEnd]
	if !hasStart && !hasEnd {
		return nil
	}
	if !hasStart {
		return paramErr(ParamGIDRangeStart, "missing: %s and %s go together", ParamGIDRangeStart, ParamGIDRangeEnd)
	}
	start, err := boundedInt(ParamGIDRangeStart, startS, 1, "greater than 0")
	if err != nil {
		return err
	}
	if !hasEnd {
		return paramErr(ParamGIDRangeEnd, "missing: %s and %s go together", ParamGIDRangeStart, ParamGIDRangeEnd)
	}
	end, err := boundedInt(ParamGIDRangeEnd, endS, start+1, fmt.Sprintf("greater than %s (%d)", ParamGIDRangeStart, start))
	if err != nil {
		return err
	}
	p.GIDRangeStart, p.GIDRangeEnd = start, end
	return nil
}

// boolParam parses a boolean as strconv.ParseBool does. Upstream silently
// treated an unparsable ensureUniqueDirectory as true; here a typo is an
// error rather than a surprise.
func boolParam(m map[string]string, key string, def bool) (bool, error) {
	v, ok := m[key]
	if !ok {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, paramErr(key, "%q is not a boolean (use \"true\" or \"false\")", truncate(v, 64))
	}
	return b, nil
}

// parseBasePath accepts an absolute or (as upstream) relative directory and
// returns it absolute and clean, "" for the root. It must leave room below
// it for the volume's own directory.
func parseBasePath(v string) (string, error) {
	segs := strings.FieldsFunc(v, func(r rune) bool { return r == '/' })
	segs = slices.DeleteFunc(segs, func(s string) bool { return s == "." })
	for _, s := range segs {
		if err := checkSegment(s); err != nil {
			return "", paramErr(ParamBasePath, "%q: %v", truncate(v, 128), err)
		}
	}
	if len(segs) == 0 {
		return "", nil
	}
	base := "/" + strings.Join(segs, "/")
	switch {
	case len(segs) >= MaxRootDirDepth:
		return "", paramErr(ParamBasePath, "%q has %d levels; EFS allows %d in an access point root and the volume needs one", truncate(base, 128), len(segs), MaxRootDirDepth)
	case len(base)+2 > MaxRootDirLength:
		return "", paramErr(ParamBasePath, "%q is %d characters; EFS allows %d in an access point root and the volume needs some", truncate(base, 128), len(base), MaxRootDirLength)
	}
	return base, nil
}

// Dir reports whether the class provisions directory volumes (efs-dir).
func (p Params) Dir() bool { return p.Mode == ProvisioningModeDirectory }

// NeedsGIDAllocation reports whether the POSIX identity is not fully fixed by
// the class. As upstream, a missing uid or gid is taken from the allocated
// GID: see Identity.
func (p Params) NeedsGIDAllocation() bool { return p.UID < 0 || p.GID < 0 }

// Identity returns the uid and gid of the access point, filling what the
// class does not fix with the allocated GID (upstream: uid = gid = allocated
// when neither is given).
func (p Params) Identity(allocated int64) (uid, gid int64) {
	uid, gid = p.UID, p.GID
	if uid < 0 {
		uid = allocated
	}
	if gid < 0 {
		gid = allocated
	}
	return uid, gid
}

// MaxClientTokenLength is EFS's limit on CreateAccessPoint's ClientToken.
const MaxClientTokenLength = 64

// ClientToken is the CreateAccessPoint ClientToken for a volume: a function
// of the name alone, so every retry sends the same one. It is the name itself
// when that is at most 64 printable ASCII characters (what upstream sends for
// Kubernetes' "pvc-<uid>" names, so access points it created are found), and
// otherwise the hex SHA-256 of the name (64 characters).
//
// With ReuseAccessPoint it is, as upstream, the hex SHA-256 of the PVC name,
// so a claim re-created under the same name (in any cluster) gets its old
// access point back.
func (p Params) ClientToken(volumeName string) string {
	if p.ReuseAccessPoint {
		return sha256Hex(p.PVCName)
	}
	return NameToken(volumeName)
}

// NameToken is the client token (and record key) of a volume named
// volumeName in a class without reuseAccessPoint: the name
// itself when that is at most 64 printable ASCII characters, else its hex
// SHA-256.
func NameToken(volumeName string) string {
	if len(volumeName) > 0 && len(volumeName) <= MaxClientTokenLength &&
		!strings.ContainsFunc(volumeName, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return volumeName
	}
	return sha256Hex(volumeName)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// DirToken is the record key (and name lock) of the directory volume at
// path (provisioningMode efs-dir): a function of the path alone, so that
// one directory is one volume (a create of another name at the same path
// finds this record and is refused) and DeleteVolume finds the record from
// the volume ID, which names the path. "dir:" and 48 hex digits of the
// path's SHA-256 (no client token has that shape: EFS sends none for it).
func DirToken(path string) string {
	return "dir:" + sha256Hex(path)[:48]
}

// IsDirToken reports whether token is a DirToken.
func IsDirToken(token string) bool {
	return len(token) == 52 && strings.HasPrefix(token, "dir:")
}

// FileSystemIDList splits a fileSystemId parameter into the file systems it
// names, in order: several are comma-separated, and spaces around the
// commas are accepted ("fs-a, fs-b", as a YAML list is often written).
// Empty and malformed entries are kept for the caller to judge.
func FileSystemIDList(v string) []string {
	ids := strings.Split(v, ",")
	for i := range ids {
		ids[i] = strings.TrimSpace(ids[i])
	}
	return ids
}
