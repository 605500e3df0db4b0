// Package clitest runs a command's real flag parsing (the test binary,
// re-executed as main through env) against a table of command lines.
package clitest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Case is a command line and what it must answer.
type Case struct {
	Name   string
	Args   []string
	Code   int      // exit status
	Stdout []string // substrings of stdout
	Stderr string   // the whole of stderr
}

// Run runs each case as os.Args[0] with env added (the variable that makes
// the test binary run main).
func Run(t *testing.T, env []string, cases []Case) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], tt.Args...)
			cmd.Env = append(os.Environ(), env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.Code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.Code, stdout.String(), stderr.String())
			}
			for _, want := range tt.Stdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
				}
			}
			if stderr.String() != tt.Stderr {
				t.Errorf("stderr %q, want %q", stderr.String(), tt.Stderr)
			}
		})
	}
}
