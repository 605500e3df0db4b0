package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/journal/journaltest"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

// leaseStore is a Lease store of owner, which the test expects to log no
// damage to the record.
func leaseStore(t *testing.T, k *kubetest.Server, owner string, page int) journal.Store {
	t.Helper()
	s, logs := loggedStore(t, k, owner)
	t.Cleanup(func() {
		if errs := logs.at(slog.LevelError); len(errs) > 0 {
			t.Errorf("damage logged where there was none: %q", errs)
		}
	})
	if page > 0 {
		kube.SetLeaseJournalPageSize(s, page)
	}
	return s
}

// The Lease store keeps the Store contract through client-go, against an
// API server that answers as the real one (resourceVersion conflicts,
// annotations validated), in pages of 7 entries.
func TestLeaseJournalConformance(t *testing.T) {
	journaltest.Conformance(t, func(t *testing.T) journal.Store {
		return leaseStore(t, kubetest.Start(t), driver, 7)
	})
}

// The same against a real kube-apiserver and etcd, when
// EFS_JOURNAL_KUBECONFIG names a kubeconfig (make bench-record sets it):
// each subtest is a record of an owner of its own, in namespace default.
func TestLeaseJournalConformanceRealAPIServer(t *testing.T) {
	c := realAPIServer(t)
	run := time.Now().UnixNano() // an owner of its own for each subtest of each run
	n := 0
	open := func(t *testing.T) journal.Store {
		n++
		owner := fmt.Sprintf("conformance-%d-%d.efs.csi.aws.com", run, n)
		t.Cleanup(func() {
			names, _, _ := c.RawLeases(context.Background(), "default", owner)
			for _, name := range names {
				_ = c.DeleteLease(context.Background(), "default", name)
			}
		})
		s := c.LeaseJournalStore("default", owner)
		kube.SetLeaseJournalPageSize(s, 7)
		return s
	}
	journaltest.Conformance(t, open)
	journaltest.PairConformance(t, open)
}

// An entry is kept in the Lease its key's hash picks, under that hash, in
// the Lease's one entries annotation; the Lease carries the owner's label
// and its place.
func TestLeaseJournalObjects(t *testing.T) {
	k := kubetest.Start(t)
	s := leaseStore(t, k, driver, 0)
	key := journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: "pvc-1"}
	e, err := s.Create(t.Context(), journal.Entry{Key: key, Value: []byte(`{"token":"pvc-1"}`), Index: "fsap-0123456789abcdef0"})
	if err != nil {
		t.Fatal(err)
	}
	ls := k.Leases(journalNS)
	if len(ls) != 1 {
		t.Fatalf("%d Leases, want the one shard written", len(ls))
	}
	name, ann := kube.LeaseRootShardOf(driver, key)
	l := ls[0]
	if l.Name != name || !strings.HasPrefix(l.Name, "efs-csi-journal-") {
		t.Errorf("Lease %s, want %s", l.Name, name)
	}
	if l.Labels[kube.LabelJournalOwner] != driver || l.Annotations["efs.csi.aws.com/journal-owner"] != driver ||
		!strings.HasPrefix(l.Annotations["efs.csi.aws.com/journal-shard"], "3/") {
		t.Errorf("labels %v annotations %v", l.Labels, l.Annotations)
	}
	var entries map[string]string
	if err := json.Unmarshal([]byte(l.Annotations["efs.csi.aws.com/journal-entries"]), &entries); err != nil || len(entries) != 1 {
		t.Fatalf("entries %q: %v", l.Annotations["efs.csi.aws.com/journal-entries"], err)
	}
	v := entries[ann]
	head, value, _ := strings.Cut(v, "\n")
	if value != `{"token":"pvc-1"}` || !strings.Contains(head, `"i":"fsap-0123456789abcdef0"`) || !strings.Contains(head, `"v":"`+e.Version+`"`) {
		t.Errorf("entry %s = %q", ann, v)
	}
}

