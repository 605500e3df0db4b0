package reaper

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// awaitExit blocks until pid has exited (is a zombie or gone), without
// reaping it: a pidfd becomes readable when its process exits.
func awaitExit(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n != 1 {
			t.Fatalf("poll pidfd: %d, %v", n, err)
		}
		return
	}
}

func enable(t *testing.T) {
	t.Helper()
	if err := Enable(); err != nil {
		t.Skip(err)
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// TestReapLeavesRegisteredChildren: a child started through Start that has
// exited is a zombie Reap sees, but leaves: its Wait still gets the status.
func TestReapLeavesRegisteredChildren(t *testing.T) {
	enable(t)
	cmd := exec.Command("sh", "-c", "exit 3")
	wait, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	awaitExit(t, cmd.Process.Pid)
	got, err := Reap()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range got {
		if r.PID == cmd.Process.Pid {
			t.Fatalf("Reap collected registered child %d", r.PID)
		}
	}
	if err := wait(); exitCode(err) != 3 {
		t.Fatalf("Wait: %v, want exit status 3", err)
	}
	if Registered(cmd.Process.Pid) {
		t.Error("PID still registered after wait")
	}
}

// TestReapStealsUnregisteredChildren shows what the registry prevents: a
// child started behind its back is reaped, and its own Wait fails.
func TestReapStealsUnregisteredChildren(t *testing.T) {
	enable(t)
	cmd := exec.Command("sh", "-c", "exit 3")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	awaitExit(t, cmd.Process.Pid)
	got, err := Reap()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].PID != cmd.Process.Pid || got[0].Status.ExitStatus() != 3 {
		t.Fatalf("Reap: %+v, want child %d with status 3", got, cmd.Process.Pid)
	}
	if err := cmd.Wait(); err == nil || exitCode(err) == 3 {
		t.Fatalf("Wait after the reap: %v, want an error without the status", err)
	}
}

// TestReapCollectsOrphans: a grandchild whose parent exited is re-parented
// to this process (a subreaper) and reaped once it exits.
func TestReapCollectsOrphans(t *testing.T) {
	enable(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The grandchild waits for the pipe to close, then exits 5.
	cmd := exec.Command("sh", "-c", `sh -c 'read x <&3; exit 5' >/dev/null 2>&1 & echo $!`)
	cmd.ExtraFiles = []*os.File{r}
	out, err := CombinedOutput(cmd)
	if err != nil {
		t.Fatal(err, string(out))
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	if pp, _, err := parentAndState(orphan); err != nil || pp != os.Getpid() {
		t.Fatalf("orphan %d: parent %d, %v; want this process %d", orphan, pp, err, os.Getpid())
	}
	w.Close()
	awaitExit(t, orphan)
	if n, _ := Zombies(); n == 0 {
		t.Fatal("the exited orphan is not a zombie child")
	}
	got, err := Reap()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].PID != orphan || got[0].Status.ExitStatus() != 5 {
		t.Fatalf("Reap: %+v, want orphan %d with status 5", got, orphan)
	}
	if n, _ := Zombies(); n != 0 {
		t.Fatalf("%d zombies after Reap", n)
	}
}

// TestLoopAndRegisteredChildrenConcurrently runs the reaping loop while
// commands start, exit and are waited for in parallel, with orphans exiting
// too: every command gets its own exit status, and no zombie remains.
func TestLoopAndRegisteredChildrenConcurrently(t *testing.T) {
	enable(t)
	ctx, cancel := context.WithCancel(context.Background())
	var loop sync.WaitGroup
	var mu sync.Mutex
	reaped := 0
	loop.Go(func() {
		Loop(ctx, 0, nil, func(Reaped) { mu.Lock(); reaped++; mu.Unlock() })
	})
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			// Each command leaves an orphan that exits at once.
			code := i%100 + 1
			cmd := exec.Command("sh", "-c", "(exit 0) & exit "+strconv.Itoa(code))
			if err := Run(cmd); exitCode(err) != code {
				errs <- errors.New("command " + strconv.Itoa(i) + ": " + errString(err) + ", want exit status " + strconv.Itoa(code))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	cancel()
	loop.Wait()
	// Orphans exiting after the loop's last pass are collected here.
	kids, err := Children()
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range kids {
		awaitExit(t, pid)
	}
	if _, err := Reap(); err != nil {
		t.Fatal(err)
	}
	if z, _ := Zombies(); z != 0 {
		t.Errorf("%d zombies left", z)
	}
	t.Logf("loop reaped %d orphans", reaped)
}

func errString(err error) string {
	if err == nil {
		return "success"
	}
	return err.Error()
}
