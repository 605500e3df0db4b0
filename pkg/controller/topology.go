package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// ErrTopologyConflict: the file system is in a zone that the request's
// requisite topology does not include, so no volume can be made there
// (the CSI spec's RESOURCE_EXHAUSTED "unable to provision in
// accessible_topology"). Nothing was created.
var ErrTopologyConflict = errors.New("file system cannot be reached from the requested topology")

// FileSystemDescriber describes a file system: its availability zone, for
// classes with enforceZoneAffinity, and whether the call's credentials see
// it at all (a delete's reachability check, delete.go). *efs.Client
// satisfies it; a backend's Service describes through its own client.
// Contract:
//   - DescribeFileSystem returns file system fsID with AvailabilityZoneName
//     set for a One Zone file system and "" for a regional one. It changes
//     nothing, so callers may repeat it and keep its answer: a file system's
//     zone never changes.
//   - A file system that does not exist, or that these credentials cannot
//     see, wraps efs.ErrFileSystemNotFound; other errors wrap the sentinels
//     of pkg/efs (ErrUnavailable, ErrThrottled and ErrPaced are transient).
type FileSystemDescriber interface {
	DescribeFileSystem(ctx context.Context, fsID string) (*efs.FileSystem, error)
}

// zoneFresh is how long a file system's zone is reused without asking EFS
// again. The zone of a file system never changes, so any bound is correct;
// remembering it only saves a burst of claims of a One Zone class one
// DescribeFileSystems each (an API with its own, account-wide throttle).
// The bound lets a file system ID that was deleted be looked up again.
const zoneFresh = 10 * time.Minute

// zone returns fsID's availability zone, "" for a regional file system:
// as its fsState remembers it from within zoneFresh, else described
// through this Service's describer (a backend's file systems are described
// through its own credentials). Errors are never remembered.
func (s *Service) zone(ctx context.Context, fsID string) (string, error) {
	st := s.fs(fsID)
	if zone, ok := st.knownZone(s.now()); ok {
		return zone, nil
	}
	fs, err := s.describer.DescribeFileSystem(ctx, fsID)
	if err != nil {
		return "", err
	}
	st.setZone(fs.AvailabilityZoneName, s.now())
	return fs.AvailabilityZoneName, nil
}

// topology is the AccessibleTopology of a new volume of a class: none
// without enforceZoneAffinity (no Describe is made) or for a regional file
// system; its zone for a One Zone one. A requisite topology that does not
// include that zone is ErrTopologyConflict, before anything is created.
// It depends on the request and the file system alone, so every retry of
// one CreateVolume computes the same answer.
func (s *Service) topology(ctx context.Context, params volume.Params, req *csi.TopologyRequirement) ([]*csi.Topology, error) {
	if !params.EnforceZoneAffinity {
		return nil, nil
	}
	if s.describer == nil {
		return nil, fmt.Errorf("%w: %s needs a file system describer, which this controller has none of", ErrNotSupported, volume.ParamEnforceZoneAffinity)
	}
	zone, err := s.zone(ctx, params.FileSystemID)
	if err != nil {
		return nil, fmt.Errorf("%s: describe file system %s: %w", volume.ParamEnforceZoneAffinity, params.FileSystemID, err)
	}
	if zone == "" {
		// Regional: reachable from every zone, whatever the requirements.
		return nil, nil
	}
	if !zoneAllowed(zone, req.GetRequisite()) {
		return nil, fmt.Errorf("%w: file system %s is One Zone in %s, and the requisite topology allows only %v",
			ErrTopologyConflict, params.FileSystemID, zone, requisiteZones(req.GetRequisite()))
	}
	return []*csi.Topology{{Segments: map[string]string{volume.TopologyZoneKey: zone}}}, nil
}

// zoneAllowed: no requisite constrains nothing; otherwise some requisite
// term must admit zone (a term without the zone key admits every zone).
func zoneAllowed(zone string, requisite []*csi.Topology) bool {
	if len(requisite) == 0 {
		return true
	}
	return slices.ContainsFunc(requisite, func(t *csi.Topology) bool {
		z, ok := t.GetSegments()[volume.TopologyZoneKey]
		return !ok || z == zone
	})
}

func requisiteZones(requisite []*csi.Topology) []string {
	var zones []string
	for _, t := range requisite {
		if z, ok := t.GetSegments()[volume.TopologyZoneKey]; ok && !slices.Contains(zones, z) {
			zones = append(zones, z)
		}
	}
	slices.Sort(zones)
	return zones
}
