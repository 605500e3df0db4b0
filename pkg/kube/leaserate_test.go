package kube_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/util/flowcontrol"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/kube/kubetest"
)

// tokenCounter is a rate limiter that never waits and counts the tokens
// taken.
type tokenCounter struct {
	flowcontrol.RateLimiter
	taken atomic.Int64
}

func (c *tokenCounter) Wait(context.Context) error { c.taken.Add(1); return nil }

// The journal's rate flags (--journal-kube-api-qps, -burst) count
// requests: the store takes one token for each request it sends and none
// for a request it does not, so the API server sees the rate the flags
// say, not half of it. Operations one after another are the case where a
// committer finds its queue empty after each write.
func TestLeaseStoreTakesATokenPerRequestSent(t *testing.T) {
	ctx := context.Background()
	s := leaseStore(t, kubetest.Start(t), driver, 0)
	tokens := &tokenCounter{RateLimiter: flowcontrol.NewFakeAlwaysRateLimiter()}
	kube.SetLeaseJournalLimiter(s, tokens)
	for i := range 20 {
		k := journal.Key{Kind: journal.KindID, FileSystem: fs1, Name: fmt.Sprint(50000 + i)}
		e, err := s.Create(ctx, journal.Entry{Key: k, Value: []byte("pvc-a")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, k); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := kube.LeaseJournalStatsOf(s)
	sent := st.Gets + st.Lists + st.Creates + st.Updates
	if got := tokens.taken.Load(); got != sent {
		t.Errorf("%d tokens taken for %d requests sent (%+v)", got, sent, st)
	}
}

// Two shards' commits at most run at once (kube.LeaseCommitsInFlight):
// the others wait, their queues filling, and go as commits end. Eight
// writes, one to each root shard, sent together: the API server holds
// every write it gets until the test lets it go, and never has more than
// two.
func TestLeaseStoreCommitsAtMostTwoShardsAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	k := kubetest.Start(t)
	s := leaseStore(t, k, driver, 0)
	// A key in each root shard.
	byShard := map[string]journal.Key{}
	for i := 0; len(byShard) < kube.RootShards; i++ {
		key := journal.Key{Kind: journal.KindID, FileSystem: fs1, Name: fmt.Sprint(50000 + i)}
		if lease, _ := kube.LeaseRootShardOf(driver, key); byShard[lease] == (journal.Key{}) {
			byShard[lease] = key
		}
	}
	var inFlight, most atomic.Int64
	arrived, release := make(chan string, kube.RootShards), make(chan struct{})
	k.OnRequest(func(r kubetest.Request) {
		if r.Method == http.MethodGet || !strings.Contains(r.Path, "/leases") {
			return
		}
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		arrived <- r.Path
		select {
		case <-release:
		case <-ctx.Done():
		}
		inFlight.Add(-1)
	})
	errs := make(chan error, len(byShard))
	for _, key := range byShard {
		go func() {
			_, err := s.Create(ctx, journal.Entry{Key: key, Value: []byte("pvc-a")})
			errs <- err
		}()
	}
	waitFor := func(what string, ok func() bool) {
		for !ok() {
			if ctx.Err() != nil {
				t.Fatalf("never %s", what)
			}
			runtime.Gosched()
		}
	}
	// Two writes arrive; the six other commits wait for them, not for
	// the API server.
	<-arrived
	<-arrived
	waitFor("six commits waiting", func() bool {
		st, _ := kube.LeaseJournalStatsOf(s)
		return st.WaitedToCommit >= int64(kube.RootShards-2)
	})
	if n := len(arrived); n != 0 {
		t.Fatalf("%d more writes arrived while two were under way", n)
	}
	for range kube.RootShards - 2 {
		release <- struct{}{} // one ends: the next arrives
		<-arrived
	}
	release <- struct{}{}
	release <- struct{}{}
	for range byShard {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if m := most.Load(); m > kube.LeaseCommitsInFlight {
		t.Errorf("%d writes under way at once, want at most %d", m, kube.LeaseCommitsInFlight)
	}
}
