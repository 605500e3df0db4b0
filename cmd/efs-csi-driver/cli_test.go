package main

import (
	"testing"

	"github.com/efs-csi/efs-csi-driver/internal/cli/clitest"
)

// The command line's errors are one line naming the flag or argument, with
// a hint, exit 2 (before: an unknown flag printed the whole usage, and a
// stray word silently dropped the flags after it); --help lists the
// subcommands. This runs the real command (this test binary as main).
func TestCommandLineErrorsAreOneLine(t *testing.T) {
	clitest.Run(t, []string{beMainEnv + "=1", "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true"}, []clitest.Case{
		{Name: "help lists the subcommands", Args: []string{"--help"},
			Stdout: []string{"usage: efs-csi-driver [flags]", "Commands:\n  audit    report a cluster's", "-endpoint string"}},
		{Name: "unknown flag", Args: []string{"--endpoint=/tmp/x.sock", "--no-such-flag"}, Code: 2,
			Stderr: "efs-csi-driver: unknown flag --no-such-flag; run 'efs-csi-driver --help'\n"},
		{Name: "bad value", Args: []string{"--unmount-timeout=soon"}, Code: 2,
			Stderr: "efs-csi-driver: invalid value \"soon\" for flag -unmount-timeout: parse error; run 'efs-csi-driver --help'\n"},
		{Name: "stray argument before flags", Args: []string{"--endpoint=/tmp/x.sock", "controller", "--mode=controller"}, Code: 2,
			Stderr: "efs-csi-driver: unexpected argument \"controller\": the command takes flags only (a flag after it would be ignored); run 'efs-csi-driver --help'\n"},
		{Name: "audit help", Args: []string{"audit", "--help"}, Stdout: []string{"usage: efs-csi-driver audit [flags]", "-fix"}},
		{Name: "audit unknown flag", Args: []string{"audit", "--nope"}, Code: 2,
			Stderr: "efs-csi-driver audit: unknown flag --nope; run 'efs-csi-driver audit --help'\n"},
		{Name: "audit stray argument", Args: []string{"audit", "fs-1", "--output=json"}, Code: 2,
			Stderr: "efs-csi-driver audit: unexpected argument \"fs-1\": the command takes flags only (a flag after it would be ignored); run 'efs-csi-driver audit --help'\n"},
	})
}
