package kube_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/journal/journaltest"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

const (
	journalNS = "kube-system"
	driver    = "efs.csi.aws.com"
	fs1       = journaltest.FS1
)

// journalStore is a JournalStore on k reading pages of page ConfigMaps.
func journalStore(t *testing.T, k *kubetest.Server, owner string, page int) journal.Store {
	t.Helper()
	s := client(t, k, "controller").JournalStore(journalNS, owner)
	if page > 0 {
		kube.SetJournalPageSize(s, page)
	}
	return s
}

// The ConfigMaps store keeps the Store contract, through client-go, against
// an API server that answers as the real one (no-op updates keep their
// resourceVersion, ConfigMaps update unconditionally without one), in
// pages of 7 so that List pages through every subtest's entries.
func TestJournalConformance(t *testing.T) {
	journaltest.Conformance(t, func(t *testing.T) journal.Store {
		return journalStore(t, kubetest.Start(t), driver, 7)
	})
}

func objectName(owner, fs, name string, kind journal.Kind) string {
	sum := sha256.Sum256([]byte(owner + "\x00" + fs + "\x00" + name))
	return "efs-csi-journal-" + string(kind) + "-" + hex.EncodeToString(sum[:])[:40]
}

// One ConfigMap an entry, named by a hash of owner, file system and name,
// labelled for List, the key and value in its data (binaryData for bytes
// that are not UTF-8).
func TestJournalObjects(t *testing.T) {
	k := kubetest.Start(t)
	s := journalStore(t, k, driver, 0)
	ctx := t.Context()
	e, err := s.Create(ctx, journal.Entry{Key: journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: "pvc-1"},
		Value: []byte(`{"token":"pvc-1"}`), Index: "fsap-0123456789abcdef0"})
	if err != nil {
		t.Fatal(err)
	}
	cm, ok := k.ConfigMap(journalNS, objectName(driver, fs1, "pvc-1", journal.KindVolume))
	if !ok {
		t.Fatalf("no ConfigMap %s: %v", objectName(driver, fs1, "pvc-1", journal.KindVolume), k.ConfigMaps(journalNS))
	}
	want := map[string]string{kube.LabelJournalOwner: driver, kube.LabelJournalKind: "volume",
		kube.LabelJournalFS: fs1, kube.LabelJournalIndex: "fsap-0123456789abcdef0"}
	if len(cm.Labels) != len(want) {
		t.Errorf("labels %v, want %v", cm.Labels, want)
	}
	for l, v := range want {
		if cm.Labels[l] != v {
			t.Errorf("label %s = %q, want %q", l, cm.Labels[l], v)
		}
	}
	for key, v := range map[string]string{"kind": "volume", "fileSystem": fs1, "name": "pvc-1", "value": `{"token":"pvc-1"}`, "owner": driver} {
		if cm.Data[key] != v {
			t.Errorf("data %s = %q, want %q", key, cm.Data[key], v)
		}
	}
	if e.Version != cm.ResourceVersion {
		t.Errorf("version %q, resourceVersion %q", e.Version, cm.ResourceVersion)
	}
	// Bytes that are not UTF-8 would be mangled in data (JSON strings).
	odd := journal.Key{Kind: journal.KindID, FileSystem: fs1, Name: "\xff\xfe"}
	if _, err := s.Create(ctx, journal.Entry{Key: odd, Value: []byte("\xff")}); err != nil {
		t.Fatal(err)
	}
	cm, _ = k.ConfigMap(journalNS, objectName(driver, fs1, odd.Name, journal.KindID))
	if string(cm.BinaryData["name"]) != odd.Name || string(cm.BinaryData["value"]) != "\xff" || cm.Data["kind"] != "id" {
		t.Errorf("data %v, binaryData %v", cm.Data, cm.BinaryData)
	}
	if got, err := s.Get(ctx, odd); err != nil || got.Key != odd {
		t.Errorf("Get %s: %v, %v", odd, got, err)
	}
}

