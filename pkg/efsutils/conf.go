// Package efsutils is the efs-utils runtime of the node plugin: it writes
// efs-utils.conf from the driver's flags (as the upstream driver does),
// restores the image's static files into the configuration directory, links
// /etc/amazon/efs to it, and supervises efs-utils' watchdog
// (amazon-efs-mount-watchdog), which restarts the TLS tunnels of live mounts
// and kills those of mounts that are gone.
//
// The configuration directory and efs-utils' state directory (/var/run/efs:
// one state file per TLS mount, naming its tunnel's PID and port) are host
// directories in the chart. A tunnel runs in the driver's container and dies
// with it; the state files survive, so the watchdog of the next driver
// restarts the tunnels of mounts that are still live, on their ports.
package efsutils

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrBadOverride: an --efs-utils-conf-overrides entry is malformed or names
// a section or key efs-utils.conf does not have.
var ErrBadOverride = errors.New("bad efs-utils.conf override")

// ConfFileName is the file efs-utils reads in its configuration directory.
const ConfFileName = "efs-utils.conf"

// Port range efs-utils picks TLS tunnel ports from by default.
const (
	DefaultPortRangeLower = 20049
	DefaultPortRangeUpper = 20449
)

// ClientSource is what efs-utils reports as its caller ([client-info]).
const ClientSource = "k8s"

// Settings is what efs-utils.conf is rendered from.
type Settings struct {
	// Region is written as [mount] region; "" leaves it to efs-utils (it
	// asks the instance metadata service).
	Region string
	// FIPS sets [mount] fips_mode_enabled (the chart's useFIPS).
	FIPS bool
	// PortRangeLower and PortRangeUpper bound the TLS tunnel ports; 0 is
	// efs-utils' default (20049, 20449). Lower must be below Upper.
	PortRangeLower, PortRangeUpper int
	// CloudWatchLog sets [cloudwatch-log] enabled (--efs-cloudwatch-log-enabled).
	CloudWatchLog bool
	// Debug turns efs-utils' and stunnel's debug logging on (--debug-logs).
	Debug bool
	// Overrides are applied last; see ParseOverrides.
	Overrides []Override
}

// Override sets one key of efs-utils.conf.
type Override struct{ Section, Key, Value string }

func (o Override) String() string { return o.Section + ":" + o.Key + "=" + o.Value }

// ParseOverrides parses --efs-utils-conf-overrides: comma-separated
// section:key=value entries (blank entries are skipped, spaces around the
// parts trimmed). The value cannot hold a comma, a newline or a control
// character; section and key are letters, digits, '_', '-' and '.'.
// Whether the section and key exist is checked by Render.
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

// entry is one key of the file; an unset entry is written commented out,
// with its example value, as efs-utils ships it.
type entry struct {
	comment string // lines above the key, without "# "
	key     string
	value   string
	set     bool
}

type section struct {
	name    string
	entries []entry
}

func set(k, v string) entry        { return entry{key: k, value: v, set: true} }
func unset(k, v string) entry      { return entry{key: k, value: v} }
func note(c string, e entry) entry { e.comment = c; return e }

