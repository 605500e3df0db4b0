package cli

import (
	"bytes"
	"flag"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		name   string
		args   []string
		ok     bool
		code   int
		stdout string // substring
		stderr string // the whole of it
	}{
		{"flags", []string{"--n=3", "-s", "x"}, true, 0, "", ""},
		{"help", []string{"--help"}, false, ExitHelp, "-n int", ""},
		{"h", []string{"-h"}, false, ExitHelp, "Usage of cmd sub:", ""},
		{"unknown flag", []string{"--n=1", "--nope=2"}, false, ExitUsage, "",
			"cmd sub: unknown flag --nope; run 'cmd sub --help'\n"},
		{"bad value", []string{"--n=many"}, false, ExitUsage, "",
			"cmd sub: invalid value \"many\" for flag -n: parse error; run 'cmd sub --help'\n"},
		{"stray argument drops the flags after it", []string{"--n=1", "stray", "--s=y"}, false, ExitUsage, "",
			"cmd sub: unexpected argument \"stray\": the command takes flags only (a flag after it would be ignored); run 'cmd sub --help'\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("cmd sub", flag.ContinueOnError)
			fs.Int("n", 0, "a number")
			fs.String("s", "", "a string")
			var out, errs bytes.Buffer
			code, ok := Parse(fs, tt.args, &out, &errs)
			if ok != tt.ok || code != tt.code {
				t.Errorf("Parse = %d, %v; want %d, %v", code, ok, tt.code, tt.ok)
			}
			if !strings.Contains(out.String(), tt.stdout) || (tt.stdout == "" && out.Len() > 0) {
				t.Errorf("stdout %q, want it to hold %q", out.String(), tt.stdout)
			}
			if errs.String() != tt.stderr {
				t.Errorf("stderr %q, want %q", errs.String(), tt.stderr)
			}
		})
	}
}
