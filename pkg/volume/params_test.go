package volume

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

// minimal is the smallest parameter set ParseParams accepts.
func minimal() map[string]string {
	return map[string]string{ParamProvisioningMode: "efs-ap", ParamFileSystemID: fsID}
}

func with(kv ...string) map[string]string {
	m := minimal()
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func without(key string) map[string]string {
	m := minimal()
	delete(m, key)
	return m
}

func TestParseParamsDefaults(t *testing.T) {
	p, err := ParseParams(minimal())
	if err != nil {
		t.Fatal(err)
	}
	want := Params{
		Mode: ProvisioningModeAccessPoint, FileSystemID: fsID, DirectoryPerms: "700", UID: -1, GID: -1,
		GIDRangeStart: 50000, GIDRangeEnd: 60000, EnsureUniqueDirectory: true, EnableTagging: true,
	}
	if p != want {
		t.Fatalf("defaults = %+v\nwant %+v", p, want)
	}
	if !p.NeedsGIDAllocation() {
		t.Error("NeedsGIDAllocation is false without uid/gid")
	}
}

func TestParseParamsAcceptsEveryParameter(t *testing.T) {
	tests := []struct {
		name  string
		in    map[string]string
		check func(Params) bool
	}{
		{"upstream's enableTagging default spelled out", with(ParamEnableTagging, "true"), func(p Params) bool { return p.EnableTagging }},
		{"enableTagging false: untagged access points", with(ParamEnableTagging, "false"), func(p Params) bool { return !p.EnableTagging }},
		{"upstream's enforceZoneAffinity default spelled out", with(ParamEnforceZoneAffinity, "false"), func(p Params) bool { return !p.EnforceZoneAffinity }},
		{"enforceZoneAffinity true", with(ParamEnforceZoneAffinity, "true"), func(p Params) bool { return p.EnforceZoneAffinity }},
		{"restoreOwnership defaults to the new volume's", with(ParamEnforceZoneAffinity, "false"), func(p Params) bool { return !p.RestoreKeepsOwners }},
		{"restoreOwnership volume", with(ParamRestoreOwnership, "volume"), func(p Params) bool { return !p.RestoreKeepsOwners }},
		{"restoreOwnership source", with(ParamRestoreOwnership, "source"), func(p Params) bool { return p.RestoreKeepsOwners }},
		{"directoryPerms 3 digits", with(ParamDirectoryPerms, "755"), func(p Params) bool { return p.DirectoryPerms == "755" }},
		{"directoryPerms 4 digits", with(ParamDirectoryPerms, "0770"), func(p Params) bool { return p.DirectoryPerms == "0770" }},
		{"efs-dir without directoryPerms: 2770", with(ParamProvisioningMode, ProvisioningModeDirectory), func(p Params) bool { return p.DirectoryPerms == "2770" }},
		{"efs-ap without directoryPerms: 700", with(ParamProvisioningMode, ProvisioningModeAccessPoint), func(p Params) bool { return p.DirectoryPerms == "700" }},
		{"uid only", with(ParamUID, "1000"), func(p Params) bool { return p.UID == 1000 && p.GID == -1 && p.NeedsGIDAllocation() }},
		{"gid only", with(ParamGID, "0"), func(p Params) bool { return p.GID == 0 && p.UID == -1 && p.NeedsGIDAllocation() }},
		{"uid and gid", with(ParamUID, "1000", ParamGID, "2000"), func(p Params) bool { return p.UID == 1000 && p.GID == 2000 && !p.NeedsGIDAllocation() }},
		{"largest uid", with(ParamUID, "4294967295"), func(p Params) bool { return p.UID == 4294967295 }},
		{"gid range", with(ParamGIDRangeStart, "1000", ParamGIDRangeEnd, "2000"), func(p Params) bool { return p.GIDRangeStart == 1000 && p.GIDRangeEnd == 2000 }},
		{"basePath absolute", with(ParamBasePath, "/dynamic_provisioning"), func(p Params) bool { return p.BasePath == "/dynamic_provisioning" }},
		{"basePath relative as upstream", with(ParamBasePath, "a//b/"), func(p Params) bool { return p.BasePath == "/a/b" }},
		{"basePath root is none", with(ParamBasePath, "/"), func(p Params) bool { return p.BasePath == "" }},
		{"basePath empty is none", with(ParamBasePath, ""), func(p Params) bool { return p.BasePath == "" }},
		{"subPathPattern", with(ParamSubPathPattern, "${.PVC.namespace}/${.PVC.name}"), func(p Params) bool { return p.SubPathPattern == "${.PVC.namespace}/${.PVC.name}" }},
		{"ensureUniqueDirectory false", with(ParamEnsureUniqueDirectory, "false"), func(p Params) bool { return !p.EnsureUniqueDirectory }},
		{"ensureUniqueDirectory True", with(ParamEnsureUniqueDirectory, "True"), func(p Params) bool { return p.EnsureUniqueDirectory }},
		{"reuseAccessPoint", with(ParamReuseAccessPoint, "true", ParamPVCName, "data"), func(p Params) bool { return p.ReuseAccessPoint && p.PVCName == "data" }},
		{"az", with(ParamAZ, "us-east-1a"), func(p Params) bool { return p.AZ == "us-east-1a" }},
		{"extra create metadata", with(ParamPVCName, "c", ParamPVCNamespace, "ns", ParamPVName, "pvc-1"),
			func(p Params) bool { return p.PVCName == "c" && p.PVCNamespace == "ns" && p.PVName == "pvc-1" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseParams(tt.in)
			if err != nil {
				t.Fatalf("ParseParams(%v): %v", tt.in, err)
			}
			if !tt.check(p) {
				t.Fatalf("ParseParams(%v) = %+v", tt.in, p)
			}
		})
	}
}

func TestParseParamsRejectsNamingTheParameter(t *testing.T) {
	tests := []struct {
		name    string
		in      map[string]string
		wantKey string
		wantMsg string
	}{
		{"missing provisioningMode", without(ParamProvisioningMode), ParamProvisioningMode, "missing"},
		{"other provisioningMode", with(ParamProvisioningMode, "efs-nfs"), ParamProvisioningMode, "not supported"},
		{"reuseAccessPoint with efs-dir", func() map[string]string {
			m := with(ParamProvisioningMode, ProvisioningModeDirectory)
			m[ParamReuseAccessPoint], m[ParamPVCName] = "true", "claim"
			return m
		}(), ParamReuseAccessPoint, "needs access points"},
		{"missing fileSystemId", without(ParamFileSystemID), ParamFileSystemID, "missing"},
		{"fileSystemId and a reference", with(ParamFileSystemIDConfigRef, "ns/cm/key"), ParamFileSystemIDConfigRef, "exactly one"},
		{"enableTagging not a boolean", with(ParamEnableTagging, "no"), ParamEnableTagging, "boolean"},
		{"enforceZoneAffinity not a boolean", with(ParamEnforceZoneAffinity, "yes"), ParamEnforceZoneAffinity, "boolean"},
		{"restoreOwnership of neither kind", with(ParamRestoreOwnership, "Source"), ParamRestoreOwnership, "neither"},
		{"blank fileSystemId", with(ParamFileSystemID, "  "), ParamFileSystemID, "empty"},
		{"malformed fileSystemId", with(ParamFileSystemID, "fs-xyz"), ParamFileSystemID, "fs-<hex>"},
		{"a malformed one of several", with(ParamFileSystemID, fsID+",fs-xyz"), ParamFileSystemID, "fs-<hex>"},
		{"an empty one of several", with(ParamFileSystemID, fsID+","), ParamFileSystemID, "empty"},
		{"one file system twice", with(ParamFileSystemID, fsID+","+fsID), ParamFileSystemID, "twice"},
		{"reuseAccessPoint over several", with(ParamFileSystemID, fsID+",fs-11111111", ParamReuseAccessPoint, "true", ParamPVCName, "c"), ParamReuseAccessPoint, "single file system"},
		{"directoryPerms not octal", with(ParamDirectoryPerms, "800"), ParamDirectoryPerms, "octal"},
		{"directoryPerms too short", with(ParamDirectoryPerms, "70"), ParamDirectoryPerms, "octal"},
		{"directoryPerms symbolic", with(ParamDirectoryPerms, "rwx"), ParamDirectoryPerms, "octal"},
		{"uid not a number", with(ParamUID, "root"), ParamUID, "integer"},
		{"uid negative", with(ParamUID, "-1"), ParamUID, "greater than or equal to 0"},
		{"uid too large", with(ParamUID, "4294967296"), ParamUID, "at most"},
		{"gid not a number", with(ParamGID, "1e3"), ParamGID, "integer"},
		{"gid negative", with(ParamGID, "-5"), ParamGID, "greater than or equal to 0"},
		{"range end without start", with(ParamGIDRangeEnd, "2000"), ParamGIDRangeStart, "missing"},
		{"range start without end", with(ParamGIDRangeStart, "1000"), ParamGIDRangeEnd, "missing"},
		{"range start zero", with(ParamGIDRangeStart, "0", ParamGIDRangeEnd, "10"), ParamGIDRangeStart, "greater than 0"},
		{"range start not a number", with(ParamGIDRangeStart, "a", ParamGIDRangeEnd, "10"), ParamGIDRangeStart, "integer"},
		{"range end not a number", with(ParamGIDRangeStart, "1", ParamGIDRangeEnd, "ten"), ParamGIDRangeEnd, "integer"},
		{"range end equals start", with(ParamGIDRangeStart, "1000", ParamGIDRangeEnd, "1000"), ParamGIDRangeEnd, "greater than gidRangeStart"},
		{"range end below start", with(ParamGIDRangeStart, "1000", ParamGIDRangeEnd, "999"), ParamGIDRangeEnd, "greater than gidRangeStart"},
		{"range end too large", with(ParamGIDRangeStart, "1", ParamGIDRangeEnd, "4294967296"), ParamGIDRangeEnd, "at most"},
		{"basePath dot-dot", with(ParamBasePath, "/a/../b"), ParamBasePath, "'.'"},
		{"basePath hidden", with(ParamBasePath, "/.snapshot"), ParamBasePath, "'.'"},
		{"basePath forbidden char", with(ParamBasePath, "/a$b"), ParamBasePath, "contains one of"},
		{"basePath control char", with(ParamBasePath, "/a\nb"), ParamBasePath, "control"},
		{"basePath too deep", with(ParamBasePath, "/a/b/c/d"), ParamBasePath, "levels"},
		{"basePath too long", with(ParamBasePath, "/"+strings.Repeat("b", 98)), ParamBasePath, "characters"},
		{"subPathPattern unknown variable", with(ParamSubPathPattern, "${PVC.name}"), ParamSubPathPattern, "unknown variable"},
		{"subPathPattern unterminated", with(ParamSubPathPattern, "${.PVC.name"), ParamSubPathPattern, "unterminated"},
		{"subPathPattern stray brace", with(ParamSubPathPattern, "a}b"), ParamSubPathPattern, "stray"},
		{"subPathPattern stray dollar", with(ParamSubPathPattern, "$HOME"), ParamSubPathPattern, "stray"},
		{"subPathPattern dot-dot", with(ParamSubPathPattern, "../${.PVC.name}"), ParamSubPathPattern, `".."`},
		{"subPathPattern control char", with(ParamSubPathPattern, "a\tb"), ParamSubPathPattern, "control"},
		{"ensureUniqueDirectory not bool", with(ParamEnsureUniqueDirectory, "yes"), ParamEnsureUniqueDirectory, "boolean"},
		{"reuseAccessPoint not bool", with(ParamReuseAccessPoint, "maybe"), ParamReuseAccessPoint, "boolean"},
		{"reuseAccessPoint without PVC name", with(ParamReuseAccessPoint, "true"), ParamReuseAccessPoint, "--extra-create-metadata"},
		{"az control char", with(ParamAZ, "us\x00east"), ParamAZ, "control"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseParams(tt.in)
			if !errors.Is(err, ErrInvalidParameter) {
				t.Fatalf("ParseParams(%v) = %+v, %v; want ErrInvalidParameter", tt.in, p, err)
			}
			var pe *ParamError
			if !errors.As(err, &pe) || pe.Key != tt.wantKey {
				t.Fatalf("error %v names %q, want %q", err, pe.Key, tt.wantKey)
			}
			if !strings.Contains(err.Error(), tt.wantKey) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("message %q should name %q and say %q", err, tt.wantKey, tt.wantMsg)
			}
		})
	}
}

