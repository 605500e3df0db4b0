package efs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	s3sdk "github.com/aws/aws-sdk-go-v2/service/s3files"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3files/types"
	"github.com/aws/smithy-go"
)

// S3 Files operation names, for Config.RateLimits and the Observer: the S3
// Files API's own names behind "S3Files." (as the SDK names its spans), so
// that neither the pacers nor the metrics mix them with EFS's.
const (
	OpS3CreateAccessPoint = "S3Files.CreateAccessPoint"
	OpS3DeleteAccessPoint = "S3Files.DeleteAccessPoint"
	OpS3GetAccessPoint    = "S3Files.GetAccessPoint"
	OpS3ListAccessPoints  = "S3Files.ListAccessPoints"
	OpS3GetFileSystem     = "S3Files.GetFileSystem"
	OpS3ListFileSystems   = "S3Files.ListFileSystems"
	OpS3ListMountTargets  = "S3Files.ListMountTargets"
	OpS3TagResource       = "S3Files.TagResource"
)

// S3FilesOps are the operations the S3 Files client calls, each with its own pacer.
var S3FilesOps = []string{OpS3CreateAccessPoint, OpS3DeleteAccessPoint, OpS3GetAccessPoint, OpS3ListAccessPoints,
	OpS3GetFileSystem, OpS3ListFileSystems, OpS3ListMountTargets, OpS3TagResource}

// S3FilesEndpointEnv is the SDK's service-specific endpoint variable for
// S3 Files (service ID "S3Files").
const S3FilesEndpointEnv = "AWS_ENDPOINT_URL_S3FILES"

// S3Files is the S3 Files API client of the driver: the methods and types
// of *Client (the controller's EFS interface), through the S3 Files API.
// Safe for concurrent use. Retries, pacing, classification and metrics are
// *Client's (see its documentation), with these differences of the API:
//
//   - CreateAccessPoint with a ClientToken used before: the API ignores the
//     repeat and answers the existing access point. This client answers it
//     only if it is what was asked (the retry of an identical request, as
//     a lenient EFS); one with other parameters is an *AlreadyExistsError
//     naming it, as EFS's AccessPointAlreadyExists, so that the caller
//     checks it instead of taking it for the one it asked for. So is a
//     ConflictException of an API that refuses such a repeat.
//   - ListAccessPoints: the API's listing has no client tokens or tags. An
//     access point's token never changes and its tags change only through
//     TagResource, so the client keeps both per access point (identities)
//     from what it created, read or tagged, and reads with GetAccessPoint
//     (at most s3FilesGetConcurrency at once) only the access points of a
//     page it does not know yet: a listing of access points it knows costs
//     one request per page, as EFS's; one made by another process costs one
//     more request per access point, once. An access point deleted
//     meanwhile is left out; a complete listing of a file system forgets
//     the identities of its access points that it no longer shows. With
//     Config.S3FilesStateDir the identities outlive the process
//     (s3identities.go). Tags
//     changed by another process after this client learned them are not
//     seen in listings (Describe reads them fresh).
//   - ResourceNotFoundException is ErrAccessPointNotFound for the calls that
//     name an access point, ErrFileSystemNotFound for the others.
//   - Mount targets carry no zone name (the API gives the zone ID only).
type S3Files struct {
	api    *s3sdk.Client
	policy *retryPolicy

	identities *s3Identities // what listings lack, per access point
}

// s3FilesGetConcurrency bounds the GetAccessPoint calls of one listing page.
const s3FilesGetConcurrency = 16

// NewS3Files builds an S3 Files client from cfg: cfg.Endpoint (the same
// setting as for EFS: an emulator serves both APIs on one endpoint), else
// AWS_ENDPOINT_URL_S3FILES or AWS_ENDPOINT_URL, else the regional endpoint.
// It makes no network call.
func NewS3Files(ctx context.Context, cfg Config) (*S3Files, error) {
	log := loggerOf(cfg)
	override := cfg.Endpoint != "" || endpointFromEnv(S3FilesEndpointEnv)
	awsCfg, err := loadAWSConfig(ctx, cfg, override, log)
	if err != nil {
		return nil, err
	}
	var httpClient s3sdk.HTTPClient = defaultHTTPClient()
	if cfg.HTTPClient != nil {
		httpClient = cfg.HTTPClient
	}
	api := s3sdk.NewFromConfig(awsCfg, func(o *s3sdk.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		if o.Region == "" && o.BaseEndpoint != nil {
			o.Region = "us-east-1"
		}
		o.Retryer = aws.NopRetryer{}
		o.RetryMaxAttempts = 0
		o.HTTPClient = httpClient
	})
	if api.Options().Region == "" {
		return nil, errNoRegion
	}
	return &S3Files{api: api, policy: newPolicy(cfg, S3FilesOps, log, classifyS3Files, s3FilesExistingID),
		identities: newS3Identities(cfg.S3FilesStateDir, log)}, nil
}

