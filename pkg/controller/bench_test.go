package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

func newBenchBed(b *testing.B, mut ...func(*Config)) (*Service, *emulator.Emulator, *efs.Client) {
	return newBenchBedPaced(b, efs.Config{}, mut...)
}

// newBenchBedPaced is newBenchBed with the EFS client's pacing from pacing
// (efs.Config{}: the driver's defaults).
func newBenchBedPaced(b *testing.B, pacing efs.Config, mut ...func(*Config)) (*Service, *emulator.Emulator, *efs.Client) {
	b.Helper()
	url, emu := emulatortest.Start(b, emulator.Config{DataDir: b.TempDir(), FileSystems: []string{testFS}, AccessPointLimit: 100000, NoFsync: true})
	pacing.Region, pacing.Endpoint = "us-east-1", url
	client, err := efs.New(context.Background(), pacing)
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{EFS: client, TempDir: b.TempDir()}
	for _, m := range mut {
		m(&cfg)
	}
	svc, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return svc, emu, client
}

// The emulator runs without fsync here: this disk's fsync latency (0.5 to 90 ms)
// would otherwise be what is measured.
//
// BenchmarkCreateDeleteVolume measures CreateVolume+DeleteVolume pairs per
// second at the concurrency a provisioner's worker pool would use, with the
// driver's default pacing and unpaced (no adaptation, no in-flight bound).
//
//	go test -run=^$ -bench=CreateDeleteVolume -benchtime=2000x ./pkg/controller
func BenchmarkCreateDeleteVolume(b *testing.B) {
	pacings := []struct {
		name string
		cfg  efs.Config
	}{
		{"default", efs.Config{}},
		{"unpaced", efs.Config{DisableAdaptive: true, MaxInFlight: -1}},
	}
	for _, pc := range pacings {
		for _, conc := range []int{1, 16, 100} {
			b.Run(fmt.Sprintf("pacing=%s/concurrency=%d", pc.name, conc), func(b *testing.B) {
				benchCreateDelete(b, pc.cfg, conc)
			})
		}
	}
}

func benchCreateDelete(b *testing.B, pacing efs.Config, conc int) {
	svc, _, _ := newBenchBedPaced(b, pacing)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range conc {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				ctx := context.Background()
				r, err := svc.CreateVolume(ctx, createReq(fmt.Sprintf("pvc-%d", i), 1<<30, params()))
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := svc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: r.Volume.VolumeId}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
}

// BenchmarkAPICallsPerCreateVolume counts EFS API calls per CreateVolume on a
// file system that already holds 0, 1,000 or 10,000 access points: the GID
// allocator lists once, not once per create, so the figure stays close to 1.
//
//	go test -run=^$ -bench=APICallsPerCreateVolume -benchtime=1000x ./pkg/controller
func BenchmarkAPICallsPerCreateVolume(b *testing.B) {
	for _, tc := range []struct {
		existing int
		phase    string
	}{{0, "steady"}, {1000, "steady"}, {10000, "steady"}, {1000, "startup"}, {1000, "othercluster"}} {
		b.Run(fmt.Sprintf("existing=%d/%s", tc.existing, tc.phase), func(b *testing.B) {
			// In its first minutes a process verifies every create against
			// other writers (one listing per batch); "steady" is after that;
			// "othercluster" is after it too, on a file system whose
			// existing access points are another cluster's, where every
			// create is verified.
			clk := newClock()
			svc, emu, client := newBenchBed(b, steadyState(clk), func(c *Config) { c.ClusterID = "ours" })
			if tc.phase != "startup" {
				clk.Advance(2 * (10 * time.Minute))
			}
			var tags map[string]string
			if tc.phase == "othercluster" {
				tags = map[string]string{TagClusterID: "theirs"}
			}
			fill(b, client, tc.existing, tags)
			before := total(emu.Counts())
			b.ResetTimer()
			for i := range b.N {
				if _, err := svc.CreateVolume(context.Background(), createReq(fmt.Sprintf("pvc-%d", i), 1<<30, params())); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(total(emu.Counts())-before)/float64(b.N), "calls/create")
		})
	}
}

