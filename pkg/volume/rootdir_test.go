package volume

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// efsPathRe is EFS's own validation of RootDirectory.Path, with the
// look-ahead (which Go lacks) checked separately in assertEFSPath.
var efsPathRe = regexp.MustCompile("^(/|(/[^$#<>;`|&?{}^*/\n]+){1,4})$")

func assertEFSPath(t *testing.T, p string) {
	t.Helper()
	if len(p) > 100 || !efsPathRe.MatchString(p) || strings.Contains(p, "/.") || p == "/" {
		t.Fatalf("root directory %q (%d characters) would be refused by EFS or is the root", p, len(p))
	}
}

func mustParams(t *testing.T, m map[string]string) Params {
	t.Helper()
	p, err := ParseParams(m)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const pvName = "pvc-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"

var uuidSuffixRe = `-[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}`

func TestRootDir(t *testing.T) {
	meta := []string{ParamPVCName, "data", ParamPVCNamespace, "team-a", ParamPVName, pvName}
	tests := []struct {
		name   string
		params map[string]string
		volume string
		want   string // exact, or a regexp when it starts with ^
	}{
		{"default is the volume name, as upstream", minimal(), pvName, "/" + pvName},
		{"default below basePath", with(ParamBasePath, "/dynamic_provisioning"), pvName, "/dynamic_provisioning/" + pvName},
		{"ensureUniqueDirectory does not touch the default", with(ParamEnsureUniqueDirectory, "true"), pvName, "/" + pvName},
		{"pattern with unique suffix", with(append(meta, ParamBasePath, "/dp", ParamSubPathPattern, "${.PVC.namespace}/${.PVC.name}")...), pvName,
			"^/dp/team-a/data" + uuidSuffixRe + "$"},
		{"pattern without unique suffix", with(append(meta, ParamSubPathPattern, "${.PVC.namespace}/${.PVC.name}", ParamEnsureUniqueDirectory, "false")...), pvName,
			"/team-a/data"},
		{"pattern with literals", with(append(meta, ParamSubPathPattern, "k8s/${.PVC.namespace}-${.PVC.name}", ParamEnsureUniqueDirectory, "false")...), pvName,
			"/k8s/team-a-data"},
		{"PV name variable", with(append(meta, ParamSubPathPattern, "${.PV.name}", ParamEnsureUniqueDirectory, "false")...), "other", "/" + pvName},
		{"PV name falls back to the volume name", with(ParamSubPathPattern, "${.PV.name}", ParamEnsureUniqueDirectory, "false"), pvName, "/" + pvName},
		{"pattern slashes are cleaned as path.Join", with(append(meta, ParamSubPathPattern, "/./a//${.PVC.name}/", ParamEnsureUniqueDirectory, "false")...), pvName, "/a/data"},
		{"four levels are allowed", with(append(meta, ParamBasePath, "/a/b", ParamSubPathPattern, "c/${.PVC.name}", ParamEnsureUniqueDirectory, "false")...), pvName, "/a/b/c/data"},
		{"128-character name is shortened and hashed", minimal(), strings.Repeat("a", 128), "^/a{82}-[0-9a-f]{16}$"},
		{"name EFS refuses is made safe", minimal(), "my$vol", "^/my_vol-[0-9a-f]{16}$"},
		{"dot name is replaced by its hash", minimal(), "..", "^/[0-9a-f]{16}$"},
		{"long pattern is shortened before the unique suffix", with(ParamPVCName, strings.Repeat("p", 90), ParamSubPathPattern, "${.PVC.name}"), pvName,
			"^/p{62}" + uuidSuffixRe + "$"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParams(t, tt.params)
			got, err := p.RootDir(tt.volume)
			if err != nil {
				t.Fatalf("RootDir(%q): %v", tt.volume, err)
			}
			if strings.HasPrefix(tt.want, "^") {
				if !regexp.MustCompile(tt.want).MatchString(got) {
					t.Fatalf("RootDir(%q) = %q, want match %s", tt.volume, got, tt.want)
				}
			} else if got != tt.want {
				t.Fatalf("RootDir(%q) = %q, want %q", tt.volume, got, tt.want)
			}
			assertEFSPath(t, got)
			if again, _ := p.RootDir(tt.volume); again != got {
				t.Fatalf("RootDir is not deterministic: %q then %q", got, again)
			}
		})
	}
}

