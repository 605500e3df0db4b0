package efsutils

import (
	"cmp"
	"errors"
	"strings"
	"testing"
)

// files renders s and parses both files: file name -> section -> key -> value.
func files(t *testing.T, s Settings) map[string]map[string]map[string]string {
	t.Helper()
	c, err := Render(s)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]map[string]string{}
	for name, b := range map[string][]byte{ConfFileName: c.EFSUtils, S3FilesConfFileName: c.S3FilesUtils} {
		if out[name], err = ReadConf(b); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
	}
	return out
}

const efsConf, s3Conf = ConfFileName, S3FilesConfFileName

// TestRenderWritesTheDriversSettings: each setting lands on the key
// efs-utils reads it from, in the file of the helper that reads it;
// defaults are efs-utils' own.
func TestRenderWritesTheDriversSettings(t *testing.T) {
	tests := []struct {
		name           string
		s              Settings
		file, sec, key string
		want           string // "" = absent (commented out)
	}{
		{"no region: efs-utils asks IMDS", Settings{}, efsConf, "mount", "region", ""},
		{"region", Settings{Region: "eu-west-1"}, efsConf, "mount", "region", "eu-west-1"},
		{"region for S3 Files too", Settings{Region: "eu-west-1"}, s3Conf, "mount", "region", "eu-west-1"},
		{"default port range lower", Settings{}, efsConf, "mount", "port_range_lower_bound", "20049"},
		{"default port range upper is efs-utils' 21049", Settings{}, efsConf, "mount", "port_range_upper_bound", "21049"},
		{"S3 Files' port range upper", Settings{}, s3Conf, "mount", "port_range_upper_bound", "21049"},
		{"a higher upper bound is kept", Settings{PortRangeUpper: 30000}, efsConf, "mount", "port_range_upper_bound", "30000"},
		{"a lower upper bound is raised, as upstream", Settings{PortRangeUpper: 20449}, efsConf, "mount", "port_range_upper_bound", "21049"},
		{"FIPS off", Settings{}, efsConf, "mount", "fips_mode_enabled", "false"},
		{"FIPS on", Settings{FIPS: true}, efsConf, "mount", "fips_mode_enabled", "true"},
		{"FIPS on for S3 Files", Settings{FIPS: true}, s3Conf, "mount", "fips_mode_enabled", "true"},
		{"CloudWatch off, as upstream writes it", Settings{}, efsConf, "cloudwatch-log", "enabled", "false"},
		{"CloudWatch on", Settings{CloudWatchLog: true}, efsConf, "cloudwatch-log", "enabled", "true"},
		{"EFS' CloudWatch flag is not S3 Files'", Settings{CloudWatchLog: true}, s3Conf, "cloudwatch-log", "enabled", "false"},
		{"S3 Files CloudWatch logs", Settings{S3FilesCloudWatchLog: true}, s3Conf, "cloudwatch-log", "enabled", "true"},
		{"S3 Files CloudWatch metrics", Settings{S3FilesCloudWatchMetrics: true}, s3Conf, "proxy", "metrics_enabled", "true"},
		{"S3 Files CloudWatch metrics off", Settings{}, s3Conf, "proxy", "metrics_enabled", "false"},
		{"debug logs", Settings{Debug: true}, efsConf, "DEFAULT", "logging_level", "DEBUG"},
		{"debug stunnel", Settings{Debug: true}, efsConf, "mount", "stunnel_debug_enabled", "true"},
		{"debug efs-proxy of S3 Files", Settings{Debug: true}, s3Conf, "proxy", "proxy_logging_level", "DEBUG"},
		{"client source", Settings{}, efsConf, "client-info", "source", "k8s"},
		{"client source of S3 Files", Settings{}, s3Conf, "client-info", "source", "k8s"},
		{"cert hostname checked", Settings{}, efsConf, "mount", "stunnel_check_cert_hostname", "true"},
		{"S3 Files DNS names", Settings{}, s3Conf, "mount", "dns_name_format", "{az_id}.{fs_id}.s3files.{region}.{dns_name_suffix}"},
		{"override a key", Settings{Overrides: []Override{{"mount", "stunnel_check_cert_validity", "true"}}},
			efsConf, "mount", "stunnel_check_cert_validity", "true"},
		{"override uncomments a commented key", Settings{Overrides: []Override{{"mount", "stunnel_logs_file", "/tmp/x.log"}}},
			efsConf, "mount", "stunnel_logs_file", "/tmp/x.log"},
		{"override beats a flag", Settings{FIPS: true, Overrides: []Override{{"mount", "fips_mode_enabled", "false"}}},
			efsConf, "mount", "fips_mode_enabled", "false"},
		{"override of a port bound beats the floor", Settings{Overrides: []Override{{"mount", "port_range_upper_bound", "20449"}}},
			efsConf, "mount", "port_range_upper_bound", "20449"},
		{"EFS' overrides leave S3 Files alone", Settings{Overrides: []Override{{"mount", "stunnel_check_cert_validity", "true"}}},
			s3Conf, "mount", "stunnel_check_cert_validity", "false"},
		{"S3 Files override", Settings{S3FilesOverrides: []Override{{"proxy", "read_bypass_denylist_size", "20000"}}},
			s3Conf, "proxy", "read_bypass_denylist_size", "20000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := files(t, tt.s)[tt.file][tt.sec][tt.key]
			if tt.want == "" && ok {
				t.Errorf("%s [%s] %s = %q, want it commented out", tt.file, tt.sec, tt.key, got)
			}
			if tt.want != "" && got != tt.want {
				t.Errorf("%s [%s] %s = %q, want %q", tt.file, tt.sec, tt.key, got, tt.want)
			}
		})
	}
}

