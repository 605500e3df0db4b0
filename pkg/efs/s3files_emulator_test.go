package efs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// apiClient is what the controller calls, met by *efs.Client and *efs.S3Files.
type apiClient interface {
	CreateAccessPoint(ctx context.Context, in efs.CreateAccessPointInput) (*efs.AccessPoint, error)
	DeleteAccessPoint(ctx context.Context, id string) error
	DescribeAccessPoint(ctx context.Context, id string) (*efs.AccessPoint, error)
	ListAccessPoints(ctx context.Context, fsID string, fn func([]efs.AccessPoint) error) error
	DescribeFileSystem(ctx context.Context, fsID string) (*efs.FileSystem, error)
	DescribeMountTargets(ctx context.Context, fsID string) ([]efs.MountTarget, error)
	Ping(ctx context.Context) error
}

const emuS3FS = "fs-0123456789abcdef01" // S3 Files IDs have 17 to 40 hex digits

// flavour is one API's client against one emulator, with what differs.
type flavour struct {
	name   string
	c      apiClient
	emu    *emulator.Emulator
	obs    *countingObserver
	fsID   string
	create emulator.Op // the emulator's name of CreateAccessPoint
	del    emulator.Op
	// listCalls: the observer's count of listing calls the lifecycle makes,
	// under the client's operation names.
	listCalls map[string]int
}

// bothClients starts one emulator per API and runs f with each client.
func bothClients(t *testing.T, cfg emulator.Config, f func(t *testing.T, fl flavour)) {
	t.Helper()
	for _, s3 := range []bool{false, true} {
		c := cfg
		c.FileSystems, c.S3FilesFileSystems = []string{emuFS}, []string{emuS3FS}
		url, e := emulatortest.Start(t, c)
		fl := flavour{name: "EFS", emu: e, fsID: emuFS, create: emulator.OpCreateAccessPoint, del: emulator.OpDeleteAccessPoint,
			listCalls: map[string]int{efs.OpDescribeAccessPoints: 2, efs.OpS3ListAccessPoints: 0}}
		if s3 {
			fl = flavour{name: "S3Files", emu: e, fsID: emuS3FS, create: emulator.OpS3CreateAccessPoint, del: emulator.OpS3DeleteAccessPoint,
				listCalls: map[string]int{efs.OpS3ListAccessPoints: 1, efs.OpS3GetAccessPoint: 1, efs.OpDescribeAccessPoints: 0}}
			fl.c, fl.obs = newS3FilesClient(t, url)
		} else {
			fl.c, fl.obs = newClient(t, url, nil)
		}
		t.Run(fl.name, func(t *testing.T) { f(t, fl) })
	}
}

func newS3FilesClient(t testing.TB, url string) (*efs.S3Files, *countingObserver) {
	t.Helper()
	obs := newObserver()
	c, err := efs.NewS3Files(t.Context(), efs.Config{Region: "us-east-1", Endpoint: url, BaseBackoff: 2 * time.Millisecond,
		MaxBackoff: 20 * time.Millisecond, Observer: obs})
	if err != nil {
		t.Fatalf("efs.NewS3Files: %v", err)
	}
	return c, obs
}

func (fl flavour) input(token string) efs.CreateAccessPointInput {
	in := emuInput(token)
	in.FileSystemID = fl.fsID
	return in
}

