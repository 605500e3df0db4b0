package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/internal/testutil"
	"github.com/efs-csi/efs-csi-driver/pkg/diskusage"
)

type walkResult struct {
	target string
	err    error
}

// statsService is a Service on the fixture's mounter whose volume stats use
// a fake clock and report every finished walk on the returned channel.
func statsService(t *testing.T, f *nodeFixture, cfg Config, onDir func(ctx context.Context, root string)) (*Service, *testutil.Clock, chan walkResult) {
	t.Helper()
	cfg.Mounter = f.mounter
	s := newService(t, cfg)
	clock := testutil.NewClock(time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC))
	walked := make(chan walkResult, 16)
	s.stats.now = clock.Now
	s.stats.walked = func(target string, err error) { walked <- walkResult{target, err} }
	if onDir != nil {
		s.stats.walker = diskusage.Walker{OnDir: func(ctx context.Context, root string, _ diskusage.Usage) { onDir(ctx, root) }}
	}
	return s, clock, walked
}

func stats(t *testing.T, s *Service, volumeID, target string) map[csi.VolumeUsage_Unit]*csi.VolumeUsage {
	t.Helper()
	resp, err := s.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: volumeID, VolumePath: target})
	must(t, err)
	out := map[csi.VolumeUsage_Unit]*csi.VolumeUsage{}
	for _, u := range resp.GetUsage() {
		out[u.GetUnit()] = u
	}
	return out
}

func unknown(u map[csi.VolumeUsage_Unit]*csi.VolumeUsage) bool {
	_, ok := u[csi.VolumeUsage_UNKNOWN]
	return ok && len(u) == 1
}

func writeFile(t *testing.T, p string, size int) {
	t.Helper()
	must(t, os.WriteFile(p, make([]byte, size), 0o644))
}

func blocks(t *testing.T, paths ...string) int64 {
	t.Helper()
	var n int64
	for _, p := range paths {
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		n += st.Blocks * 512
	}
	return n
}

// TestVolumeStatsReportTheVolumesOwnUsage: NodeGetVolumeStats reports what
// the published volume holds (its directory tree: bytes allocated and
// inodes), not what statfs says of the whole file system, with the file
// system's capacity and free space. The first call answers UNKNOWN at once
// and starts the walk; the next answers its figures. Another volume of the
// same file system does not count.
func TestVolumeStatsReportTheVolumesOwnUsage(t *testing.T) {
	f := newNodeFixture(t)
	dir1 := filepath.Join(f.fsDir, "vol1")
	writeFile(t, filepath.Join(dir1, "data"), 3<<20)
	writeFile(t, filepath.Join(f.fsDir, "vol2", "other"), 5<<20) // not vol1's
	target := newTarget(t)
	must(t, publish(f.svc, vol1, target))
	s, _, walked := statsService(t, f, Config{}, nil)

	if u := stats(t, s, vol1, target); !unknown(u) {
		t.Fatalf("first call: %v, want UNKNOWN while the walk runs", u)
	}
	if r := <-walked; r.err != nil || r.target != target {
		t.Fatalf("walk: %+v", r)
	}
	u := stats(t, s, vol1, target)
	wantBytes := blocks(t, dir1, filepath.Join(dir1, "data"), filepath.Join(dir1, "marker"))
	var st unix.Statfs_t
	must(t, unix.Statfs(target, &st))
	b, i := u[csi.VolumeUsage_BYTES], u[csi.VolumeUsage_INODES]
	if b.GetUsed() != wantBytes || b.GetTotal() != int64(st.Blocks)*st.Bsize || b.GetAvailable() <= 0 {
		t.Errorf("bytes %v, want %d used of the file system's %d", b, wantBytes, int64(st.Blocks)*st.Bsize)
	}
	if i.GetUsed() != 3 || i.GetTotal() != int64(st.Files) {
		t.Errorf("inodes %v, want 3 used (root, marker, data) of %d", i, st.Files)
	}
	if len(walked) != 0 {
		t.Error("a fresh figure started another walk")
	}
}

