package rmtree

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/pkg/rmtree/rmtreetest"
)

// The sizes: 200,000 directories deep or wide are removed with a
// bounded number of descriptors (counted in /proc/self/fd every 4096
// entries, and enforced by a lowered RLIMIT_NOFILE) and bounded memory.
// The log line is the measurement:
//
//	go test -run 'TestHugeTrees' -v ./pkg/rmtree
func TestHugeTrees(t *testing.T) {
	if testing.Short() {
		t.Skip("200,000-directory trees: not with -short")
	}
	const n = 200_000
	for _, tc := range []struct {
		name string
		make func(t testing.TB, dir string, n int)
	}{{"deep", rmtreetest.Chain}, {"wide", rmtreetest.Wide}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := rmtreetest.FastDir(t)
			root := filepath.Join(dir, "v")
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			tc.make(t, root, n)
			made := time.Since(start)
			rssBefore := maxRSS(t)
			fds := rmtreetest.OpenFDs(t)
			rmtreetest.LimitOpenFiles(t, DefaultMaxOpenDirs+16)
			most := 0
			ctx := rmtreetest.Watch(context.Background(), 4096, func(int64) bool {
				most = max(most, rmtreetest.OpenFDs(t)-fds)
				return false
			})
			start = time.Now()
			if err := RemoveAll(ctx, dir, "v"); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if _, err := os.Lstat(root); !os.IsNotExist(err) {
				t.Fatalf("tree still there: %v", err)
			}
			if most > DefaultMaxOpenDirs+2 {
				t.Fatalf("%d descriptors open during the removal, want at most %d", most, DefaultMaxOpenDirs+2)
			}
			t.Logf("%s %d: made in %v, removed in %v; at most %d descriptors open; peak RSS %d MiB before the removal, %d MiB after",
				tc.name, n, made.Round(time.Millisecond), took.Round(time.Millisecond), most, rssBefore>>10, maxRSS(t)>>10)
		})
	}
}

// maxRSS is the process's peak resident set so far, in KiB.
func maxRSS(t *testing.T) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Maxrss
}
