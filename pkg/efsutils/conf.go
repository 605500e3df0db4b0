// Package efsutils is the efs-utils runtime of the node plugin: it writes
// efs-utils.conf and s3files-utils.conf from the driver's flags (as the
// upstream driver does), restores the image's static files into the
// configuration directory, links /etc/amazon/efs to it, and supervises
// efs-utils' watchdog (amazon-efs-mount-watchdog), which restarts the TLS
// tunnels of live mounts and kills those of mounts that are gone.
//
// The configuration directory and efs-utils' state directory (/var/run/efs:
// one state file per TLS mount, naming its tunnel's PID and port) are host
// directories in the chart. A tunnel runs in the driver's container and dies
// with it; the state files survive, so the watchdog of the next driver
// restarts the tunnels of mounts that are still live, on their ports.
package efsutils

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ErrBadOverride: an --efs-utils-conf-overrides or
// --s3files-utils-conf-overrides entry is malformed, names a section or key
// its file does not have, or holds a value efs-utils cannot read.
var ErrBadOverride = errors.New("bad efs-utils configuration override")

// The files efs-utils reads in its configuration directory: mount.efs and
// the watchdog efs-utils.conf, mount.s3files s3files-utils.conf.
const (
	ConfFileName        = "efs-utils.conf"
	S3FilesConfFileName = "s3files-utils.conf"
)

// Port range efs-utils picks TLS tunnel ports from. The upper bound is
// efs-utils 3.2.0's own; upstream raises any lower $PORT_RANGE_UPPER_BOUND
// to it (a narrower range runs out of ports with many mounts), and so does
// Render.
const (
	DefaultPortRangeLower = 20049
	MinPortRangeUpper     = 21049
)

// ClientSource is what efs-utils reports as its caller ([client-info]).
const ClientSource = "k8s"

// Settings is what the two files are rendered from.
type Settings struct {
	// Region is written as [mount] region; "" leaves it to efs-utils (it
	// asks the instance metadata service).
	Region string
	// FIPS sets [mount] fips_mode_enabled (the chart's useFIPS, upstream's
	// $FIPS_ENABLED).
	FIPS bool
	// FIPSEndpoint is $AWS_USE_FIPS_ENDPOINT=true, which efs-utils reads
	// from its environment as a second switch to FIPS mode: not written,
	// only reported in Conf.FIPS.
	FIPSEndpoint bool
	// PortRangeLower and PortRangeUpper bound the TLS tunnel ports; 0 is
	// efs-utils' default (20049, 21049), an upper bound under 21049 is
	// raised to it. Lower must be below Upper.
	PortRangeLower, PortRangeUpper int
	// CloudWatchLog sets efs-utils.conf's [cloudwatch-log] enabled
	// (--efs-cloudwatch-log-enabled).
	CloudWatchLog bool
	// S3FilesCloudWatchLog and S3FilesCloudWatchMetrics set
	// s3files-utils.conf's [cloudwatch-log] enabled and [proxy]
	// metrics_enabled (--s3files-cloudwatch-log-enabled,
	// --s3files-cloudwatch-metrics-enabled; upstream's default is true).
	S3FilesCloudWatchLog, S3FilesCloudWatchMetrics bool
	// Debug turns efs-utils', stunnel's and efs-proxy's debug logging on
	// (--debug-logs).
	Debug bool
	// Overrides and S3FilesOverrides are applied last to efs-utils.conf and
	// s3files-utils.conf; see ParseOverrides and Render.
	Overrides, S3FilesOverrides []Override
}

// Conf is what Render makes of Settings.
type Conf struct {
	EFSUtils, S3FilesUtils []byte // efs-utils.conf, s3files-utils.conf
	// WatchdogEnabled is efs-utils.conf's [mount-watchdog] enabled: a
	// disabled watchdog exits at once, so it is not supervised.
	WatchdogEnabled bool
	// FIPS: efs-utils' tunnels run in FIPS mode (fips_mode_enabled, or
	// $AWS_USE_FIPS_ENDPOINT). stunnel then needs an OpenSSL FIPS provider.
	FIPS bool
	// CAFile is the CA bundle the TLS tunnels verify EFS with in
	// Settings.Region (its region section's stunnel_cafile, else
	// [mount]'s); "" when the region is left to efs-utils.
	CAFile string
	// Notes say what Render changed in Settings (a raised port bound), for
	// the log.
	Notes []string
}

