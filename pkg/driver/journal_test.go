package driver

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/internal/testutil"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

// --journal auto keeps the record in ConfigMaps only where the service account may use
// them: this binary under upstream's chart or manifests (whose RBAC grants no ConfigMaps)
// must still provision, so it keeps a file record and says which Role would grant them.
// An API server that does not answer is no proof of a missing grant: ConfigMaps, whose
// calls then report it.
func TestJournalAutoWithoutConfigMapGrantIsAFile(t *testing.T) {
	for _, tc := range []struct {
		name     string
		forbid   []string // verbs forbidden on configmaps; "*" all
		down     bool     // the API server does not answer
		wantFile bool
	}{
		{name: "granted (the chart's Role)", wantFile: false},
		{name: "upstream's RBAC: no ConfigMaps at all", forbid: []string{"*"}, wantFile: true},
		{name: "list forbidden", forbid: []string{"list"}, wantFile: true},
		{name: "API server down: ConfigMaps", down: true, wantFile: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := kubetest.Start(t)
			for _, v := range tc.forbid {
				if v == "*" {
					api.Forbid("configmaps")
				} else {
					api.Forbid("configmaps", v)
				}
			}
			kcfg := kube.Config{URL: api.URL, TokenFile: api.TokenFile("controller"), CAFile: api.CAFile}
			if tc.down {
				kcfg.URL = "https://127.0.0.1:1"
			}
			kc, err := kube.New(kcfg)
			if err != nil {
				t.Fatal(err)
			}
			var logs testutil.Buffer
			cfg := Config{Journal: "auto", LeaseNamespace: "kube-system", TempDir: t.TempDir(),
				Logger: slog.New(slog.NewTextHandler(&logs, nil))}
			store, err := journalStore(context.Background(), cfg, kc)
			if err != nil {
				t.Fatal(err)
			}
			_, isFile := store.(*journal.File)
			if isFile != tc.wantFile {
				t.Errorf("file record: %v, want %v (%T)\n%s", isFile, tc.wantFile, store, logs.String())
			}
			if named := strings.Contains(logs.String(), "efs-csi-controller-journal"); named != tc.wantFile {
				t.Errorf("a warning naming the Role: %v, want %v\n%s", named, tc.wantFile, logs.String())
			}
		})
	}
}
