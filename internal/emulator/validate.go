package emulator

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// Limits EFS documents for its API (API_CreateAccessPoint, API_RootDirectory,
// API_CreationInfo, API_PosixUser, API_Tag).
const (
	maxClientTokenLen   = 64
	maxPathLen          = 100
	maxPathComponents   = 4
	maxID               = 4294967295
	maxSecondaryGids    = 16
	maxTags             = 50
	maxTagKeyLen        = 128
	maxTagValueLen      = 256
	maxResourceIDLen    = 128
	maxAccessPointsPage = 1000
	defaultPageSize     = 100
	maxDescribeItems    = 1000
)

var (
	permissionsRE = regexp.MustCompile(`^[0-7]{3,4}$`)
	tagKeyRE      = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]+$`)
	tagValueRE    = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$`)
	// fileSystemIDRE is what --file-system accepts (EFS's own ID pattern).
	fileSystemIDRE = regexp.MustCompile(`^fs-[0-9a-f]{8,40}$`)
)

// ValidFileSystemID reports whether id has EFS's file system ID format.
func ValidFileSystemID(id string) bool { return fileSystemIDRE.MatchString(id) }

// pathForbidden are the characters EFS's Path pattern excludes from a
// component: ^(\/|(\/(?!\.)+[^$#<>;`|&?{}^*/\n]+){1,4})$. NUL is added: no
// file system can hold it.
const pathForbidden = "$#<>;`|&?{}^*/\n\x00"

// validatePath checks an access point root path as EFS does: "/" or one to
// four components, none starting with '.', at most 100 characters. Since no
// component can be "." or "..", the path can never climb out of the file
// system root, whatever the caller joins it to.
func validatePath(p string) *apiError {
	if p == "" {
		return badRequest("RootDirectory.Path must not be empty")
	}
	if n := utf8.RuneCountInString(p); n > maxPathLen {
		return badRequest("RootDirectory.Path is %d characters long; at most %d are allowed", n, maxPathLen)
	}
	if !utf8.ValidString(p) {
		return badRequest("RootDirectory.Path is not valid UTF-8")
	}
	if p == "/" {
		return nil
	}
	if p[0] != '/' {
		return badRequest("RootDirectory.Path %q must be absolute", p)
	}
	parts := strings.Split(p[1:], "/")
	if len(parts) > maxPathComponents {
		return badRequest("RootDirectory.Path %q has %d components; at most %d are allowed", p, len(parts), maxPathComponents)
	}
	for _, c := range parts {
		switch {
		case c == "":
			return badRequest("RootDirectory.Path %q has an empty component", p)
		case c[0] == '.':
			return badRequest("RootDirectory.Path %q has a component starting with '.'", p)
		case strings.ContainsAny(c, pathForbidden):
			return badRequest("RootDirectory.Path %q contains a forbidden character (one of %q)", p, pathForbidden)
		}
	}
	return nil
}

func validateID(field string, v *int64) *apiError {
	if v == nil {
		return badRequest("%s is required", field)
	}
	if *v < 0 || *v > maxID {
		return badRequest("%s %d is out of range 0..%d", field, *v, int64(maxID))
	}
	return nil
}

func validateCreationInfo(ci *CreationInfo) *apiError {
	if ci == nil {
		return nil
	}
	if ci.OwnerUid == nil || ci.OwnerGid == nil || ci.Permissions == nil {
		return badRequest("RootDirectory.CreationInfo needs OwnerUid, OwnerGid and Permissions together")
	}
	if e := validateID("CreationInfo.OwnerUid", ci.OwnerUid); e != nil {
		return e
	}
	if e := validateID("CreationInfo.OwnerGid", ci.OwnerGid); e != nil {
		return e
	}
	if !permissionsRE.MatchString(*ci.Permissions) {
		return badRequest("CreationInfo.Permissions %q must be 3 or 4 octal digits", *ci.Permissions)
	}
	return nil
}