// Two owners in one namespace (two drivers) never see each other's entries,
// also when one's name is not a label value.
func TestJournalOwnersAreApart(t *testing.T) {
	k := kubetest.Start(t)
	a, b := journalStore(t, k, driver, 0), journalStore(t, k, "other driver/with a name that is not a label value at all, far too long", 0)
	ctx := t.Context()
	key := journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: "pvc-1"}
	for _, s := range []journal.Store{a, b} {
		if _, err := s.Create(ctx, journal.Entry{Key: key, Value: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(k.ConfigMaps(journalNS)); n != 2 {
		t.Fatalf("%d ConfigMaps, want one an owner", n)
	}
	for _, s := range []journal.Store{a, b} {
		n := 0
		if err := s.List(ctx, journal.KindVolume, "", "", func(es []journal.Entry) error { n += len(es); return nil }); err != nil || n != 1 {
			t.Fatalf("List: %d entries, %v", n, err)
		}
	}
	for _, cm := range k.ConfigMaps(journalNS) {
		if l := cm.Labels[kube.LabelJournalOwner]; cm.Data["owner"] != driver && (l == driver || len(l) > 63) {
			t.Errorf("owner label %q", l)
		}
	}
}

// A file system or index that is not a label value, a kind that is not a
// DNS label, an empty file system: refused definitively, before any call.
func TestJournalRefusesKeysItCannotLabel(t *testing.T) {
	k := kubetest.Start(t)
	s := journalStore(t, k, driver, 0)
	ctx := t.Context()
	for _, e := range []journal.Entry{
		{Key: journal.Key{Kind: journal.KindVolume, FileSystem: "fs/1", Name: "a"}},
		{Key: journal.Key{Kind: journal.KindVolume, FileSystem: strings.Repeat("f", 64), Name: "a"}},
		{Key: journal.Key{Kind: journal.KindVolume, FileSystem: "", Name: "a"}},
		{Key: journal.Key{Kind: "Volume", FileSystem: fs1, Name: "a"}},
		{Key: journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: "a"}, Index: "fsap 1"},
	} {
		_, err := s.Create(ctx, e)
		if err == nil || errors.Is(err, journal.ErrUnavailable) {
			t.Errorf("Create %s index %q: %v, want a definitive error", e.Key, e.Index, err)
		}
	}
	if err := s.List(ctx, journal.KindVolume, "fs/1", "", func([]journal.Entry) error { return nil }); err == nil {
		t.Error("List of a file system that is not a label value")
	}
	if n := len(k.Requests()); n != 0 {
		t.Errorf("%d requests sent for keys that cannot be stored", n)
	}
}

// Without RBAC on configmaps every call fails definitively, saying which
// verb on configmaps the service account lacks.
func TestJournalForbidden(t *testing.T) {
	k := kubetest.Start(t)
	k.Forbid("configmaps")
	s := journalStore(t, k, driver, 0)
	ctx := t.Context()
	e := journal.Entry{Key: journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: "pvc-1"}, Value: []byte("x"), Version: "1"}
	_, errGet := s.Get(ctx, e.Key)
	_, errCreate := s.Create(ctx, e)
	_, errUpdate := s.Update(ctx, e)
	errDelete := s.Delete(ctx, e)
	errList := s.List(ctx, journal.KindVolume, "", "", func([]journal.Entry) error { return nil })
	for verb, err := range map[string]error{"get": errGet, "create": errCreate, "update": errUpdate, "delete": errDelete, "list": errList} {
		for _, sentinel := range []error{journal.ErrUnavailable, journal.ErrNotFound, journal.ErrConflict, journal.ErrExists} {
			if errors.Is(err, sentinel) {
				t.Errorf("%s: %v is %v", verb, err, sentinel)
			}
		}
		if err == nil || !strings.Contains(err.Error(), `RBAC verb "`+verb+`" on configmaps`) {
			t.Errorf("%s: %v, want it to name the verb on configmaps", verb, err)
		}
	}
	// One verb missing: only its calls fail.
	k = kubetest.Start(t)
	k.Forbid("configmaps", "create")
	s = journalStore(t, k, driver, 0)
	if _, err := s.Get(ctx, e.Key); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("get with get granted: %v", err)
	}
	if _, err := s.Create(ctx, e); err == nil || !strings.Contains(err.Error(), `"create" on configmaps`) {
		t.Errorf("create without create: %v", err)
	}
}

// An API server that cannot serve (5xx, 429), one that does not answer, a
// context that ends: the outcome is unknown, ErrUnavailable.
func TestJournalUnavailable(t *testing.T) {
	e := journal.Entry{Key: journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: "pvc-1"}, Value: []byte("x"), Version: "1"}
	calls := func(ctx context.Context, s journal.Store) map[string]error {
		_, errGet := s.Get(ctx, e.Key)
		_, errCreate := s.Create(ctx, e)
		_, errUpdate := s.Update(ctx, e)
		return map[string]error{"get": errGet, "create": errCreate, "update": errUpdate, "delete": s.Delete(ctx, e),
			"list": s.List(ctx, journal.KindVolume, "", "", func([]journal.Entry) error { return nil })}
	}
	check := func(t *testing.T, errs map[string]error) {
		t.Helper()
		for op, err := range errs {
			if !errors.Is(err, journal.ErrUnavailable) {
				t.Errorf("%s: %v, want ErrUnavailable", op, err)
			}
		}
	}
	for _, code := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable,
		http.StatusGatewayTimeout, http.StatusTooManyRequests} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			k := kubetest.Start(t)
			k.Fail(func(kubetest.Request) int { return code })
			check(t, calls(t.Context(), journalStore(t, k, driver, 0)))
			if k.Writes("configmaps") == 0 {
				t.Error("no write reached the server")
			}
		})
	}
	t.Run("not an API server", func(t *testing.T) {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "<html>proxy error</html>", http.StatusInternalServerError)
		}))
		t.Cleanup(srv.Close)
		check(t, calls(t.Context(), plainClient(t, srv).JournalStore(journalNS, driver)))
	})
	t.Run("no answer", func(t *testing.T) {
		srv := httptest.NewTLSServer(http.NotFoundHandler())
		c := plainClient(t, srv)
		srv.Close()
		check(t, calls(t.Context(), c.JournalStore(journalNS, driver)))
	})
	t.Run("context ended", func(t *testing.T) {
		k := kubetest.Start(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		check(t, calls(ctx, journalStore(t, k, driver, 0)))
	})
}

