package controller

import (
	"strconv"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// forgetRecord removes rec's volume and id entries behind the controller's
// back: what a duplicate create's access point looks like once the
// volume's delete on another replica finished the record after the
// duplicate's send (the simulator's leak-dup-create-killed).
func forgetRecord(t *testing.T, b *bed, rec *journal.Record) {
	t.Helper()
	store, _ := records.Load(b.emu)
	m := store.(*journal.Memory)
	for _, k := range []journal.Key{
		{Kind: journal.KindVolume, FileSystem: rec.FileSystem, Name: rec.Token},
		{Kind: journal.KindID, FileSystem: rec.FileSystem, Name: strconv.FormatInt(rec.Allocated, 10)},
	} {
		e, err := m.Get(b.ctx(), k)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Delete(b.ctx(), e); err != nil {
			t.Fatal(err)
		}
	}
}

// SweepUnrecorded deletes only an access point this cluster's create made
// for a record that no longer names it, and holds its id while it does:
// never one a record owns, a PV names, a volume's held id may adopt, of
// another cluster or writer, or younger than the grace period.
func TestSweepUnrecorded(t *testing.T) {
	const grace = time.Minute
	for _, tt := range []struct {
		name string
		// prepare turns the answered volume rec (access point ap) into the
		// case; it returns what PVs name.
		prepare func(t *testing.T, b *bed, rec *journal.Record, ap *efs.AccessPoint) (named string)
		swept   bool
	}{
		{"no record names it", func(t *testing.T, b *bed, rec *journal.Record, _ *efs.AccessPoint) string {
			forgetRecord(t, b, rec)
			return ""
		}, true},
		{"its record names it", func(*testing.T, *bed, *journal.Record, *efs.AccessPoint) string { return "" }, false},
		{"a PV names it", func(t *testing.T, b *bed, rec *journal.Record, ap *efs.AccessPoint) string {
			forgetRecord(t, b, rec)
			return ap.ID
		}, false},
		{"a later record of its volume holds its id", func(t *testing.T, b *bed, rec *journal.Record, _ *efs.AccessPoint) string {
			forgetRecord(t, b, rec)
			next := rec.Volume
			next.AccessPoint, next.Created = "", rec.Created.Add(time.Second)
			r, _, err := b.svc.journal.Begin(b.ctx(), next)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.svc.journal.HoldID(b.ctx(), r); err != nil {
				t.Fatal(err)
			}
			return ""
		}, false},
		{"its id is held for a volume whose record is gone", func(t *testing.T, b *bed, rec *journal.Record, _ *efs.AccessPoint) string {
			forgetRecord(t, b, rec)
			r := &journal.Record{Volume: journal.Volume{FileSystem: rec.FileSystem, Token: "pvc-killed", Allocated: rec.Allocated}}
			if err := b.svc.journal.HoldID(b.ctx(), r); err != nil {
				t.Fatal(err)
			}
			return ""
		}, true},
		{"a killed sweep holds its id", func(t *testing.T, b *bed, rec *journal.Record, ap *efs.AccessPoint) string {
			forgetRecord(t, b, rec)
			if _, err := b.svc.journal.HoldForSweep(b.ctx(), rec.FileSystem, rec.Allocated, ap.ID); err != nil {
				t.Fatal(err)
			}
			return ""
		}, true},
		{"a forged sweep's hold names a live volume's", func(t *testing.T, b *bed, rec *journal.Record, ap *efs.AccessPoint) string {
			// Its record still names it (and holds another id here: the
			// hold is written where no volume's is).
			if _, err := b.svc.journal.HoldForSweep(b.ctx(), rec.FileSystem, rec.Allocated+1, ap.ID); err != nil {
				t.Fatal(err)
			}
			return ""
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			// The sweep's proof is the descriptive tags (docs/design.md,
			// "Access points no record names").
			b := newBed(t, descriptive, func(c *Config) { c.ClusterID = "ours"; c.Now = clk.Now })
			volID := b.mustCreate("pvc-1")
			rec := b.recordOf("pvc-1")
			ap, err := b.client.DescribeAccessPoint(b.ctx(), apOf(t, volID))
			if err != nil {
				t.Fatal(err)
			}
			named := tt.prepare(t, b, rec, ap)
			isNamed := func(id string) bool { return id == named }
			// Within the grace period nothing is swept, whatever the case.
			if n, err := b.svc.SweepUnrecorded(b.ctx(), testFS, isNamed, grace); err != nil || n != 0 {
				t.Fatalf("within the grace period: swept %d (%v)", n, err)
			}
			clk.Advance(grace)
			n, err := b.svc.SweepUnrecorded(b.ctx(), testFS, isNamed, grace)
			if err != nil {
				t.Fatal(err)
			}
			if got := n == 1; got != tt.swept {
				t.Fatalf("swept %d, want swept %t", n, tt.swept)
			}
			if tt.swept {
				b.wantAccessPoints(0)
				if h, err := b.svc.journal.IDHolder(b.ctx(), testFS, rec.Allocated); err != nil || h != "" {
					t.Errorf("id %d held by %q after the sweep (%v)", rec.Allocated, h, err)
				}
				return
			}
			b.wantAccessPoints(1)
		})
	}
}

// The sweep acts on this cluster's tags alone: an access point of another
// cluster, one without a record life (upstream's, an earlier release's,
// made by hand) or under another token is never swept, and without a
// cluster ID nothing is.
func TestSweepLeavesOtherWriters(t *testing.T) {
	life := time.Unix(0, 0).UTC().Format(time.RFC3339Nano)
	for _, tt := range []struct {
		name    string
		cluster string
		tags    map[string]string
		token   string
	}{
		{"another cluster's", "ours", map[string]string{TagCluster: "true", TagClusterID: "theirs", TagVolumeName: "pvc-1", TagRecordLife: life}, ""},
		{"no record life", "ours", map[string]string{TagCluster: "true", TagClusterID: "ours", TagVolumeName: "pvc-1"}, ""},
		{"no cluster ID", "ours", map[string]string{TagCluster: "true", TagVolumeName: "pvc-1", TagRecordLife: life}, ""},
		{"a name token", "ours", map[string]string{TagCluster: "true", TagClusterID: "ours", TagVolumeName: "pvc-1", TagRecordLife: life}, "pvc-1"},
		{"this controller has no cluster ID", "", map[string]string{TagCluster: "true", TagVolumeName: "pvc-1", TagRecordLife: life}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBed(t, func(c *Config) { c.ClusterID = tt.cluster })
			token := tt.token
			if token == "" {
				token = volume.GIDToken(testFS, 60000)
			}
			if _, err := b.client.CreateAccessPoint(b.ctx(), efs.CreateAccessPointInput{
				FileSystemID: testFS, ClientToken: token, Path: "/pvc-1", Tags: tt.tags,
				PosixUser:    &efs.PosixUser{UID: 60000, GID: 60000},
				CreationInfo: &efs.CreationInfo{OwnerUID: 60000, OwnerGID: 60000, Permissions: "700"},
			}); err != nil {
				t.Fatal(err)
			}
			n, err := b.svc.SweepUnrecorded(b.ctx(), testFS, func(string) bool { return false }, 0)
			if err != nil || n != 0 {
				t.Fatalf("swept %d (%v)", n, err)
			}
			b.wantAccessPoints(1)
		})
	}
}

