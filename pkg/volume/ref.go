package volume

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// StorageClass parameters that name the file system by reference, as the
// upstream driver reads them: "namespace/name/key" of a ConfigMap or a
// Secret whose value under key is the file system ID.
const (
	ParamFileSystemIDConfigRef = "fileSystemIdConfigRef"
	ParamFileSystemIDSecretRef = "fileSystemIdSecretRef"
)

// RefKind is the kind of object a reference names.
type RefKind string

const (
	RefConfigMap RefKind = "ConfigMap"
	RefSecret    RefKind = "Secret"
)

// ObjectRef names one key of a ConfigMap or Secret.
type ObjectRef struct {
	Kind                 RefKind
	Namespace, Name, Key string
	Param                string // the StorageClass parameter it came from
}

func (r ObjectRef) String() string {
	return string(r.Kind) + " " + r.Namespace + "/" + r.Name + " key " + r.Key
}

// FileSystemRef returns the reference a class names its file system by, or
// ok false when it names it with fileSystemId. Exactly one of fileSystemId,
// fileSystemIdConfigRef and fileSystemIdSecretRef must be set, and a
// reference must be namespace/name/key with Kubernetes' own rules for each
// part: anything else is a ParamError. The value it names is the caller's to
// read (the volume ID carries the file system, so a reference that later
// changes moves no existing volume).
func FileSystemRef(m map[string]string) (ref ObjectRef, ok bool, err error) {
	var set []string
	for _, k := range []string{ParamFileSystemID, ParamFileSystemIDConfigRef, ParamFileSystemIDSecretRef} {
		if _, present := m[k]; present {
			set = append(set, k)
		}
	}
	switch {
	case len(set) == 0:
		return ObjectRef{}, false, paramErr(ParamFileSystemID, "missing (or name it by %s or %s)", ParamFileSystemIDConfigRef, ParamFileSystemIDSecretRef)
	case len(set) > 1:
		return ObjectRef{}, false, paramErr(set[1], "exactly one of %s may be set, not %s", strings.Join([]string{ParamFileSystemID, ParamFileSystemIDConfigRef, ParamFileSystemIDSecretRef}, ", "), strings.Join(set, " and "))
	case set[0] == ParamFileSystemID:
		return ObjectRef{}, false, nil
	}
	kind := RefConfigMap
	if set[0] == ParamFileSystemIDSecretRef {
		kind = RefSecret
	}
	ref, err = parseRef(set[0], kind, m[set[0]])
	return ref, err == nil, err
}

func parseRef(param string, kind RefKind, s string) (ObjectRef, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return ObjectRef{}, paramErr(param, "%q is not namespace/name/key", truncate(s, 64))
	}
	ref := ObjectRef{Kind: kind, Namespace: parts[0], Name: parts[1], Key: parts[2], Param: param}
	for _, check := range []struct {
		what string
		errs []string
	}{
		{"namespace", validation.IsDNS1123Label(ref.Namespace)},
		{"name", validation.IsDNS1123Subdomain(ref.Name)},
		{"key", validation.IsConfigMapKey(ref.Key)},
	} {
		if len(check.errs) > 0 {
			return ObjectRef{}, paramErr(param, "%q: the %s is invalid: %s", truncate(s, 64), check.what, check.errs[0])
		}
	}
	return ref, nil
}

// FileSystemIDFromRef reads a referenced value as a file system ID: a value
// written with `echo` ends in a newline, so surrounding space is trimmed;
// nothing else is. ok false: the value is no file system ID.
func FileSystemIDFromRef(value string) (id string, ok bool) {
	id = strings.TrimSpace(value)
	return id, ValidFileSystemID(id)
}