// Override sets one key of a file.
type Override struct{ Section, Key, Value string }

func (o Override) String() string { return o.Section + ":" + o.Key + "=" + o.Value }

// ParseOverrides parses --efs-utils-conf-overrides (and its s3files-utils
// twin): comma-separated section:key=value entries (blank entries are
// skipped, spaces around the parts trimmed), as upstream's. The value
// cannot hold a comma, a newline or a control character; section and key
// are letters, digits, '_', '-' and '.'. Whether the section and key exist,
// and whether efs-utils can read the value, is checked by Render.
func ParseOverrides(s string) ([]Override, error) {
	var out []Override
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		sec, kv, ok := strings.Cut(e, ":")
		k, v, ok2 := strings.Cut(kv, "=")
		o := Override{strings.TrimSpace(sec), strings.TrimSpace(k), strings.TrimSpace(v)}
		switch {
		case !ok || !ok2:
			return nil, fmt.Errorf("%w %q: want section:key=value", ErrBadOverride, e)
		case !validName(o.Section) || !validName(o.Key):
			return nil, fmt.Errorf("%w %q: section and key are letters, digits, '_', '-' and '.'", ErrBadOverride, e)
		case strings.ContainsFunc(o.Value, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			return nil, fmt.Errorf("%w %q: the value holds a control character", ErrBadOverride, e)
		}
		out = append(out, o)
	}
	return out, nil
}

func validName(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.')
	})
}

// kind is how efs-utils reads a key, so that an override it cannot read is
// refused at start rather than failing every mount (configparser's getint
// and getboolean raise) or crash-looping the watchdog.
type kind int

const (
	kString kind = iota
	kInt         // configparser getint: an integer, here >= min
	kBool        // configparser getboolean
	kOctal       // int(value, 8): state_file_dir_mode
	kRegion      // a region name
	kFormat      // dns_name_format: must name {fs_id}
)

// entry is one key of a file; an unset entry is written commented out,
// with its example value, as efs-utils ships it.
type entry struct {
	comment  []string // lines above the key, without "# "
	key      string
	value    string
	set      bool
	kind     kind
	min, max int // kInt bounds; max 0 = none
}

type section struct {
	name    string
	entries []entry
}

func set(k, v string) entry   { return entry{key: k, value: v, set: true} }
func unset(k, v string) entry { return entry{key: k, value: v} }

func (e entry) note(lines ...string) entry { e.comment = lines; return e }
func (e entry) is(k kind) entry            { e.kind = k; return e }
func (e entry) int(min, max int) entry     { e.kind, e.min, e.max = kInt, min, max; return e }

func setOrUnset(on bool, k, v string) entry {
	if on {
		return set(k, v)
	}
	return unset(k, v)
}

// The CA bundles the region sections name: efs-utils' own for the
// commercial and China partitions, the system bundle (Amazon Linux's path,
// which the image links to its own bundle) for the others.
const (
	efsUtilsCAFile = "/etc/amazon/efs/efs-utils.crt"
	systemCAFile   = "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"
)

// region is a [mount.<region>] section. efs-utils reads dns_name_suffix and
// stunnel_cafile from it (falling back to [mount] and efs-utils.crt), so
// both can be overridden in every region section; one the file does not
// set is written commented out.
func region(name, suffix, cafile string) section {
	return section{"mount." + name, []entry{
		set("dns_name_suffix", suffix),
		setOrUnset(cafile != "", "stunnel_cafile", cmp.Or(cafile, efsUtilsCAFile)),
	}}
}

// regions are efs-utils 3.2.0's region sections (dist/efs-utils.conf,
// dist/s3files-utils.conf, upstream's templates): without them mount.efs
// builds DNS names with amazonaws.com in partitions that use another
// suffix. cn is the China partition's suffix, which S3 Files names apart.
func regions(cn string) []section {
	return []section{
		region("cn-north-1", cn, ""),
		region("cn-northwest-1", cn, ""),
		region("eu-isoe-west-1", "cloud.adc-e.uk", systemCAFile),
		region("eusc-de-east-1", "amazonaws.eu", systemCAFile),
		region("us-iso-east-1", "c2s.ic.gov", systemCAFile),
		region("us-iso-west-1", "c2s.ic.gov", systemCAFile),
		region("us-isob-east-1", "sc2s.sgov.gov", systemCAFile),
		region("us-isob-west-1", "sc2s.sgov.gov", systemCAFile),
		region("us-isof-east-1", "csp.hci.ic.gov", systemCAFile),
		region("us-isof-south-1", "csp.hci.ic.gov", systemCAFile),
	}
}

