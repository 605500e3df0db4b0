package audit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	efssdk "github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/efs/types"
	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

const fsID = "fs-0123456789abcdef0"

func ap(id, name string, gid int64) efs.AccessPoint {
	return efs.AccessPoint{ID: id, FileSystemID: fsID, Path: "/" + name,
		PosixUser: &efs.PosixUser{UID: gid, GID: gid},
		Tags:      map[string]string{controller.TagCluster: "true", controller.TagVolumeName: name}}
}

func vid(apID string) string { return "efs:" + fsID + "::" + apID }

// clean is a run's state with nothing wrong: two live volumes, their access
// points, one access point of another user, the driver at rest.
func clean() Inputs {
	foreign := ap("fsap-f", "pvc-other", 40000)
	return Inputs{
		FileSystemID: fsID,
		AccessPoints: []efs.AccessPoint{ap("fsap-a", "pvc-a", 50000), ap("fsap-b", "pvc-b", 50001), foreign},
		Live:         map[string]string{"pvc-a": vid("fsap-a"), "pvc-b": vid("fsap-b")},
		RunNames:     map[string]bool{"pvc-a": true, "pvc-b": true, "pvc-c": true},
		Answers:      map[string][]string{"pvc-a": {vid("fsap-a")}},
		Gauges:       map[string]float64{"efs_csi_locks_held": 0, "efs_csi_operations_in_flight": 0},
		Markers:      []Marker{{Volume: "pvc-a", Path: "/d/pvc-a/.marker", Present: true}},
	}
}

func TestCheckReportsEachKindOfFinding(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Inputs)
		figure string // the figure that must be 1; every other must be 0
		also   string // a second figure the same fault raises
	}{
		{"clean", func(*Inputs) {}, "", ""},
		{"access point of a failed create", func(in *Inputs) {
			in.AccessPoints = append(in.AccessPoints, ap("fsap-c", "pvc-c", 50002))
		}, "leaked access points", ""},
		{"any stranger on an exclusive file system", func(in *Inputs) { in.Exclusive = true }, "leaked access points", ""},
		{"live volume whose access point is gone", func(in *Inputs) { in.AccessPoints = in.AccessPoints[1:] }, "volumes missing", ""},
		{"live volume on another file system", func(in *Inputs) {
			in.Live["pvc-a"] = "efs:fs-99999999::fsap-a"
		}, "volumes missing", "leaked access points"}, // and fsap-a, owned by no one, leaks
		{"unparsable volume ID", func(in *Inputs) { in.Live["pvc-a"] = "garbage" }, "volumes missing", "leaked access points"},
		{"volume whose access point belongs to another name", func(in *Inputs) {
			in.AccessPoints[0].Tags[controller.TagVolumeName] = "pvc-z"
		}, "volumes missing", ""},
		{"two volumes on one access point", func(in *Inputs) {
			in.Live["pvc-b"] = vid("fsap-a")
			in.AccessPoints = slices.Delete(in.AccessPoints, 1, 2)
		}, "volumes missing", ""},
		{"duplicate GID among driver access points", func(in *Inputs) {
			in.AccessPoints[1].PosixUser.GID = 50000
		}, "duplicate GIDs", ""},
		{"two answers for one name", func(in *Inputs) {
			in.Answers["pvc-b"] = []string{vid("fsap-b"), vid("fsap-x")}
		}, "conflicting answers", ""},
		{"mount left", func(in *Inputs) { in.Mounts = []string{"/tmp/efs-csi-delete-1"} }, "leftover temp mounts", ""},
		{"directory left", func(in *Inputs) { in.TmpDirs = []string{"/tmp/efs-csi-delete-1"} }, "leftover temp dirs", ""},
		{"lock held at rest", func(in *Inputs) { in.Gauges["efs_csi_locks_held"] = 2 }, "gauges not at rest", ""},
		{"gauge missing", func(in *Inputs) { delete(in.Gauges, "efs_csi_operations_in_flight") }, "gauges not at rest", ""},
		{"marker gone", func(in *Inputs) { in.Markers[0].Present = false }, "lost markers", ""},
		{"root dir left", func(in *Inputs) { in.RootDirsLeft = []string{"/d/pvc-x"} }, "root dirs left", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := clean()
			tc.change(&in)
			r := Check(in)
			for _, f := range r.Figures() {
				want := 0
				if f.Name == tc.figure || f.Name == tc.also {
					want = 1
				}
				if f.Value != want {
					t.Errorf("%s = %d, want %d; findings %q", f.Name, f.Value, want, r.All())
				}
			}
			if (r.Total() == 0) != (tc.figure == "") {
				t.Errorf("Total() = %d", r.Total())
			}
		})
	}
}

