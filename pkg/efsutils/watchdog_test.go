package efsutils

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
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

// TestWatchdogIgnoringSIGTERMIsKilled: stopping is bounded by StopTimeout.
func TestWatchdogIgnoringSIGTERMIsKilled(t *testing.T) {
	pids := make(chan int, 1)
	// The script says "ready" once it ignores SIGTERM: a signal sent
	// before would kill it at once.
	r, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w := &Watchdog{Path: script(t, "trap '' TERM; echo ready; while :; do :; done"), StopTimeout: 200 * time.Millisecond,
		Output: wr, Started: func(pid int) { pids <- pid }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	pid := <-pids
	wr.Close()
	if line, err := bufio.NewReader(r).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("watchdog said %q, %v", line, err)
	}
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