// defaults is the [DEFAULT] section both files share.
func defaults(s Settings) section {
	return section{"DEFAULT", []entry{
		set("logging_level", level(s.Debug)),
		set("logging_max_bytes", "1048576").int(0, 0),
		set("logging_file_count", "10").int(0, 0),
		set("state_file_dir_mode", "750").is(kOctal).note("mode for /var/run/efs and subdirectories in octal"),
	}}
}

func level(debug bool) string {
	if debug {
		return "DEBUG"
	}
	return "INFO"
}

// mountSection is [mount] of both files: efs-utils 3.2.0's keys, the
// driver's settings on theirs. S3 Files has no stunnel, hence no
// stunnel_debug_enabled.
func mountSection(s Settings, dnsFormat, dnsSuffix string, s3 bool) section {
	b := strconv.FormatBool
	es := []entry{
		set("dns_name_format", dnsFormat).is(kFormat),
		set("dns_name_suffix", dnsSuffix),
		setOrUnset(s.Region != "", "region", cmp.Or(s.Region, "us-east-1")).is(kRegion).
			note("The region of the file system when mounting from on-premises or cross region."),
	}
	if !s3 {
		es = append(es, set("stunnel_debug_enabled", b(s.Debug)).is(kBool))
	}
	return section{"mount", append(es,
		unset("stunnel_logs_file", "/var/log/amazon/efs/{fs_id}.stunnel.log").
			note("Uncomment the below option to save all stunnel logs for a file system to the same file"),
		set("stunnel_cafile", efsUtilsCAFile),
		set("stunnel_check_cert_hostname", "true").is(kBool).
			note("Validate the certificate hostname on mount. This option is not supported by certain stunnel versions."),
		set("stunnel_check_cert_validity", "false").is(kBool).
			note("Use OCSP to check certificate validity. This option is not supported by certain stunnel versions."),
		set("fips_mode_enabled", b(s.FIPS)).is(kBool).
			note("Set to true to use FIPS-mode for stunnel. Enabling this will change the AWS SDK client to use FIPS as well."),
		set("port_range_lower_bound", strconv.Itoa(s.PortRangeLower)).int(1, 65535).
			note("Define the port range that the TLS tunnel will choose from"),
		set("port_range_upper_bound", strconv.Itoa(s.PortRangeUpper)).int(1, 65535),
		set("optimize_readahead", "true").is(kBool).note("Optimize read_ahead_kb for Linux 5.4+"),
		set("fall_back_to_mount_target_ip_address_enabled", "true").is(kBool).
			note("By default, we enable the feature to fallback to mount with mount target ip address when dns name cannot be resolved"),
		set("disable_fetch_ec2_metadata_token", "false").is(kBool).
			note("By default, we use IMDSv2 to get the instance metadata, set this to true if you want to disable IMDSv2 usage"),
		set("retry_nfs_mount_command", "true").is(kBool).note(
			"By default, we enable efs-utils to retry failed mount.nfs command that due to (1) connection reset by peer (2) the",
			"mount.nfs is not finished within 'retry_nfs_mount_command_timeout_sec'. If the retry count is set as N, initial N - 1",
			"mount attempts will timeout if the command does not finish within 'retry_nfs_mount_command_timeout_sec' sec.",
			"The last mount attempt will keep the existing behavior of mount.nfs.",
			""),
		set("retry_nfs_mount_command_count", "3").int(0, 0),
		set("retry_nfs_mount_command_timeout_sec", "15").int(0, 0),
	)}
}

// tail is [client-info] and [cloudwatch-log] of both files.
func tail(cloudWatchLog bool) []section {
	return []section{
		{"client-info", []entry{set("source", ClientSource)}},
		{"cloudwatch-log", []entry{
			set("enabled", strconv.FormatBool(cloudWatchLog)).is(kBool),
			set("log_group_name", "/aws/efs/utils"),
			set("retention_in_days", "14").int(0, 0).note(
				"Possible values are : 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1827, and 3653",
				"Comment this config to prevent log deletion"),
		}},
	}
}

