package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/journal/journaltest"
)

// The record's cost: writes per CreateVolume and DeleteVolume, as the
// Kubernetes store would send them (one request per write), and nothing
// of the record is left once every volume is deleted.
//
// A create writes its record with its id held, then its access point, in
// a store that makes pairs (the Lease record); in one that does not, the
// record, its id, the record's confirm and its access point.
func TestRecordWritesPerCallAndNothingLeftAtRest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pairs  bool
		writes int64 // a create's
	}{{"pairs", true, 2}, {"no pairs", false, 4}} {
		t.Run(tc.name, func(t *testing.T) { recordWritesPerCall(t, tc.pairs, tc.writes) })
	}
}

func recordWritesPerCall(t *testing.T, pairs bool, createWrites int64) {
	var store interface {
		journal.Store
		Len() int
	}
	store, reads, writes := countingStore()
	if pairs {
		store, reads, writes = countingPairs()
	}
	b := newBed(t, func(c *Config) { c.Journal = store })
	const n = 20
	var ids []string
	for i := range n {
		ids = append(ids, b.mustCreate("pvc-"+string(rune('a'+i))))
	}
	if w := writes.Load(); w != createWrites*n {
		t.Errorf("%d record writes for %d creates, want %d each", w, n, createWrites)
	}
	// One List: the allocator's one listing of the file system reads the
	// record's directory volumes (dirSource); no create reads the record.
	if r := reads.Load(); r != 1 {
		t.Errorf("%d record reads for %d first creates, want the listing's one", r, n)
	}
	writes.Store(0)
	for _, id := range ids {
		if _, err := b.svc.DeleteVolume(b.ctx(), &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatal(err)
		}
	}
	if w := writes.Load(); w != 3*n {
		t.Errorf("%d record writes for %d deletes, want 3 each (mark, id, volume)", w, n)
	}
	if store.Len() != 0 {
		t.Errorf("%d record entries left after every volume was deleted", store.Len())
	}
}

// sameAccount is a role in the controller's own account: its backend
// reaches the same file systems through another client.
type sameAccount struct{ client EFS }

func (s sameAccount) Open(context.Context, Backend) (EFS, FileSystemMounter, error) {
	return s.client, nil, nil
}

// One process, a class with its own credentials and a class whose secret
// names a role of the same account, one file system: one allocator and one
// record serve both, so with the range used up the role's volume
// is RESOURCE_EXHAUSTED, never a second access point with that GID (each
// backend had its own allocator before, and both answered it).
func TestBackendsShareOneAllocatorAndRecord(t *testing.T) {
	b := newBed(t)
	b.svc.backends = sameAccount{b.client}
	class := params("gidRangeStart", "60000", "gidRangeEnd", "60001")
	asRole := func(name string) *csi.CreateVolumeRequest {
		req := createReq(name, 1<<30, class)
		req.Secrets = map[string]string{SecretRoleARN: "arn:aws:iam::111122223333:role/efs"}
		return req
	}
	// Own credentials first (its view is listed now), then the role, then
	// own credentials again: a view per backend would not know the role's.
	for _, req := range []*csi.CreateVolumeRequest{createReq("pvc-own-1", 1<<30, class), asRole("pvc-role-1")} {
		if _, err := b.svc.CreateVolume(b.ctx(), req); err != nil {
			t.Fatal(err)
		}
	}
	_, err := b.svc.CreateVolume(b.ctx(), createReq("pvc-own-2", 1<<30, class))
	if !errors.Is(err, gid.ErrExhausted) {
		t.Fatalf("a third volume on a range of two GIDs: %v, want ErrExhausted", err)
	}
	b.wantAccessPoints(2)
}

// countingStore is a record that counts what it is asked, as the
// Kubernetes store would send it (one request per read or write).
// countingPairs is a store that makes pairs (journaltest.Paired) and
// counts its reads and writes as the Lease store sends them: CreateBoth is
// one write.
func countingPairs() (store *countedPairs, reads, writes *atomic.Int64) {
	store = &countedPairs{Paired: &journaltest.Paired{Memory: journal.NewMemory()}}
	return store, &store.reads, &store.writes
}

type countedPairs struct {
	*journaltest.Paired
	reads, writes atomic.Int64
}

func (c *countedPairs) Get(ctx context.Context, k journal.Key) (journal.Entry, error) {
	c.reads.Add(1)
	return c.Paired.Get(ctx, k)
}

func (c *countedPairs) List(ctx context.Context, kind journal.Kind, fs, index string, fn func([]journal.Entry) error) error {
	c.reads.Add(1)
	return c.Paired.List(ctx, kind, fs, index, fn)
}

func (c *countedPairs) Create(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	c.writes.Add(1)
	return c.Paired.Create(ctx, e)
}

func (c *countedPairs) Update(ctx context.Context, e journal.Entry) (journal.Entry, error) {
	c.writes.Add(1)
	return c.Paired.Update(ctx, e)
}

func (c *countedPairs) Delete(ctx context.Context, e journal.Entry) error {
	c.writes.Add(1)
	return c.Paired.Delete(ctx, e)
}

func (c *countedPairs) CreateBoth(ctx context.Context, a, b journal.Entry) (journal.Entry, journal.Entry, error) {
	c.writes.Add(1)
	return c.Paired.CreateBoth(ctx, a, b)
}

