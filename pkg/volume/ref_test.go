package volume

import (
	"errors"
	"strings"
	"testing"
)

func TestFileSystemRefNeedsExactlyOneWellFormedSource(t *testing.T) {
	cases := []struct {
		name   string
		params map[string]string
		ref    *ObjectRef // nil: no reference (fileSystemId) or an error
		bad    string     // the parameter a ParamError names; "" = valid
	}{
		{"fileSystemId", map[string]string{"fileSystemId": "fs-1"}, nil, ""},
		{"ConfigMap", map[string]string{"fileSystemIdConfigRef": "ns/cm/key.1"}, &ObjectRef{RefConfigMap, "ns", "cm", "key.1", ParamFileSystemIDConfigRef}, ""},
		{"Secret", map[string]string{"fileSystemIdSecretRef": "ns/a.b/k_2"}, &ObjectRef{RefSecret, "ns", "a.b", "k_2", ParamFileSystemIDSecretRef}, ""},
		{"none", map[string]string{}, nil, ParamFileSystemID},
		{"two", map[string]string{"fileSystemId": "fs-1", "fileSystemIdSecretRef": "ns/a/k"}, nil, ParamFileSystemIDSecretRef},
		{"three", map[string]string{"fileSystemId": "fs-1", "fileSystemIdSecretRef": "ns/a/k", "fileSystemIdConfigRef": "ns/a/k"}, nil, ParamFileSystemIDConfigRef},
		{"two parts", map[string]string{"fileSystemIdConfigRef": "ns/cm"}, nil, ParamFileSystemIDConfigRef},
		{"four parts", map[string]string{"fileSystemIdConfigRef": "ns/cm/k/x"}, nil, ParamFileSystemIDConfigRef},
		{"empty key", map[string]string{"fileSystemIdConfigRef": "ns/cm/"}, nil, ParamFileSystemIDConfigRef},
		{"dot-dot key", map[string]string{"fileSystemIdConfigRef": "ns/cm/.."}, nil, ParamFileSystemIDConfigRef},
		{"upper-case namespace", map[string]string{"fileSystemIdConfigRef": "NS/cm/k"}, nil, ParamFileSystemIDConfigRef},
		{"dot-dot name", map[string]string{"fileSystemIdSecretRef": "ns/../k"}, nil, ParamFileSystemIDSecretRef},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ref, ok, err := FileSystemRef(tc.params)
			if tc.bad != "" {
				var pe *ParamError
				if !errors.As(err, &pe) || pe.Key != tc.bad || !errors.Is(err, ErrInvalidParameter) {
					t.Fatalf("FileSystemRef = %v, want a ParamError naming %s", err, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ok != (tc.ref != nil) || (tc.ref != nil && ref != *tc.ref) {
				t.Fatalf("FileSystemRef = %+v, %v; want %+v", ref, ok, tc.ref)
			}
		})
	}
}

// A reference that is accepted names exactly the three parts written, none
// of which can step out of its namespace or carry a separator.
func FuzzFileSystemRef(f *testing.F) {
	for _, s := range []string{"ns/cm/key", "ns/../k", "a/b/c/d", "ns/cm/..", "", "//", "ns/a.b/k_-.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, param := range []string{ParamFileSystemIDConfigRef, ParamFileSystemIDSecretRef} {
			ref, ok, err := FileSystemRef(map[string]string{param: s})
			if err != nil {
				if !errors.Is(err, ErrInvalidParameter) {
					t.Fatalf("%q: error %v is not ErrInvalidParameter", s, err)
				}
				continue
			}
			if !ok || ref.Namespace+"/"+ref.Name+"/"+ref.Key != s {
				t.Fatalf("%q accepted as %+v", s, ref)
			}
			for _, part := range []string{ref.Namespace, ref.Name, ref.Key} {
				if part == "" || part == "." || part == ".." || strings.ContainsAny(part, "/\\\x00") {
					t.Fatalf("%q: part %q accepted", s, part)
				}
			}
		}
	})
}