// classifyS3Files maps the S3 Files error codes onto the sentinels, and
// falls back to the shared classification (throttles, 5xx, permissions,
// transport errors) for the rest.
func classifyS3Files(op string, err error) class {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "ResourceNotFoundException":
			switch op {
			case OpS3GetAccessPoint, OpS3DeleteAccessPoint, OpS3TagResource:
				return classAPNotFound
			}
			return classFSNotFound
		case "ConflictException":
			if op == OpS3CreateAccessPoint {
				return classAlreadyUsed
			}
			return classState
		case "ServiceQuotaExceededException":
			return classLimit
		case "InternalServerException":
			return classServer
		}
	}
	return classify(err)
}

// s3FilesExistingID is the access point a ConflictException names.
func s3FilesExistingID(err error) string {
	var ce *s3types.ConflictException
	if errors.As(err, &ce) && strings.HasPrefix(aws.ToString(ce.ResourceId), "fsap-") {
		return *ce.ResourceId
	}
	return ""
}

// CreateAccessPoint creates an access point (tags sent sorted by key, so
// that retries send identical requests). A ClientToken used before answers
// its access point.
func (c *S3Files) CreateAccessPoint(ctx context.Context, in CreateAccessPointInput) (*AccessPoint, error) {
	req := &s3sdk.CreateAccessPointInput{
		FileSystemId:  aws.String(in.FileSystemID),
		ClientToken:   aws.String(in.ClientToken),
		RootDirectory: &s3types.RootDirectory{Path: aws.String(in.Path)},
		Tags:          toS3Tags(in.Tags),
	}
	if ci := in.CreationInfo; ci != nil {
		req.RootDirectory.CreationPermissions = &s3types.CreationPermissions{
			OwnerUid: aws.Int64(ci.OwnerUID), OwnerGid: aws.Int64(ci.OwnerGID), Permissions: aws.String(ci.Permissions),
		}
	}
	if pu := in.PosixUser; pu != nil {
		req.PosixUser = &s3types.PosixUser{Uid: aws.Int64(pu.UID), Gid: aws.Int64(pu.GID), SecondaryGids: pu.SecondaryGIDs}
	}
	out, err := call(ctx, c.policy, OpS3CreateAccessPoint, "token "+in.ClientToken, func(ctx context.Context) (*s3sdk.CreateAccessPointOutput, error) {
		return c.api.CreateAccessPoint(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	ap := fromS3AccessPoint(out.AccessPointId, out.FileSystemId, out.ClientToken, out.Status, out.RootDirectory, out.PosixUser, out.Tags)
	c.identities.put(ap.ID, cloneIdentity(&ap))
	if !isWhatWasAsked(in, ap) {
		return nil, fmt.Errorf("%s token %s: %w (the API answered the token's existing access point, made with other parameters)",
			OpS3CreateAccessPoint, in.ClientToken, &AlreadyExistsError{AccessPointID: ap.ID})
	}
	return &ap, nil
}

// isWhatWasAsked reports whether ap has the parameters of in.
func isWhatWasAsked(in CreateAccessPointInput, ap AccessPoint) bool {
	return ap.FileSystemID == in.FileSystemID && ap.ClientToken == in.ClientToken && ap.Path == in.Path &&
		reflect.DeepEqual(ap.CreationInfo, in.CreationInfo) && samePosixUser(ap.PosixUser, in.PosixUser) &&
		maps.Equal(ap.Tags, in.Tags)
}

func samePosixUser(a, b *PosixUser) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.UID == b.UID && a.GID == b.GID && slices.Equal(a.SecondaryGIDs, b.SecondaryGIDs)
}

// DeleteAccessPoint deletes an access point; a missing one is
// ErrAccessPointNotFound.
func (c *S3Files) DeleteAccessPoint(ctx context.Context, accessPointID string) error {
	_, err := call(ctx, c.policy, OpS3DeleteAccessPoint, accessPointID, func(ctx context.Context) (*s3sdk.DeleteAccessPointOutput, error) {
		return c.api.DeleteAccessPoint(ctx, &s3sdk.DeleteAccessPointInput{AccessPointId: aws.String(accessPointID)})
	})
	if errors.Is(err, ErrAccessDenied) {
		// Denied for want of a tag a gone access point cannot carry
		// (Client.DeleteAccessPoint).
		if _, derr := c.DescribeAccessPoint(ctx, accessPointID); errors.Is(derr, ErrAccessPointNotFound) {
			err = derr
		}
	}
	if err == nil || errors.Is(err, ErrAccessPointNotFound) {
		c.identities.forget(accessPointID)
	}
	return err
}

// DescribeAccessPoint returns one access point (GetAccessPoint), or
// ErrAccessPointNotFound.
func (c *S3Files) DescribeAccessPoint(ctx context.Context, accessPointID string) (*AccessPoint, error) {
	out, err := call(ctx, c.policy, OpS3GetAccessPoint, accessPointID, func(ctx context.Context) (*s3sdk.GetAccessPointOutput, error) {
		return c.api.GetAccessPoint(ctx, &s3sdk.GetAccessPointInput{AccessPointId: aws.String(accessPointID)})
	})
	if errors.Is(err, ErrAccessPointNotFound) {
		c.identities.forget(accessPointID)
	}
	if err != nil {
		return nil, err
	}
	if aws.ToString(out.AccessPointId) != accessPointID {
		return nil, fmt.Errorf("%s %s: %w: the answer names %q", OpS3GetAccessPoint, accessPointID, ErrAccessPointNotFound, aws.ToString(out.AccessPointId))
	}
	ap := fromS3AccessPoint(out.AccessPointId, out.FileSystemId, out.ClientToken, out.Status, out.RootDirectory, out.PosixUser, out.Tags)
	c.identities.put(ap.ID, cloneIdentity(&ap))
	return &ap, nil
}

// ListAccessPoints pages through every access point of fsID, ListPageSize at
// a time, and calls fn with each page in the API's order, each access point
// complete (client token and tags read with GetAccessPoint). An error from
// fn stops the walk and is returned as is.
func (c *S3Files) ListAccessPoints(ctx context.Context, fsID string, fn func([]AccessPoint) error) error {
	seen := map[string]bool{}
	err := walkPages(OpS3ListAccessPoints, fsID, func(token *string) (*string, error) {
		in := &s3sdk.ListAccessPointsInput{FileSystemId: aws.String(fsID), MaxResults: aws.Int32(ListPageSize), NextToken: token}
		out, err := call(ctx, c.policy, OpS3ListAccessPoints, fsID, func(ctx context.Context) (*s3sdk.ListAccessPointsOutput, error) {
			return c.api.ListAccessPoints(ctx, in)
		})
		if err != nil {
			return nil, err
		}
		for _, d := range out.AccessPoints {
			seen[aws.ToString(d.AccessPointId)] = true
		}
		page, err := c.complete(ctx, out.AccessPoints)
		if err != nil {
			return nil, err
		}
		return out.NextToken, fn(page)
	})
	if err == nil {
		c.identities.forgetUnlisted(fsID, seen)
	}
	return err
}

// complete gives every access point of a listing page its client token and
// tags: known ones from their identities, the others read with
// GetAccessPoint; it keeps the page's order and leaves out those deleted
// since.
func (c *S3Files) complete(ctx context.Context, list []s3types.ListAccessPointsDescription) ([]AccessPoint, error) {
	got := make([]*AccessPoint, len(list))
	errs := make([]error, len(list))
	sem := make(chan struct{}, s3FilesGetConcurrency)
	var wg sync.WaitGroup
	for i, d := range list {
		if ident, ok := c.identities.get(aws.ToString(d.FileSystemId), aws.ToString(d.AccessPointId)); ok {
			ap := fromS3AccessPoint(d.AccessPointId, d.FileSystemId, &ident.Token, d.Status, d.RootDirectory, d.PosixUser, nil)
			if ident.matches(ap) {
				ap.Tags = maps.Clone(ident.Tags)
				got[i] = &ap
				continue
			}
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			got[i], errs[i] = c.DescribeAccessPoint(ctx, aws.ToString(d.AccessPointId))
		}()
	}
	wg.Wait()
	page := make([]AccessPoint, 0, len(list))
	for i := range list {
		switch {
		case errors.Is(errs[i], ErrAccessPointNotFound):
		case errs[i] != nil:
			return nil, errs[i]
		default:
			page = append(page, *got[i])
		}
	}
	return page, nil
}

// DescribeFileSystem returns one file system (GetFileSystem), or ErrFileSystemNotFound.
func (c *S3Files) DescribeFileSystem(ctx context.Context, fsID string) (*FileSystem, error) {
	out, err := call(ctx, c.policy, OpS3GetFileSystem, fsID, func(ctx context.Context) (*s3sdk.GetFileSystemOutput, error) {
		return c.api.GetFileSystem(ctx, &s3sdk.GetFileSystemInput{FileSystemId: aws.String(fsID)})
	})
	if err != nil {
		return nil, err
	}
	return &FileSystem{ID: aws.ToString(out.FileSystemId), LifeCycleState: string(out.Status), Tags: fromS3Tags(out.Tags)}, nil
}

// ListFileSystems returns every S3 Files file system of the account and
// region (all pages).
func (c *S3Files) ListFileSystems(ctx context.Context) ([]FileSystem, error) {
	var fss []FileSystem
	err := walkPages(OpS3ListFileSystems, "", func(token *string) (*string, error) {
		in := &s3sdk.ListFileSystemsInput{NextToken: token}
		out, err := call(ctx, c.policy, OpS3ListFileSystems, "", func(ctx context.Context) (*s3sdk.ListFileSystemsOutput, error) {
			return c.api.ListFileSystems(ctx, in)
		})
		if err != nil {
			return nil, err
		}
		for _, d := range out.FileSystems {
			fss = append(fss, FileSystem{ID: aws.ToString(d.FileSystemId), LifeCycleState: string(d.Status)})
		}
		return out.NextToken, nil
	})
	return fss, err
}

// DescribeMountTargets returns every mount target of fsID (all pages).
func (c *S3Files) DescribeMountTargets(ctx context.Context, fsID string) ([]MountTarget, error) {
	var mts []MountTarget
	err := walkPages(OpS3ListMountTargets, fsID, func(token *string) (*string, error) {
		in := &s3sdk.ListMountTargetsInput{FileSystemId: aws.String(fsID), NextToken: token}
		out, err := call(ctx, c.policy, OpS3ListMountTargets, fsID, func(ctx context.Context) (*s3sdk.ListMountTargetsOutput, error) {
			return c.api.ListMountTargets(ctx, in)
		})
		if err != nil {
			return nil, err
		}
		for _, d := range out.MountTargets {
			mts = append(mts, MountTarget{
				ID: aws.ToString(d.MountTargetId), FileSystemID: aws.ToString(d.FileSystemId), IPAddress: aws.ToString(d.Ipv4Address),
				AvailabilityZoneID: aws.ToString(d.AvailabilityZoneId), LifeCycleState: string(d.Status),
			})
		}
		return out.NextToken, nil
	})
	return mts, err
}

// TagResource adds tags to an access point or file system (see
// Client.TagResource).
func (c *S3Files) TagResource(ctx context.Context, resourceID string, tags map[string]string) error {
	_, err := call(ctx, c.policy, OpS3TagResource, resourceID, func(ctx context.Context) (*s3sdk.TagResourceOutput, error) {
		return c.api.TagResource(ctx, &s3sdk.TagResourceInput{ResourceId: aws.String(resourceID), Tags: toS3Tags(tags)})
	})
	// The identity's tags are not those now (whatever the outcome: it may
	// have been applied): the next listing reads them again.
	c.identities.forget(resourceID)
	return err
}

// Ping makes one ListFileSystems call (MaxResults 1), as Client.Ping.
func (c *S3Files) Ping(ctx context.Context) error {
	return c.policy.ping(ctx, OpS3ListFileSystems, func(ctx context.Context) error {
		_, err := c.api.ListFileSystems(ctx, &s3sdk.ListFileSystemsInput{MaxResults: aws.Int32(1)})
		return err
	})
}

func fromS3AccessPoint(id, fsID, token *string, status s3types.LifeCycleState, rd *s3types.RootDirectory, pu *s3types.PosixUser, tags []s3types.Tag) AccessPoint {
	ap := AccessPoint{ID: aws.ToString(id), FileSystemID: aws.ToString(fsID), ClientToken: aws.ToString(token),
		LifeCycleState: string(status), Tags: fromS3Tags(tags)}
	if rd != nil {
		ap.Path = aws.ToString(rd.Path)
		if ci := rd.CreationPermissions; ci != nil {
			ap.CreationInfo = &CreationInfo{OwnerUID: aws.ToInt64(ci.OwnerUid), OwnerGID: aws.ToInt64(ci.OwnerGid), Permissions: aws.ToString(ci.Permissions)}
		}
	}
	if pu != nil {
		ap.PosixUser = &PosixUser{UID: aws.ToInt64(pu.Uid), GID: aws.ToInt64(pu.Gid), SecondaryGIDs: pu.SecondaryGids}
	}
	return ap
}

func toS3Tags(m map[string]string) []s3types.Tag {
	var tags []s3types.Tag
	for _, t := range toTags(m) { // sorted
		tags = append(tags, s3types.Tag{Key: t.Key, Value: t.Value})
	}
	return tags
}

func fromS3Tags(tags []s3types.Tag) map[string]string {
	if len(tags) == 0 {
		return nil
	}
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		m[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return m
}
