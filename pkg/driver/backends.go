package driver

import (
	"context"
	"fmt"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/efs"
	"github.com/efs-csi/efs-csi-driver/pkg/mount"
)

// apiBackends is the controller's Backends: the S3 Files API with the
// controller's own credentials and endpoint (Config.EFS: an emulator serves
// both APIs on one endpoint). Backends with a role (cross-account) are not
// served yet: ErrNotSupported, so nothing is created in the wrong account.
type apiBackends struct {
	cfg     efs.Config
	mounter *mount.Mounter // the controller's; its S3 Files face removes root directories
}

// Open implements controller.Backends; it makes no API call.
func (b *apiBackends) Open(ctx context.Context, bk controller.Backend) (controller.EFS, controller.FileSystemMounter, error) {
	if bk.RoleARN != "" {
		return nil, nil, fmt.Errorf("%w: %s: another account's role (provisioner secret %s)", controller.ErrNotSupported, bk.API, controller.SecretRoleARN)
	}
	if bk.API != controller.APIS3Files {
		return nil, nil, fmt.Errorf("%w: API %q", controller.ErrNotSupported, bk.API)
	}
	c, err := efs.NewS3Files(ctx, b.cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("S3 Files client: %w", err)
	}
	var m controller.FileSystemMounter
	if b.mounter != nil {
		m = mount.S3Files{Mounter: b.mounter}
	}
	return c, m, nil
}
