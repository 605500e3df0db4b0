package efs

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// Acting as another account's IAM role (cross-account provisioning): the
// SDK's AssumeRole provider, behind the SDK's credentials cache, on an STS
// client built from the same configuration as the EFS client.

// RoleSessionName names the driver's sessions in the role's account
// (CloudTrail shows it).
const RoleSessionName = "efs-csi-driver"

// DefaultRoleExpiryWindow is how long before expiry role credentials are
// refreshed by default: a call never signs with credentials about to lapse.
const DefaultRoleExpiryWindow = 5 * time.Minute

// roleSessionDuration is the lifetime asked of STS: an hour, what every
// role allows (its MaxSessionDuration is at least that).
const roleSessionDuration = time.Hour

// roleARNRE is IAM's role ARN format, any partition.
var roleARNRE = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:role/[\x21-\x7e]{1,512}$`)

// ValidRoleARN reports whether s has the format of an IAM role ARN.
func ValidRoleARN(s string) bool { return roleARNRE.MatchString(s) }

// AsRole returns a client that makes the same calls as c signed as roleARN
// (with externalID, "" for none): the credentials of c's standard chain ask
// STS for the role's, which are cached in the returned client and refreshed
// before they expire (Config.RoleExpiryWindow). It has its own pacing (the
// role's account has its own API limits) and makes no network call. Callers
// keep one per role: each holds its credentials. A malformed role ARN is
// ErrBadRequest.
//
// STS refusals classify as the EFS calls' do: AccessDenied (a role that
// does not trust the driver, a wrong external ID) is ErrAccessDenied,
// throttling ErrThrottled, 5xx ErrUnavailable (both retried), and the
// message names the role, never a credential nor the external ID.
func (c *Client) AsRole(roleARN, externalID string) (*Client, error) {
	cfg := c.cfg
	cfg.RoleARN, cfg.ExternalID = roleARN, externalID
	return newClient(c.base, cfg, c.httpClient)
}

// roleCredentials are cfg.RoleARN's, asked of STS with base's credentials.
func roleCredentials(base aws.Config, region string, cfg Config, httpClient sts.HTTPClient) aws.CredentialsProvider {
	client := sts.NewFromConfig(base, func(o *sts.Options) {
		if cfg.STSEndpoint != "" {
			o.BaseEndpoint = aws.String(cfg.STSEndpoint)
		}
		o.Region = region
		// One retry policy: the EFS call whose signing needed the
		// credentials retries a throttled or failed AssumeRole (call()).
		o.Retryer = aws.NopRetryer{}
		o.RetryMaxAttempts = 0
		o.HTTPClient = httpClient
	})
	provider := stscreds.NewAssumeRoleProvider(client, cfg.RoleARN, func(o *stscreds.AssumeRoleOptions) {
		o.RoleSessionName = RoleSessionName
		o.Duration = roleSessionDuration
		if cfg.ExternalID != "" {
			o.ExternalID = aws.String(cfg.ExternalID)
		}
	})
	return aws.NewCredentialsCache(&namedRole{next: provider, arn: cfg.RoleARN}, func(o *aws.CredentialsCacheOptions) {
		o.ExpiryWindow = positiveOr(cfg.RoleExpiryWindow, DefaultRoleExpiryWindow)
	})
}

// namedRole puts the role's ARN into the provider's errors.
type namedRole struct {
	next aws.CredentialsProvider
	arn  string
}

func (n *namedRole) Retrieve(ctx context.Context) (aws.Credentials, error) {
	creds, err := n.next.Retrieve(ctx)
	if err != nil {
		return aws.Credentials{}, fmt.Errorf("assume role %s: %w", n.arn, err)
	}
	return creds, nil
}