// efsTemplate is efs-utils 3.2.0's dist/efs-utils.conf with the driver's
// settings and upstream's [client-info].
func efsTemplate(s Settings) []section {
	secs := []section{defaults(s), mountSection(s, "{az}.{fs_id}.efs.{region}.{dns_name_suffix}", "amazonaws.com", false)}
	secs = append(secs, regions("amazonaws.com.cn")...)
	secs = append(secs, section{"mount-watchdog", []entry{
		set("enabled", "true").is(kBool),
		// getint, then time.sleep: 0 would make the watchdog spin.
		set("poll_interval_sec", "1").int(1, 0),
		set("unmount_count_for_consistency", "5").int(0, 0),
		set("unmount_grace_period_sec", "30").int(0, 0),
		set("tls_cert_renewal_interval_min", "60").int(1, 0).
			note("Set client auth/access point certificate renewal rate. Minimum value is 1 minute."),
		set("stunnel_health_check_enabled", "true").is(kBool).
			note("Periodically check the health of stunnel to make sure the connection is fully established"),
		set("stunnel_health_check_interval_min", "5").int(1, 0),
		set("stunnel_health_check_command_timeout_sec", "30").int(1, 0),
	}})
	return append(secs, tail(s.CloudWatchLog)...)
}

// s3filesTemplate is efs-utils 3.2.0's dist/s3files-utils.conf with the
// driver's settings and upstream's [client-info]. The watchdog reads
// efs-utils.conf only, for every mount type.
func s3filesTemplate(s Settings) []section {
	secs := []section{defaults(s), mountSection(s, "{az_id}.{fs_id}.s3files.{region}.{dns_name_suffix}", "on.aws", true)}
	secs = append(secs, regions("on.amazonwebservices.com.cn")...)
	proxy := []entry{
		set("proxy_logging_level", level(s.Debug)),
		set("proxy_logging_max_bytes", "1048576").int(0, 0),
		set("proxy_logging_file_count", "10").int(0, 0),
		set("metrics_enabled", strconv.FormatBool(s.S3FilesCloudWatchMetrics)).is(kBool).
			note("CloudWatch metric emission from proxy, set to false to disable / opt-out"),
	}
	for i, k := range []struct{ key, value string }{
		{"read_bypass_denylist_size", "10000"}, {"read_bypass_denylist_ttl_seconds", "300"},
		{"readahead_cache_enabled", "true"}, {"s3_read_chunk_size_bytes", "1048576"},
		{"readahead_cache_init_memory_size_mb", "10"}, {"readahead_cache_max_memory_size_mb", "1024"},
		{"readahead_init_window_size_bytes", "8388608"}, {"readahead_max_window_size_bytes", "8388608"},
		{"readahead_cache_eviction_interval_ms", "500"}, {"readahead_cache_target_utilization_percent", "80"},
		{"read_bypass_max_in_flight_s3_bytes", "268435456"},
	} {
		e := unset(k.key, k.value).int(0, 0)
		if k.key == "readahead_cache_enabled" {
			e = unset(k.key, k.value).is(kBool)
		}
		if i == 0 {
			e = e.note("Readbypass parameters, Uncomment the below options if you want override default value")
		}
		proxy = append(proxy, e)
	}
	secs = append(secs, section{"proxy", proxy})
	return append(secs, tail(s.S3FilesCloudWatchLog)...)
}

