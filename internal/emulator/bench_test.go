package emulator_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/emulatortest"
)

// The emulator must never be what limits a driver benchmark. These measure
// it through the real SDK over loopback, client cost included:
//
//	go test ./internal/emulator -run '^$' -bench . -benchmem

func benchEnv(b *testing.B, noFsync bool) (*env, string) {
	b.Helper()
	emulatorOnly(b)
	v := newEnv(b, emulator.Config{AccessPointLimit: 1 << 30, NoFsync: noFsync})
	return v, v.fileSystem()
}

// BenchmarkCreateAccessPoint: "serial" is one client, one request at a
// time, each durable (fsynced) before its answer, so bound by the disk's
// fsync latency; "parallel" is 64 clients sharing commits (group commit);
// "no-fsync" variants show the cost without the disk (Config.NoFsync).
func BenchmarkCreateAccessPoint(b *testing.B) {
	for _, c := range []struct {
		name          string
		noFsync, many bool
	}{{"serial", false, false}, {"parallel", false, true}, {"serial/no-fsync", true, false}, {"parallel/no-fsync", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			v, fsID := benchEnv(b, c.noFsync)
			ctx := context.Background()
			b.ReportAllocs()
			if !c.many {
				for b.Loop() {
					if _, err := v.efs.CreateAccessPoint(ctx, apInput(fsID, withPath("/bench"))); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.SetParallelism(32) // 32 x GOMAXPROCS clients
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := v.efs.CreateAccessPoint(ctx, apInput(fsID, withPath("/bench"))); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkDescribeAccessPointsPaged lists a file system of 10,000 access
// points: one op is one page (default 100 or 1000 items), or the whole walk.
func BenchmarkDescribeAccessPointsPaged(b *testing.B) {
	v, fsID := benchEnv(b, true) // durability is not what this measures
	v.createMany(fsID, 10000, 16)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		max  int32
		walk bool
	}{{"page=100", 0, false}, {"page=1000", 1000, false}, {"walk-all/page=100", 0, true}, {"walk-all/page=1000", 1000, true}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			in := &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsID)}
			if c.max > 0 {
				in.MaxResults = aws.Int32(c.max)
			}
			for b.Loop() {
				n := 0
				p := efs.NewDescribeAccessPointsPaginator(v.efs, in)
				for p.HasMorePages() {
					out, err := p.NextPage(ctx)
					if err != nil {
						b.Fatal(err)
					}
					n += len(out.AccessPoints)
					if !c.walk {
						break
					}
				}
				if c.walk && n != 10000 {
					b.Fatalf("walk listed %d access points, want 10000", n)
				}
			}
		})
	}
}

// BenchmarkServerOnly is the emulator's own share: requests go straight to
// its http.Handler, without the SDK, the network or (no-fsync) the disk.
func BenchmarkServerOnly(b *testing.B) {
	emulatorOnly(b)
	_, emu := emulatortest.Start(b, emulator.Config{AccessPointLimit: 1 << 30, NoFsync: true, FileSystems: []string{benchFS}})
	h := emu.Handler()
	serve := func(b *testing.B, method, target, body string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, target, strings.NewReader(body)))
		if rec.Code != http.StatusOK {
			b.Fatalf("%s %s: %d %s", method, target, rec.Code, rec.Body)
		}
	}
	n := 0
	create := func(b *testing.B) {
		n++
		serve(b, "POST", "/2015-02-01/access-points", fmt.Sprintf(
			`{"ClientToken":"t%d","FileSystemId":"%s","RootDirectory":{"Path":"/bench"},"PosixUser":{"Uid":1,"Gid":1},"Tags":[{"Key":"efs.csi.aws.com/cluster","Value":"true"}]}`, n, benchFS))
	}
	b.Run("CreateAccessPoint", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			create(b)
		}
	})
	for n < 10000 {
		create(b)
	}
	for _, page := range []int{100, 1000} {
		b.Run(fmt.Sprintf("DescribeAccessPoints/of-%d/page=%d", n, page), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				serve(b, "GET", fmt.Sprintf("/2015-02-01/access-points?FileSystemId=%s&MaxResults=%d", benchFS, page), "")
			}
		})
	}
}

const benchFS = "fs-0000000000000be9c"
