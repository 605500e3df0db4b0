package emulator_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
)

// The emulator must never be what limits a driver benchmark. These measure
// it through the real SDK over loopback, client cost included:
//
//	go test ./internal/emulator -run '^$' -bench . -benchmem

func benchEnv(b *testing.B) (*env, string) {
	b.Helper()
	emulatorOnly(b)
	v := newEnv(b, emulator.Config{AccessPointLimit: 1 << 30})
	return v, v.fileSystem()
}

// BenchmarkCreateAccessPoint: one client, one request at a time; each is
// durable (fsynced) before its answer.
func BenchmarkCreateAccessPoint(b *testing.B) {
	v, fsID := benchEnv(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.efs.CreateAccessPoint(ctx, apInput(fsID, withPath("/bench"))); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreateAccessPointParallel: concurrent clients share commits.
func BenchmarkCreateAccessPointParallel(b *testing.B) {
	v, fsID := benchEnv(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := v.efs.CreateAccessPoint(ctx, apInput(fsID, withPath("/bench"))); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkDescribeAccessPointsPaged lists a file system of 10,000 access
// points: one op is one page (default 100 or 1000 items), or the whole walk.
func BenchmarkDescribeAccessPointsPaged(b *testing.B) {
	v, fsID := benchEnv(b)
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
