package driver

import (
	"context"
	"fmt"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/mount"
)

// backends opens the controller's clients for volumes in other accounts
// (a role from the provisioner secret) on the controller's own client's
// configuration, and for S3 Files volumes (provisioningMode s3files-ap,
// s3files: IDs) an S3 Files client on the same configuration (Config.EFS:
// an emulator serves both APIs on one endpoint). The controller keeps what
// Open returns per backend; the role's credentials are cached and refreshed
// by the client (efs.AsRole). S3 Files as another account's role is not
// served yet: ErrNotSupported, so nothing is created in the wrong account.
type backends struct {
	own *efs.Client
	// s3cfg configures the S3 Files client; mounter is the controller's, whose
	// S3 Files face removes S3 Files root directories (nil: none).
	s3cfg   efs.Config
	mounter *mount.Mounter
}

func (b backends) Open(ctx context.Context, be controller.Backend) (controller.EFS, controller.FileSystemMounter, error) {
	switch {
	case be.API == controller.APIEFS:
		c, err := b.own.AsRole(be.RoleARN, be.ExternalID)
		if err != nil {
			return nil, nil, err
		}
		// The controller's own mounter: root-directory removal reaches the
		// other account's file system as the node does (efs-utils).
		return c, nil, nil
	case be.API == controller.APIS3Files && be.RoleARN == "":
		c, err := efs.NewS3Files(ctx, b.s3cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("S3 Files client: %w", err)
		}
		var m controller.FileSystemMounter
		if b.mounter != nil {
			m = mount.S3Files{Mounter: b.mounter}
		}
		return c, m, nil
	}
	return nil, nil, fmt.Errorf("%w: %s", controller.ErrNotSupported, be)
}