func validatePosixUser(pu *PosixUser) *apiError {
	if pu == nil {
		return nil
	}
	if e := validateID("PosixUser.Uid", pu.Uid); e != nil {
		return e
	}
	if e := validateID("PosixUser.Gid", pu.Gid); e != nil {
		return e
	}
	if len(pu.SecondaryGids) > maxSecondaryGids {
		return badRequest("PosixUser.SecondaryGids has %d entries; at most %d are allowed", len(pu.SecondaryGids), maxSecondaryGids)
	}
	for i := range pu.SecondaryGids {
		if e := validateID("PosixUser.SecondaryGids", &pu.SecondaryGids[i]); e != nil {
			return e
		}
	}
	return nil
}

func validateTagKey(k string) *apiError {
	if n := utf8.RuneCountInString(k); n < 1 || n > maxTagKeyLen {
		return badRequest("tag key %q must be 1 to %d characters long", k, maxTagKeyLen)
	}
	if len(k) >= 4 && strings.EqualFold(k[:4], "aws:") {
		return badRequest("tag key %q uses the reserved prefix aws:", k)
	}
	if !tagKeyRE.MatchString(k) {
		return badRequest("tag key %q contains characters outside [\\p{L}\\p{Z}\\p{N}_.:/=+-@]", k)
	}
	return nil
}

// validateTags checks tags as given in one request and returns them as plain
// pairs. Keys must be unique within the request.
func validateTags(in []Tag) ([]tag, *apiError) {
	if len(in) > maxTags {
		return nil, badRequest("%d tags given; at most %d are allowed", len(in), maxTags)
	}
	out := make([]tag, 0, len(in))
	seen := make(map[string]bool, len(in))
	for _, t := range in {
		if t.Key == nil || t.Value == nil {
			return nil, badRequest("a tag needs both Key and Value")
		}
		if e := validateTagKey(*t.Key); e != nil {
			return nil, e
		}
		if n := utf8.RuneCountInString(*t.Value); n > maxTagValueLen {
			return nil, badRequest("value of tag %q is %d characters long; at most %d are allowed", *t.Key, n, maxTagValueLen)
		}
		if !tagValueRE.MatchString(*t.Value) {
			return nil, badRequest("value of tag %q contains characters outside [\\p{L}\\p{Z}\\p{N}_.:/=+-@]", *t.Key)
		}
		if seen[*t.Key] {
			return nil, badRequest("tag key %q is given twice", *t.Key)
		}
		seen[*t.Key] = true
		out = append(out, tag{Key: *t.Key, Value: *t.Value})
	}
	return out, nil
}

func validateToken(field, tok string) *apiError {
	if n := utf8.RuneCountInString(tok); n < 1 || n > maxClientTokenLen {
		return badRequest("%s must be 1 to %d characters long, got %d", field, maxClientTokenLen, n)
	}
	return nil
}

// resourceID accepts an ID such as fs-0123... or its ARN (EFS accepts both) and
// returns the bare ID. Malformed input is BadRequest; a well-prefixed ID
// that names nothing is left for the lookup to answer NotFound.
func resourceID(field, s string, kinds ...string) (string, *apiError) {
	if s == "" {
		return "", badRequest("%s is required", field)
	}
	if len(s) > maxResourceIDLen {
		return "", badRequest("%s is longer than %d characters", field, maxResourceIDLen)
	}
	if strings.HasPrefix(s, "arn:") {
		i := strings.LastIndexByte(s, '/')
		if i < 0 {
			return "", badRequest("%s %q is not a valid ARN", field, s)
		}
		s = s[i+1:]
	}
	for _, k := range kinds {
		if strings.HasPrefix(s, k+"-") && len(s) > len(k)+1 && !strings.ContainsAny(s, "/\x00") {
			return s, nil
		}
	}
	return "", badRequest("%s %q is not a valid %s ID", field, s, strings.Join(kinds, " or "))
}
