package kube

import (
	"context"
	"fmt"

	coordinationv1api "k8s.io/api/coordination/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/efs-csi/efs-csi-driver/pkg/journal"
)

// SetLeaseJournalPageSize makes the List of s, a LeaseJournalStore, call
// fn with pages of n entries.
func SetLeaseJournalPageSize(s journal.Store, n int) { s.(*leaseStore).page = int64(n) }

// LeaseRootShardOf is the root shard's Lease (of owner's record) and
// the key of k in its entries.
func LeaseRootShardOf(owner string, k journal.Key) (string, string) {
	a, bits := entryAnnotation(k)
	return LeaseShardName(owner, rootDepth, prefixOf(bits, rootDepth)), a
}

// RawLeases are the Leases of owner's record in ns as the API server
// answers them (protobuf), their names and sizes.
func (c *Client) RawLeases(ctx context.Context, ns, owner string) (names []string, sizes []int, err error) {
	l, err := c.journalLeases().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: LabelJournalOwner + "=" + labelValueOf(owner)})
	if err != nil {
		return nil, nil, err
	}
	for _, lease := range l.Items {
		raw, err := c.journalLeases().RESTClient().Get().Namespace(ns).Resource("leases").Name(lease.Name).DoRaw(ctx)
		if err != nil {
			return nil, nil, err
		}
		names, sizes = append(names, lease.Name), append(sizes, len(raw))
	}
	return names, sizes, nil
}

// DeleteLease deletes the Lease ns/name.
func (c *Client) DeleteLease(ctx context.Context, ns, name string) error {
	return c.journalLeases().Leases(ns).Delete(ctx, name, metav1.DeleteOptions{})
}

// ResourceVersionOf is resourceVersionOf.
var ResourceVersionOf = resourceVersionOf

// ObserveLeaseRead makes s, a LeaseJournalStore, observe l as a read of
// its shard answered now.
func ObserveLeaseRead(s journal.Store, l *coordinationv1api.Lease) {
	st := s.(*leaseStore)
	var id shardID
	if _, err := fmt.Sscanf(l.Annotations[annotationLeaseShard], "%d/%x", &id.depth, &id.prefix); err != nil {
		panic(err)
	}
	entries, _ := entriesOf(l)
	st.observe(st.shard(id), l.DeepCopy(), entries)
}

// SetLeaseJournalLimiter makes s, a LeaseJournalStore, pace its requests
// with l.
func SetLeaseJournalLimiter(s journal.Store, l flowcontrol.RateLimiter) { s.(*leaseStore).limiter = l }
