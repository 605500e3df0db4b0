package driver

import (
	"context"
	"fmt"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// backends opens the controller's clients for volumes in other accounts
// (a role from the provisioner secret) on the controller's own client's
// configuration. The controller keeps what Open returns per backend; the
// role's credentials are cached and refreshed by the client (efs.AsRole).
type backends struct {
	own *efs.Client
}

func (b backends) Open(_ context.Context, be controller.Backend) (controller.EFS, controller.FileSystemMounter, error) {
	switch be.API {
	case controller.APIEFS:
		c, err := b.own.AsRole(be.RoleARN, be.ExternalID)
		if err != nil {
			return nil, nil, err
		}
		// The controller's own mounter: root-directory removal reaches the
		// other account's file system as the node does (efs-utils).
		return c, nil, nil
	}
	return nil, nil, fmt.Errorf("%w: %s", controller.ErrNotSupported, be)
}