// fill creates n access points with GIDs the allocator must learn about,
// tagged with tags.
func fill(b *testing.B, client *efs.Client, n int, tags map[string]string) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 32 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				g := 70000 + i // outside the class's range: the allocator must still page past them
				_, err := client.CreateAccessPoint(context.Background(), efs.CreateAccessPointInput{
					FileSystemID: testFS, ClientToken: fmt.Sprintf("fill-%d", i), Path: fmt.Sprintf("/fill/%d", i),
					PosixUser:    &efs.PosixUser{UID: g, GID: g},
					CreationInfo: &efs.CreationInfo{OwnerUID: g, OwnerGID: g, Permissions: "700"},
					Tags:         tags,
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func total(m map[emulator.Op]int64) int64 {
	var t int64
	for _, v := range m {
		t += v
	}
	return t
}

// BenchmarkSweepRound measures one round of the collector's sweep
// (SweepUnrecorded: the id table, then the file system listed and every
// access point checked) on a file system holding 1,000 or 10,000 of this
// cluster's volumes, every one named by a PersistentVolume: what the
// collector costs each round at rest, in time and EFS requests (the record
// here is in memory: a Lease record adds its listing of the id table).
//
//	go test -run=^$ -bench=SweepRound -benchtime=20x ./pkg/controller
func BenchmarkSweepRound(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("volumes=%d", n), func(b *testing.B) {
			clk := newClock()
			svc, emu, _ := newBenchBed(b, steadyState(clk), func(c *Config) { c.ClusterID = "ours" })
			clk.Advance(2 * (10 * time.Minute))
			var next atomic.Int64
			var wg sync.WaitGroup
			for range 100 {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(n); i = next.Add(1) {
						// A range wide enough that 100 creates at once do
						// not contend (the default 50000-60000 holds 10,001).
						p := params("gidRangeStart", "50000", "gidRangeEnd", "2000000")
						if _, err := svc.CreateVolume(context.Background(), createReq(fmt.Sprintf("pvc-%d", i), 1<<30, p)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			named := func(string) bool { return true }
			before := total(emu.Counts())
			b.ResetTimer()
			for range b.N {
				if k, err := svc.SweepUnrecorded(context.Background(), testFS, named, 0); err != nil || k != 0 {
					b.Fatalf("swept %d: %v", k, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(total(emu.Counts())-before)/float64(b.N), "EFS-calls/round")
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/round")
		})
	}
}

// BenchmarkFillDefaultRange creates b.N volumes of the default range
// (50000-60000) one after another, each retried until it succeeds as a
// provisioner would, and reports the calls that failed (GID contention)
// and those of the last 10% of volumes: a range filled to 90% must not
// cost more calls per volume than an empty one. Past the controller's
// first minutes (in them every create is checked against a listing).
//
//	go test -run=^$ -bench=FillDefaultRange -benchtime=9000x ./pkg/controller
func BenchmarkFillDefaultRange(b *testing.B) {
	clk := newClock()
	svc, _, _ := newBenchBed(b, steadyState(clk))
	clk.Advance(2 * (10 * time.Minute))
	failed, lastFailed := 0, 0
	b.ResetTimer()
	for i := range b.N {
		for {
			_, err := svc.CreateVolume(context.Background(), createReq(fmt.Sprintf("pvc-%d", i), 1<<30, params()))
			if err == nil {
				break
			}
			if !retryable(err) {
				b.Fatal(err)
			}
			failed++
			if i >= b.N-b.N/10 {
				lastFailed++
			}
		}
	}
	b.ReportMetric(float64(failed), "failed-calls")
	b.ReportMetric(float64(lastFailed), "failed-calls-last-10%")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
}
