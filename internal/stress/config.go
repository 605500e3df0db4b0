// Package stress is the efs-csi-stress tool: it plays Kubernetes'
// provisioner against a CSI driver (workload), optionally under emulator
// faults and with the driver killed at random (chaos), then audits the
// backend (audit) and reports (report). In embedded mode it starts the EFS
// emulator in-process and the driver as a child process itself.
package stress

import (
	"encoding/json"
	"errors"
	"fmt"
	shippediam "github.com/efs-csi/efs-csi-driver/docs/iam"
	"github.com/efs-csi/efs-csi-driver/internal/emulator/iam"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/stress/workload"
)

// Toggle is a flag that is on, off, or decided by the mode (auto).
type Toggle int

const (
	Auto Toggle = iota
	On
	Off
)

// String implements flag.Value.
func (t *Toggle) String() string {
	switch *t {
	case On:
		return "true"
	case Off:
		return "false"
	}
	return "auto"
}

// Set implements flag.Value: true/false/1/0 or auto.
func (t *Toggle) Set(s string) error {
	if s == "auto" {
		*t = Auto
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true, false or auto")
	}
	*t = Off
	if b {
		*t = On
	}
	return nil
}

// IsBoolFlag lets `--chaos` stand alone for `--chaos=true`.
func (t *Toggle) IsBoolFlag() bool { return true }

// MarshalText shows toggles readably in the JSON report.
func (t Toggle) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Config is everything the command line sets.
type Config struct {
	// Target. Embedded starts the emulator and the driver; otherwise
	// Endpoint names a running driver's socket.
	Embedded     bool     `json:"embedded"`
	Endpoint     string   `json:"endpoint,omitempty"`     // unix:///path/csi.sock
	DriverBinary string   `json:"driverBinary,omitempty"` // embedded: efs-csi-driver to run ("" = next to this binary, or PATH)
	DriverArgs   []string `json:"driverArgs,omitempty"`   // embedded: extra driver flags
	// CompareDriverArgs (embedded): run the workload twice, on a fresh
	// emulator and driver each, with DriverArgs and then with these added,
	// and compare.
	CompareDriverArgs []string `json:"compareDriverArgs,omitempty"`
	DriverCmd         string   `json:"driverCommand,omitempty"` // remote: shell command that runs the driver (for chaos)
	EFSEndpoint       string   `json:"efsEndpoint,omitempty"`   // remote: EFS API for the audit ("" = SDK defaults) and emulator control
	Region            string   `json:"region,omitempty"`
	FileSystemID      string   `json:"fileSystemId,omitempty"` // remote; several comma-separated: a class over them
	// FileSystems (embedded) is how many file systems the emulator has and
	// the class names (fileSystemId: fs-a,fs-b); AccessPointLimit (0: the
	// emulator's 10,000) is each one's limit, in the emulator and the
	// driver (--access-point-limit).
	FileSystems      int `json:"fileSystems,omitempty"`
	AccessPointLimit int `json:"accessPointLimit,omitempty"`
	// IAMPolicy (embedded) is the identity policy the emulator enforces on
	// the driver's every request (IAMPolicyManaged, the default: AWS's
	// AmazonEFSCSIDriverPolicy, what EKS users attach, with
	// docs/iam/s3files.json for S3 Files classes; IAMPolicyNone: allow
	// all; else a policy file).
	IAMPolicy   string `json:"iamPolicy,omitempty"`
	MetricsURL  string `json:"metricsUrl,omitempty"` // driver's /metrics; "" = gauges not audited
	TmpDir      string `json:"tmpDir,omitempty"`     // driver's --tmp-dir, scanned for leftovers
	DataDir     string `json:"dataDir,omitempty"`    // remote: emulator data dir, for markers ("" = none)
	Exclusive   bool   `json:"exclusive"`            // every access point on the file system belongs to the run
	KeepWorkDir bool   `json:"keepWorkDir,omitempty"`

	// Workload.
	Volumes                int               `json:"volumes"`
	Concurrency            int               `json:"concurrency"`
	Timeout                time.Duration     `json:"timeout"`
	BackoffInitial         time.Duration     `json:"backoffInitial"`
	BackoffMax             time.Duration     `json:"backoffMax"`
	DuplicateRate          float64           `json:"duplicateRate"`
	DuplicateCallers       int               `json:"duplicateCallers,omitempty"` // callers of a duplicated claim (0: 2)
	DeleteDuringCreateRate float64           `json:"deleteDuringCreateRate"`
	CancelWindow           time.Duration     `json:"cancelWindow"`
	Parameters             map[string]string `json:"parameters"` // StorageClass parameters
	Seed                   uint64            `json:"seed,omitempty"`
	MaxDuration            time.Duration     `json:"maxDuration"`

	// Faults and chaos.
	FaultProfile  string        `json:"faultProfile"` // one of Profiles() ("" = by mode)
	FaultRate     float64       `json:"faultRate"`
	Chaos         Toggle        `json:"chaos"`
	ChaosInterval time.Duration `json:"chaosInterval"`

	// Audit and reports.
	Settle     time.Duration `json:"settle"` // how long the driver may take to come to rest before an audit
	OutDir     string        `json:"outDir,omitempty"`
	ReportJSON string        `json:"reportJson,omitempty"`
	ReportHTML string        `json:"reportHtml,omitempty"`
	Progress   Toggle        `json:"progress"` // auto: a bar when stderr is a terminal, else a line every few seconds

	Logger *slog.Logger `json:"-"`
	Stdout io.Writer    `json:"-"`
	Stderr io.Writer    `json:"-"`
}

