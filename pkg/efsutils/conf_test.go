package efsutils

import (
	"errors"
	"strings"
	"testing"
)

func mustConf(t *testing.T, s Settings) map[string]map[string]string {
	t.Helper()
	b, err := Render(s)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ReadConf(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return c
}

// TestRenderWritesTheDriversSettings: each setting lands on the key
// efs-utils reads it from; defaults are efs-utils' own.
func TestRenderWritesTheDriversSettings(t *testing.T) {
	tests := []struct {
		name     string
		s        Settings
		sec, key string
		want     string // "" = absent (commented out)
	}{
		{"no region: efs-utils asks IMDS", Settings{}, "mount", "region", ""},
		{"region", Settings{Region: "eu-west-1"}, "mount", "region", "eu-west-1"},
		{"default port range lower", Settings{}, "mount", "port_range_lower_bound", "20049"},
		{"default port range upper", Settings{}, "mount", "port_range_upper_bound", "20449"},
		{"chart's portRangeUpperBound", Settings{PortRangeUpper: 21049}, "mount", "port_range_upper_bound", "21049"},
		{"FIPS off", Settings{}, "mount", "fips_mode_enabled", "false"},
		{"FIPS on", Settings{FIPS: true}, "mount", "fips_mode_enabled", "true"},
		{"CloudWatch off", Settings{}, "cloudwatch-log", "enabled", ""},
		{"CloudWatch on", Settings{CloudWatchLog: true}, "cloudwatch-log", "enabled", "true"},
		{"debug logs", Settings{Debug: true}, "DEFAULT", "logging_level", "DEBUG"},
		{"debug stunnel", Settings{Debug: true}, "mount", "stunnel_debug_enabled", "true"},
		{"client source", Settings{}, "client-info", "source", "k8s"},
		{"cert hostname checked", Settings{}, "mount", "stunnel_check_cert_hostname", "true"},
		{"override a key", Settings{Overrides: []Override{{"mount", "stunnel_check_cert_validity", "true"}}},
			"mount", "stunnel_check_cert_validity", "true"},
		{"override uncomments a commented key", Settings{Overrides: []Override{{"mount", "stunnel_logs_file", "/tmp/x.log"}}},
			"mount", "stunnel_logs_file", "/tmp/x.log"},
		{"override beats a flag", Settings{FIPS: true, Overrides: []Override{{"mount", "fips_mode_enabled", "false"}}},
			"mount", "fips_mode_enabled", "false"},
		{"override in a region section", Settings{Overrides: []Override{{"mount.cn-north-1", "dns_name_suffix", "example.cn"}}},
			"mount.cn-north-1", "dns_name_suffix", "example.cn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := mustConf(t, tt.s)[tt.sec][tt.key]
			if tt.want == "" && ok {
				t.Errorf("[%s] %s = %q, want it commented out", tt.sec, tt.key, got)
			}
			if tt.want != "" && got != tt.want {
				t.Errorf("[%s] %s = %q, want %q", tt.sec, tt.key, got, tt.want)
			}
		})
	}
}

func TestRenderRefusesBadSettings(t *testing.T) {
	tests := []struct {
		name string
		s    Settings
		want string // in the error
	}{
		{"unknown section", Settings{Overrides: []Override{{"nosuch", "k", "v"}}}, "no section [nosuch]"},
		{"unknown key", Settings{Overrides: []Override{{"mount", "nosuch", "v"}}}, `no key "nosuch"`},
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
	for _, s := range []string{"mount:region=us-west-2", "mount:stunnel_logs_file=/a", "a:b=c,d:e=f", "mount:region=x\n[evil]\nk=v", "cloudwatch-log:enabled=#"} {
		f.Add(s)
	}
	base, _ := Render(Settings{})
	baseLines := strings.Count(string(base), "\n")
	f.Fuzz(func(t *testing.T, s string) {
		os, err := ParseOverrides(s)
		if err != nil {
			return
		}
		b, err := Render(Settings{Overrides: os})
		if err != nil {
			return
		}
		if n := strings.Count(string(b), "\n"); n != baseLines {
			t.Fatalf("%q changed the line count %d -> %d", s, baseLines, n)
		}
		c, err := ReadConf(b)
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
			if got := c[o.Section][o.Key]; got != last.Value && !strings.HasPrefix(last.Value, "#") && !strings.HasPrefix(last.Value, ";") {
				t.Fatalf("%q: [%s] %s = %q, want %q", s, o.Section, o.Key, got, last.Value)
			}
		}
	})
}
