package efs

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	sdk "github.com/aws/aws-sdk-go-v2/service/efs"
)

// OpTagResource names TagResource for Config.RateLimits and the Observer.
// It is paced like every operation (Ops); its one caller, the orphan
// collector, also spaces its calls itself.
const OpTagResource = "TagResource"

// TagResource adds tags to an access point or file system, overwriting the
// values of keys it already has; the other tags stay. Adding the same tags
// again changes nothing, so a retry after a lost answer is harmless. A
// missing access point is ErrAccessPointNotFound.
func (c *Client) TagResource(ctx context.Context, resourceID string, tags map[string]string) error {
	_, err := call(ctx, c.policy, OpTagResource, resourceID, func(ctx context.Context) (*sdk.TagResourceOutput, error) {
		return c.api.TagResource(ctx, &sdk.TagResourceInput{ResourceId: aws.String(resourceID), Tags: toTags(tags)})
	})
	return err
}