func countingStore() (store *journal.Memory, reads, writes *atomic.Int64) {
	store, reads, writes = journal.NewMemory(), &atomic.Int64{}, &atomic.Int64{}
	store.SetHook(func(op string, _ journal.Key) error {
		if op == "get" || op == "list" {
			reads.Add(1)
		} else {
			writes.Add(1)
		}
		return nil
	})
	return store, reads, writes
}

// A repeat of a DeleteVolume this process finished (a provisioner retry of
// a call cut short, a duplicate caller) is answered from memory: no EFS
// request and nothing read or written in the record, however the delete
// finished. It used to send DescribeAccessPoints and DescribeFileSystems
// (and a DeleteAccessPoint answering 404 when Describe lagged) each time.
func TestRepeatedDeleteOfAFinishedDeleteCostsNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		finish func(b *bed, vol string) // makes vol's delete finish here
	}{
		{"deleted here", func(b *bed, vol string) {
			must(b.t, b.delete(vol))
		}},
		{"deleted behind its back, then its record finished here", func(b *bed, vol string) {
			must(b.t, b.client.DeleteAccessPoint(b.ctx(), apOf(b.t, vol)))
			must(b.t, b.delete(vol))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, reads, writes := countingStore()
			b := newBed(t, func(c *Config) { c.Journal = store })
			vol := b.mustCreate("pvc-1")
			tc.finish(b, vol)
			b.wantAccessPoints(0)
			reads.Store(0)
			writes.Store(0)
			var requests atomic.Int64
			ctx := efs.WithRequestCounter(b.ctx(), &requests)
			for range 3 {
				if _, err := b.svc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: vol}); err != nil {
					t.Fatal(err)
				}
			}
			if n := requests.Load(); n != 0 {
				t.Errorf("3 repeats of a finished delete sent %d EFS requests, want 0", n)
			}
			if r, w := reads.Load(), writes.Load(); r != 0 || w != 0 {
				t.Errorf("3 repeats of a finished delete: %d record reads, %d writes; want none", r, w)
			}
		})
	}
}

// stableIDs is an EFS whose access point IDs are a function of the client
// token, so a volume created again under its name gets the ID of its
// deleted predecessor back. EFS documents nothing either way; this is the
// case in which the memory of a finished delete could answer for a live
// access point.
type stableIDs struct {
	EFS
	mu     sync.Mutex
	real   map[string]string // stable ID -> the emulator's
	stable map[string]string // and back
}

func newStableIDs(c EFS) *stableIDs {
	return &stableIDs{EFS: c, real: map[string]string{}, stable: map[string]string{}}
}

func (s *stableIDs) toStable(ap *efs.AccessPoint, token string) *efs.AccessPoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.stable[ap.ID]
	if !ok {
		sum := sha256.Sum256([]byte(token))
		id = "fsap-" + hex.EncodeToString(sum[:])[:17]
		s.real[id], s.stable[ap.ID] = ap.ID, id
	}
	out := *ap
	out.ID = id
	return &out
}

func (s *stableIDs) toReal(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.real[id]; ok {
		return r
	}
	return id
}

func (s *stableIDs) CreateAccessPoint(ctx context.Context, in efs.CreateAccessPointInput) (*efs.AccessPoint, error) {
	ap, err := s.EFS.CreateAccessPoint(ctx, in)
	if err != nil {
		return nil, err
	}
	return s.toStable(ap, in.ClientToken), nil
}

func (s *stableIDs) DescribeAccessPoint(ctx context.Context, id string) (*efs.AccessPoint, error) {
	ap, err := s.EFS.DescribeAccessPoint(ctx, s.toReal(id))
	if err != nil {
		return nil, err
	}
	return s.toStable(ap, ap.ClientToken), nil
}

func (s *stableIDs) DeleteAccessPoint(ctx context.Context, id string) error {
	return s.EFS.DeleteAccessPoint(ctx, s.toReal(id))
}

func (s *stableIDs) ListAccessPoints(ctx context.Context, fsID string, fn func([]efs.AccessPoint) error) error {
	return s.EFS.ListAccessPoints(ctx, fsID, func(page []efs.AccessPoint) error {
		out := make([]efs.AccessPoint, len(page))
		for i := range page {
			out[i] = *s.toStable(&page[i], page[i].ClientToken)
		}
		return fn(out)
	})
}

// A create of the name in between drops the memory of its finished
// delete, so the next DeleteVolume of the ID deletes what the create made,
// even where the ID is the same.
func TestCreateAfterAFinishedDeleteThenDeleteReallyDeletes(t *testing.T) {
	store, _, _ := countingStore()
	b := newBed(t, func(c *Config) { c.Journal, c.EFS = store, newStableIDs(c.EFS) })
	first := b.mustCreate("pvc-1")
	must(t, b.delete(first))
	again := b.mustCreate("pvc-1")
	if again != first {
		t.Fatalf("the volume created again is %s, not %s: the test needs the same ID", again, first)
	}
	b.wantAccessPoints(1)
	must(t, b.delete(again))
	b.wantAccessPoints(0)
	if store.Len() != 0 {
		t.Errorf("%d record entries left: the second delete was answered from memory", store.Len())
	}
	st := b.svc.fs(testFS)
	st.mu.Lock()
	n := st.mem.FinishedDeletes()
	st.mu.Unlock()
	if n != 1 {
		t.Errorf("%d finished deletes remembered, want the last one", n)
	}
}
