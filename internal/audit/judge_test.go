package audit

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

const ourCluster = "cluster-a"

func TestOwnerOfAnAccessPoint(t *testing.T) {
	rec := &journal.Record{Volume: journal.Volume{FileSystem: testFS, Token: "tok", Name: "pvc-x", Path: "/p", AccessPoint: "fsap-1"}}
	upstreamName := "pvc-6f1c2d3e-0000-4000-8000-00000000c1d0"
	ours := map[string]string{controller.TagCluster: "true", controller.TagVolumeName: "pvc-x"}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	for _, c := range []struct {
		name    string
		ap      efs.AccessPoint
		rec     *journal.Record
		cluster string
		want    Owner
	}{
		{"recorded, by ID", efs.AccessPoint{ID: "fsap-1", FileSystemID: testFS, ClientToken: "tok", Path: "/p"}, rec, ourCluster, OwnerThisCluster},
		{"recorded, by path before the answer", efs.AccessPoint{ID: "fsap-9", FileSystemID: testFS, ClientToken: "tok", Path: "/p"},
			&journal.Record{Volume: journal.Volume{FileSystem: testFS, Token: "tok", Path: "/p"}}, ourCluster, OwnerThisCluster},
		{"the record names another access point: tags decide", efs.AccessPoint{ID: "fsap-2", FileSystemID: testFS, ClientToken: "tok", Tags: with(ours, controller.TagClusterID, ourCluster)}, rec, ourCluster, OwnerUnrecorded},
		{"this driver's tags, this cluster's ID", efs.AccessPoint{ID: "fsap-3", ClientToken: "t", Tags: with(ours, controller.TagClusterID, ourCluster)}, nil, ourCluster, OwnerUnrecorded},
		{"this driver's tags, no ID", efs.AccessPoint{ID: "fsap-3", ClientToken: "t", Tags: ours}, nil, ourCluster, OwnerUnrecorded},
		{"another cluster's ID", efs.AccessPoint{ID: "fsap-4", Tags: with(ours, controller.TagClusterID, "cluster-b")}, nil, ourCluster, OwnerOtherCluster},
		{"an ID, ours unknown", efs.AccessPoint{ID: "fsap-4", Tags: with(ours, controller.TagClusterID, ourCluster)}, nil, "", OwnerOtherCluster},
		{"upstream", efs.AccessPoint{ID: "fsap-5", ClientToken: upstreamName, Tags: map[string]string{controller.TagCluster: "true", "team": "x"}}, nil, ourCluster, OwnerUpstream},
		{"upstream reuseAccessPoint", efs.AccessPoint{ID: "fsap-6", ClientToken: strings.Repeat("0a", 32), Tags: map[string]string{controller.TagCluster: "true"}}, nil, ourCluster, OwnerUpstream},
		{"untagged, made for its token", efs.AccessPoint{ID: "fsap-7", ClientToken: upstreamName, Path: "/base/" + upstreamName}, nil, ourCluster, OwnerUpstream},
		{"untagged, another root", efs.AccessPoint{ID: "fsap-7", ClientToken: upstreamName, Path: "/data"}, nil, ourCluster, OwnerOther},
		{"the cluster tag and a UUID token (the CLI's)", efs.AccessPoint{ID: "fsap-8", ClientToken: "6f1c2d3e-0000-4000-8000-00000000c1d0", Tags: map[string]string{controller.TagCluster: "true"}}, nil, ourCluster, OwnerOther},
		{"by hand", efs.AccessPoint{ID: "fsap-8", ClientToken: "terraform", Tags: map[string]string{"Name": "x"}}, nil, ourCluster, OwnerOther},
		// The default tags (the cluster tag alone): the record decides.
		{"default tags, recorded by its GID token", efs.AccessPoint{ID: "fsap-1", FileSystemID: testFS, ClientToken: "tok", Path: "/p",
			Tags: map[string]string{controller.TagCluster: "true"}}, rec, ourCluster, OwnerThisCluster},
		{"default tags, a GID token no record names", efs.AccessPoint{ID: "fsap-10", ClientToken: "csi-gid:" + testFS + ":60001",
			Tags: map[string]string{controller.TagCluster: "true"}}, nil, ourCluster, OwnerUnrecorded},
	} {
		t.Run(c.name, func(t *testing.T) {
			ap := c.ap
			if ap.FileSystemID == "" {
				ap.FileSystemID = testFS
			}
			got, why := ownerOf(&ap, recordOf(&ap, map[string]*journal.Record{"tok": c.rec}), c.cluster)
			if c.rec == nil {
				got, why = ownerOf(&ap, nil, c.cluster)
			}
			if got != c.want || why == "" {
				t.Errorf("%s (%s), want %s", got, why, c.want)
			}
		})
	}
}

