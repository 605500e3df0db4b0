package driver

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
)

// RegionKey is the well-known Node label of the node's region, which the
// cloud provider sets on every EKS node.
const RegionKey = "topology.kubernetes.io/region"

// regionSource says where the EFS API's region came from, for the log.
type regionSource string

const (
	regionFromConfig regionSource = "AWS configuration"
	regionFromIMDS   regionSource = "instance metadata placement/region"
	regionFromNode   regionSource = "Node label " + RegionKey
)

// discoverRegion finds the region of the EFS API, as upstream does when the
// AWS configuration names none (upstream's manifests set no AWS_REGION):
//  1. the AWS configuration: cfg.EFS.Region, $AWS_REGION,
//     $AWS_DEFAULT_REGION, the shared config file (the SDK's order);
//  2. the instance metadata service (IMDSv2), placement/region, within
//     imdsTimeout (AWS_EC2_METADATA_SERVICE_ENDPOINT moves it,
//     AWS_EC2_METADATA_DISABLED=true skips it);
//  3. the label topology.kubernetes.io/region of this node's Node object
//     (node name from $NODE_NAME or $CSI_NODE_NAME), through the Kubernetes
//     API when one is configured: upstream's fallback where the pod cannot
//     reach instance metadata (a hop limit of 1, Fargate, hybrid nodes).
//
// "" with an error that says why each source had no answer.
func discoverRegion(ctx context.Context, cfg Config) (string, regionSource, error) {
	if cfg.EFS.Region != "" {
		return cfg.EFS.Region, regionFromConfig, nil
	}
	var errs []error
	// The SDK's own resolution, without instance metadata (which the SDK
	// would not ask for a region anyway).
	awsCfg, err := config.LoadDefaultConfig(ctx, config.WithEC2IMDSClientEnableState(imds.ClientDisabled))
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("AWS configuration: %w", err))
	case awsCfg.Region != "":
		return awsCfg.Region, regionFromConfig, nil
	default:
		errs = append(errs, errors.New("no AWS_REGION, AWS_DEFAULT_REGION or shared config region"))
	}
	region, err := imdsGet(ctx, "placement/region")
	if err == nil {
		return region, regionFromIMDS, nil
	}
	errs = append(errs, err)
	switch name := kubeNodeName(); {
	case name == "":
		errs = append(errs, errors.New("no $NODE_NAME or $CSI_NODE_NAME to read the Node label "+RegionKey+" of"))
	case !cfg.Kube.Configured():
		errs = append(errs, errors.New("no Kubernetes API configured to read the Node label "+RegionKey))
	default:
		region, err := nodeLabel(ctx, cfg, name, RegionKey)
		if err == nil && region != "" {
			return region, regionFromNode, nil
		}
		if err == nil {
			err = fmt.Errorf("Node %s has no label %s", name, RegionKey)
		}
		errs = append(errs, err)
	}
	return "", "", errors.Join(errs...)
}

// resolveRegion sets cfg.EFS.Region from discoverRegion when the EFS API
// is used. Without a region the driver cannot call EFS, so none is fatal,
// except with an endpoint override (an emulator), which needs none.
func resolveRegion(ctx context.Context, cfg *Config) error {
	region, src, err := discoverRegion(ctx, *cfg)
	if err != nil {
		if cfg.EFS.Endpoint != "" || os.Getenv("AWS_ENDPOINT_URL_EFS") != "" || os.Getenv("AWS_ENDPOINT_URL") != "" {
			return nil
		}
		return fmt.Errorf("no AWS region: set AWS_REGION, or run where instance metadata or the Node's %s label gives one: %w", RegionKey, err)
	}
	if src != regionFromConfig {
		cfg.Logger.Info("AWS region discovered", "region", region, "source", string(src))
	}
	cfg.EFS.Region = region
	return nil
}