// Each round also releases an id held for a volume whose record is gone
// (a call cut short past its cleanup's budget left it), never one held
// for a volume whose record exists, whatever id that record holds: a
// create of it may be moving to that id.
func TestSweepReleasesIDsHeldForNobody(t *testing.T) {
	b := newBed(t, func(c *Config) { c.ClusterID = "ours" })
	b.mustCreate("pvc-1")
	rec := b.recordOf("pvc-1")
	moving := *rec
	moving.Allocated = rec.Allocated + 5
	gone := &journal.Record{Volume: journal.Volume{FileSystem: testFS, Token: "pvc-gone", Allocated: rec.Allocated + 6}}
	for _, r := range []*journal.Record{&moving, gone} {
		if err := b.svc.journal.HoldID(b.ctx(), r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.svc.SweepUnrecorded(b.ctx(), testFS, func(string) bool { return false }, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id   int64
		want string
	}{{rec.Allocated, rec.Token}, {moving.Allocated, rec.Token}, {gone.Allocated, ""}} {
		if h, err := b.svc.journal.IDHolder(b.ctx(), testFS, tc.id); err != nil || h != tc.want {
			t.Errorf("id %d held by %q (%v), want %q", tc.id, h, err, tc.want)
		}
	}
	b.wantAccessPoints(1)
}
