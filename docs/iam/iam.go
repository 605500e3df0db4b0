// Package iam holds the IAM policies this project ships beside AWS's
// managed AmazonEFSCSIDriverPolicy (docs/iam.md), for users to attach and
// for the tests and the stress tool to run the emulator under:
//
//   - controller.json: the controller's own least-privilege policy, in place
//     of the managed one, for --descriptive-tags, --tags with
//     efs.csi.aws.com/ keys and S3 Files classes (the managed policy's tag
//     conditions, widened to those keys);
//   - s3files.json: added to the managed policy for S3 Files classes
//     (provisioningMode s3files-ap) alone;
//   - cross-account.json: added for a class whose secret names another
//     account's role (narrow its Resource to those roles);
//   - node.json: the node role's (and, for directory volumes, the
//     controller role's) NFS client access under a file system policy or
//     the iam mount option.
//
// They live under docs/ because they are documents users attach; this file
// embeds them so the tests run the emulator under the very text shipped.
package iam

import _ "embed"

var (
	//go:embed controller.json
	Controller string
	//go:embed s3files.json
	S3Files string
	//go:embed cross-account.json
	CrossAccount string
	//go:embed node.json
	Node string
)
