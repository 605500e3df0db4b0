// Package iam holds the IAM policies this project ships beside AWS's
// managed AmazonEFSCSIDriverPolicy (docs/iam.md), for users to attach and
// for the tests and the stress tool to run the emulator under:
// descriptive-tags.json (--descriptive-tags, --tags with efs.csi.aws.com/
// keys), s3files.json (provisioningMode s3files-ap) and cross-account.json
// (a class whose secret names another account's role: narrow its Resource
// to those roles).
package iam

import _ "embed"

var (
	//go:embed descriptive-tags.json
	DescriptiveTags string
	//go:embed s3files.json
	S3Files string
	//go:embed cross-account.json
	CrossAccount string
)
