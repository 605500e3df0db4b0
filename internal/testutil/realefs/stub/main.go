// Command stub stands in for the two parts of amazon-efs-utils that cannot run on a test
// machine: the kernel's NFS client behind /sbin/mount.nfs4 and efs-proxy (Rust, which
// cannot be built here). Everything else of efs-utils runs for real; see package realefs.
// It is one binary installed under both names; its name says which it is. Every run
// appends a JSON line (spec.Call) to the call log in the directory fixed at build time
// (-X main.dir=...).
//
//	mount.nfs4 SOURCE TARGET -o OPTIONS
//
// mounts a tmpfs at TARGET whose source is SOURCE (127.0.0.1:/path, as the kernel's NFS
// mount of a tunnel shows it), read-only when OPTIONS has ro. A control file named after
// TARGET (spec.ControlName) changes that: "fail" fails as mount.nfs4 does when the server
// refuses (exit 32), a FIFO hangs the mount until the test writes a verdict into it ("fail"
// or "ok"), as a mount to a server that does not answer hangs in the kernel.
//
//	efs-proxy CONFIG [--tls] [--no-direct-s3-read]
//
// reads CONFIG as efs-proxy does (the keys it requires: fips, pid, [efs] connect and
// accept; with --tls the certificate, key and CA files it loads), writes its PID to the pid
// file, listens on the accept address (mount.efs checks the port answers), and answers
// every connection by closing it until SIGTERM, when it removes the pid file and exits 0.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/efs-csi/efs-csi-driver/internal/testutil/realefs/spec"
)

var dir string // set at build time

func main() {
	name := filepath.Base(os.Args[0])
	call := spec.Call{Prog: name, Args: os.Args[1:], PID: os.Getpid()}
	var code int
	switch name {
	case "mount.nfs4":
		code = mountNFS(&call)
	case spec.EFSProxy:
		code = efsProxy(&call)
	default:
		fmt.Fprintf(os.Stderr, "stub: unknown name %q\n", name)
		code = 1
	}
	os.Exit(code)
}

// record appends c to the call log: one write of one line, atomic with O_APPEND.
func record(c spec.Call) {
	b, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, spec.CallLog), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stub: call log:", err)
		os.Exit(1)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		fmt.Fprintln(os.Stderr, "stub: call log:", err)
		os.Exit(1)
	}
	f.Close()
}

func mountNFS(c *spec.Call) int {
	args := c.Args
	if len(args) != 4 || args[2] != "-o" {
		record(*c)
		fmt.Fprintf(os.Stderr, "mount.nfs4: usage: mount.nfs4 remotetarget dir -o options (got %q)\n", args)
		return 1
	}
	source, target, opts := args[0], args[1], strings.Split(args[3], ",")
	verdict := "ok"
	ctl := filepath.Join(dir, spec.ControlDir, spec.ControlName(target))
	fi, err := os.Lstat(ctl)
	switch {
	case err == nil && fi.Mode()&os.ModeNamedPipe != 0:
		c.Hung = true
		record(*c) // the test waits for this line, then for the caller to give up
		b, err := readFIFO(ctl)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mount.nfs4:", err)
			return 32
		}
		verdict = strings.TrimSpace(string(b))
	case err == nil:
		record(*c)
		b, _ := os.ReadFile(ctl)
		verdict = strings.TrimSpace(string(b))
	default:
		record(*c)
	}
	if verdict == "fail" {
		// Not one of the errors mount.efs retries ("reset by peer", "access denied"
		// for an access point): it fails at once, as with a server that refuses.
		fmt.Fprintf(os.Stderr, "mount.nfs4: Protocol not supported for %s on %s\n", source, target)
		return 32
	}
	var flags uintptr
	if slices.Contains(opts, "ro") {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount(source, target, "tmpfs", flags, "size=1m,mode=0755"); err != nil {
		fmt.Fprintf(os.Stderr, "mount.nfs4: mounting %s on %s failed: %v\n", source, target, err)
		return 32
	}
	return 0
}

// readFIFO blocks until the test opens the FIFO for writing, and reads its verdict.
func readFIFO(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

func efsProxy(c *spec.Call) int {
	var config string
	var tls bool
	for _, a := range c.Args {
		switch {
		case a == "--tls":
			tls = true
		case a == "--no-direct-s3-read":
		case strings.HasPrefix(a, "-"):
			record(*c)
			fmt.Fprintf(os.Stderr, "error: unexpected argument '%s' found\n", a) // clap's words
			return 2
		case config == "":
			config = a
		default:
			record(*c)
			fmt.Fprintf(os.Stderr, "error: unexpected argument '%s' found\n", a)
			return 2
		}
	}
	b, err := os.ReadFile(config)
	c.Config = string(b)
	record(*c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "Failed to read configuration.", err)
		return 101 // a Rust panic
	}
	conf := spec.ParseTunnelConfig(string(b))
	if err := checkConfig(conf, tls); err != nil {
		fmt.Fprintln(os.Stderr, "Failed to read configuration.", err)
		return 101
	}
	pidFile := conf.Global["pid"]
	_ = os.WriteFile(pidFile, []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o644) // efs-proxy ignores an error too
	l, err := net.Listen("tcp", conf.EFS["accept"])
	if err != nil {
		fmt.Fprintln(os.Stderr, "efs-proxy: listen:", err)
		return 1
	}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	l.Close()
	if err := os.Remove(pidFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(os.Stderr, "Unable to remove pid_file:", err)
	}
	return 0
}

// checkConfig refuses what efs-proxy's configuration parser or TLS set-up refuses.
func checkConfig(conf spec.TunnelConfig, tls bool) error {
	for _, k := range []string{"fips", "pid"} {
		if _, ok := conf.Global[k]; !ok {
			return fmt.Errorf("missing field `%s`", k)
		}
	}
	for _, k := range []string{"connect", "accept"} {
		if _, ok := conf.EFS[k]; !ok {
			return fmt.Errorf("missing field `%s` in [efs]", k)
		}
	}
	switch v := strings.ToLower(conf.Global["fips"]); v {
	case "true", "yes", "1", "false", "no", "0":
	default:
		return fmt.Errorf("fips: Invalid value: %s", v)
	}
	if !tls {
		return nil
	}
	for _, k := range []string{"cert", "key", "CAfile"} {
		b, err := os.ReadFile(conf.EFS[k])
		if err != nil || !strings.Contains(string(b), "-----BEGIN ") {
			return fmt.Errorf("Failed to obtain TLS config: %s %q: not a PEM file (%v)", k, conf.EFS[k], err)
		}
	}
	return nil
}