// Render validates s and returns both files. An override must name a
// section and a key its file has (a commented-out key counts: the override
// sets and uncomments it), as upstream's overrides do; its value must be
// one efs-utils can read where it reads it (an integer, a boolean, octal),
// and a '%' must be written as configparser reads it ('%%', or a
// '%(key)s' reference to a key of the section or [DEFAULT]): efs-utils
// reads both files with configparser's interpolation, and upstream writes
// the value as given, so that a lone '%' makes every mount fail. The value
// is never rewritten: what works in upstream's file works the same here.
func Render(s Settings) (Conf, error) {
	var c Conf
	if s.PortRangeLower == 0 {
		s.PortRangeLower = DefaultPortRangeLower
	}
	if s.PortRangeUpper < MinPortRangeUpper {
		if s.PortRangeUpper != 0 {
			c.Notes = append(c.Notes, fmt.Sprintf("TLS port range upper bound %d raised to efs-utils' %d, as upstream does",
				s.PortRangeUpper, MinPortRangeUpper))
		}
		s.PortRangeUpper = MinPortRangeUpper
	}
	if s.PortRangeLower < 1 || s.PortRangeUpper > 65535 || s.PortRangeLower >= s.PortRangeUpper {
		return Conf{}, fmt.Errorf("efs-utils TLS port range %d-%d: want 1 <= lower < upper <= 65535", s.PortRangeLower, s.PortRangeUpper)
	}
	if !validRegion(s.Region) && s.Region != "" {
		return Conf{}, fmt.Errorf("region %q: not a region name", s.Region)
	}
	efs, err := apply(ConfFileName, efsTemplate(s), s.Overrides)
	if err != nil {
		return Conf{}, err
	}
	s3, err := apply(S3FilesConfFileName, s3filesTemplate(s), s.S3FilesOverrides)
	if err != nil {
		return Conf{}, err
	}
	c.EFSUtils, c.S3FilesUtils = format(ConfFileName, efs), format(S3FilesConfFileName, s3)
	c.WatchdogEnabled = boolValue(resolved(efs, "mount-watchdog", "enabled"))
	c.FIPS = boolValue(resolved(efs, "mount", "fips_mode_enabled")) || s.FIPSEndpoint
	if s.Region != "" {
		// As efs-utils picks it: the region's section if the file has one
		// (efs-utils.crt when that section names none), else [mount].
		c.CAFile = resolved(efs, "mount", "stunnel_cafile")
		if slices.ContainsFunc(efs, func(sec section) bool { return sec.name == "mount."+s.Region }) {
			c.CAFile = cmp.Or(resolved(efs, "mount."+s.Region, "stunnel_cafile"), efsUtilsCAFile)
		}
	}
	return c, nil
}

var regionRE = regexp.MustCompile(`^[a-z]{2,}(-[a-z0-9]+)+$`)

func validRegion(r string) bool { return regionRE.MatchString(r) }

// apply applies overrides, in order, to secs and checks every value efs-utils
// will read.
func apply(file string, secs []section, overrides []Override) ([]section, error) {
	for _, o := range overrides {
		i := slices.IndexFunc(secs, func(sec section) bool { return sec.name == o.Section })
		if i < 0 {
			return nil, fmt.Errorf("%w %q: %s has no section [%s]", ErrBadOverride, o, file, o.Section)
		}
		j := slices.IndexFunc(secs[i].entries, func(e entry) bool { return e.key == o.Key })
		if j < 0 {
			return nil, fmt.Errorf("%w %q: %s has no key %q in [%s]", ErrBadOverride, o, file, o.Key, o.Section)
		}
		e := &secs[i].entries[j]
		e.value, e.set = o.Value, true
		if err := check(secs, secs[i].name, *e); err != nil {
			return nil, fmt.Errorf("%w %q in %s: %v", ErrBadOverride, o, file, err)
		}
	}
	// The bounds may each be valid and still not make a range.
	lo, _ := strconv.Atoi(resolved(secs, "mount", "port_range_lower_bound"))
	hi, _ := strconv.Atoi(resolved(secs, "mount", "port_range_upper_bound"))
	if lo >= hi {
		return nil, fmt.Errorf("%w: %s TLS port range %d-%d is empty (port_range_lower_bound must be below port_range_upper_bound)",
			ErrBadOverride, file, lo, hi)
	}
	return secs, nil
}

// check says why efs-utils cannot read e in section sec, or nil.
func check(secs []section, sec string, e entry) error {
	v, err := interpolate(secs, sec, e.value, 0)
	if err != nil {
		return err
	}
	switch e.kind {
	case kInt:
		n, err := strconv.Atoi(v)
		if err != nil || !intRE.MatchString(v) {
			return fmt.Errorf("efs-utils reads %s as an integer: %q is not one", e.key, v)
		}
		if n < e.min || e.max > 0 && n > e.max {
			if e.max > 0 {
				return fmt.Errorf("%s must be %d to %d", e.key, e.min, e.max)
			}
			return fmt.Errorf("%s must be at least %d", e.key, e.min)
		}
	case kBool:
		if _, ok := configBools[strings.ToLower(v)]; !ok {
			return fmt.Errorf("efs-utils reads %s as a boolean (true/false, yes/no, on/off, 1/0): %q is not one", e.key, v)
		}
	case kOctal:
		if _, err := strconv.ParseUint(v, 8, 32); err != nil {
			return fmt.Errorf("efs-utils reads %s as an octal mode: %q is not one", e.key, v)
		}
	case kRegion:
		if !validRegion(v) {
			return fmt.Errorf("%q is not a region name", v)
		}
	case kFormat:
		if !strings.Contains(v, "{fs_id}") {
			return fmt.Errorf("%s must include {fs_id}", e.key)
		}
	}
	return nil
}

