package volume

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// EFS's rules for an access point's root directory (API RootDirectory.Path:
// pattern ^(\/|(\/(?!\.)+[^$#<>;`|&?{}^*/\n]+){1,4})$, length 1..100).
// Upstream counted up to five levels; EFS itself allows four.
const (
	MaxRootDirLength = 100
	MaxRootDirDepth  = 4
)

// TrashDir is the directory at a file system's root where root removal
// (--delete-access-point-root-dir) moves a deleted volume's directory
// until it is purged or restored (docs/root-removal.md, "The trash"). No root
// directory reaches into it but "/": its name starts with '.', which EFS
// (checkSegment) refuses in every component of an access point's root,
// a subPathPattern's expansion and a basePath; a directory volume's ID
// naming it is refused too (ParseID).
const TrashDir = ".efs-csi-trash"

// InTrash reports whether the absolute path p is TrashDir or inside it.
func InTrash(p string) bool {
	rel := strings.TrimPrefix(p, "/")
	return rel == TrashDir || strings.HasPrefix(rel, TrashDir+"/")
}

// SnapshotDir is the directory at a file system's root where the
// controller keeps VolumeSnapshots (pkg/snapshot): hidden from every
// access point's root as TrashDir is, and never a directory volume's.
const SnapshotDir = ".efs-csi-snapshots"

// InSnapshots reports whether the absolute path p is SnapshotDir or
// inside it.
func InSnapshots(p string) bool {
	rel := strings.TrimPrefix(p, "/")
	return rel == SnapshotDir || strings.HasPrefix(rel, SnapshotDir+"/")
}

// forbiddenInSegment are the characters EFS refuses in a root directory.
const forbiddenInSegment = "$#<>;`|&?{}^*/"

// checkSegment applies EFS's rule to one path component.
func checkSegment(s string) error {
	switch {
	case s == "":
		return errors.New("empty path component")
	case s[0] == '.':
		return fmt.Errorf("component %q starts with '.'", truncate(s, 32))
	case strings.ContainsFunc(s, isControl):
		return fmt.Errorf("component %q contains a control character", truncate(s, 32))
	case strings.ContainsAny(s, forbiddenInSegment):
		return fmt.Errorf("component %q contains one of %s", truncate(s, 32), forbiddenInSegment)
	case !utf8.ValidString(s):
		return fmt.Errorf("component %q is not valid UTF-8", truncate(s, 32))
	}
	return nil
}

// CheckRootDir reports whether p is a root directory this driver would ask
// EFS for: absolute, clean, not "/", at most MaxRootDirLength bytes and
// MaxRootDirDepth levels, every component acceptable to EFS. The error wraps
// ErrUnsafePath.
func CheckRootDir(p string) error {
	if p == "" || p[0] != '/' || p == "/" {
		return fmt.Errorf("%w: root directory %q must be an absolute path below /", ErrUnsafePath, truncate(p, 128))
	}
	if len(p) > MaxRootDirLength {
		return fmt.Errorf("%w: root directory %q exceeds EFS's limit of %d characters", ErrUnsafePath, truncate(p, 128), MaxRootDirLength)
	}
	segs := strings.Split(p[1:], "/")
	if len(segs) > MaxRootDirDepth {
		return fmt.Errorf("%w: root directory %q exceeds EFS's limit of %d levels", ErrUnsafePath, p, MaxRootDirDepth)
	}
	for _, s := range segs {
		if err := checkSegment(s); err != nil {
			return fmt.Errorf("%w: root directory %q: %v", ErrUnsafePath, p, err)
		}
	}
	return nil
}

// Variables of subPathPattern, in upstream's syntax, and the parameter each
// one reads.
var patternVars = map[string]string{
	".PVC.name":      ParamPVCName,
	".PVC.namespace": ParamPVCNamespace,
	".PV.name":       ParamPVName,
}

// patternPart is a literal (varName == "") or a variable.
type patternPart struct{ literal, varName string }

// parsePattern splits a subPathPattern into literals and variables. Any '$',
// '{' or '}' outside a known ${...} is an error, as upstream (EFS would
// refuse them in the path anyway).
func parsePattern(pat string) ([]patternPart, error) {
	bad := func(format string, args ...any) ([]patternPart, error) {
		return nil, paramErr(ParamSubPathPattern, "%q: %s (variables: ${.PVC.name}, ${.PVC.namespace}, ${.PV.name})",
			truncate(pat, 128), fmt.Sprintf(format, args...))
	}
	var parts []patternPart
	rest := pat
	for rest != "" {
		i := strings.Index(rest, "${")
		if i < 0 {
			parts = append(parts, patternPart{literal: rest})
			break
		}
		if i > 0 {
			parts = append(parts, patternPart{literal: rest[:i]})
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return bad("unterminated ${")
		}
		name := rest[i+2 : i+j]
		if _, ok := patternVars[name]; !ok {
			return bad("unknown variable ${%s}", truncate(name, 32))
		}
		parts = append(parts, patternPart{varName: name})
		rest = rest[i+j+1:]
	}
	for _, p := range parts {
		if strings.ContainsAny(p.literal, "${}") {
			return bad("stray '$', '{' or '}'")
		}
		if strings.ContainsFunc(p.literal, isControl) {
			return bad("control character")
		}
		for _, seg := range strings.Split(p.literal, "/") {
			if seg == ".." {
				return bad(`".." component`)
			}
		}
	}
	return parts, nil
}