// TestRenderHasEveryRegionSection: the region sections efs-utils 3.2.0
// ships, so that mount.efs and mount.s3files build the partition's DNS
// name, and the CA bundle each names.
func TestRenderHasEveryRegionSection(t *testing.T) {
	tls := systemCAFile
	tests := []struct {
		region, efsSuffix, s3Suffix, cafile string // cafile "" = commented out (efs-utils.crt)
	}{
		{"cn-north-1", "amazonaws.com.cn", "on.amazonwebservices.com.cn", ""},
		{"cn-northwest-1", "amazonaws.com.cn", "on.amazonwebservices.com.cn", ""},
		{"eu-isoe-west-1", "cloud.adc-e.uk", "cloud.adc-e.uk", tls},
		{"eusc-de-east-1", "amazonaws.eu", "amazonaws.eu", tls},
		{"us-iso-east-1", "c2s.ic.gov", "c2s.ic.gov", tls},
		{"us-iso-west-1", "c2s.ic.gov", "c2s.ic.gov", tls},
		{"us-isob-east-1", "sc2s.sgov.gov", "sc2s.sgov.gov", tls},
		{"us-isob-west-1", "sc2s.sgov.gov", "sc2s.sgov.gov", tls},
		{"us-isof-east-1", "csp.hci.ic.gov", "csp.hci.ic.gov", tls},
		{"us-isof-south-1", "csp.hci.ic.gov", "csp.hci.ic.gov", tls},
	}
	f := files(t, Settings{})
	for _, tt := range tests {
		t.Run(tt.region, func(t *testing.T) {
			for file, suffix := range map[string]string{efsConf: tt.efsSuffix, s3Conf: tt.s3Suffix} {
				sec := f[file]["mount."+tt.region]
				if sec == nil {
					t.Fatalf("%s has no [mount.%s]", file, tt.region)
				}
				if sec["dns_name_suffix"] != suffix || sec["stunnel_cafile"] != tt.cafile {
					t.Errorf("%s [mount.%s] = %v, want dns_name_suffix %s, stunnel_cafile %q", file, tt.region, sec, suffix, tt.cafile)
				}
			}
			c, err := Render(Settings{Region: tt.region})
			if err != nil {
				t.Fatal(err)
			}
			if want := cmp.Or(tt.cafile, efsUtilsCAFile); c.CAFile != want {
				t.Errorf("CAFile for %s = %q, want %q", tt.region, c.CAFile, want)
			}
		})
	}
	if c, _ := Render(Settings{Region: "us-east-1"}); c.CAFile != efsUtilsCAFile {
		t.Errorf("CAFile for us-east-1 = %q, want [mount]'s %s", c.CAFile, efsUtilsCAFile)
	}
	if c, _ := Render(Settings{}); c.CAFile != "" {
		t.Errorf("CAFile without a region = %q, want none", c.CAFile)
	}
}

