package controller

import (
	"context"
	"log/slog"
	"slices"
	"strconv"

	"github.com/efs-csi/efs-csi-driver/pkg/controller/core"
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
// for.

// watchedSource is the EFS client as the allocator's Source: every complete
// listing replaces what the file system's state (fsState.listed) holds of it.
type watchedSource struct {
	EFS
	own string // this cluster's ID ("" unknown: no access point is known as another's)
	fss *fileSystems
}

func (w watchedSource) ListAccessPoints(ctx context.Context, fsID string, fn func([]efs.AccessPoint) error) error {
	var seen otherIDs
	nameTokens := map[string]core.ListedAP{}
	var outside []int64
	taken, takenBy := map[int64]string{}, map[string]int64{}
	err := w.EFS.ListAccessPoints(ctx, fsID, func(page []efs.AccessPoint) error {
		for i := range page {
			if id, vol, ok := core.TokenHolder(&page[i], w.own); ok {
				taken[id], takenBy[page[i].ID] = vol, id
			}
			tok := page[i].ClientToken
			if !volume.IsGIDToken(tok) {
				// Upstream's token is the volume's name (or its claim's
				// hash): a create of that volume adopts it (core.FS.Upstream).
				uid, g := core.PosixIDs(&page[i])
				outside = append(outside, uid, g)
				nameTokens[tok] = core.ListedAP{ID: page[i].ID, UID: uid, GID: g}
			}
			id, ok := page[i].Tags[TagClusterID]
			if !ok || id == w.own || w.own == "" {
				continue
			}
			uid, g := core.PosixIDs(&page[i])
			seen.ids = append(seen.ids, uid, g)
			seen.cluster = id
		}
		return fn(page)
	})
	if err == nil {
		slices.Sort(seen.ids)
		seen.ids = slices.Compact(seen.ids)
		slices.Sort(outside)
		w.fss.of(fsID).listed(seen, core.Listing{Outside: slices.Compact(outside), Taken: taken, TakenBy: takenBy, NameTokens: nameTokens})
	}
	return err
}

// gidSource is the allocator's Source for this Service's client.
// Its listings include the record's directory volumes (dirSource).
func (s *Service) gidSource() gid.Source {
	return watchedSource{EFS: dirSource{EFS: s.efs, j: s.journal}, own: s.cluster, fss: s.fss}
}

// warnOtherClusters logs, once per (file system, range), that another
// cluster's access points carry ids in the range this create allocates
// from.
func (s *Service) warnOtherClusters(fsID string, lo, hi int64) {
	n, cluster := s.fs(fsID).othersInRange(lo, hi)
	if n == 0 || !s.firstWarning("gid-range\x00"+fsID+"\x00"+strconv.FormatInt(lo, 10)+"-"+strconv.FormatInt(hi, 10)) {
		return
	}
	s.log.Warn("another cluster's access points carry GIDs in this class's range: creates that pick one GID at the same moment contend for it; give each cluster a disjoint gidRangeStart-gidRangeEnd",
		slog.String("fileSystemId", fsID), slog.Int64("gidRangeStart", lo), slog.Int64("gidRangeEnd", hi),
		slog.Int("ids", n), slog.String("otherCluster", cluster))
}
