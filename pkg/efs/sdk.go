package efs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	sdk "github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/efs/types"
)

// Config configures the SDK client. The zero value works against real EFS
// with the standard AWS environment.
type Config struct {
	// Region; "" takes it from the standard environment (AWS_REGION,
	// AWS_DEFAULT_REGION, the shared config file), never from the EC2
	// metadata service. With no region found, "us-east-1" is used when an
	// endpoint override is present (an emulator ignores it) and New fails
	// otherwise.
	Region string
	// Endpoint overrides the EFS endpoint, e.g. "http://127.0.0.1:8080";
	// "" uses the standard environment (AWS_ENDPOINT_URL_EFS,
	// AWS_ENDPOINT_URL, the shared config file) or the regional endpoint.
	Endpoint string
	// RateLimits are ceilings per operation name (the Op* constants); the
	// key "*" applies to every operation not named; operations in neither
	// have none (the default). PerSecond <= 0 means none.
	RateLimits map[string]RateLimit
	// DisableAdaptive turns off the adaptive rate (upstream's
	// --adaptive-retry-mode=false): throttles are still retried with
	// backoff, but never slow the other calls down.
	DisableAdaptive bool
	// MaxInFlight bounds the requests in flight per operation (default
	// DefaultMaxInFlight; < 0: unbounded).
	MaxInFlight int
	// MaxBackoff caps the exponential backoff between retries (default 5s).
	MaxBackoff time.Duration
	// BaseBackoff is the backoff ceiling of the first retry, doubled for each
	// further one (default 100ms).
	BaseBackoff time.Duration
	// AttemptTimeout bounds one attempt, so that a hung connection is retried
	// instead of eating the whole deadline (default 10s).
	AttemptTimeout time.Duration
	// DefaultTimeout bounds calls whose context has no deadline, retries
	// included (default 2m).
	DefaultTimeout time.Duration
	// Observer receives per-attempt metrics; nil: none.
	Observer Observer
	// HTTPClient for EFS API requests; nil: the SDK's client with a larger
	// idle connection pool.
	HTTPClient *http.Client
	// Logger; nil: discard.
	Logger *slog.Logger

	// RoleARN makes the client act as this IAM role (cross-account
	// provisioning): every call is signed with temporary credentials that
	// STS AssumeRole issues to the standard chain's (the driver's own)
	// credentials, cached, and refreshed RoleExpiryWindow before they
	// expire. "": the standard chain's credentials. See also AsRole.
	RoleARN string
	// ExternalID is the sts:ExternalId the role's trust policy requires;
	// only with RoleARN. It is never logged nor put in an error.
	ExternalID string
	// STSEndpoint overrides the STS endpoint, as Endpoint does EFS's
	// ("http://127.0.0.1:8080": the emulator serves both); "" uses the
	// standard environment (AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL, the
	// shared config file) or the regional endpoint.
	STSEndpoint string
	// RoleExpiryWindow is how long before they expire role credentials are
	// refreshed (default DefaultRoleExpiryWindow).
	RoleExpiryWindow time.Duration
	// S3FilesStateDir is where the S3 Files client keeps the client tokens
	// and tags its listings lack (one small file per access point), so that
	// a restarted controller does not read every access point again; ""
	// keeps them in memory only.
	S3FilesStateDir string
}

// Client is the EFS API client of the driver. Safe for concurrent use.
//
// Every error it returns wraps exactly one sentinel of this package (and
// context.DeadlineExceeded or context.Canceled when the caller's context
// ended). Retries happen inside each method, within the caller's deadline:
// throttles, 5xx answers, lost connections and attempt timeouts are retried
// with exponential backoff and full jitter; other errors are returned at once.
// A CreateAccessPoint retried after a lost answer may therefore return an
// *AlreadyExistsError naming the access point its own first attempt created.
type Client struct {
	api    *sdk.Client
	policy *retryPolicy
	// base is the configuration a role client (AsRole) starts from: the
	// standard chain's credentials and the same region, HTTP client and
	// endpoints.
	base       aws.Config
	cfg        Config
	httpClient sdk.HTTPClient
}

// DefaultMaxInFlight is the default bound on EFS requests in flight per
// operation: enough to keep the API busy (an EFS request takes tens of
// milliseconds, so 64 in flight carry over 1,000 requests/s), few enough
// that 1,000 DeleteVolume calls at once do not open 1,000 connections.
const DefaultMaxInFlight = 64

// ListPageSize is the DescribeAccessPoints page size ListAccessPoints asks
// for: the API's maximum.
const ListPageSize = 1000

