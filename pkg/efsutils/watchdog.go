package efsutils

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/reaper"
)

// DefaultWatchdogPath is where efs-utils installs its watchdog.
const DefaultWatchdogPath = "/usr/bin/amazon-efs-mount-watchdog"

// Watchdog supervises efs-utils' watchdog process: it starts it, restarts it
// with exponential back-off when it exits, and stops it when Run's context
// ends (SIGTERM, then SIGKILL after StopTimeout).
type Watchdog struct {
	Path string   // default DefaultWatchdogPath; a bare name is looked up in $PATH
	Args []string // arguments
	Env  []string // nil: the driver's environment
	// Output receives the watchdog's stdout and stderr (nil: discarded).
	// A file, not a pipe: a tunnel the watchdog starts inherits it and
	// would hold a pipe open after the watchdog exits.
	Output *os.File
	// MinBackoff and MaxBackoff bound the delay before a restart (default
	// 1s and 1m); a run that lasted MaxBackoff resets it to MinBackoff.
	MinBackoff, MaxBackoff time.Duration
	// StopTimeout is how long the watchdog has to exit after SIGTERM before
	// it is killed (default 5s).
	StopTimeout time.Duration
	Logger      *slog.Logger
	// Started, if set, is called with the PID of every watchdog started
	// (tests).
	Started func(pid int)
}

// Run supervises the watchdog until ctx ends and the watchdog has stopped.
// A watchdog that is not installed is a log line, not an error (a driver
// using bind mounts, a test machine): Run then waits for ctx.
func (w *Watchdog) Run(ctx context.Context) {
	log := w.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	path := w.Path
	if path == "" {
		path = DefaultWatchdogPath
	}
	minB, maxB, stop := w.MinBackoff, w.MaxBackoff, w.StopTimeout
	if minB <= 0 {
		minB = time.Second
	}
	if maxB < minB {
		maxB = max(time.Minute, minB)
	}
	if stop <= 0 {
		stop = 5 * time.Second
	}
	bin, err := exec.LookPath(path)
	if err != nil {
		log.Info("efs-utils watchdog not installed: not supervised", slog.String("path", path), slog.String("error", err.Error()))
		<-ctx.Done()
		return
	}
	backoff := minB
	for {
		cmd := exec.CommandContext(ctx, bin, w.Args...)
		cmd.Env = w.Env
		if w.Output != nil {
			cmd.Stdout, cmd.Stderr = w.Output, w.Output
		}
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = stop // then SIGKILL
		started := time.Now()
		wait, err := reaper.Start(cmd)
		if err == nil {
			log.Info("efs-utils watchdog started", slog.String("path", bin), slog.Int("pid", cmd.Process.Pid))
			if w.Started != nil {
				w.Started(cmd.Process.Pid)
			}
			err = wait()
		}
		if ctx.Err() != nil {
			log.Info("efs-utils watchdog stopped", slog.Any("exit", err))
			return
		}
		if time.Since(started) >= maxB {
			backoff = minB
		}
		log.Warn("efs-utils watchdog exited, restarting", slog.Any("error", errOrExit(err)), slog.Duration("backoff", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxB)
	}
}

func errOrExit(err error) error {
	if err == nil {
		return errors.New("exit status 0")
	}
	return err
}
