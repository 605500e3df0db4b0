package emulator_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/efs/types"

	"github.com/efs-csi/efs-csi-driver/internal/emulator"
)

// createMany creates n access points with workers concurrent clients and
// returns their IDs in no particular order.
func (v *env) createMany(fsID string, n, workers int) []string {
	v.t.Helper()
	var (
		mu   sync.Mutex
		out  []string
		errs []error
		wg   sync.WaitGroup
		next = make(chan struct{})
	)
	for range workers {
		wg.Go(func() {
			for range next {
				ap, err := v.createAP(apInput(fsID))
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					out = append(out, *ap.AccessPointId)
				}
				mu.Unlock()
			}
		})
	}
	for range n {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		v.t.Fatalf("%d of %d creates failed, first: %v", len(errs), n, errs[0])
	}
	return out
}

func TestDescribeAccessPointsPagesOver2500AccessPoints(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	fsID := v.fileSystem()
	created := v.createMany(fsID, 2500, 16)

	first, err := v.efs.DescribeAccessPoints(context.Background(), &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsID)})
	if err != nil {
		t.Fatalf("DescribeAccessPoints: %v", err)
	}
	if len(first.AccessPoints) != 100 || first.NextToken == nil {
		t.Fatalf("first page without MaxResults has %d items (NextToken %v), want 100 and a NextToken", len(first.AccessPoints), first.NextToken)
	}

	var walks [][]string
	for _, size := range []int32{0, 1000, 333} {
		got := ids(v.listAll(fsID, size))
		if len(got) != len(created) {
			t.Fatalf("MaxResults %d: %d access points listed, want %d", size, len(got), len(created))
		}
		sorted := slices.Clone(got)
		slices.Sort(sorted)
		if len(slices.Compact(sorted)) != len(got) {
			t.Fatalf("MaxResults %d: duplicates in the listing", size)
		}
		want := slices.Clone(created)
		slices.Sort(want)
		if !slices.Equal(sorted, want) {
			t.Fatalf("MaxResults %d: listing differs from the created set", size)
		}
		walks = append(walks, got)
	}
	// Every walk returns the one order, whatever the page size.
	for i := 1; i < len(walks); i++ {
		if !slices.Equal(walks[0], walks[i]) {
			t.Fatalf("walk %d lists another order than walk 0", i)
		}
	}
}

func TestDescribeAccessPointsListsInCreationOrder(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	fsID := v.fileSystem()
	var created []string
	for range 23 {
		created = append(created, *v.mustCreateAP(fsID).AccessPointId)
	}
	if got := ids(v.listAll(fsID, 5)); !slices.Equal(got, created) {
		t.Fatalf("listing %v, want creation order %v", got, created)
	}
}

// A NextToken marks a place in the creation order, not an offset: access
// points created or deleted meanwhile neither repeat nor hide others.
func TestNextTokenStaysValidWhileAccessPointsComeAndGo(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	ctx := context.Background()
	fsID := v.fileSystem()
	var created []string
	for range 30 {
		created = append(created, *v.mustCreateAP(fsID).AccessPointId)
	}
	page1, err := v.efs.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsID), MaxResults: aws.Int32(10)})
	if err != nil {
		t.Fatalf("DescribeAccessPoints: %v", err)
	}
	if got := ids(page1.AccessPoints); !slices.Equal(got, created[:10]) {
		t.Fatalf("page 1 %v, want %v", got, created[:10])
	}
	// Delete from the page already read and from the pages to come; add more.
	deleted := map[string]bool{created[3]: true, created[9]: true, created[10]: true, created[15]: true}
	for id := range deleted {
		if _, err := v.efs.DeleteAccessPoint(ctx, &efs.DeleteAccessPointInput{AccessPointId: aws.String(id)}); err != nil {
			t.Fatalf("DeleteAccessPoint: %v", err)
		}
	}
	added := []string{*v.mustCreateAP(fsID).AccessPointId, *v.mustCreateAP(fsID).AccessPointId}

	var rest []string
	p := efs.NewDescribeAccessPointsPaginator(v.efs, &efs.DescribeAccessPointsInput{
		FileSystemId: aws.String(fsID), MaxResults: aws.Int32(10), NextToken: page1.NextToken})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("DescribeAccessPoints: %v", err)
		}
		rest = append(rest, ids(out.AccessPoints)...)
	}
	var want []string
	for _, id := range created[10:] {
		if !deleted[id] {
			want = append(want, id)
		}
	}
	want = append(want, added...)
	if !slices.Equal(rest, want) {
		t.Fatalf("pages after the token list %v, want %v", rest, want)
	}
}

func TestNextTokenOfAnotherFileSystemIsBadRequest(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	ctx := context.Background()
	a, b := v.fileSystem(), v.fileSystem()
	for range 3 {
		v.mustCreateAP(a)
		v.mustCreateAP(b)
	}
	out, err := v.efs.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{FileSystemId: aws.String(a), MaxResults: aws.Int32(1)})
	if err != nil || out.NextToken == nil {
		t.Fatalf("DescribeAccessPoints: %v (NextToken %v)", err, out.NextToken)
	}
	_, err = v.efs.DescribeAccessPoints(ctx, &efs.DescribeAccessPointsInput{FileSystemId: aws.String(b), NextToken: out.NextToken})
	asError[*types.BadRequest](t, err)
}

func TestDescribeAccessPointsMaxResultsBounds(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	fsID := v.fileSystem()
	v.mustCreateAP(fsID)
	for _, c := range []struct {
		max int32
		ok  bool
	}{{0, false}, {1, true}, {1000, true}, {1001, false}, {-1, false}} {
		_, err := v.efs.DescribeAccessPoints(context.Background(), &efs.DescribeAccessPointsInput{FileSystemId: aws.String(fsID), MaxResults: aws.Int32(c.max)})
		if c.ok {
			if err != nil {
				t.Errorf("MaxResults %d: %v", c.max, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("MaxResults %d: success, want BadRequest", c.max)
			continue
		}
		asError[*types.BadRequest](t, err)
	}
}

func TestDescribeFileSystemsPagesWithMarker(t *testing.T) {
	v := newEnv(t, emulator.Config{})
	mine := map[string]bool{}
	for range 5 {
		mine[v.fileSystem()] = true
	}
	seen := map[string]int{}
	p := efs.NewDescribeFileSystemsPaginator(v.efs, &efs.DescribeFileSystemsInput{MaxItems: aws.Int32(2)})
	for p.HasMorePages() {
		out, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatalf("DescribeFileSystems: %v", err)
		}
		if len(out.FileSystems) > 2 {
			t.Fatalf("page of %d file systems, MaxItems 2", len(out.FileSystems))
		}
		for _, fs := range out.FileSystems {
			seen[*fs.FileSystemId]++
		}
	}
	for id := range mine {
		if seen[id] != 1 {
			t.Errorf("file system %s listed %d times, want once", id, seen[id])
		}
	}
}