// New builds a Client. It makes no network call.
func New(ctx context.Context, cfg Config) (*Client, error) {
	log := loggerOf(cfg)
	override := cfg.Endpoint != "" || endpointFromEnv("AWS_ENDPOINT_URL_EFS")
	awsCfg, err := loadAWSConfig(ctx, cfg, override, log)
	if err != nil {
		return nil, err
	}
	var httpClient sdk.HTTPClient = defaultHTTPClient()
	if cfg.HTTPClient != nil {
		httpClient = cfg.HTTPClient
	}
	cfg.Logger = log
	return newClient(awsCfg, cfg, httpClient)
}

// newClient builds a Client on base (whose credentials are the standard
// chain's), as cfg.RoleARN's role when set.
func newClient(base aws.Config, cfg Config, httpClient sdk.HTTPClient) (*Client, error) {
	switch {
	case cfg.RoleARN == "" && cfg.ExternalID != "":
		return nil, fmt.Errorf("%w: an external ID needs a role ARN", ErrBadRequest)
	case cfg.RoleARN != "" && !ValidRoleARN(cfg.RoleARN):
		return nil, fmt.Errorf("%w: role ARN %q is not arn:aws:iam::<account>:role/<name>", ErrBadRequest, cfg.RoleARN)
	}
	efsOptions := func(o *sdk.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		if o.Region == "" && o.BaseEndpoint != nil {
			o.Region = "us-east-1"
		}
		o.Retryer = aws.NopRetryer{}
		o.RetryMaxAttempts = 0 // AWS_MAX_ATTEMPTS must not wrap the retryer again
		o.HTTPClient = httpClient
	}
	api := sdk.NewFromConfig(base, efsOptions)
	region := api.Options().Region
	if region == "" {
		return nil, errNoRegion
	}
	if cfg.RoleARN != "" {
		creds := roleCredentials(base, region, cfg, httpClient)
		api = sdk.NewFromConfig(base, efsOptions, func(o *sdk.Options) { o.Credentials = creds })
	}
	return &Client{api: api, base: base, cfg: cfg, httpClient: httpClient,
		policy: newPolicy(cfg, Ops, loggerOf(cfg), func(_ string, err error) class { return classify(err) }, efsExistingID)}, nil
}

var errNoRegion = errors.New("no AWS region: set AWS_REGION")

func loggerOf(cfg Config) *slog.Logger {
	if cfg.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return cfg.Logger
}

// loadAWSConfig loads the standard AWS configuration with the SDK's retryer
// off (call() retries) and, with an endpoint override (an emulator), no EC2
// metadata service and dummy credentials when the chain finds none.
func loadAWSConfig(ctx context.Context, cfg Config, override bool, log *slog.Logger) (aws.Config, error) {
	opts := []func(*config.LoadOptions) error{
		// The SDK's retryer is replaced by call(): its client-side retry
		// quota turns a burst of throttles into hard failures ("retry quota
		// exceeded, 0 available"), the upstream driver's defect.
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
	}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if override && os.Getenv("AWS_EC2_METADATA_DISABLED") == "" {
		// Against an emulator there is no EC2 metadata service to ask for
		// credentials; asking would stall every call on connection timeouts.
		// AWS_EC2_METADATA_DISABLED=false turns it back on.
		opts = append(opts, config.WithEC2IMDSClientEnableState(imds.ClientDisabled))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("loading AWS configuration: %w", err)
	}
	if override {
		awsCfg.Credentials = aws.NewCredentialsCache(&fallbackCredentials{next: awsCfg.Credentials, log: log})
	}
	return awsCfg, nil
}

// defaultHTTPClient is the SDK's client with a larger idle connection pool:
// hundreds of concurrent calls to one host keep their connections.
func defaultHTTPClient() *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConnsPerHost = 256
	})
}

// newPolicy is the retry and pacing policy of a client calling ops.
func newPolicy(cfg Config, ops []string, log *slog.Logger, classify func(op string, err error) class, existingID func(error) string) *retryPolicy {
	observer := cfg.Observer
	if observer == nil {
		observer = nopObserver{}
	}
	return &retryPolicy{
		pacers:         newPacers(ops, cfg.RateLimits, !cfg.DisableAdaptive, cmp.Or(cfg.MaxInFlight, DefaultMaxInFlight)),
		baseBackoff:    positiveOr(cfg.BaseBackoff, 100*time.Millisecond),
		maxBackoff:     positiveOr(cfg.MaxBackoff, 5*time.Second),
		attemptTimeout: positiveOr(cfg.AttemptTimeout, 10*time.Second),
		defaultTimeout: positiveOr(cfg.DefaultTimeout, 2*time.Minute),
		observer:       observer,
		log:            log,
		classify:       classify,
		existingID:     existingID,
	}
}

func positiveOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// endpointFromEnv reports whether the environment overrides a service's
// endpoint the way the SDK reads it: serviceVar (AWS_ENDPOINT_URL_<SERVICE
// ID>) or AWS_ENDPOINT_URL.
func endpointFromEnv(serviceVar string) bool {
	if ignore, _ := strconv.ParseBool(os.Getenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")); ignore {
		return false
	}
	return os.Getenv(serviceVar) != "" || os.Getenv("AWS_ENDPOINT_URL") != ""
}

// fallbackCredentials serves the standard chain's credentials and, when the
// chain finds none, dummy ones: with an endpoint override (an emulator) the
// driver must run without any AWS credentials. A real endpoint rejects the
// dummy keys, which classify as ErrAccessDenied.
type fallbackCredentials struct {
	next aws.CredentialsProvider
	log  *slog.Logger
	once sync.Once
}

func (f *fallbackCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	if f.next != nil {
		creds, err := f.next.Retrieve(ctx)
		if err == nil {
			return creds, nil
		}
		f.once.Do(func() {
			f.log.Warn("no AWS credentials found; signing EFS requests with dummy credentials for the endpoint override", "error", err)
		})
	}
	return aws.Credentials{AccessKeyID: "efs-csi-no-credentials", SecretAccessKey: "efs-csi-no-credentials", Source: "efs-csi-fallback"}, nil
}

// CreateAccessPoint creates an access point. Tags are sent sorted by key so
// that retries send identical requests.
func (c *Client) CreateAccessPoint(ctx context.Context, in CreateAccessPointInput) (*AccessPoint, error) {
	req := &sdk.CreateAccessPointInput{
		FileSystemId: aws.String(in.FileSystemID),
		ClientToken:  aws.String(in.ClientToken),
		RootDirectory: &types.RootDirectory{
			Path: aws.String(in.Path),
		},
		Tags: toTags(in.Tags),
	}
	if ci := in.CreationInfo; ci != nil {
		req.RootDirectory.CreationInfo = &types.CreationInfo{
			OwnerUid:    aws.Int64(ci.OwnerUID),
			OwnerGid:    aws.Int64(ci.OwnerGID),
			Permissions: aws.String(ci.Permissions),
		}
	}
	if pu := in.PosixUser; pu != nil {
		req.PosixUser = &types.PosixUser{Uid: aws.Int64(pu.UID), Gid: aws.Int64(pu.GID), SecondaryGids: pu.SecondaryGIDs}
	}
	out, err := call(ctx, c.policy, OpCreateAccessPoint, "token "+in.ClientToken, func(ctx context.Context) (*sdk.CreateAccessPointOutput, error) {
		return c.api.CreateAccessPoint(ctx, req)
	})
	if err != nil {
		return nil, err
	}
	ap := fromDescription(types.AccessPointDescription{
		AccessPointId:  out.AccessPointId,
		ClientToken:    out.ClientToken,
		FileSystemId:   out.FileSystemId,
		LifeCycleState: out.LifeCycleState,
		PosixUser:      out.PosixUser,
		RootDirectory:  out.RootDirectory,
		Tags:           out.Tags,
	})
	return &ap, nil
}

// DeleteAccessPoint deletes an access point; a missing one is
// ErrAccessPointNotFound (which a retried delete may also see after its own
// earlier attempt's answer was lost).
//
// IAM decides before EFS looks: under a policy that allows the delete only
// on access points carrying a tag (AWS's managed AmazonEFSCSIDriverPolicy:
// efs.csi.aws.com/cluster), one already gone carries none and the delete
// is AccessDenied, not AccessPointNotFound. A denied delete is therefore
// told apart by one Describe: gone, it is ErrAccessPointNotFound; there,
// the denial stands.
func (c *Client) DeleteAccessPoint(ctx context.Context, accessPointID string) error {
	_, err := call(ctx, c.policy, OpDeleteAccessPoint, accessPointID, func(ctx context.Context) (*sdk.DeleteAccessPointOutput, error) {
		return c.api.DeleteAccessPoint(ctx, &sdk.DeleteAccessPointInput{AccessPointId: aws.String(accessPointID)})
	})
	if errors.Is(err, ErrAccessDenied) {
		if _, derr := c.DescribeAccessPoint(ctx, accessPointID); errors.Is(derr, ErrAccessPointNotFound) {
			return derr
		}
	}
	return err
}

