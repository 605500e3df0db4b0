// Package iam holds the IAM policies this project ships beside AWS's
// managed AmazonEFSCSIDriverPolicy (docs/iam.md), for users to attach and
// for the tests and the stress tool to run the emulator under:
// descriptive-tags.json (--descriptive-tags, --tags with efs.csi.aws.com/
// keys) and s3files.json (provisioningMode s3files-ap).
package iam

import _ "embed"

var (
	//go:embed descriptive-tags.json
	DescriptiveTags string
	//go:embed s3files.json
	S3Files string
)
