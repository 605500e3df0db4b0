package audit

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/snapshot"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

type rootMount string

func (r rootMount) Mount(context.Context, string) (string, func(), error) {
	return string(r), func() {}, nil
}

// The snapshot area is judged against the record pkg/snapshot writes: a
// copy its entry names, a copy under way and a restore unfinished are
// accounted for; a copy no entry names, an attempt of a snapshot ready
// (or of none) and a restore's directory with no unfinished restore are
// left over.
func TestSnapshotAreaLeftoversAreFindings(t *testing.T) {
	const fsID = "fs-0123456789abcdef0"
	root := t.TempDir()
	store := journal.NewMemory()
	ctx := context.Background()
	if err := os.MkdirAll(filepath.Join(root, "vol"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := snapshot.New(snapshot.Config{Store: store, Mount: rootMount(root), Wait: time.Minute,
		Copy:       func(context.Context, string, string, func(int, int) (int, int)) (int64, error) { return 0, nil },
		VolumeLive: func(context.Context, string, string, string) (bool, error) { return true, nil }})
	src := snapshot.Source{VolumeID: "efs:" + fsID + "::fsap-0123456789abcdef0", FileSystem: fsID, Path: "/vol", UID: -1, GID: -1}
	snap, err := m.Create(ctx, "snap-ready", src)
	if err != nil || !snap.Ready {
		t.Fatalf("Create: %v, %v", snap, err)
	}
	to := snapshot.Target{Name: "pvc-r", VolumeID: "efsdir:" + fsID + ":/r", FileSystem: fsID, Path: "/r", UID: -1, GID: -1}
	if err := m.BeginRestore(ctx, to, src); err != nil { // recorded, not copied: unfinished
		t.Fatal(err)
	}
	area := filepath.Join(root, volume.SnapshotDir)
	ready := snap.CopyKey()
	for _, d := range []string{
		".tmp-" + ready + "-aa",                           // an attempt of a snapshot ready: left
		snapshot.KeyOf("gone"),                            // a copy no entry names: left
		snapshot.KeyOf("snap-ready"),                      // the ready snapshot's name, not its life's copy: left
		".tmp-" + snapshot.KeyOf("gone") + "-bb",          // an attempt of no snapshot: left
		".restore-" + snapshot.KeyOf(to.VolumeID) + "-cc", // a restore unfinished: accounted for
		".restore-" + snapshot.KeyOf("other") + "-dd",     // of no restore: left
	} {
		if err := os.MkdirAll(filepath.Join(area, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := readSnapshotRecord(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	n, left, err := scanSnapshots(root, recs[fsID])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/" + volume.SnapshotDir + "/.restore-" + snapshot.KeyOf("other") + "-dd",
		"/" + volume.SnapshotDir + "/.tmp-" + snapshot.KeyOf("gone") + "-bb",
		"/" + volume.SnapshotDir + "/.tmp-" + ready + "-aa",
		"/" + volume.SnapshotDir + "/" + snapshot.KeyOf("gone"),
		"/" + volume.SnapshotDir + "/" + snapshot.KeyOf("snap-ready"),
	}
	slices.Sort(left)
	slices.Sort(want)
	if n != 1 || !slices.Equal(left, want) {
		t.Errorf("recorded %d, left %v; want 1, %v", n, left, want)
	}
}
