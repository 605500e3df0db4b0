package driver

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/internal/testutil"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

const testFS = "fs-0123456789abcdef0"

func testKube(t *testing.T, api *kubetest.Server) *kube.Client {
	t.Helper()
	kc, err := kube.New(kube.Config{URL: api.URL, TokenFile: api.TokenFile("controller"), CAFile: api.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

func testConfig(t *testing.T, journalFlag string) (Config, *testutil.Buffer) {
	var logs testutil.Buffer
	return Config{Journal: journalFlag, DriverName: "efs.csi.aws.com", LeaseNamespace: "kube-system", TempDir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, &logs
}

// --journal auto, kubernetes and leases keep the record in Leases whenever
// the API and the namespace are known: under upstream's RBAC (no ConfigMap
// verbs but get) as under the chart's; never a per-pod file. file is what
// it says; auto without the API is a file; configmaps (a store no release
// shipped) is refused by name.
func TestJournalModes(t *testing.T) {
	for _, tc := range []struct {
		name, flag string
		noAPI      bool
		forbid     bool // upstream's RBAC: configmaps get only
		want       string
	}{
		{name: "auto, the chart's RBAC", flag: "auto", want: "leases"},
		{name: "auto, upstream's RBAC", flag: "auto", forbid: true, want: "leases"},
		{name: "kubernetes, upstream's RBAC", flag: "kubernetes", forbid: true, want: "leases"},
		{name: "leases", flag: "leases", want: "leases"},
		{name: "configmaps is refused", flag: "configmaps", want: "error"},
		{name: "file", flag: "file", want: "file"},
		{name: "auto without the API", flag: "auto", noAPI: true, want: "file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := kubetest.Start(t)
			if tc.forbid {
				api.Forbid("configmaps", "list", "create", "update", "delete")
			}
			kc := testKube(t, api)
			if tc.noAPI {
				kc = nil
			}
			cfg, logs := testConfig(t, tc.flag)
			store, err := journalStore(cfg, kc)
			if tc.want == "error" {
				if err == nil || !strings.Contains(err.Error(), `"configmaps"`) {
					t.Fatalf("--journal %s: %v, want an error naming it", tc.flag, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, logs)
			}
			got := "unknown"
			if _, ok := kube.LeaseJournalStatsOf(store); ok {
				got = "leases"
			} else if _, ok := store.(*journal.File); ok {
				got = "file"
			}
			if got != tc.want {
				t.Fatalf("record in %s (%T), want %s", got, store, tc.want)
			}
			// It works: a create is stored.
			if _, err := store.Create(t.Context(), journal.Entry{Key: journal.Key{Kind: journal.KindID, FileSystem: testFS, Name: "1"}, Value: []byte("t")}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