// configBools are configparser's boolean states.
var configBools = map[string]bool{"1": true, "yes": true, "true": true, "on": true, "0": false, "no": false, "false": false, "off": false}

func boolValue(v string) bool { return configBools[strings.ToLower(v)] }

var (
	refRE = regexp.MustCompile(`^%\(([^)]+)\)s`)
	// intRE is what both Python's int() and strconv.Atoi accept (int() also
	// takes "1_000", which Atoi does not).
	intRE = regexp.MustCompile(`^[+-]?[0-9]+$`)
)

// interpolate resolves v, the value of a key of section sec, as
// configparser's BasicInterpolation does when efs-utils reads it: "%%" is
// '%', "%(name)s" the value of name in sec or [DEFAULT] (resolved in turn,
// at most 10 deep); any other '%' is an error there, so it is one here.
func interpolate(secs []section, sec, v string, depth int) (string, error) {
	if depth > 10 {
		return "", errors.New("'%(...)s' references nest deeper than configparser's 10")
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(v, '%')
		if i < 0 {
			b.WriteString(v)
			return b.String(), nil
		}
		b.WriteString(v[:i])
		v = v[i:]
		switch {
		case strings.HasPrefix(v, "%%"):
			b.WriteByte('%')
			v = v[2:]
		case strings.HasPrefix(v, "%("):
			m := refRE.FindStringSubmatch(v)
			if m == nil {
				return "", fmt.Errorf("efs-utils reads the file with configparser interpolation: %q is not a %%(key)s reference (a literal '%%' is written '%%%%')", v)
			}
			ref, ok := lookup(secs, sec, strings.ToLower(m[1]))
			if !ok {
				return "", fmt.Errorf("efs-utils reads the file with configparser interpolation: %%(%s)s names no key of [%s] or [DEFAULT] (a literal '%%' is written '%%%%')", m[1], sec)
			}
			r, err := interpolate(secs, sec, ref, depth+1)
			if err != nil {
				return "", err
			}
			b.WriteString(r)
			v = v[len(m[0]):]
		default:
			return "", errors.New("efs-utils reads the file with configparser interpolation: a literal '%' is written '%%'")
		}
	}
}

// lookup is configparser's view of key in section sec: set there, else in
// [DEFAULT].
func lookup(secs []section, sec, key string) (string, bool) {
	for _, name := range []string{sec, "DEFAULT"} {
		for _, s := range secs {
			if s.name != name {
				continue
			}
			for _, e := range s.entries {
				if e.set && e.key == key {
					return e.value, true
				}
			}
		}
	}
	return "", false
}

// value is key's value as written in sec ("" when unset); resolved is it
// after interpolation, as efs-utils reads it.
func value(secs []section, sec, key string) string {
	for _, s := range secs {
		if s.name == sec {
			for _, e := range s.entries {
				if e.key == key && e.set {
					return e.value
				}
			}
		}
	}
	return ""
}

func resolved(secs []section, sec, key string) string {
	v, _ := interpolate(secs, sec, value(secs, sec, key), 0)
	return v
}

func format(file string, secs []section) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# efs-utils 3.2.0's dist/%s, written by the EFS CSI driver at startup from its flags;\n# edits are overwritten.\n", file)
	for _, sec := range secs {
		fmt.Fprintf(&b, "\n[%s]\n", sec.name)
		for _, e := range sec.entries {
			for _, c := range e.comment {
				b.WriteString(strings.TrimRight("# "+c, " ") + "\n")
			}
			if !e.set {
				b.WriteString("#")
			}
			fmt.Fprintf(&b, "%s = %s\n", e.key, e.value)
		}
	}
	return []byte(b.String())
}

// ReadConf parses a file as efs-utils' configparser would for the keys
// written here (no continuation lines, no interpolation): section -> key ->
// value. Commented keys are absent. For tests and the test mount helper.
func ReadConf(data []byte) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	var cur map[string]string
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			name := line[1 : len(line)-1]
			if out[name] == nil {
				out[name] = map[string]string{}
			}
			cur = out[name]
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || cur == nil {
				return nil, fmt.Errorf("line %d: %q is not key = value in a section", n+1, line)
			}
			cur[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out, nil
}