// TestRenderAcceptsWhatUpstreamAccepts: every key of efs-utils 3.2.0's
// files can be overridden with a value efs-utils reads, among them those
// upstream's chart documents and those an older template here refused
// (the node plugin exited at start).
func TestRenderAcceptsWhatUpstreamAccepts(t *testing.T) {
	tests := []struct {
		name      string
		efs, s3   string // --efs-utils-conf-overrides, --s3files-utils-conf-overrides
		file      string
		sec, key  string
		wantValue string
	}{
		{"upstream's values example", "mount-watchdog:stunnel_health_check_interval_min=1,mount-watchdog:tls_cert_renewal_interval_min=30", "",
			efsConf, "mount-watchdog", "stunnel_health_check_interval_min", "1"},
		{"upstream's S3 Files values example", "", "proxy:read_bypass_denylist_size=20000", s3Conf, "proxy", "read_bypass_denylist_size", "20000"},
		{"mount.nfs retries", "mount:retry_nfs_mount_command_count=5", "", efsConf, "mount", "retry_nfs_mount_command_count", "5"},
		{"mount.nfs retry timeout", "mount:retry_nfs_mount_command_timeout_sec=30", "", efsConf, "mount", "retry_nfs_mount_command_timeout_sec", "30"},
		{"stunnel health checks off", "mount-watchdog:stunnel_health_check_enabled=false", "", efsConf, "mount-watchdog", "stunnel_health_check_enabled", "false"},
		{"unmount consistency", "mount-watchdog:unmount_count_for_consistency=3", "", efsConf, "mount-watchdog", "unmount_count_for_consistency", "3"},
		{"European Sovereign Cloud suffix", "mount.eusc-de-east-1:dns_name_suffix=amazonaws.eu", "", efsConf, "mount.eusc-de-east-1", "dns_name_suffix", "amazonaws.eu"},
		{"European Sovereign Cloud CA", "mount.eusc-de-east-1:stunnel_cafile=/etc/ssl/certs/ca-certificates.crt", "",
			efsConf, "mount.eusc-de-east-1", "stunnel_cafile", "/etc/ssl/certs/ca-certificates.crt"},
		{"a China region's CA, which efs-utils reads there", "mount.cn-north-1:stunnel_cafile=/ca.pem", "", efsConf, "mount.cn-north-1", "stunnel_cafile", "/ca.pem"},
		{"S3 Files region section", "", "mount.us-iso-east-1:dns_name_suffix=example.gov", s3Conf, "mount.us-iso-east-1", "dns_name_suffix", "example.gov"},
		{"a commented S3 Files key", "", "proxy:readahead_cache_enabled=false", s3Conf, "proxy", "readahead_cache_enabled", "false"},
		{"configparser booleans", "mount:optimize_readahead=No", "", efsConf, "mount", "optimize_readahead", "No"},
		{"octal mode", "DEFAULT:state_file_dir_mode=0700", "", efsConf, "DEFAULT", "state_file_dir_mode", "0700"},
		{"a literal percent, escaped", "mount:stunnel_logs_file=/var/log/100%%.log", "", efsConf, "mount", "stunnel_logs_file", "/var/log/100%%.log"},
		{"an interpolation reference", "cloudwatch-log:log_group_name=/aws/efs/%(logging_level)s", "", efsConf, "cloudwatch-log", "log_group_name", "/aws/efs/%(logging_level)s"},
		{"an integer through a reference", "mount-watchdog:unmount_grace_period_sec=%(logging_file_count)s", "", efsConf, "mount-watchdog", "unmount_grace_period_sec", "%(logging_file_count)s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			efs, err := ParseOverrides(tt.efs)
			if err != nil {
				t.Fatal(err)
			}
			s3, err := ParseOverrides(tt.s3)
			if err != nil {
				t.Fatal(err)
			}
			if got := files(t, Settings{Overrides: efs, S3FilesOverrides: s3})[tt.file][tt.sec][tt.key]; got != tt.wantValue {
				t.Errorf("%s [%s] %s = %q, want %q (written as given)", tt.file, tt.sec, tt.key, got, tt.wantValue)
			}
		})
	}
}

