package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
)

// imdsTimeout bounds the instance metadata lookup of a node without
// --node-id: off EC2 there is no answer, and the driver must still start.
const imdsTimeout = 3 * time.Second

// discoverNodeID finds the node ID as upstream does: the EC2 instance ID
// from the instance metadata service (IMDSv2, the SDK's client), else the
// Kubernetes node name in $NODE_NAME or $CSI_NODE_NAME (the charts pass it
// from the downward API). AWS_EC2_METADATA_DISABLED=true skips the metadata service.
func discoverNodeID(ctx context.Context) (string, error) {
	var imdsErr error
	if !strings.EqualFold(os.Getenv("AWS_EC2_METADATA_DISABLED"), "true") {
		ictx, cancel := context.WithTimeout(ctx, imdsTimeout)
		defer cancel()
		out, err := imds.New(imds.Options{}).GetMetadata(ictx, &imds.GetMetadataInput{Path: "instance-id"})
		if err == nil {
			defer out.Content.Close()
			b, err := io.ReadAll(io.LimitReader(out.Content, 256))
			if id := strings.TrimSpace(string(b)); err == nil && id != "" {
				return id, nil
			}
		}
		imdsErr = err
	}
	for _, env := range []string{"NODE_NAME", "CSI_NODE_NAME"} { // ours, upstream chart's
		if name := os.Getenv(env); name != "" {
			return name, nil
		}
	}
	return "", errors.Join(fmt.Errorf("no --node-id, no instance metadata and no $NODE_NAME or $CSI_NODE_NAME"), imdsErr)
}
