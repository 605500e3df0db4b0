package stress

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// groupRunning reports whether any process of group pgid runs (a zombie
// waiting for its reaper does not).
func groupRunning(t *testing.T, pgid int) bool {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			return true
		}
	}
	return false
}

// The supervisor's promises: a chaos kill takes the whole process group down
// and starts a fresh driver, without counting a crash; an exit nobody asked
// for is counted, reported and restarted; stop leaves nothing running.
func TestDriverProcKillsRestartsAndCountsOnlyUnaskedExits(t *testing.T) {
	events := make(chan string, 10)
	// The shell's child proves the kill reaches the whole process group. The
	// output is not a file, so exec copies it through a pipe and Wait returns
	// only once every holder of that pipe, the child included, has exited.
	d, err := startDriver([]string{"/bin/sh", "-c", "sleep 60 & wait"}, nil, io.Discard,
		slog.New(slog.DiscardHandler), func(kind, note string) { events <- kind + " " + note })
	if err != nil {
		t.Fatal(err)
	}
	first := d.cur.cmd.Process.Pid
	killed, err := d.kill()
	if err != nil || killed != first {
		t.Fatalf("kill() = %d, %v; want %d", killed, err, first)
	}
	if groupRunning(t, first) {
		t.Errorf("process group %d survived the kill", first)
	}
	second := d.cur.cmd.Process.Pid
	if second == first || !alive(second) {
		t.Fatalf("no new driver after the kill (pid %d)", second)
	}
	if d.unexpected.Load() != 0 {
		t.Errorf("a chaos kill counted as a crash")
	}

	// Now the driver dies by itself.
	if err := syscall.Kill(-second, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-events:
		if !strings.HasPrefix(e, "crash ") {
			t.Errorf("event %q, want a crash", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an unasked exit was not reported")
	}
	if d.unexpected.Load() != 1 || len(d.crashes()) != 1 {
		t.Errorf("%d unexpected exits, crashes %q; want 1", d.unexpected.Load(), d.crashes())
	}

	d.stop(5 * time.Second)
	d.mu.Lock()
	last := d.cur
	d.mu.Unlock()
	select {
	case <-last.done:
	default:
		t.Error("the driver runs after stop")
	}
	select {
	case e := <-events:
		t.Errorf("event %q after stop", e)
	default:
	}
}
