package controller

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

// leaseRecord is a controller Config mutation: the record in Leases of an
// API server of the test's own, as the chart runs it.
func leaseRecord(t *testing.T) (*kubetest.Server, func(*Config)) {
	t.Helper()
	k := kubetest.Start(t)
	c, err := kube.New(kube.Config{URL: k.URL, TokenFile: k.TokenFile("controller"), CAFile: k.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	return k, func(cfg *Config) { cfg.Journal = c.LeaseJournalStore("kube-system", "efs.csi.aws.com") }
}

// leaseWrites counts the Lease writes k has answered.
func leaseWrites(k *kubetest.Server) int {
	n := 0
	for _, r := range k.Requests() {
		if strings.Contains(r.Path, "/leases") && (r.Method == http.MethodPut || r.Method == http.MethodPost) {
			n++
		}
	}
	return n
}

// With the record in Leases, a create makes the volume's record and holds
// its id in one write (its sequence tries first an id whose entry the
// record keeps in the record's shard: journal.BeginHeld), then records
// the access point: two writes a volume, where Begin, Hold and
// SetAccessPoint were three.
func TestLeaseRecordCreateIsTwoWrites(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    map[string]string
	}{
		{"GID tokens: the volume's sequence", params()},
		{"no GID tokens: the allocator", params("subPathPattern", "shared", "ensureUniqueDirectory", "false")},
	} {
		t.Run(tc.name, func(t *testing.T) { leaseRecordCreateIsTwoWrites(t, tc.p) })
	}
}

func leaseRecordCreateIsTwoWrites(t *testing.T, p map[string]string) {
	k, rec := leaseRecord(t)
	b := newBed(t, rec)
	for i := range 20 { // every root shard written: none needs a read first
		if _, err := b.svc.CreateVolume(b.ctx(), createReq(fmt.Sprint("pvc-warm-", i), 1<<30, p)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		before := leaseWrites(k)
		if _, err := b.svc.CreateVolume(b.ctx(), createReq(fmt.Sprint("pvc-", i), 1<<30, p)); err != nil {
			t.Fatal(err)
		}
		if n := leaseWrites(k) - before; n != 2 {
			t.Errorf("create %d: %d Lease writes, want 2 (the record with its id held, then its access point)", i, n)
		}
	}
	b.wantAccessPoints(30)
	b.wantUniqueIDs(false)
}

// The record's choice of ids costs no id: a range fills one create each
// with the record in Leases, as with any record (TestFillingARangeOneCreateEach).
func TestLeaseRecordFillsARange(t *testing.T) {
	for _, size := range []int{2, 64} {
		t.Run(fmt.Sprint("ids=", size), func(t *testing.T) {
			_, rec := leaseRecord(t)
			b := newBed(t, rec)
			p := params("gidRangeStart", "50000", "gidRangeEnd", fmt.Sprint(50000+size-1))
			for i := range size {
				if _, err := b.svc.CreateVolume(b.ctx(), createReq(fmt.Sprint("pvc-", i), 1<<30, p)); err != nil {
					t.Fatalf("create %d of a range of %d: %v", i+1, size, err)
				}
			}
			b.wantAccessPoints(size)
			b.wantUniqueIDs(false)
		})
	}
}