func TestRootDirRejectsNamingTheParameter(t *testing.T) {
	tests := []struct {
		name    string
		params  map[string]string
		volume  string
		wantKey string
	}{
		{"empty volume name", minimal(), "", "name"},
		{"pattern needs PVC name metadata", with(ParamSubPathPattern, "${.PVC.name}"), pvName, ParamSubPathPattern},
		{"pattern needs namespace metadata", with(ParamPVCName, "d", ParamSubPathPattern, "${.PVC.namespace}/${.PVC.name}"), pvName, ParamSubPathPattern},
		{"variable value with slash", with(ParamPVCName, "a/b", ParamSubPathPattern, "${.PVC.name}"), pvName, ParamPVCName},
		{"variable value dot-dot", with(ParamPVCNamespace, "..", ParamSubPathPattern, "x/${.PVC.namespace}"), pvName, ParamPVCNamespace},
		{"variable value dot", with(ParamPVName, ".", ParamSubPathPattern, "${.PV.name}"), pvName, ParamPVName},
		{"expanded component starts with dot", with(ParamPVCName, ".hidden", ParamSubPathPattern, "${.PVC.name}"), pvName, ParamSubPathPattern},
		{"expanded component has a forbidden char", with(ParamPVCName, "a&b", ParamSubPathPattern, "${.PVC.name}"), pvName, ParamSubPathPattern},
		{"pattern expands to nothing", with(ParamSubPathPattern, "/"), pvName, ParamSubPathPattern},
		{"too deep", with(ParamPVCName, "d", ParamBasePath, "/a/b", ParamSubPathPattern, "c/d/${.PVC.name}"), pvName, ParamSubPathPattern},
		{"too long without unique suffix", with(ParamPVCName, strings.Repeat("p", 100), ParamSubPathPattern, "${.PVC.name}", ParamEnsureUniqueDirectory, "false"), pvName, ParamSubPathPattern},
		{"no room for the unique suffix", with(ParamPVCName, "d", ParamBasePath, "/"+strings.Repeat("b", 62), ParamSubPathPattern, "${.PVC.name}"), pvName, ParamSubPathPattern},
		{"basePath leaves no room for a hashed name", with(ParamBasePath, "/"+strings.Repeat("b", 90)), strings.Repeat("a", 128), ParamBasePath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParams(t, tt.params)
			got, err := p.RootDir(tt.volume)
			var pe *ParamError
			if !errors.Is(err, ErrInvalidParameter) || !errors.As(err, &pe) {
				t.Fatalf("RootDir = %q, %v; want a *ParamError", got, err)
			}
			if pe.Key != tt.wantKey || !strings.Contains(err.Error(), tt.wantKey) {
				t.Fatalf("error %q names %q, want %q", err, pe.Key, tt.wantKey)
			}
		})
	}
}

// TestRootDirOfMaximumLengthNamesStaysUnique is csi-sanity's "maximum-length
// name" case and more: 128-character names that differ only at the end must
// get different directories, under the longest basePath that still works.
func TestRootDirOfMaximumLengthNamesStaysUnique(t *testing.T) {
	for _, base := range []string{"", "/" + strings.Repeat("b", 40), "/a/b/" + strings.Repeat("c", 70)} {
		p := mustParams(t, with(ParamBasePath, base))
		seen := map[string]string{}
		for i := range 1000 {
			name := strings.Repeat("n", 124) + fmt.Sprintf("%04d", i)
			dir, err := p.RootDir(name)
			if err != nil {
				t.Fatalf("basePath %q, RootDir(128 chars): %v", base, err)
			}
			assertEFSPath(t, dir)
			if prev, dup := seen[dir]; dup {
				t.Fatalf("%q and %q share %q", prev, name, dir)
			}
			seen[dir] = name
		}
	}
}

func TestUniqueSuffixDiffersPerVolume(t *testing.T) {
	p := mustParams(t, with(ParamPVCName, "data", ParamPVCNamespace, "ns", ParamSubPathPattern, "${.PVC.namespace}/${.PVC.name}"))
	a, errA := p.RootDir("pvc-a")
	b, errB := p.RootDir("pvc-b")
	if errA != nil || errB != nil || a == b {
		t.Fatalf("two volumes of one claim name got %q (%v) and %q (%v)", a, errA, b, errB)
	}
}

func TestCheckRootDir(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{"/a", true},
		{"/a/b/c/d", true},
		{"/" + strings.Repeat("x", 99), true},
		{"/", false},
		{"", false},
		{"a/b", false},
		{"/a/b/c/d/e", false},
		{"/" + strings.Repeat("x", 100), false},
		{"/a/../b", false},
		{"/a/./b", false},
		{"/a//b", false},
		{"/a/", false},
		{"/a/.b", false},
		{"/a|b", false},
	}
	for _, tt := range tests {
		err := CheckRootDir(tt.path)
		if (err == nil) != tt.ok {
			t.Errorf("CheckRootDir(%q) = %v, want ok=%v", tt.path, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrUnsafePath) {
			t.Errorf("CheckRootDir(%q) error %v does not wrap ErrUnsafePath", tt.path, err)
		}
	}
}

