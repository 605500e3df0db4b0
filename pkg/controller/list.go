package controller

import (
	"context"
	"fmt"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/journal"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// FileSystemLister is implemented by EFS clients that can enumerate the
// account's file systems; with one, the controller serves ListVolumes.
type FileSystemLister interface {
	ListFileSystems(ctx context.Context) ([]efs.FileSystem, error)
}

// ErrInvalidStartingToken: ListVolumes was given a token it never issued.
var ErrInvalidStartingToken = fmt.Errorf("invalid starting token")

// ListVolumes lists the volumes this cluster's driver provisioned: every
// access point carrying the driver's tags and this cluster's ID, on every
// file system the credentials can see (S3 Files' too, once this process
// used that API: listedBackends), ordered by volume ID. Another
// cluster's access points in the same account are not listed. Without a
// cluster ID (no --cluster-id and no Kubernetes API) the controller writes
// none, and lists the access points that carry none: the ones such a
// controller creates (and those of releases before the cluster ID, until the
// orphan collector of their cluster tags them). The starting token is the last volume ID of the
// previous page, so a token stays valid when that volume is deleted and a
// volume created between pages shows up if it sorts after the token.
func (s *Service) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	fsl, ok := s.efs.(FileSystemLister)
	if !ok {
		return nil, fmt.Errorf("%w: listing volumes needs a file system lister", ErrInvalidRequest)
	}
	if req.GetMaxEntries() < 0 {
		return nil, fmt.Errorf("%w: max_entries must not be negative", ErrInvalidRequest)
	}
	after := req.GetStartingToken()
	if after != "" {
		if id, err := volume.ParseID(after); err != nil || id.AccessPointID == "" && !id.Dir {
			return nil, fmt.Errorf("%w: %q", ErrInvalidStartingToken, after)
		}
	}
	recorded, err := s.recordedAccessPoints(ctx)
	if err != nil {
		return nil, err
	}
	ids, err := s.ownVolumeIDs(ctx, fsl, recorded)
	if err != nil {
		return nil, err
	}
	for _, svc := range s.listedBackends() {
		more, err := svc.ownVolumeIDs(ctx, svc.efs.(FileSystemLister), recorded)
		if err != nil {
			return nil, err
		}
		ids = append(ids, more...)
	}
	dirs, err := s.dirVolumeIDs(ctx)
	if err != nil {
		return nil, err
	}
	ids = append(ids, dirs...)
	slices.Sort(ids)
	start, _ := slices.BinarySearchFunc(ids, after, func(id, token string) int {
		if id <= token {
			return -1
		}
		return 1
	})
	ids = ids[start:]
	resp := &csi.ListVolumesResponse{}
	if n := int(req.GetMaxEntries()); n > 0 && len(ids) > n {
		ids = ids[:n]
		resp.NextToken = ids[n-1]
	}
	for _, id := range ids {
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{Volume: &csi.Volume{VolumeId: id}})
	}
	return resp, nil
}

// ownVolumeIDs is the IDs of this cluster's volumes on every file system fsl
// lists.
func (s *Service) ownVolumeIDs(ctx context.Context, fsl FileSystemLister, recorded map[string]bool) ([]string, error) {
	fss, err := fsl.ListFileSystems(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, fs := range fss {
		err := s.efs.ListAccessPoints(ctx, fs.ID, func(page []efs.AccessPoint) error {
			for _, ap := range page {
				// An untagged access point (enableTagging "false") is
				// listed by no cluster, recorded or not, as before the
				// record named what ListVolumes lists.
				if recorded[ap.ID] && ap.Tags[TagCluster] == "true" || s.owns(ap) {
					ids = append(ids, s.volumeID(&ap))
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// listedBackends are the backends ListVolumes lists besides s: the S3 Files
// API with this controller's credentials once this process has used it (a
// create or delete of an S3 Files volume opened it). It is not opened for
// a listing: a controller of an EFS-only cluster must not fail, or wait out
// its deadline, on an API its credentials may not call or its region may
// not serve. Other accounts' backends are not listed: which roles exist is
// only known per volume.
func (s *Service) listedBackends() []*Service {
	s.bmu.Lock()
	svc, ok := s.others[Backend{API: APIS3Files}]
	s.bmu.Unlock()
	if !ok {
		return nil
	}
	if _, ok := svc.efs.(FileSystemLister); !ok {
		return nil
	}
	return []*Service{svc}
}

// canList reports whether ListVolumes can be honest with this EFS client.
func (s *Service) canList() bool {
	_, ok := s.efs.(FileSystemLister)
	return ok
}

// recordedAccessPoints is the set of access points the record names, of
// volumes not being deleted: this cluster's, whatever their tags (by
// default only the cluster tag, which does not say whose).
func (s *Service) recordedAccessPoints(ctx context.Context) (map[string]bool, error) {
	named := map[string]bool{}
	err := s.journal.Volumes(ctx, "", func(recs []*journal.Record) error {
		for _, r := range recs {
			if r.AccessPoint != "" && !r.Deleting {
				named[r.AccessPoint] = true
			}
		}
		return nil
	})
	return named, err
}

// owns reports whether ap was created by a controller of this cluster
// with --descriptive-tags, or a release before the record: the driver's
// tags and this cluster's ID (or, with no cluster ID, none).
func (s *Service) owns(ap efs.AccessPoint) bool {
	return ap.Tags[TagCluster] == "true" && ap.Tags[TagVolumeName] != "" && ap.Tags[TagClusterID] == s.cluster
}