func TestParseParamsDoesNotKeepTheCallersMap(t *testing.T) {
	m := with(ParamBasePath, "/x")
	orig := maps.Clone(m)
	if _, err := ParseParams(m); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(m, orig) {
		t.Fatalf("ParseParams changed its input: %v", m)
	}
}

func TestIdentity(t *testing.T) {
	tests := []struct {
		name             string
		uid, gid         int64
		wantUID, wantGID int64
	}{
		{"neither fixed: both allocated", -1, -1, 50123, 50123},
		{"uid fixed", 1000, -1, 1000, 50123},
		{"gid fixed: uid allocated as upstream", -1, 2000, 50123, 2000},
		{"both fixed", 1000, 2000, 1000, 2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Params{UID: tt.uid, GID: tt.gid}
			if u, g := p.Identity(50123); u != tt.wantUID || g != tt.wantGID {
				t.Fatalf("Identity = %d, %d; want %d, %d", u, g, tt.wantUID, tt.wantGID)
			}
		})
	}
}

func TestClientToken(t *testing.T) {
	long := strings.Repeat("n", 128)
	tests := []struct {
		name   string
		p      Params
		volume string
		want   string
	}{
		{"kubernetes name is sent as is, as upstream", Params{}, "pvc-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0", "pvc-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"},
		{"64 characters still as is", Params{}, strings.Repeat("x", 64), strings.Repeat("x", 64)},
		{"128-character name is hashed", Params{}, long, sha256Hex(long)},
		{"65 characters are hashed", Params{}, strings.Repeat("x", 65), sha256Hex(strings.Repeat("x", 65))},
		{"non-ASCII is hashed", Params{}, "vol-é", sha256Hex("vol-é")},
		{"space is hashed", Params{}, "a b", sha256Hex("a b")},
		// Upstream: sha256 hex of the PVC name, so access points it created are reused.
		{"reuse hashes the PVC name", Params{ReuseAccessPoint: true, PVCName: "data", PVCNamespace: "ns"}, "pvc-1",
			"3a6eb0790f39ac87c94f3856b2dd2c5d110e6811602261a9a923d3bb23adc8b7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.p.ClientToken(tt.volume)
			if got != tt.want {
				t.Fatalf("ClientToken(%q) = %q, want %q", tt.volume, got, tt.want)
			}
			if len(got) > MaxClientTokenLength {
				t.Fatalf("token is %d characters", len(got))
			}
		})
	}
}