// The orphan collector's rule, clause by clause, on a recorded access
// point no PV names.
func TestLeakRule(t *testing.T) {
	now := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	since := now.Add(-24 * time.Hour)
	base := journal.Volume{FileSystem: testFS, Token: "tok", Name: "pvc-x", Path: "/p", AccessPoint: "fsap-1",
		ClaimNamespace: "ns", ClaimName: "c", Created: now.Add(-time.Hour)}
	watching := proof{watching: true, since: since}
	for _, c := range []struct {
		name          string
		change        func(*journal.Volume, *fsInput)
		leak, finding bool
		why           string
	}{
		{"every clause holds", func(*journal.Volume, *fsInput) {}, true, true, "no PersistentVolume ever named it"},
		{"marked bound", func(v *journal.Volume, _ *fsInput) { v.Bound = true }, false, true, "marked bound"},
		{"no claim recorded", func(v *journal.Volume, _ *fsInput) { v.ClaimName = "" }, false, true, "names no claim"},
		{"claim exists", func(_ *journal.Volume, in *fsInput) { in.claims["ns/c"] = true }, false, false, "ns/c exists"},
		{"within the grace period", func(v *journal.Volume, _ *fsInput) { v.Created = now.Add(-time.Minute) }, false, false, "within the grace period"},
		{"no collector", func(_ *journal.Volume, in *fsInput) { in.collector = proof{why: "no orphan collector has run"} }, false, true, "not proven"},
		{"older than the collector", func(v *journal.Volume, _ *fsInput) { v.Created = since.Add(-time.Hour) }, false, true, "before the orphan collector began"},
		{"within the clock skew of the collector's start", func(v *journal.Volume, _ *fsInput) { v.Created = since.Add(clockSkew / 2) }, false, true, "before the orphan collector began"},
		{"never answered: no collector needed", func(v *journal.Volume, in *fsInput) {
			v.AccessPoint = ""
			in.collector = proof{why: "none"}
		}, true, true, "never answered"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := base
			in := &fsInput{claims: map[string]bool{}, collector: watching, now: now, grace: 10 * time.Minute}
			c.change(&v, in)
			leak, finding, why := in.leakWhy(&journal.Record{Volume: v})
			if leak != c.leak || finding != c.finding || !strings.Contains(why, c.why) {
				t.Errorf("leak %v finding %v (%s), want %v %v (%q)", leak, finding, why, c.leak, c.finding, c.why)
			}
		})
	}
}

// A recorded access point tagged with another cluster's ID is not planned:
// DeleteVolume would refuse it.
func TestARecordedAccessPointOfAnotherClusterIsNotPlanned(t *testing.T) {
	now := time.Now()
	rec := &journal.Record{Volume: journal.Volume{FileSystem: testFS, Token: "tok", Name: "pvc-x", Path: "/p", AccessPoint: "fsap-1",
		ClaimNamespace: "ns", ClaimName: "c", Created: now.Add(-time.Hour)}}
	in := &fsInput{aps: []efs.AccessPoint{{ID: "fsap-1", FileSystemID: testFS, ClientToken: "tok", Path: "/p",
		Tags: map[string]string{controller.TagClusterID: "cluster-b"}}},
		records: map[string]*journal.Record{"tok": rec}, claims: map[string]bool{}, cluster: ourCluster,
		collector: proof{watching: true, since: now.Add(-24 * time.Hour)}, now: now, grace: time.Minute}
	fs := &FileSystem{Limit: 10}
	j := judge(fs, in)
	if len(j.leaks) != 0 || fs.Unreferenced[0].Leak || !strings.Contains(fs.Unreferenced[0].Why, "DeleteVolume refuses it") {
		t.Errorf("leaks %v, %+v", j.leaks, fs.Unreferenced)
	}
	if fs.LimitUsed != 0.1 {
		t.Errorf("limit used %v", fs.LimitUsed)
	}
}