// template is efs-utils' dist/efs-utils.conf with the driver's settings.
func template(s Settings) []section {
	b := strconv.FormatBool
	level, region := "INFO", unset("region", "us-east-1")
	if s.Debug {
		level = "DEBUG"
	}
	if s.Region != "" {
		region = set("region", s.Region)
	}
	cw := unset("enabled", "true")
	if s.CloudWatchLog {
		cw = set("enabled", "true")
	}
	return []section{
		{"DEFAULT", []entry{
			set("logging_level", level), set("logging_max_bytes", "1048576"), set("logging_file_count", "10"),
			note("mode for /var/run/efs and subdirectories in octal", set("state_file_dir_mode", "750")),
		}},
		{"mount", []entry{
			set("dns_name_format", "{az}.{fs_id}.efs.{region}.{dns_name_suffix}"),
			set("dns_name_suffix", "amazonaws.com"),
			note("The region of the file system when mounting from on-premises or cross region.", region),
			set("stunnel_debug_enabled", b(s.Debug)),
			note("Uncomment the below option to save all stunnel logs for a file system to the same file",
				unset("stunnel_logs_file", "/var/log/amazon/efs/{fs_id}.stunnel.log")),
			set("stunnel_cafile", "/etc/amazon/efs/efs-utils.crt"),
			note("Validate the certificate hostname on mount. This option is not supported by certain stunnel versions.",
				set("stunnel_check_cert_hostname", "true")),
			note("Use OCSP to check certificate validity. This option is not supported by certain stunnel versions.",
				set("stunnel_check_cert_validity", "false")),
			note("Define the port range that the TLS tunnel will choose from",
				set("port_range_lower_bound", strconv.Itoa(s.PortRangeLower))),
			set("port_range_upper_bound", strconv.Itoa(s.PortRangeUpper)),
			note("Use FIPS-validated cryptography for the TLS tunnel", set("fips_mode_enabled", b(s.FIPS))),
			note("Optimize read_ahead_kb for Linux 5.4+", set("optimize_readahead", "true")),
			note("Fall back to the mount target IP address when the DNS name cannot be resolved",
				set("fall_back_to_mount_target_ip_address_enabled", "true")),
			note("Set to true to stop using IMDSv2 for the instance metadata",
				set("disable_fetch_ec2_metadata_token", "false")),
		}},
		{"mount.cn-north-1", []entry{set("dns_name_suffix", "amazonaws.com.cn")}},
		{"mount.cn-northwest-1", []entry{set("dns_name_suffix", "amazonaws.com.cn")}},
		{"mount.us-iso-east-1", []entry{set("dns_name_suffix", "c2s.ic.gov"),
			set("stunnel_cafile", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem")}},
		{"mount.us-isob-east-1", []entry{set("dns_name_suffix", "sc2s.sgov.gov"),
			set("stunnel_cafile", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem")}},
		{"mount-watchdog", []entry{
			set("enabled", "true"), set("poll_interval_sec", "1"), set("unmount_grace_period_sec", "30"),
			note("Set client auth/access point certificate renewal rate. Minimum value is 1 minute.",
				set("tls_cert_renewal_interval_min", "60")),
		}},
		{"client-info", []entry{set("source", ClientSource)}},
		{"cloudwatch-log", []entry{
			cw, set("log_group_name", "/aws/efs/utils"),
			note("Possible values are : 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1827, and 3653",
				set("retention_in_days", "14")),
		}},
	}
}

// Render validates s and returns efs-utils.conf. An override must name a
// section and a key the file has (a commented-out key counts: the override
// sets and uncomments it), as upstream's overrides do.
func Render(s Settings) ([]byte, error) {
	if s.PortRangeLower == 0 {
		s.PortRangeLower = DefaultPortRangeLower
	}
	if s.PortRangeUpper == 0 {
		s.PortRangeUpper = DefaultPortRangeUpper
	}
	if s.PortRangeLower < 1 || s.PortRangeUpper > 65535 || s.PortRangeLower >= s.PortRangeUpper {
		return nil, fmt.Errorf("efs-utils TLS port range %d-%d: want 1 <= lower < upper <= 65535", s.PortRangeLower, s.PortRangeUpper)
	}
	if strings.ContainsFunc(s.Region, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') }) {
		return nil, fmt.Errorf("region %q: not a region name", s.Region)
	}
	secs := template(s)
	for _, o := range s.Overrides {
		i := slices.IndexFunc(secs, func(sec section) bool { return sec.name == o.Section })
		if i < 0 {
			return nil, fmt.Errorf("%w %q: efs-utils.conf has no section [%s]", ErrBadOverride, o, o.Section)
		}
		j := slices.IndexFunc(secs[i].entries, func(e entry) bool { return e.key == o.Key })
		if j < 0 {
			return nil, fmt.Errorf("%w %q: section [%s] has no key %q", ErrBadOverride, o, o.Section, o.Key)
		}
		secs[i].entries[j].value, secs[i].entries[j].set = o.Value, true
	}
	var b strings.Builder
	b.WriteString("# Written by the EFS CSI driver at startup from its flags; edits are overwritten.\n")
	for _, sec := range secs {
		fmt.Fprintf(&b, "\n[%s]\n", sec.name)
		for _, e := range sec.entries {
			if e.comment != "" {
				fmt.Fprintf(&b, "# %s\n", e.comment)
			}
			if !e.set {
				b.WriteString("#")
			}
			fmt.Fprintf(&b, "%s = %s\n", e.key, e.value)
		}
	}
	return []byte(b.String()), nil
}

// ReadConf parses an efs-utils.conf as efs-utils' configparser would for
// the keys written here (no continuation lines): section -> key -> value.
// Commented keys are absent. For tests and the test mount helper.
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
