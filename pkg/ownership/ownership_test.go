package ownership

import (
	"testing"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

const pvName = "pvc-11111111-2222-3333-4444-555555555555"

func TestOfTrustsOnlyTheRecord(t *testing.T) {
	rec := &journal.Record{Volume: journal.Volume{FileSystem: "fs-1", Token: pvName, Name: pvName, Path: "/" + pvName, AccessPoint: "fsap-1"}}
	ours := map[string]string{TagCluster: "true", TagVolumeName: pvName}
	for _, tc := range []struct {
		name string
		ap   efs.AccessPoint
		rec  *journal.Record
		want Kind
		csi  bool
	}{
		{"named by its record", efs.AccessPoint{ID: "fsap-1", FileSystemID: "fs-1", ClientToken: pvName}, rec, Recorded, true},
		{"its record names another access point: forged or stale", efs.AccessPoint{ID: "fsap-2", FileSystemID: "fs-1", ClientToken: pvName, Tags: ours}, rec, Tagged, true},
		{"the record of another file system", efs.AccessPoint{ID: "fsap-1", FileSystemID: "fs-2", ClientToken: pvName}, rec, NotCSI, false},
		{"this driver's tags, no record", efs.AccessPoint{ID: "fsap-3", ClientToken: "x", Tags: ours}, nil, Tagged, true},
		{"upstream's tag and token", efs.AccessPoint{ID: "fsap-4", ClientToken: pvName, Tags: map[string]string{TagCluster: "true"}}, nil, Upstream, true},
		{"upstream's reuse token", efs.AccessPoint{ID: "fsap-5", ClientToken: "6f1ed002ab5595859014ebf0951522d9c1b8e8c3d0b1ce4b2e4f8b5d2c4e6a0f", Tags: map[string]string{TagCluster: "true"}}, nil, UpstreamReuse, true},
		{"untagged, token and root made for it", efs.AccessPoint{ID: "fsap-6", ClientToken: pvName, Path: "/" + pvName}, nil, Untagged, true},
		{"untagged, token but a root by hand", efs.AccessPoint{ID: "fsap-7", ClientToken: pvName, Path: "/static-volume"}, nil, NotCSI, false},
		{"a console Name tag", efs.AccessPoint{ID: "fsap-8", ClientToken: pvName, Path: "/" + pvName, Tags: map[string]string{"Name": "x"}}, nil, NotCSI, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := Of(&tc.ap, tc.rec)
			if got != tc.want || got.CSI() != tc.csi {
				t.Errorf("Of = %v (csi %v), want %v (csi %v)", got, got.CSI(), tc.want, tc.csi)
			}
		})
	}
}

// Whatever an access point carries, Of never panics and never says
// Recorded without the record agreeing.
func FuzzOf(f *testing.F) {
	f.Add("fsap-1", "fs-1", pvName, "/"+pvName, "efs.csi.aws.com/cluster", "true", "fs-1", pvName, "fsap-1")
	f.Add("", "", "", "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, id, fs, token, path, tagKey, tagValue, recFS, recToken, recAP string) {
		ap := &efs.AccessPoint{ID: id, FileSystemID: fs, ClientToken: token, Path: path, Tags: map[string]string{tagKey: tagValue}}
		rec := &journal.Record{Volume: journal.Volume{FileSystem: recFS, Token: recToken, AccessPoint: recAP, Path: path}}
		kind, _ := Of(ap, rec)
		if kind == Recorded && (recFS != fs || recToken != token || (recAP != "" && recAP != id)) {
			t.Fatalf("Recorded without an agreeing record: %+v %+v", ap, rec.Volume)
		}
		if kind, _ := Of(ap, nil); kind == Recorded {
			t.Fatal("Recorded without a record")
		}
	})
}