func TestBothClientsAccessPointLifecycle(t *testing.T) {
	bothClients(t, emulator.Config{}, func(t *testing.T, fl flavour) {
		ctx := t.Context()
		ap, err := fl.c.CreateAccessPoint(ctx, fl.input("pvc-1"))
		if err != nil {
			t.Fatal(err)
		}
		if ap.FileSystemID != fl.fsID || ap.ClientToken != "pvc-1" || ap.Path != "/dynamic/pvc-1" || ap.PosixUser.GID != 50000 ||
			ap.CreationInfo.Permissions != "700" || ap.Tags["efs.csi.aws.com/cluster"] != "true" || ap.LifeCycleState != "available" {
			t.Errorf("created %+v", ap)
		}
		got, err := fl.c.DescribeAccessPoint(ctx, ap.ID)
		if err != nil || !reflect.DeepEqual(got, ap) {
			t.Fatalf("DescribeAccessPoint: %+v, %v; want %+v", got, err, ap)
		}
		// The listing is complete: tokens and tags too (S3 Files knows them
		// from the create).
		all, err := efs.Collect(ctx, fl.c.ListAccessPoints, fl.fsID)
		if err != nil || len(all) != 1 || all[0].ClientToken != "pvc-1" || all[0].Tags["efs.csi.aws.com/cluster"] != "true" {
			t.Fatalf("ListAccessPoints: %+v, %v", all, err)
		}
		if err := fl.c.DeleteAccessPoint(ctx, ap.ID); err != nil {
			t.Fatal(err)
		}
		if err := fl.c.DeleteAccessPoint(ctx, ap.ID); !errors.Is(err, efs.ErrAccessPointNotFound) {
			t.Errorf("second delete: %v, want ErrAccessPointNotFound", err)
		}
		fs, err := fl.c.DescribeFileSystem(ctx, fl.fsID)
		if err != nil || fs.ID != fl.fsID || fs.LifeCycleState != "available" {
			t.Errorf("DescribeFileSystem: %+v, %v", fs, err)
		}
		mts, err := fl.c.DescribeMountTargets(ctx, fl.fsID)
		if err != nil || len(mts) != 1 || mts[0].IPAddress != "127.0.0.1" || mts[0].FileSystemID != fl.fsID {
			t.Errorf("DescribeMountTargets: %+v, %v", mts, err)
		}
		if err := fl.c.Ping(ctx); err != nil {
			t.Errorf("Ping: %v", err)
		}
		for op, want := range fl.listCalls {
			if n := fl.obs.Calls(op, efs.OutcomeOK); n != want {
				t.Errorf("observer saw %d %s, want %d (metrics carry the API's operation names)", n, op, want)
			}
		}
	})
}

func TestBothClientsMapErrorsToTheSameSentinels(t *testing.T) {
	bothClients(t, emulator.Config{AccessPointLimit: 1}, func(t *testing.T, fl flavour) {
		ctx := t.Context()
		if _, err := fl.c.CreateAccessPoint(ctx, fl.input("first")); err != nil {
			t.Fatal(err)
		}
		const noFS, noAP = "fs-ffffffffffffffffff0", "fsap-ffffffffffffffff0"
		tests := []struct {
			name string
			call func() error
			want error
		}{
			{"limit reached", func() error { _, err := fl.c.CreateAccessPoint(ctx, fl.input("second")); return err }, efs.ErrLimitExceeded},
			{"unknown file system", func() error {
				in := fl.input("third")
				in.FileSystemID = noFS
				_, err := fl.c.CreateAccessPoint(ctx, in)
				return err
			}, efs.ErrFileSystemNotFound},
			{"path with ..", func() error {
				in := fl.input("fourth")
				in.Path = "/a/../b"
				_, err := fl.c.CreateAccessPoint(ctx, in)
				return err
			}, efs.ErrBadRequest},
			{"describe unknown access point", func() error { _, err := fl.c.DescribeAccessPoint(ctx, noAP); return err }, efs.ErrAccessPointNotFound},
			{"delete unknown access point", func() error { return fl.c.DeleteAccessPoint(ctx, noAP) }, efs.ErrAccessPointNotFound},
			{"list unknown file system", func() error {
				return fl.c.ListAccessPoints(ctx, noFS, func([]efs.AccessPoint) error { return nil })
			}, efs.ErrFileSystemNotFound},
			{"describe unknown file system", func() error { _, err := fl.c.DescribeFileSystem(ctx, noFS); return err }, efs.ErrFileSystemNotFound},
			{"mount targets of unknown file system", func() error { _, err := fl.c.DescribeMountTargets(ctx, noFS); return err }, efs.ErrFileSystemNotFound},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if err := tt.call(); !errors.Is(err, tt.want) {
					t.Errorf("got %v, want %v", err, tt.want)
				}
			})
		}
	})
}