func TestGaugesNotScrapedAreNotFindings(t *testing.T) {
	in := clean()
	in.Gauges = nil
	if r := Check(in); r.GaugesChecked || r.Total() != 0 {
		t.Errorf("unscraped gauges: checked=%v findings %q", r.GaugesChecked, r.All())
	}
}

func TestParseVolumeIDAcceptsEveryProvisionedForm(t *testing.T) {
	for _, tc := range []struct {
		id, fs, ap string
		ok         bool
	}{
		{"efs:fs-1::fsap-2", "fs-1", "fsap-2", true},
		{"fs-1::fsap-2", "fs-1", "fsap-2", true},
		{"s3files:fs-1::fsap-2", "fs-1", "fsap-2", true},
		{"s3files:efs:fs-1::fsap-2", "", "", false},
		{"fs-1", "", "", false},
		{"fs-1:/a:fsap-2", "", "", false},
		{"efs:fs-1::", "", "", false},
		{"", "", "", false},
	} {
		fs, ap, ok := ParseVolumeID(tc.id)
		if fs != tc.fs || ap != tc.ap || ok != tc.ok {
			t.Errorf("ParseVolumeID(%q) = %q, %q, %v", tc.id, fs, ap, ok)
		}
	}
}

func TestTempMountsFindsDriverMountPointsBelowDir(t *testing.T) {
	table := strings.Join([]string{
		`22 1 0:21 / /proc rw,nosuid - proc proc rw`,
		`90 22 8:1 /data/fs-1 /tmp/run/efs-csi-delete-123 rw - ext4 /dev/sda1 rw`,
		`91 22 8:1 /data/fs-1 /other/efs-csi-delete-9 rw - ext4 /dev/sda1 rw`,
		`92 22 8:1 /data/fs-1 /tmp/run/with\040space/efs-csi-delete-7 rw - ext4 /dev/sda1 rw`,
		`93 22 8:1 /data/fs-1 /tmp/run/efs-csi-delete-1/inner rw - ext4 /dev/sda1 rw`,
	}, "\n")
	for _, tc := range []struct {
		dir  string
		want []string
	}{
		{"/tmp/run", []string{"/tmp/run/efs-csi-delete-123", "/tmp/run/with space/efs-csi-delete-7"}},
		{"", []string{"/tmp/run/efs-csi-delete-123", "/other/efs-csi-delete-9", "/tmp/run/with space/efs-csi-delete-7"}},
	} {
		got, err := TempMounts(strings.NewReader(table), tc.dir)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("TempMounts(dir %q) = %q, %v; want %q", tc.dir, got, err, tc.want)
		}
	}
}

