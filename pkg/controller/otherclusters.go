package controller

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/gid"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
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
	// nameTokens: file systems whose last complete listing showed an
	// access point under a volume name's token (upstream's, a release
	// before GID tokens, or this one's classes without them): where a
	// writer outside the GID token protocol may be making access points
	// for the same volumes (windowToken).
	nameTokens map[string]bool
	// outsideIDs: per file system, the ids (uid and gid), sorted, that
	// access points under tokens other than GID tokens carried in the last
	// complete listing (carriedOutside).
	outsideIDs map[string][]int64
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
	nameTokens := false
	var outside []int64
	err := w.EFS.ListAccessPoints(ctx, fsID, func(page []efs.AccessPoint) error {
		for i := range page {
			tok := page[i].ClientToken
			nameTokens = nameTokens || volume.IsProvisionerVolumeName(tok) || volume.IsClaimNameHash(tok)
			if !volume.IsGIDToken(tok) {
				uid, g := posixIDs(&page[i])
				outside = append(outside, uid, g)
			}
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
		if nameTokens {
			w.other.nameTokens[fsID] = true
		} else {
			delete(w.other.nameTokens, fsID)
		}
		slices.Sort(outside)
		if outside = slices.Compact(outside); len(outside) > 0 {
			w.other.outsideIDs[fsID] = outside
		} else {
			delete(w.other.outsideIDs, fsID)
		}
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
// Its listings include the record's directory volumes (dirSource).
func (s *Service) gidSource() gid.Source {
	return watchedSource{EFS: dirSource{EFS: s.efs, j: s.journal, fss: &s.dirFSs}, own: s.cluster, other: s.otherClusters}
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

// nameTokensOn reports whether the last listing of fsID showed an access
// point under a volume name's token.
func (o *otherClusters) nameTokensOn(fsID string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.nameTokens[fsID]
}

// carriedOutside reports whether the last listing of fsID showed id on an
// access point under a token other than a GID token.
// addOutside notes ids as carried outside the GID token protocol on fsID
// until the next complete listing (which shows them again if they still
// are): a directory volume's, made by this process.
func (o *otherClusters) addOutside(fsID string, ids ...int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	cur := o.outsideIDs[fsID]
	for _, id := range ids {
		if i, found := slices.BinarySearch(cur, id); !found {
			cur = slices.Insert(cur, i, id)
		}
	}
	o.outsideIDs[fsID] = cur
}

func (o *otherClusters) carriedOutside(fsID string, id int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, found := slices.BinarySearch(o.outsideIDs[fsID], id)
	return found
}
