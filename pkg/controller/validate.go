package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// ValidateVolumeCapabilities confirms the capabilities an existing volume serves.
func (s *Service) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, fmt.Errorf("%w: volume ID is required", ErrInvalidRequest)
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, fmt.Errorf("%w: volume capabilities are required", ErrInvalidRequest)
	}
	b, rest, err := backendOfID(req.GetVolumeId(), req.GetSecrets())
	if err != nil {
		return nil, err
	}
	id, err := volume.ParseID(rest)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrVolumeNotFound, req.GetVolumeId(), err)
	}
	if id.AccessPointID != "" {
		svc, err := s.backend(ctx, b)
		if err != nil {
			return nil, err
		}
		_, err = svc.efs.DescribeAccessPoint(ctx, id.AccessPointID)
		if errors.Is(err, efs.ErrAccessPointNotFound) {
			return nil, fmt.Errorf("%w: %s", ErrVolumeNotFound, req.GetVolumeId())
		}
		if err != nil {
			return nil, err
		}
	}
	if err := volume.ValidateCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: err.Error()}, nil
	}
	if id.Reader != "" && !volume.ReaderOnly(req.GetVolumeCapabilities()) {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: "a volume from a snapshot with no copy of its own is read-only: reader-only access modes only"}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}
