package efsutils

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/efs-csi/efs-csi-driver/pkg/reaper"
)

// DefaultWatchdogPath is where efs-utils installs its watchdog.
const DefaultWatchdogPath = "/usr/bin/amazon-efs-mount-watchdog"

// Restart delays of the watchdog. Without a watchdog, a tunnel that dies is
// not restarted and a gone mount's tunnel is not stopped, so the delay stays
// short: a watchdog that cannot start at all is retried every
// DefaultWatchdogMaxBackoff, never given up on (upstream restarts it at
// once, in a loop without any delay). A run of watchdogHealthyRun starts the
// back-off over.
const (
	DefaultWatchdogMinBackoff = time.Second
	DefaultWatchdogMaxBackoff = 5 * time.Second
	watchdogHealthyRun        = time.Minute
)

// Watchdog supervises efs-utils' watchdog process: it starts it, restarts it
// with a bounded back-off when it exits, logs its output through Logger (the
// driver's klog), and stops it when Run's context ends (SIGTERM, then
// SIGKILL after StopTimeout).
type Watchdog struct {
	Path string   // default DefaultWatchdogPath; a bare name is looked up in $PATH
	Args []string // arguments
	Env  []string // nil: the driver's environment
	// Disabled: efs-utils.conf says [mount-watchdog] enabled = false (see
	// Conf.WatchdogEnabled). The watchdog would exit at once, every time it
	// is started; Run says so once and waits for its context.
	Disabled bool
	// MinBackoff and MaxBackoff bound the delay before a restart (default
	// DefaultWatchdogMinBackoff and DefaultWatchdogMaxBackoff).
	MinBackoff, MaxBackoff time.Duration
	// StopTimeout is how long the watchdog has to exit after SIGTERM before
	// it is killed (default 5s).
	StopTimeout time.Duration
	// Logger receives the supervisor's records and, one record per line,
	// the watchdog's stdout (Info) and stderr (Warn), with the attribute
	// source=amazon-efs-mount-watchdog.
	Logger *slog.Logger
	// Started, if set, is called with the PID of every watchdog started
	// (tests).
	Started func(pid int)

	wait func(ctx context.Context, d time.Duration) bool // tests: the delay before a restart
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
		minB = DefaultWatchdogMinBackoff
	}
	if maxB <= 0 {
		maxB = DefaultWatchdogMaxBackoff
	}
	maxB = max(maxB, minB)
	if stop <= 0 {
		stop = 5 * time.Second
	}
	wait := w.wait
	if wait == nil {
		wait = sleep
	}
	if w.Disabled {
		log.Info("efs-utils watchdog disabled in efs-utils.conf ([mount-watchdog] enabled): not started")
		<-ctx.Done()
		return
	}
	bin, err := exec.LookPath(path)
	if err != nil {
		log.Info("efs-utils watchdog not installed: not supervised", slog.String("path", path), slog.String("error", err.Error()))
		<-ctx.Done()
		return
	}
	// One pair of pipes for every run: a process the watchdog starts may
	// inherit them and outlive it, and would block on a pipe nobody reads.
	// The readers end when the last writer is gone.
	stdout, err := logPipe(log.With(slog.String("source", "amazon-efs-mount-watchdog")), slog.LevelInfo)
	if err != nil {
		log.Error("efs-utils watchdog output", slog.String("error", err.Error()))
		return
	}
	defer stdout.Close()
	stderr, err := logPipe(log.With(slog.String("source", "amazon-efs-mount-watchdog")), slog.LevelWarn)
	if err != nil {
		log.Error("efs-utils watchdog output", slog.String("error", err.Error()))
		return
	}
	defer stderr.Close()
	backoff := minB
	for {
		cmd := exec.CommandContext(ctx, bin, w.Args...)
		cmd.Env = w.Env
		cmd.Stdout, cmd.Stderr = stdout, stderr // *os.File: no copying goroutine for Wait to wait for
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
		cmd.WaitDelay = stop // then SIGKILL
		started := time.Now()
		wait4, err := reaper.Start(cmd)
		if err == nil {
			log.Info("efs-utils watchdog started", slog.String("path", bin), slog.Int("pid", cmd.Process.Pid))
			if w.Started != nil {
				w.Started(cmd.Process.Pid)
			}
			err = wait4()
		}
		if ctx.Err() != nil {
			log.Info("efs-utils watchdog stopped", slog.Any("exit", err))
			return
		}
		if time.Since(started) >= watchdogHealthyRun {
			backoff = minB
		}
		log.Warn("efs-utils watchdog exited, restarting", slog.Any("error", errOrExit(err)), slog.Duration("backoff", backoff))
		if !wait(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, maxB)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func errOrExit(err error) error {
	if err == nil {
		return errors.New("exit status 0")
	}
	return err
}

// maxLogLine bounds one record of the watchdog's output; a longer line is
// logged in pieces.
const maxLogLine = 4096

// logPipe returns the write end of a pipe whose lines are logged at level
// until every copy of the write end is closed.
func logPipe(log *slog.Logger, level slog.Level) (*os.File, error) {
	r, wr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	go func() {
		defer r.Close()
		br := bufio.NewReaderSize(r, maxLogLine)
		for {
			line, err := br.ReadSlice('\n')
			if line = bytes.TrimRight(line, "\r\n"); len(line) > 0 {
				log.Log(context.Background(), level, string(line))
			}
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
					log.Warn("efs-utils watchdog output", slog.String("error", err.Error()))
				}
				return
			}
		}
	}()
	return wr, nil
}
