package kube

import "github.com/efs-csi/efs-csi-driver/pkg/journal"

// SetJournalPageSize makes the List of s, a JournalStore, read pages of n
// ConfigMaps, so that tests page through a few entries.
func SetJournalPageSize(s journal.Store, n int) { s.(*configMapStore).page = int64(n) }

// SetLeaseJournalPageSize makes the List of s, a LeaseJournalStore, call
// fn with pages of n entries.
func SetLeaseJournalPageSize(s journal.Store, n int) { s.(*leaseStore).page = int64(n) }

// LeaseShardOf is the shard (index) and annotation of key k.
func LeaseShardOf(k journal.Key) (int, string) {
	a, i := entryAnnotation(k)
	return i, a
}
