package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	efssdk "github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/efs/types"

	"github.com/efs-csi/efs-csi-driver/pkg/driver"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// Scale: a file system at EFS's limit, 10,000 access points: 1,000 made
// by this driver through the real controller (900 with a PV and claim,
// 100 leaked), 9,000 upstream-style (3,000 with a PV), read by the audit
// as a user runs it (the driver binary, a kubeconfig) and in-process.
//
//	go test ./internal/audit -run '^$' -bench Audit10k -benchtime 3x
const (
	scaleOurs     = 1000
	scaleOursPV   = 900
	scaleUpstream = 9000
	scaleUpPV     = 3000
)

// seedScale fills the bed: the controller's volumes, their PVs and claims,
// then upstream's access points, concurrently. The record is a File (the
// controller's --journal file:DIR): the Kubernetes one's client paces its
// writes at 50/s, which would make the seeding, not the audit, slow.
func seedScale(tb testing.TB, b *bed) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "journal")
	store, err := journal.OpenFile(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { store.Close() })
	b.useJournal(store)
	b.k.SetListPage(500)
	ctx := context.Background()
	fill := func(from, to int, each func(i int)) {
		var wg sync.WaitGroup
		work := make(chan int)
		for range 32 {
			wg.Go(func() {
				for i := range work {
					each(i)
				}
			})
		}
		for i := from; i < to; i++ {
			work <- i
		}
		close(work)
		wg.Wait()
	}
	fill(0, scaleOurs, func(i int) {
		name := fmt.Sprintf("pvc-%08d-0000-4000-8000-000000000000", i)
		id := b.create(name, "team", name, classDyn)
		if i < scaleOursPV {
			b.bind(name, id, "team", name, classDyn)
		}
	})
	fill(0, scaleUpstream, func(j int) {
		pv := fmt.Sprintf("pvc-%08d-1111-4000-8000-000000000000", j)
		out, err := b.sdk.CreateAccessPoint(ctx, &efssdk.CreateAccessPointInput{
			ClientToken: aws.String(pv), FileSystemId: aws.String(testFS),
			PosixUser: &types.PosixUser{Uid: aws.Int64(int64(50000 + j%10000)), Gid: aws.Int64(int64(50000 + j%10000))},
			RootDirectory: &types.RootDirectory{Path: aws.String("/dynamic_provisioning/" + pv), CreationInfo: &types.CreationInfo{
				OwnerUid: aws.Int64(0), OwnerGid: aws.Int64(0), Permissions: aws.String("700")}},
			Tags: []types.Tag{{Key: aws.String("efs.csi.aws.com/cluster"), Value: aws.String("true")}},
		})
		if err != nil {
			tb.Error(err)
			return
		}
		if j < scaleUpPV {
			b.bind(pv, testFS+"::"+aws.ToString(out.AccessPointId), "legacy", pv, "upstream")
		}
	})
	return dir
}

// peakHeap samples the heap in use until stop is closed.
func peakHeap(stop chan struct{}) func() uint64 {
	var peak uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return func() uint64 { <-done; return peak }
}

func BenchmarkAudit10kAccessPoints(b *testing.B) {
	bd := newBed(b)
	start := time.Now()
	dir := seedScale(b, bd)
	b.Logf("seeded %d access points, %d PVs in %s", len(bd.accessPoints()), scaleOursPV+scaleUpPV, time.Since(start).Round(time.Millisecond))

	b.Run("in-process", func(b *testing.B) {
		for b.Loop() {
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			stop := make(chan struct{})
			peak := peakHeap(stop)
			a := New(Config{Driver: driverName, Namespace: testNS, Grace: 0,
				EFS: efs.Config{Region: "us-east-1", Endpoint: bd.url, RateLimits: mustLimits(b)}}, Sources{Kube: bd.auditClient(), Journal: bd.store})
			r, err := a.Run(context.Background())
			close(stop)
			if err != nil || r.FileSystems[0].AccessPoints != scaleOurs+scaleUpstream {
				b.Fatalf("%v %+v", err, r.Errors)
			}
			b.ReportMetric(float64(peak()-before.HeapInuse)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(r.Requests.Total), "EFS-requests")
		}
	})

	bin := filepath.Join(b.TempDir(), "efs-csi-driver")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/efs-csi/efs-csi-driver/cmd/efs-csi-driver").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	b.Run("binary", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command(bin, "audit", "--kubeconfig", bd.kubecfg, "--efs-endpoint", bd.url, "--region", "us-east-1",
				"--progress", "false", "--output", "json", "--grace", "0s", "--journal", "file:"+dir)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			hwm := peakRSS(cmd.Process.Pid)
			err := cmd.Wait()
			took := time.Since(start)
			if code := cmd.ProcessState.ExitCode(); err != nil && code != ExitFindings {
				b.Fatalf("%v: %s", err, stderr.String())
			}
			var r Report
			if err := json.Unmarshal(stdout.Bytes(), &r); err != nil || r.FileSystems[0].AccessPoints != scaleOurs+scaleUpstream {
				b.Fatalf("%v %+v", err, r.Errors)
			}
			b.ReportMetric(float64(hwm())/1024, "peak-RSS-MiB")
			b.ReportMetric(took.Seconds(), "wall-s")
			b.ReportMetric(float64(r.Totals.Leaks), "leaks")
			b.ReportMetric(float64(r.Totals.SharedGIDs), "shared-GIDs")
		}
	})
}

// peakRSS polls the VmHWM of process pid (its own peak resident set:
// the wait4 rusage of a child started with vfork also counts this
// process's) until it exits, and returns the last seen, in KiB.
func peakRSS(pid int) func() int64 {
	var peak int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
			if err != nil {
				return
			}
			var kb int64
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
				}
			}
			if kb == 0 { // a zombie has no memory left to report
				return
			}
			peak = max(peak, kb)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() int64 { <-done; return peak }
}

func mustLimits(tb testing.TB) map[string]efs.RateLimit {
	l, err := driver.ParseRateLimits(defaultRateLimits)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}