// With the first answer lost after the commit, the retry ends on the access
// point the first attempt made: EFS says AlreadyExists naming it, S3 Files
// answers it (the API ignores a repeated token). A retried delete ends on
// AccessPointNotFound. The fault is cleared once the first attempt is
// applied (the hook), so exactly one answer is lost.
func TestBothClientsConvergeAfterALostAnswer(t *testing.T) {
	bothClients(t, emulator.Config{}, func(t *testing.T, fl flavour) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		loseOnce := func(op emulator.Op) {
			fl.emu.SetFault(op, emulator.Fault{LostAnswerRate: 1, LostAnswerMode: emulator.LostDrop})
			fl.emu.SetHook(func(o emulator.Op, p emulator.Phase, _ any) {
				if o == op && p == emulator.AfterApply {
					fl.emu.ResetFaults() // this request's fault is read already: its answer is lost
				}
			})
		}
		loseOnce(fl.create)
		ap, err := fl.c.CreateAccessPoint(ctx, fl.input("pvc-lost"))
		var ae *efs.AlreadyExistsError
		id := ""
		switch {
		case fl.name == "EFS" && errors.As(err, &ae):
			id = ae.AccessPointID
		case fl.name == "S3Files" && err == nil:
			id = ap.ID
		default:
			t.Fatalf("create: %+v, %v", ap, err)
		}
		all, err := efs.Collect(ctx, fl.c.ListAccessPoints, fl.fsID)
		if err != nil || len(all) != 1 || all[0].ID != id || all[0].ClientToken != "pvc-lost" {
			t.Fatalf("after the lost create: %+v, %v; want exactly %s", all, err, id)
		}
		if n := fl.emu.Counts()[fl.create]; n != 2 {
			t.Errorf("emulator saw %d creates, want 2", n)
		}
		loseOnce(fl.del)
		if err := fl.c.DeleteAccessPoint(ctx, id); !errors.Is(err, efs.ErrAccessPointNotFound) {
			t.Fatalf("delete: got %v, want ErrAccessPointNotFound (deleted by the lost attempt)", err)
		}
	})
}

// A throttled burst of concurrent deletes all finish within their deadline.
func TestBothClientsDrainAThrottledBurst(t *testing.T) {
	bothClients(t, emulator.Config{NoFsync: true}, func(t *testing.T, fl flavour) {
		ctx := t.Context()
		var ids []string
		for i := range 20 {
			ap, err := fl.c.CreateAccessPoint(ctx, fl.input(fmt.Sprint("burst-", i)))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, ap.ID)
		}
		fl.emu.SetFault(fl.del, emulator.Fault{ThrottleRate: 200, ThrottleBurst: 2})
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		errs := make([]error, len(ids))
		for i, id := range ids {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = fl.c.DeleteAccessPoint(ctx, id) }()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("deletes: %v", err)
		}
		if all, err := efs.Collect(ctx, fl.c.ListAccessPoints, fl.fsID); err != nil || len(all) != 0 {
			t.Fatalf("left: %d, %v", len(all), err)
		}
	})
}

// The SDK's service-specific variable, AWS_ENDPOINT_URL_S3FILES, points the
// S3 Files client at the emulator; AWS_ENDPOINT_URL_EFS does not.
func TestS3FilesEndpointFromTheServiceSpecificVariable(t *testing.T) {
	url, _ := emulatortest.Start(t, emulator.Config{S3FilesFileSystems: []string{emuS3FS}})
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ENDPOINT_URL_EFS", "http://127.0.0.1:1") // nothing listens there
	t.Setenv(efs.S3FilesEndpointEnv, url)
	c, err := efs.NewS3Files(t.Context(), efs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if fs, err := c.DescribeFileSystem(ctx, emuS3FS); err != nil || fs.ID != emuS3FS {
		t.Fatalf("DescribeFileSystem through %s: %+v, %v", efs.S3FilesEndpointEnv, fs, err)
	}
}

// The S3 Files API answers a repeated token with its existing access point
// whatever the parameters; the client answers it only for the identical
// request and otherwise says AlreadyExists naming it, as EFS does, so the
// controller checks it instead of taking it for the volume it asked for.
func TestS3FilesRepeatedTokenWithOtherParametersIsAlreadyExists(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprint("strict server=", strict), func(t *testing.T) {
			url, _ := emulatortest.Start(t, emulator.Config{S3FilesFileSystems: []string{emuS3FS}, S3FilesStrictClientToken: strict})
			c, _ := newS3FilesClient(t, url)
			in := emuInput("pvc-repeat")
			in.FileSystemID = emuS3FS
			first, err := c.CreateAccessPoint(t.Context(), in)
			if err != nil {
				t.Fatal(err)
			}
			again, err := c.CreateAccessPoint(t.Context(), in)
			if err != nil || again.ID != first.ID {
				t.Fatalf("identical repeat: %+v, %v; want %s", again, err, first.ID)
			}
			in.Tags = map[string]string{"efs.csi.aws.com/capacity": "2"}
			_, err = c.CreateAccessPoint(t.Context(), in)
			var ae *efs.AlreadyExistsError
			if !errors.As(err, &ae) || ae.AccessPointID != first.ID {
				t.Fatalf("repeat with other tags: %v, want *AlreadyExistsError naming %s", err, first.ID)
			}
		})
	}
}

