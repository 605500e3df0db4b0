package efsutils

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/efs-csi/efs-csi-driver/internal/testutil"
)

func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "watchdog")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// TestWatchdogIsRestartedWhenItDies: a watchdog killed from outside is
// started again; cancelling stops it with SIGTERM and Run returns after it.
func TestWatchdogIsRestartedWhenItDies(t *testing.T) {
	pids := make(chan int, 4)
	w := &Watchdog{Path: script(t, "trap 'exit 0' TERM; while :; do sleep 1; done"),
		MinBackoff: time.Millisecond, Started: func(pid int) { pids <- pid }}
	ctx, cancel := context.WithCancel(context.Background())
	var run sync.WaitGroup
	run.Go(func() { w.Run(ctx) })
	first := <-pids
	syscall.Kill(first, syscall.SIGKILL)
	second := <-pids
	if second == first {
		t.Fatal("restarted with the same PID?")
	}
	cancel()
	run.Wait()
	if alive(second) {
		t.Errorf("watchdog %d alive after Run returned", second)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 10s", what)
		}
	}
}

// TestWatchdogIgnoringSIGTERMIsKilled: stopping is bounded by StopTimeout.
func TestWatchdogIgnoringSIGTERMIsKilled(t *testing.T) {
	pids := make(chan int, 1)
	// The script says "ready" once it ignores SIGTERM: a signal sent
	// before would kill it at once.
	logs := testutil.NewLogs()
	w := &Watchdog{Path: script(t, "trap '' TERM; echo ready; while :; do :; done"), StopTimeout: 200 * time.Millisecond,
		Logger: logs.Logger(), Started: func(pid int) { pids <- pid }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	pid := <-pids
	waitFor(t, `"ready"`, func() bool { return logs.Count(slog.LevelInfo, "ready") == 1 })
	start := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after SIGTERM was ignored")
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Errorf("stopped after %v: before the SIGTERM grace", el)
	}
	if alive(pid) {
		t.Errorf("watchdog %d still alive", pid)
	}
}

// TestWatchdogOutputGoesToTheDriversLog: each line the watchdog writes is a
// record of the driver's logger (klog in the driver), stdout at Info and
// stderr (Python's tracebacks) at Warn, named by its source, also lines a
// process it started writes after it exited.
func TestWatchdogOutputGoesToTheDriversLog(t *testing.T) {
	logs := testutil.NewLogs()
	pids := make(chan int, 1)
	w := &Watchdog{Path: script(t, "echo 'config file does not have poll_interval_sec'; echo 'Traceback (most recent call last):' >&2; "+
		"(sleep 0.2; echo from a child) & exec sleep 30"), Logger: logs.Logger(), Started: func(pid int) { pids <- pid }}
	ctx, cancel := context.WithCancel(context.Background())
	var run sync.WaitGroup
	run.Go(func() { w.Run(ctx) })
	<-pids
	waitFor(t, "output", func() bool { return logs.Count(slog.LevelInfo, "from a child") == 1 })
	cancel()
	run.Wait()
	for _, want := range []struct {
		level slog.Level
		msg   string
	}{
		{slog.LevelInfo, "config file does not have poll_interval_sec"},
		{slog.LevelWarn, "Traceback (most recent call last):"},
		{slog.LevelInfo, "from a child"},
	} {
		found := false
		for _, r := range logs.Records() {
			if r.Level == want.level && r.Message == want.msg && r.Attrs["source"] == "amazon-efs-mount-watchdog" {
				found = true
			}
		}
		if !found {
			t.Errorf("no %s record %q from the watchdog: %v", want.level, want.msg, logs.Records())
		}
	}
}

// TestWatchdogRestartsStayFrequent: a watchdog that exits at once (a
// configuration it cannot read, a missing interpreter) is restarted
// forever, the delay doubling from MinBackoff to at most
// DefaultWatchdogMaxBackoff: a few seconds without a watchdog, never a
// minute, never given up.
func TestWatchdogRestartsStayFrequent(t *testing.T) {
	const restarts = 12
	var delays []time.Duration
	starts := 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &Watchdog{Path: script(t, "exit 1"), Started: func(int) { starts++ },
		wait: func(_ context.Context, d time.Duration) bool {
			delays = append(delays, d)
			if len(delays) == restarts {
				cancel()
				return false
			}
			return true
		}}
	w.Run(ctx)
	if starts != restarts {
		t.Errorf("started %d times, want %d", starts, restarts)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
	for len(want) < restarts {
		want = append(want, DefaultWatchdogMaxBackoff)
	}
	if !slices.Equal(delays, want) {
		t.Errorf("delays %v, want %v", delays, want)
	}
	if DefaultWatchdogMaxBackoff > 5*time.Second {
		t.Errorf("max back-off %v: a node is that long without a watchdog", DefaultWatchdogMaxBackoff)
	}
}

// TestWatchdogDisabledIsNotStarted: with [mount-watchdog] enabled = false
// the watchdog would exit at once on every start; it is not started, and
// Run waits for its context.
func TestWatchdogDisabledIsNotStarted(t *testing.T) {
	logs := testutil.NewLogs()
	w := &Watchdog{Path: script(t, "exit 0"), Disabled: true, Logger: logs.Logger(),
		Started: func(int) { t.Error("a disabled watchdog was started") }}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	w.Run(ctx)
	if n := logs.Count(slog.LevelInfo, "disabled"); n != 1 {
		t.Errorf("%d records saying it is disabled, want 1: %v", n, logs.Records())
	}
}

// TestWatchdogNotInstalled: no binary is not an error; Run waits for ctx.
func TestWatchdogNotInstalled(t *testing.T) {
	w := &Watchdog{Path: filepath.Join(t.TempDir(), "amazon-efs-mount-watchdog")}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	select {
	case <-done:
		t.Fatal("Run returned before its context ended")
	default:
	}
	cancel()
	<-done
}
