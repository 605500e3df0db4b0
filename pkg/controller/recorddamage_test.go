package controller

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// A directory volume's id entry lost from the record (its Lease deleted by
// hand before any replica that knew it read it again: pkg/kube restores
// it then) leaves its record, which names the id: a replica that never
// provisioned a directory volume does not give that id to an access
// point, whose GID token sequence starts at it.
func TestLostDirectoryIDIsNotGivenToAnAccessPoint(t *testing.T) {
	r := newRootBed(t)
	rng := []string{"gidRangeStart", "50000", "gidRangeEnd", "50001"}
	r.mustCreateDir("pvc-dir", rng...)
	var held int64 = -1
	for _, rec := range r.records() {
		if rec.Dir {
			held = rec.Allocated
		}
	}
	mem, _ := records.Load(r.emu)
	k := journal.Key{Kind: journal.KindID, FileSystem: testFS, Name: strconv.FormatInt(held, 10)}
	e, err := mem.(*journal.Memory).Get(r.ctx(), k)
	if err != nil {
		t.Fatalf("the directory volume's id entry: %v", err)
	}
	if err := mem.(*journal.Memory).Delete(r.ctx(), e); err != nil {
		t.Fatal(err)
	}
	// A name whose sequence tries the lost id first.
	name := ""
	for i := 0; name == ""; i++ {
		if n := fmt.Sprintf("pvc-ap-%d", i); core.SequenceAt(testFS, n, 50000, 50001, 0) == held {
			name = n
		}
	}
	other := newBedOn(t, r.url, r.emu, func(c *Config) { c.Mounter, c.TempDir = r.mounter, r.tmp })
	if _, err := other.svc.CreateVolume(other.ctx(), createReq(name, 1<<30, params(rng...))); err != nil {
		t.Fatal(err)
	}
	for _, ap := range other.accessPoints() {
		if ap.PosixUser.GID == held {
			t.Fatalf("access point %s has gid %d, the directory volume's", ap.ID, held)
		}
	}
}