func TestParseMetricsAndSum(t *testing.T) {
	text := `# HELP efs_csi_locks_held Volume and target locks held now.
# TYPE efs_csi_locks_held gauge
efs_csi_locks_held 3
efs_csi_rpc_total{code="OK",method="CreateVolume"} 10
efs_csi_rpc_total{code="Aborted",method="CreateVolume"} 4
efs_csi_rpc_total{code="OK",method="DeleteVolume"} 7
efs_csi_api_retries_total{operation="CreateAccessPoint"} 2.5e+01
label_with_space{a="x y"} 1 1700000000000
`
	m, err := ParseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		matchers []string
		want     float64
	}{
		{"efs_csi_locks_held", nil, 3},
		{"efs_csi_rpc_total", nil, 21},
		{"efs_csi_rpc_total", []string{`method="CreateVolume"`}, 14},
		{"efs_csi_rpc_total", []string{`method="CreateVolume"`, `code="OK"`}, 10},
		{"efs_csi_api_retries_total", nil, 25},
		{"label_with_space", nil, 1},
		{"efs_csi", nil, 0}, // a prefix is not a name
	} {
		if got := Sum(m, tc.name, tc.matchers...); got != tc.want {
			t.Errorf("Sum(%s, %v) = %v, want %v", tc.name, tc.matchers, got, tc.want)
		}
	}
	if _, err := ParseMetrics(strings.NewReader("metric_without_value\n")); err == nil {
		t.Error("a line without a value parsed")
	}
}

// The audit, end to end over its real inputs: access points planted through
// the EFS API of the emulator, a real bind mount named like the driver's
// temporary mounts, a directory left behind and a metrics endpoint with a
// lock held. Each must be reported, and the clean parts must not be.
func TestAuditFindsPlantedLeakDuplicateGIDAndStrayMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	ctx := context.Background()
	endpoint, em := emulatortest.Start(t, emulator.Config{FileSystems: []string{fsID}})
	client, err := NewClient(ctx, ClientOptions{Endpoint: endpoint, AnyCredentials: true, Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string, gid int64) string {
		out, err := client.CreateAccessPoint(ctx, &efssdk.CreateAccessPointInput{
			ClientToken: aws.String(name), FileSystemId: aws.String(fsID),
			PosixUser: &types.PosixUser{Uid: aws.Int64(gid), Gid: aws.Int64(gid)},
			RootDirectory: &types.RootDirectory{Path: aws.String("/" + name), CreationInfo: &types.CreationInfo{
				OwnerUid: aws.Int64(gid), OwnerGid: aws.Int64(gid), Permissions: aws.String("700")}},
			Tags: []types.Tag{{Key: aws.String(controller.TagCluster), Value: aws.String("true")},
				{Key: aws.String(controller.TagVolumeName), Value: aws.String(name)}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.AccessPointId)
	}
	live := create("pvc-live", 50000)
	leaked := create("pvc-leaked", 50001) // a create that failed, yet left this
	twin := create("pvc-twin", 50000)     // same GID as pvc-live
	_ = create("pvc-someone-else", 40000) // not the run's: neither leak nor finding

	tmp := t.TempDir()
	stray := filepath.Join(tmp, "efs-csi-delete-x")
	left := filepath.Join(tmp, "efs-csi-delete-y")
	for _, d := range []string{stray, left} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(em.FileSystemDir(fsID), stray, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(stray, unix.MNT_DETACH) })

	metricsSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "efs_csi_locks_held 1\nefs_csi_operations_in_flight 0")
	}))
	defer metricsSrv.Close()

	aps, err := ListAccessPoints(ctx, client, fsID)
	if err != nil {
		t.Fatal(err)
	}
	mounts, err := ProcessTempMounts(tmp)
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := TempDirs(tmp)
	if err != nil {
		t.Fatal(err)
	}
	gauges, err := Scrape(ctx, metricsSrv.URL)
	if err != nil {
		t.Fatal(err)
	}
	r := Check(Inputs{
		FileSystemID: fsID, AccessPoints: aps,
		Live:     map[string]string{"pvc-live": vid(live), "pvc-twin": vid(twin)},
		RunNames: map[string]bool{"pvc-live": true, "pvc-leaked": true, "pvc-twin": true},
		Mounts:   mounts, TmpDirs: dirs, Gauges: gauges,
	})

	subjects := func(fs []Finding) []string {
		var s []string
		for _, f := range fs {
			s = append(s, f.Subject)
		}
		return s
	}
	for _, tc := range []struct {
		what string
		got  []string
		want []string
	}{
		{"leaked", subjects(r.Leaked), []string{leaked}},
		{"missing", subjects(r.Missing), nil},
		{"duplicate GIDs", subjects(r.DuplicateGIDs), []string{"50000"}},
		{"mounts", subjects(r.Mounts), []string{stray}},
		{"dirs", subjects(r.TmpDirs), []string{stray, left}},
		{"gauges", subjects(r.Gauges), []string{"efs_csi_locks_held"}},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.what, tc.got, tc.want)
		}
	}
	if r.AccessPoints != 4 || r.Total() != 6 {
		t.Errorf("saw %d access points and %d findings %q; want 4 and 6", r.AccessPoints, r.Total(), r.All())
	}
}

