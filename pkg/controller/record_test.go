package controller

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// The record's cost: writes per CreateVolume and DeleteVolume, as the
// Kubernetes store would send them (one request per write), and nothing
// of the record is left once every volume is deleted.
func TestRecordWritesPerCallAndNothingLeftAtRest(t *testing.T) {
	store := journal.NewMemory()
	var writes, reads atomic.Int64
	store.SetHook(func(op string, _ journal.Key) error {
		if op == "get" || op == "list" {
			reads.Add(1)
		} else {
			writes.Add(1)
		}
		return nil
	})
	b := newBed(t, func(c *Config) { c.Journal = store })
	const n = 20
	var ids []string
	for i := range n {
		ids = append(ids, b.mustCreate("pvc-"+string(rune('a'+i))))
	}
	if w := writes.Load(); w != 3*n {
		t.Errorf("%d record writes for %d creates, want 3 each", w, n)
	}
	if r := reads.Load(); r != 0 {
		t.Errorf("%d record reads for %d first creates, want none", r, n)
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