// S3 Files' listing shows no client tokens or tags: the client reads with
// GetAccessPoint only the access points it does not know (made by another
// process, or retagged), once; listings of the rest cost one request per
// page, and every listing is as complete as a Describe of each.
func TestS3FilesListingReadsOnlyAccessPointsItDoesNotKnow(t *testing.T) {
	url, _ := emulatortest.Start(t, emulator.Config{S3FilesFileSystems: []string{emuS3FS}})
	ctx := t.Context()
	a, obs := newS3FilesClient(t, url)
	b, _ := newS3FilesClient(t, url) // another process
	fl := flavour{fsID: emuS3FS}
	for i := range 5 {
		if _, err := a.CreateAccessPoint(ctx, fl.input(fmt.Sprintf("pvc-a%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	var theirs []string
	for i := range 3 {
		ap, err := b.CreateAccessPoint(ctx, fl.input(fmt.Sprintf("pvc-b%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		theirs = append(theirs, ap.ID)
	}
	gets := func() int { return obs.Calls(efs.OpS3GetAccessPoint, efs.OutcomeOK) }
	list := func(wantGets, wantAPs int) {
		t.Helper()
		before := gets()
		all, err := efs.Collect(ctx, a.ListAccessPoints, emuS3FS)
		if err != nil || len(all) != wantAPs {
			t.Fatalf("listing: %d access points, %v; want %d", len(all), err, wantAPs)
		}
		if n := gets() - before; n != wantGets {
			t.Errorf("the listing read %d access points with GetAccessPoint, want %d", n, wantGets)
		}
		for _, ap := range all {
			fresh, err := b.DescribeAccessPoint(ctx, ap.ID)
			if err != nil || !reflect.DeepEqual(*fresh, ap) {
				t.Errorf("listed %+v, described %+v (%v)", ap, fresh, err)
			}
		}
	}
	list(3, 8) // the other process's, once
	list(0, 8)
	if err := b.DeleteAccessPoint(ctx, theirs[0]); err != nil {
		t.Fatal(err)
	}
	list(0, 7)
	if err := a.TagResource(ctx, theirs[1], map[string]string{"efs.csi.aws.com/bound": "true"}); err != nil {
		t.Fatal(err)
	}
	list(1, 7) // its tags changed: read again
}

// With a state directory, what the client learned outlives it: a new client
// (a restarted controller) on the same directory lists without reading the
// access points again; a complete listing removes the files of access
// points gone; a file that is not an identity, or names another file
// system, is not believed.
func TestS3FilesIdentitiesOutliveTheProcess(t *testing.T) {
	url, _ := emulatortest.Start(t, emulator.Config{S3FilesFileSystems: []string{emuS3FS}})
	ctx := t.Context()
	dir := t.TempDir()
	open := func() (*efs.S3Files, *countingObserver) {
		obs := newObserver()
		c, err := efs.NewS3Files(ctx, efs.Config{Region: "us-east-1", Endpoint: url, Observer: obs, S3FilesStateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return c, obs
	}
	first, _ := open()
	fl := flavour{fsID: emuS3FS}
	var ids []string
	for i := range 4 {
		ap, err := first.CreateAccessPoint(ctx, fl.input(fmt.Sprintf("pvc-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ap.ID)
	}
	// Lies planted: one under another file system's name, and one for an
	// access point of the same ID elsewhere (another path): neither believed.
	if err := os.WriteFile(filepath.Join(dir, "fs-00000000000000000000_"+ids[3]), []byte(`{"fs":"fs-00000000000000000000","token":"lie"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, emuS3FS+"_"+ids[2]), []byte(`{"fs":"`+emuS3FS+`","token":"lie","path":"/other","uid":1,"gid":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// Deleted by another process: its file stays until a complete listing.
	elsewhere, _ := newS3FilesClient(t, url)
	if err := elsewhere.DeleteAccessPoint(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	second, obs := open()
	all, err := efs.Collect(ctx, second.ListAccessPoints, emuS3FS)
	if err != nil || len(all) != 3 {
		t.Fatalf("listing: %d, %v; want 3", len(all), err)
	}
	for _, ap := range all {
		if !strings.HasPrefix(ap.ClientToken, "pvc-") || ap.Tags["efs.csi.aws.com/cluster"] != "true" {
			t.Errorf("listed %+v", ap)
		}
	}
	// Only the access point whose stored identity is another one's is read.
	if n := obs.Calls(efs.OpS3GetAccessPoint, efs.OutcomeOK); n != 1 {
		t.Errorf("a restarted client read %d access points again, want 1 (the one with a foreign identity)", n)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	for _, n := range names {
		if strings.HasSuffix(n, ids[0]) {
			t.Errorf("the deleted access point's identity %s is still stored (%v)", n, names)
		}
	}
}