// Directory volumes (efs-dir): a live volume without its directory is
// missing, a directory of the run that no live volume owns is a leak (when
// the driver removes deleted volumes' directories), and a GID two live
// directories (or a directory and an access point) carry is a duplicate.
func TestCheckDirectoryVolumes(t *testing.T) {
	dirID := func(p string) string { return "efsdir:" + fsID + ":" + p }
	base := func() Inputs {
		return Inputs{
			FileSystemID: fsID,
			AccessPoints: []efs.AccessPoint{ap("fsap-1", "pvc-ap", 50001)},
			Live:         map[string]string{"pvc-a": dirID("/stress/pvc-a"), "pvc-b": dirID("/stress/pvc-b"), "pvc-ap": vid("fsap-1")},
			RunNames:     map[string]bool{"pvc-a": true, "pvc-b": true, "pvc-c": true, "pvc-ap": true},
			Dirs: map[string]Dir{
				fsID + ":/stress/pvc-a": {Exists: true, GID: 50002, Name: "pvc-a"},
				fsID + ":/stress/pvc-b": {Exists: true, GID: 50003, Name: "pvc-b"},
			},
			DirsOwned: true,
		}
	}
	for _, tc := range []struct {
		name    string
		mut     func(*Inputs)
		missing int
		leaked  int
		dupGIDs int
	}{
		{"clean", func(*Inputs) {}, 0, 0, 0},
		{"a live volume's directory is gone", func(in *Inputs) { in.Dirs[fsID+":/stress/pvc-a"] = Dir{} }, 1, 0, 0},
		{"a deleted volume's directory is left", func(in *Inputs) {
			in.Dirs[fsID+":/stress/pvc-c"] = Dir{Exists: true, GID: 50004, Name: "pvc-c"}
		}, 0, 1, 0},
		{"left, but the driver keeps directories", func(in *Inputs) {
			in.Dirs[fsID+":/stress/pvc-c"] = Dir{Exists: true, GID: 50004, Name: "pvc-c"}
			in.DirsOwned = false
		}, 0, 0, 0},
		{"a directory not of the run", func(in *Inputs) { in.Dirs[fsID+":/stress/other"] = Dir{Exists: true} }, 0, 0, 0},
		{"two directories carry one GID", func(in *Inputs) { in.Dirs[fsID+":/stress/pvc-b"] = Dir{Exists: true, GID: 50002, Name: "pvc-b"} }, 0, 0, 1},
		{"a directory carries an access point's GID", func(in *Inputs) { in.Dirs[fsID+":/stress/pvc-b"] = Dir{Exists: true, GID: 50001, Name: "pvc-b"} }, 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.mut(&in)
			r := Check(in)
			if len(r.Missing) != tc.missing || len(r.Leaked) != tc.leaked || len(r.DuplicateGIDs) != tc.dupGIDs {
				t.Errorf("missing %d leaked %d duplicate GIDs %d, want %d %d %d: %v",
					len(r.Missing), len(r.Leaked), len(r.DuplicateGIDs), tc.missing, tc.leaked, tc.dupGIDs, r.All())
			}
		})
	}
}
