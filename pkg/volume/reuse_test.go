package volume

import "testing"

func TestRootDirFitsOnlyWhatTheClassComputes(t *testing.T) {
	parse := func(kv ...string) Params {
		m := map[string]string{ParamProvisioningMode: ProvisioningModeAccessPoint, ParamFileSystemID: "fs-0123456789abcdef0",
			ParamPVCName: "data", ParamPVCNamespace: "prod"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		p, err := ParseParams(m)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	prodPattern := parse(ParamSubPathPattern, "${.PVC.namespace}/${.PVC.name}", ParamBasePath, "/k8s")
	own, err := prodPattern.RootDir("pvc-5d2c0e4a-0b1f-4c8e-9a5e-3f1f0c2b7a11")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		p    Params
		dir  string
		want bool
	}{
		{"made by this class for another volume name", prodPattern, own, true},
		{"another namespace's directory", prodPattern, "/k8s/evil/data-00000000-0000-8000-8000-000000000000", false},
		{"another base path", prodPattern, "/other/prod/data-00000000-0000-8000-8000-000000000000", false},
		{"another claim name", prodPattern, "/k8s/prod/db-00000000-0000-8000-8000-000000000000", false},
		{"deeper", prodPattern, own + "/x", false},
		{"the base path itself", prodPattern, "/k8s", false},
		{"root", prodPattern, "/", false},
		{"default pattern: any volume name under the base path", parse(ParamBasePath, "/k8s"), "/k8s/pvc-anything", true},
		{"default pattern: not under the base path", parse(ParamBasePath, "/k8s"), "/pvc-anything", false},
		{"no unique suffix: exactly the pattern", parse(ParamSubPathPattern, "${.PVC.name}", ParamEnsureUniqueDirectory, "false"), "/data", true},
		{"no unique suffix: something else", parse(ParamSubPathPattern, "${.PVC.name}", ParamEnsureUniqueDirectory, "false"), "/data-x", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.RootDirFits(tt.dir); got != tt.want {
				t.Errorf("RootDirFits(%q) = %v, want %v", tt.dir, got, tt.want)
			}
		})
	}
}