// A write asks for its answer as a Table without the Lease, which
// carries the resourceVersion and not the shard's entries: every write's
// answer is small however full the shard, and each next write's
// precondition is the resourceVersion the Table gave (no conflict). The
// record speaks HTTP/1.1.
func TestLeaseWritesAreAnsweredWithoutTheShard(t *testing.T) {
	k := kubetest.Start(t)
	s := leaseStore(t, k, driver, 0)
	big := strings.Repeat("v", 4000)
	for i := range 20 {
		key := journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: fmt.Sprintf("pvc-%d", i)}
		if _, err := s.Create(t.Context(), journal.Entry{Key: key, Value: []byte(big)}); err != nil {
			t.Fatal(err)
		}
	}
	writes := 0
	for _, q := range k.Requests() {
		if q.Proto != "HTTP/1.1" {
			t.Errorf("%s %s over %s", q.Method, q.Path, q.Proto)
		}
		if q.Method != http.MethodPut && q.Method != http.MethodPost {
			continue
		}
		writes++
		if !strings.HasPrefix(q.Accept, "application/json;as=Table;v=v1;g=meta.k8s.io,") || q.Query != "includeObject=None" {
			t.Errorf("%s %s?%s asks for %q", q.Method, q.Path, q.Query, q.Accept)
		}
	}
	// One read a root shard, its first use; none after a write.
	if st, _ := kube.LeaseJournalStatsOf(s); writes != 20 || st.Conflicts != 0 || st.Gets > kube.RootShards {
		t.Errorf("%d writes, %d conflicts, %d reads: want 20, none, at most %d", writes, st.Conflicts, st.Gets, kube.RootShards)
	}
}

