package controller

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// countDescribes counts b's DescribeAccessPoint requests from now on.
func countDescribes(b *bed) *atomic.Int64 {
	n := &atomic.Int64{}
	b.hook.set("DescribeAccessPoint", func(any) { n.Add(1) }, nil)
	return n
}

// A delete of an access point this controller made takes it as its
// CreateAccessPoint answered (made.go): no DescribeAccessPoint, and the
// access point and its record go as after one. Another replica, which did
// not make it, describes it; so does this one once it is forgotten.
func TestDeleteOfAnAccessPointMadeHereDescribesNothing(t *testing.T) {
	cases := []struct {
		name          string
		deleter       func(maker *bed) *bed
		forget        bool
		wantDescribes int64
	}{
		{name: "made here", deleter: func(b *bed) *bed { return b }},
		{name: "made by another replica", deleter: func(b *bed) *bed { return newBedOn(t, b.url, b.emu) }, wantDescribes: 1},
		{name: "made here, forgotten", deleter: func(b *bed) *bed { return b }, forget: true, wantDescribes: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			maker := newBed(t)
			id := maker.mustCreate("pvc-made")
			d := c.deleter(maker)
			if c.forget {
				d.svc.made.drop(apOf(t, id))
			}
			describes := countDescribes(d)
			if err := d.delete(id); err != nil {
				t.Fatalf("DeleteVolume: %v", err)
			}
			if got := describes.Load(); got != c.wantDescribes {
				t.Errorf("%d DescribeAccessPoint requests, want %d", got, c.wantDescribes)
			}
			maker.wantAccessPoints(0)
			wantNoRecords(t, d)
			if n := maker.svc.made.len(); n != 0 && d == maker {
				t.Errorf("%d access points remembered after their delete", n)
			}
		})
	}
}

// An access point this controller made that another replica deleted since
// is remembered as it was made: a retried delete here finishes with OK and
// touches nothing else, even when the volume's next life, made by that
// replica, sends the same GID token from the same record key.
func TestDeleteOfAnAccessPointMadeHereAndDeletedElsewhere(t *testing.T) {
	a := newBed(t)
	b := newBedOn(t, a.url, a.emu)
	old := a.mustCreate("pvc-life")
	if err := b.delete(old); err != nil {
		t.Fatalf("DeleteVolume on the other replica: %v", err)
	}
	next := b.mustCreate("pvc-life")
	if apOf(t, next) == apOf(t, old) {
		t.Fatalf("the next life has the first life's access point %s", apOf(t, old))
	}
	if _, ok := a.svc.made.get(apOf(t, old)); !ok {
		t.Fatal("the maker forgot an access point another replica deleted: the case is not made")
	}
	if err := a.delete(old); err != nil {
		t.Fatalf("the first life's DeleteVolume again, on its maker: %v", err)
	}
	aps := a.wantAccessPoints(1)
	if aps[0].ID != apOf(t, next) {
		t.Fatalf("left %s, want the next life's %s", aps[0].ID, apOf(t, next))
	}
	rec, err := a.svc.journal.Volume(a.ctx(), testFS, "pvc-life")
	if err != nil || rec.AccessPoint != apOf(t, next) || rec.Deleting {
		t.Fatalf("the next life's record: %+v, %v; want it naming %s, not deleting", rec, err, apOf(t, next))
	}
	if err := a.delete(next); err != nil {
		t.Fatalf("the next life's DeleteVolume: %v", err)
	}
	a.wantAccessPoints(0)
}

// wantNoRecords fails unless b's record holds no volume.
func wantNoRecords(t *testing.T, b *bed) {
	t.Helper()
	n := 0
	if err := b.svc.journal.Volumes(b.ctx(), testFS, func(rs []*journal.Record) error { n += len(rs); return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d volumes recorded after every delete", n)
	}
}

// What a backend remembers: an answer with its ID, file system and token,
// a copy each time, the oldest forgotten past madeCap.
func TestMadeAccessPointsRemembered(t *testing.T) {
	ap := func(id string) *efs.AccessPoint {
		return &efs.AccessPoint{ID: id, FileSystemID: testFS, ClientToken: "token-" + id, Tags: map[string]string{"k": "v"}}
	}
	cases := []struct {
		name string
		ap   *efs.AccessPoint
		want bool
	}{
		{"a whole answer", ap("fsap-1"), true},
		{"no client token", &efs.AccessPoint{ID: "fsap-1", FileSystemID: testFS}, false},
		{"no file system", &efs.AccessPoint{ID: "fsap-1", ClientToken: "t"}, false},
		{"no ID", &efs.AccessPoint{FileSystemID: testFS, ClientToken: "t"}, false},
		{"nil", nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newMadeAPs()
			m.add(c.ap)
			if _, ok := m.get("fsap-1"); ok != c.want {
				t.Errorf("remembered %v, want %v", ok, c.want)
			}
		})
	}
	m := newMadeAPs()
	m.add(ap("fsap-1"))
	got, _ := m.get("fsap-1")
	got.Tags["k"] = "changed"
	if again, _ := m.get("fsap-1"); again.Tags["k"] != "v" {
		t.Errorf("a caller's change reached the memory: %v", again.Tags)
	}
	for i := range madeCap {
		m.add(ap(fmt.Sprintf("fsap-more-%d", i)))
	}
	if _, ok := m.get("fsap-1"); ok || m.len() != madeCap {
		t.Errorf("after %d more: the oldest remembered %v, %d remembered; want it forgotten, %d", madeCap, ok, m.len(), madeCap)
	}
}
