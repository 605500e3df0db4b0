package kube

import "github.com/efs-csi/efs-csi-driver/pkg/journal"

// SetJournalPageSize makes the List of s, a JournalStore, read pages of n
// ConfigMaps, so that tests page through a few entries.
func SetJournalPageSize(s journal.Store, n int) { s.(*configMapStore).page = int64(n) }