// RootDir is the access point root directory of a volume, computed from the
// name and the parameters alone: every retry gets the same path.
//
// Without subPathPattern it is BasePath/<volume name>, as upstream. A name
// that does not fit (a 128-character CSI name, say) or that EFS would refuse
// is shortened and made safe, keeping it unique with a hash of the full name:
// <prefix>-<16 hex>.
//
// With subPathPattern it is BasePath/<expanded pattern>, and with
// EnsureUniqueDirectory (the default) the last component gets
// "-<uuid-shaped hash of the volume name>" as upstream's random UUID, except
// that it is deterministic. When that makes the path too long, the last
// component is shortened (the suffix keeps it unique); without the suffix a
// path that does not fit is an error naming subPathPattern. Variable values
// must not contain '/' nor be "." or "..".
//
// The result always passes CheckRootDir: never "/", never BasePath itself,
// never with "..".
func (p Params) RootDir(volumeName string) (string, error) {
	if volumeName == "" {
		return "", paramErr("name", "volume name is empty")
	}
	var base []string
	if p.BasePath != "" {
		b, err := parseBasePath(p.BasePath)
		if err != nil {
			return "", err
		}
		base = strings.Split(b[1:], "/")
	}
	baseLen := 0
	for _, s := range base {
		baseLen += 1 + len(s)
	}

	var segs []string
	if p.SubPathPattern == "" {
		seg, err := fitName(volumeName, MaxRootDirLength-baseLen-1)
		if err != nil {
			return "", err
		}
		segs = []string{seg}
	} else {
		var err error
		if segs, err = p.expand(volumeName); err != nil {
			return "", err
		}
		if len(base)+len(segs) > MaxRootDirDepth {
			return "", paramErr(ParamSubPathPattern, "%q with %s %q makes %d levels; EFS allows %d",
				truncate(p.SubPathPattern, 128), ParamBasePath, p.BasePath, len(base)+len(segs), MaxRootDirDepth)
		}
		total := baseLen
		for _, s := range segs {
			total += 1 + len(s)
		}
		if p.EnsureUniqueDirectory {
			suffix := "-" + uniqueSuffix(volumeName)
			last := segs[len(segs)-1]
			if over := total + len(suffix) - MaxRootDirLength; over > 0 {
				if over >= len(last) {
					return "", paramErr(ParamSubPathPattern, "%q with %s %q leaves no room for the %d-character unique suffix within EFS's %d characters",
						truncate(p.SubPathPattern, 128), ParamBasePath, p.BasePath, len(suffix), MaxRootDirLength)
				}
				last = truncateUTF8(last, len(last)-over)
			}
			segs[len(segs)-1] = last + suffix
		} else if total > MaxRootDirLength {
			return "", paramErr(ParamSubPathPattern, "%q with %s %q makes a %d-character path; EFS allows %d",
				truncate(p.SubPathPattern, 128), ParamBasePath, p.BasePath, total, MaxRootDirLength)
		}
	}
	dir := "/" + strings.Join(append(base, segs...), "/")
	if err := CheckRootDir(dir); err != nil {
		// Unreachable by construction; kept so a bug cannot reach EFS.
		return "", paramErr(ParamSubPathPattern, "%v", err)
	}
	return dir, nil
}