// MadeForName is the only proof of ownership an untagged access point
// offers DeleteVolume (which gets no class): every directory RootDir makes
// for a name under a class whose last component the name determines
// fits that name, and no other name's.
func TestMadeForNameKnowsTheDirectoriesOfAName(t *testing.T) {
	const name, other = "pvc-0b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f", "pvc-1b7c5d2e-6f3a-4c1d-9e8f-7a6b5c4d3e2f"
	long := strings.Repeat("x", 120)
	for _, tc := range []struct {
		desc  string
		class map[string]string
		name  string
		fits  bool
	}{
		{"no pattern: the name", minimal(), name, true},
		{"basePath: the name below it", with(ParamBasePath, "/dynamic_provisioning"), name, true},
		{"a long basePath: the name shortened with its hash", with(ParamBasePath, "/"+strings.Repeat("b", 70)), name, true},
		{"a name too long for a path component", minimal(), long, true},
		{"pattern with the unique suffix", with(ParamSubPathPattern, "${.PVC.namespace}/${.PVC.name}", ParamPVCName, "data", ParamPVCNamespace, "team-a"), name, true},
		{"pattern without the unique suffix: proves nothing", with(ParamSubPathPattern, "${.PVC.namespace}/${.PVC.name}", ParamPVCName, "data", ParamPVCNamespace, "team-a", ParamEnsureUniqueDirectory, "false"), name, false},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			p, err := ParseParams(tc.class)
			if err != nil {
				t.Fatal(err)
			}
			dir, err := p.RootDir(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if got := MadeForName(dir, tc.name); got != tc.fits {
				t.Errorf("MadeForName(%q, %q) = %v, want %v", dir, tc.name, got, tc.fits)
			}
			if MadeForName(dir, other) {
				t.Errorf("MadeForName(%q, %q) = true for another volume's name", dir, other)
			}
		})
	}
	for _, dir := range []string{"/", "", "/" + name + "/..", "/shared/app", "/" + name + "x"} {
		if MadeForName(dir, name) {
			t.Errorf("MadeForName(%q, %q) = true", dir, name)
		}
	}
}

// No volume's directory can be the trash of root removal or inside it: a
// basePath, a subPathPattern (literal or through a variable's value), a
// root directory and a directory volume's ID naming it are all refused.
func TestNoVolumePathReachesTheTrash(t *testing.T) {
	for _, p := range []string{"/" + TrashDir, "/" + TrashDir + "/1.x", "/a/" + TrashDir} {
		if err := CheckRootDir(p); err == nil {
			t.Errorf("CheckRootDir(%q) accepted", p)
		}
	}
	for _, m := range []map[string]string{
		{ParamBasePath: "/" + TrashDir},
		{ParamBasePath: TrashDir + "/x"},
		{ParamSubPathPattern: TrashDir + "/${.PVC.name}", ParamPVCName: "a", ParamEnsureUniqueDirectory: "false"},
		{ParamSubPathPattern: "${.PVC.name}/x", ParamPVCName: TrashDir, ParamEnsureUniqueDirectory: "false"},
		{ParamSubPathPattern: "${.PVC.namespace}", ParamPVCNamespace: TrashDir, ParamEnsureUniqueDirectory: "false"},
	} {
		p, err := ParseParams(m)
		if err != nil {
			continue // refused as a parameter
		}
		if dir, err := p.RootDir(pvName); err == nil && InTrash(dir) {
			t.Errorf("parameters %v give %q, in the trash", m, dir)
		} else if err == nil {
			t.Errorf("parameters %v accepted: %q", m, dir)
		}
	}
	for _, id := range []string{DirID("fs-0123456789abcdef0", "/"+TrashDir), DirID("fs-0123456789abcdef0", "/"+TrashDir+"/1.x")} {
		if _, err := ParseID(id); err == nil {
			t.Errorf("ParseID(%q) accepted a directory volume in the trash", id)
		}
	}
	if !InTrash("/"+TrashDir+"/x") || InTrash("/"+TrashDir+"x") || InTrash("/a/"+TrashDir) {
		t.Error("InTrash is not whole components at the root")
	}
}

// UniqueDirOf accepts upstream's random ensureUniqueDirectory suffix in
// place of this driver's, and nothing else.
func TestUniqueDirOf(t *testing.T) {
	planned := "/base/ns/claim-f8c13444-8d3b-81a3-aecd-5c1505410dfc"
	for _, tc := range []struct {
		got  string
		want bool
	}{
		{"/base/ns/claim-1c0ffee0-0000-4000-8000-0123456789ab", true},
		{planned, true},
		{"/base/ns/other-1c0ffee0-0000-4000-8000-0123456789ab", false},
		{"/base/xx/claim-1c0ffee0-0000-4000-8000-0123456789ab", false},
		{"/base/ns/claim-1c0ffee0-0000-4000-8000-0123456789a", false},
		{"/base/ns/claim-1c0ffee0x0000-4000-8000-0123456789ab", false},
		{"/base/ns/claim-1c0ffee0-0000-4000-8000-0123456789zz", false},
		{"", false},
	} {
		if got := UniqueDirOf(planned, tc.got); got != tc.want {
			t.Errorf("UniqueDirOf(%q, %q) = %v, want %v", planned, tc.got, got, tc.want)
		}
	}
	if UniqueDirOf("/base/ns/claim", "/base/ns/claim") {
		t.Error("a directory without the suffix matched")
	}
}