// DescribeAccessPoint returns one access point, or ErrAccessPointNotFound.
func (c *Client) DescribeAccessPoint(ctx context.Context, accessPointID string) (*AccessPoint, error) {
	out, err := call(ctx, c.policy, OpDescribeAccessPoints, accessPointID, func(ctx context.Context) (*sdk.DescribeAccessPointsOutput, error) {
		return c.api.DescribeAccessPoints(ctx, &sdk.DescribeAccessPointsInput{AccessPointId: aws.String(accessPointID)})
	})
	if err != nil {
		return nil, err
	}
	for _, d := range out.AccessPoints {
		if aws.ToString(d.AccessPointId) == accessPointID {
			ap := fromDescription(d)
			return &ap, nil
		}
	}
	return nil, fmt.Errorf("%s %s: %w: not in the answer", OpDescribeAccessPoints, accessPointID, ErrAccessPointNotFound)
}

// ListAccessPoints pages through every access point of fsID, ListPageSize at
// a time, and calls fn with each page in the API's order. An error from fn
// stops the walk and is returned as is. Each page is retried on its own.
func (c *Client) ListAccessPoints(ctx context.Context, fsID string, fn func([]AccessPoint) error) error {
	return walkPages(OpDescribeAccessPoints, fsID, func(token *string) (*string, error) {
		in := &sdk.DescribeAccessPointsInput{
			FileSystemId: aws.String(fsID),
			MaxResults:   aws.Int32(ListPageSize),
			NextToken:    token,
		}
		out, err := call(ctx, c.policy, OpDescribeAccessPoints, fsID, func(ctx context.Context) (*sdk.DescribeAccessPointsOutput, error) {
			return c.api.DescribeAccessPoints(ctx, in)
		})
		if err != nil {
			return nil, err
		}
		page := make([]AccessPoint, len(out.AccessPoints))
		for i, d := range out.AccessPoints {
			page[i] = fromDescription(d)
		}
		return out.NextToken, fn(page)
	})
}

// walkPages calls page with each page's token (nil first) until it returns
// no next token or an error. A server that hands out the same token twice
// would loop forever: that is ErrUnavailable.
func walkPages(op, subject string, page func(token *string) (next *string, err error)) error {
	var token *string
	seen := map[string]bool{}
	for {
		next, err := page(token)
		if err != nil || aws.ToString(next) == "" {
			return err
		}
		if seen[*next] {
			return fmt.Errorf("%s %s: %w: page token %q repeated", op, subject, ErrUnavailable, *next)
		}
		seen[*next] = true
		token = next
	}
}

// DescribeFileSystem returns one file system, or ErrFileSystemNotFound.
func (c *Client) DescribeFileSystem(ctx context.Context, fsID string) (*FileSystem, error) {
	out, err := call(ctx, c.policy, OpDescribeFileSystems, fsID, func(ctx context.Context) (*sdk.DescribeFileSystemsOutput, error) {
		return c.api.DescribeFileSystems(ctx, &sdk.DescribeFileSystemsInput{FileSystemId: aws.String(fsID)})
	})
	if err != nil {
		return nil, err
	}
	for _, d := range out.FileSystems {
		if aws.ToString(d.FileSystemId) == fsID {
			fs := fromFileSystem(d)
			return &fs, nil
		}
	}
	return nil, fmt.Errorf("%s %s: %w: not in the answer", OpDescribeFileSystems, fsID, ErrFileSystemNotFound)
}

func fromFileSystem(d types.FileSystemDescription) FileSystem {
	return FileSystem{
		ID: aws.ToString(d.FileSystemId), LifeCycleState: string(d.LifeCycleState), Tags: fromTags(d.Tags),
		AvailabilityZoneName: aws.ToString(d.AvailabilityZoneName), AvailabilityZoneID: aws.ToString(d.AvailabilityZoneId),
	}
}

// ListFileSystems returns every file system of the account and region (all pages).
func (c *Client) ListFileSystems(ctx context.Context) ([]FileSystem, error) {
	var fss []FileSystem
	var marker *string
	for {
		in := &sdk.DescribeFileSystemsInput{Marker: marker}
		out, err := call(ctx, c.policy, OpDescribeFileSystems, "", func(ctx context.Context) (*sdk.DescribeFileSystemsOutput, error) {
			return c.api.DescribeFileSystems(ctx, in)
		})
		if err != nil {
			return nil, err
		}
		for _, d := range out.FileSystems {
			fss = append(fss, fromFileSystem(d))
		}
		next := aws.ToString(out.NextMarker)
		if next == "" || next == aws.ToString(marker) {
			return fss, nil
		}
		marker = out.NextMarker
	}
}

