package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/efs-csi/efs-csi-driver/pkg/kube"
	"github.com/efs-csi/efs-csi-driver/pkg/volume"
)

// zoneSource says where a node's zone came from, for the log.
type zoneSource string

const (
	zoneFromFlag zoneSource = "--zone"
	zoneFromNode zoneSource = "Node label " + volume.TopologyZoneKey
	zoneFromIMDS zoneSource = "instance metadata placement/availability-zone"
)

// discoverZone finds the availability zone NodeGetInfo reports, the one
// place that decides the order:
//  1. --zone;
//  2. the label topology.kubernetes.io/zone of this node's Node object
//     (node name from $NODE_NAME or $CSI_NODE_NAME), read through the
//     Kubernetes API when one is configured (in a pod, or --kube-api-url):
//     the cloud provider sets it on every EKS node, ECS and Fargate included,
//     and an administrator may set it anywhere;
//  3. the instance metadata service (IMDSv2), placement/availability-zone.
//
// An unknown zone is not an error: the node then reports no topology, and
// err says why each source had no answer.
func discoverZone(ctx context.Context, cfg Config) (string, zoneSource, error) {
	if cfg.Zone != "" {
		return cfg.Zone, zoneFromFlag, nil
	}
	var errs []error
	switch name := kubeNodeName(); {
	case name == "":
		errs = append(errs, errors.New("no $NODE_NAME or $CSI_NODE_NAME to read the Node object of"))
	case !cfg.Kube.Configured():
		errs = append(errs, errors.New("no Kubernetes API configured"))
	default:
		zone, err := nodeLabel(ctx, cfg, name, volume.TopologyZoneKey)
		if err == nil && zone != "" {
			return zone, zoneFromNode, nil
		}
		if err == nil {
			err = fmt.Errorf("Node %s has no label %s", name, volume.TopologyZoneKey)
		}
		errs = append(errs, err)
	}
	zone, err := imdsGet(ctx, "placement/availability-zone")
	if err == nil {
		return zone, zoneFromIMDS, nil
	}
	return "", "", errors.Join(append(errs, err)...)
}

// nodeLabel reads label key of the Node node through cfg.Kube, within
// imdsTimeout.
func nodeLabel(ctx context.Context, cfg Config, node, key string) (string, error) {
	c, err := kube.New(cfg.Kube)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, imdsTimeout)
	defer cancel()
	return c.NodeLabel(ctx, node, key)
}