// Concurrent operations on one shard share its writes: 200 creates, then
// 200 deletes, from 200 callers at once, take far fewer Lease writes than
// operations, and every one is answered as the contract says.
func TestLeaseJournalGroupCommit(t *testing.T) {
	k := kubetest.Start(t)
	s := leaseStore(t, k, driver, 0)
	const n = 200
	entries := make([]journal.Entry, n)
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() {
			e, err := s.Create(t.Context(), journal.Entry{Key: journal.Key{Kind: journal.KindID, FileSystem: fs1, Name: fmt.Sprint(i)}, Value: []byte("pvc")})
			entries[i] = e
			errs <- err
		})
	}
	wg.Wait()
	for i := range n {
		wg.Go(func() { errs <- s.Delete(t.Context(), entries[i]) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	writes := k.Writes("leases")
	st, _ := kube.LeaseJournalStatsOf(s)
	t.Logf("%d operations, %d Lease writes, %d gets", 2*n, writes, st.Gets)
	if writes >= 2*n/2 {
		t.Errorf("%d Lease writes for %d operations: no group commit", writes, 2*n)
	}
	for _, l := range k.Leases(journalNS) {
		if e, ok := l.Annotations["efs.csi.aws.com/journal-entries"]; ok {
			t.Errorf("Lease %s still holds entries %s", l.Name, e)
		}
	}
}

// Two replicas (two stores, two clients) share one record: each sees the
// other's writes at once (Get is linearizable across them), and of
// concurrent creates of one key exactly one wins.
func TestLeaseJournalReplicasShareOneRecord(t *testing.T) {
	k := kubetest.Start(t)
	a, b := leaseStore(t, k, driver, 0), leaseStore(t, k, driver, 0)
	ctx := t.Context()
	key := journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: "pvc-1"}
	e, err := a.Create(ctx, journal.Entry{Key: key, Value: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	// b knew the shard before a's next write: it must not answer from that.
	if got, err := b.Get(ctx, key); err != nil || string(got.Value) != "1" {
		t.Fatalf("b.Get = %v, %v", got, err)
	}
	e.Value = []byte("2")
	if _, err := a.Update(ctx, e); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get(ctx, key); err != nil || string(got.Value) != "2" {
		t.Fatalf("b.Get after a's update = %q, %v", got.Value, err)
	}
	if _, err := b.Update(ctx, e); !errors.Is(err, journal.ErrConflict) {
		t.Fatalf("b.Update at the version a replaced: %v", err)
	}
	wins := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 20 {
		s := []journal.Store{a, b}[i%2]
		wg.Go(func() {
			_, err := s.Create(ctx, journal.Entry{Key: journal.Key{Kind: journal.KindID, FileSystem: fs1, Name: "7"}, Value: []byte(fmt.Sprint(i))})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case !errors.Is(err, journal.ErrExists):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d creates of one key won", wins)
	}
}

// A write the API server did not answer leaves the outcome unknown
// (ErrUnavailable); the store reads the shard again before its next write.
func TestLeaseJournalUnansweredWrite(t *testing.T) {
	k := kubetest.Start(t)
	s := leaseStore(t, k, driver, 0)
	ctx := t.Context()
	key := journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: "pvc-1"}
	e, err := s.Create(ctx, journal.Entry{Key: key, Value: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	k.Fail(func(r kubetest.Request) int {
		if r.Method == http.MethodPut {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	e.Value = []byte("2")
	if _, err := s.Update(ctx, e); !errors.Is(err, journal.ErrUnavailable) {
		t.Fatalf("Update through a failing API server: %v", err)
	}
	k.Fail(nil)
	got, err := s.Update(ctx, e)
	if err != nil || string(got.Value) != "2" {
		t.Fatalf("Update after: %v, %v", got, err)
	}
}

// Under upstream's RBAC for Leases the store works; without it, the error
// names the grant.
func TestLeaseJournalForbiddenNamesTheGrant(t *testing.T) {
	k := kubetest.Start(t)
	k.Forbid("leases", "update", "create")
	s := leaseStore(t, k, driver, 0)
	_, err := s.Create(t.Context(), journal.Entry{Key: journal.Key{Kind: journal.KindID, FileSystem: fs1, Name: "1"}})
	if err == nil || errors.Is(err, journal.ErrUnavailable) || !strings.Contains(err.Error(), "leases (coordination.k8s.io)") {
		t.Fatalf("Create without the grant: %v", err)
	}
}

// A shard whose entries outgrow SplitBytes splits in two, so that what
// a write sends stays bounded however large the record grows: every entry
// stays readable and listable, at the version its writer holds.
func TestLeaseJournalShardsSplit(t *testing.T) {
	k := kubetest.Start(t)
	s := leaseStore(t, k, driver, 0)
	ctx := t.Context()
	value := []byte(strings.Repeat("v", 1000))
	const n = 600 // about 600 KB: several splits
	entries := make([]journal.Entry, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			e, err := s.Create(ctx, journal.Entry{Key: journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: fmt.Sprint("pvc-", i)}, Value: value})
			if err != nil {
				t.Error(err)
			}
			entries[i] = e
		})
	}
	wg.Wait()
	// A shard splits after it answers the batch that filled it, before its
	// next batch: a read of every entry waits for every split.
	for _, e := range entries {
		if got, err := s.Get(ctx, e.Key); err != nil || got.Version != e.Version {
			t.Fatalf("Get %s: %v, %v", e.Key, got, err)
		}
	}
	largest, done := 0, 0
	for _, l := range k.Leases(journalNS) {
		size := 0
		for a, v := range l.Annotations {
			size += len(a) + len(v)
		}
		largest = max(largest, size)
		if l.Annotations["efs.csi.aws.com/journal-split"] == "done" {
			done++
		}
	}
	st, _ := kube.LeaseJournalStatsOf(s)
	t.Logf("%d Leases, %d split, largest %d bytes", len(k.Leases(journalNS)), done, largest)
	if done == 0 || st.Splits == 0 || largest > kube.SplitBytes+64<<10 {
		t.Fatalf("%d shards split (%d by the store), the largest holds %d bytes", done, st.Splits, largest)
	}
	// A fresh store (another replica) reads, lists and updates every one.
	other := leaseStore(t, k, driver, 0)
	got := listAll(t, other, journal.KindVolume)
	if len(got) != n {
		t.Fatalf("listed %d entries, want %d", len(got), n)
	}
	for _, e := range entries[:50] {
		e.Value = []byte("updated")
		if _, err := other.Update(ctx, e); err != nil {
			t.Fatalf("Update at the version written before the splits: %v", err)
		}
	}
}

// A split that a process left half done (the shard frozen, no children
// yet) is finished by the next write of the shard, by any replica: nothing
// is lost and the shard is written again.
func TestLeaseJournalFinishesAFrozenSplit(t *testing.T) {
	k := kubetest.Start(t)
	s := leaseStore(t, k, driver, 0)
	ctx := t.Context()
	key := journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: "pvc-1"}
	e, err := s.Create(ctx, journal.Entry{Key: key, Value: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	name, _ := kube.LeaseRootShardOf(driver, key)
	l, _ := k.Lease(journalNS, name)
	l.Annotations["efs.csi.aws.com/journal-split"] = "frozen"
	k.SetLease(l)
	other := leaseStore(t, k, driver, 0)
	e.Value = []byte("2")
	if _, err := other.Update(ctx, e); err != nil {
		t.Fatalf("Update of an entry of a frozen shard: %v", err)
	}
	if l, _ := k.Lease(journalNS, name); l.Annotations["efs.csi.aws.com/journal-split"] != "done" {
		t.Fatalf("the frozen shard is %q, want done", l.Annotations["efs.csi.aws.com/journal-split"])
	}
	if got, err := s.Get(ctx, key); err != nil || string(got.Value) != "2" {
		t.Fatalf("Get through the first store: %q, %v", got.Value, err)
	}
}

func listAll(t *testing.T, s journal.Store, kind journal.Kind) map[journal.Key]journal.Entry {
	t.Helper()
	out := map[journal.Key]journal.Entry{}
	if err := s.List(t.Context(), kind, "", "", func(es []journal.Entry) error {
		for _, e := range es {
			if _, dup := out[e.Key]; dup {
				t.Errorf("%s listed twice", e.Key)
			}
			out[e.Key] = e
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// realAPIServer is a client of the kube-apiserver EFS_JOURNAL_KUBECONFIG
// names, or skips.
func realAPIServer(t *testing.T) *kube.Client {
	t.Helper()
	cfg := os.Getenv("EFS_JOURNAL_KUBECONFIG")
	if cfg == "" {
		t.Skip("EFS_JOURNAL_KUBECONFIG is not set: no real API server")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kube.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// 10,000 volumes at rest in a real API server (EFS_JOURNAL_AT_REST=N
// volumes, make bench-record): the objects and bytes the record takes and
// how long a controller starting up takes to list it. Entries are the
// controller's (journal.Volume as it encodes them, and the id entries).
func TestLeaseJournalAtRestRealAPIServer(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("EFS_JOURNAL_AT_REST"))
	if n <= 0 {
		t.Skip("EFS_JOURNAL_AT_REST is not set")
	}
	c := realAPIServer(t)
	owner := fmt.Sprintf("at-rest-%d.efs.csi.aws.com", time.Now().UnixNano())
	s := c.LeaseJournalStore("default", owner)
	ctx := t.Context()
	start := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	errs := make(chan error, 100)
	for range 100 {
		wg.Go(func() {
			for i := range work {
				token := fmt.Sprintf("pvc-%08x-8b4b-4e8e-9a55-3f1f0e7d2b61", i)
				now := time.Date(2026, 12, 4, 17, 0, 0, 123456789, time.UTC)
				v := journal.Volume{FileSystem: fs1, Token: token, Name: token, Path: "/dynamic_provisioning/" + token,
					UID: 50000 + int64(i), GID: 50000 + int64(i), Allocated: 50000 + int64(i), AccessPoint: fmt.Sprintf("fsap-%017x", i),
					Recorded: now, ClaimNamespace: "default", ClaimName: fmt.Sprintf("claim-%d", i), Bound: true, Created: now}
				b, _ := json.Marshal(&v)
				if _, err := s.Create(ctx, journal.Entry{Key: journal.Key{Kind: journal.KindID, FileSystem: fs1, Name: fmt.Sprint(50000 + i)}, Value: []byte(token)}); err != nil {
					errs <- err
				}
				if _, err := s.Create(ctx, journal.Entry{Key: journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: token}, Value: b, Index: v.AccessPoint}); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st, _ := kube.LeaseJournalStatsOf(s)
	t.Logf("wrote %d volumes (%d entries) in %v: %d Lease writes (%d bytes), %d gets, %d splits", n, 2*n, time.Since(start).Round(time.Millisecond), st.Creates+st.Updates, st.BytesWritten, st.Gets, st.Splits)

	// A controller starting up: a new store lists every volume and id.
	fresh := c.LeaseJournalStore("default", owner)
	start = time.Now()
	counts := map[journal.Kind]int{}
	for _, kind := range []journal.Kind{journal.KindVolume, journal.KindID} {
		if err := fresh.List(ctx, kind, "", "", func(es []journal.Entry) error { counts[kind] += len(es); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	listed := time.Since(start)
	if counts[journal.KindVolume] != n || counts[journal.KindID] != n {
		t.Fatalf("listed %v, want %d of each", counts, n)
	}
	names, sizes, err := c.RawLeases(ctx, "default", owner)
	if err != nil {
		t.Fatal(err)
	}
	objects, bytes, most := len(names), 0, 0
	for _, n := range sizes {
		bytes += n
		most = max(most, n)
	}
	t.Logf("AT REST: %d volumes: %d Lease objects, %d bytes as the API server sends them (protobuf, as etcd stores them; largest %d), %d bytes a volume; start-up listing of both kinds %v (%d list requests)",
		n, objects, bytes, most, bytes/n, listed.Round(time.Millisecond), func() int64 { st, _ := kube.LeaseJournalStatsOf(fresh); return st.Lists }())
	// Clean up: delete the shards.
	for _, name := range names {
		_ = c.DeleteLease(ctx, "default", name)
	}
}

// Hints (journal.Hinter) answer without a request what this replica last
// read or wrote, however stale, and never absence; a stale hint's version
// fails the compare-and-swap it is used for.
func TestLeaseJournalHintsAreWhatThisReplicaLastKnew(t *testing.T) {
	k := kubetest.Start(t)
	a, b := leaseStore(t, k, driver, 0), leaseStore(t, k, driver, 0)
	ha, hb := a.(journal.Hinter), b.(journal.Hinter)
	ctx := t.Context()
	key := journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: "pvc-1"}
	if _, ok := ha.Hint(key); ok {
		t.Fatal("a hint of a shard never read")
	}
	e, err := a.Create(ctx, journal.Entry{Key: key, Value: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	requests := len(k.Requests())
	if got, ok := ha.Hint(key); !ok || string(got.Value) != "1" || got.Version != e.Version {
		t.Fatalf("a's hint after its create = %+v, %v", got, ok)
	}
	if _, ok := hb.Hint(key); ok {
		t.Fatal("b hints an entry it never saw")
	}
	if _, ok := ha.Hint(journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: "pvc-2"}); ok {
		t.Fatal("a hints an entry no shard holds")
	}
	if n := len(k.Requests()); n != requests {
		t.Fatalf("hints sent %d requests", n-requests)
	}
	// b writes: a's hint is now stale, and its version fails.
	if _, err := b.Get(ctx, key); err != nil {
		t.Fatal(err)
	}
	e2 := e
	e2.Value = []byte("2")
	if _, err := b.Update(ctx, e2); err != nil {
		t.Fatal(err)
	}
	stale, ok := ha.Hint(key)
	if !ok || string(stale.Value) != "1" {
		t.Fatalf("a's hint after b's write = %+v, %v (want a's own, stale)", stale, ok)
	}
	stale.Value = []byte("3")
	if _, err := a.Update(ctx, stale); !errors.Is(err, journal.ErrConflict) {
		t.Fatalf("an update at a stale hint's version: %v, want ErrConflict", err)
	}
	if got, ok := ha.Hint(key); !ok || string(got.Value) != "2" {
		t.Fatalf("a's hint after its conflict read the shard = %+v, %v", got, ok)
	}
}

// The answer to a write is read for metadata.resourceVersion alone.
func TestResourceVersionOfAnAnswer(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{`{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"x","resourceVersion":"42","annotations":{"a":"{\"resourceVersion\":\"7\"}"}},"spec":{}}`, "42"},
		{`{"spec":{"resourceVersion":"1"},"metadata":{"annotations":{"resourceVersion":"9"},"resourceVersion":"43"}}`, "43"},
		{` { "metadata" : { "resourceVersion" : "44" } } `, "44"},
		// kube-apiserver's Table of a Lease written with ?includeObject=None
		// (its column descriptions shortened).
		{`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"211"},"columnDefinitions":[{"name":"Name","type":"string","format":"name","description":"Name must be unique within a namespace.","priority":0},{"name":"Holder","type":"string","format":"","description":"holderIdentity contains the identity of the holder of a current lease.","priority":0},{"name":"Age","type":"date","format":"","description":"CreationTimestamp is a timestamp.","priority":0}],"rows":[{"cells":["efs-csi-journal-0-3-1","","0s"],"object":null}]}`, "211"},
		{`{"metadata":{"name":"x"}}`, ""},
		{`{"metadata":{"resourceVersion":""}}`, ""},
		{`{"metadata":{"resourceVersion":5}}`, ""},
		{`[]`, ""},
		{``, ""},
		{`{"metadata":`, ""},
	} {
		got, err := kube.ResourceVersionOf([]byte(tc.body))
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("resourceVersionOf(%s) = %q, %v; want %q", tc.body, got, err, tc.want)
		}
	}
	// In the API server's protobuf envelope, as its own serializer writes it.
	sc := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(sc); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	lease := &coordinationv1.Lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns", UID: "u", ResourceVersion: "4711",
			Annotations: map[string]string{"a": strings.Repeat("resourceVersion", 1000)}}}
	if err := protobuf.NewSerializer(sc, sc).Encode(lease, &buf); err != nil {
		t.Fatal(err)
	}
	if got, err := kube.ResourceVersionOf(buf.Bytes()); got != "4711" || err != nil {
		t.Errorf("resourceVersionOf(protobuf) = %q, %v; want 4711", got, err)
	}
	for n := range buf.Len() {
		if got, err := kube.ResourceVersionOf(buf.Bytes()[:n]); err == nil && got != "4711" {
			t.Errorf("resourceVersionOf(the first %d bytes) = %q", n, got)
		}
	}
}

// Whatever an API server answers, reading its resourceVersion never panics.
func FuzzResourceVersionOf(f *testing.F) {
	f.Add([]byte(`{"metadata":{"resourceVersion":"1"}}`))
	f.Add([]byte("k8s\x00\x12\x06\x0a\x04\x32\x02\x34\x32"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = kube.ResourceVersionOf(b)
	})
}

// The Lease store keeps the Pairer contract: a record and an id of one
// shard in one write, nothing written for keys of two shards.
func TestLeaseJournalPairConformance(t *testing.T) {
	journaltest.PairConformance(t, func(t *testing.T) journal.Store {
		return leaseStore(t, kubetest.Start(t), driver, 0)
	})
}

// CreateBoth is one request: the shard's write holds both entries.
func TestLeaseJournalCreateBothIsOneWrite(t *testing.T) {
	k := kubetest.Start(t)
	s := leaseStore(t, k, driver, 0)
	p := s.(journal.Pairer)
	a := journal.Entry{Key: journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: "pvc-1"}, Value: []byte("record")}
	near := p.Near(a.Key)
	b := journal.Entry{Key: journal.Key{Kind: journal.KindID, FileSystem: fs1}, Value: []byte("pvc-1")}
	for n := 50000; ; n++ {
		if b.Key.Name = strconv.Itoa(n); near(b.Key) {
			break
		}
	}
	before := len(k.Requests())
	if _, _, err := p.CreateBoth(t.Context(), a, b); err != nil {
		t.Fatal(err)
	}
	writes := 0
	for _, r := range k.Requests()[before:] {
		if r.Method != "GET" { // a GET of the shard, if it was not known yet
			writes++
		}
	}
	if writes != 1 {
		t.Fatalf("CreateBoth sent %d writes, want 1: %v", writes, k.Requests()[before:])
	}
}
