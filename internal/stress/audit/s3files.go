package audit

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	s3sdk "github.com/aws/aws-sdk-go-v2/service/s3files"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3files/types"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// The audit's own view of S3 Files access points, for runs of an s3files-ap
// class: the SDK directly (not the driver's client), so that the audit does
// not share the code it checks.

// NewS3FilesClient builds an S3 Files SDK client for audits, configured as
// NewClient's (Endpoint "" = AWS_ENDPOINT_URL_S3FILES or the region).
func NewS3FilesClient(ctx context.Context, o ClientOptions) (*s3sdk.Client, error) {
	cfg, err := loadConfig(ctx, o)
	if err != nil {
		return nil, err
	}
	return s3sdk.NewFromConfig(cfg, func(so *s3sdk.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
	}), nil
}

// ListS3FilesAccessPoints pages through every access point of S3 Files file
// system fsID. The API's listing has no tags or client tokens, which the
// audit needs (the volume name tag): each access point is read with
// GetAccessPoint; one deleted in between is left out.
func ListS3FilesAccessPoints(ctx context.Context, c *s3sdk.Client, fsID string) ([]efs.AccessPoint, error) {
	var out []efs.AccessPoint
	p := s3sdk.NewListAccessPointsPaginator(c, &s3sdk.ListAccessPointsInput{FileSystemId: aws.String(fsID), MaxResults: aws.Int32(1000)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("audit: list S3 Files access points of %s: %w", fsID, err)
		}
		for _, d := range page.AccessPoints {
			ap, err := DescribeS3FilesAccessPoint(ctx, c, aws.ToString(d.AccessPointId))
			switch {
			case errors.Is(err, ErrNoAccessPoint):
			case err != nil:
				return nil, err
			default:
				out = append(out, *ap)
			}
		}
	}
	return out, nil
}

// DescribeS3FilesAccessPoint reads one S3 Files access point.
func DescribeS3FilesAccessPoint(ctx context.Context, c *s3sdk.Client, id string) (*efs.AccessPoint, error) {
	d, err := c.GetAccessPoint(ctx, &s3sdk.GetAccessPointInput{AccessPointId: aws.String(id)})
	var nf *s3types.ResourceNotFoundException
	switch {
	case errors.As(err, &nf):
		return nil, fmt.Errorf("%w: %s", ErrNoAccessPoint, id)
	case err != nil:
		return nil, fmt.Errorf("audit: get S3 Files access point %s: %w", id, err)
	}
	ap := efs.AccessPoint{
		ID: aws.ToString(d.AccessPointId), FileSystemID: aws.ToString(d.FileSystemId),
		ClientToken: aws.ToString(d.ClientToken), LifeCycleState: string(d.Status), Tags: map[string]string{},
	}
	if d.RootDirectory != nil {
		ap.Path = aws.ToString(d.RootDirectory.Path)
	}
	if u := d.PosixUser; u != nil {
		ap.PosixUser = &efs.PosixUser{UID: aws.ToInt64(u.Uid), GID: aws.ToInt64(u.Gid), SecondaryGIDs: u.SecondaryGids}
	}
	for _, t := range d.Tags {
		ap.Tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return &ap, nil
}
