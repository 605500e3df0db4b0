package controller

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
)

// Other clusters on one file system (docs/design.md, "Other clusters on
// one file system"). Clusters running this release cannot put one GID on
// two access points: their creates send GID tokens (volume.GIDToken), and
// EFS binds a token to one access point. Every listing the allocator makes
// is still watched for access points tagged with another cluster's ID, so
// that a create whose class's range holds one of their ids logs a warning,
// once per (file system, range): disjoint ranges leave nothing to contend
// for, and an earlier release there sends tokens of its own.

// otherClusters is what the allocator's listings showed of other clusters'
// access points, per file system. Safe for concurrent use.
type otherClusters struct {
	mu  sync.Mutex
	fss map[string]otherIDs
}

// otherIDs: the ids (uid and gid) other clusters' access points on one file
// system carry, sorted, from the last complete listing, and one of those
// clusters' IDs (for the message).
type otherIDs struct {
	ids     []int64
	cluster string
}

// watchedSource is the EFS client as the allocator's Source: every complete
// listing replaces the file system's entry in otherClusters.
type watchedSource struct {
	EFS
	own   string // this cluster's ID ("" unknown: no access point is known as another's)
	other *otherClusters
}

func (w watchedSource) ListAccessPoints(ctx context.Context, fsID string, fn func([]efs.AccessPoint) error) error {
	var seen otherIDs
	err := w.EFS.ListAccessPoints(ctx, fsID, func(page []efs.AccessPoint) error {
		for i := range page {
			id, ok := page[i].Tags[TagClusterID]
			if !ok || id == w.own || w.own == "" {
				continue
			}
			uid, g := posixIDs(&page[i])
			seen.ids = append(seen.ids, uid, g)
			seen.cluster = id
		}
		return fn(page)
	})
	if err == nil {
		slices.Sort(seen.ids)
		w.other.mu.Lock()
		if len(seen.ids) == 0 {
			delete(w.other.fss, fsID)
		} else {
			w.other.fss[fsID] = otherIDs{ids: slices.Compact(seen.ids), cluster: seen.cluster}
		}
		w.other.mu.Unlock()
	}
	return err
}

// inRange returns how many of the ids other clusters' access points on
// fsID carry lie in [lo, hi], and one such cluster's ID.
func (o *otherClusters) inRange(fsID string, lo, hi int64) (int, string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.fss[fsID]
	from, _ := slices.BinarySearch(e.ids, lo)
	to, _ := slices.BinarySearch(e.ids, hi+1)
	return to - from, e.cluster
}

// gidSource is the allocator's Source for this Service's client.
// It adds the record's directory volumes (dirSource).
func (s *Service) gidSource() gid.Source {
	return dirSource{Source: watchedSource{EFS: s.efs, own: s.cluster, other: s.otherClusters}, j: s.journal, fss: &s.dirFSs}
}

// warnOtherClusters logs, once per (file system, range), that another
// cluster's access points carry ids in the range this create allocates
// from.
func (s *Service) warnOtherClusters(fsID string, lo, hi int64) {
	n, cluster := s.otherClusters.inRange(fsID, lo, hi)
	if n == 0 || !s.firstWarning("gid-range\x00"+fsID+"\x00"+strconv.FormatInt(lo, 10)+"-"+strconv.FormatInt(hi, 10)) {
		return
	}
	s.log.Warn("another cluster's access points carry GIDs in this class's range: creates that pick one GID at the same moment contend for it (and an earlier release there can share it); give each cluster a disjoint gidRangeStart-gidRangeEnd",
		slog.String("fileSystemId", fsID), slog.Int64("gidRangeStart", lo), slog.Int64("gidRangeEnd", hi),
		slog.Int("ids", n), slog.String("otherCluster", cluster))
}