// TestRenderRefusesWhatEfsUtilsCannotRead: an override efs-utils would
// trip over on every mount, or the watchdog at every start (a restart loop
// without a watchdog), is a startup error naming it.
func TestRenderRefusesWhatEfsUtilsCannotRead(t *testing.T) {
	tests := []struct {
		name string
		s    Settings
		want string // in the error
	}{
		{"unknown section", Settings{Overrides: []Override{{"nosuch", "k", "v"}}}, "no section [nosuch]"},
		{"unknown key", Settings{Overrides: []Override{{"mount", "nosuch", "v"}}}, `no key "nosuch"`},
		{"a region section upstream's file does not have", Settings{Overrides: []Override{{"mount.ap-east-9", "dns_name_suffix", "x"}}}, "no section"},
		{"[proxy] is S3 Files'", Settings{Overrides: []Override{{"proxy", "metrics_enabled", "true"}}}, "efs-utils.conf has no section [proxy]"},
		{"the watchdog's settings are efs-utils.conf's", Settings{S3FilesOverrides: []Override{{"mount-watchdog", "poll_interval_sec", "2"}}},
			"s3files-utils.conf has no section [mount-watchdog]"},
		{"S3 Files has no stunnel", Settings{S3FilesOverrides: []Override{{"mount", "stunnel_debug_enabled", "true"}}}, `no key "stunnel_debug_enabled"`},
		{"fractional poll interval the watchdog's getint refuses", Settings{Overrides: []Override{{"mount-watchdog", "poll_interval_sec", "0.02"}}},
			`"0.02" is not one`},
		{"a watchdog that would spin", Settings{Overrides: []Override{{"mount-watchdog", "poll_interval_sec", "0"}}}, "at least 1"},
		{"watchdog grace", Settings{Overrides: []Override{{"mount-watchdog", "unmount_grace_period_sec", "soon"}}}, "integer"},
		{"Python int() takes underscores, Go does not: refused", Settings{Overrides: []Override{{"mount", "retry_nfs_mount_command_count", "1_0"}}}, "integer"},
		{"not a boolean", Settings{Overrides: []Override{{"mount-watchdog", "stunnel_health_check_enabled", "maybe"}}}, "boolean"},
		{"not octal", Settings{Overrides: []Override{{"DEFAULT", "state_file_dir_mode", "789"}}}, "octal"},
		{"a DNS name format without the file system", Settings{Overrides: []Override{{"mount", "dns_name_format", "{az}.efs.{region}.amazonaws.com"}}}, "{fs_id}"},
		{"not a region", Settings{Overrides: []Override{{"mount", "region", "Mars"}}}, "not a region"},
		{"a port past 65535", Settings{Overrides: []Override{{"mount", "port_range_upper_bound", "70000"}}}, "1 to 65535"},
		{"an empty port range", Settings{Overrides: []Override{{"mount", "port_range_lower_bound", "21049"}}}, "is empty"},
		{"S3 Files' integers", Settings{S3FilesOverrides: []Override{{"proxy", "read_bypass_denylist_size", "lots"}}}, "integer"},
		{"a lone percent breaks configparser", Settings{Overrides: []Override{{"mount", "stunnel_logs_file", "/var/log/100%.log"}}}, "'%%'"},
		{"a percent at the end", Settings{Overrides: []Override{{"cloudwatch-log", "log_group_name", "efs%"}}}, "'%%'"},
		{"a reference to no key", Settings{Overrides: []Override{{"cloudwatch-log", "log_group_name", "%(nosuch)s"}}}, "names no key"},
		{"a reference without its s", Settings{Overrides: []Override{{"cloudwatch-log", "log_group_name", "%(logging_level)"}}}, "not a %(key)s reference"},
		{"a reference that resolves to no integer", Settings{Overrides: []Override{{"mount-watchdog", "poll_interval_sec", "%(logging_level)s"}}}, `"INFO" is not one`},
		{"references in a loop", Settings{Overrides: []Override{{"DEFAULT", "logging_level", "%(logging_level)s"}}}, "deeper"},
		{"inverted port range", Settings{PortRangeLower: 30000, PortRangeUpper: 20000}, "port range"},
		{"port past 65535", Settings{PortRangeUpper: 70000}, "port range"},
		{"region with a newline", Settings{Region: "us-east-1\n[mount]"}, "not a region"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Render(tt.s)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Render: %v, want an error with %q", err, tt.want)
			}
			if len(tt.s.Overrides)+len(tt.s.S3FilesOverrides) > 0 && !errors.Is(err, ErrBadOverride) {
				t.Errorf("Render: %v, want ErrBadOverride", err)
			}
		})
	}
}

