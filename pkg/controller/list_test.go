package controller

import (
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// Each cluster's controller writes its cluster ID and lists only its own
// volumes, though every cluster's access points share the account and the
// file system; a controller without a cluster ID writes none and lists the
// ones that carry none. An ID EFS cannot store as a tag is refused.
func TestListVolumesListsOnlyThisClustersAccessPoints(t *testing.T) {
	b := newBed(t)
	clusters := map[string]*Service{}
	created := map[string]string{} // cluster ID -> volume ID
	for _, id := range []string{"uid-a", "uid-b", ""} {
		svc, err := New(Config{EFS: b.client, ClusterID: id, TempDir: t.TempDir(), DescriptiveTags: true})
		if err != nil {
			t.Fatal(err)
		}
		clusters[id] = svc
		r, err := svc.CreateVolume(b.ctx(), createReq("pvc-of-"+id, 1<<30, params()))
		if err != nil {
			t.Fatal(err)
		}
		created[id] = r.Volume.VolumeId
	}
	for _, ap := range b.wantAccessPoints(3) {
		id, ok := ap.Tags[TagClusterID]
		if want := ap.Tags[TagVolumeName][len("pvc-of-"):]; id != want || ok != (want != "") {
			t.Errorf("access point %s of %q carries cluster ID %q (present %v)", ap.ID, want, id, ok)
		}
	}
	for id, svc := range clusters {
		r, err := svc.ListVolumes(b.ctx(), &csi.ListVolumesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range r.Entries {
			got = append(got, e.Volume.VolumeId)
		}
		if !slices.Equal(got, []string{created[id]}) {
			t.Errorf("cluster %q lists %v, want only %s", id, got, created[id])
		}
	}
	if _, err := New(Config{EFS: b.client, ClusterID: "bad\nid"}); err == nil {
		t.Error("a cluster ID with a newline was accepted")
	}
}
