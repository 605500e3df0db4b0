package iam

import _ "embed" // the shipped policy texts

// The policy texts users attach to the driver's roles (testdata/README.md
// says where each came from), for running the emulator under them.
var (
	// ManagedPolicy is AWS's managed policy AmazonEFSCSIDriverPolicy: the
	// only tag key a create may carry is efs.csi.aws.com/cluster.
	//
	//go:embed testdata/AmazonEFSCSIDriverPolicy.json
	ManagedPolicy string
	// UpstreamExamplePolicy is upstream's example controller policy: any
	// tag keys, as long as efs.csi.aws.com/cluster is "true".
	//
	//go:embed testdata/upstream-iam-policy-example.json
	UpstreamExamplePolicy string
	// UpstreamNodePolicy is upstream's example node-role policy.
	//
	//go:embed testdata/upstream-node-policy-example.json
	UpstreamNodePolicy string
)