// TestRenderReportsWhatItDerives: what the driver acts on besides the files.
func TestRenderReportsWhatItDerives(t *testing.T) {
	tests := []struct {
		name           string
		s              Settings
		watchdog, fips bool
		note           string // "" = no note
	}{
		{"defaults", Settings{}, true, false, ""},
		{"watchdog disabled", Settings{Overrides: []Override{{"mount-watchdog", "enabled", "off"}}}, false, false, ""},
		{"FIPS by the flag", Settings{FIPS: true}, true, true, ""},
		{"FIPS by override", Settings{Overrides: []Override{{"mount", "fips_mode_enabled", "yes"}}}, true, true, ""},
		{"FIPS by AWS_USE_FIPS_ENDPOINT, which efs-utils reads itself", Settings{FIPSEndpoint: true}, true, true, ""},
		{"a raised port bound is said", Settings{PortRangeUpper: 20449}, true, false, "20449 raised to efs-utils' 21049"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Render(tt.s)
			if err != nil {
				t.Fatal(err)
			}
			if c.WatchdogEnabled != tt.watchdog || c.FIPS != tt.fips {
				t.Errorf("WatchdogEnabled %v, FIPS %v; want %v, %v", c.WatchdogEnabled, c.FIPS, tt.watchdog, tt.fips)
			}
			if got := strings.Join(c.Notes, "; "); tt.note == "" && got != "" || !strings.Contains(got, tt.note) {
				t.Errorf("notes %q, want %q", got, tt.note)
			}
		})
	}
}

func TestParseOverrides(t *testing.T) {
	tests := []struct {
		in   string
		want []Override
		bad  string // the entry named in the error
	}{
		{in: "", want: nil},
		{in: "mount:region=us-west-2", want: []Override{{"mount", "region", "us-west-2"}}},
		{in: " mount : region = us-west-2 , ,mount-watchdog:poll_interval_sec=2",
			want: []Override{{"mount", "region", "us-west-2"}, {"mount-watchdog", "poll_interval_sec", "2"}}},
		{in: "mount:dns_name_format={az}.{fs_id}.x=y", want: []Override{{"mount", "dns_name_format", "{az}.{fs_id}.x=y"}}},
		{in: "mount:region=", want: []Override{{"mount", "region", ""}}},
		{in: "mountregion=x", bad: "mountregion=x"},
		{in: "mount:region", bad: "mount:region"},
		{in: ":region=x", bad: ":region=x"},
		{in: "mount:=x", bad: "mount:=x"},
		{in: "mo]unt:region=x", bad: "mo]unt:region=x"},
		{in: "mount:reg ion=x", bad: "mount:reg ion=x"},
		{in: "mount:region=a\nb", bad: "mount:region=a\nb"},
	}
	for _, tt := range tests {
		got, err := ParseOverrides(tt.in)
		if tt.bad != "" {
			if !errors.Is(err, ErrBadOverride) || !strings.Contains(err.Error(), strings.ReplaceAll(tt.bad, "\n", `\n`)) {
				t.Errorf("ParseOverrides(%q): %v, want ErrBadOverride naming %q", tt.in, err, tt.bad)
			}
			continue
		}
		if err != nil || len(got) != len(tt.want) {
			t.Errorf("ParseOverrides(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("ParseOverrides(%q)[%d] = %v, want %v", tt.in, i, got[i], tt.want[i])
			}
		}
	}
}

// FuzzOverrides: whatever --efs-utils-conf-overrides holds, an accepted
// override changes the one key it names: never a new section, a new key or
// a line of its own.
func FuzzOverrides(f *testing.F) {
	for _, s := range []string{"mount:region=us-west-2", "mount:stunnel_logs_file=/a", "a:b=c,d:e=f", "mount:region=x\n[evil]\nk=v",
		"cloudwatch-log:log_group_name=#", "mount:stunnel_logs_file=%%(x)s%", "mount-watchdog:poll_interval_sec=+7"} {
		f.Add(s)
	}
	base, _ := Render(Settings{})
	baseLines := strings.Count(string(base.EFSUtils), "\n")
	f.Fuzz(func(t *testing.T, s string) {
		os, err := ParseOverrides(s)
		if err != nil {
			return
		}
		c, err := Render(Settings{Overrides: os})
		if err != nil {
			return
		}
		b := c.EFSUtils
		if n := strings.Count(string(b), "\n"); n != baseLines {
			t.Fatalf("%q changed the line count %d -> %d", s, baseLines, n)
		}
		conf, err := ReadConf(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range os {
			last := o
			for _, p := range os { // the last override of a key wins
				if p.Section == o.Section && p.Key == o.Key {
					last = p
				}
			}
			if got := conf[o.Section][o.Key]; got != last.Value && !strings.HasPrefix(last.Value, "#") && !strings.HasPrefix(last.Value, ";") {
				t.Fatalf("%q: [%s] %s = %q, want %q", s, o.Section, o.Key, got, last.Value)
			}
		}
	})
}
