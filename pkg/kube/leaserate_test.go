package kube_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

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