// DescribeMountTargets returns every mount target of fsID (all pages).
func (c *Client) DescribeMountTargets(ctx context.Context, fsID string) ([]MountTarget, error) {
	var mts []MountTarget
	err := walkPages(OpDescribeMountTargets, fsID, func(marker *string) (*string, error) {
		in := &sdk.DescribeMountTargetsInput{FileSystemId: aws.String(fsID), Marker: marker}
		out, err := call(ctx, c.policy, OpDescribeMountTargets, fsID, func(ctx context.Context) (*sdk.DescribeMountTargetsOutput, error) {
			return c.api.DescribeMountTargets(ctx, in)
		})
		if err != nil {
			return nil, err
		}
		for _, d := range out.MountTargets {
			mts = append(mts, MountTarget{
				ID:                   aws.ToString(d.MountTargetId),
				FileSystemID:         aws.ToString(d.FileSystemId),
				IPAddress:            aws.ToString(d.IpAddress),
				AvailabilityZoneName: aws.ToString(d.AvailabilityZoneName),
				AvailabilityZoneID:   aws.ToString(d.AvailabilityZoneId),
				LifeCycleState:       string(d.LifeCycleState),
			})
		}
		return out.NextMarker, nil
	})
	return mts, err
}

// Ping makes one DescribeFileSystems call (MaxItems 1), without retries or
// rate limit, and returns nil iff the EFS API answered with 2xx or 4xx.
// 4xx answers count as reachable on purpose: access denied (a policy scoped
// to some file systems may deny the unscoped listing) and throttling are
// answers from a live API, and restarting the driver would not fix them; the
// calls that need the permission report it. Refused or reset connections,
// timeouts, 5xx answers and requests that could not be sent (no credentials)
// return a classified error, so Probe says not ready while the endpoint
// cannot be reached.
func (c *Client) Ping(ctx context.Context) error {
	return c.policy.ping(ctx, OpDescribeFileSystems, func(ctx context.Context) error {
		_, err := c.api.DescribeFileSystems(ctx, &sdk.DescribeFileSystemsInput{MaxItems: aws.Int32(1)})
		return err
	})
}

// ping makes one attempt of op, unpaced: nil iff the API answered 2xx or
// 4xx (see Client.Ping).
func (p *retryPolicy) ping(ctx context.Context, op string, attempt func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, p.attemptTimeout)
	defer cancel()
	start := time.Now()
	err := attempt(ctx)
	if err == nil {
		p.observer.APICall(op, OutcomeOK, time.Since(start))
		return nil
	}
	cl := p.classify(op, err)
	p.observer.APICall(op, cl.outcome, time.Since(start))
	if code := answeredStatus(err); code >= 400 && code < 500 {
		return nil
	}
	return p.wrapError(op, "(ping)", cl, err)
}

func fromDescription(d types.AccessPointDescription) AccessPoint {
	ap := AccessPoint{
		ID:             aws.ToString(d.AccessPointId),
		FileSystemID:   aws.ToString(d.FileSystemId),
		ClientToken:    aws.ToString(d.ClientToken),
		LifeCycleState: string(d.LifeCycleState),
		Tags:           fromTags(d.Tags),
	}
	if rd := d.RootDirectory; rd != nil {
		ap.Path = aws.ToString(rd.Path)
		if ci := rd.CreationInfo; ci != nil {
			ap.CreationInfo = &CreationInfo{
				OwnerUID:    aws.ToInt64(ci.OwnerUid),
				OwnerGID:    aws.ToInt64(ci.OwnerGid),
				Permissions: aws.ToString(ci.Permissions),
			}
		}
	}
	if pu := d.PosixUser; pu != nil {
		ap.PosixUser = &PosixUser{UID: aws.ToInt64(pu.Uid), GID: aws.ToInt64(pu.Gid), SecondaryGIDs: pu.SecondaryGids}
	}
	return ap
}

func toTags(m map[string]string) []types.Tag {
	if len(m) == 0 {
		return nil
	}
	tags := make([]types.Tag, 0, len(m))
	for k, v := range m {
		tags = append(tags, types.Tag{Key: aws.String(k), Value: aws.String(v)})
	}
	slices.SortFunc(tags, func(a, b types.Tag) int { return cmp.Compare(*a.Key, *b.Key) })
	return tags
}

func fromTags(tags []types.Tag) map[string]string {
	if len(tags) == 0 {
		return nil
	}
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		m[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return m
}
