package driver

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// kubeRefs reads StorageClass file system references through the
// Kubernetes API (controller.RefReader).
type kubeRefs struct{ c *kube.Client }

func (k kubeRefs) Value(ctx context.Context, ref volume.ObjectRef) (string, error) {
	v, err := k.c.KeyValue(ctx, string(ref.Kind), ref.Namespace, ref.Name, ref.Key)
	switch {
	case err == nil:
		return v, nil
	case errors.Is(err, kube.ErrKeyNotFound), apierrors.IsNotFound(err):
		return "", fmt.Errorf("%w: %s does not exist", controller.ErrUnresolvedRef, ref)
	case apierrors.IsForbidden(err):
		return "", fmt.Errorf("%w: %s may not be read by this controller (the chart grants it with controller.fileSystemIdRefs.enabled)", controller.ErrUnresolvedRef, ref)
	}
	return "", err
}