// Unknown keys are ignored, as upstream ignores them, and listed for a
// warning; a known key's bad value beside them is still refused.
func TestParseParamsIgnoresUnknownKeys(t *testing.T) {
	m := minimal()
	m["mountOptions"], m["fsType"], m["csi.storage.k8s.io/pvc/uid"] = "tls", "efs", "x"
	p, err := ParseParams(m)
	if err != nil {
		t.Fatalf("ParseParams with unknown keys: %v", err)
	}
	if want, _ := ParseParams(minimal()); p != want {
		t.Errorf("unknown keys changed the parameters: %+v, want %+v", p, want)
	}
	if got, want := IgnoredParams(m), []string{"csi.storage.k8s.io/pvc/uid", "fsType", "mountOptions"}; !slices.Equal(got, want) {
		t.Errorf("IgnoredParams = %q, want %q", got, want)
	}
	if got := IgnoredParams(minimal()); got != nil {
		t.Errorf("IgnoredParams of known keys = %q", got)
	}
	m[ParamDirectoryPerms] = "800"
	var pe *ParamError
	if _, err := ParseParams(m); !errors.As(err, &pe) || pe.Key != ParamDirectoryPerms {
		t.Errorf("bad directoryPerms beside unknown keys: %v", err)
	}
}

// fileSystemId names several file systems, comma-separated (upstream PR
// #761's form): the first stands until the controller places the volume.
// Spaces around the commas are accepted (before: "fs-a, fs-b" was refused
// as " fs-b" not being a file system ID).
func TestParseParamsSeveralFileSystems(t *testing.T) {
	for _, list := range []string{fsID + ",fs-11111111", fsID + ", fs-11111111", " " + fsID + " ,\tfs-11111111 "} {
		p, err := ParseParams(with(ParamFileSystemID, list))
		if err != nil {
			t.Fatalf("%q: %v", list, err)
		}
		if p.FileSystemID != fsID || p.FileSystemIDs != fsID+",fs-11111111" {
			t.Errorf("%q: FileSystemID %q, FileSystemIDs %q", list, p.FileSystemID, p.FileSystemIDs)
		}
	}
	for _, bad := range []string{fsID + ", ", fsID + ", " + fsID} {
		if _, err := ParseParams(with(ParamFileSystemID, bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if p, _ := ParseParams(minimal()); p.FileSystemIDs != "" {
		t.Errorf("one file system: FileSystemIDs %q, want empty", p.FileSystemIDs)
	}
}
