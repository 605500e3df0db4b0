package driver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

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
// verbs but get) as under the chart's; never a per-pod file. configmaps and
// file are what they say; auto without the API is a file.
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
		{name: "configmaps", flag: "configmaps", want: "configmaps"},
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
			store, err := journalStore(t.Context(), cfg, kc)
			if err != nil {
				t.Fatalf("%v\n%s", err, logs)
			}
			got := "configmaps"
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

// entriesOf lists every volume and id entry of s.
func entriesOf(t *testing.T, s journal.Store) map[journal.Key]string {
	t.Helper()
	out := map[journal.Key]string{}
	for _, kind := range []journal.Kind{journal.KindVolume, journal.KindID} {
		if err := s.List(t.Context(), kind, "", "", func(es []journal.Entry) error {
			for _, e := range es {
				out[e.Key] = string(e.Value) + "|" + e.Index
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func fill(t *testing.T, s journal.Store, prefix string, first, n int) map[journal.Key]string {
	t.Helper()
	want := map[journal.Key]string{}
	for i := first; i < first+n; i++ {
		v := journal.Entry{Key: journal.Key{Kind: journal.KindVolume, FileSystem: testFS, Name: fmt.Sprintf("%s-%d", prefix, i)},
			Value: []byte(fmt.Sprintf(`{"gid":%d}`, 50000+i)), Index: fmt.Sprintf("fsap-%017d", i)}
		id := journal.Entry{Key: journal.Key{Kind: journal.KindID, FileSystem: testFS, Name: fmt.Sprint(50000 + i)}, Value: []byte(v.Key.Name)}
		for _, e := range []journal.Entry{v, id} {
			if _, err := s.Create(t.Context(), e); err != nil {
				t.Fatal(err)
			}
			want[e.Key] = string(e.Value) + "|" + e.Index
		}
	}
	return want
}

// An upgrade from the ConfigMaps record (earlier releases under the
// chart's RBAC) keeps every entry: the controller moves them into the
// Leases before it serves, and an entry deleted from the Leases since is
// not brought back by a restart.
func TestJournalImportsTheConfigMapsRecord(t *testing.T) {
	api := kubetest.Start(t)
	kc := testKube(t, api)
	old := kc.JournalStore("kube-system", "efs.csi.aws.com")
	want := fill(t, old, "pvc", 0, 30)
	cfg, logs := testConfig(t, "auto")
	store, err := journalStore(t.Context(), cfg, kc)
	if err != nil {
		t.Fatalf("%v\n%s", err, logs)
	}
	got := entriesOf(t, store)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Leases hold %d entries, want the %d of the ConfigMaps:\n%v\n%v", len(got), len(want), got, want)
	}
	if left := len(api.ConfigMaps("kube-system")); left != 0 {
		t.Errorf("%d ConfigMaps left after the import", left)
	}
	// A volume deleted since must stay deleted across a restart.
	k := journal.Key{Kind: journal.KindVolume, FileSystem: testFS, Name: "pvc-3"}
	e, err := store.Get(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	if store, err = journalStore(t.Context(), cfg, kc); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(t.Context(), k); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("a deleted entry after a restart: %v", err)
	}
}

// During a rolling upgrade the old controller may write ConfigMaps after
// the new one imported them: the import runs again until none is left.
func TestJournalImportsAgainWhatTheOldControllerWrites(t *testing.T) {
	defer func(e, f time.Duration) { reimportEvery, reimportFor = e, f }(reimportEvery, reimportFor)
	reimportEvery, reimportFor = 10*time.Millisecond, time.Minute
	api := kubetest.Start(t)
	kc := testKube(t, api)
	old := kc.JournalStore("kube-system", "efs.csi.aws.com")
	want := fill(t, old, "pvc", 0, 3)
	cfg, logs := testConfig(t, "auto")
	store, err := journalStore(t.Context(), cfg, kc)
	if err != nil {
		t.Fatalf("%v\n%s", err, logs)
	}
	// The old controller, still running, records one more volume.
	for k, v := range fill(t, old, "late", 3, 1) {
		want[k] = v
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil && len(api.ConfigMaps("kube-system")) > 0 {
		time.Sleep(10 * time.Millisecond) // polling another goroutine's progress, not ordering it
	}
	if got := entriesOf(t, store); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Leases hold\n%v\nwant\n%v", got, want)
	}
}

// An upgrade from the pod's file record (earlier releases under upstream's
// RBAC) keeps its entries: imported into the Leases and removed from the
// file, so that they are never imported twice. Outside a pod the host's
// directory is left alone: another controller's file record may be there.
func TestJournalImportsTheFileRecord(t *testing.T) {
	defer func(f func() bool) { inPod = f }(inPod)
	inPod = func() bool { return true }
	api := kubetest.Start(t)
	api.Forbid("configmaps", "list", "create", "update", "delete") // upstream's RBAC
	kc := testKube(t, api)
	cfg, logs := testConfig(t, "auto")
	dir := filepath.Join(cfg.TempDir, "efs-csi-journal")
	fs, err := journal.OpenFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := fill(t, fs, "pvc", 0, 10)
	store, err := journalStore(t.Context(), cfg, kc)
	if err != nil {
		t.Fatalf("%v\n%s", err, logs)
	}
	if got := entriesOf(t, store); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Leases hold\n%v\nwant\n%v", got, want)
	}
	if left := entriesOf(t, fs); len(left) != 0 {
		t.Errorf("the file still holds %d entries", len(left))
	}

	inPod = func() bool { return false }
	more := fill(t, fs, "host", 100, 2)
	if _, err := journalStore(t.Context(), cfg, kc); err != nil {
		t.Fatal(err)
	}
	if left := entriesOf(t, fs); fmt.Sprint(left) != fmt.Sprint(more) {
		t.Errorf("outside a pod the host's file record was imported: it holds %v, want %v", left, more)
	}
}
