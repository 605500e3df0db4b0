package efs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

const emuFS = "fs-0123456789abcdef0"

// startEmulator serves an emulator holding emuFS and returns a client for it.
func startEmulator(t *testing.T, cfg emulator.Config) (*efs.Client, *emulator.Emulator, *countingObserver) {
	t.Helper()
	cfg.FileSystems = append(cfg.FileSystems, emuFS)
	url, e := emulatortest.Start(t, cfg)
	c, obs := newClient(t, url, nil)
	return c, e, obs
}

func emuInput(token string) efs.CreateAccessPointInput {
	return efs.CreateAccessPointInput{
		FileSystemID: emuFS,
		ClientToken:  token,
		Path:         "/dynamic/" + token,
		CreationInfo: &efs.CreationInfo{OwnerUID: 50000, OwnerGID: 50000, Permissions: "700"},
		PosixUser:    &efs.PosixUser{UID: 50000, GID: 50000},
		Tags:         map[string]string{"efs.csi.aws.com/cluster": "true"},
	}
}

// The life of an access point against the emulator, with the sentinel each
// wrong step must produce.
func TestAccessPointLifecycleAgainstEmulator(t *testing.T) {
	c, _, _ := startEmulator(t, emulator.Config{})
	ctx := t.Context()

	ap, err := c.CreateAccessPoint(ctx, emuInput("pvc-1"))
	if err != nil {
		t.Fatal(err)
	}
	if ap.ID == "" || ap.FileSystemID != emuFS || ap.Path != "/dynamic/pvc-1" || ap.PosixUser.GID != 50000 ||
		ap.CreationInfo.Permissions != "700" || ap.Tags["efs.csi.aws.com/cluster"] != "true" || ap.LifeCycleState != "available" {
		t.Errorf("created %+v", ap)
	}

	got, err := c.DescribeAccessPoint(ctx, ap.ID)
	if err != nil || got.ClientToken != "pvc-1" || got.Path != ap.Path {
		t.Fatalf("DescribeAccessPoint: %+v, %v", got, err)
	}

	_, err = c.CreateAccessPoint(ctx, emuInput("pvc-1"))
	var ae *efs.AlreadyExistsError
	if !errors.As(err, &ae) || ae.AccessPointID != ap.ID {
		t.Fatalf("repeated token: got %v, want *AlreadyExistsError for %s", err, ap.ID)
	}

	var listed []string
	if err := c.ListAccessPoints(ctx, emuFS, func(page []efs.AccessPoint) error {
		for _, a := range page {
			listed = append(listed, a.ID)
		}
		return nil
	}); err != nil || len(listed) != 1 || listed[0] != ap.ID {
		t.Fatalf("ListAccessPoints: %v, %v", listed, err)
	}

	if err := c.DeleteAccessPoint(ctx, ap.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DescribeAccessPoint(ctx, ap.ID); !errors.Is(err, efs.ErrAccessPointNotFound) {
		t.Errorf("DescribeAccessPoint after delete: got %v, want ErrAccessPointNotFound", err)
	}
	if err := c.DeleteAccessPoint(ctx, ap.ID); !errors.Is(err, efs.ErrAccessPointNotFound) {
		t.Errorf("DeleteAccessPoint of a missing access point: got %v, want ErrAccessPointNotFound", err)
	}
}

func TestEmulatorErrorsMapToSentinels(t *testing.T) {
	c, _, _ := startEmulator(t, emulator.Config{AccessPointLimit: 1})
	ctx := t.Context()
	if _, err := c.CreateAccessPoint(ctx, emuInput("first")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"limit reached", func() error { _, err := c.CreateAccessPoint(ctx, emuInput("second")); return err }, efs.ErrLimitExceeded},
		{"unknown file system", func() error {
			in := emuInput("third")
			in.FileSystemID = "fs-ffffffffffffffff0"
			_, err := c.CreateAccessPoint(ctx, in)
			return err
		}, efs.ErrFileSystemNotFound},
		{"path with ..", func() error {
			in := emuInput("fourth")
			in.Path = "/a/../b"
			_, err := c.CreateAccessPoint(ctx, in)
			return err
		}, efs.ErrBadRequest},
		{"token over 64 characters", func() error {
			_, err := c.CreateAccessPoint(ctx, emuInput(fmt.Sprintf("%065d", 0)))
			return err
		}, efs.ErrBadRequest},
		{"describe unknown access point", func() error { _, err := c.DescribeAccessPoint(ctx, "fsap-ffffffffffffffff0"); return err }, efs.ErrAccessPointNotFound},
		{"list unknown file system", func() error {
			return c.ListAccessPoints(ctx, "fs-ffffffffffffffff0", func([]efs.AccessPoint) error { return nil })
		}, efs.ErrFileSystemNotFound},
		{"describe unknown file system", func() error { _, err := c.DescribeFileSystem(ctx, "fs-ffffffffffffffff0"); return err }, efs.ErrFileSystemNotFound},
		{"mount targets of unknown file system", func() error { _, err := c.DescribeMountTargets(ctx, "fs-ffffffffffffffff0"); return err }, efs.ErrFileSystemNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestFileSystemAndMountTargetsFromEmulator(t *testing.T) {
	c, _, _ := startEmulator(t, emulator.Config{})
	fs, err := c.DescribeFileSystem(t.Context(), emuFS)
	if err != nil || fs.ID != emuFS || fs.LifeCycleState != "available" {
		t.Fatalf("DescribeFileSystem: %+v, %v", fs, err)
	}
	mts, err := c.DescribeMountTargets(t.Context(), emuFS)
	if err != nil || len(mts) == 0 || mts[0].IPAddress != "127.0.0.1" || mts[0].FileSystemID != emuFS {
		t.Fatalf("DescribeMountTargets: %+v, %v", mts, err)
	}
	if err := c.Ping(t.Context()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

// With every answer lost after the change is committed, a create comes back
// as AlreadyExists naming the access point its own first attempt made, and
// a delete as AccessPointNotFound: the two ends the controller converges on.
func TestLostAnswersAgainstEmulator(t *testing.T) {
	for _, mode := range []emulator.LostMode{emulator.Lost500, emulator.LostDrop} {
		t.Run(string(mode), func(t *testing.T) {
			c, e, _ := startEmulator(t, emulator.Config{})
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			lost := emulator.Fault{LostAnswerRate: 1, LostAnswerMode: mode}
			e.SetFault(emulator.OpCreateAccessPoint, lost)
			e.SetFault(emulator.OpDeleteAccessPoint, lost)

			_, err := c.CreateAccessPoint(ctx, emuInput("pvc-lost"))
			var ae *efs.AlreadyExistsError
			if !errors.As(err, &ae) {
				t.Fatalf("create: got %v, want *AlreadyExistsError", err)
			}
			ap, err := c.DescribeAccessPoint(ctx, ae.AccessPointID)
			if err != nil || ap.ClientToken != "pvc-lost" {
				t.Fatalf("the access point the lost create made: %+v, %v", ap, err)
			}
			if err := c.DeleteAccessPoint(ctx, ap.ID); !errors.Is(err, efs.ErrAccessPointNotFound) {
				t.Fatalf("delete: got %v, want ErrAccessPointNotFound (deleted by the lost attempt)", err)
			}
			if _, err := c.DescribeAccessPoint(ctx, ap.ID); !errors.Is(err, efs.ErrAccessPointNotFound) {
				t.Errorf("after delete: got %v, want ErrAccessPointNotFound", err)
			}
			if got := e.Counts()[emulator.OpCreateAccessPoint]; got != 2 {
				t.Errorf("emulator saw %d creates, want 2", got)
			}
		})
	}
}

// The emulator's token bucket throttles a burst of concurrent deletes; all
// of them finish within their deadline, and the throttles were real.
func TestEmulatorThrottleBurstDrains(t *testing.T) {
	const n = 40
	c, e, obs := startEmulator(t, emulator.Config{})
	ids := make([]string, n)
	for i := range ids {
		ap, err := c.CreateAccessPoint(t.Context(), emuInput(fmt.Sprintf("pvc-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = ap.ID
	}
	e.SetFault(emulator.OpDeleteAccessPoint, emulator.Fault{ThrottleRate: 100, ThrottleBurst: 5})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			if err := c.DeleteAccessPoint(ctx, id); err != nil {
				t.Errorf("delete %s: %v", id, err)
			}
		})
	}
	wg.Wait()
	if obs.Calls(efs.OpDeleteAccessPoint, efs.OutcomeThrottled) == 0 {
		t.Error("no delete was throttled: the burst did not exceed the bucket")
	}
}
