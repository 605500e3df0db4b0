package controller

import (
	"sync/atomic"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

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
