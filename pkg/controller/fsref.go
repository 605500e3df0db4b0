package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// resolveFileSystem returns the class parameters with a file system
// reference (fileSystemIdConfigRef, fileSystemIdSecretRef) replaced by the
// fileSystemId it names, read now. Only CreateVolume reads it: the volume ID
// carries the file system, so a reference that later names another file
// system changes where new volumes go and moves no existing one.
func (s *Service) resolveFileSystem(ctx context.Context, params map[string]string) (map[string]string, error) {
	ref, isRef, err := volume.FileSystemRef(params)
	if err != nil || !isRef {
		return params, err
	}
	if s.refs == nil {
		return nil, fmt.Errorf("%w: %s: %s needs the Kubernetes API, which this controller has no client for", ErrUnresolvedRef, ref, ref.Param)
	}
	v, err := s.refs.Value(ctx, ref)
	switch {
	case errors.Is(err, ErrUnresolvedRef):
		return nil, fmt.Errorf("%s: %w", ref.Param, err)
	case err != nil:
		return nil, fmt.Errorf("%w: %s: %v", ErrRefUnavailable, ref, err)
	}
	// The value is not repeated in errors: a Secret's value stays out of
	// events and logs.
	id, ok := volume.FileSystemIDFromRef(v)
	if !ok {
		return nil, fmt.Errorf("%w: %s holds no file system ID of the form fs-<hex>", ErrUnresolvedRef, ref)
	}
	out := maps.Clone(params)
	delete(out, volume.ParamFileSystemIDConfigRef)
	delete(out, volume.ParamFileSystemIDSecretRef)
	out[volume.ParamFileSystemID] = id
	return out, nil
}
