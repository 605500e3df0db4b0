package kube_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/journal/journaltest"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

func leaseStore(t *testing.T, k *kubetest.Server, owner string, page int) journal.Store {
	t.Helper()
	s := client(t, k, "controller").LeaseJournalStore(journalNS, owner)
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
	n := 0
	journaltest.Conformance(t, func(t *testing.T) journal.Store {
		n++
		s := c.LeaseJournalStore("default", fmt.Sprintf("conformance.%s.%d", strings.ReplaceAll(t.Name(), "/", "."), n))
		kube.SetLeaseJournalPageSize(s, 7)
		return s
	})
}

// An entry is an annotation of the Lease its key's hash picks, named by
// that hash; the Lease carries the owner's label and its place.
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
	shard, ann := kube.LeaseShardOf(key)
	l := ls[0]
	if !strings.HasPrefix(l.Name, "efs-csi-journal-") || !strings.HasSuffix(l.Name, fmt.Sprintf("-%02x", shard)) {
		t.Errorf("Lease %s, want shard %d", l.Name, shard)
	}
	if l.Labels[kube.LabelJournalOwner] != driver || l.Annotations["efs.csi.aws.com/journal-owner"] != driver ||
		l.Annotations["efs.csi.aws.com/journal-shard"] != fmt.Sprintf("%d/%d", shard, kube.LeaseShards) {
		t.Errorf("labels %v annotations %v", l.Labels, l.Annotations)
	}
	v := l.Annotations[ann]
	head, value, _ := strings.Cut(v, "\n")
	if value != `{"token":"pvc-1"}` || !strings.Contains(head, `"i":"fsap-0123456789abcdef0"`) || !strings.Contains(head, `"v":"`+e.Version+`"`) {
		t.Errorf("annotation %s = %q", ann, v)
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
		for a := range l.Annotations {
			if strings.HasPrefix(a, "j.efs.csi.aws.com/") {
				t.Errorf("Lease %s still holds %s", l.Name, a)
			}
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

// A shard holds at most 252 KiB of entries: an entry that would not fit is
// refused, definitively, and names the limit; the others of its batch are
// written.
func TestLeaseJournalShardFull(t *testing.T) {
	k := kubetest.Start(t)
	s := leaseStore(t, k, driver, 0)
	ctx := t.Context()
	big := strings.Repeat("x", 100<<10)
	// Three keys of one shard.
	var keys []journal.Key
	for i := 0; len(keys) < 3; i++ {
		key := journal.Key{Kind: journal.KindVolume, FileSystem: fs1, Name: fmt.Sprint("pvc-", i)}
		if sh, _ := kube.LeaseShardOf(key); sh == 0 {
			keys = append(keys, key)
		}
	}
	for i, key := range keys {
		_, err := s.Create(ctx, journal.Entry{Key: key, Value: []byte(big)})
		switch {
		case i < 2 && err != nil:
			t.Fatalf("entry %d: %v", i, err)
		case i == 2 && (err == nil || errors.Is(err, journal.ErrUnavailable) || !strings.Contains(err.Error(), "no room")):
			t.Fatalf("entry %d of a full shard: %v", i, err)
		}
	}
}
