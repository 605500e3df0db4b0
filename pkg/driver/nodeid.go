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

// imdsTimeout bounds each instance metadata lookup of a node (node ID,
// zone): off EC2 there is no answer, and the driver must still start.
const imdsTimeout = 3 * time.Second

// nodeNameEnv are the variables the Kubernetes node name is read from, ours
// and the upstream chart's (both charts pass it from the downward API).
var nodeNameEnv = []string{"NODE_NAME", "CSI_NODE_NAME"}

// kubeNodeName is the Kubernetes node name from the environment, or "".
func kubeNodeName() string {
	for _, env := range nodeNameEnv {
		if name := os.Getenv(env); name != "" {
			return name
		}
	}
	return ""
}

// errIMDSDisabled: AWS_EC2_METADATA_DISABLED=true, as the SDK reads it.
var errIMDSDisabled = errors.New("instance metadata disabled by AWS_EC2_METADATA_DISABLED")

// imdsGet reads one instance metadata path (IMDSv2, the SDK's client;
// AWS_EC2_METADATA_SERVICE_ENDPOINT moves it, AWS_EC2_METADATA_DISABLED=true
// skips it) within imdsTimeout. An empty answer is an error.
func imdsGet(ctx context.Context, path string) (string, error) {
	if strings.EqualFold(os.Getenv("AWS_EC2_METADATA_DISABLED"), "true") {
		return "", errIMDSDisabled
	}
	ictx, cancel := context.WithTimeout(ctx, imdsTimeout)
	defer cancel()
	out, err := imds.New(imds.Options{}).GetMetadata(ictx, &imds.GetMetadataInput{Path: path})
	if err != nil {
		return "", fmt.Errorf("instance metadata %s: %w", path, err)
	}
	defer out.Content.Close()
	b, err := io.ReadAll(io.LimitReader(out.Content, 256))
	if err != nil {
		return "", fmt.Errorf("instance metadata %s: %w", path, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("instance metadata %s: empty answer", path)
	}
	return v, nil
}

// discoverNodeID finds the node ID as upstream does: the EC2 instance ID
// from the instance metadata service, else the Kubernetes node name in
// $NODE_NAME or $CSI_NODE_NAME.
func discoverNodeID(ctx context.Context) (string, error) {
	id, imdsErr := imdsGet(ctx, "instance-id")
	if imdsErr == nil {
		return id, nil
	}
	if name := kubeNodeName(); name != "" {
		return name, nil
	}
	if errors.Is(imdsErr, errIMDSDisabled) {
		imdsErr = nil
	}
	return "", errors.Join(fmt.Errorf("no --node-id, no instance metadata and no $NODE_NAME or $CSI_NODE_NAME"), imdsErr)
}