// The walk reads only the directories on the way to roots: it stops at a
// root, at an orphan, and never follows a symlink.
func TestScanDirs(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"base/a/vol", "base/a/data/deep", "base/b/x", "base/c", "base/static/sub", "outside/o", "base/r/inner"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "outside"), filepath.Join(root, "base/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(root, "base/a/escape")); err != nil {
		t.Fatal(err)
	}
	// Roots: an access point at base/a/vol and one at base/r; a static PV
	// at base/static; base/b/x/y (deeper than what exists).
	ds := scanDirs(root, []string{"/base", "/missing"}, []string{"/base/a/vol", "/base/r", "/base/static", "/base/b/x/y"})
	if want := []string{"/base/a/data", "/base/c"}; !slices.Equal(ds.Orphans, want) || ds.Error != "" {
		t.Errorf("orphans %v (%s), want %v", ds.Orphans, ds.Error, want)
	}
	// base, base/a, base/b, base/b/x: read; base/a/data, base/r, base/c, static: not.
	if ds.Read != 5 { // and /missing, which does not exist
		t.Errorf("read %d directories, want 5", ds.Read)
	}
	if ds := scanDirs(root, []string{"/base"}, []string{"/"}); len(ds.Orphans) != 0 {
		t.Errorf("an access point at / reaches everything: %v", ds.Orphans)
	}
	if got := basePaths([]*Class{{BasePath: "/a/b"}, {BasePath: "/a"}, {BasePath: "/c"}, {BasePath: "/a"}}); !slices.Equal(got, []string{"/a", "/c"}) {
		t.Errorf("base paths %v", got)
	}
	if got := basePaths([]*Class{{BasePath: "/a"}, {}}); !slices.Equal(got, []string{"/"}) {
		t.Errorf("base paths %v", got)
	}
}

// The directories root removal moved into its trash are listed as waiting
// (oldest first, what they were and whether a purge began), never as
// orphans, and the page says so.
func TestScanDirsListsTheTrash(t *testing.T) {
	root := t.TempDir()
	old, recent := time.Unix(1700000000, 0).UTC(), time.Unix(1700000300, 0).UTC()
	for _, d := range []string{
		"base/live", "base/orphan",
		volume.TrashDir + "/" + controller.TrashName("/base/gone", recent),
		volume.TrashDir + "/purge." + controller.TrashName("/base/older", old),
		volume.TrashDir + "/not-an-entry",
	} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ds := scanDirs(root, []string{"/"}, []string{"/base/live"})
	if want := []string{"/base/orphan"}; !slices.Equal(ds.Orphans, want) || ds.Error != "" {
		t.Errorf("orphans %v (%s), want %v: the trash is not an orphan", ds.Orphans, ds.Error, want)
	}
	want := []TrashWait{
		{Path: "/base/older", Entry: "/" + volume.TrashDir + "/purge." + controller.TrashName("/base/older", old), MovedAt: old, Purging: true},
		{Path: "/base/gone", Entry: "/" + volume.TrashDir + "/" + controller.TrashName("/base/gone", recent), MovedAt: recent},
	}
	if !slices.Equal(ds.Trash, want) {
		t.Errorf("trash %+v, want %+v", ds.Trash, want)
	}
	fs := &FileSystem{ID: testFS, Directories: ds}
	var titles []string
	for _, s := range fs.sections() {
		titles = append(titles, s.Title)
		if strings.Contains(s.Title, "trash") && (len(s.Rows) != 2 || s.Rows[1].Cells[0] != "/base/gone" || s.Rows[1].Cells[2] != "waiting") {
			t.Errorf("trash section rows %+v", s.Rows)
		}
	}
	if !slices.ContainsFunc(titles, func(s string) bool { return strings.Contains(s, "waiting in root removal's trash: 2") }) {
		t.Errorf("no trash section in %q", titles)
	}
}
