// Command efs-emulator serves the Amazon EFS API on a local port, backed by
// directories under --data-dir, so that the driver runs and is tested with no
// AWS account. See docs/emulator.md.
//
//	efs-emulator --listen 127.0.0.1:PORT --data-dir DIR [--file-system fs-ID ...]
//	    [--one-zone-file-system fs-ID=ZONE ...] [--s3files-file-system fs-ID ...]
//	    [--access-point-limit N] [--lenient-client-token] [--s3files-strict-client-token]
//	    [fault flags] [--role ARN[#EXTERNAL_ID] ...] [--access-key KEY=ACCOUNT ...]
//	    [--file-system-owner fs-ID=ACCOUNT ...] [--iam-policy FILE ...]
//
// It also serves STS AssumeRole on the same address (AWS_ENDPOINT_URL_STS), and the
// S3 Files API (at the root path; EFS is under /2015-02-01/). With
// --iam-policy, every request is evaluated under those IAM identity
// policies, as AWS would (docs/emulator.md, "IAM policies").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/cli"
	"github.com/efs-csi/efs-csi-driver/internal/emulator"
	"github.com/efs-csi/efs-csi-driver/pkg/version"
)

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		var answered exit
		if errors.As(err, &answered) {
			os.Exit(int(answered))
		}
		fmt.Fprintln(os.Stderr, "efs-emulator:", err)
		os.Exit(1)
	}
}

// exit is run's error when the command line was answered already (the
// usage for --help, one line for a bad flag): the exit status.
type exit int

func (e exit) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func run(args []string) error {
	fs := flag.NewFlagSet("efs-emulator", flag.ContinueOnError)
	var cfg emulator.Config
	var fileSystems, s3FileSystems listFlag
	cfg.Faults = map[emulator.Op]emulator.Fault{}
	cfg.OneZoneFileSystems = map[string]string{}
	listen := fs.String("listen", "127.0.0.1:8049", "`address` to serve the EFS API and /_emulator/ on")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "`directory` for the state and one directory per file system (required)")
	fs.Var(&fileSystems, "file-system", "create file system `fs-ID` at start if missing; repeatable")
	emulator.RegisterOneZoneFlag(fs, cfg.OneZoneFileSystems)
	fs.Var(&s3FileSystems, "s3files-file-system", "create S3 Files file system `fs-ID` (17 to 40 hex digits) at start if missing; repeatable")
	fs.BoolVar(&cfg.S3FilesStrictClientToken, "s3files-strict-client-token", false, "a repeated S3 Files client token with other parameters is ConflictException (default: ignored, the existing access point answered)")
	fs.IntVar(&cfg.AccessPointLimit, "access-point-limit", emulator.DefaultAccessPointLimit, "access points per file system")
	fs.BoolVar(&cfg.LenientClientToken, "lenient-client-token", false, "a repeated ClientToken with identical parameters returns the existing access point")
	fs.BoolVar(&cfg.NoFsync, "no-fsync", false, "do not fsync commits: state survives the emulator's crash, not the machine's")
	fs.Int64Var(&cfg.Seed, "seed", 0, "seed for IDs, jitter and fault rates (0: random)")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	emulator.RegisterFaultFlags(fs, cfg.Faults)
	emulator.RegisterAccountFlags(fs, &cfg)
	emulator.RegisterIAMFlag(fs, &cfg)
	showVersion := fs.Bool("version", false, "print the version, commit and build date, and exit")
	if code, ok := cli.Parse(fs, args, os.Stdout, os.Stderr); !ok {
		return exit(code)
	}
	if *showVersion {
		fmt.Println(version.JSON())
		return nil
	}
	if cfg.DataDir == "" {
		return errors.New("--data-dir is required")
	}
	cfg.FileSystems = fileSystems
	cfg.S3FilesFileSystems = s3FileSystems
	var h slog.Handler = slog.NewTextHandler(os.Stderr, nil)
	switch *logFormat {
	case "json":
		h = slog.NewJSONHandler(os.Stderr, nil)
	case "text":
	default:
		return fmt.Errorf("--log-format %q: want text or json", *logFormat)
	}
	cfg.Logger = slog.New(h)

	emu, err := emulator.New(cfg)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		_ = emu.Close()
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		cfg.Logger.Info("stopping")
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := emu.Shutdown(sctx); err != nil {
			cfg.Logger.Warn("unclean stop", "err", err)
			_ = emu.Close()
		}
	}()
	cfg.Logger.Info("serving the EFS API and STS AssumeRole", "addr", l.Addr().String(), "dataDir", cfg.DataDir, "fileSystems", cfg.FileSystems, "oneZoneFileSystems", cfg.OneZoneFileSystems,
		"iamPolicies", len(cfg.IAMPolicies))
	if err := emu.Serve(l); err != nil {
		_ = emu.Close()
		return err
	}
	<-stopped // Serve returns as Shutdown begins: let it drain and close the store
	return nil
}