// plainClient is a client of srv, an HTTPS server that is no API server.
func plainClient(t *testing.T, srv *httptest.Server) *kube.Client {
	t.Helper()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(ca, pemCert(srv), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tok, []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := kube.New(kube.Config{URL: srv.URL, TokenFile: tok, CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A continue token that expired mid-List (etcd compacted its revision):
// the List starts again and still answers every entry once.
func TestJournalListRestartsWhenContinueExpires(t *testing.T) {
	k := kubetest.Start(t)
	s := journalStore(t, k, driver, 3)
	ctx := t.Context()
	const n = 10
	for i := range n {
		if _, err := s.Create(ctx, journal.Entry{Key: journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: string(rune('a' + i))}, Value: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	k.OnRequest(func(r kubetest.Request) {
		if strings.Contains(r.Query, "continue=") {
			once.Do(k.ExpireContinues)
		}
	})
	seen := map[journal.Key]int{}
	if err := s.List(ctx, journal.KindVolume, fs1, "", func(es []journal.Entry) error {
		for _, e := range es {
			seen[e.Key]++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != n {
		t.Fatalf("%d entries listed, want %d", len(seen), n)
	}
	for key, times := range seen {
		if times != 1 {
			t.Errorf("%s listed %d times", key, times)
		}
	}
	fresh := 0
	for _, r := range k.Requests() {
		if r.Method == http.MethodGet && strings.HasSuffix(r.Path, "/configmaps") && !strings.Contains(r.Query, "continue=") {
			fresh++
		}
	}
	if fresh != 2 {
		t.Errorf("%d lists from the start, want 2 (the first, and one after the token expired)", fresh)
	}
}

// A ConfigMap at a key's name that holds another key (a hash collision, or
// an object made by hand) is nobody's entry: Get says not found, naming the
// collision; Create refuses (never ErrExists with a foreign entry); List
// skips it.
func TestJournalCollision(t *testing.T) {
	k := kubetest.Start(t)
	s := journalStore(t, k, driver, 0)
	ctx := t.Context()
	key := journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: "pvc-1"}
	k.SetConfigMap(corev1.ConfigMap{ObjectMeta: metavObject(objectName(driver, fs1, "pvc-1", journal.KindVolume), map[string]string{
		kube.LabelJournalOwner: driver, kube.LabelJournalKind: "volume", kube.LabelJournalFS: fs1}),
		Data: map[string]string{"owner": driver, "kind": "volume", "fileSystem": fs1, "name": "pvc-2", "value": "foreign"}})
	_, err := s.Get(ctx, key)
	if !errors.Is(err, journal.ErrNotFound) || !strings.Contains(err.Error(), "collision") {
		t.Errorf("Get: %v, want not found naming a collision", err)
	}
	got, err := s.Create(ctx, journal.Entry{Key: key, Value: []byte("mine")})
	if err == nil || errors.Is(err, journal.ErrExists) || errors.Is(err, journal.ErrUnavailable) {
		t.Errorf("Create: %v, %v; want a definitive error", got, err)
	}
	n := 0
	if err := s.List(ctx, journal.KindVolume, "", "", func(es []journal.Entry) error { n += len(es); return nil }); err != nil || n != 0 {
		t.Errorf("List: %d entries, %v", n, err)
	}
}

// A Create that finds an entry deleted before it could be read creates it
// after all; an Update without a version writes nothing (the API server
// would update unconditionally).
func TestJournalCreateAfterARacingDelete(t *testing.T) {
	k := kubetest.Start(t)
	s := journalStore(t, k, driver, 0)
	ctx := t.Context()
	key := journal.Key{Kind: journal.KindID, FileSystem: fs1, Name: "50000"}
	if _, err := s.Create(ctx, journal.Entry{Key: key, Value: []byte("pvc-old")}); err != nil {
		t.Fatal(err)
	}
	name := objectName(driver, fs1, "50000", journal.KindID)
	var once sync.Once
	k.OnRequest(func(r kubetest.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.Path, "/"+name) {
			once.Do(func() { k.DeleteConfigMap(journalNS, name) })
		}
	})
	e, err := s.Create(ctx, journal.Entry{Key: key, Value: []byte("pvc-new")})
	if err != nil || string(e.Value) != "pvc-new" {
		t.Fatalf("Create: %v, %v", e, err)
	}
	k.OnRequest(nil)
	writes := k.Writes("configmaps")
	if _, err := s.Update(ctx, journal.Entry{Key: key, Value: []byte("pvc-lost")}); !errors.Is(err, journal.ErrConflict) {
		t.Fatalf("Update without a version: %v", err)
	}
	if w := k.Writes("configmaps"); w != writes {
		t.Errorf("Update without a version sent %d writes", w-writes)
	}
	if got, _ := s.Get(ctx, key); string(got.Value) != "pvc-new" {
		t.Errorf("value %q after an Update without a version", got.Value)
	}
}

func metavObject(name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: journalNS, Labels: labels}
}

func pemCert(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}
