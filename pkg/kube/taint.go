package kube

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// RemoveNodeTaint removes every taint with key (any effect) from the Node name and
// reports whether it removed one. A Node without such a taint is not written. The other
// taints are never touched: the write is a JSON patch that, for each taint to remove,
// first tests that its index still holds that key and then removes that index, so a taint
// added, removed or reordered by someone else between the read and the write fails the
// test (the API server answers 422) instead of being overwritten, and the read and patch
// are retried at once (client-go's retry.OnError with its DefaultRetry steps). Other
// errors (NotFound, Forbidden, unreachable) are returned as the API's, for the caller to
// retry later. Idempotent.
func (c *Client) RemoveNodeTaint(ctx context.Context, name, key string) (bool, error) {
	removed := false
	err := retry.OnError(retry.DefaultRetry, isPatchConflict, func() error {
		node, err := c.core.Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var ops []map[string]any
		// From the last index down, so that each removal leaves the lower indices in place.
		for i := len(node.Spec.Taints) - 1; i >= 0; i-- {
			if node.Spec.Taints[i].Key != key {
				continue
			}
			path := fmt.Sprintf("/spec/taints/%d", i)
			ops = append(ops,
				map[string]any{"op": "test", "path": path + "/key", "value": key},
				map[string]any{"op": "remove", "path": path})
		}
		if len(ops) == 0 {
			removed = false
			return nil
		}
		patch, err := json.Marshal(ops)
		if err != nil {
			return err
		}
		if _, err := c.core.Nodes().Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
		removed = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("kube: remove taint %s from node %s: %w", key, name, err)
	}
	return removed, nil
}

// isPatchConflict: the patch's test failed (the taints changed since the read): the API
// server answers a JSON patch that does not apply with 422 Invalid.
func isPatchConflict(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsConflict(err)
}
