package volume

import (
	"errors"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// Fuzz targets. `go test` runs their seeds; explore with, e.g.,
//
//	go test ./pkg/volume -run '^$' -fuzz FuzzParseID -fuzztime 60s

func FuzzParseID(f *testing.F) {
	for _, s := range []string{
		"efs:" + fsID + "::" + apID, fsID + "::" + apID, fsID, fsID + ":/a/b", fsID + ":/a:" + apID,
		"efs:" + fsID + ":a/./b:", fsID + ":/a/../b", fsID + ":::", "efs:efs:", "fs-:fsap-", fsID + ":/\x00",
		"s3files:" + fsID + "::" + apID, "s3files:" + fsID + ":/a:" + apID, "s3files:efs:" + fsID, "s3files:s3files:",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidID) {
				t.Fatalf("ParseID(%q) error %v does not wrap ErrInvalidID", s, err)
			}
			return
		}
		if len(s) > MaxIDLength || !ValidFileSystemID(id.FileSystemID) {
			t.Fatalf("ParseID(%q) accepted %+v", s, id)
		}
		if id.AccessPointID != "" && !ValidAccessPointID(id.AccessPointID) {
			t.Fatalf("ParseID(%q) accepted access point %q", s, id.AccessPointID)
		}
		if p := id.Path; p != "" && (p == "/" || path.Clean(p) != p || !path.IsAbs(p) || strings.Contains(p, "\x00")) {
			t.Fatalf("ParseID(%q) path %q is not absolute and clean", s, p)
		}
		if rel, err := filepath.Rel("/", "/"+id.Path); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			t.Fatalf("ParseID(%q) path %q leaves the root", s, id.Path)
		}
		if again, err := ParseID(id.String()); err != nil || again != id {
			t.Fatalf("ParseID(%q).String() = %q does not round trip: %+v, %v", s, id.String(), again, err)
		}
		if (id.API == APIS3Files) != strings.HasPrefix(s, S3FilesPrefix) || id.API != APIEFS && id.API != APIS3Files {
			t.Fatalf("ParseID(%q) API %q", s, id.API)
		}
		if id.AccessPointID != "" && id.Path == "" {
			provisioned := ProvisionedID(id.FileSystemID, id.AccessPointID)
			if id.API == APIS3Files {
				provisioned = ProvisionedS3FilesID(id.FileSystemID, id.AccessPointID)
			}
			if again, err := ParseID(provisioned); err != nil || again != id {
				t.Fatalf("provisioned ID of %+v does not round trip: %+v, %v", id, again, err)
			}
		}
	})
}

func FuzzRootDir(f *testing.F) {
	f.Add("", "", "data", "ns", pvName, true)
	f.Add("/dynamic_provisioning", "${.PVC.namespace}/${.PVC.name}", "data", "ns", pvName, true)
	f.Add("/a/b", "c/${.PVC.name}", strings.Repeat("p", 90), "ns", pvName, false)
	f.Add("../x", "../${.PV.name}", "..", ".", strings.Repeat("a", 128), true)
	f.Add("/b", "/./${.PVC.name}//", "a/b", "ns", "$name", false)
	f.Fuzz(func(t *testing.T, basePath, pattern, pvc, ns, volName string, unique bool) {
		m := with(ParamPVCName, pvc, ParamPVCNamespace, ns, ParamBasePath, basePath)
		if pattern != "" {
			m[ParamSubPathPattern] = pattern
		}
		if !unique {
			m[ParamEnsureUniqueDirectory] = "false"
		}
		p, err := ParseParams(m)
		if err != nil {
			if !errors.Is(err, ErrInvalidParameter) {
				t.Fatalf("ParseParams error %v does not wrap ErrInvalidParameter", err)
			}
			return
		}
		dir, err := p.RootDir(volName)
		if err != nil {
			if !errors.Is(err, ErrInvalidParameter) {
				t.Fatalf("RootDir error %v does not wrap ErrInvalidParameter", err)
			}
			return
		}
		if err := CheckRootDir(dir); err != nil {
			t.Fatalf("RootDir(%q) = %q: %v", volName, dir, err)
		}
		base := "/" + strings.TrimPrefix(p.BasePath, "/")
		rel, err := filepath.Rel(base, dir)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			t.Fatalf("RootDir(%q) = %q is not strictly below basePath %q", volName, dir, base)
		}
		if again, err := p.RootDir(volName); err != nil || again != dir {
			t.Fatalf("RootDir(%q) not deterministic: %q then %q, %v", volName, dir, again, err)
		}
		if tok := p.ClientToken(volName); tok == "" || len(tok) > MaxClientTokenLength {
			t.Fatalf("ClientToken(%q) = %q", volName, tok)
		}
	})
}

func FuzzSafeJoinAndResolveInside(f *testing.F) {
	base, _ := tree(f)
	for _, s := range []string{"", "a/b", "/a", "..", "rel-escape/x", "vol/up-ok/../x", "chain/y", "abs-root/etc", "loop-a", "dangling-esc", "a\x00"} {
		f.Add(s)
	}
	inside := func(t *testing.T, fn, sub, got string) {
		rel, err := filepath.Rel(base, got)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			t.Fatalf("%s(%q) = %q is outside %s", fn, sub, got, base)
		}
	}
	f.Fuzz(func(t *testing.T, sub string) {
		for _, c := range []struct {
			name string
			fn   func(string, string) (string, error)
		}{{"SafeJoin", SafeJoin}, {"ResolveInside", ResolveInside}, {"ResolveParentInside", ResolveParentInside}} {
			got, err := c.fn(base, sub)
			if err != nil {
				if c.name == "SafeJoin" && !errors.Is(err, ErrUnsafePath) {
					t.Fatalf("SafeJoin(%q) error %v does not wrap ErrUnsafePath", sub, err)
				}
				continue
			}
			inside(t, c.name, sub, got)
		}
	})
}