// TestVolumeStatsRefreshAfterThePeriod: a figure younger than the refresh
// period (fractional minutes, as --vol-metrics-refresh-period) is answered
// without a walk; an older one is answered at once, as it is, and a walk
// started, whose figure the next call gets.
func TestVolumeStatsRefreshAfterThePeriod(t *testing.T) {
	f := newNodeFixture(t)
	target := newTarget(t)
	must(t, publish(f.svc, vol1, target))
	const period = 90 * time.Second // --vol-metrics-refresh-period=1.5
	s, clock, walked := statsService(t, f, Config{VolMetricsRefresh: period}, nil)
	stats(t, s, vol1, target)
	must(t, (<-walked).err)
	first := stats(t, s, vol1, target)[csi.VolumeUsage_INODES].GetUsed()

	writeFile(t, filepath.Join(target, "new"), 1<<20)
	clock.Advance(period - time.Second)
	if got := stats(t, s, vol1, target)[csi.VolumeUsage_INODES].GetUsed(); got != first || len(walked) != 0 {
		t.Errorf("before the period: %d inodes (want %d), %d walks", got, first, len(walked))
	}
	clock.Advance(time.Second)
	if got := stats(t, s, vol1, target)[csi.VolumeUsage_INODES].GetUsed(); got != first {
		t.Errorf("the call that starts the refresh: %d inodes, want the old %d at once", got, first)
	}
	must(t, (<-walked).err)
	if got := stats(t, s, vol1, target)[csi.VolumeUsage_INODES].GetUsed(); got != first+1 {
		t.Errorf("after the refresh: %d inodes, want %d", got, first+1)
	}
}

// TestVolumeStatsWalksPerFileSystemAreBounded: with
// --vol-metrics-fs-rate-limit=1, a second volume of the same file system
// waits for the first one's walk (its call still answers at once); a
// volume of another file system does not.
func TestVolumeStatsWalksPerFileSystemAreBounded(t *testing.T) {
	f := newNodeFixture(t)
	t1, t2, t3 := newTarget(t), newTarget(t), newTarget(t)
	for _, p := range []struct{ id, target string }{{vol1, t1}, {vol2, t2}, {vol1, t3}} {
		must(t, publish(f.svc, p.id, p.target))
	}
	hold, entered := make(chan struct{}), make(chan string, 16)
	s, _, walked := statsService(t, f, Config{VolMetricsFSRateLimit: 1}, func(_ context.Context, root string) {
		entered <- root
		if root == t1 {
			<-hold
		}
	})
	stats(t, s, vol1, t1)
	if got := <-entered; got != t1 {
		t.Fatalf("walk of %s, want %s", got, t1)
	}
	if u := stats(t, s, vol2, t2); !unknown(u) {
		t.Errorf("second volume: %v, want UNKNOWN at once", u)
	}
	// t3 is vol1's access point under another file system's ID: another
	// file system for the limit, so its walk runs now.
	otherFS := "efs:fs-0123456789abcdef9::" + apID
	stats(t, s, otherFS, t3)
	if got := <-entered; got != t3 {
		t.Errorf("walk of %s while the limit holds %s, want %s", got, t2, t3)
	}
	if r := <-walked; r.target != t3 || r.err != nil {
		t.Errorf("walk %+v, want %s's", r, t3)
	}
	close(hold)
	// The first walk ends and frees its slot: the second one runs.
	got := map[string]bool{}
	for range 2 {
		r := <-walked
		must(t, r.err)
		got[r.target] = true
	}
	if !got[t1] || !got[t2] {
		t.Errorf("walks finished: %v, want %s and %s", got, t1, t2)
	}
	if e := <-entered; e != t2 {
		t.Errorf("walk of %s, want %s", e, t2)
	}
}

// TestUnpublishStopsTheWalk: a volume unpublished while its usage is being
// walked stops the walk (which would hold descriptors in the volume and
// make the unmount fail with EBUSY) and drops its cache entry; the path is
// then NOT_FOUND.
func TestUnpublishStopsTheWalk(t *testing.T) {
	f := newNodeFixture(t)
	target := newTarget(t)
	must(t, publish(f.svc, vol1, target))
	must(t, os.MkdirAll(filepath.Join(target, "a", "b"), 0o755))
	entered := make(chan struct{}, 16)
	s, _, walked := statsService(t, f, Config{}, func(ctx context.Context, _ string) {
		entered <- struct{}{}
		<-ctx.Done() // hold the walk, inside the volume, until it is stopped
	})
	stats(t, s, vol1, target)
	<-entered
	must(t, unpublish(s, vol1, target))
	if r := <-walked; !errors.Is(r.err, context.Canceled) {
		t.Errorf("walk ended with %v, want it cancelled", r.err)
	}
	if n := s.stats.cached(); n != 0 {
		t.Errorf("%d cache entries after unpublish", n)
	}
	if n := layers(t, target); n != 0 {
		t.Errorf("%d mounts left", n)
	}
	_, err := s.NodeGetVolumeStats(context.Background(), &csi.NodeGetVolumeStatsRequest{VolumeId: vol1, VolumePath: target})
	expectIs(t, "stats after unpublish", err, ErrVolumeNotFound)
	if len(entered) != 0 {
		t.Error("a walk started after the unpublish")
	}
}
