// Package reaper collects the zombies the node plugin inherits without
// stealing the exit status of the processes it waits for itself.
//
// mount.efs starts a TLS tunnel (stunnel or efs-proxy) and exits; the tunnel
// is re-parented to the nearest subreaper, which is the driver: as PID 1 of
// its container, or because Enable makes it a child subreaper
// (PR_SET_CHILD_SUBREAPER) when it is not. When efs-utils' watchdog kills a
// tunnel whose mount is gone, the tunnel becomes the driver's zombie; nobody
// else can reap it.
//
// The driver also waits for children of its own through os/exec (mount, the
// watchdog). Reaping one of those would make its exec.Cmd.Wait fail with
// ECHILD and lose its exit status. The race-free scheme:
//
//   - Every child the process starts goes through Start (or Run), which
//     holds the registry's read lock across exec.Cmd.Start and records the
//     PID before releasing it, and forgets the PID only after Wait returns.
//   - Reap holds the write lock while it lists the process's children
//     (/proc/self/task/*/children) and reaps, with wait4(pid, WNOHANG), only
//     those not in the registry.
//
// While Reap runs, no child can be started, so every child of the process
// that is not registered was not started through Start: it is an orphan
// re-parented here (or a child of code that broke the rule above). A
// registered PID cannot be reused while registered: its process is a child
// of ours until Wait reaps it, and the kernel does not reuse the PID of an
// unreaped process.
package reaper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

var (
	mu sync.RWMutex // read: starting a child; write: reaping
	// waiting counts registrations per PID: a PID is counted twice for a
	// moment when Wait has reaped it and a new child got it before the
	// first registration is dropped.
	waiting = map[int]int{} // guarded by regMu
	regMu   sync.Mutex
)

// Start starts cmd with its PID registered, so that Reap leaves it to the
// caller, and returns the function that waits for it (cmd.Wait) and then
// forgets the PID. The caller must call wait exactly once.
func Start(cmd *exec.Cmd) (wait func() error, err error) {
	mu.RLock()
	err = cmd.Start()
	if err == nil {
		regMu.Lock()
		waiting[cmd.Process.Pid]++
		regMu.Unlock()
	}
	mu.RUnlock()
	if err != nil {
		return nil, err
	}
	pid := cmd.Process.Pid
	return func() error {
		err := cmd.Wait()
		regMu.Lock()
		if waiting[pid]--; waiting[pid] <= 0 {
			delete(waiting, pid)
		}
		regMu.Unlock()
		return err
	}, nil
}

// Run is Start followed by the wait: cmd.Run for a registered child.
func Run(cmd *exec.Cmd) error {
	wait, err := Start(cmd)
	if err != nil {
		return err
	}
	return wait()
}

// CombinedOutput is cmd.CombinedOutput for a registered child.
func CombinedOutput(cmd *exec.Cmd) ([]byte, error) {
	if cmd.Stdout != nil || cmd.Stderr != nil {
		return nil, errors.New("reaper: Stdout or Stderr already set")
	}
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := Run(cmd)
	return b.Bytes(), err
}

// Registered reports whether pid is a child being waited for through Start.
func Registered(pid int) bool {
	regMu.Lock()
	defer regMu.Unlock()
	return waiting[pid] > 0
}

// Reaped is one collected zombie.
type Reaped struct {
	PID    int
	Status unix.WaitStatus
}

// Reap collects every zombie child that is not registered and returns them.
// Children still running, and registered ones, are left alone.
func Reap() ([]Reaped, error) {
	mu.Lock()
	defer mu.Unlock()
	kids, err := Children()
	if err != nil {
		return nil, err
	}
	var out []Reaped
	for _, pid := range kids {
		if Registered(pid) {
			continue
		}
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.ECHILD), err == nil && got == 0:
			// Gone already, or still running.
		case err != nil:
			return out, fmt.Errorf("wait4 %d: %w", pid, err)
		default:
			out = append(out, Reaped{PID: got, Status: ws})
		}
	}
	return out, nil
}

// Children lists the PIDs of the process's children (of all its threads).
// It is a snapshot: a child that forks or exits meanwhile may be missed, and
// is found by the next call.
func Children() ([]int, error) {
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return childrenByScan()
	}
	var out []int
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited
		}
		for _, s := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(s); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out, nil
}

// childrenByScan is Children for kernels without CONFIG_PROC_CHILDREN.
func childrenByScan() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, _, err := parentAndState(pid); err == nil && pp == self {
			out = append(out, pid)
		}
	}
	return out, nil
}

// parentAndState reads the PPid and the state letter of pid from /proc.
func parentAndState(pid int) (ppid int, state byte, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// pid (comm) S ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0][0], err
}

// Zombies counts the process's children that are zombies now (registered
// or not): for tests and diagnostics.
func Zombies() (int, error) {
	kids, err := Children()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, pid := range kids {
		if _, st, err := parentAndState(pid); err == nil && st == 'Z' {
			n++
		}
	}
	return n, nil
}

// Enable makes the process the reaper of its descendants' orphans: PID 1
// is already; any other process becomes a child subreaper. Call it only
// when a Loop runs for the life of the process: unreaped orphans would
// accumulate otherwise.
func Enable() error {
	if os.Getpid() == 1 {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	return nil
}

// Loop reaps on every SIGCHLD, and every interval in case a signal was
// coalesced with one that came while Reap ran, until ctx ends. reaped, if
// not nil, is called with each collected zombie.
func Loop(ctx context.Context, interval time.Duration, log *slog.Logger, reaped func(Reaped)) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if interval <= 0 {
		interval = 30 * time.Second
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGCHLD)
	defer signal.Stop(sig)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		got, err := Reap()
		if err != nil {
			log.Warn("reaping children", slog.String("error", err.Error()))
		}
		for _, r := range got {
			log.Debug("reaped orphan", slog.Int("pid", r.PID), slog.Int("status", r.Status.ExitStatus()),
				slog.Bool("signaled", r.Status.Signaled()))
			if reaped != nil {
				reaped(r)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-sig:
		case <-t.C:
		}
	}
}
