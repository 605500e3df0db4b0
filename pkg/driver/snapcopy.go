package driver

import (
	"context"

	"github.com/efs-csi/efs-csi-driver/pkg/treecopy"
)

// copyTree is the controller's copier of snapshots, restores and clones
// (controller.Config.Copier): pkg/treecopy, which keeps owners, modes,
// times, links and holes and never writes outside dst.
func copyTree(ctx context.Context, src, dst string, mapIDs func(uid, gid int) (int, int)) (int64, error) {
	st, err := treecopy.Copy(ctx, src, dst, treecopy.Options{MapIDs: mapIDs})
	return st.Bytes, err
}
