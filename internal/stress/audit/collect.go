package audit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	efssdk "github.com/aws/aws-sdk-go-v2/service/efs"
	"github.com/aws/aws-sdk-go-v2/service/efs/types"

	"github.com/efs-csi/efs-csi-driver/pkg/efs"
)

// TempPrefix names the driver's temporary mount points for root directory
// removal: <tmp-dir>/efs-csi-delete-*.
const TempPrefix = "efs-csi-delete-"

// ClientOptions configure the audit's own EFS API client.
type ClientOptions struct {
	Endpoint string // "" = the SDK's default resolution (AWS_ENDPOINT_URL_EFS, the region)
	Region   string // "" = from the environment, else us-east-1
	// AnyCredentials signs with fixed dummy credentials, for the emulator.
	AnyCredentials bool
}

// NewClient builds an SDK client for audits. It retries throttles, 5xx and
// lost connections without a client-side retry quota: an audit run against a
// faulty emulator must see the truth, not give up.
func NewClient(ctx context.Context, o ClientOptions) (*efssdk.Client, error) {
	cfg, err := loadConfig(ctx, o)
	if err != nil {
		return nil, err
	}
	return efssdk.NewFromConfig(cfg, func(eo *efssdk.Options) {
		if o.Endpoint != "" {
			eo.BaseEndpoint = aws.String(o.Endpoint)
		}
	}), nil
}

// loadConfig is the audit clients' AWS configuration: retries without a
// client-side retry quota, dummy credentials on request.
func loadConfig(ctx context.Context, o ClientOptions) (aws.Config, error) {
	opts := []func(*config.LoadOptions) error{
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(so *retry.StandardOptions) {
				so.MaxAttempts = 20
				so.MaxBackoff = time.Second
				so.RateLimiter = ratelimit.None
			})
		}),
	}
	if o.Region != "" {
		opts = append(opts, config.WithRegion(o.Region))
	}
	if o.AnyCredentials {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("stress", "stress", "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("audit: AWS config: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return cfg, nil
}

// ListAccessPoints pages through every access point of fsID.
func ListAccessPoints(ctx context.Context, c *efssdk.Client, fsID string) ([]efs.AccessPoint, error) {
	var out []efs.AccessPoint
	p := efssdk.NewDescribeAccessPointsPaginator(c, &efssdk.DescribeAccessPointsInput{
		FileSystemId: aws.String(fsID), MaxResults: aws.Int32(1000),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("audit: list access points of %s: %w", fsID, err)
		}
		for _, d := range page.AccessPoints {
			out = append(out, fromSDK(d))
		}
	}
	return out, nil
}

// ErrNoAccessPoint: DescribeAccessPoint found nothing with that ID.
var ErrNoAccessPoint = errors.New("access point not found")

// DescribeAccessPoint reads one access point.
func DescribeAccessPoint(ctx context.Context, c *efssdk.Client, id string) (*efs.AccessPoint, error) {
	out, err := c.DescribeAccessPoints(ctx, &efssdk.DescribeAccessPointsInput{AccessPointId: aws.String(id)})
	var nf *types.AccessPointNotFound
	switch {
	case errors.As(err, &nf):
		return nil, fmt.Errorf("%w: %s", ErrNoAccessPoint, id)
	case err != nil:
		return nil, fmt.Errorf("audit: describe %s: %w", id, err)
	case len(out.AccessPoints) != 1:
		return nil, fmt.Errorf("%w: %s (%d answers)", ErrNoAccessPoint, id, len(out.AccessPoints))
	}
	ap := fromSDK(out.AccessPoints[0])
	return &ap, nil
}

func fromSDK(d types.AccessPointDescription) efs.AccessPoint {
	ap := efs.AccessPoint{
		ID: aws.ToString(d.AccessPointId), FileSystemID: aws.ToString(d.FileSystemId),
		ClientToken: aws.ToString(d.ClientToken), LifeCycleState: string(d.LifeCycleState),
		Tags: map[string]string{},
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
	return ap
}

var octalEscape = regexp.MustCompile(`\\[0-3][0-7][0-7]`)

// TempMounts lists the mount points in a mountinfo table (proc(5)) whose last
// element is a driver temporary mount point, below dir when dir is not "".
func TempMounts(mountinfo io.Reader, dir string) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(mountinfo)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		mp := octalEscape.ReplaceAllStringFunc(f[4], func(e string) string {
			v, _ := strconv.ParseUint(e[1:], 8, 8)
			return string([]byte{byte(v)})
		})
		if !strings.HasPrefix(filepath.Base(mp), TempPrefix) {
			continue
		}
		if dir != "" && !strings.HasPrefix(mp, filepath.Clean(dir)+"/") {
			continue
		}
		out = append(out, mp)
	}
	return out, sc.Err()
}

// ProcessTempMounts reads this process's mount table.
func ProcessTempMounts(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return TempMounts(f, dir)
}

// TempDirs lists the driver's temporary mount directories left in dir.
func TempDirs(dir string) ([]string, error) {
	return filepath.Glob(filepath.Join(dir, TempPrefix+"*"))
}

// Scrape reads a Prometheus text exposition and returns every sample, keyed
// by its name and labels as written (`name` or `name{a="b"}`).
func Scrape(ctx context.Context, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return ParseMetrics(resp.Body)
}

// ParseMetrics parses the Prometheus text format's sample lines; comments
// and timestamps are ignored.
func ParseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		// The value follows the series; label values may hold spaces, so
		// split after the closing brace when there is one.
		series, rest := line, ""
		if i := strings.LastIndexByte(line, '}'); i >= 0 {
			series, rest = line[:i+1], line[i+1:]
		} else if i := strings.IndexByte(line, ' '); i >= 0 {
			series, rest = line[:i], line[i:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("metrics: no value in %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: value in %q: %w", line, err)
		}
		out[series] = v
	}
	return out, sc.Err()
}

// Sum adds the samples of one metric over all its label sets, optionally
// only those whose series contains every one of the label matchers
// (`code="OK"`).
func Sum(samples map[string]float64, name string, matchers ...string) float64 {
	var s float64
	for series, v := range samples {
		if series != name && !strings.HasPrefix(series, name+"{") {
			continue
		}
		ok := true
		for _, m := range matchers {
			ok = ok && strings.Contains(series, m)
		}
		if ok {
			s += v
		}
	}
	return s
}