// S3Files reports whether the run's class provisions S3 Files access points
// (provisioningMode s3files-ap): the emulator then serves the file system
// through the S3 Files API, and the audit lists it there.
func (c *Config) S3Files() bool { return c.Parameters["provisioningMode"] == "s3files-ap" }

// Dirs reports whether the class provisions directory volumes (efs-dir).
func (c *Config) Dirs() bool { return c.Parameters["provisioningMode"] == "efs-dir" }

// DefaultParameters is the StorageClass the workload provisions from; the
// file system ID is the run's.
func DefaultParameters() map[string]string {
	return map[string]string{
		"provisioningMode": "efs-ap",
		"directoryPerms":   "700",
		"gidRangeStart":    "50000",
		"gidRangeEnd":      "59999",
		"basePath":         "/stress",
	}
}

// Default is the quick start: 300 volumes at concurrency 32 with duplicates,
// deletes during provisioning, lost answers and a few driver kills, well
// under a minute on 2 cores.
func Default() Config {
	return Config{
		Region:                 "us-east-1",
		Volumes:                300,
		Concurrency:            32,
		Timeout:                10 * time.Second, // external-provisioner's default --timeout
		BackoffInitial:         workload.DefaultBackoff.Initial,
		BackoffMax:             workload.DefaultBackoff.Max,
		DuplicateRate:          0.1,
		DeleteDuringCreateRate: 0.1,
		CancelWindow:           20 * time.Millisecond,
		Parameters:             DefaultParameters(),
		MaxDuration:            30 * time.Minute,
		FaultRate:              0.05,
		ChaosInterval:          300 * time.Millisecond,
		Settle:                 30 * time.Second,
		IAMPolicy:              IAMPolicyManaged,
	}
}

// The IAM policies an embedded run's emulator can enforce by name.
const (
	IAMPolicyManaged = "managed"
	IAMPolicyNone    = "none"
)

// iamPolicies are the policy texts Config.IAMPolicy names.
func (c *Config) iamPolicies() ([]string, error) {
	switch c.IAMPolicy {
	case IAMPolicyNone:
		return nil, nil
	case "", IAMPolicyManaged:
		p := []string{iam.ManagedPolicy}
		if c.S3Files() {
			p = append(p, shippediam.S3Files)
		}
		return p, nil
	}
	b, err := os.ReadFile(c.IAMPolicy)
	if err != nil {
		return nil, fmt.Errorf("--iam-policy: %w", err)
	}
	return []string{string(b)}, nil
}

// Fault profiles (faults.go says what each puts in force).
const (
	ProfileNone           = "none"
	ProfileLatency        = "latency"
	ProfileThrottle       = "throttle"
	ProfileErrors         = "errors"
	ProfileLostAnswers    = "lost-answers"
	ProfileRandomThrottle = "random-throttle"
	ProfileTokenBucket    = "token-bucket"
	ProfileThrottleMix    = "throttle-mix"
	ProfileFaultMix       = "fault-mix"
	ProfileFaultMixBucket = "fault-mix-bucket"
	ProfileListingLag     = "listing-lag"
)

// profiles names and describes each fault profile, for --help.
// profiles are the fault profiles; failing marks those whose faults the
// driver may pass on as a final create error (errors it gives up retrying),
// so that some claims never getting a volume is expected of the run.
var profiles = []struct {
	name, about string
	failing     bool
}{
	{ProfileNone, "no fault", false},
	{ProfileListingLag, "a new access point is listed and described only 1 s after its create (EFS's eventual consistency)", false},
	{ProfileLatency, "10-30 ms on every call", false},
	{ProfileThrottle, "token buckets: creates and deletes 100/s burst 20, describes 200/s burst 50", false},
	{ProfileErrors, "unapplied 500s on every call at --fault-rate", true},
	{ProfileLostAnswers, "creates and deletes applied, then their answer lost, at --fault-rate", false},
	{ProfileRandomThrottle, "429s at random on every call at --fault-rate, whatever the request rate", true},
	{ProfileTokenBucket, "slower buckets: creates and deletes 20/s burst 20, describes 50/s", false},
	{ProfileThrottleMix, "token-bucket and random-throttle together", true},
	{ProfileFaultMix, "a fault proxy's storm: creates, deletes and tags applied then answered 500 (15%), random 429s (5%) and unapplied 500s (3%) on every call", true},
	{ProfileFaultMixBucket, "fault-mix with CreateAccessPoint also limited by a token bucket of 50/s burst 50", true},
}