// expand substitutes the pattern's variables and splits the result into
// path components, checking each against EFS's rules.
func (p Params) expand(volumeName string) ([]string, error) {
	parts, err := parsePattern(p.SubPathPattern)
	if err != nil {
		return nil, err
	}
	values := map[string]string{
		".PVC.name":      p.PVCName,
		".PVC.namespace": p.PVCNamespace,
		".PV.name":       p.PVName,
	}
	if values[".PV.name"] == "" {
		// The provisioner names the PV after the volume.
		values[".PV.name"] = volumeName
	}
	var b strings.Builder
	for _, part := range parts {
		if part.varName == "" {
			b.WriteString(part.literal)
			continue
		}
		v, key := values[part.varName], patternVars[part.varName]
		switch {
		case v == "":
			return nil, paramErr(ParamSubPathPattern, "uses ${%s} but %s is not set (run the external-provisioner with --extra-create-metadata)", part.varName, key)
		case v == "." || v == ".." || strings.ContainsRune(v, '/'):
			return nil, paramErr(key, "%q cannot be used in a path", truncate(v, 64))
		}
		b.WriteString(v)
	}
	var segs []string
	for _, s := range strings.Split(b.String(), "/") {
		if s == "" || s == "." {
			continue // as path.Join would
		}
		if err := checkSegment(s); err != nil {
			return nil, paramErr(ParamSubPathPattern, "%q expands to %q: %v", truncate(p.SubPathPattern, 128), truncate(b.String(), 128), err)
		}
		segs = append(segs, s)
	}
	if len(segs) == 0 {
		// The volume would be BasePath itself (or "/"), shared by every
		// volume and emptied by the first delete.
		return nil, paramErr(ParamSubPathPattern, "%q expands to no directory", truncate(p.SubPathPattern, 128))
	}
	return segs, nil
}

// MadeForName reports whether dir is a root directory RootDir makes for
// volumeName under some class, judged by the part the name determines (the
// caller knows no class): its last component is the name itself as fitted
// to the room the rest of dir leaves (no subPathPattern), or ends with "-"
// and the name's unique suffix (subPathPattern with ensureUniqueDirectory).
// A subPathPattern without the unique suffix makes directories that say
// nothing about the name: they do not count.
func MadeForName(dir, volumeName string) bool {
	if volumeName == "" || CheckRootDir(dir) != nil {
		return false
	}
	last := dir[strings.LastIndexByte(dir, '/')+1:]
	budget := MaxRootDirLength - (len(dir) - len(last))
	if fitted, err := fitName(volumeName, budget); err == nil && last == fitted {
		return true
	}
	return strings.HasSuffix(last, "-"+uniqueSuffix(volumeName))
}

// nameHashLen is the hex digits of the hash that keeps a shortened name unique.
const nameHashLen = 16

// fitName returns name as a path component of at most budget bytes: itself
// if EFS accepts it and it fits, else a safe prefix of it plus a hash of all
// of it.
func fitName(name string, budget int) (string, error) {
	if len(name) <= budget && checkSegment(name) == nil {
		return name, nil
	}
	if budget < nameHashLen {
		return "", paramErr(ParamBasePath, "leaves %d characters for the volume's directory; at least %d are needed", budget, nameHashLen)
	}
	sum := sha256Hex(name)[:nameHashLen]
	safe := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, name)
	safe = strings.TrimLeft(safe, ".")
	keep := budget - nameHashLen - 1
	if keep <= 0 || safe == "" {
		return sum, nil
	}
	if len(safe) > keep {
		safe = safe[:keep] // ASCII only after Map
	}
	return safe + "-" + sum, nil
}

// uniqueSuffix is a UUID-shaped (RFC 9562 version 8) hash of the volume
// name: the same on every retry, different for every volume.
func uniqueSuffix(volumeName string) string {
	sum := sha256.Sum256([]byte("efs-csi-driver/root-dir/" + volumeName))
	u := sum[:16]
	u[6] = u[6]&0x0f | 0x80
	u[8] = u[8]&0x3f | 0x80
	h := hex.EncodeToString(u)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// UniqueDirOf reports whether got is planned, a root directory RootDir
// made with ensureUniqueDirectory's suffix, as upstream's driver makes it:
// the same directory with a random UUID for the suffix (upstream draws
// one per create; this driver derives it from the volume name).
func UniqueDirOf(planned, got string) bool {
	const n = 36 // a UUID's length
	if len(planned) <= n || len(got) != len(planned) || planned[len(planned)-n-1] != '-' ||
		!isUUID(planned[len(planned)-n:]) || !isUUID(got[len(got)-n:]) {
		return false
	}
	return got[:len(got)-n] == planned[:len(planned)-n]
}

// isUUID reports whether s is a UUID's text: 8-4-4-4-12 hex digits.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F') {
				return false
			}
		}
	}
	return true
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// RootDirNamesVolume reports whether RootDir tells volumes apart by name:
// no two volume names get one root directory. So it is without
// subPathPattern (the name itself), with EnsureUniqueDirectory (a hash of
// the name is appended) and with a pattern that holds ${.PV.name} (the
// volume name, which carries the claim's UID). An access point found at a
// volume's root directory under this cluster's GID token is then that
// volume's, which no tag needs to say.
func (p Params) RootDirNamesVolume() bool {
	return p.SubPathPattern == "" || p.EnsureUniqueDirectory || strings.Contains(p.SubPathPattern, "${.PV.name}")
}