// FailingProfiles lists the fault profiles under which some claims never
// getting a volume is expected (see profiles).
func FailingProfiles() []string {
	var names []string
	for _, p := range profiles {
		if p.failing {
			names = append(names, p.name)
		}
	}
	return names
}

// failuresExpected says whether the profile's faults may leave some claims
// without a volume (see profiles).
func failuresExpected(profile string) bool {
	for _, p := range profiles {
		if p.name == profile {
			return p.failing
		}
	}
	return false
}

// Profiles lists the fault profile names.
func Profiles() []string {
	names := make([]string, len(profiles))
	for i, p := range profiles {
		names[i] = p.name
	}
	return names
}

// ProfileUsage describes the fault profiles in one line.
func ProfileUsage() string {
	parts := make([]string, len(profiles))
	for i, p := range profiles {
		parts[i] = p.name + " (" + p.about + ")"
	}
	return strings.Join(parts, "; ")
}

// ErrFindings: the run completed and the audit found something wrong. The
// report says what.
var ErrFindings = errors.New("audit findings")

// ErrCreatesFailed: the run completed, its audits found nothing, but claims
// (not deleted while provisioning) never got a volume: every claim, or,
// unless the fault profile makes final create errors expected, any.
var ErrCreatesFailed = errors.New("creates failed")

// resolve fills the mode-dependent defaults and rejects contradictions.
func (c *Config) resolve() error {
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(c.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if c.Parameters == nil {
		c.Parameters = DefaultParameters()
	}
	managed := c.Embedded || c.DriverCmd != ""
	switch {
	case c.Volumes < 0:
		return fmt.Errorf("--volumes %d is negative", c.Volumes)
	case c.Concurrency < 1:
		return fmt.Errorf("--concurrency must be at least 1")
	case c.Timeout <= 0:
		return fmt.Errorf("--timeout must be positive")
	case c.DuplicateRate < 0 || c.DuplicateRate > 1 || c.DeleteDuringCreateRate < 0 || c.DeleteDuringCreateRate > 1:
		return fmt.Errorf("rates must be between 0 and 1")
	case c.DuplicateCallers != 0 && c.DuplicateCallers < 2:
		return fmt.Errorf("--duplicate-callers must be at least 2")
	case c.FaultRate < 0 || c.FaultRate > 1:
		return fmt.Errorf("--fault-rate must be between 0 and 1")
	case c.FileSystems < 0 || c.AccessPointLimit < 0:
		return fmt.Errorf("--file-systems and --access-point-limit must not be negative")
	case (c.FileSystems > 1 || c.AccessPointLimit > 0) && !c.Embedded:
		return fmt.Errorf("--file-systems and --access-point-limit set up the embedded emulator: name a remote run's file systems with --file-system fs-a,fs-b")
	case c.Chaos == On && !managed:
		return fmt.Errorf("--chaos needs a driver this tool runs: --embedded or --driver-cmd")
	case c.Embedded && (c.Endpoint != "" || c.DriverCmd != "" || c.EFSEndpoint != "" || c.FileSystemID != ""):
		return fmt.Errorf("--embedded runs its own driver and emulator: drop --endpoint, --driver-cmd, --efs-endpoint and --file-system")
	case len(c.CompareDriverArgs) > 0 && !c.Embedded:
		return fmt.Errorf("--compare-driver-arg needs --embedded: each run of the comparison starts its own emulator and driver")
	case !c.Embedded && c.Endpoint == "":
		return fmt.Errorf("--endpoint is required unless --embedded")
	case !c.Embedded && c.FileSystemID == "":
		return fmt.Errorf("--file-system is required unless --embedded")
	}
	if c.FaultProfile == "" {
		c.FaultProfile = ProfileNone
		if c.Embedded {
			c.FaultProfile = ProfileLostAnswers
		}
	}
	if _, err := profile(c.FaultProfile, c.FaultRate); err != nil {
		return err
	}
	if c.FaultProfile != ProfileNone && !c.Embedded && c.EFSEndpoint == "" {
		return fmt.Errorf("--fault-profile %s needs the emulator's --efs-endpoint", c.FaultProfile)
	}
	if c.Chaos == Auto {
		c.Chaos = Off
		if c.Embedded {
			c.Chaos = On
		}
	}
	if c.ChaosInterval <= 0 {
		c.ChaosInterval = Default().ChaosInterval
	}
	if c.MaxDuration <= 0 {
		c.MaxDuration = Default().MaxDuration
	}
	if c.Embedded {
		c.Exclusive = true
	}
	return nil
}

// MarshalJSON writes the configuration as the report shows it: durations as
// "2s" rather than nanoseconds, the writers and the logger left out.
func (c Config) MarshalJSON() ([]byte, error) {
	out := map[string]any{}
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || name == "" {
			continue
		}
		x := v.Field(i)
		if opts == "omitempty" && x.IsZero() {
			continue
		}
		if d, ok := x.Interface().(time.Duration); ok {
			out[name] = d.String()
			continue
		}
		out[name] = x.Interface()
	}
	return json.Marshal(out)
}
